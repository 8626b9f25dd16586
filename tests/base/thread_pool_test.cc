#include "base/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tierfs {
namespace {

constexpr auto kPrompt = std::chrono::seconds(10);

std::chrono::steady_clock::time_point Soon() { return std::chrono::steady_clock::now() + kPrompt; }

// Blocks the tasks that wait on it until Open().
class Gate {
 public:
  void Open() {
    MutexLock l(&mu_);
    open_ = true;
    cv_.SignalAll();
  }
  // True once opened; false after kPrompt.
  bool Wait() {
    MutexLock l(&mu_);
    const auto deadline = Soon();
    while (!open_) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      cv_.WaitFor(deadline - now);
    }
    return true;
  }

 private:
  Mutex mu_;
  CondVar cv_{&mu_};
  bool open_ GUARDED_BY(mu_) = false;
};

// Waits until `pred` holds, for at most kPrompt.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto deadline = Soon();
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(ThreadPoolTest, RunsEveryTaskOnItsNamedThreads) {
  ThreadPool pool({.name = "tierfs-test", .threads = 3});
  EXPECT_EQ(pool.threads(), 3);
  Mutex mu;
  std::set<std::string> names;
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(pool.TrySubmit([&] {
      char name[16] = {};
      pthread_getname_np(pthread_self(), name, sizeof(name));
      MutexLock l(&mu);
      names.insert(name);
      ++ran;
    }));
  }
  ASSERT_TRUE(pool.WaitIdle(Soon()));
  EXPECT_EQ(ran.load(), 50);
  MutexLock l(&mu);
  for (const std::string& n : names) {
    EXPECT_TRUE(n == "tierfs-test-0" || n == "tierfs-test-1" || n == "tierfs-test-2") << n;
  }
}

TEST(ThreadPoolTest, NamesAreCutTo15CharactersAndMayBeUnnumbered) {
  for (bool numbered : {true, false}) {
    ThreadPool pool({.name = "tierfs-a-long-pool-name", .number_threads = numbered});
    std::promise<std::string> got;
    ASSERT_TRUE(pool.TrySubmit([&] {
      char name[16] = {};
      pthread_getname_np(pthread_self(), name, sizeof(name));
      got.set_value(name);
    }));
    auto f = got.get_future();
    ASSERT_EQ(f.wait_for(kPrompt), std::future_status::ready);
    EXPECT_EQ(f.get(), "tierfs-a-long-p");
  }
  ThreadPool short_name({.name = "tierfs-l3-w", .number_threads = false});
  std::promise<std::string> got;
  ASSERT_TRUE(short_name.TrySubmit([&] {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    got.set_value(name);
  }));
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(kPrompt), std::future_status::ready);
  EXPECT_EQ(f.get(), "tierfs-l3-w");
}

TEST(ThreadPoolTest, RunsTasksInOrderOnOneThread) {
  ThreadPool pool({.name = "tierfs-test", .threads = 1});
  std::vector<int> order;  // written by the one worker only, read after WaitIdle
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(pool.TrySubmit([&order, i] { order.push_back(i); }));
  ASSERT_TRUE(pool.WaitIdle(Soon()));
  ASSERT_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
}

TEST(ThreadPoolTest, FullQueueRefusesAndLeavesTheTaskAsItWas) {
  ThreadPool pool({.name = "tierfs-test", .threads = 1, .queue_limit = 2});
  Gate gate;
  std::promise<void> started;
  ASSERT_TRUE(pool.TrySubmit([&] {
    started.set_value();
    gate.Wait();
  }));
  ASSERT_EQ(started.get_future().wait_for(kPrompt), std::future_status::ready);
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.TrySubmit([&] { ++ran; }));
  ASSERT_TRUE(pool.TrySubmit([&] { ++ran; }));
  EXPECT_EQ(pool.queued(), 2u);
  auto payload = std::make_unique<int>(7);
  auto task = [&ran, p = std::move(payload)] { ran += *p; };
  EXPECT_FALSE(pool.TrySubmit(std::move(task)));
  // Refused: the lambda (and what it owns) was not moved from.
  task();
  EXPECT_EQ(ran.load(), 7);
  gate.Open();
  ASSERT_TRUE(pool.WaitIdle(Soon()));
  EXPECT_EQ(ran.load(), 9);
}

TEST(ThreadPoolTest, QueueIsBoundedByCost) {
  ThreadPool pool({.name = "tierfs-test", .threads = 1, .queue_limit = 10});
  Gate gate;
  std::promise<void> started;
  ASSERT_TRUE(pool.TrySubmit([&] {
    started.set_value();
    gate.Wait();
  }));
  ASSERT_EQ(started.get_future().wait_for(kPrompt), std::future_status::ready);
  EXPECT_TRUE(pool.TrySubmit([] {}, 6));
  EXPECT_FALSE(pool.TrySubmit([] {}, 5));  // 11 > 10
  EXPECT_TRUE(pool.TrySubmit([] {}, 4));   // 10
  EXPECT_FALSE(pool.TrySubmit([] {}, 1));
  EXPECT_FALSE(pool.TrySubmit([] {}, SIZE_MAX));  // no overflow
  EXPECT_EQ(pool.queued(), 2u);
  EXPECT_EQ(pool.queued_cost(), 10u);
  EXPECT_EQ(pool.running(), 1u);
  gate.Open();
  ASSERT_TRUE(pool.WaitIdle(Soon()));
  EXPECT_EQ(pool.queued_cost(), 0u);
  EXPECT_EQ(pool.running(), 0u);
}

TEST(ThreadPoolTest, ZeroThreadsRefusesEveryTask) {
  ThreadPool pool({.name = "tierfs-test", .threads = 0});
  EXPECT_EQ(pool.threads(), 0);
  EXPECT_FALSE(pool.TrySubmit([] {}));
  EXPECT_TRUE(pool.WaitIdle(Soon()));
}

// Counts its destructions while armed (a task's way of telling it was dropped).
struct DropCounter {
  explicit DropCounter(std::atomic<int>* n) : n(n) {}
  DropCounter(DropCounter&& o) noexcept : n(std::exchange(o.n, nullptr)) {}
  ~DropCounter() {
    if (n != nullptr) ++*n;
  }
  std::atomic<int>* n;
};

TEST(ThreadPoolTest, DiscardDestroysQueuedTasksUnrunAndStopsTheRunningOne) {
  ThreadPool pool({.name = "tierfs-test", .threads = 1});
  std::promise<void> started;
  std::atomic<bool> saw_stop{false};
  ASSERT_TRUE(pool.TrySubmit([&](const std::stop_token& st) {
    started.set_value();
    saw_stop = Eventually([&] { return st.stop_requested(); });
  }));
  ASSERT_EQ(started.get_future().wait_for(kPrompt), std::future_status::ready);
  std::atomic<int> ran{0}, dropped{0};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(pool.TrySubmit([&ran, d = DropCounter(&dropped)] { ++ran; }));
  }
  EXPECT_EQ(pool.Stop(ThreadPool::kDiscard), 5u);
  EXPECT_TRUE(saw_stop.load());
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(dropped.load(), 5);
  EXPECT_FALSE(pool.TrySubmit([] {}));             // stopped
  EXPECT_EQ(pool.Stop(ThreadPool::kDiscard), 0u);  // idempotent
}

TEST(ThreadPoolTest, DrainRunsQueuedTasksWithATokenNotStopped) {
  ThreadPool pool({.name = "tierfs-test", .threads = 2});
  Gate gate;
  std::atomic<int> ran{0}, stopped{0};
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(pool.TrySubmit([&](const std::stop_token& st) {
      gate.Wait();
      if (st.stop_requested()) ++stopped;
      ++ran;
    }));
  }
  EXPECT_EQ(pool.RequestStop(ThreadPool::kDrain), 0u);
  EXPECT_FALSE(pool.TrySubmit([] {}));  // no new work once stopping
  gate.Open();
  pool.Join();
  EXPECT_EQ(ran.load(), 10);
  EXPECT_EQ(stopped.load(), 0);
}

TEST(ThreadPoolTest, DestructorDrainsWhenTheOptionsSaySo) {
  std::atomic<int> ran{0};
  Gate gate;
  std::atomic<ThreadPool*> live{nullptr};
  // Opens the gate once the pool refuses new tasks, i.e. once its destructor has begun: the
  // queued tasks are still queued then. Its last use of the pool precedes the gate's opening,
  // so the pool outlives it.
  std::jthread opener([&] {
    ThreadPool* p = nullptr;
    Eventually([&] { return (p = live.load()) != nullptr; });
    Eventually([&] { return !p->TrySubmit([] {}); });
    gate.Open();
  });
  {
    ThreadPool pool({.name = "tierfs-test", .threads = 1, .stop_mode = ThreadPool::kDrain});
    ASSERT_TRUE(pool.TrySubmit([&] { gate.Wait(); }));  // keeps the worker busy
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.TrySubmit([&] { ++ran; }));
    live = &pool;
  }
  EXPECT_EQ(ran.load(), 3);
}

TEST(ThreadPoolTest, DestructorDiscardsByDefault) {
  std::atomic<int> ran{0}, dropped{0};
  {
    ThreadPool pool({.name = "tierfs-test", .threads = 1});
    std::promise<void> started;
    // Busy until the destructor requests stop, which it does after discarding the queue.
    ASSERT_TRUE(pool.TrySubmit([&](const std::stop_token& st) {
      started.set_value();
      Eventually([&] { return st.stop_requested(); });
    }));
    ASSERT_EQ(started.get_future().wait_for(kPrompt), std::future_status::ready);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(pool.TrySubmit([&ran, d = DropCounter(&dropped)] { ++ran; }));
    }
  }
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(dropped.load(), 3);
}

TEST(ThreadPoolTest, WaitIdleTimesOutWhileATaskRuns) {
  ThreadPool pool({.name = "tierfs-test", .threads = 1});
  Gate gate;
  ASSERT_TRUE(pool.TrySubmit([&] { gate.Wait(); }));
  EXPECT_FALSE(pool.WaitIdle(std::chrono::steady_clock::now() + std::chrono::milliseconds(20)));
  gate.Open();
  EXPECT_TRUE(pool.WaitIdle(Soon()));
}

TEST(ThreadPoolTest, ManySubmittersAndAStopRace) {
  std::atomic<int> ran{0}, dropped{0}, accepted{0};
  {
    ThreadPool pool({.name = "tierfs-test", .threads = 4, .queue_limit = 64});
    std::vector<std::jthread> submitters;
    for (int t = 0; t < 4; ++t) {
      submitters.emplace_back([&] {
        for (int i = 0; i < 500; ++i) {
          if (pool.TrySubmit([&ran, d = DropCounter(&dropped)] { ++ran; })) ++accepted;
          (void)pool.queued();
        }
      });
    }
    Eventually([&] { return accepted.load() > 100; });
    pool.Stop(ThreadPool::kDiscard);
  }
  // Every accepted task ran or was discarded; every refused one was destroyed by its submitter.
  EXPECT_LE(ran.load(), accepted.load());
  EXPECT_EQ(dropped.load(), 2000);
}

}  // namespace
}  // namespace tierfs
