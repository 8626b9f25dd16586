// SharedTiers: the optional tiers shared with the other hosts of the region (L3: a regional
// S3-compatible bucket or a memcached pool), below the host tiers and above the origin. A block
// read from one is taught its owner (Tier::NoteOwner), so that Residency counts it for its object
// although this process did not upload it; a block fetched from the origin is written through to
// them (their write queues, asynchronously). A shared tier that errs is a miss. Indexes are the
// cache's tier indexes (the shared tiers come after the host ones).
//
// Thread-safe; no external synchronization needed. The tiers, `space` and `counters` are not
// owned and outlive this object.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tiercache/internal/block_space.h"
#include "tiercache/internal/cache_stats.h"
#include "tiercache/tier.h"

namespace tierfs::tiercache_internal {

class SharedTiers {
 public:
  // `tiers`: every tier of the cache, of which [first, tiers.size()) are the shared ones.
  SharedTiers(std::span<const std::unique_ptr<Tier>> tiers, size_t first, const BlockSpace* space,
              EngineCounters* counters)
      : tiers_(tiers), first_(first), space_(space), counters_(counters) {}
  SharedTiers(const SharedTiers&) = delete;
  SharedTiers& operator=(const SharedTiers&) = delete;

  // The cache's tier index of the first shared tier (== the number of host tiers), and one past
  // the last (== the number of tiers).
  size_t first() const { return first_; }
  size_t end() const { return tiers_.size(); }

  // Some shared tier says it holds `key` (a hint).
  bool Holds(const BlockKey& key) const {
    for (size_t t = first_; t < tiers_.size(); ++t) {
      if (tiers_[t]->Contains(key)) return true;
    }
    return false;
  }

  // Block `index` of `obj` from the first shared tier that has it, or a null block.
  Served Read(const ObjectRef& obj, uint64_t index, const BlockKey& key, uint64_t expected) {
    for (size_t t = first_; t < tiers_.size(); ++t) {
      if (BlockRef b = ReadChecked(tiers_[t].get(), key, expected)) {
        NoteHit(t, obj, index, key);
        return Served{std::move(b), static_cast<int>(t)};
      }
    }
    return Served{};
  }

  // The blocks `indexes` of `obj` (keys `keys`) that got[k] lacks, from the shared tiers at or
  // below tier index `from`, with one Tier::ReadMany per tier (its GETs at once); got[k] is
  // filled with each block found and the tier it came from.
  void ReadMany(const ObjectRef& obj, const std::vector<uint64_t>& indexes,
                const std::vector<BlockKey>& keys, size_t from, std::vector<Served>* got) {
    for (size_t t = std::max(from, first_); t < tiers_.size(); ++t) {
      std::vector<BlockKey> ask;
      std::vector<size_t> which;
      for (size_t k = 0; k < keys.size(); ++k) {
        if ((*got)[k].block) continue;
        ask.push_back(keys[k]);
        which.push_back(k);
      }
      if (ask.empty()) return;
      std::vector<Result<BlockRef>> rs = tiers_[t]->ReadMany(ask);
      for (size_t j = 0; j < ask.size() && j < rs.size(); ++j) {
        const size_t k = which[j];
        BlockRef b = CheckedBlock(tiers_[t].get(), ask[j], std::move(rs[j]),
                                  space_->ExpectedLength(obj, indexes[k]));
        if (!b) continue;
        NoteHit(t, obj, indexes[k], ask[j]);
        (*got)[k] = Served{std::move(b), static_cast<int>(t)};
      }
    }
  }

  // Block `index` of `obj` was read from tier `t`: a shared tier learns its owner.
  void NoteHit(size_t t, const ObjectRef& obj, uint64_t index, const BlockKey& key) {
    if (t >= first_ && t < tiers_.size()) tiers_[t]->NoteOwner(key, space_->OwnerOf(obj, index));
  }

  // Writes `block` through to the shared tiers among tier indexes [from, upto) (every one for an
  // origin block). Errors (a full write queue) are counted, never returned.
  void Store(const ObjectRef& obj, const BlockKey& key, const BlockOwner& owner,
             const BlockRef& block, size_t from, size_t upto) {
    from = std::max(from, first_);
    upto = std::min(upto, tiers_.size());
    if (from >= upto) return;
    Placement hint = space_->InsertPlacement(obj);
    hint.owner = owner;
    for (size_t t = from; t < upto; ++t) {
      Status st = tiers_[t]->Insert(key, block, hint);
      if (!st.ok()) {
        ++counters_->insert_errors;
        SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "{} insert declined: {}",
                            tiers_[t]->name(), st.ToString());
      }
    }
  }

 private:
  // Constant after construction.
  const std::span<const std::unique_ptr<Tier>> tiers_;
  const size_t first_;
  const BlockSpace* const space_;
  EngineCounters* const counters_;
};

}  // namespace tierfs::tiercache_internal
