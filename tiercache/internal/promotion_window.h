// PromotionWindow: promotion on reuse (TieredCacheOptions::promote_hits). Remembers the recent
// uses of the blocks hit in a lower host tier (L2) and served from there as file slices, and says
// which hit is a block's promote_hits-th use: that one copies the block into L1.
//
// Thread-safe; no external synchronization needed. mu_ is a leaf lock. `promotions` (the
// counter of promotions) is not owned and outlives this object.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <unordered_map>

#include "base/mutex.h"
#include "metastore/meta_store.h"
#include "tiercache/internal/block_key_hash.h"

namespace tierfs::tiercache_internal {

class PromotionWindow {
 public:
  // `promote_hits`: 0 never promotes, 1 promotes every hit.
  PromotionWindow(uint32_t promote_hits, std::atomic<uint64_t>* promotions)
      : promote_hits_(promote_hits), promotions_(promotions) {}
  PromotionWindow(const PromotionWindow&) = delete;
  PromotionWindow& operator=(const PromotionWindow&) = delete;

  // True when this hit of `key` in a lower host tier, a read of bytes
  // [in_block, in_block + length) of the block, is its promote_hits-th use within the window
  // (then it is forgotten: the copy-up follows). A use is a new pass over the block: a read of
  // bytes the current pass has read already, or one that goes back before the pass's first byte
  // after at least kReorderBytes were read since the block's previous hit. Anything else is the
  // same pass going on: small sequential reads through a block, and a sequential reader's
  // requests that arrive out of order (the kernel has several reads of a file in flight; with
  // reads smaller than a block (FuseOptions::fit_reads_to_splice_pipe) the one that reads a
  // block's tail may be served before the one that read its head, and counting that as a reuse
  // copied about one block in twenty into L1 on a warm read from L2). A use that comes after
  // more than L1's capacity / kReuseShare bytes were read since the block's previous one
  // starts the count again: L1 would evict the copy before it pays for itself (a shuffled reader
  // of a dataset many times L1 comes back to each block only after L1 has turned over, and
  // promoting such blocks copied several times the bytes read into L1 just to evict them).
  // `bytes_served`: the bytes the cache has served so far (its clock); `l1_capacity`: L1's byte
  // budget now.
  bool Use(const BlockKey& key, uint64_t in_block, uint64_t length, uint64_t bytes_served,
           uint64_t l1_capacity) EXCLUDES(mu_) {
    if (promote_hits_ == 0) return false;
    if (promote_hits_ == 1) return true;
    const uint64_t now = bytes_served;
    const uint64_t near = l1_capacity / kReuseShare;
    const uint64_t begin = in_block, end = in_block + std::max<uint64_t>(length, 1);
    MutexLock l(&mu_);
    if (window_.size() >= kWindow) window_.clear();
    auto [it, fresh] = window_.try_emplace(key, PromoteState{1, begin, end, now});
    if (fresh) return false;
    PromoteState& p = it->second;
    const bool again = begin < p.pass_end && p.pass_begin < end;
    const bool back = begin < p.pass_begin && now - p.last_use >= kReorderBytes;
    const bool reuse = again || back;
    const bool soon = now - p.last_use < near;
    p.last_use = now;
    if (reuse) {
      p.pass_begin = begin;
      p.pass_end = end;
    } else {
      p.pass_begin = std::min(p.pass_begin, begin);
      p.pass_end = std::max(p.pass_end, end);
    }
    if (reuse && !soon) p.uses = 1;
    if (!reuse || !soon || ++p.uses < promote_hits_) return false;
    window_.erase(it);
    ++*promotions_;
    return true;
  }

 private:
  // Constant after construction.
  const uint32_t promote_hits_;
  std::atomic<uint64_t>* const promotions_;

  static constexpr size_t kWindow = 65536;
  // A reuse counts towards promotion when fewer than L1's capacity / this many bytes were read
  // since the block's previous use.
  static constexpr uint64_t kReuseShare = 4;
  // Bytes read (by anyone) after a block's previous hit beyond which a read going back before
  // the current pass is a new pass, not a request of the same pass served out of order.
  static constexpr uint64_t kReorderBytes = 8ULL << 20;
  struct PromoteState {
    uint32_t uses = 0;  // reuses counted (the first hit is 1)
    // The bytes of the block the current pass read, as one span.
    uint64_t pass_begin = 0;
    uint64_t pass_end = 0;
    uint64_t last_use = 0;  // bytes_served at the previous hit
  };
  // State below is protected by mu_.
  Mutex mu_;
  std::unordered_map<BlockKey, PromoteState, BlockKeyHash> window_ GUARDED_BY(mu_);
};

}  // namespace tierfs::tiercache_internal
