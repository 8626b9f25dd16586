// SingleFlight — merges concurrent calls for the same key into one execution (conventions C14;
// cvmfs Fetcher: "concurrent download requests for the same id are collapsed").
//
//   SingleFlight<BlockKey, Result<BlockRef>, BlockKeyHash> sf;
//   bool merged = false;
//   Result<BlockRef> r = sf.Do(key, [&] { return Fetch(key); }, &merged);
//
// The first caller for a key (the leader) runs `fn` on its own thread; callers arriving while
// it runs block on a std::shared_future and all receive a copy of the leader's result. The entry
// is removed before the result is published, so a call that starts after the leader finished
// runs `fn` again (the leader is expected to have filled a cache the next caller checks first).
// `fn` should re-check the caches it is about to fill: a previous leader may have finished
// between the caller's own miss and its call to Do().
//
// A caller that fetches several keys at once (one request for a run of adjacent blocks) claims
// each with TryClaim() instead: the returned Lease makes it the leader for that key, callers of
// Do() for the key wait for the value given to Lease::Complete().
//
// Thread-safe; no external synchronization needed. `fn` runs without any SingleFlight lock held.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include "base/mutex.h"

namespace tierfs {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class SingleFlight {
 public:
  SingleFlight() = default;
  SingleFlight(const SingleFlight&) = delete;
  SingleFlight& operator=(const SingleFlight&) = delete;

  // Runs fn() or waits for the call in flight for `key`. *merged (optional) is set to true when
  // this call waited for another's result instead of running fn.
  template <typename Fn>
  Value Do(const Key& key, Fn&& fn, bool* merged = nullptr) EXCLUDES(mu_) {
    std::shared_ptr<std::promise<Value>> promise;
    std::shared_future<Value> future;
    {
      MutexLock l(&mu_);
      auto it = calls_.find(key);
      if (it != calls_.end()) {
        future = it->second;
      } else {
        promise = std::make_shared<std::promise<Value>>();
        future = promise->get_future().share();
        calls_.emplace(key, future);
      }
    }
    if (!promise) {
      if (merged) *merged = true;
      return future.get();
    }
    if (merged) *merged = false;
    // Erase before publishing so late arrivals never pick up a finished call, and even if fn
    // throws, so the key is never wedged.
    struct Cleanup {
      SingleFlight* self;
      const Key& key;
      ~Cleanup() {
        MutexLock l(&self->mu_);
        self->calls_.erase(key);
      }
    };
    try {
      Value v = [&] {
        Cleanup c{this, key};
        return fn();
      }();
      promise->set_value(v);
      return v;
    } catch (...) {
      promise->set_exception(std::current_exception());
      throw;
    }
  }

  // Leadership of one key, taken by TryClaim(). Complete() publishes the value to the callers
  // waiting in Do() and releases the key (erased before publishing, as in Do()). A lease
  // destroyed without Complete() publishes its `abandoned` value. Movable, not copyable.
  class Lease {
   public:
    Lease(Lease&& other) noexcept
        : sf_(std::exchange(other.sf_, nullptr)),
          key_(std::move(other.key_)),
          promise_(std::move(other.promise_)),
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
      promise_->set_value(v);
    }

   private:
    friend class SingleFlight;
    Lease(SingleFlight* sf, Key key, std::shared_ptr<std::promise<Value>> promise, Value abandoned)
        : sf_(sf),
          key_(std::move(key)),
          promise_(std::move(promise)),
          abandoned_(std::move(abandoned)) {}
    SingleFlight* sf_;
    Key key_;
    std::shared_ptr<std::promise<Value>> promise_;
    Value abandoned_;
  };

  // Makes the caller the leader for `key` if no call for it is in flight; nullopt otherwise.
  // The SingleFlight must outlive the lease.
  std::optional<Lease> TryClaim(const Key& key, Value abandoned) EXCLUDES(mu_) {
    auto promise = std::make_shared<std::promise<Value>>();
    {
      MutexLock l(&mu_);
      if (calls_.count(key) != 0) return std::nullopt;
      calls_.emplace(key, promise->get_future().share());
    }
    return Lease(this, key, std::move(promise), std::move(abandoned));
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
  mutable Mutex mu_;
  std::unordered_map<Key, std::shared_future<Value>, Hash> calls_ GUARDED_BY(mu_);
};

}  // namespace tierfs
