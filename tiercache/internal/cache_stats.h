// CacheStatsSource: the one source of the tiered cache's counters. user.tierfs.stats
// (TieredCache::StatsText) and /metrics (the collector the cache registers) are two renderings
// of it, so they always agree: the engines of the cache bump the counters it reads (CacheStats,
// the public ones, and EngineCounters, both held by the cache), and Text() and Collect() read the
// same atomics, the tiers'
// own TierStats, the origin store's and admission's counters, and the queue depths the cache
// reports through QueueDepths.
//
// Thread-safe; no external synchronization needed (every counter is atomic; the queue-depth
// callback takes the locks it needs). Holds references only: the tiers, the origin, the
// admission policy and the histograms are owned by the cache and outlive this object.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "blobclient/blob_store.h"
#include "tiercache/admission.h"
#include "tiercache/tier.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

// Counters of the cache's engines that are not part of the public CacheStats.
struct EngineCounters {
  std::atomic<uint64_t> prefetch_dropped{0};    // readahead blocks dropped: queue full
  std::atomic<uint64_t> insert_errors{0};       // tier inserts declined or failed
  std::atomic<uint64_t> hydrated_blocks{0};     // blocks deep prefetch made a tier hold
  std::atomic<uint64_t> hydrated_bytes{0};      // their bytes
  std::atomic<uint64_t> ttl_expired{0};         // blocks dropped because their TTL passed
  std::atomic<uint64_t> readahead_runs{0};      // origin reads of more than one block
  std::atomic<uint64_t> readahead_bytes{0};     // bytes of the blocks in readahead_blocks
  std::atomic<uint64_t> readahead_below_l1{0};  // small files fetched ahead into L2, not L1
  std::atomic<uint64_t> whole_fetches{0};       // small objects fetched whole by a demand miss
  std::atomic<uint64_t> sparse_fetches{0};      // projected reads' origin requests
  std::atomic<uint64_t> sparse_fetch_bytes{0};  // their bytes
  std::atomic<uint64_t> sparse_hits{0};         // projected reads served from sparse entries
  std::atomic<uint64_t> sparse_dense{0};        // projected reads that took the whole block
  std::atomic<uint64_t> gap_fills{0};     // blocks assembled from sparse entries + fetched gaps
  std::atomic<uint64_t> gap_requests{0};  // their origin requests
  std::atomic<uint64_t> gap_bytes{0};     // their bytes
  std::atomic<uint64_t> promotions{0};    // L2 blocks copied into L1 on reuse
  std::atomic<uint64_t> handoffs{0};      // L1 blocks dropped once the kernel and L2 held them
};

// The depths of the cache's queues at one moment.
struct QueueDepths {
  uint64_t readahead_blocks = 0;  // blocks queued for readahead
  uint64_t fetch_jobs = 0;        // demand fetches queued for the fetch pool
};

class CacheStatsSource {
 public:
  // `tiers` fast→slow, of which the first `host_tiers` are host tiers (L1, L2) and the rest
  // shared (L3). `origin` may be null. `read_latency`: one histogram per tier, then the
  // origin's; empty when latency is not measured. `queues` is called by Collect only, on the
  // scraping thread. `stats` and `counters`: the atomics the engines bump. All not owned; they
  // must outlive this object.
  CacheStatsSource(const std::vector<std::unique_ptr<Tier>>* tiers, size_t host_tiers,
                   BlobStore* origin, const Admission* admission,
                   const std::vector<std::unique_ptr<metrics::Histogram>>* read_latency,
                   std::function<QueueDepths()> queues, const CacheStats* stats,
                   const EngineCounters* counters)
      : tiers_(tiers),
        host_tiers_(host_tiers),
        origin_(origin),
        admission_(admission),
        read_latency_(read_latency),
        queues_(std::move(queues)),
        stats_(*stats),
        counters_(*counters) {}
  CacheStatsSource(const CacheStatsSource&) = delete;
  CacheStatsSource& operator=(const CacheStatsSource&) = delete;

  // "l1.hits=.. l1.misses=.. ... read.bytes=..": user.tierfs.stats.
  std::string Text() const;
  // The metrics of docs/operations.md, "Metrics".
  void Collect(metrics::Exposition* e) const;

 private:
  void CollectTiers(metrics::Exposition* e) const;
  void CollectEngines(metrics::Exposition* e) const;
  void CollectHousekeeping(metrics::Exposition* e) const;

  // Constant after construction.
  const std::vector<std::unique_ptr<Tier>>* const tiers_;
  const size_t host_tiers_;
  BlobStore* const origin_;
  const Admission* const admission_;
  const std::vector<std::unique_ptr<metrics::Histogram>>* const read_latency_;
  const std::function<QueueDepths()> queues_;
  const CacheStats& stats_;
  const EngineCounters& counters_;
};

}  // namespace tierfs::tiercache_internal
