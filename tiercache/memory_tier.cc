// L1: the memory tier. A sharded LRU of BlockRefs with charge = block bytes (leveldb's Cache
// model without the handle API: a BlockRef is the handle, so a block a reader holds stays alive
// after eviction and the budget counts only blocks the cache itself holds).
//
// Budget: capacity_bytes is split evenly over the shards and each shard's budget is honoured
// strictly: room is made (LRU unpinned entries evicted) before an insert, and a block that can't
// fit even after evicting every unpinned entry is declined with NoSpace (nothing is evicted in
// that case). Pinned entries are never evicted but count against the budget.
#include <algorithm>
#include <cstring>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/logging.h"
#include "base/mutex.h"
#include "tiercache/internal/block_key_hash.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace {

using tiercache_internal::BlockKeyHash;

// One shard: an LRU list (front = most recent) and an index into it.
// Thread-safe; every member below mu_ is guarded by it.
class Shard {
 public:
  struct Entry {
    BlockKey key;
    BlockRef block;
    uint64_t charge = 0;
    bool pinned = false;
    int64_t stored_ns = 0;  // Placement::stored_ns at insert (0: unknown)
  };

  void set_capacity(uint64_t c) { capacity_ = c; }

  BlockRef Lookup(const BlockKey& key) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->block;
  }

  bool Contains(const BlockKey& key) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return index_.count(key) != 0;
  }

  // Returns OK, or NoSpace when the block can't fit. *evicted / *delta_used report the changes
  // for the tier-wide stats. Evicted BlockRefs are appended to *dropped so they are freed after
  // the lock is released.
  void SetPinned(const BlockKey& key, bool pinned) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    auto it = index_.find(key);
    if (it == index_.end() || it->second->pinned == pinned) return;
    it->second->pinned = pinned;
    if (pinned) {
      pinned_bytes_ += it->second->charge;
    } else {
      pinned_bytes_ -= it->second->charge;
    }
  }

  std::optional<int64_t> StoredAt(const BlockKey& key) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    auto it = index_.find(key);
    if (it == index_.end() || it->second->stored_ns == 0) return std::nullopt;
    return it->second->stored_ns;
  }

  Status Insert(const BlockKey& key, const BlockRef& block, bool pinned, int64_t stored_ns,
                uint64_t* evicted, int64_t* delta_used, std::vector<BlockRef>* dropped)
      EXCLUDES(mu_) {
    const uint64_t charge = block->size();
    MutexLock l(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      // Same key ⇒ same bytes (content-addressed); refresh recency and keep the stronger pin.
      if (pinned && !it->second->pinned) {
        it->second->pinned = true;
        pinned_bytes_ += it->second->charge;
      }
      lru_.splice(lru_.begin(), lru_, it->second);
      return Status::OK();
    }
    // Feasible only if evicting every unpinned entry would make room; otherwise decline
    // without evicting anything.
    if (charge > capacity_ || pinned_bytes_ + charge > capacity_) {
      return Status::NoSpace("block does not fit the L1 shard budget");
    }
    // Evict from the cold end, skipping pinned entries, until the block fits.
    auto victim = lru_.end();
    while (used_ + charge > capacity_ && victim != lru_.begin()) {
      --victim;
      if (victim->pinned) continue;
      used_ -= victim->charge;
      *delta_used -= static_cast<int64_t>(victim->charge);
      ++*evicted;
      dropped->push_back(std::move(victim->block));
      index_.erase(victim->key);
      victim = lru_.erase(victim);
    }
    if (used_ + charge > capacity_) {
      return Status::NoSpace("L1 shard full of pinned blocks");
    }
    lru_.push_front(Entry{key, block, charge, pinned, stored_ns});
    index_[key] = lru_.begin();
    used_ += charge;
    if (pinned) pinned_bytes_ += charge;
    *delta_used += static_cast<int64_t>(charge);
    return Status::OK();
  }

  // Returns the bytes released (0 if absent).
  uint64_t Erase(const BlockKey& key, BlockRef* dropped) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return 0;
    const uint64_t charge = it->second->charge;
    if (it->second->pinned) pinned_bytes_ -= charge;
    *dropped = std::move(it->second->block);
    lru_.erase(it->second);
    index_.erase(it);
    used_ -= charge;
    return charge;
  }

 private:
  uint64_t capacity_ = 0;  // Constant after construction.

  Mutex mu_;
  std::list<Entry> lru_ GUARDED_BY(mu_);
  std::unordered_map<BlockKey, std::list<Entry>::iterator, BlockKeyHash> index_ GUARDED_BY(mu_);
  uint64_t used_ GUARDED_BY(mu_) = 0;
  uint64_t pinned_bytes_ GUARDED_BY(mu_) = 0;
};

// Thread-safe; no external synchronization needed (each shard has its own mutex; stats are
// atomics).
class MemoryTier final : public Tier {
 public:
  explicit MemoryTier(const MemoryTierOptions& options)
      : shards_(static_cast<size_t>(std::max(1, options.shards))) {
    const uint64_t per_shard = options.capacity_bytes / shards_.size();
    for (auto& s : shards_) s.set_capacity(per_shard);
    stats_.capacity = per_shard * shards_.size();
  }

  std::string_view name() const override { return "l1"; }

  Result<BlockRef> Read(const BlockKey& key) override {
    BlockRef b = ShardFor(key).Lookup(key);
    if (!b) {
      ++stats_.misses;
      return Status::NotFound("l1 miss");
    }
    ++stats_.hits;
    stats_.bytes_read += b->size();
    return b;
  }

  Status Insert(const BlockKey& key, const BlockRef& block, const Placement& hint) override {
    if (!block) return Status::InvalidArgument("null block");
    uint64_t evicted = 0;
    int64_t delta = 0;
    std::vector<BlockRef> dropped;
    Status s =
        ShardFor(key).Insert(key, block, hint.pinned, hint.stored_ns, &evicted, &delta, &dropped);
    stats_.evictions += evicted;
    stats_.bytes_used += static_cast<uint64_t>(delta);  // two's complement: subtracts if < 0
    if (s.ok() && delta > 0) {
      ++stats_.inserts;
      stats_.bytes_inserted += block->size();
    }
    return s;
  }

  bool Contains(const BlockKey& key) override { return ShardFor(key).Contains(key); }

  void SetPinned(const BlockKey& key, bool pinned) override {
    ShardFor(key).SetPinned(key, pinned);
  }
  std::optional<int64_t> StoredAt(const BlockKey& key) override {
    return ShardFor(key).StoredAt(key);
  }

  void Erase(const BlockKey& key) override {
    BlockRef dropped;
    uint64_t freed = ShardFor(key).Erase(key, &dropped);
    stats_.bytes_used -= freed;
  }

  const TierStats& Stats() const override { return stats_; }

 private:
  Shard& ShardFor(const BlockKey& key) {
    // Use bytes other than the ones the in-shard hash map uses.
    uint64_t h;
    std::memcpy(&h, key.data() + 8, sizeof(h));
    return shards_[h % shards_.size()];
  }

  std::vector<Shard> shards_;  // Constant size after construction.
  TierStats stats_;
};

}  // namespace

std::unique_ptr<Tier> NewMemoryTier(const MemoryTierOptions& options) {
  return std::make_unique<MemoryTier>(options);
}

}  // namespace tierfs
