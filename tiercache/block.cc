// Block storage and block naming (tier.h). The byte layout hashed by MakeBlockKey is part of the
// on-flash and L3 format: see tiercache/FORMAT.md before changing anything here.
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "tiercache/tier.h"

namespace tierfs {

void AppendStoreStats(const BlobStoreStats& s, std::vector<std::pair<std::string, uint64_t>>* out) {
  out->emplace_back("retries", s.retries);
  out->emplace_back("hedges", s.hedges_issued);
  out->emplace_back("hedge_wins", s.hedges_won);
  out->emplace_back("concurrency_limit", s.concurrency_limit);
  out->emplace_back("throttled", s.concurrency_decreases);
  out->emplace_back("ttfb_p95_us", s.ttfb_p95_us);
  out->emplace_back("parallel_reads", s.parallel_reads);
}
namespace {

void AppendU64LE(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 8);
}

void AppendField(std::string* out, std::string_view field) {
  AppendU64LE(out, field.size());
  out->append(field);
}

}  // namespace

std::shared_ptr<Block> Block::Allocate(size_t capacity) {
  auto b = std::make_shared<Block>();
  // make_unique_for_overwrite: no zero-fill; the fetcher overwrites every byte it publishes.
  b->data_ = std::make_unique_for_overwrite<std::byte[]>(capacity == 0 ? 1 : capacity);
  b->capacity_ = capacity;
  b->size_ = 0;
  return b;
}

BlockKey MakeBlockKey(std::string_view source, std::string_view key, std::string_view etag,
                      uint64_t block_size, uint64_t block_index) {
  // Every variable-length field is prefixed with its length (u64 LE), so no two distinct
  // tuples serialise to the same bytes ("ab"+"c" vs "a"+"bc").
  std::string buf;
  buf.reserve(48 + source.size() + key.size() + etag.size());
  AppendField(&buf, source);
  AppendField(&buf, key);
  AppendField(&buf, etag);
  AppendU64LE(&buf, block_size);
  AppendU64LE(&buf, block_index);
  XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);  // big-endian high64 then low64
  BlockKey out;
  static_assert(sizeof(c.digest) == out.size());
  std::memcpy(out.data(), c.digest, out.size());
  return out;
}

std::string BlockKeyHex(const BlockKey& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(key.size() * 2, '0');
  for (size_t i = 0; i < key.size(); ++i) {
    s[2 * i] = kHex[key[i] >> 4];
    s[2 * i + 1] = kHex[key[i] & 0xf];
  }
  return s;
}

uint64_t BlockChecksum(std::span<const std::byte> data) {
  return XXH3_64bits(data.data(), data.size());
}

}  // namespace tierfs
