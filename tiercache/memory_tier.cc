// L1: the memory tier. A sharded LRU of BlockRefs with charge = block bytes (leveldb's Cache
// model without the handle API: a BlockRef is the handle, so a block a reader holds stays alive
// after eviction and the budget counts only blocks the cache itself holds).
//
// Budget: capacity_bytes is split evenly over the shards (fewer than asked for when the tier is
// small: MemoryTierShards) and each shard's budget is honoured strictly: room is made (unpinned
// entries evicted in EvictionList order: expired, then the block's quota group over its share,
// then LRU) before an insert, and a block that can't fit even after evicting every unpinned entry
// is declined with NoSpace (nothing is evicted in that case). Pinned entries are never evicted
// but count against the budget.
//
// Memory budget (MemoryTierOptions::memory_budget): the bytes the shards hold are charged as
// MemoryUse::kL1, and the tier is the budget's reclaimer: Shrink evicts unpinned blocks, a
// shard at a time in eviction order, until the bytes asked for are given back. The budget asks
// when block storage is allocated beyond its limit, so L1 holds what the other consumers leave
// (at most capacity_bytes) and gives it back first.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "base/logging.h"
#include "base/mutex.h"
#include "tiercache/internal/eviction_list.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace {

using tiercache_internal::EvictionList;

// One shard: the blocks in their eviction order (tiercache/internal/eviction_list.h).
// Thread-safe; every member below mu_ is guarded by it.
class Shard {
 public:
  struct Payload {
    BlockRef block;
    int64_t stored_ns = 0;  // Placement::stored_ns at insert (0: unknown)
  };
  using List = EvictionList<Payload>;

  void set_capacity(uint64_t c, int shards) {
    capacity_ = c;
    shards_ = static_cast<uint64_t>(shards);
  }

  BlockRef Lookup(const BlockKey& key) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    List::Node* n = list_.Find(key);
    if (n == nullptr) return nullptr;
    list_.Touch(key);
    return n->payload.block;
  }

  bool Contains(const BlockKey& key) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return list_.Contains(key);
  }

  void SetPinned(const BlockKey& key, bool pinned) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    list_.SetPinned(key, pinned);
  }

  std::optional<int64_t> StoredAt(const BlockKey& key) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    List::Node* n = list_.Find(key);
    if (n == nullptr || n->payload.stored_ns == 0) return std::nullopt;
    return n->payload.stored_ns;
  }

  // Returns OK, or NoSpace when the block can't fit. *evicted / *delta_used report the changes
  // for the tier-wide stats. Evicted BlockRefs are appended to *dropped so they are freed after
  // the lock is released.
  Status Insert(const BlockKey& key, const BlockRef& block, const Placement& hint,
                uint64_t* evicted, int64_t* delta_used, std::vector<BlockRef>* dropped)
      EXCLUDES(mu_) {
    const uint64_t charge = block->size();
    MutexLock l(&mu_);
    if (list_.Find(key) != nullptr) {
      // Same key => same bytes (content-addressed); refresh recency and keep the stronger pin.
      if (hint.pinned) list_.SetPinned(key, true);
      list_.Touch(key);
      return Status::OK();
    }
    // Feasible only if evicting unpinned entries can make room; otherwise decline without
    // evicting anything.
    const uint64_t need = list_.used() + charge > capacity_ ? list_.used() + charge - capacity_ : 0;
    uint64_t group_need = 0;
    if (hint.quota_group != 0 && hint.quota_bytes > 0) {
      const uint64_t share = std::max(hint.quota_bytes / shards_, charge);
      const uint64_t g = list_.group_used(hint.quota_group);
      if (g + charge > share) group_need = g + charge - share;
    }
    if (charge > capacity_ || !list_.CanFree(need, hint.quota_group, group_need)) {
      return Status::NoSpace("block does not fit the L1 shard budget (or its quota share)");
    }
    list_.Evict(need, hint.quota_group, group_need, hint.stored_ns, [&](List::Node&& n) {
      *delta_used -= static_cast<int64_t>(n.meta.charge);
      ++*evicted;
      dropped->push_back(std::move(n.payload.block));
    });
    List::Meta m;
    m.charge = charge;
    m.pinned = hint.pinned;
    m.ttl_order = hint.ttl_order;
    m.group = hint.quota_group;
    m.expires_ns = hint.ExpiresAt(hint.stored_ns);
    m.owner = hint.owner;
    list_.Add(key, m, Payload{block, hint.stored_ns});
    *delta_used += static_cast<int64_t>(charge);
    return Status::OK();
  }

  uint64_t HeldOf(const ObjectId& object, std::vector<BlockKey>* keys) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return list_.HeldOf(object, keys);
  }

  // Evicts unpinned blocks in eviction order until `bytes` are freed or none is left; returns
  // the bytes freed. The blocks go to *dropped, to be freed after the lock is released.
  uint64_t Shrink(uint64_t bytes, std::vector<BlockRef>* dropped) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return list_.Evict(bytes, 0, 0, 0,
                       [&](List::Node&& n) { dropped->push_back(std::move(n.payload.block)); });
  }

  // Returns the bytes released (0 if absent).
  uint64_t Erase(const BlockKey& key, BlockRef* dropped) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    std::optional<List::Node> n = list_.Remove(key);
    if (!n) return 0;
    *dropped = std::move(n->payload.block);
    return n->meta.charge;
  }

 private:
  // Constant after construction.
  uint64_t capacity_ = 0;
  uint64_t shards_ = 1;

  Mutex mu_;
  List list_ GUARDED_BY(mu_);
};

// Thread-safe; no external synchronization needed (each shard has its own mutex; stats are
// atomics).
class MemoryTier final : public Tier {
 public:
  explicit MemoryTier(const MemoryTierOptions& options)
      : budget_(options.memory_budget), shards_(static_cast<size_t>(MemoryTierShards(options))) {
    const uint64_t per_shard = options.capacity_bytes / shards_.size();
    for (auto& s : shards_) s.set_capacity(per_shard, static_cast<int>(shards_.size()));
    stats_.capacity = per_shard * shards_.size();
    if (budget_ != nullptr) {
      budget_->SetReclaimer([this](uint64_t bytes) { return Shrink(bytes); });
    }
  }

  ~MemoryTier() override {
    if (budget_ == nullptr) return;
    budget_->SetReclaimer(nullptr);  // waits for a Shrink in progress
    // The blocks still held go with the shards: their storage is charged as kBlocks again, and
    // released as such when freed.
    budget_->Move(MemoryUse::kL1, MemoryUse::kBlocks, stats_.bytes_used.load());
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
    Status s = ShardFor(key).Insert(key, block, hint, &evicted, &delta, &dropped);
    stats_.evictions += evicted;
    stats_.bytes_used += static_cast<uint64_t>(delta);  // two's complement: subtracts if < 0
    if (budget_ != nullptr && delta > 0) {
      budget_->Move(MemoryUse::kBlocks, MemoryUse::kL1, static_cast<uint64_t>(delta));
    } else if (budget_ != nullptr && delta < 0) {
      budget_->Move(MemoryUse::kL1, MemoryUse::kBlocks, static_cast<uint64_t>(-delta));
    }
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

  // Every shard's (a block's shard follows its key, not its object).
  uint64_t HeldOf(const ObjectId& object, std::vector<BlockKey>* keys) override {
    uint64_t blocks = 0;
    for (Shard& s : shards_) blocks += s.HeldOf(object, keys);
    return blocks;
  }

  void Erase(const BlockKey& key) override {
    BlockRef dropped;
    uint64_t freed = ShardFor(key).Erase(key, &dropped);
    stats_.bytes_used -= freed;
    if (budget_ != nullptr && freed > 0) budget_->Move(MemoryUse::kL1, MemoryUse::kBlocks, freed);
  }

  const TierStats& Stats() const override { return stats_; }

 private:
  Shard& ShardFor(const BlockKey& key) {
    // Use bytes other than the ones the in-shard hash map uses.
    uint64_t h;
    std::memcpy(&h, key.data() + 8, sizeof(h));
    return shards_[h % shards_.size()];
  }

  // The budget's reclaimer: evicts from one shard after another (starting where the last call
  // stopped, so no shard is emptied first every time) until `bytes` are given back.
  uint64_t Shrink(uint64_t bytes) {
    uint64_t freed = 0;
    std::vector<BlockRef> dropped;
    const size_t start = next_shrink_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < shards_.size() && freed < bytes; ++i) {
      const size_t before = dropped.size();
      freed += shards_[(start + i) % shards_.size()].Shrink(bytes - freed, &dropped);
      stats_.evictions += dropped.size() - before;
    }
    stats_.bytes_used -= freed;
    budget_->Move(MemoryUse::kL1, MemoryUse::kBlocks, freed);
    return freed;  // `dropped` frees the blocks nobody else holds, releasing their storage
  }

  MemoryBudget* const budget_;  // not owned; may be null
  std::vector<Shard> shards_;   // Constant size after construction.
  std::atomic<size_t> next_shrink_{0};
  TierStats stats_;
};

}  // namespace

int MemoryTierShards(const MemoryTierOptions& options) {
  int shards = std::max(1, options.shards);
  if (options.block_bytes > 0) {
    const uint64_t fit =
        options.capacity_bytes / (options.block_bytes * MemoryTierOptions::kMinBlocksPerShard);
    shards = static_cast<int>(std::clamp<uint64_t>(fit, 1, static_cast<uint64_t>(shards)));
  }
  return shards;
}

std::unique_ptr<Tier> NewMemoryTier(const MemoryTierOptions& options) {
  return std::make_unique<MemoryTier>(options);
}

}  // namespace tierfs
