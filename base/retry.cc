#include "base/retry.h"

#include <algorithm>
#include <random>

#include "base/cancel.h"
#include "base/mutex.h"

namespace tierfs {

std::chrono::milliseconds RetryPolicy::Backoff(int attempt) const {
  int64_t d = backoff_base.count();
  for (int i = 1; i < attempt && d < backoff_max.count(); ++i) d *= 2;
  d = std::min<int64_t>(d, backoff_max.count());
  thread_local std::minstd_rand rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> dist(d / 2, std::max<int64_t>(d / 2, d));
  return std::chrono::milliseconds(dist(rng));
}

RetryStep NextRetryStep(const RetryPolicy& policy, const Status& status, int attempt,
                        std::chrono::steady_clock::time_point deadline) {
  using Kind = RetryStep::Kind;
  if (status.ok()) return {Kind::kDone};
  if (!status.retryable()) return {Kind::kGiveUp};
  if (attempt >= policy.max_attempts) return {Kind::kExhausted};
  const std::chrono::milliseconds delay = policy.Backoff(attempt);
  if (deadline != std::chrono::steady_clock::time_point::max() &&
      std::chrono::steady_clock::now() + delay > deadline) {
    return {Kind::kExhausted};
  }
  return {Kind::kRetry, delay};
}

Status SleepForRetry(std::chrono::milliseconds delay) {
  const CancelToken* token = CancelToken::Current();
  if (delay.count() <= 0) return token != nullptr ? token->Check("retry backoff") : Status::OK();
  // Nothing signals `cv`: the wait ends at the delay, or early by the token's wakeup.
  Mutex mu;
  CondVar cv(&mu);
  Status s = WaitCancellable(
      &mu, &cv, [] { return false; }, token, std::chrono::steady_clock::now() + delay,
      "retry backoff");
  // The delay ran out (TimedOut by the local deadline, the token still fine): retry.
  if (s.code() == Status::Code::kTimedOut && (token == nullptr || token->Check("").ok())) {
    return Status::OK();
  }
  return s;
}

}  // namespace tierfs
