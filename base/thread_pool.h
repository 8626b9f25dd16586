// ThreadPool: a fixed set of owned, named std::jthread workers serving one FIFO queue of tasks
// (conventions C12). It is the one pool of the daemon: the cache's fetch and prefetch pools, the
// L3 uploaders and read helpers, the catalog's refresher and the FUSE remote pool are instances.
//
// Tasks. A task is any move-only callable taking `const std::stop_token&` or nothing. Each has a
// cost (1 unless given); the queued tasks' total cost is bounded by `queue_limit`, so a pool can
// bound its queue in tasks or in what the tasks carry (blocks, bytes). TrySubmit never blocks: a
// task that does not fit is refused and left as it was (not moved from), and the caller decides
// (drop it, fail it, or run it on its own thread). A pool of 0 threads refuses every task.
//
// Stopping. RequestStop(mode) stops taking tasks and, with kDiscard, destroys the queued ones
// unrun (a task's destructor is where it can tell its waiters it was dropped) and requests stop
// on the token the running tasks were given; with kDrain the queued tasks still run, with a
// token not stopped. Join() then waits for the workers to exit, each after the task it is in.
// Stop() is both; the destructor does Stop(options.stop_mode) if it was not done before.
//
// Thread-safe; no external synchronization needed. mu_ is a leaf lock: tasks run without it, and
// discarded tasks are destroyed outside it. REQUIRES: Join/Stop are not called from a task of the
// same pool (a worker cannot join itself).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"

namespace tierfs {

struct ThreadPoolOptions {
  // Workers are named "<name>-N" (N from 0), or all "<name>" when number_threads is false, cut
  // to the 15 characters a Linux thread name may have.
  std::string name = "tierfs-pool";
  bool number_threads = true;
  // Worker threads; 0 makes a pool that runs nothing (TrySubmit refuses every task).
  int threads = 1;
  // Bound on the total cost of the queued (not yet started) tasks.
  size_t queue_limit = SIZE_MAX;
  // What the destructor does with queued tasks when the pool was not stopped before.
  enum class StopMode { kDrain, kDiscard };
  StopMode stop_mode = StopMode::kDiscard;
};

class ThreadPool {
 public:
  using StopMode = ThreadPoolOptions::StopMode;
  static constexpr StopMode kDrain = StopMode::kDrain;
  static constexpr StopMode kDiscard = StopMode::kDiscard;

  // A move-only callable run as task(stop_token).
  class Task {
   public:
    Task() = default;
    template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, Task>) explicit Task(F&& f)
        : impl_(std::make_unique<Model<std::decay_t<F>>>(std::forward<F>(f))) {}
    Task(Task&&) noexcept = default;
    Task& operator=(Task&&) noexcept = default;

    explicit operator bool() const { return impl_ != nullptr; }
    // REQUIRES: *this holds a callable.
    void operator()(const std::stop_token& st) { impl_->Run(st); }

   private:
    struct Concept {
      virtual ~Concept() = default;
      virtual void Run(const std::stop_token& st) = 0;
    };
    template <typename F>
    struct Model final : Concept {
      explicit Model(F&& f) : fn(std::move(f)) {}
      explicit Model(const F& f) : fn(f) {}
      void Run(const std::stop_token& st) override {
        if constexpr (std::is_invocable_v<F&, const std::stop_token&>) {
          fn(st);
        } else {
          fn();
        }
      }
      F fn;
    };
    std::unique_ptr<Concept> impl_;
  };

  // Starts options.threads workers (a negative count is taken as 0).
  explicit ThreadPool(ThreadPoolOptions options);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  // Queues `f` (cost `cost`) and returns true. Returns false, leaving `f` as it was, when the
  // pool has no threads, is stopping, or the queued cost would exceed queue_limit.
  template <typename F>
  [[nodiscard]] bool TrySubmit(F&& f, size_t cost = 1) EXCLUDES(mu_) {
    {
      MutexLock l(&mu_);
      if (!AcceptsLocked(cost)) return false;
      queue_.push_back(Entry{Task(std::forward<F>(f)), cost});
      queued_cost_ += cost;
    }
    work_cv_.Signal();
    return true;
  }

  // Tasks queued and not yet taken by a worker, their total cost, and tasks running now.
  size_t queued() const EXCLUDES(mu_);
  size_t queued_cost() const EXCLUDES(mu_);
  size_t running() const EXCLUDES(mu_);
  int threads() const { return static_cast<int>(workers_.size()); }

  // Waits until no task is queued or running, or `deadline`; true if the pool is idle.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_);

  // Stops taking tasks; see the file comment for `mode`. Returns how many queued tasks were
  // discarded (0 with kDrain). Idempotent; a later kDiscard still discards what a kDrain left.
  size_t RequestStop(StopMode mode) EXCLUDES(mu_);
  // Waits for the workers to exit. REQUIRES: RequestStop was called.
  void Join() EXCLUDES(join_mu_);
  // RequestStop(mode), then Join(). Returns how many tasks were discarded.
  size_t Stop(StopMode mode);

 private:
  struct Entry {
    Task task;
    size_t cost = 0;
  };

  bool AcceptsLocked(size_t cost) const REQUIRES(mu_);
  void Loop(int n);

  // Constant after construction.
  const ThreadPoolOptions options_;
  std::stop_source stop_;  // requested by RequestStop(kDiscard) and Join; thread-safe itself

  // State below is protected by mu_.
  mutable Mutex mu_;
  CondVar work_cv_{&mu_};  // a task was queued, or stopping
  CondVar idle_cv_{&mu_};  // the pool became idle
  std::deque<Entry> queue_ GUARDED_BY(mu_);
  size_t queued_cost_ GUARDED_BY(mu_) = 0;
  size_t running_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;

  Mutex join_mu_;  // serializes Join; held while joining (never by a worker)
  // Written by the constructor only; joined (not resized) by Join. Declared last: the workers
  // start once every member above is initialised.
  std::vector<std::jthread> workers_;
};

}  // namespace tierfs
