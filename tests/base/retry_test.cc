#include "base/retry.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/cancel.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using std::chrono::milliseconds;
using Kind = RetryStep::Kind;

TEST(StatusRetryableTest, FollowsTheCodeUnlessTheMakerSaysOtherwise) {
  EXPECT_TRUE(Status::Unavailable("x").retryable());
  EXPECT_TRUE(Status::TimedOut("x").retryable());
  EXPECT_TRUE(Status::IOError("x").retryable());
  EXPECT_FALSE(Status::NotFound("x").retryable());
  EXPECT_FALSE(Status::Corruption("x").retryable());
  EXPECT_FALSE(Status::Cancelled("x").retryable());
  EXPECT_FALSE(Status::OK().retryable());
  EXPECT_FALSE(Status::OK().WithRetryable(true).retryable());  // OK is never retried

  Status http400 = Status::IOError("GET k: HTTP 400").WithRetryable(false);
  EXPECT_FALSE(http400.retryable());
  EXPECT_FALSE(IsRetryable(http400));
  EXPECT_EQ(http400.code(), Status::Code::kIOError);
  Status short_body = Status::Corruption("short body").WithRetryable(true);
  EXPECT_TRUE(IsRetryable(short_body));
  // Context and detail keep the maker's verdict.
  EXPECT_FALSE(http400.WithContext("reading").retryable());
  EXPECT_TRUE(short_body.WithDetail("proxy").retryable());
  EXPECT_EQ(short_body.WithContext("GET k").message(), "GET k: short body");
}

TEST(RetryPolicyTest, BackoffDoublesWithJitterUpToTheCap) {
  RetryPolicy p{
      .max_attempts = 10, .backoff_base = milliseconds(100), .backoff_max = milliseconds(1000)};
  for (int i = 0; i < 200; ++i) {
    EXPECT_GE(p.Backoff(1), milliseconds(50));
    EXPECT_LE(p.Backoff(1), milliseconds(100));
    EXPECT_GE(p.Backoff(3), milliseconds(200));
    EXPECT_LE(p.Backoff(3), milliseconds(400));
    EXPECT_GE(p.Backoff(9), milliseconds(500));  // capped at 1000, jittered down to half
    EXPECT_LE(p.Backoff(9), milliseconds(1000));
  }
  RetryPolicy none{.max_attempts = 3};
  EXPECT_EQ(none.Backoff(5), milliseconds(0));
}

TEST(RetryPolicyTest, NextStepAsksTheStatus) {
  RetryPolicy p{
      .max_attempts = 3, .backoff_base = milliseconds(10), .backoff_max = milliseconds(10)};
  EXPECT_EQ(NextRetryStep(p, Status::OK(), 1).kind, Kind::kDone);
  EXPECT_EQ(NextRetryStep(p, Status::NotFound("x"), 1).kind, Kind::kGiveUp);
  EXPECT_EQ(NextRetryStep(p, Status::IOError("x").WithRetryable(false), 1).kind, Kind::kGiveUp);
  RetryStep s = NextRetryStep(p, Status::Unavailable("x"), 2);
  EXPECT_EQ(s.kind, Kind::kRetry);
  EXPECT_GE(s.delay, milliseconds(5));
  EXPECT_EQ(NextRetryStep(p, Status::Unavailable("x"), 3).kind, Kind::kExhausted);
  // A retry that would start past the deadline is not made.
  EXPECT_EQ(NextRetryStep(p, Status::Unavailable("x"), 1, std::chrono::steady_clock::now()).kind,
            Kind::kExhausted);
}

TEST(RetryTest, RetriesRetryableFailuresUpToTheAttempts) {
  RetryPolicy p{.max_attempts = 4};
  std::vector<std::string> log;
  RetryObserver obs;
  obs.on_retry = [&](const Status& s, int n, milliseconds) {
    log.push_back("retry " + std::to_string(n) + " " + s.message());
  };
  obs.on_exhausted = [&](const Status&, int n) { log.push_back("gave up " + std::to_string(n)); };
  int calls = 0;
  Result<int> r = Retry(
      p,
      [&](int n) -> Result<int> {
        ++calls;
        EXPECT_EQ(n, calls);
        if (n < 3) return Status::Unavailable("busy");
        return 42;
      },
      obs);
  ASSERT_OK(r);
  EXPECT_EQ(*r, 42);
  EXPECT_EQ(log, (std::vector<std::string>{"retry 1 busy", "retry 2 busy"}));

  log.clear();
  calls = 0;
  Status s = Retry(
      p,
      [&](int) {
        ++calls;
        return Status::TimedOut("slow");
      },
      obs);
  EXPECT_EQ(s.code(), Status::Code::kTimedOut);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(log.back(), "gave up 4");

  calls = 0;
  s = Retry(p, [&](int) {
    ++calls;
    return Status::PermissionDenied("no");
  });
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(calls, 1);
}

TEST(RetryTest, TheDeadlineBoundsTheLoop) {
  RetryPolicy p{.max_attempts = 1000,
                .backoff_base = milliseconds(20),
                .backoff_max = milliseconds(20),
                .deadline = milliseconds(100)};
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  Status s = Retry(p, [&](int) {
    ++calls;
    return Status::Unavailable("down");
  });
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_GE(calls, 2);
  EXPECT_LE(calls, 12);  // 100 ms of 10..20 ms sleeps
}

TEST(RetryTest, ACancelledRequestStopsSleeping) {
  RetryPolicy p{
      .max_attempts = 5, .backoff_base = milliseconds(60'000), .backoff_max = milliseconds(60'000)};
  CancelToken token;
  CancelToken::Scope scope(&token);
  int calls = 0;
  RetryObserver obs;
  obs.on_retry = [&](const Status&, int, milliseconds) { token.Cancel(); };  // an interrupt
  const auto start = std::chrono::steady_clock::now();
  Status s = Retry(
      p,
      [&](int) {
        ++calls;
        return Status::Unavailable("down");
      },
      obs);
  EXPECT_EQ(s.code(), Status::Code::kCancelled);
  EXPECT_EQ(calls, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));

  CancelToken expiring(milliseconds(30));
  CancelToken::Scope inner(&expiring);
  EXPECT_EQ(SleepForRetry(milliseconds(60'000)).code(), Status::Code::kTimedOut);
  CancelToken fine;
  CancelToken::Scope innermost(&fine);
  EXPECT_OK(SleepForRetry(milliseconds(1)));
}

}  // namespace
}  // namespace tierfs
