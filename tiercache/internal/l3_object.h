// The L3 object format (tiercache/FORMAT.md, "L3: the regional tier"): serializing a block into
// one object and parsing/verifying what a GET returned. Pure functions over bytes, shared by the
// L3 tier, its garbage collector and the fuzz target (tests/fuzz/l3_header_fuzz.cc).
//
//   version 1: header(48) = magic "TFL3", u32 1, u64 length, u64 checksum, u64 stored_ns,
//              key(16); then the bytes. Written without a MAC key.
//   version 2: the same 48 bytes with u32 2, then HMAC-SHA256(mac key, header[0,48) || bytes)
//              (32); then the bytes. Written when cache.l3_key_file is set.
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"
#include "blobclient/hmac.h"
#include "metastore/meta_store.h"

namespace tierfs::tiercache_internal {

inline constexpr uint32_t kL3VersionPlain = 1;  // no MAC
inline constexpr uint32_t kL3VersionMac = 2;    // HMAC-SHA256 after the fixed fields
inline constexpr size_t kL3FixedHeaderBytes = 48;
inline constexpr size_t kL3MacHeaderBytes = kL3FixedHeaderBytes + kHmacSha256Bytes;  // 80
inline constexpr size_t kL3MaxHeaderBytes = kL3MacHeaderBytes;

struct L3Header {
  uint32_t version = 0;
  size_t header_bytes = 0;  // 48 (v1) or 80 (v2): the block's bytes start here
  uint64_t length = 0;      // bytes after the header, as the header says
  uint64_t checksum = 0;    // XXH3-64 of them (BlockChecksum)
  uint64_t stored_ns = 0;   // writer's wall clock at upload
  BlockKey key{};           // the block the object claims to hold
};

// Writes the object for block `key` holding `data` into *out (resized; its capacity is reused).
// With a non-empty `mac_key` the object is version 2 and carries the MAC, else version 1.
void EncodeL3Object(const BlockKey& key, std::span<const std::byte> data, uint64_t stored_ns,
                    std::span<const std::byte> mac_key, std::vector<std::byte>* out);

// Parses the fixed fields at the start of an object (`prefix` may be just its first 48 bytes,
// as `tierfs l3 gc` reads them). Corruption (with the reason) for a wrong magic, an unknown
// version or fewer bytes than the header. Checks nothing about the bytes that follow.
Result<L3Header> ParseL3Header(std::span<const std::byte> prefix);

// Parses and verifies a whole object as a GET returned it: the header, `length` equal to the
// bytes that follow, the checksum, and, with a non-empty `mac_key`, the MAC (a version-1 object
// has none and is refused then). Without a key a version-2 object is accepted on its checksum
// (its MAC cannot be checked). Corruption naming the first check that failed. Does not compare
// the key with the block that was asked for: the caller does.
Result<L3Header> ParseL3Object(std::span<const std::byte> object,
                               std::span<const std::byte> mac_key);

}  // namespace tierfs::tiercache_internal
