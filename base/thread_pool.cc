#include "base/thread_pool.h"

#include <pthread.h>

#include <algorithm>

namespace tierfs {

ThreadPool::ThreadPool(ThreadPoolOptions options) : options_(std::move(options)) {
  const int n = std::max(0, options_.threads);
  workers_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) workers_.emplace_back([this, i] { Loop(i); });
}

ThreadPool::~ThreadPool() { Stop(options_.stop_mode); }

bool ThreadPool::AcceptsLocked(size_t cost) const {
  if (workers_.empty() || stopping_) return false;
  return cost <= options_.queue_limit && queued_cost_ <= options_.queue_limit - cost;
}

size_t ThreadPool::queued() const {
  MutexLock l(&mu_);
  return queue_.size();
}

size_t ThreadPool::queued_cost() const {
  MutexLock l(&mu_);
  return queued_cost_;
}

size_t ThreadPool::running() const {
  MutexLock l(&mu_);
  return running_;
}

bool ThreadPool::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  MutexLock l(&mu_);
  while (!queue_.empty() || running_ > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    idle_cv_.WaitFor(deadline - now);
  }
  return true;
}

size_t ThreadPool::RequestStop(StopMode mode) {
  std::deque<Entry> dropped;
  {
    MutexLock l(&mu_);
    stopping_ = true;
    if (mode == kDiscard) {
      dropped.swap(queue_);
      queued_cost_ = 0;
    }
  }
  if (mode == kDiscard) stop_.request_stop();
  work_cv_.SignalAll();
  const size_t n = dropped.size();
  dropped.clear();  // outside mu_: a task's destructor may take other locks
  {
    MutexLock l(&mu_);
    if (queue_.empty() && running_ == 0) idle_cv_.SignalAll();
  }
  return n;
}

void ThreadPool::Join() {
  MutexLock l(&join_mu_);
  for (auto& w : workers_) {
    if (w.joinable()) w.join();
  }
  stop_.request_stop();
}

size_t ThreadPool::Stop(StopMode mode) {
  const size_t n = RequestStop(mode);
  Join();
  return n;
}

void ThreadPool::Loop(int n) {
  std::string name = options_.name;
  if (options_.number_threads) name += "-" + std::to_string(n);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  const std::stop_token token = stop_.get_token();
  while (true) {
    Entry e;
    {
      MutexLock l(&mu_);
      while (queue_.empty() && !stopping_) work_cv_.Wait();
      if (queue_.empty()) return;  // stopping, and nothing (left) to drain
      e = std::move(queue_.front());
      queue_.pop_front();
      queued_cost_ -= e.cost;
      ++running_;
    }
    e.task(token);
    e.task = Task();  // destroyed before the pool can look idle
    MutexLock l(&mu_);
    --running_;
    if (queue_.empty() && running_ == 0) idle_cv_.SignalAll();
  }
}

}  // namespace tierfs
