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
// Thread-safe; no external synchronization needed. `fn` runs without any SingleFlight lock held.
#pragma once

#include <functional>
#include <future>
#include <memory>
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
