// The L2 block file's chunk trailer (tiercache/FORMAT.md, "L2: the flash tier"): the XXH3-64 of
// each 32 KiB chunk of the block, u64 little-endian, after the block's bytes. Building it, finding
// the chunks a byte range covers, and checking chunks read back against their trailer entries.
// Pure functions over bytes, shared by the L2 tier and the fuzz target
// (tests/fuzz/l2_trailer_fuzz.cc).
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"

namespace tierfs::tiercache_internal {

inline constexpr uint64_t kChunkBytes = 32 << 10;
inline constexpr uint64_t kChunkSumBytes = 8;

inline uint64_t NumChunks(uint64_t length) {
  return length / kChunkBytes + (length % kChunkBytes != 0 ? 1 : 0);
}

// The trailer of a block holding `data`: NumChunks(data.size()) * 8 bytes.
std::vector<std::byte> ChunkTrailer(std::span<const std::byte> data);

// The chunks covering bytes [offset, offset + length) of a block of `block_len` bytes, and where
// they and their trailer entries are in the block file.
struct ChunkSpan {
  uint64_t first = 0, last = 0;  // chunk indexes, inclusive
  uint64_t data_begin = 0;       // file offset of chunk `first`
  uint64_t data_end = 0;         // file offset just past chunk `last` (≤ block_len)
  uint64_t sums_begin = 0;       // file offset of chunk `first`'s trailer entry
  uint64_t sums_bytes = 0;       // (last - first + 1) * 8
};
// InvalidArgument for an empty range, one not inside the block, or a block longer than
// UINT32_MAX bytes (L2's limit; overflow-safe: the arguments may be anything).
Result<ChunkSpan> ChunksFor(uint64_t block_len, uint64_t offset, uint64_t length);

// Whether `data` (whole chunks as read from the file, the last one possibly short) matches
// `sums` (their trailer entries, 8 bytes each). False when the sizes do not correspond.
bool VerifyChunks(std::span<const std::byte> data, std::span<const std::byte> sums);

}  // namespace tierfs::tiercache_internal
