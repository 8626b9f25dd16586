// Retries: the one retry policy and loop of tierfs (conventions C13).
//
// Whether a failure may be cured by another attempt is decided where its Status is made
// (Status::retryable(), base/status.h: the HTTP answer and curl error mappings of blobclient,
// the S3 answer checks, the credential services' answers). This file decides only how often and
// when: at most max_attempts attempts, a jittered exponential backoff between them, no attempt
// that would start past the policy's deadline, and no sleep past the thread's CancelToken
// (base/cancel.h): an interrupted or expired request stops retrying at once.
//
// Retry() runs a synchronous attempt function in that loop (S3 HEAD/LIST/PUT/DELETE, the
// credential services). An asynchronous driver (the S3 store's ranged GETs) asks NextRetryStep
// after each failed attempt and schedules the next one itself, with the same policy.
//
// Thread-safety: pure functions and value types; safe from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <type_traits>

#include "base/result.h"
#include "base/status.h"

namespace tierfs {

struct RetryPolicy {
  // Attempts in all, the first included (>= 1).
  int max_attempts = 1;
  // The delay after failed attempt n is backoff_base * 2^(n-1), capped at backoff_max, drawn
  // uniformly from [d/2, d] ("equal jitter", so that clients failed together do not come back
  // together). REQUIRES: 0 <= backoff_base <= backoff_max.
  std::chrono::milliseconds backoff_base{0};
  std::chrono::milliseconds backoff_max{0};
  // No attempt starts later than this after the first one (0: no bound but the attempts).
  std::chrono::milliseconds deadline{0};

  // The jittered delay after failed attempt `attempt` (1 for the first).
  std::chrono::milliseconds Backoff(int attempt) const;
};

// What follows a finished attempt.
struct RetryStep {
  enum class Kind {
    kDone,       // it succeeded
    kGiveUp,     // it failed in a way no retry cures (!status.retryable())
    kExhausted,  // retryable, but it was the last attempt, or the next would start too late
    kRetry,      // attempt again after `delay`
  };
  Kind kind = Kind::kDone;
  std::chrono::milliseconds delay{0};
};

// The step after attempt `attempt` (1 for the first) ended with `status`. `deadline`: no attempt
// starts after it (steady clock; max: none).
RetryStep NextRetryStep(
    const RetryPolicy& policy, const Status& status, int attempt,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

// Sleeps `delay`; ends early with Cancelled or TimedOut when the thread's current CancelToken is
// cancelled or its deadline passes first (OK otherwise).
Status SleepForRetry(std::chrono::milliseconds delay);

// Hooks of a Retry loop, for the caller's counters and logs (each may be empty).
struct RetryObserver {
  // Before the sleep that precedes attempt `attempt + 1`.
  std::function<void(const Status& failure, int attempt, std::chrono::milliseconds delay)> on_retry;
  // When the loop ends on kExhausted after `attempts` attempts.
  std::function<void(const Status& failure, int attempts)> on_exhausted;
};

// Calls attempt(n) for n = 1, 2, ... (each returns a Status or a Result<T>) until NextRetryStep
// says otherwise, sleeping the backoff in between, and returns the last attempt's outcome; or
// the token's Cancelled/TimedOut when the thread's CancelToken ends a backoff sleep.
template <typename Fn>
auto Retry(const RetryPolicy& policy, Fn&& attempt, const RetryObserver& observer = {})
    -> std::invoke_result_t<Fn&, int> {
  const auto deadline = policy.deadline.count() > 0
                            ? std::chrono::steady_clock::now() + policy.deadline
                            : std::chrono::steady_clock::time_point::max();
  for (int n = 1;; ++n) {
    auto outcome = attempt(n);
    const RetryStep step = NextRetryStep(policy, StatusOf(outcome), n, deadline);
    if (step.kind == RetryStep::Kind::kRetry) {
      if (observer.on_retry) observer.on_retry(StatusOf(outcome), n, step.delay);
      if (Status s = SleepForRetry(step.delay); !s.ok()) return s;
      continue;
    }
    if (step.kind == RetryStep::Kind::kExhausted && observer.on_exhausted) {
      observer.on_exhausted(StatusOf(outcome), n);
    }
    return outcome;
  }
}

}  // namespace tierfs
