#include "base/clock.h"

namespace tierfs {
namespace {

class RealClock final : public Clock {
 public:
  int64_t NowUnixNanos() override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  int64_t MonotonicNanos() override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

Clock* SystemClock() {
  static RealClock* clock = new RealClock();  // never destroyed: usable during static teardown
  return clock;
}

}  // namespace tierfs
