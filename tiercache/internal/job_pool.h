// JobPool: a bounded queue of jobs served by a fixed set of owned, named threads (the cache's
// fetch pool, "tierfs-fetch-N"). The pool knows nothing of what a job does: each is handed to the
// handler given at Start, on one of the pool's threads. Jobs still queued when the pool stops are
// destroyed unrun (a job's destructor is where it tells its waiters it was dropped).
//
// Thread-safe; no external synchronization needed. mu_ is a leaf lock: the handler runs without
// it, and queued jobs are destroyed outside it.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"

namespace tierfs::tiercache_internal {

template <typename Job>
class JobPool {
 public:
  using Handler = std::function<void(Job&)>;

  // `name`: the threads are "<name>-N" (cut to the 15 characters a thread name may have).
  // `queue_limit`: jobs queued beyond it are refused (TrySubmit).
  JobPool(std::string name, size_t queue_limit)
      : name_(std::move(name)), queue_limit_(queue_limit), cv_(&mu_) {}
  JobPool(const JobPool&) = delete;
  JobPool& operator=(const JobPool&) = delete;
  ~JobPool() {
    RequestStop();
    Join();
  }

  // Starts `threads` threads running `handler`. REQUIRES: called once, before TrySubmit.
  void Start(int threads, Handler handler) {
    handler_ = std::move(handler);
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this, i](std::stop_token st) { Loop(st, i); });
    }
  }

  // Threads the pool runs (0: nothing is ever run; callers do the work themselves).
  size_t threads() const { return threads_.size(); }

  // Queues `job` and returns true; false when queue_limit jobs are queued already, and then
  // `job` is left as it was (not moved from).
  bool TrySubmit(Job&& job) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    if (queue_.size() >= queue_limit_) return false;
    queue_.push_back(std::move(job));
    cv_.Signal();
    return true;
  }

  // Jobs queued and not yet taken by a thread.
  size_t queued() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return queue_.size();
  }

  // Asks the threads to stop once their current job is done and destroys the queued jobs.
  void RequestStop() EXCLUDES(mu_) {
    for (auto& t : threads_) t.request_stop();
    std::deque<Job> dropped;
    {
      MutexLock l(&mu_);
      dropped.swap(queue_);
    }
    dropped.clear();
    cv_.SignalAll();
  }

  // Waits for the threads to exit. REQUIRES: RequestStop was called.
  void Join() { threads_.clear(); }

 private:
  void Loop(const std::stop_token& st, int n) {
    const std::string name = name_ + "-" + std::to_string(n);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    while (true) {
      std::optional<Job> job;
      {
        MutexLock l(&mu_);
        while (queue_.empty() && !st.stop_requested()) cv_.Wait();
        if (st.stop_requested()) return;
        job.emplace(std::move(queue_.front()));
        queue_.pop_front();
      }
      handler_(*job);
    }
  }

  // Constant after construction (handler_: after Start).
  const std::string name_;
  const size_t queue_limit_;
  Handler handler_;

  // State below is protected by mu_.
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Job> queue_ GUARDED_BY(mu_);

  // Declared last: destroyed (joined) first.
  std::vector<std::jthread> threads_;
};

}  // namespace tierfs::tiercache_internal
