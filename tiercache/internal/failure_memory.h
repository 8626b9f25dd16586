// FailureMemory: the origin failures of demand reads, remembered per block for a short time
// (TieredCacheOptions::origin_failure_ttl), so that reads of the block meanwhile get the same
// error at once instead of a fetch of their own. Why: the kernel answers a failed readahead FUSE
// READ by reading the page its reader waits on again, synchronously, right away; without the
// record that READ started a second fetch of the block, and a stalled origin held a reader for
// two or three fetch budgets (docs/failure-and-security.md).
//
// Thread-safe; no external synchronization needed. `clock` is not owned and outlives this object.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/clock.h"
#include "base/mutex.h"
#include "base/status.h"
#include "metastore/meta_store.h"
#include "tiercache/internal/block_key_hash.h"

namespace tierfs::tiercache_internal {

class FailureMemory {
 public:
  // A `ttl` of zero or less: nothing is ever remembered.
  FailureMemory(std::chrono::nanoseconds ttl, Clock* clock) : ttl_(ttl), clock_(clock) {}
  FailureMemory(const FailureMemory&) = delete;
  FailureMemory& operator=(const FailureMemory&) = delete;

  // The failure of `key` recorded less than ttl ago, with how long ago in its message; nullopt
  // when there is none (an expired one is dropped).
  std::optional<Status> Recent(const BlockKey& key) EXCLUDES(mu_) {
    if (ttl_ <= std::chrono::nanoseconds::zero()) return std::nullopt;
    const int64_t now = clock_->MonotonicNanos();
    MutexLock l(&mu_);
    auto it = failures_.find(key);
    if (it == failures_.end()) return std::nullopt;
    if (now >= it->second.until_ns) {
      failures_.erase(it);
      return std::nullopt;
    }
    return it->second.status.WithContext("the origin failed for this block " +
                                         std::to_string((now - it->second.at_ns) / 1'000'000) +
                                         " ms ago; not fetched again yet");
  }

  // Records `st` as the failure of `key` for the next ttl. At most kMax entries: when full, the
  // expired ones go, and if none has expired (an outage across many blocks), all of them.
  void Remember(const BlockKey& key, const Status& st) EXCLUDES(mu_) {
    if (ttl_ <= std::chrono::nanoseconds::zero()) return;
    const int64_t now = clock_->MonotonicNanos();
    MutexLock l(&mu_);
    if (failures_.size() >= kMax) {
      std::erase_if(failures_, [now](const auto& kv) { return now >= kv.second.until_ns; });
      if (failures_.size() >= kMax) failures_.clear();
    }
    failures_.insert_or_assign(key, Failure{st, now, now + static_cast<int64_t>(ttl_.count())});
  }

 private:
  struct Failure {
    Status status;
    int64_t at_ns = 0;     // Clock::MonotonicNanos when it was recorded
    int64_t until_ns = 0;  // replayed until then
  };
  static constexpr size_t kMax = 4096;

  // Constant after construction.
  const std::chrono::nanoseconds ttl_;
  Clock* const clock_;

  // State below is protected by mu_ (a leaf lock).
  Mutex mu_;
  std::unordered_map<BlockKey, Failure, BlockKeyHash> failures_ GUARDED_BY(mu_);
};

}  // namespace tierfs::tiercache_internal
