// Fuzz target: the L2 block file's chunk trailer (tiercache/internal/chunk_trailer.h): the range
// arithmetic for any (block length, offset, length) and the check of chunks against trailer
// entries read from a damaged file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "tiercache/internal/chunk_trailer.h"

using namespace tierfs::tiercache_internal;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 24) return 0;
  uint64_t block_len, offset, length;
  std::memcpy(&block_len, data, 8);
  std::memcpy(&offset, data + 8, 8);
  std::memcpy(&length, data + 16, 8);
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data) + 24, size - 24);
  // Any range: either refused, or chunks inside the block and the trailer right after it.
  if (auto cs = ChunksFor(block_len, offset, length); cs.ok()) {
    if (cs->first > cs->last || cs->data_begin > offset || cs->data_end > block_len ||
        cs->data_end < offset + length || cs->sums_begin < block_len ||
        cs->sums_bytes != (cs->last - cs->first + 1) * kChunkSumBytes) {
      std::abort();
    }
  }
  // The file as a block of `len` bytes (len from the input, at most what is there) and the rest
  // as its trailer: VerifyChunks must never read out of bounds, and a trailer built from the
  // bytes must verify.
  const size_t len = file.empty() ? 0 : static_cast<size_t>(block_len % (file.size() + 1));
  const auto bytes = file.first(len), trailer = file.subspan(len);
  (void)VerifyChunks(bytes, trailer);
  if (!bytes.empty() && !VerifyChunks(bytes, ChunkTrailer(bytes))) std::abort();
  if (auto cs = ChunksFor(len, offset % (len + 1), length % (len + 1)); cs.ok()) {
    const auto part = bytes.subspan(cs->data_begin, cs->data_end - cs->data_begin);
    const auto all = ChunkTrailer(bytes);
    const auto sums = std::span<const std::byte>(all).subspan(cs->sums_begin - len, cs->sums_bytes);
    if (!VerifyChunks(part, sums)) std::abort();
  }
  return 0;
}
