// SparseReader: projected reads (TieredCacheOptions::sparse_read_max). A small read of a large
// object whose block no tier above the origin holds and no one fetches whole is served from
// sparse entries, one per 4 KiB chunk (kSparseChunkBytes: the kernel's page) of a block, stored
// in the host tiers under MakeChunkKey(block, chunk, its length): a whole page, or up to the
// block's end. What the entries lack is fetched with one origin request
// (OriginFetcher::FetchRange) from the read's first missing page to its end rounded up to a page.
// A read that would make three quarters of the block's chunks present takes the whole-block path
// instead (dense completion), which fetches only the gaps between the entries
// (OriginFetcher::FillGaps).
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
  // blocks of at least kMinBlockBytes, not a small object read from its start (fetched whole;
  // ReadHint), at most max_read bytes and under half of the block.
  bool Eligible(const ObjectRef& obj, uint64_t length, uint64_t block_len,
                ReadHint hint = ReadHint::kWhole) const {
    return max_read_ > 0 && space_->block_size() >= kMinBlockBytes &&
           (obj.info.size > small_object_bytes_ || hint == ReadHint::kRanges) &&
           length <= max_read_ && 2 * length < block_len;
  }

  // A read of `want` bytes of block `index` is served by Read: Eligible, or larger (up to half of
  // the block) in a block that has sparse entries already. Such a read is the kernel's readahead
  // next to a projected read (or a reader of larger ranges among projected ones): it fetches what
  // it reads, and the block is completed by dense completion, not by one read.
  bool Takes(const ObjectRef& obj, uint64_t index, uint64_t want, uint64_t block_len,
             ReadHint hint) const;

  // The host tiers hold sparse entries of every chunk of bytes [in_block, in_block + length) of
  // block `index` of `obj`: a projected read of them is served from them, without the network
  // (also while the block is being fetched whole).
  bool HoldsEntries(const ObjectRef& obj, uint64_t index, uint64_t in_block, uint64_t length) const;

  // Bytes [in_block, in_block + want) of block `index` by a projected read: from the sparse
  // entries when they hold them all. nullopt: the read takes the whole block instead (a host tier
  // holds it; or, for bytes the entries lack, it is being fetched whole, a shared tier holds it,
  // or dense completion). Errors: the origin's (or its recent failure's).
  Result<std::optional<BlockSlice>> Read(const ObjectRef& obj, uint64_t index, uint64_t in_block,
                                         uint64_t want, const CancelToken* token);

 private:
  Served FindChunk(const ObjectRef& obj, uint64_t index, const BlockKey& key, uint64_t block_len,
                   uint64_t c);
  bool Dense(const BlockKey& key, uint64_t block_len, uint64_t missing, uint64_t c1) const;

  // Smaller blocks are read whole (a projected read would save little).
  static constexpr uint64_t kMinBlockBytes = 128 << 10;

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
