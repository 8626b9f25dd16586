#include "blobclient/adaptive.h"

#include <algorithm>
#include <vector>

namespace tierfs::blobclient {
namespace {

// The q-quantile (0 < q < 1) of the first n values of `ring` (nearest rank).
int64_t Quantile(const std::array<int64_t, LatencyTracker::kWindow>& ring, size_t n, double q) {
  std::array<int64_t, LatencyTracker::kWindow> v = ring;
  size_t k = std::min(n - 1, static_cast<size_t>(q * static_cast<double>(n)));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k),
                   v.begin() + static_cast<ptrdiff_t>(n));
  return v[k];
}

// CondVar waits carry no capability annotation (see base/mutex.h). REQUIRES: cv's Mutex held.
bool WaitUntilWhileHeld(CondVar* cv, AimdLimiter::TimePoint deadline) {
  auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return false;
  cv->WaitFor(deadline - now);
  return true;
}

}  // namespace

void LatencyTracker::Record(std::chrono::nanoseconds ttfb, std::chrono::nanoseconds total,
                            uint64_t bytes) {
  const int64_t t = std::max<int64_t>(0, ttfb.count());
  const int64_t body = std::max<int64_t>(0, total.count() - t);
  MutexLock l(&mu_);
  const size_t k = ClassOf(bytes);
  Rings& c = rings_[k];
  c.ttfb_ns[c.ttfb_count % kWindow] = t;
  ++c.ttfb_count;
  if (bytes >= kMinBytesForRate) {
    c.ns_per_kib[c.rate_count % kWindow] =
        static_cast<int64_t>(static_cast<double>(body) * 1024.0 / static_cast<double>(bytes));
    ++c.rate_count;
  }
  const size_t n = static_cast<size_t>(std::min<uint64_t>(c.ttfb_count, kWindow));
  if (n >= static_cast<size_t>(kMinSamples)) ttfb_p95_ns_[k] = Quantile(c.ttfb_ns, n, 0.95);
  const size_t m = static_cast<size_t>(std::min<uint64_t>(c.rate_count, kWindow));
  if (m > 0) ns_per_kib_p50_[k] = Quantile(c.ns_per_kib, m, 0.5);
}

std::optional<std::chrono::nanoseconds> LatencyTracker::ExpectedP95(uint64_t bytes) const {
  const size_t k = ClassOf(bytes);
  const int64_t p95 = ttfb_p95_ns_[k].load();
  if (p95 < 0) return std::nullopt;
  const double transfer =
      static_cast<double>(ns_per_kib_p50_[k].load()) * static_cast<double>(bytes) / 1024.0;
  return std::chrono::nanoseconds(p95 + static_cast<int64_t>(transfer));
}

uint32_t HedgeBudget::halvings() const {
  return std::min(kMaxHalvings,
                  losses_in_a_row_.load(std::memory_order_relaxed) / kLossesPerHalving);
}

void HedgeBudget::OnGet() {
  const int64_t earn = earn_ >> halvings();
  int64_t cur = saved_.load(std::memory_order_relaxed);
  while (cur < kBurst * kOne &&
         !saved_.compare_exchange_weak(cur, std::min(kBurst * kOne, cur + earn),
                                       std::memory_order_relaxed)) {
  }
}

bool HedgeBudget::TrySpend() {
  int64_t cur = saved_.load(std::memory_order_relaxed);
  while (cur >= kOne) {
    if (saved_.compare_exchange_weak(cur, cur - kOne, std::memory_order_relaxed)) return true;
  }
  return false;
}

void HedgeBudget::OnHedgeSettled(bool won) {
  if (won) {
    losses_in_a_row_.store(0, std::memory_order_relaxed);
    return;
  }
  uint32_t cur = losses_in_a_row_.load(std::memory_order_relaxed);
  while (cur < kLossesPerHalving * kMaxHalvings &&
         !losses_in_a_row_.compare_exchange_weak(cur, cur + 1, std::memory_order_relaxed)) {
  }
}

AimdLimiter::AimdLimiter(int initial, int max)
    : max_(std::max(1, max)), limit_(std::clamp(initial, 1, std::max(1, max))) {}

bool AimdLimiter::Acquire(TimePoint deadline) {
  MutexLock l(&mu_);
  while (in_flight_ >= limit_) {
    if (!WaitUntilWhileHeld(&cv_, deadline)) return false;
  }
  ++in_flight_;
  return true;
}

bool AimdLimiter::TryAcquire() {
  MutexLock l(&mu_);
  if (in_flight_ >= limit_) return false;
  ++in_flight_;
  return true;
}

void AimdLimiter::Release() {
  MutexLock l(&mu_);
  --in_flight_;
  cv_.Signal();
}

void AimdLimiter::OnSuccess() {
  MutexLock l(&mu_);
  // Grow only while the limit is the constraint (at least half of it in use, this request
  // included): a store used by one thread at a time must not inflate a limit it never tests.
  if (limit_ >= max_ || 2 * in_flight_ < limit_) return;
  if (slow_start_ || ++successes_ >= limit_) {
    ++limit_;
    successes_ = 0;
    cv_.SignalAll();
  }
}

void AimdLimiter::OnCongestion(TimePoint now, std::chrono::nanoseconds window) {
  MutexLock l(&mu_);
  if (last_decrease_.has_value() && now - *last_decrease_ < window) return;
  last_decrease_ = now;
  successes_ = 0;
  slow_start_ = false;
  if (limit_ > 1) {
    limit_ = std::max(1, limit_ / 2);
    ++decreases_;
  }
}

int AimdLimiter::limit() const {
  MutexLock l(&mu_);
  return limit_;
}

int AimdLimiter::in_flight() const {
  MutexLock l(&mu_);
  return in_flight_;
}

uint64_t AimdLimiter::decreases() const {
  MutexLock l(&mu_);
  return decreases_;
}

}  // namespace tierfs::blobclient
