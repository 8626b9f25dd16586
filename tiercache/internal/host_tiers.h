// HostTiers: the tiers on this host (L1 memory, L2 flash), fast→slow, as one role of the tiered
// cache: lookups with copy-up into the faster ones, inserts with the L2 admission policy
// (tiercache/admission.h), promotion of L2 blocks served as file slices into L1
// (PromotionWindow), TTL expiry, and the per-object walks (pin, evict, hand-off). The role below
// it (the shared tier, the origin) is not known here: a miss is a null answer, and whoever
// fetched a block from below stores it here (Store). Nothing here waits on the network.
//
// Thread-safe; no external synchronization needed (the tiers are; admission and the promotion
// window lock their own state). The tiers, `space`, `counters` and `bytes_served` are not owned
// and outlive this object.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "tiercache/admission.h"
#include "tiercache/internal/block_space.h"
#include "tiercache/internal/cache_stats.h"
#include "tiercache/internal/promotion_window.h"
#include "tiercache/tier.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

class HostTiers {
 public:
  // `tiers`: the host tiers, fast→slow (their indexes are the cache's tier indexes): with two,
  // L1 over L2. Admission's capacity is L2's. `bytes_served`: the cache's served-bytes counter
  // (the promotion window's clock).
  HostTiers(std::span<const std::unique_ptr<Tier>> tiers, const TieredCacheOptions& options,
            const BlockSpace* space, EngineCounters* counters,
            const std::atomic<uint64_t>* bytes_served);
  HostTiers(const HostTiers&) = delete;
  HostTiers& operator=(const HostTiers&) = delete;

  size_t size() const { return tiers_.size(); }
  Tier* tier(size_t t) const { return tiers_[t].get(); }
  const Admission& admission() const { return admission_; }

  // A demand read of [offset, offset + length) of an object of `size` bytes (admission's scan
  // detection).
  void NoteRead(const ObjectRef& obj, uint64_t offset, uint64_t length) {
    admission_.NoteRead(obj.key, obj.info.size, offset, length);
  }

  // The first tier's (L1's) copy of `key`, or null: the fast path of a read.
  BlockRef ReadFirst(const BlockKey& key, uint64_t expected);
  // The first tier again (a fetch may just have filled it), then the others, copying a hit up
  // into the faster ones; a null block when none holds it.
  Served Lookup(const ObjectRef& obj, uint64_t index, const BlockKey& key, uint64_t expected);
  // The copy of `key` a host tier above tier `target` holds (L1 over an L2 target), or null.
  BlockRef FromAbove(size_t target, const BlockKey& key, uint64_t expected);

  // Some host tier holds `key`.
  bool Holds(const BlockKey& key) const;
  // The first tier (L1; L2 when there is no L1) holds `key`.
  bool FirstHolds(const BlockKey& key) const { return !tiers_.empty() && tiers_[0]->Contains(key); }
  // A host tier below tier `t` (L2 below L1) holds `key`.
  bool BelowHolds(size_t t, const BlockKey& key) const;

  // Sparse entries (tier.h MakeChunkKey): chunk `c` of a block of `block_len` bytes is held as
  // one entry of ChunkLength(block_len, c) bytes (a whole chunk, or up to the block's end).
  static uint64_t ChunkLength(uint64_t block_len, uint64_t c) {
    return std::min(kSparseChunkBytes, block_len - c * kSparseChunkBytes);
  }
  static uint64_t NumChunks(uint64_t block_len) {
    return (block_len + kSparseChunkBytes - 1) / kSparseChunkBytes;
  }
  // The fastest host tier holding the entry of chunk `c` of block `block`; nullopt: none does.
  std::optional<size_t> ChunkTier(const BlockKey& block, uint64_t block_len, uint64_t c) const;
  // The entry of chunk `c` of block `block` (checked against its length) from the fastest host
  // tier holding it, and that tier; a null block when none does (or its copy was bad: erased).
  Served ReadChunk(const BlockKey& block, uint64_t block_len, uint64_t c);

  // TTL policy: drops block `key` of `obj` from the host tiers when the object has a TTL and a
  // tier stored the block longer ago than it, so the read that follows refetches it from below.
  // True if it dropped the block.
  bool Expire(const ObjectRef& obj, const BlockKey& key);

  // Block `index` as a verified file extent of the fastest host tier that holds it, for a read
  // of its bytes [in_block, in_block + length), when that tier keeps files (L2) and no faster
  // tier holds the block; null otherwise (a miss, L1 holds it, a damaged block (dropped), or the
  // block is due for promotion into L1: then *promote is set and the caller reads it whole,
  // which copies it up; `promote` null: never promoted). *tier_out: the tier.
  FileExtentRef TryExtent(const ObjectRef& obj, uint64_t index, uint64_t in_block, uint64_t length,
                          uint64_t expected, int* tier_out, bool* promote);
  // Bytes [in_block, in_block + length) of block `index`, read alone from the fastest host tier
  // that holds the block when that tier can read parts (L2), or null (a random small read of a
  // block only L2 holds costs one chunk, not a block, and is not copied up).
  BlockRef TryRange(const ObjectRef& obj, uint64_t index, uint64_t in_block, uint64_t length,
                    int* tier_out);
  // Asks the tiers below the first to have blocks [first, end) of `obj` that they hold and the
  // first does not ready (Tier::WillNeed: page cache, verified), all at once.
  void WillNeed(const ObjectRef& obj, uint64_t first, uint64_t end);

  // Offers `block` to host tiers [from, upto) (upto may exceed size()), with the object's
  // placement and `owner`; L2 only when admission lets it in. Insert failures are counted,
  // never returned.
  void Store(const ObjectRef& obj, const BlockKey& key, const BlockOwner& owner,
             const BlockRef& block, size_t from, size_t upto);
  // A small file (one block) fetched ahead goes to the tiers below L1 only (see the .cc).
  bool SmallFileBelowFirst(const ObjectRef& obj) const;

  // TieredCache::HandOff.
  uint64_t HandOff(const ObjectRef& obj, uint64_t offset, uint64_t length);
  // Calls fn(tier, key) for every host tier and every key it holds of `obj` (Tier::HeldOf: its
  // blocks and their sparse entries): the cost is what the host holds of the object, never its
  // size. Stops early when the request's token (CancelToken::Current()) is cancelled.
  template <typename Fn>
  void ForEachKey(const ObjectRef& obj, Fn fn) {
    const ObjectId id = space_->IdOf(obj);
    const CancelToken* token = CancelToken::Current();
    for (const auto& t : tiers_) {
      std::vector<BlockKey> keys;
      t->HeldOf(id, &keys);
      for (const BlockKey& key : keys) {
        if (token != nullptr && token->cancelled()) return;
        fn(t.get(), key);
      }
    }
  }
  // The largest host tier (the last): TieredCache::HostSpace.
  HostSpaceInfo Space() const;
  // The largest budget of a host tier: TieredCache::HostCapacityBytes.
  uint64_t MostCapacity() const;

 private:
  // Admission guards the host tier below L1 (L2), and only when there is an L1 above it: without
  // one, a block kept out of L2 would be kept nowhere.
  bool Admitted(size_t t) const { return t > 0; }

  // Constant after construction.
  const std::span<const std::unique_ptr<Tier>> tiers_;
  const bool file_slices_;
  const BlockSpace* const space_;
  EngineCounters* const counters_;
  const std::atomic<uint64_t>* const bytes_served_;

  Admission admission_;
  // Which L2 hits are reuses that earn a copy in L1 (file_slices).
  PromotionWindow promotion_;
};

}  // namespace tierfs::tiercache_internal
