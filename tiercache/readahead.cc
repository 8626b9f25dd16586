// Readahead (internal/readahead.h): the bounded prefetch queue and its workers.
#include "tiercache/internal/readahead.h"

#include <algorithm>
#include <string>

#include "base/logging.h"

namespace tierfs::tiercache_internal {

Readahead::Readahead(int threads, uint64_t run_blocks, uint64_t queue_limit, bool file_slices,
                     OriginFetcher* fetcher, HostTiers* host, const BlockSpace* space,
                     CacheStats* stats, EngineCounters* counters)
    : run_blocks_(run_blocks),
      file_slices_(file_slices),
      fetcher_(fetcher),
      host_(host),
      space_(space),
      stats_(stats),
      counters_(counters),
      pool_(ThreadPoolOptions{.name = "tierfs-pf",  // 15-byte thread names
                              .threads = threads,
                              .queue_limit = static_cast<size_t>(queue_limit)}) {}

uint64_t Readahead::Prefetch(const ObjectRef& obj, uint64_t first_block, uint64_t count,
                             BlockFill fill) {
  if (pool_.threads() == 0 || count == 0) return 0;
  const uint64_t nblocks = space_->NumBlocks(obj);
  if (first_block >= nblocks) return 0;
  count = std::min(count, nblocks - first_block);
  auto shared = std::make_shared<const ObjectRef>(obj);
  // Tasks of up to run_blocks_ adjacent blocks that the first tier lacks.
  std::vector<Task> tasks;
  for (uint64_t i = first_block; i < first_block + count; ++i) {
    const BlockKey key = space_->KeyFor(obj, i);
    if (fetcher_->InFlight(key) || host_->FirstHolds(key)) continue;
    if (!tasks.empty() && tasks.back().first + tasks.back().count == i &&
        tasks.back().count < run_blocks_) {
      ++tasks.back().count;
    } else {
      tasks.push_back(Task{shared, i, 1, 0, fill});
    }
  }
  uint64_t dropped = 0;
  MutexLock l(&submit_mu_);
  for (Task& t : tasks) {
    t.seq = next_task_seq_;
    const uint64_t n = t.count;
    if (!pool_.TrySubmit([this, t](const std::stop_token& st) { RunTask(t, st); }, n)) {
      counters_->prefetch_dropped += n;
      dropped += n;
      continue;
    }
    ++next_task_seq_;
  }
  return dropped;
}

// Brings blocks [task.first, task.first + task.count) to the first tier; stops early when the
// cache shuts down.
void Readahead::RunTask(const Task& task, const std::stop_token& st) {
  const ObjectRef& obj = *task.obj;
  const uint64_t end = task.first + task.count;
  if (file_slices_) host_->WillNeed(obj, task.first, end);
  for (uint64_t i = task.first; i < end && !st.stop_requested();) {
    const BlockKey key = space_->KeyFor(obj, i);
    if (host_->FirstHolds(key) || fetcher_->InFlight(key) ||
        (file_slices_ && host_->BelowHolds(0, key))) {
      ++i;
      continue;
    }
    if (!host_->Holds(key)) {
      const uint64_t n = fetcher_->FetchRun(obj, i, end, task.seq, st, task.fill);
      if (n > 0) {
        i += n;
        continue;
      }
      if (st.stop_requested()) break;
    }
    Result<Served> r = fetcher_->Get(obj, i, /*token=*/nullptr, /*demand=*/false);
    if (r.ok()) {
      ++stats_->readahead_blocks;
      counters_->readahead_bytes += r->block->size();
    } else {
      SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "prefetch of '{}' block {} failed: {}",
                          obj.key, i, r.status().ToString());
    }
    ++i;
  }
}

}  // namespace tierfs::tiercache_internal
