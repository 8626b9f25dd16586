// Adaptive request control for one endpoint (internal to blobclient/): a streaming latency
// estimate that decides when a GET is late enough to hedge, and an AIMD concurrency limiter.
//
// LatencyTracker keeps the last kWindow successful GETs of a store per size class (under
// kLargeBytes, and from it on) and models a GET of `bytes` as  time-to-first-byte + bytes ×
// transfer-time-per-byte. Hedging compares a request's age with ExpectedP95(bytes) = p95(ttfb)
// + bytes × median(time per byte) of its class: the p95 captures the queueing/seek tail of the
// server, the size term keeps a 4 MiB GET from being "late" next to 4 KiB ones, and the classes
// keep many small GETs (projected reads) from making the time to first byte of large ones (a
// server reads more before it answers) look late: without them every readahead run was hedged
// and seen as a latency spike. Until a class has kMinSamples samples it has no opinion (no
// hedging on a cold store).
//
// AimdLimiter bounds the requests of a store in flight by a limit that adapts: +1 after `limit`
// successes while the limit is actually used (additive increase, about +1 per round trip), ×½ on
// a congestion signal (503 SlowDown, 429, a timeout, a latency spike), at most once per window
// so that one burst of throttled answers cuts once (multiplicative decrease). Until the first
// congestion signal it grows by one per success instead (slow start, as TCP's: the limit doubles
// every round trip while it is used), so a fresh mount reaches the parallelism its origin takes
// within a few round trips, not after hundreds of requests (16 to 32 took ~380 GETs: a cold
// loader's first batch waited on them). Between 1 and `max`. Callers beyond the limit wait,
// bounded by their deadline.
//
// Both are thread-safe; no external synchronization needed.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "base/mutex.h"

namespace tierfs::blobclient {

class LatencyTracker {
 public:
  static constexpr int kWindow = 128;
  static constexpr int kMinSamples = 20;
  // Bodies smaller than this say little about transfer speed; only their TTFB is recorded.
  static constexpr uint64_t kMinBytesForRate = 16 * 1024;
  // GETs of at least this many bytes are modelled apart from smaller ones.
  static constexpr uint64_t kLargeBytes = 1 << 20;

  // One successful GET: time to the first response byte, time to the end, body bytes.
  void Record(std::chrono::nanoseconds ttfb, std::chrono::nanoseconds total, uint64_t bytes)
      EXCLUDES(mu_);

  // The p95-ish completion time of a GET of `bytes`; nullopt until kMinSamples GETs of its size
  // class were recorded.
  std::optional<std::chrono::nanoseconds> ExpectedP95(uint64_t bytes) const;

  // p95 of the time to first byte (the larger of the classes'), 0 until kMinSamples were
  // recorded in one.
  std::chrono::nanoseconds TtfbP95() const {
    return std::chrono::nanoseconds(
        std::max<int64_t>(0, std::max(ttfb_p95_ns_[0].load(), ttfb_p95_ns_[1].load())));
  }

 private:
  struct Rings {
    std::array<int64_t, kWindow> ttfb_ns{};
    std::array<int64_t, kWindow> ns_per_kib{};
    uint64_t ttfb_count = 0;
    uint64_t rate_count = 0;
  };
  static size_t ClassOf(uint64_t bytes) { return bytes >= kLargeBytes ? 1 : 0; }

  mutable Mutex mu_;
  std::array<Rings, 2> rings_ GUARDED_BY(mu_);  // per size class
  // Derived after every Record, read without the lock, per size class: -1 = not enough samples.
  std::array<std::atomic<int64_t>, 2> ttfb_p95_ns_{-1, -1};
  std::array<std::atomic<int64_t>, 2> ns_per_kib_p50_{0, 0};
};

// Hedges as a share of GETs ("The Tail at Scale": a few percent of duplicates cut the tail a
// straggler makes; beyond that they are load). When the server is slow because it is busy, every
// GET runs past the p95 of quieter times, and hedging each one doubles the load: two cold
// sequential streams hedged 35% of their GETs and read 15-25% slower than with hedging off. Each
// GET sent earns `percent` hundredths of a hedge (up to kBurst saved); a hedge spends one.
//
// Hedges that keep losing (the original answers first) are load as well: a saturated origin
// answers every GET late, a duplicate waits in the same queue, and in a cold small-file epoch
// 4% of the GETs were duplicates of which none won. Every kLossesPerHalving hedges lost in a row
// halve the rate, down to 1/2^kMaxHalvings of it (0.3% at 5%: a GET that is really stuck is
// still hedged soon); a hedge that wins restores the full rate.
class HedgeBudget {
 public:
  static constexpr int64_t kBurst = 10;
  static constexpr uint32_t kLossesPerHalving = 8;
  static constexpr uint32_t kMaxHalvings = 4;
  // REQUIRES: 0 <= percent <= 100.
  explicit HedgeBudget(int percent) : earn_(static_cast<int64_t>(percent) * 100) {}
  void OnGet();
  // True (and one hedge spent) if the budget allows a hedge now.
  bool TrySpend();
  // A hedge race was settled: the duplicate answered first (won) or the original did.
  void OnHedgeSettled(bool won);
  // How many times the rate is halved now (0..kMaxHalvings).
  uint32_t halvings() const;

 private:
  static constexpr int64_t kOne = 10000;  // one hedge, in ten-thousandths
  const int64_t earn_;                    // ten-thousandths of a hedge per GET at the full rate
  std::atomic<int64_t> saved_{0};         // at most kBurst * kOne
  std::atomic<uint32_t> losses_in_a_row_{0};
};

class AimdLimiter {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // REQUIRES: 1 <= initial, 1 <= max (initial is clamped to max).
  AimdLimiter(int initial, int max);

  // Takes a slot under the current limit, waiting until `deadline`; false if it passed.
  bool Acquire(TimePoint deadline) EXCLUDES(mu_);
  // Takes a slot only if one is free now.
  bool TryAcquire() EXCLUDES(mu_);
  void Release() EXCLUDES(mu_);

  // REQUIRES: called while the request still holds its slot (before Release).
  void OnSuccess() EXCLUDES(mu_);
  // Halves the limit unless it was already cut less than `window` before `now`.
  void OnCongestion(TimePoint now, std::chrono::nanoseconds window) EXCLUDES(mu_);

  int limit() const EXCLUDES(mu_);
  int in_flight() const EXCLUDES(mu_);
  uint64_t decreases() const EXCLUDES(mu_);

 private:
  // Constant after construction.
  const int max_;

  mutable Mutex mu_;
  CondVar cv_{&mu_};
  // State below is protected by mu_.
  int limit_ GUARDED_BY(mu_);
  int in_flight_ GUARDED_BY(mu_) = 0;
  int successes_ GUARDED_BY(mu_) = 0;       // since the last change of limit_
  bool slow_start_ GUARDED_BY(mu_) = true;  // no congestion signal yet: +1 per success
  uint64_t decreases_ GUARDED_BY(mu_) = 0;
  std::optional<TimePoint> last_decrease_ GUARDED_BY(mu_);
};

}  // namespace tierfs::blobclient
