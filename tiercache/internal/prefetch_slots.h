// FetchSlots: how many runs deep prefetch (prefetch_jobs.h) may fetch at once now. A worker takes
// one slot per run (TieredCache::HydrateRun) weighing the run's bytes; the slots allowed are
// `threads`, bounded by the origin's adaptive limit less the demand reads in flight, the runs'
// bytes by memory_budget (one run always may go), and (but for the list job) cut to
// slots_while_demand while demand reads fetch from the network or did within demand_quiet
// (CacheStats::demand_remote_*): a reader's GETs never queue behind a full prefetch load.
//
// Thread-safe; no external synchronization needed. mu_ is a leaf lock. `cache_stats` and `clock`
// are not owned and outlive this object.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "base/clock.h"
#include "base/mutex.h"
#include "tiercache/prefetch_jobs.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

class FetchSlots {
 public:
  FetchSlots(const PrefetchJobsOptions& options, const CacheStats* cache_stats, Clock* clock)
      : options_(options), cache_stats_(cache_stats), clock_(clock), cv_(&mu_) {}
  FetchSlots(const FetchSlots&) = delete;
  FetchSlots& operator=(const FetchSlots&) = delete;

  // Takes one of the allowed slots for a run of `bytes` of a job (`list`: the list job); false
  // when `give_up()` (the job ended) turns true or Stop() was called first.
  bool Acquire(bool list, uint64_t bytes, const std::function<bool()>& give_up) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    while (!stopped_ && !give_up() &&
           (fetching_ >= AllowedLocked(list) ||
            (fetching_ > 0 && fetching_bytes_ + bytes > options_.memory_budget))) {
      cv_.WaitFor(std::chrono::milliseconds(5));  // the cap moves with demand reads
    }
    if (stopped_ || give_up()) return false;
    ++fetching_;
    fetching_bytes_ += bytes;
    return true;
  }

  // Gives back a slot Acquire(_, bytes, _) took.
  void Release(uint64_t bytes) EXCLUDES(mu_) {
    {
      MutexLock l(&mu_);
      --fetching_;
      fetching_bytes_ -= bytes;
    }
    cv_.Signal();
  }

  // Wakes every waiter (a job ended: its workers give up).
  void WakeAll() { cv_.SignalAll(); }
  // Every Acquire from now on fails.
  void Stop() EXCLUDES(mu_) {
    {
      MutexLock l(&mu_);
      stopped_ = true;
    }
    cv_.SignalAll();
  }

 private:
  // `threads`, within the origin's adaptive limit less what demand reads use, and only
  // slots_while_demand while demand reads are fetching or did within demand_quiet (prefetch
  // yields to them) — except for the list job (`list`): its files are, in order, what the loader
  // that sent them reads next (PrefetchSampler), so its demand misses are that loader catching up
  // with the list, and yielding to them made the loader wait for its own prefetch.
  size_t AllowedLocked(bool list) REQUIRES(mu_) {
    size_t cap = static_cast<size_t>(options_.threads);
    const int64_t demand = std::max<int64_t>(0, cache_stats_->demand_remote_in_flight.load());
    const int64_t now = clock_->MonotonicNanos();
    if (options_.origin_limit) {
      if (now - limit_read_ns_ >= 50'000'000 || limit_read_ns_ == 0) {
        origin_limit_ = options_.origin_limit();
        limit_read_ns_ = now;
      }
      if (origin_limit_ > 0) {
        const int64_t room = static_cast<int64_t>(origin_limit_) - demand;
        cap = std::min<size_t>(cap, static_cast<size_t>(std::max<int64_t>(1, room)));
      }
    }
    const int64_t last = cache_stats_->demand_remote_last_ns.load();
    if (!list && (demand > 0 || (last != 0 && now - last < options_.demand_quiet.count()))) {
      cap = std::min<size_t>(cap, std::max(1, options_.slots_while_demand));
    }
    return cap;
  }

  // Constant after construction.
  const PrefetchJobsOptions& options_;
  const CacheStats* const cache_stats_;
  Clock* const clock_;

  // State below is protected by mu_. cv_: a slot freed (one waiter per freed slot).
  Mutex mu_;
  CondVar cv_;
  bool stopped_ GUARDED_BY(mu_) = false;
  size_t fetching_ GUARDED_BY(mu_) = 0;          // workers inside HydrateRun
  uint64_t fetching_bytes_ GUARDED_BY(mu_) = 0;  // ... and the bytes of their runs
  uint64_t origin_limit_ GUARDED_BY(mu_) = 0;
  int64_t limit_read_ns_ GUARDED_BY(mu_) = 0;
};

}  // namespace tierfs::tiercache_internal
