// Hydrator (internal/hydrator.h): deep prefetch into one target tier.
#include "tiercache/internal/hydrator.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

namespace tierfs::tiercache_internal {

struct Hydrator::Run {
  const ObjectRef& obj;
  const size_t target;
  const Placement placement;   // of the blocks inserted
  uint64_t* const bytes_done;  // may be null

  void Done(const BlockSpace& space, uint64_t index) const {
    if (bytes_done != nullptr) *bytes_done += space.ExpectedLength(obj, index);
  }
};

Status Hydrator::Hydrate(const ObjectRef& obj, uint64_t index, size_t target,
                         const Placement& hint) {
  if (target >= tiers_.size()) return Status::InvalidArgument("hydrate: no such tier");
  if (index >= space_->NumBlocks(obj)) {
    return Status::InvalidArgument("hydrate: block past the end");
  }
  const BlockKey key = space_->KeyFor(obj, index);
  const uint64_t expected = space_->ExpectedLength(obj, index);
  Tier* dst = tiers_[target].get();
  Placement h = space_->InsertPlacement(obj);
  h.pinned = h.pinned || hint.pinned;
  host_->Expire(obj, key);
  if (dst->Contains(key)) {
    if (h.pinned) dst->SetPinned(key, true);
    return Status::OK();
  }
  BlockRef b;
  size_t from = tiers_.size();
  // A faster host tier's copy (L1 above an L2 target: read there, kept out of L2 by admission)
  // saves the network.
  if ((b = host_->FromAbove(target, key, expected))) from = target + 1;
  for (size_t t = target + 1; t < tiers_.size() && !b; ++t) {
    if ((b = ReadChecked(tiers_[t].get(), key, expected))) {
      from = t;
      shared_->NoteHit(t, obj, index, key);
    }
  }
  if (!b) {
    TIERFS_ASSIGN_OR_RETURN(b, fetcher_->origin().FetchBlock(obj, index, expected));
  }
  return InsertHydrated(obj, index, b, h, target, from);
}

// Deep prefetch's insert of `b` into tiers [target, upto): counts it as hydrated when the target
// took it, and returns the target's answer (the others' errors are only counted). A shared tier's
// write queue may be full: prefetch waits for room (bounded), it is not in a reader's way.
Status Hydrator::InsertHydrated(const ObjectRef& obj, uint64_t index, const BlockRef& b,
                                const Placement& placement, size_t target, size_t upto) {
  const BlockKey key = space_->KeyFor(obj, index);
  Placement h = placement;
  h.owner = space_->OwnerOf(obj, index);
  Status last = Status::OK();
  for (size_t t = target; t < upto; ++t) {
    Status st = tiers_[t]->Insert(key, b, h);
    for (int tries = 0; st.code() == Status::Code::kNoSpace && t >= shared_->first() && tries < 500;
         ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      st = tiers_[t]->Insert(key, b, h);
    }
    if (!st.ok()) {
      ++counters_->insert_errors;
      if (t == target) last = st;
    }
  }
  if (last.ok()) {
    ++counters_->hydrated_blocks;
    counters_->hydrated_bytes += b->size();
  }
  return last;
}

bool Hydrator::TierHolds(const ObjectRef& obj, uint64_t first, uint64_t count,
                         size_t target) const {
  if (target >= tiers_.size() || count == 0 || first + count > space_->NumBlocks(obj)) {
    return false;
  }
  if (space_->TtlOf(obj) != std::chrono::nanoseconds::max()) return false;
  for (uint64_t i = first; i < first + count; ++i) {
    if (!tiers_[target]->Contains(space_->KeyFor(obj, i))) return false;
  }
  return true;
}

Status Hydrator::HydrateRun(const ObjectRef& obj, uint64_t first, uint64_t count, size_t target,
                            uint64_t* bytes_done) {
  if (target >= tiers_.size()) return Status::InvalidArgument("hydrate: no such tier");
  if (count == 0 || first + count > space_->NumBlocks(obj)) {
    return Status::InvalidArgument("hydrate: blocks past the end");
  }
  Run run{obj, target, space_->InsertPlacement(obj), bytes_done};
  // The blocks to fetch: not in the target and not in a host tier below it (those are copied
  // by Hydrate without the network).
  std::vector<uint64_t> need;
  for (uint64_t i = first; i < first + count; ++i) {
    const BlockKey key = space_->KeyFor(obj, i);
    if (host_->BelowHolds(target, key) || tiers_[target]->Contains(key)) {
      TIERFS_RETURN_IF_ERROR(Hydrate(obj, i, target, Placement{}));
      run.Done(*space_, i);
      continue;
    }
    need.push_back(i);
  }
  TIERFS_RETURN_IF_ERROR(FromSharedTiers(run, &need));
  return FetchNeeded(run, need);
}

Status Hydrator::Store(Run& run, uint64_t index, const BlockRef& b, size_t upto) {
  TIERFS_RETURN_IF_ERROR(InsertHydrated(run.obj, index, b, run.placement, run.target, upto));
  run.Done(*space_, index);
  return Status::OK();
}

// A shared tier below the target (L3 under L2) may hold the blocks: one ReadMany (its GETs at
// once) per tier; *need keeps the blocks none had.
Status Hydrator::FromSharedTiers(Run& run, std::vector<uint64_t>* need) {
  if (need->empty()) return Status::OK();
  std::vector<BlockKey> keys;
  for (uint64_t i : *need) keys.push_back(space_->KeyFor(run.obj, i));
  std::vector<Served> got(need->size());
  shared_->ReadMany(run.obj, *need, keys, run.target + 1, &got);
  std::vector<uint64_t> rest;
  for (size_t j = 0; j < need->size(); ++j) {
    if (!got[j].block) {
      rest.push_back((*need)[j]);
      continue;
    }
    TIERFS_RETURN_IF_ERROR(Store(run, (*need)[j], got[j].block, static_cast<size_t>(got[j].tier)));
  }
  *need = std::move(rest);
  return Status::OK();
}

// The rest is never fetched twice. A block a faster host tier holds (L1 above an L2 target: a
// reader got there first, and admission kept it out of L2) is copied down. A block a reader's
// fetch (or readahead) is bringing in is waited for. The others are claimed, so a reader arriving
// while they are fetched waits for this fetch instead of sending its own GET: a loader reading
// what its PrefetchSampler hydrates a moment earlier costs the origin once.
Status Hydrator::FetchNeeded(Run& run, const std::vector<uint64_t>& need) {
  std::vector<uint64_t> claimed, busy;
  std::vector<Flights::Lease> leases;
  for (uint64_t i : need) {
    const BlockKey key = space_->KeyFor(run.obj, i);
    if (BlockRef above = host_->FromAbove(run.target, key, space_->ExpectedLength(run.obj, i))) {
      TIERFS_RETURN_IF_ERROR(Store(run, i, above, run.target + 1));
      continue;
    }
    std::optional<Flights::Lease> lease =
        fetcher_->TryClaim(key, "the hydration of the block was dropped");
    if (!lease) {
      busy.push_back(i);
      continue;
    }
    claimed.push_back(i);
    leases.push_back(std::move(*lease));
  }
  TIERFS_RETURN_IF_ERROR(FetchClaimed(run, claimed, leases));
  return AwaitBusy(run, busy);
}

// The claimed blocks from the origin, one ranged GET per stretch of adjacent ones, into every
// tier from the target down; each lease completes with the block (its readers get the bytes even
// when an insert failed). After a failure the rest is not fetched: their readers get that error.
Status Hydrator::FetchClaimed(Run& run, const std::vector<uint64_t>& claimed,
                              std::vector<Flights::Lease>& leases) {
  Status failed = Status::OK();
  for (size_t k = 0; k < claimed.size();) {
    size_t n = 1;
    while (k + n < claimed.size() && claimed[k + n] == claimed[k] + n) ++n;
    Result<std::vector<BlockRef>> blocks =
        failed.ok() ? fetcher_->origin().FetchRun(run.obj, claimed[k], n) : failed;
    if (!blocks.ok()) {
      failed = blocks.status();
      for (size_t j = k; j < k + n; ++j) leases[j].Complete(failed);
      k += n;
      continue;
    }
    for (size_t j = 0; j < n; ++j) {
      const BlockRef& b = (*blocks)[j];
      Status st = Store(run, claimed[k + j], b, tiers_.size());
      leases[k + j].Complete(Served{b, kOriginTier});
      if (!st.ok() && failed.ok()) failed = st;
    }
    k += n;
  }
  return failed;
}

// Blocks someone else fetches now: waits for that fetch and copies the block to the target (if
// it ended in between, leads a fetch of the block here).
Status Hydrator::AwaitBusy(Run& run, const std::vector<uint64_t>& busy) {
  for (uint64_t i : busy) {
    const uint64_t expected = space_->ExpectedLength(run.obj, i);
    Result<Served> r = fetcher_->AwaitOrLead(run.obj, i);
    if (r.ok() && r->block && r->block->size() == expected) {
      const size_t upto = r->tier == kOriginTier
                              ? tiers_.size()
                              : std::max(run.target + 1, static_cast<size_t>(r->tier));
      TIERFS_RETURN_IF_ERROR(Store(run, i, r->block, upto));
      continue;
    }
    TIERFS_RETURN_IF_ERROR(Hydrate(run.obj, i, run.target, Placement{}));
    run.Done(*space_, i);
  }
  return Status::OK();
}

}  // namespace tierfs::tiercache_internal
