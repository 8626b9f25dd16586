#include "tiercache/internal/l3_object.h"

#include <cstring>
#include <string>

#include "base/coding.h"
#include "tiercache/tier.h"

namespace tierfs::tiercache_internal {
namespace {

constexpr char kMagic[4] = {'T', 'F', 'L', '3'};

HmacSha256Digest ObjectMac(std::span<const std::byte> mac_key, std::span<const std::byte> fixed,
                           std::span<const std::byte> data) {
  return HmacSha256(mac_key, {fixed, data});
}

}  // namespace

void EncodeL3Object(const BlockKey& key, std::span<const std::byte> data, uint64_t stored_ns,
                    std::span<const std::byte> mac_key, std::vector<std::byte>* out) {
  const bool mac = !mac_key.empty();
  const size_t header = mac ? kL3MacHeaderBytes : kL3FixedHeaderBytes;
  out->resize(header + data.size());
  std::byte* h = out->data();
  std::memcpy(h, kMagic, 4);
  EncodeFixed32(h + 4, mac ? kL3VersionMac : kL3VersionPlain);
  EncodeFixed64(h + 8, data.size());
  EncodeFixed64(h + 16, BlockChecksum(data));
  EncodeFixed64(h + 24, stored_ns);
  std::memcpy(h + 32, key.data(), key.size());
  if (mac) {
    const HmacSha256Digest d = ObjectMac(mac_key, {h, kL3FixedHeaderBytes}, data);
    std::memcpy(h + kL3FixedHeaderBytes, d.data(), d.size());
  }
  if (!data.empty()) std::memcpy(h + header, data.data(), data.size());
}

Result<L3Header> ParseL3Header(std::span<const std::byte> prefix) {
  if (prefix.size() < kL3FixedHeaderBytes) return Status::Corruption("shorter than its header");
  const std::byte* h = prefix.data();
  if (std::memcmp(h, kMagic, 4) != 0) return Status::Corruption("bad magic");
  L3Header out;
  out.version = DecodeFixed32(h + 4);
  if (out.version == kL3VersionPlain) {
    out.header_bytes = kL3FixedHeaderBytes;
  } else if (out.version == kL3VersionMac) {
    out.header_bytes = kL3MacHeaderBytes;
  } else {
    return Status::Corruption("unknown format version " + std::to_string(out.version));
  }
  out.length = DecodeFixed64(h + 8);
  out.checksum = DecodeFixed64(h + 16);
  out.stored_ns = DecodeFixed64(h + 24);
  std::memcpy(out.key.data(), h + 32, out.key.size());
  return out;
}

Result<L3Header> ParseL3Object(std::span<const std::byte> object,
                               std::span<const std::byte> mac_key) {
  TIERFS_ASSIGN_OR_RETURN(L3Header h, ParseL3Header(object));
  if (object.size() < h.header_bytes) return Status::Corruption("shorter than its header");
  const std::span<const std::byte> data = object.subspan(h.header_bytes);
  if (h.length != data.size()) {
    return Status::Corruption("length " + std::to_string(h.length) + " but " +
                              std::to_string(data.size()) + " bytes of data");
  }
  if (BlockChecksum(data) != h.checksum) return Status::Corruption("checksum mismatch");
  if (!mac_key.empty()) {
    if (h.version != kL3VersionMac) {
      return Status::Corruption("no MAC (written without a key), but cache.l3_key_file is set");
    }
    const HmacSha256Digest want = ObjectMac(mac_key, object.first(kL3FixedHeaderBytes), data);
    if (!DigestEquals(want, object.subspan(kL3FixedHeaderBytes, kHmacSha256Bytes))) {
      return Status::Corruption("MAC mismatch (written with another key, or altered)");
    }
  }
  return h;
}

}  // namespace tierfs::tiercache_internal
