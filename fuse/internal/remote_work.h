// fuse/internal/remote_work — requests that may wait on the network: each gets a RequestToken
// (its CancelToken, cancelled by the request's FUSE interrupt, with request_timeout as deadline),
// and RemoteWork runs it on the libfuse worker that received it while one of the remote slots is
// free, else on its own pool of threads ("tierfs-remote-N"), which replies from there (libfuse
// allows replying from any thread). See fuse/fuse_server.h, "Interrupts and isolation".
//
// The interrupt callback only sets the token and wakes its waiters: libfuse calls it holding the
// request's lock, possibly from inside fuse_req_interrupt_func. Before the reply the callback is
// unregistered (fuse_req_interrupt_func(req, NULL, NULL) takes the same lock, so a callback
// running on another thread has finished when it returns); the token then dies with the request.
//
// Thread-safety: RequestToken is used by the one thread serving its request (Cancel* from any);
// RemoteWork is thread-safe, except that Stop() and the destructor run on one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <unordered_set>

#include "base/cancel.h"
#include "base/mutex.h"
#include "base/thread_pool.h"
#include "fuse/internal/libfuse.h"

namespace tierfs::fuse_internal {

// One kernel request's CancelToken, cancelled by the request's FUSE interrupt. Created before
// the work starts (also while it waits in the remote pool's queue); Detach() before the reply.
class RequestToken {
 public:
  RequestToken(fuse_req_t req, std::chrono::nanoseconds timeout) : req_(req), token_(timeout) {
    // May call OnInterrupt at once (already interrupted): it only cancels the token.
    fuse_req_interrupt_func(req_, &RequestToken::OnInterrupt, &token_);
  }
  ~RequestToken() { Detach(); }
  RequestToken(const RequestToken&) = delete;
  RequestToken& operator=(const RequestToken&) = delete;

  // Unregisters the interrupt callback; when this returns, the callback is not running and will
  // not run. REQUIRES: before the request is replied.
  void Detach() {
    if (req_ == nullptr) return;
    fuse_req_interrupt_func(req_, nullptr, nullptr);
    req_ = nullptr;
  }
  const CancelToken* token() const { return &token_; }
  void Cancel() { token_.Cancel(); }
  // Cancels the request because the daemon is stopping: it then fails with EIO, not EINTR.
  void CancelForShutdown() {
    ended_by_shutdown_.store(true, std::memory_order_release);
    token_.Cancel();
  }
  const std::atomic<bool>* ended_by_shutdown() const { return &ended_by_shutdown_; }

 private:
  static void OnInterrupt(fuse_req_t, void* data) { static_cast<CancelToken*>(data)->Cancel(); }

  fuse_req_t req_;
  CancelToken token_;
  std::atomic<bool> ended_by_shutdown_{false};
};

// Whether the request whose job runs on this thread was cancelled by the daemon's shutdown, not
// by its reader (ToErrno: Cancelled is then EIO, not EINTR). False outside such a job.
bool EndedByShutdown();

// Network-bound work of one request: runs with the token installed as the thread's current one,
// calls RequestToken::Detach() and replies.
using RemoteJob = std::function<void(fuse_req_t req, RequestToken* tok)>;

// The remote slots and the remote pool.
class RemoteWork {
 public:
  // `slots` jobs at most run on libfuse workers at once; `threads` pool threads
  // ("tierfs-remote-N") take the rest.
  RemoteWork(int slots, int threads, std::chrono::nanoseconds timeout);
  ~RemoteWork();  // Stop()
  RemoteWork(const RemoteWork&) = delete;
  RemoteWork& operator=(const RemoteWork&) = delete;

  // Runs `job` for `req` with a RequestToken: inline while a slot is free, else queued for the
  // pool. After BeginShutdown: replies EIO at once.
  void Dispatch(fuse_req_t req, RemoteJob job) EXCLUDES(mu_);

  // Runs `job` on this libfuse worker without a remote slot (work that does not wait on the
  // network, or only for a listing), with a token that the request's interrupt and CancelAll()
  // cancel: long walks (evict, pin) observe it.
  void RunInline(fuse_req_t req, const RemoteJob& job) EXCLUDES(mu_);

  // The daemon is stopping (Session's drain): from now on a request that would wait on the
  // network is answered EIO at once; those dispatched before go on.
  void BeginShutdown() EXCLUDES(mu_);
  // Waits until no dispatched request is unanswered, or `deadline`; true if none is.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_);
  size_t ActiveCount() EXCLUDES(mu_);
  // Ends every dispatched request with EIO (RequestToken::CancelForShutdown).
  void CancelAllForShutdown() EXCLUDES(mu_);

  // The session is over (unmounted or a signal): cancels every request waiting on the network,
  // inline or in the pool, and every one dispatched from now on.
  void CancelAll() EXCLUDES(mu_);

  // CancelAll(), then joins the pool once its queue is drained (the queued jobs reply at once,
  // cancelled). Idempotent.
  void Stop() EXCLUDES(mu_);

 private:
  bool TakeSlot();
  static void Run(fuse_req_t req, RequestToken* tok, const RemoteJob& job);
  void Done(RequestToken* tok) EXCLUDES(mu_);

  std::atomic<int> free_slots_;
  const std::chrono::nanoseconds timeout_;
  Mutex mu_;
  CondVar idle_cv_{&mu_};                                     // active_ became empty
  std::unordered_set<RequestToken*> active_ GUARDED_BY(mu_);  // dispatched, not yet replied
  bool cancel_all_ GUARDED_BY(mu_) = false;
  bool draining_ GUARDED_BY(mu_) = false;  // BeginShutdown
  // The remote pool. Its jobs are never discarded (each must reply): stopped with kDrain.
  ThreadPool pool_;
};

}  // namespace tierfs::fuse_internal
