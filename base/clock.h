// Clock — the time seam (conventions C7). Components take a Clock* so tests control time.
//
// Thread-safe; no external synchronization needed (FakeClock included).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tierfs {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time (for ages stored on disk, SigV4 dates, mtimes), ns since the Unix epoch.
  virtual int64_t NowUnixNanos() = 0;
  // Monotonic time (for timeouts and latencies), ns since an arbitrary origin.
  virtual int64_t MonotonicNanos() = 0;
  std::chrono::system_clock::time_point Now() {
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(NowUnixNanos())));
  }
};

// The process-wide real clock. Never null; lives forever.
Clock* SystemClock();

// A clock that moves only when told. Starts at `start_unix_nanos` (wall) and 0 (monotonic).
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_unix_nanos = 1'700'000'000'000'000'000LL)
      : wall_(start_unix_nanos) {}
  int64_t NowUnixNanos() override { return wall_.load(); }
  int64_t MonotonicNanos() override { return mono_.load(); }
  void Advance(std::chrono::nanoseconds d) {
    wall_ += d.count();
    mono_ += d.count();
  }
  void SetUnixNanos(int64_t t) { wall_ = t; }

 private:
  std::atomic<int64_t> wall_;
  std::atomic<int64_t> mono_{0};
};

}  // namespace tierfs
