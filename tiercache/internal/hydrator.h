// Hydrator: deep prefetch's side of the cache (TieredCache::Hydrate, HydrateRun, TierHolds): makes
// one tier (the target: L1, L2 or L3) hold blocks of an object, copying them from a host tier
// above it, reading them from the tiers below it, or fetching them from the origin as runs of
// adjacent blocks, and inserting them into the target and the tiers between (never into the
// tiers above it). No block is fetched twice: one a reader's fetch brings in is waited for, and
// its own origin fetches are single-flight leaders (OriginFetcher::TryClaim) that readers join.
// Runs on the caller's thread (a deep prefetch worker).
//
// Thread-safe; no external synchronization needed (no state of its own). The tiers, `host`,
// `shared`, `fetcher`, `space` and `counters` are not owned and outlive this object.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "tiercache/internal/block_space.h"
#include "tiercache/internal/cache_stats.h"
#include "tiercache/internal/host_tiers.h"
#include "tiercache/internal/origin_fetcher.h"
#include "tiercache/internal/shared_tiers.h"
#include "tiercache/tier.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

class Hydrator {
 public:
  // `tiers`: every tier of the cache, fast→slow (the host tiers, then the shared ones).
  Hydrator(std::span<const std::unique_ptr<Tier>> tiers, HostTiers* host, SharedTiers* shared,
           OriginFetcher* fetcher, const BlockSpace* space, EngineCounters* counters)
      : tiers_(tiers),
        host_(host),
        shared_(shared),
        fetcher_(fetcher),
        space_(space),
        counters_(counters) {}
  Hydrator(const Hydrator&) = delete;
  Hydrator& operator=(const Hydrator&) = delete;

  // TieredCache::Hydrate, TierHolds and HydrateRun (tiered_cache.h).
  Status Hydrate(const ObjectRef& obj, uint64_t index, size_t target, const Placement& hint);
  bool TierHolds(const ObjectRef& obj, uint64_t first, uint64_t count, size_t target) const;
  Status HydrateRun(const ObjectRef& obj, uint64_t first, uint64_t count, size_t target,
                    uint64_t* bytes_done);

 private:
  // One HydrateRun's state: the object, target, placement and progress counter.
  struct Run;
  Status InsertHydrated(const ObjectRef& obj, uint64_t index, const BlockRef& b,
                        const Placement& placement, size_t target, size_t upto);
  Status Store(Run& run, uint64_t index, const BlockRef& b, size_t upto);
  Status FromSharedTiers(Run& run, std::vector<uint64_t>* need);
  Status FetchNeeded(Run& run, const std::vector<uint64_t>& need);
  Status FetchClaimed(Run& run, const std::vector<uint64_t>& claimed,
                      std::vector<Flights::Lease>& leases);
  Status AwaitBusy(Run& run, const std::vector<uint64_t>& busy);

  // Constant after construction.
  const std::span<const std::unique_ptr<Tier>> tiers_;
  HostTiers* const host_;
  SharedTiers* const shared_;
  OriginFetcher* const fetcher_;
  const BlockSpace* const space_;
  EngineCounters* const counters_;
};

}  // namespace tierfs::tiercache_internal
