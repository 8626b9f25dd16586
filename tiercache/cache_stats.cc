// CacheStatsSource (internal/cache_stats.h): the two renderings of the cache's counters.
#include "tiercache/internal/cache_stats.h"

namespace tierfs::tiercache_internal {

std::string CacheStatsSource::Text() const {
  std::string s;
  auto add = [&s](std::string_view k, uint64_t v) {
    if (!s.empty()) s += ' ';
    s += k;
    s += '=';
    s += std::to_string(v);
  };
  for (const auto& t : *tiers_) {
    const TierStats& ts = t->Stats();
    const std::string n(t->name());
    add(n + ".hits", ts.hits);
    add(n + ".misses", ts.misses);
    add(n + ".bytes", ts.bytes_read);
    add(n + ".used", ts.bytes_used);
    add(n + ".capacity", ts.capacity);
    add(n + ".inserts", ts.inserts);
    add(n + ".evictions", ts.evictions);
    add(n + ".corruptions", ts.corruptions);
    add(n + ".errors", ts.errors);
    std::vector<std::pair<std::string, uint64_t>> extra;
    t->AppendExtraStats(&extra);
    for (const auto& [k, v] : extra) add(n + "." + k, v);
  }
  add("origin.requests", stats_.origin_requests);
  add("origin.bytes", stats_.origin_bytes);
  add("origin.errors", stats_.origin_errors);
  if (origin_ != nullptr) {
    std::vector<std::pair<std::string, uint64_t>> store;
    AppendStoreStats(origin_->Stats(), &store);
    for (const auto& [k, v] : store) add("origin." + k, v);
  }
  add("singleflight.merged", stats_.singleflight_merged);
  add("readahead.blocks", stats_.readahead_blocks);
  add("readahead.dropped", counters_.prefetch_dropped);
  add("readahead.runs", counters_.readahead_runs);
  add("fetch.whole_objects", counters_.whole_fetches);
  add("sparse.fetches", counters_.sparse_fetches);
  add("sparse.fetch_bytes", counters_.sparse_fetch_bytes);
  add("sparse.hits", counters_.sparse_hits);
  add("sparse.dense", counters_.sparse_dense);
  add("sparse.gap_fills", counters_.gap_fills);
  add("sparse.gap_requests", counters_.gap_requests);
  add("sparse.gap_bytes", counters_.gap_bytes);
  add("blocks.mapped_bytes", Block::MappedBytes());
  const Block::PoolStats pool = Block::Pool();
  add("blocks.pool_slab_bytes", pool.slab_bytes);
  add("blocks.pool_free_bytes", pool.free_resident_bytes);
  add("blocks.pool_reused", pool.reused);
  add("blocks.pool_fresh", pool.fresh);
  add("prefetch.blocks", counters_.hydrated_blocks);
  add("ttl.expired", counters_.ttl_expired);
  add("promotions", counters_.promotions);
  add("handoffs", counters_.handoffs);
  add("readahead.below_l1", counters_.readahead_below_l1);
  const AdmissionStats& as = admission_->stats();
  add("admit.admitted", as.admitted);
  add("admit.rejected", as.rejected);
  add("admit.probation", as.probation);
  add("admit.ghost_hits", as.ghost_hits);
  add("admit.scans", as.scans);
  add("insert.errors", counters_.insert_errors);
  add("fetch.abandoned", stats_.fetch_abandoned);
  add("fetch.failures_replayed", stats_.failures_replayed);
  add("waits.cancelled", stats_.waits_cancelled);
  add("waits.timed_out", stats_.waits_timed_out);
  add("read.calls", stats_.read_calls);
  add("read.bytes", stats_.bytes_served);
  return s;
}

void CacheStatsSource::Collect(metrics::Exposition* e) const {
  CollectTiers(e);
  CollectEngines(e);
  CollectHousekeeping(e);
}

// Per tier (and the origin's bytes and the read latency by serving tier).
void CacheStatsSource::CollectTiers(metrics::Exposition* e) const {
  using metrics::Labels;
  for (size_t i = 0; i < tiers_->size(); ++i) {
    const Tier& t = *(*tiers_)[i];
    const TierStats& ts = t.Stats();
    const Labels l = {{"tier", std::string(t.name())}};
    e->AddCounter("tierfs_tier_hits_total", "Block reads the tier answered.", l, ts.hits);
    e->AddCounter("tierfs_tier_misses_total", "Block reads the tier did not hold.", l, ts.misses);
    e->AddCounter("tierfs_tier_served_bytes_total",
                  "Bytes read from the tier (origin: downloaded from the origin).", l,
                  ts.bytes_read);
    e->AddGauge("tierfs_tier_used_bytes", "Bytes the tier holds now.", l, ts.bytes_used);
    e->AddGauge("tierfs_tier_capacity_bytes", "Byte budget of the tier.", l, ts.capacity);
    e->AddCounter("tierfs_tier_inserts_total", "Blocks inserted into the tier.", l, ts.inserts);
    e->AddCounter("tierfs_tier_inserted_bytes_total", "Bytes inserted into the tier.", l,
                  ts.bytes_inserted);
    e->AddCounter("tierfs_tier_evictions_total", "Blocks evicted from the tier.", l, ts.evictions);
    e->AddCounter("tierfs_tier_corruptions_total",
                  "Blocks that failed their checksum or MAC (dropped, read from below).", l,
                  ts.corruptions);
    e->AddCounter("tierfs_tier_errors_total", "Tier operations that failed.", l, ts.errors);
    if (i >= host_tiers_) {  // a shared tier (L3): its write queue, breaker, listings
      std::vector<std::pair<std::string, uint64_t>> extra;
      t.AppendExtraStats(&extra);
      for (const auto& [k, v] : extra) {
        if (k == "write.pending") {
          e->AddGauge("tierfs_l3_write_queue_blocks", "Blocks waiting for upload to L3.", l, v);
        } else if (k == "write.dropped") {
          e->AddCounter("tierfs_l3_write_dropped_total",
                        "L3 uploads dropped (queue full or breaker open).", l, v);
        } else if (k == "write.errors") {
          e->AddCounter("tierfs_l3_write_errors_total", "L3 uploads that failed.", l, v);
        } else if (k == "breaker.open") {
          e->AddGauge("tierfs_l3_breaker_open", "1 while the L3 circuit breaker is open.", l, v);
        } else if (k == "breaker.trips") {
          e->AddCounter("tierfs_l3_breaker_trips_total", "Times the L3 breaker opened.", l, v);
        } else if (k == "listings.hits") {
          e->AddCounter("tierfs_l3_listings_hits_total",
                        "Directory listings taken from L3 instead of the origin.", l, v);
        } else if (k == "listings.stored") {
          e->AddCounter("tierfs_l3_listings_stored_total",
                        "Directory listings stored to L3 for the other hosts.", l, v);
        } else if (k == "listings.rejected") {
          e->AddCounter("tierfs_l3_listings_rejected_total",
                        "L3 listings refused (corrupt, foreign or MAC mismatch).", l, v);
        }
      }
    }
  }
  const Labels origin = {{"tier", "origin"}};
  e->AddCounter("tierfs_tier_served_bytes_total", "", origin, stats_.origin_bytes);
  for (size_t i = 0; i < read_latency_->size(); ++i) {
    const Labels l = {{"tier", i < tiers_->size() ? std::string((*tiers_)[i]->name()) : "origin"}};
    e->AddHistogram("tierfs_read_duration_seconds",
                    "Latency of reads by the slowest tier that served them (L0, the kernel "
                    "page cache, is not seen).",
                    l, (*read_latency_)[i]->Snap());
  }
}

// Reads, the origin, single-flight, readahead, sparse reads and the fetch pool.
void CacheStatsSource::CollectEngines(metrics::Exposition* e) const {
  e->AddCounter("tierfs_reads_total", "Reads served by the cache.", {}, stats_.read_calls);
  e->AddCounter("tierfs_read_bytes_total", "Bytes served by the cache.", {}, stats_.bytes_served);
  e->AddCounter("tierfs_origin_fetches_total", "Block fetches from the origin.", {},
                stats_.origin_requests);
  e->AddCounter("tierfs_origin_fetch_errors_total", "Block fetches from the origin that failed.",
                {}, stats_.origin_errors);
  e->AddCounter("tierfs_singleflight_merged_total",
                "Reads that waited for another reader's fetch of the same block.", {},
                stats_.singleflight_merged);
  const QueueDepths q = queues_ ? queues_() : QueueDepths{};
  const uint64_t queued = q.readahead_blocks;
  const uint64_t fetch_queued = q.fetch_jobs;
  e->AddGauge("tierfs_readahead_queue_blocks", "Blocks queued for readahead.", {}, queued);
  e->AddCounter("tierfs_readahead_blocks_total", "Blocks brought in by readahead.", {},
                stats_.readahead_blocks);
  e->AddCounter("tierfs_readahead_prefetched_bytes_total",
                "Bytes brought in by readahead (from the origin or a lower tier).", {},
                counters_.readahead_bytes);
  e->AddCounter("tierfs_readahead_dropped_blocks_total",
                "Readahead blocks dropped: the queue was full.", {}, counters_.prefetch_dropped);
  e->AddCounter("tierfs_readahead_runs_total", "Origin reads of several blocks at once.", {},
                counters_.readahead_runs);
  e->AddCounter("tierfs_readahead_below_l1_blocks_total",
                "Small files fetched ahead into L2 (and the page cache) and not into L1.", {},
                counters_.readahead_below_l1);
  e->AddCounter("tierfs_handoff_blocks_total",
                "L1 blocks dropped once the kernel's page cache and L2 held them.", {},
                counters_.handoffs);
  e->AddCounter("tierfs_fetch_whole_objects_total",
                "Small objects fetched whole (one request) by a demand read.", {},
                counters_.whole_fetches);
  e->AddCounter("tierfs_sparse_fetches_total",
                "Projected reads that fetched only the chunks they read (one request each).", {},
                counters_.sparse_fetches);
  e->AddCounter("tierfs_sparse_fetch_bytes_total", "Bytes projected reads fetched.", {},
                counters_.sparse_fetch_bytes);
  e->AddCounter("tierfs_sparse_hits_total",
                "Projected reads served whole from the sparse entries of the host tiers.", {},
                counters_.sparse_hits);
  e->AddCounter(
      "tierfs_sparse_dense_total",
      "Projected reads that fetched their whole block: three quarters of its chunks read.", {},
      counters_.sparse_dense);
  e->AddCounter("tierfs_sparse_gap_fills_total",
                "Whole blocks assembled from their sparse entries and the gaps between them.", {},
                counters_.gap_fills);
  e->AddCounter("tierfs_sparse_gap_requests_total",
                "Origin requests of those gaps (gaps a few pages apart are joined).", {},
                counters_.gap_requests);
  e->AddCounter("tierfs_sparse_gap_bytes_total", "Bytes of those gaps.", {}, counters_.gap_bytes);
  e->AddGauge("tierfs_fetch_queue_depth", "Demand fetches queued for the fetch pool.", {},
              static_cast<double>(fetch_queued));
  e->AddCounter("tierfs_fetch_abandoned_total", "Queued fetches no reader waited for any more.", {},
                stats_.fetch_abandoned);
  e->AddCounter("tierfs_fetch_failures_replayed_total",
                "Reads answered with their block's origin failure of the last second.", {},
                stats_.failures_replayed);
  e->AddCounter("tierfs_read_waits_cancelled_total", "Reads that stopped waiting: interrupted.", {},
                stats_.waits_cancelled);
  e->AddCounter("tierfs_read_waits_timed_out_total",
                "Reads that stopped waiting: the wait timeout passed.", {}, stats_.waits_timed_out);
}

// Deep prefetch, inserts, admission, TTL expiry and the block arena.
void CacheStatsSource::CollectHousekeeping(metrics::Exposition* e) const {
  e->AddCounter("tierfs_prefetch_blocks_total", "Blocks hydrated by deep prefetch jobs.", {},
                counters_.hydrated_blocks);
  e->AddCounter("tierfs_prefetch_bytes_total", "Bytes hydrated by deep prefetch jobs.", {},
                counters_.hydrated_bytes);
  e->AddCounter("tierfs_insert_errors_total", "Tier inserts declined or failed.", {},
                counters_.insert_errors);
  const AdmissionStats& as = admission_->stats();
  e->AddCounter("tierfs_admit_admitted_blocks_total",
                "Blocks read from below that admission let into L2.", {}, as.admitted);
  e->AddCounter("tierfs_admit_rejected_blocks_total",
                "Blocks read from below that admission kept out of L2 (served through L1).", {},
                as.rejected);
  e->AddCounter("tierfs_admit_probation_blocks_total",
                "Blocks admission let into L2 as probationary (free room or other probationary "
                "blocks' room only: a first sight of a reuse block, or a scan's).",
                {}, as.probation);
  e->AddCounter("tierfs_admit_ghost_hits_total",
                "Blocks admitted by the reuse policy because the ghost list had seen them.", {},
                as.ghost_hits);
  e->AddCounter("tierfs_admit_scans_total",
                "Sequential passes over large files detected (admitted as reuse).", {}, as.scans);
  e->AddCounter("tierfs_ttl_expired_blocks_total", "Blocks dropped because their TTL passed.", {},
                counters_.ttl_expired);
  e->AddGauge("tierfs_block_mapped_bytes", "Bytes of storage held by the process's live blocks.",
              {}, static_cast<double>(Block::MappedBytes()));
  const Block::PoolStats pool = Block::Pool();
  e->AddGauge("tierfs_block_pool_slab_bytes", "Bytes mapped in the block arena's slabs.", {},
              static_cast<double>(pool.slab_bytes));
  e->AddGauge("tierfs_block_pool_free_bytes",
              "Freed block storage the arena keeps resident for reuse (at most 64 MiB).", {},
              static_cast<double>(pool.free_resident_bytes));
  e->AddCounter("tierfs_block_pool_reused_total",
                "Block allocations served by resident storage freed earlier.", {}, pool.reused);
  e->AddCounter("tierfs_block_pool_fresh_total",
                "Block allocations that took fresh pages (first touch faults them in).", {},
                pool.fresh);
}

}  // namespace tierfs::tiercache_internal
