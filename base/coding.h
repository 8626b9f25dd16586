// Fixed-width little-endian integers, the way every format tierfs writes stores them
// (tiercache/FORMAT.md: block keys, L3 objects, manifests, chunk trailers; metastore/FORMAT.md):
// lowest byte first, whatever the host's byte order (leveldb's util/coding.h).
//
//   std::string rec;
//   PutFixed64(&rec, size);                        // appends 8 bytes
//   const uint64_t back = DecodeFixed64(rec.data());
//
// Pure functions; thread-safe. The Decode functions read exactly 4 or 8 bytes at `src`: the
// caller checks the length first.
#pragma once

#include <cstdint>
#include <string>

namespace tierfs {

inline void EncodeFixed32(void* dst, uint32_t v) {
  auto* p = static_cast<unsigned char*>(dst);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

inline void EncodeFixed64(void* dst, uint64_t v) {
  auto* p = static_cast<unsigned char*>(dst);
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

inline uint32_t DecodeFixed32(const void* src) {
  const auto* p = static_cast<const unsigned char*>(src);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

inline uint64_t DecodeFixed64(const void* src) {
  const auto* p = static_cast<const unsigned char*>(src);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

inline void PutFixed32(std::string* out, uint32_t v) {
  char b[4];
  EncodeFixed32(b, v);
  out->append(b, sizeof(b));
}

inline void PutFixed64(std::string* out, uint64_t v) {
  char b[8];
  EncodeFixed64(b, v);
  out->append(b, sizeof(b));
}

}  // namespace tierfs
