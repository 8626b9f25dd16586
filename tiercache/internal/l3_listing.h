// The shared-listing object (tiercache/FORMAT.md, "Shared listings"): one directory's listing
// stored in the L3 bucket by the host that took it from the origin, read by the others. The
// object uses the L3 object framing of blocks (l3_object.h: magic, version, length, XXH3-64
// checksum, stored-at time, key, and with a key an HMAC-SHA256); its key field is ListingKey()
// and its bytes are the listing payload below, zstd-compressed. Pure functions over bytes, shared
// by the L3 tier (remote_tier.cc) and the tests.
//
//   payload = "TFLS", u32 1 (payload version), u32 1 (codec: zstd), u32 0, i64 listed_at_ns,
//             u64 entry_count, u64 raw_length, u32 source_len, source, u32 dir_len, dir,
//             zstd frame of raw_length bytes: entry_count records of
//             u8 type (1 file, 2 dir), u16 name_len, name, u64 size, i64 mtime_ns, u16 etag_len,
//             etag.
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "metastore/meta_store.h"
#include "tiercache/listing_share.h"

namespace tierfs::tiercache_internal {

inline constexpr uint32_t kListingPayloadVersion = 1;
inline constexpr uint32_t kListingCodecZstd = 1;
// Bounds of what is stored and read: the whole object, and the entry records before compression
// (about 70 bytes per entry: some 3.5 million entries).
inline constexpr uint64_t kMaxListingObjectBytes = 64ULL << 20;
inline constexpr uint64_t kMaxListingRawBytes = 256ULL << 20;
// Object names: "listings/<32 hex>" beside "blocks/<32 hex>".
inline constexpr std::string_view kListingsDir = "listings/";

// The key of the listing of directory `dir` (catalog path, "" for the root) of source `source`
// (BlobStore::Describe()): MakeBlockKey(source, dir, "tierfs-listing", 0, 0). Block size 0 names
// no block (blocks have a positive size), so a listing key is never a block key.
BlockKey ListingKey(std::string_view source, std::string_view dir);
// "listings/" + BlockKeyHex(ListingKey(source, dir)).
std::string ListingObjectName(std::string_view source, std::string_view dir);

// Writes the whole object (header + payload) into *out. InvalidArgument when the listing is too
// large to share (kMaxListingRawBytes, kMaxListingObjectBytes) or an entry cannot be encoded.
Status EncodeL3Listing(std::string_view source, std::string_view dir, const SharedListing& listing,
                       uint64_t stored_ns, std::span<const std::byte> mac_key,
                       std::vector<std::byte>* out);

// Parses and verifies a whole object as a GET returned it: the L3 framing (ParseL3Object: magic,
// version, length, checksum, MAC when `mac_key` is set), the key (ListingKey(source, dir)), the
// payload's magic, version and codec, the source and directory it names, the decompressed length
// and every entry (a valid name, no '/', '.', '..' or control character, at most 255 bytes, names
// strictly ascending, a known type). Corruption naming the first check that failed. *stored_ns:
// the header's stored-at time.
Result<SharedListing> DecodeL3Listing(std::span<const std::byte> object, std::string_view source,
                                      std::string_view dir, std::span<const std::byte> mac_key,
                                      uint64_t* stored_ns);

}  // namespace tierfs::tiercache_internal
