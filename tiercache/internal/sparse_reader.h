// SparseReader: projected reads (TieredCacheOptions::sparse_read_max). A small read of a large
// object whose block no tier above the origin holds and no one fetches whole is served from
// sparse entries, the fetched prefix of one 32 KiB chunk (kSparseChunkBytes) of a block, stored
// in the host tiers under MakeChunkKey(block, chunk, its length): a whole chunk, or up to the
// 4 KiB page where the read ended (or the block's end). What the entries lack is fetched with
// one origin request (OriginFetcher::FetchRange) from the first missing chunk's start to the
// read's end rounded up to a page. A read that would make three quarters of the block's chunks
// present takes the whole-block path instead (dense completion).
//
// Thread-safe; no external synchronization needed (no state of its own). `host`, `shared`,
// `fetcher`, `space` and `counters` are not owned and outlive this object.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/cancel.h"
#include "base/result.h"
#include "tiercache/internal/block_space.h"
#include "tiercache/internal/cache_stats.h"
#include "tiercache/internal/host_tiers.h"
#include "tiercache/internal/origin_fetcher.h"
#include "tiercache/internal/shared_tiers.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

class SparseReader {
 public:
  // `max_read`: sparse_read_max (0: off); `small_object_bytes`: objects fetched whole, never
  // projected.
  SparseReader(uint64_t max_read, uint64_t small_object_bytes, HostTiers* host, SharedTiers* shared,
               OriginFetcher* fetcher, const BlockSpace* space, EngineCounters* counters)
      : max_read_(max_read),
        small_object_bytes_(small_object_bytes),
        host_(host),
        shared_(shared),
        fetcher_(fetcher),
        space_(space),
        counters_(counters) {}
  SparseReader(const SparseReader&) = delete;
  SparseReader& operator=(const SparseReader&) = delete;

  // A read of `length` bytes within a block of `block_len` bytes of `obj` may be projected: on,
  // blocks of at least four chunks (else a chunk is most of a block), not a small object
  // (fetched whole), at most max_read bytes and under half of the block.
  bool Eligible(const ObjectRef& obj, uint64_t length, uint64_t block_len) const {
    return max_read_ > 0 && space_->block_size() >= 4 * kSparseChunkBytes &&
           obj.info.size > small_object_bytes_ && length <= max_read_ && 2 * length < block_len;
  }

  // Bytes [in_block, in_block + want) of block `index` by a projected read. nullopt: the read
  // takes the whole block instead (a tier above the origin holds it or it is being fetched
  // whole, or dense completion). Errors: the origin's (or its recent failure's).
  Result<std::optional<BlockSlice>> Read(const ObjectRef& obj, uint64_t index, uint64_t in_block,
                                         uint64_t want, const CancelToken* token);

 private:
  std::optional<std::pair<size_t, uint64_t>> ChunkHolder(const BlockKey& key, uint64_t block_len,
                                                         uint64_t c, uint64_t need) const;
  Served FindChunk(const ObjectRef& obj, uint64_t index, const BlockKey& key, uint64_t block_len,
                   uint64_t c, uint64_t need);
  bool Dense(const BlockKey& key, uint64_t block_len, uint64_t missing, uint64_t c1) const;

  // Constant after construction.
  const uint64_t max_read_;
  const uint64_t small_object_bytes_;
  HostTiers* const host_;
  SharedTiers* const shared_;
  OriginFetcher* const fetcher_;
  const BlockSpace* const space_;
  EngineCounters* const counters_;
};

}  // namespace tierfs::tiercache_internal
