// Readahead: the cache's prefetch pool ("tierfs-pf-N"). Prefetch() enqueues tasks of at most one
// run of adjacent blocks that the first tier lacks on a bounded queue (in blocks); a full queue
// drops tasks (prefetch is advisory). Demand reads never pass through that queue; a prefetch in
// flight for a block a demand read needs is simply joined through the fetcher's single-flight.
// A worker brings each block of its task to the first tier: a block in L2 is read from there
// (readahead from flash ahead of the reader; with file slices the tier is only asked to have it
// ready), blocks no host tier holds are fetched as one run by the fetcher (OriginFetcher::
// FetchRun: the shared tier's ReadMany, then one origin request per stretch of adjacent blocks,
// within the readahead budget).
//
// Thread-safe; no external synchronization needed. submit_mu_ is held only while tasks are
// queued (never across a fetch); the pool's lock is below it. `fetcher`, `host`, `space`,
// `stats` and `counters` are not owned and outlive this object. REQUIRES: RequestStop() and
// Join() before destruction.
#pragma once

#include <cstdint>
#include <memory>
#include <stop_token>

#include "base/mutex.h"
#include "base/thread_pool.h"
#include "tiercache/internal/block_space.h"
#include "tiercache/internal/cache_stats.h"
#include "tiercache/internal/host_tiers.h"
#include "tiercache/internal/origin_fetcher.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

class Readahead {
 public:
  // `threads` workers; `run_blocks`: blocks of one task (one run); `queue_limit`: blocks queued
  // at most; `file_slices`: L2 blocks are served from their files, so readahead leaves them in L2.
  Readahead(int threads, uint64_t run_blocks, uint64_t queue_limit, bool file_slices,
            OriginFetcher* fetcher, HostTiers* host, const BlockSpace* space, CacheStats* stats,
            EngineCounters* counters);
  Readahead(const Readahead&) = delete;
  Readahead& operator=(const Readahead&) = delete;

  // Drops the queued tasks and asks the workers to stop after the block they are on; Join()
  // then waits for them.
  void RequestStop() { pool_.RequestStop(ThreadPool::kDiscard); }
  void Join() { pool_.Join(); }

  // TieredCache::Prefetch: returns the number of blocks dropped.
  uint64_t Prefetch(const ObjectRef& obj, uint64_t first_block, uint64_t count, BlockFill fill)
      EXCLUDES(submit_mu_);
  // Blocks queued for readahead now.
  uint64_t queued_blocks() const { return pool_.queued_cost(); }

 private:
  struct Task {
    std::shared_ptr<const ObjectRef> obj;
    uint64_t first = 0;
    uint64_t count = 0;
    uint64_t seq = 0;  // queue order: runs waiting for room in flight go in this order
    BlockFill fill = BlockFill::kWhole;
  };

  void RunTask(const Task& task, const std::stop_token& st);

  // Constant after construction.
  const uint64_t run_blocks_;
  const bool file_slices_;
  OriginFetcher* const fetcher_;
  HostTiers* const host_;
  const BlockSpace* const space_;
  CacheStats* const stats_;
  EngineCounters* const counters_;

  // Tasks get their sequence numbers in the order they are queued.
  Mutex submit_mu_;
  uint64_t next_task_seq_ GUARDED_BY(submit_mu_) = 0;

  // The workers ("tierfs-pf-N") and the queue, bounded in blocks (a task costs its count).
  // Declared last: destroyed (joined) first.
  ThreadPool pool_;
};

}  // namespace tierfs::tiercache_internal
