// daemon/components — every component of a mount, built bottom-up from DaemonOptions (HTTP
// transport, origin BlobStore, MetaStore, L1/L2/L3 tiers, TieredCache, Catalog, Filesystem),
// with the origin probed by one List of the root, and torn down in reverse. The FuseServer is
// added by the mount (daemon/mount_cli.cc) once everything below it stands.
//
// Thread-safety: not thread-safe; REQUIRES: external synchronization (the daemon's main thread
// builds and destroys it; the components themselves are thread-safe).
#pragma once

#include <memory>
#include <thread>

#include "base/metrics.h"
#include "base/status.h"
#include "daemon/cache_dir.h"
#include "daemon/config.h"
#include "daemon/metrics_server.h"
#include "tiercache/prefetch_jobs.h"

namespace tierfs {

// Every component of a mount, in construction order; destroyed in reverse (C8: raw pointers
// between them are non-owning and point downwards).
struct Components {
  // The metrics of every component (each registers itself, and unregisters when destroyed), and
  // the endpoint serving them (metrics.address); stopped first.
  metrics::Registry registry;
  std::unique_ptr<MetricsServer> metrics_server;
  metrics::Registry::Registration process_metrics, origin_metrics, l3_metrics;
  std::unique_ptr<HttpTransport> transport;
  std::unique_ptr<BlobStore> origin;
  std::unique_ptr<BlobStore> l3_store;  // the regional L3 store, when configured
  std::unique_ptr<MetaStore> meta;
  std::unique_ptr<FlashStore> flash;
  std::unique_ptr<PolicyResolver> policies;  // user.tierfs.pin/ttl/policy + [[policy]]
  std::unique_ptr<TieredCache> cache;
  std::unique_ptr<Catalog> catalog;
  std::unique_ptr<PrefetchJobs> jobs;  // deep prefetch (user.tierfs.prefetch)
  std::unique_ptr<Filesystem> fs;
  std::unique_ptr<FuseServer> server;
  std::unique_ptr<CacheDirLock> cache_lock;  // held while anything uses the cache directory
  // Faults L1's memory in ahead of use (cache.l1_prefault); stopped and joined first.
  std::jthread prefault;

  ~Components() { Shutdown(); }

  // Orderly teardown: unmount, stop serving, join the cache's threads, sync LMDB. Idempotent.
  void Shutdown();
};

// Builds everything below the FUSE server into `c`, with an exception (an allocation the host
// cannot satisfy) turned into a Status that names it, so it reaches the log, the waiting parent
// and systemd like any other failure. Failures are runtime failures (exit 1).
Status BuildComponents(const DaemonOptions& o, Components* c);

}  // namespace tierfs
