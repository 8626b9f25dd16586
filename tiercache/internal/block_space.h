// BlockSpace: how the cache names the blocks of an object and places them in tiers, shared by the
// cache's roles (host tiers, shared tiers, origin fetcher, readahead, sparse reader, hydrator):
// block keys and object ids of the source, block lengths, and the placement a block inserted now
// gets (pin, TTL, quota from TieredCacheOptions::placement; the time; whole-object flag). Also
// the two small types every role passes around: Served (a block and the tier it came from) and
// CheckedBlock (a tier's answer, kept only with the length the object implies).
//
// Thread-safe; no external synchronization needed (constant after construction). `clock` is not
// owned and outlives this object.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "base/cancel.h"
#include "base/clock.h"
#include "base/logging.h"
#include "tiercache/tier.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

// A block and the tier it was read from (kOriginTier: fetched from the origin).
struct Served {
  BlockRef block;
  int tier = kOriginTier;
};

class BlockSpace {
 public:
  BlockSpace(std::string source, uint64_t block_size,
             std::function<Placement(std::string_view key)> placement, Clock* clock)
      : source_(std::move(source)),
        block_size_(block_size),
        placement_(std::move(placement)),
        clock_(clock) {}
  BlockSpace(const BlockSpace&) = delete;
  BlockSpace& operator=(const BlockSpace&) = delete;

  uint64_t block_size() const { return block_size_; }
  Clock* clock() const { return clock_; }

  uint64_t NumBlocks(const ObjectRef& obj) const {
    return (obj.info.size + block_size_ - 1) / block_size_;
  }
  // Bytes block `index` of `obj` holds: block_size, or less for the last block.
  uint64_t ExpectedLength(const ObjectRef& obj, uint64_t index) const {
    return std::min<uint64_t>(block_size_, obj.info.size - index * block_size_);
  }
  BlockKey KeyFor(const ObjectRef& obj, uint64_t index) const {
    return MakeBlockKey(source_, obj.key, obj.info, block_size_, index);
  }
  ObjectId IdOf(const ObjectRef& obj) const {
    return MakeObjectId(source_, obj.key, obj.info, block_size_);
  }
  // The owner the tiers index block `index` of `obj` by (`chunk`: one of its sparse entries).
  BlockOwner OwnerOf(const ObjectRef& obj, uint64_t index, bool chunk = false) const {
    return BlockOwner{IdOf(obj), index, chunk};
  }

  // The object's policy (pin, TTL, quota); the default placement without a policy.
  Placement PolicyOf(const ObjectRef& obj) const {
    return placement_ ? placement_(obj.key) : Placement{};
  }
  // The object's TTL; nanoseconds::max() when it has none.
  std::chrono::nanoseconds TtlOf(const ObjectRef& obj) const {
    return placement_ ? placement_(obj.key).ttl : std::chrono::nanoseconds::max();
  }
  // The placement of a block of `obj` inserted now: the object's policy, the time, and whether
  // the block is the whole object (L2 then stores it without a chunk trailer, so that
  // OpenWholeFile can hand its file to the kernel).
  Placement InsertPlacement(const ObjectRef& obj) const {
    Placement h = PolicyOf(obj);
    h.stored_ns = clock_->NowUnixNanos();
    h.whole_object = obj.info.size > 0 && obj.info.size <= block_size_;
    return h;
  }

 private:
  // Constant after construction.
  const std::string source_;
  const uint64_t block_size_;
  const std::function<Placement(std::string_view key)> placement_;
  Clock* const clock_;
};

// The outcome of a read of `key` from `tier`: the block if it has the expected length, else null
// (a miss, an error, or a bad copy, which is erased from that tier).
inline BlockRef CheckedBlock(Tier* tier, const BlockKey& key, Result<BlockRef> r,
                             uint64_t expected) {
  if (!r.ok()) {
    if (!r.status().IsNotFound()) {
      SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "{} read failed: {}", tier->name(),
                          r.status().ToString());
    }
    return nullptr;
  }
  if ((*r)->size() != expected) {
    Logger(Module::kTierCache)
        .warn("{} block {} has {} bytes, expected {}; dropping it", tier->name(), BlockKeyHex(key),
              (*r)->size(), expected);
    tier->Erase(key);
    return nullptr;
  }
  return std::move(r).value();
}

// A block from `tier` with the expected length, or null (see CheckedBlock).
inline BlockRef ReadChecked(Tier* tier, const BlockKey& key, uint64_t expected) {
  return CheckedBlock(tier, key, tier->Read(key), expected);
}

// The deadline of a wait that starts now and lasts `d` (saturating).
inline CancelToken::TimePoint DeadlineAfter(std::chrono::nanoseconds d) {
  const auto now = CancelToken::SteadyClock::now();
  if (d >= CancelToken::TimePoint::max() - now) return CancelToken::TimePoint::max();
  return now + std::chrono::duration_cast<CancelToken::SteadyClock::duration>(d);
}

}  // namespace tierfs::tiercache_internal
