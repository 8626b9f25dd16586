#include "base/cancel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

constexpr auto kPrompt = std::chrono::seconds(10);

TEST(CancelTokenTest, CheckReportsCancelAndDeadline) {
  CancelToken t;
  EXPECT_OK(t.Check("x"));
  t.Cancel();
  t.Cancel();  // idempotent
  EXPECT_EQ(t.Check("x").code(), Status::Code::kCancelled);
  CancelToken expired(std::chrono::nanoseconds(0));
  EXPECT_EQ(expired.Check("x").code(), Status::Code::kTimedOut);
  CancelToken far(std::chrono::nanoseconds::max());  // no overflow
  EXPECT_OK(far.Check("x"));
  EXPECT_EQ(far.deadline(), CancelToken::TimePoint::max());
}

TEST(CancelTokenTest, CancelWakesAWaiter) {
  Mutex mu;
  CondVar cv(&mu);
  CancelToken t;
  auto w = std::async(std::launch::async, [&] {
    return WaitCancellable(
        &mu, &cv, [] { return false; }, &t, CancelToken::TimePoint::max(), "test");
  });
  EXPECT_EQ(w.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  t.Cancel();
  ASSERT_EQ(w.wait_for(kPrompt), std::future_status::ready);
  EXPECT_EQ(w.get().code(), Status::Code::kCancelled);
}

TEST(CancelTokenTest, WaitEndsWhenDoneOrAtTheDeadline) {
  Mutex mu;
  CondVar cv(&mu);
  bool done = false;
  auto w = std::async(std::launch::async, [&] {
    return WaitCancellable(
        &mu, &cv, [&] { return done; }, nullptr, CancelToken::TimePoint::max(), "test");
  });
  {
    MutexLock l(&mu);
    done = true;
    cv.SignalAll();
  }
  ASSERT_EQ(w.wait_for(kPrompt), std::future_status::ready);
  EXPECT_OK(w.get());

  CancelToken t(std::chrono::milliseconds(30));
  const auto start = std::chrono::steady_clock::now();
  Status s = WaitCancellable(
      &mu, &cv, [] { return false; }, &t, CancelToken::TimePoint::max(), "test");
  EXPECT_EQ(s.code(), Status::Code::kTimedOut);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
  s = WaitCancellable(
      &mu, &cv, [] { return false; }, nullptr,
      std::chrono::steady_clock::now() + std::chrono::milliseconds(10), "test");
  EXPECT_EQ(s.code(), Status::Code::kTimedOut);
}

TEST(CancelTokenTest, AlreadyCancelledTokenNeverWaits) {
  Mutex mu;
  CondVar cv(&mu);
  CancelToken t;
  t.Cancel();
  EXPECT_EQ(WaitCancellable(
                &mu, &cv, [] { return false; }, &t, CancelToken::TimePoint::max(), "test")
                .code(),
            Status::Code::kCancelled);
}

TEST(CancelTokenTest, ScopeInstallsTheCurrentToken) {
  EXPECT_EQ(CancelToken::Current(), nullptr);
  CancelToken a, b;
  {
    CancelToken::Scope sa(&a);
    EXPECT_EQ(CancelToken::Current(), &a);
    {
      CancelToken::Scope sb(&b);
      EXPECT_EQ(CancelToken::Current(), &b);
    }
    EXPECT_EQ(CancelToken::Current(), &a);
    std::thread([] { EXPECT_EQ(CancelToken::Current(), nullptr); }).join();  // per thread
  }
  EXPECT_EQ(CancelToken::Current(), nullptr);
}

}  // namespace
}  // namespace tierfs
