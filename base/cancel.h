// CancelToken — cancellation and a deadline for one request (interrupts and deadlines).
//
// fuse/ creates one token per kernel request that may wait on the network, cancels it from the
// request's FUSE interrupt callback (a reader's ^C or SIGKILL), and passes it down
// (Filesystem → TieredCache). Code that waits (a single-flight follower, a reader waiting for a
// block being fetched on the fetch pool, an HTTP request's completion) observes it: the wait ends
// with Cancelled (→ EINTR) as soon as Cancel() is called, or with TimedOut (→ EIO) when the
// deadline passes. The work being waited for is not stopped by the token; whoever owns that work
// decides (tiercache: an origin fetch goes on and fills the cache for other readers).
//
// A token is also installed as the thread's current token for the duration of a CancelScope, so
// that waits in layers whose interfaces take no token (the catalog's listing single-flight, the
// HTTP engine's completion wait) observe the request's cancellation and deadline too.
//
// Waiting. A waiter registers a wakeup with OnCancel() (an RAII Registration), then waits on its
// own condition variable, re-checking cancelled() under its own mutex; Cancel() runs every
// registered wakeup. A wakeup must only lock the waiter's mutex and signal: it may run on a
// libfuse thread that holds libfuse's request lock.
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>

#include "base/mutex.h"
#include "base/status.h"

namespace tierfs {

class CancelToken {
 public:
  using SteadyClock = std::chrono::steady_clock;
  using TimePoint = SteadyClock::time_point;

  // Never cancelled until Cancel(); no deadline.
  CancelToken() = default;
  // Never cancelled until Cancel(); expires `timeout` from now.
  explicit CancelToken(std::chrono::nanoseconds timeout);
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  // Idempotent. Runs every registered wakeup (on this thread) the first time.
  void Cancel() EXCLUDES(mu_);
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  TimePoint deadline() const { return deadline_; }
  // OK, Cancelled (after Cancel) or TimedOut (deadline passed). `what` names the wait.
  Status Check(std::string_view what) const;

  // A registered wakeup; unregisters on destruction. After the destructor returns the wakeup is
  // not running and will not run.
  class Registration {
   public:
    Registration() = default;
    Registration(Registration&& o) noexcept : token_(o.token_), id_(o.id_) { o.token_ = nullptr; }
    Registration& operator=(Registration&&) = delete;
    ~Registration();

   private:
    friend class CancelToken;
    Registration(const CancelToken* t, uint64_t id) : token_(t), id_(id) {}
    const CancelToken* token_ = nullptr;
    uint64_t id_ = 0;
  };
  // Registers `wake`, run once by Cancel(). If the token is already cancelled, `wake` is not
  // registered (the caller's check of cancelled() under its own lock sees it).
  [[nodiscard]] Registration OnCancel(std::function<void()> wake) const EXCLUDES(mu_);

  // The token of the innermost CancelScope on this thread, or null.
  static const CancelToken* Current();

  // Makes `token` (may be null) the thread's current token until destroyed.
  class Scope {
   public:
    explicit Scope(const CancelToken* token);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const CancelToken* const previous_;
  };

 private:
  const TimePoint deadline_ = TimePoint::max();
  std::atomic<bool> cancelled_{false};
  // Held while the wakeups run, so that a Registration's destructor waits for a running one.
  // Registering a wakeup is bookkeeping, not a change of the token's state: mutable.
  mutable Mutex mu_;
  mutable uint64_t next_id_ GUARDED_BY(mu_) = 1;
  mutable std::map<uint64_t, std::function<void()>> wakeups_ GUARDED_BY(mu_);
};

// Locks `mu` and waits on `cv` (bound to `mu`) until done() is true, `token` (may be null) is
// cancelled or its deadline passes, or `deadline` passes. Returns OK when done() became true,
// else Cancelled or TimedOut (`what` names the wait in the error). done() is evaluated with `mu`
// held. REQUIRES: `mu` not held (the wakeup registered with the token locks it, and Cancel()
// holds the token's lock while running wakeups: the registration must come first).
Status WaitCancellable(Mutex* mu, CondVar* cv, const std::function<bool()>& done,
                       const CancelToken* token, CancelToken::TimePoint deadline,
                       std::string_view what) EXCLUDES(mu);

}  // namespace tierfs
