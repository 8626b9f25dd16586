#include "tiercache/internal/chunk_trailer.h"

#include <algorithm>

#include "base/coding.h"
#include "tiercache/tier.h"

namespace tierfs::tiercache_internal {
namespace {

std::span<const std::byte> Chunk(std::span<const std::byte> data, uint64_t c) {
  const uint64_t from = c * kChunkBytes;
  return data.subspan(from, std::min<uint64_t>(kChunkBytes, data.size() - from));
}

}  // namespace

std::vector<std::byte> ChunkTrailer(std::span<const std::byte> data) {
  std::vector<std::byte> out(NumChunks(data.size()) * kChunkSumBytes);
  for (uint64_t c = 0; c < NumChunks(data.size()); ++c) {
    const uint64_t sum = BlockChecksum(Chunk(data, c));
    EncodeFixed64(&out[c * kChunkSumBytes], sum);
  }
  return out;
}

Result<ChunkSpan> ChunksFor(uint64_t block_len, uint64_t offset, uint64_t length) {
  // L2 records a block's length as u32; past that the file offsets below could overflow.
  if (block_len > UINT32_MAX) return Status::InvalidArgument("block longer than 4 GiB");
  if (length == 0 || offset >= block_len || length > block_len - offset) {
    return Status::InvalidArgument("range outside the block");
  }
  ChunkSpan s;
  s.first = offset / kChunkBytes;
  s.last = (offset + length - 1) / kChunkBytes;
  s.data_begin = s.first * kChunkBytes;
  s.data_end = std::min<uint64_t>(block_len, (s.last + 1) * kChunkBytes);
  s.sums_begin = block_len + s.first * kChunkSumBytes;
  s.sums_bytes = (s.last - s.first + 1) * kChunkSumBytes;
  return s;
}

bool VerifyChunks(std::span<const std::byte> data, std::span<const std::byte> sums) {
  if (data.empty() || sums.size() != NumChunks(data.size()) * kChunkSumBytes) return false;
  for (uint64_t c = 0; c < NumChunks(data.size()); ++c) {
    if (BlockChecksum(Chunk(data, c)) != DecodeFixed64(sums.data() + c * kChunkSumBytes))
      return false;
  }
  return true;
}

}  // namespace tierfs::tiercache_internal
