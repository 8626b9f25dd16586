// The eviction order of a host tier (an L1 shard, L2): which blocks leave first when room is
// needed. Both tiers keep their blocks in one of these, so they evict by the same rules:
//
//   1. Blocks whose TTL has passed (expires_ns <= now) go before any live block, the soonest
//      expired first: they would be refetched on their next read anyway.
//   2. A quota group ([[policy]] quota) that would exceed its budget gives up its own least
//      recently used blocks, so one dataset cannot push the others out.
//   3. Otherwise the least recently used block of the tier goes.
//
// "Recently used" is the insert or the last Touch(). A block stored under policy=ttl
// (Meta::ttl_order) is not refreshed by Touch(), so it leaves in the order it was stored, which
// for one TTL is the order it expires. Pinned blocks never leave (Remove() still drops them).
//
// It also indexes its blocks by owner (Meta::owner: the object they belong to), so that what
// the tier holds of one object is counted in O(1) and listed at the cost of what it holds of
// it (Tier::HeldOf), never of the object's size: the nodes of one owner are chained through
// the nodes themselves (two pointers a block, no allocation of their own).
//
// Memory only; L2 rebuilds it from its block records at start-up (metastore/FORMAT.md).
// Not thread-safe: the owning tier calls it under its own mutex.
#pragma once

#include <cstdint>
#include <limits>
#include <list>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "metastore/meta_store.h"
#include "tiercache/internal/block_key_hash.h"

namespace tierfs::tiercache_internal {

template <typename Payload>
class EvictionList {
 public:
  static constexpr int64_t kNoExpiry = std::numeric_limits<int64_t>::max();

  struct Meta {
    uint64_t charge = 0;  // bytes the block counts against the budget
    bool pinned = false;
    bool ttl_order = false;  // policy=ttl: Touch() does not refresh it
    uint32_t group = 0;      // quota group; 0: none
    int64_t expires_ns = kNoExpiry;
    BlockOwner owner = {};  // unknown (zero): not indexed by owner
  };
  struct Node {
    BlockKey key;
    Meta meta;
    Payload payload;
    // The chain of the blocks of meta.owner (while in the list; null at its ends).
    Node* owner_prev = nullptr;
    Node* owner_next = nullptr;
  };

  EvictionList() = default;
  EvictionList(const EvictionList&) = delete;
  EvictionList& operator=(const EvictionList&) = delete;

  Node* Find(const BlockKey& key) {
    auto ix = index_.find(key);
    return ix == index_.end() ? nullptr : &*ix->second.it;
  }
  bool Contains(const BlockKey& key) const { return index_.count(key) != 0; }
  size_t size() const { return index_.size(); }
  uint64_t used() const { return used_; }
  uint64_t pinned() const { return pinned_; }
  uint64_t group_used(uint32_t group) const {
    auto g = groups_.find(group);
    return g == groups_.end() ? 0 : g->second.used;
  }

  // Whole blocks held of `object` (Meta::owner.chunk false), and when `keys` is not null, every
  // key held for it (blocks and sparse entries) appended to *keys.
  uint64_t HeldOf(const ObjectId& object, std::vector<BlockKey>* keys) const {
    auto o = owners_.find(object);
    if (o == owners_.end()) return 0;
    if (keys != nullptr) {
      for (const Node* n = o->second.head; n != nullptr; n = n->owner_next) keys->push_back(n->key);
    }
    return o->second.blocks;
  }

  // Adds a block as the most recent one. REQUIRES: !Contains(key).
  Node& Add(const BlockKey& key, const Meta& meta, Payload payload) {
    lru_.push_front(Node{key, meta, std::move(payload)});
    Pos p;
    p.it = lru_.begin();
    used_ += meta.charge;
    if (meta.pinned) pinned_ += meta.charge;
    if (meta.group != 0) {
      Group& g = groups_[meta.group];
      g.lru.push_front(p.it);
      p.git = g.lru.begin();
      g.used += meta.charge;
      if (meta.pinned) g.pinned += meta.charge;
    }
    if (meta.expires_ns != kNoExpiry) {
      p.eit = expiry_.emplace(meta.expires_ns, key);
      p.has_expiry = true;
    }
    if (meta.owner.known()) {
      Owned& o = owners_[meta.owner.object];
      Node* n = &*p.it;
      n->owner_next = o.head;
      if (o.head != nullptr) o.head->owner_prev = n;
      o.head = n;
      if (!meta.owner.chunk) ++o.blocks;
    }
    index_.emplace(key, p);
    return *p.it;
  }

  // Marks a block used now (unless it is ttl-ordered). No-op if absent.
  void Touch(const BlockKey& key) {
    auto ix = index_.find(key);
    if (ix == index_.end() || ix->second.it->meta.ttl_order) return;
    const Pos& p = ix->second;
    lru_.splice(lru_.begin(), lru_, p.it);
    if (p.it->meta.group != 0) {
      Group& g = groups_[p.it->meta.group];
      g.lru.splice(g.lru.begin(), g.lru, p.git);
    }
  }

  // Returns true if the pin state changed.
  bool SetPinned(const BlockKey& key, bool pinned) {
    Node* n = Find(key);
    if (n == nullptr || n->meta.pinned == pinned) return false;
    n->meta.pinned = pinned;
    const uint64_t c = n->meta.charge;
    uint64_t* g = n->meta.group != 0 ? &groups_[n->meta.group].pinned : nullptr;
    if (pinned) {
      pinned_ += c;
      if (g) *g += c;
    } else {
      pinned_ -= c;
      if (g) *g -= c;
    }
    return true;
  }

  std::optional<Node> Remove(const BlockKey& key) {
    auto ix = index_.find(key);
    if (ix == index_.end()) return std::nullopt;
    return RemoveAt(ix);
  }

  // Whether evicting unpinned blocks can free `need` bytes in all and `group_need` bytes of
  // `group` (which count towards `need` too).
  bool CanFree(uint64_t need, uint32_t group = 0, uint64_t group_need = 0) const {
    if (need > used_ - pinned_) return false;
    if (group_need == 0) return true;
    if (group == 0) return false;
    auto g = groups_.find(group);
    return g != groups_.end() && group_need <= g->second.used - g->second.pinned;
  }

  // Evicts unpinned blocks by the rules at the top of this file until `need` bytes are freed in
  // all and `group_need` of them from `group`, calling on_evict(Node&&) for each (the node is
  // already out of the list). Returns the bytes freed. Frees less only if !CanFree(...).
  template <typename F>
  uint64_t Evict(uint64_t need, uint32_t group, uint64_t group_need, int64_t now_ns, F&& on_evict) {
    uint64_t freed = 0, group_freed = 0;
    auto unmet = [&] { return freed < need || group_freed < group_need; };
    auto take = [&](typename Index::iterator ix) {
      Node n = RemoveAt(ix);
      freed += n.meta.charge;
      if (group != 0 && n.meta.group == group) group_freed += n.meta.charge;
      on_evict(std::move(n));
    };
    // 1. Expired blocks, soonest expiry first, where they help.
    for (auto e = expiry_.begin(); e != expiry_.end() && e->first <= now_ns && unmet();) {
      auto ix = index_.find(e->second);
      ++e;  // RemoveAt erases the expiry entry
      const Meta& m = ix->second.it->meta;
      const bool helps = freed < need || (group != 0 && m.group == group);
      if (!m.pinned && helps) take(ix);
    }
    // 2. The group's own least recently used blocks.
    if (group != 0 && group_freed < group_need) {
      auto g = groups_.find(group);
      if (g != groups_.end()) {
        auto it = g->second.lru.end();
        while (group_freed < group_need && it != g->second.lru.begin()) {
          --it;
          if ((*it)->meta.pinned) continue;
          auto ix = index_.find((*it)->key);
          ++it;  // RemoveAt erases this list node; keep a valid position after it
          take(ix);
        }
      }
    }
    // 3. The tier's least recently used blocks.
    auto it = lru_.end();
    while (freed < need && it != lru_.begin()) {
      --it;
      if (it->meta.pinned) continue;
      auto ix = index_.find(it->key);
      ++it;
      take(ix);
    }
    return freed;
  }

 private:
  using List = std::list<Node>;  // front: most recent
  using GroupList = std::list<typename List::iterator>;
  using ExpiryMap = std::multimap<int64_t, BlockKey>;
  struct Pos {
    typename List::iterator it;
    typename GroupList::iterator git;  // valid if it->meta.group != 0
    typename ExpiryMap::iterator eit;  // valid if has_expiry
    bool has_expiry = false;
  };
  using Index = std::unordered_map<BlockKey, Pos, BlockKeyHash>;
  struct Group {
    uint64_t used = 0;
    uint64_t pinned = 0;
    GroupList lru;  // front: most recent
  };
  // The first node of one owner's chain, and how many of its nodes are whole blocks.
  struct Owned {
    Node* head = nullptr;
    uint64_t blocks = 0;
  };

  Node RemoveAt(typename Index::iterator ix) {
    Pos p = ix->second;
    Unchain(&*p.it);
    Node n = std::move(*p.it);
    used_ -= n.meta.charge;
    if (n.meta.pinned) pinned_ -= n.meta.charge;
    if (n.meta.group != 0) {
      Group& g = groups_[n.meta.group];  // never erased: a handful of groups at most
      g.used -= n.meta.charge;
      if (n.meta.pinned) g.pinned -= n.meta.charge;
      g.lru.erase(p.git);
    }
    if (p.has_expiry) expiry_.erase(p.eit);
    lru_.erase(p.it);
    index_.erase(ix);
    return n;
  }

  // Takes `n` out of its owner's chain (no-op for an unknown owner).
  void Unchain(Node* n) {
    if (!n->meta.owner.known()) return;
    auto o = owners_.find(n->meta.owner.object);
    if (n->owner_prev != nullptr) {
      n->owner_prev->owner_next = n->owner_next;
    } else {
      o->second.head = n->owner_next;
    }
    if (n->owner_next != nullptr) n->owner_next->owner_prev = n->owner_prev;
    n->owner_prev = n->owner_next = nullptr;
    if (!n->meta.owner.chunk) --o->second.blocks;
    if (o->second.head == nullptr) owners_.erase(o);
  }

  List lru_;
  Index index_;
  std::unordered_map<uint32_t, Group> groups_;
  ExpiryMap expiry_;
  std::unordered_map<ObjectId, Owned, BlockKeyHash> owners_;
  uint64_t used_ = 0;
  uint64_t pinned_ = 0;
};

}  // namespace tierfs::tiercache_internal
