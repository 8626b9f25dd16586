// The tierfs_store_* metrics of a BlobStore (docs/operations.md, "Metrics"), from
// BlobStore::Stats(): the same numbers user.tierfs.stats shows as origin.* and l3.*.
#include <string>

#include "base/metrics.h"
#include "blobclient/blob_store.h"

namespace tierfs {

void CollectStoreMetrics(const BlobStoreStats& s, std::string_view store, metrics::Exposition* e) {
  const metrics::Labels l = {{"store", std::string(store)}};
  e->AddCounter("tierfs_store_requests_total", "Requests sent to the store, retries included.", l,
                static_cast<double>(s.requests));
  e->AddCounter("tierfs_store_errors_total", "Store calls that failed after their retries.", l,
                static_cast<double>(s.errors));
  e->AddCounter("tierfs_store_retries_total", "Requests retried.", l,
                static_cast<double>(s.retries));
  e->AddCounter("tierfs_store_hedges_total", "Hedged (duplicate) GETs sent for late answers.", l,
                static_cast<double>(s.hedges_issued));
  e->AddCounter("tierfs_store_hedge_wins_total", "Hedged GETs that answered first.", l,
                static_cast<double>(s.hedges_won));
  e->AddCounter("tierfs_store_throttled_total", "Answers 503 SlowDown or 429 Too Many Requests.", l,
                static_cast<double>(s.throttled));
  e->AddCounter("tierfs_store_concurrency_decreases_total",
                "Times the adaptive concurrency limit was cut (throttling, timeouts, spikes).", l,
                static_cast<double>(s.concurrency_decreases));
  e->AddGauge("tierfs_store_concurrency_limit", "Current adaptive limit on requests in flight.", l,
              static_cast<double>(s.concurrency_limit));
  e->AddCounter("tierfs_store_downloaded_bytes_total", "Body bytes of successful GETs.", l,
                static_cast<double>(s.bytes_read));
  e->AddCounter("tierfs_store_uploaded_bytes_total", "Bytes written (PUT) to the store.", l,
                static_cast<double>(s.bytes_written));
  e->AddCounter("tierfs_store_parallel_reads_total", "Reads split into parallel ranged GETs.", l,
                static_cast<double>(s.parallel_reads));
  e->AddGauge("tierfs_store_ttfb_p95_seconds", "Recent p95 time to first byte of GETs.", l,
              static_cast<double>(s.ttfb_p95_us) / 1e6);
}

}  // namespace tierfs
