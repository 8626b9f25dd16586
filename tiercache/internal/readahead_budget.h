// ReadaheadBudget: admits the readahead pool's origin fetches. Their bytes in flight stay within
// a cap (cap_bytes: kRunsInFlight runs, within the readahead budget), and while readers wait for
// fetches of their own on the fetch pool, their count stays within kFetchesWhileDemand until the
// readahead guesses are proven read (TieredCache::SetGuessesProven). Workers that wait for room
// get in in the order of their task's sequence number.
//
// Why these limits:
// Readahead bytes being fetched stay within kRunsInFlight runs (and the readahead
// budget), however many prefetch threads there are: the pool's memory is that of 16 runs of
// 8 MiB, two sequential readers' whole windows (cache.readahead_max, 64 MiB each; with 8 runs
// two cold streams shared one window's worth, their runs waited for room until the readers
// caught up and fetched block by block on demand), while small objects (a loader's next
// files, one GET each) keep up to prefetch_threads requests in flight, but only
// kFetchesWhileDemand while readers wait for fetches of their own (DemandJobQueued), so that a
// reader's GET does not queue at the origin behind 64 guesses (a plain shuffled loader's cold
// epoch: 8 of them gave 388-402 samples/s and a first batch after 2.0 s, 32 always 499-533
// and 4.3-6.9 s, 16 while readers wait 465-483 and 3.0 s), until the guesses are proven read
// (SetGuessesProven: with 64 threads, a cold epoch with 20 ms of compute per batch took a
// median 17.5 s instead of 20.3 over 11 runs each, its first batch 3.10 s as 3.12, its longest
// wait 2.7 s instead of 1.9; with no limit from the start, 15.8-17.3 s, first batch 5.3 s).
//
// With a memory budget (memory.limit, base/memory_budget.h), a run also waits while it would not
// fit in what the budget leaves besides L1 (L1 gives its blocks back when the run's blocks are
// allocated, Block::Allocate): the readahead bytes in flight and the run, over the budget's
// use by everything but L1. Readers do not wait for it: their own fetches are charged whatever
// it says, and readahead catches up when memory is given back.
//
// Thread-safe; no external synchronization needed. mu_ is a leaf lock.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <stop_token>

#include "base/memory_budget.h"
#include "base/mutex.h"

namespace tierfs::tiercache_internal {

class ReadaheadBudget {
 public:
  // `memory`: the budget the run's blocks are charged to, or null; not owned, must outlive this.
  explicit ReadaheadBudget(uint64_t cap_bytes, const MemoryBudget* memory = nullptr)
      : cap_bytes_(cap_bytes), memory_(memory) {}
  ReadaheadBudget(const ReadaheadBudget&) = delete;
  ReadaheadBudget& operator=(const ReadaheadBudget&) = delete;

  // Acquire waits until `bytes` more fit in cap_bytes (or nothing is in flight: one run always may
  // go), and, while readers wait for fetches of their own (DemandJobQueued), until fewer than
  // kFetchesWhileDemand readahead fetches are in flight; then takes them. False when the cache
  // shuts down first.
  //
  // Up to prefetch_threads workers wait here at once (a loader's next files queue many small
  // fetches; several sequential readers each queue their window's runs). They get in in queue
  // order (the task's `seq`), not in the order the scheduler happens to wake them: with two
  // streams the runs just ahead of one reader waited behind runs far ahead of both, the reader
  // caught up with its readahead and fetched block after block on demand, a round trip each.
  // Only the first waiter in that order is woken (a freed slot wakes it, and each that gets in
  // wakes the next while room is left: a baton), instead of waking them all on every release
  // (with 16 waiting, a thundering herd of 16 wakeups per fetch: 8% of the daemon's CPU in a cold
  // small-file epoch went to switching them in). A woken worker whose run does not fit yet waits
  // for the next release; once nothing is in flight any request fits, so none waits for ever.
  bool Acquire(uint64_t bytes, uint64_t seq, const std::stop_token& st) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    CondVar mine(&mu_);
    bool waiting = false, stopped = false;
    while (Blocked(bytes) || (!waiting_.empty() && waiting_.begin()->first < seq)) {
      if ((stopped = st.stop_requested())) break;
      // seq is unique (one worker runs a task): registered once, erased below.
      if (!waiting) waiting = waiting_.emplace(seq, &mine).second;
      mine.WaitFor(kRecheck);
    }
    if (waiting) waiting_.erase(seq);
    if (stopped) return false;
    bytes_ += bytes;
    ++fetches_;
    // Pass the baton: the next waiter in order looks whether its run fits too.
    WakeFirst();
    return true;
  }

  // Gives back what Acquire(bytes, ...) took.
  void Release(uint64_t bytes) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    bytes_ -= bytes;
    --fetches_;
    WakeFirst();
  }

  // A demand fetch was queued for the fetch pool; DemandJobDone ends it.
  void DemandJobQueued() { ++demand_jobs_; }

  // Ends a demand fetch taken off the fetch queue when it goes out of scope: the last one lets
  // readahead take all its threads again (one waiting worker at a time, Acquire's baton).
  class DemandJobDone {
   public:
    explicit DemandJobDone(ReadaheadBudget* b) : b_(b) {}
    ~DemandJobDone() {
      if (--b_->demand_jobs_ == 0) b_->WakeOne();
    }
    DemandJobDone(const DemandJobDone&) = delete;
    DemandJobDone& operator=(const DemandJobDone&) = delete;

   private:
    ReadaheadBudget* const b_;
  };

  // Proven guesses are not held to kFetchesWhileDemand while readers wait.
  void SetGuessesProven(bool proven) {
    if (guesses_proven_.exchange(proven) || !proven) return;
    WakeOne();  // the demand limit no longer holds the first waiter
  }

  // Wakes every waiting worker (the cache shuts down: their stop tokens are set).
  void WakeAll() EXCLUDES(mu_) {
    MutexLock l(&mu_);  // not between a waiter's check and its wait
    for (auto& [seq, cv] : waiting_) cv->Signal();
  }

 private:
  static constexpr uint64_t kFetchesWhileDemand = 16;
  // A waiting worker looks again after this long even unwoken (a safety net, not the signal).
  static constexpr std::chrono::milliseconds kRecheck{100};

  bool Blocked(uint64_t bytes) const REQUIRES(mu_) {
    return (bytes_ > 0 && bytes_ + bytes > cap_bytes_) || !FitsMemory(bytes) ||
           (fetches_ >= kFetchesWhileDemand && demand_jobs_.load() > 0 &&
            !guesses_proven_.load(std::memory_order_relaxed));
  }
  // The run fits beside the readahead in flight in what the memory budget leaves besides L1
  // (which gives its blocks back). Counts the blocks of runs in flight twice once allocated: it
  // errs on the side of less readahead.
  bool FitsMemory(uint64_t bytes) const REQUIRES(mu_) {
    if (memory_ == nullptr) return true;
    const uint64_t held =
        memory_->used() - std::min(memory_->used(), memory_->used(MemoryUse::kL1));
    return held + bytes_ + bytes <= memory_->limit();
  }
  void WakeFirst() REQUIRES(mu_) {
    if (!waiting_.empty()) waiting_.begin()->second->Signal();
  }
  // Wakes the first worker waiting for room.
  void WakeOne() EXCLUDES(mu_) {
    MutexLock l(&mu_);  // not between a waiter's check and its wait
    WakeFirst();
  }

  // Constant after construction.
  const uint64_t cap_bytes_;
  const MemoryBudget* const memory_;

  // Demand fetches queued for or running on the fetch pool.
  std::atomic<int64_t> demand_jobs_{0};
  std::atomic<bool> guesses_proven_{false};

  // State below is protected by mu_.
  Mutex mu_;
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t fetches_ GUARDED_BY(mu_) = 0;
  // The workers waiting for room, by their task's seq: each waits on a CondVar of its own, so
  // that the first in queue order is the one woken.
  std::map<uint64_t, CondVar*> waiting_ GUARDED_BY(mu_);
};

}  // namespace tierfs::tiercache_internal
