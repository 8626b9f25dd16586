// The remote slots and the remote pool (fuse/internal/remote_work.h).

#include "fuse/internal/remote_work.h"

#include <cerrno>
#include <string>
#include <utility>

#include "base/status.h"
#include "fuse/fuse_server.h"

namespace tierfs::fuse_internal {

namespace {
// Set while a network-bound request's job runs on this thread (RemoteWork::Run): the flag its
// RequestToken raises when the daemon's shutdown, not the reader, cancelled it.
thread_local const std::atomic<bool>* t_ended_by_shutdown = nullptr;
}  // namespace

bool EndedByShutdown() {
  return t_ended_by_shutdown != nullptr && t_ended_by_shutdown->load(std::memory_order_acquire);
}

namespace {

ThreadPoolOptions PoolOptions(int threads) {
  ThreadPoolOptions o;
  o.name = "tierfs-remote";
  o.threads = threads;
  o.stop_mode = ThreadPool::kDrain;
  return o;
}

}  // namespace

RemoteWork::RemoteWork(int slots, int threads, std::chrono::nanoseconds timeout)
    : free_slots_(slots), timeout_(timeout), pool_(PoolOptions(threads)) {}

RemoteWork::~RemoteWork() { Stop(); }

void RemoteWork::Dispatch(fuse_req_t req, RemoteJob job) {
  auto tok = std::make_shared<RequestToken>(req, timeout_);
  bool refuse = false;
  {
    MutexLock l(&mu_);
    refuse = draining_;
  }
  if (refuse) {
    // The daemon is stopping: nothing new waits on the network (cached reads still answer).
    tok->Detach();
    fuse_reply_err(req, EIO);
    return;
  }
  const bool slot = TakeSlot();
  {
    MutexLock l(&mu_);
    if (cancel_all_) tok->Cancel();
    active_.insert(tok.get());
  }
  if (!slot) {
    // Refused only when the pool has no threads or is stopping: then on this worker.
    auto task = [this, req, tok, job] {
      Run(req, tok.get(), job);
      Done(tok.get());
    };
    if (pool_.TrySubmit(std::move(task))) return;
  }
  // A free slot (or no pool, or shutting down): on this libfuse worker.
  Run(req, tok.get(), job);
  if (slot) free_slots_.fetch_add(1, std::memory_order_acq_rel);
  Done(tok.get());
}

void RemoteWork::RunInline(fuse_req_t req, const RemoteJob& job) {
  RequestToken tok(req, timeout_);
  {
    MutexLock l(&mu_);
    if (cancel_all_) tok.Cancel();
    active_.insert(&tok);
  }
  Run(req, &tok, job);
  Done(&tok);
}

void RemoteWork::BeginShutdown() {
  MutexLock l(&mu_);
  draining_ = true;
}

bool RemoteWork::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  MutexLock l(&mu_);
  while (!active_.empty()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    idle_cv_.WaitFor(deadline - now);
  }
  return true;
}

size_t RemoteWork::ActiveCount() {
  MutexLock l(&mu_);
  return active_.size();
}

void RemoteWork::CancelAllForShutdown() {
  MutexLock l(&mu_);
  for (RequestToken* t : active_) t->CancelForShutdown();
}

void RemoteWork::CancelAll() {
  MutexLock l(&mu_);
  cancel_all_ = true;
  for (RequestToken* t : active_) t->Cancel();
}

void RemoteWork::Stop() {
  CancelAll();
  pool_.Stop(ThreadPool::kDrain);  // the queued jobs run, cancelled: each replies at once
}

bool RemoteWork::TakeSlot() {
  int n = free_slots_.load(std::memory_order_acquire);
  while (n > 0) {
    if (free_slots_.compare_exchange_weak(n, n - 1, std::memory_order_acq_rel)) return true;
  }
  return false;
}

void RemoteWork::Run(fuse_req_t req, RequestToken* tok, const RemoteJob& job) {
  t_ended_by_shutdown = tok->ended_by_shutdown();
  // Interrupted (or past its deadline) while queued: reply at once.
  if (Status s = tok->token()->Check("request"); !s.ok()) {
    tok->Detach();
    fuse_reply_err(req, ToErrno(s));
  } else {
    CancelToken::Scope scope(tok->token());
    job(req, tok);
  }
  t_ended_by_shutdown = nullptr;
}

void RemoteWork::Done(RequestToken* tok) {
  MutexLock l(&mu_);
  active_.erase(tok);
  if (active_.empty()) idle_cv_.SignalAll();
}

}  // namespace tierfs::fuse_internal
