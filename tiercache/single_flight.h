// SingleFlight — merges concurrent calls for the same key into one execution (conventions C14;
// cvmfs Fetcher: "concurrent download requests for the same id are collapsed").
//
//   SingleFlight<BlockKey, Result<BlockRef>, BlockKeyHash> sf;
//   bool merged = false;
//   Result<BlockRef> r = sf.Do(key, [&] { return Fetch(key); }, &merged);
//
// The first caller for a key (the leader) runs `fn` on its own thread; callers arriving while
// it runs wait and all receive a copy of the leader's result. The entry is removed before the
// result is published, so a call that starts after the leader finished runs `fn` again (the
// leader is expected to have filled a cache the next caller checks first). `fn` should re-check
// the caches it is about to fill: a previous leader may have finished between the caller's own
// miss and its call to Do().
//
// Waits are bounded (every wait on the network has a deadline): a follower stops
// waiting when its CancelToken is cancelled (Cancelled, → EINTR) or when the token's deadline or
// its own `deadline` passes (TimedOut, → EIO). By default the token is the thread's current one
// (CancelToken::Scope), so layers without a token parameter (the catalog) observe a FUSE
// request's interrupt. The leader's work is not stopped; its result still reaches the others.
// Value must be constructible from a Status (it is a Result<T>).
//
// A caller that fetches several keys at once (one request for a run of adjacent blocks) claims
// each with TryClaim() instead: the returned Lease makes it the leader for that key, callers of
// Do() for the key wait for the value given to Lease::Complete(). A caller that hands the work
// to another thread and waits itself uses Join(): it is the leader (a Lease to hand over) or a
// follower, and in both cases counts as a waiter until its Wait() returns; the thread doing the
// work may skip it with AbandonIfUnwaited() when every waiter has given up.
//
// Thread-safe; no external synchronization needed. `fn` runs without any SingleFlight lock held.
// Lock order: SingleFlight::mu_ → Call::mu (CancelToken's lock → Call::mu from a wakeup).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "base/cancel.h"
#include "base/mutex.h"

namespace tierfs {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class SingleFlight {
  static_assert(std::is_constructible_v<Value, Status>,
                "SingleFlight values carry Cancelled/TimedOut: use a Result<T>");

 public:
  using TimePoint = CancelToken::TimePoint;

  // One call in flight: its result, published once.
  struct Call {
    Mutex mu;
    CondVar cv{&mu};
    // Written once under mu before `ready` is set; immutable afterwards.
    std::optional<Value> value;
    std::atomic<bool> ready{false};
    int waiters GUARDED_BY(mu) = 0;  // callers waiting for the value (Join/Do followers)
  };
  using CallPtr = std::shared_ptr<Call>;

  SingleFlight() = default;
  SingleFlight(const SingleFlight&) = delete;
  SingleFlight& operator=(const SingleFlight&) = delete;

  // Runs fn() or waits for the call in flight for `key`. *merged (optional) is set to true when
  // this call waited for another's result instead of running fn. A follower's wait ends early
  // with Cancelled/TimedOut (see the file comment).
  template <typename Fn>
  Value Do(const Key& key, Fn&& fn, bool* merged = nullptr,
           const CancelToken* token = CancelToken::Current(), TimePoint deadline = TimePoint::max())
      EXCLUDES(mu_) {
    CallPtr call;
    bool leader = false;
    {
      MutexLock l(&mu_);
      auto it = calls_.find(key);
      if (it != calls_.end()) {
        call = it->second;
        MutexLock c(&call->mu);
        ++call->waiters;
      } else {
        call = std::make_shared<Call>();
        calls_.emplace(key, call);
        leader = true;
      }
    }
    if (!leader) {
      if (merged) *merged = true;
      return Wait(call, token, deadline);
    }
    if (merged) *merged = false;
    // Erased before publishing so late arrivals never pick up a finished call; published even
    // if fn throws (the Lease's abandoned value), so the key is never wedged.
    Lease lease(this, key, std::move(call), Value(Status::Internal("single-flight leader failed")));
    Value v = fn();
    lease.Complete(v);
    return v;
  }

  // Leadership of one key, taken by TryClaim() or Join(). Complete() publishes the value to the
  // callers waiting and releases the key (erased before publishing, as in Do()). A lease
  // destroyed without Complete() publishes its `abandoned` value. Movable, not copyable.
  class Lease {
   public:
    Lease(Lease&& other) noexcept
        : sf_(std::exchange(other.sf_, nullptr)),
          key_(std::move(other.key_)),
          call_(std::move(other.call_)),
          abandoned_(std::move(other.abandoned_)) {}
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease() {
      if (sf_ != nullptr) Complete(abandoned_);
    }
    const Key& key() const { return key_; }
    // REQUIRES: not completed yet.
    void Complete(const Value& v) {
      SingleFlight* sf = std::exchange(sf_, nullptr);
      if (sf == nullptr) return;
      {
        MutexLock l(&sf->mu_);
        sf->calls_.erase(key_);
      }
      Publish(*call_, v);
    }

   private:
    friend class SingleFlight;
    Lease(SingleFlight* sf, Key key, CallPtr call, Value abandoned)
        : sf_(sf), key_(std::move(key)), call_(std::move(call)), abandoned_(std::move(abandoned)) {}
    SingleFlight* sf_;
    Key key_;
    CallPtr call_;
    Value abandoned_;
  };

  // Makes the caller the leader for `key` if no call for it is in flight; nullopt otherwise.
  // The SingleFlight must outlive the lease.
  std::optional<Lease> TryClaim(const Key& key, Value abandoned) EXCLUDES(mu_) {
    auto call = std::make_shared<Call>();
    {
      MutexLock l(&mu_);
      if (calls_.count(key) != 0) return std::nullopt;
      calls_.emplace(key, call);
    }
    return Lease(this, key, std::move(call), std::move(abandoned));
  }

  // The leader's lease (when no call was in flight) and the call to Wait() on. The caller counts
  // as a waiter in both cases and must call Wait(call, ...) exactly once.
  struct Joined {
    CallPtr call;
    std::optional<Lease> lease;
  };
  Joined Join(const Key& key, Value abandoned) EXCLUDES(mu_) {
    Joined j;
    MutexLock l(&mu_);
    auto it = calls_.find(key);
    if (it != calls_.end()) {
      j.call = it->second;
    } else {
      j.call = std::make_shared<Call>();
      calls_.emplace(key, j.call);
      j.lease.emplace(Lease(this, key, j.call, std::move(abandoned)));
    }
    MutexLock c(&j.call->mu);
    ++j.call->waiters;
    return j;
  }

  // Waits for `call`'s value (see Join); Cancelled/TimedOut if the token or deadline end the
  // wait first. Uncounts the caller as a waiter.
  static Value Wait(const CallPtr& call, const CancelToken* token, TimePoint deadline) {
    Status s = WaitCancellable(
        &call->mu, &call->cv, [&call] { return call->ready.load(std::memory_order_acquire); },
        token, deadline, "waiting for a fetch in flight");
    {
      MutexLock c(&call->mu);
      --call->waiters;
    }
    if (!s.ok()) return Value(s);
    return *call->value;
  }

  // If no caller waits for `lease`'s key any more, completes it with `v` and returns true (the
  // work need not be done). Atomic with respect to Join()/Do(): no caller can join in between.
  bool AbandonIfUnwaited(Lease& lease, const Value& v) EXCLUDES(mu_) {
    {
      MutexLock l(&mu_);
      {
        MutexLock c(&lease.call_->mu);
        if (lease.call_->waiters > 0) return false;
      }
      calls_.erase(lease.key_);
      lease.sf_ = nullptr;
    }
    Publish(*lease.call_, v);
    return true;
  }

  // True when a call for `key` is running now.
  bool InFlight(const Key& key) const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return calls_.count(key) != 0;
  }

  size_t size() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return calls_.size();
  }

 private:
  static void Publish(Call& call, const Value& v) {
    MutexLock c(&call.mu);
    call.value.emplace(v);
    call.ready.store(true, std::memory_order_release);
    call.cv.SignalAll();
  }

  mutable Mutex mu_;
  std::unordered_map<Key, CallPtr, Hash> calls_ GUARDED_BY(mu_);
};

}  // namespace tierfs
