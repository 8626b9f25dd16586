// The components of a mount, built and torn down (daemon/components.h).

#include "daemon/components.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <new>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/logging.h"
#include "base/units.h"
#include "base/version.h"
#include "daemon/credential_chain.h"
#include "daemon/manifest_cli.h"

namespace tierfs {

void Components::Shutdown() {
  prefault = std::jthread();  // requests stop and joins
  metrics_server.reset();     // joins its thread: no scrape from here on
  process_metrics.Reset();
  origin_metrics.Reset();
  l3_metrics.Reset();
  server.reset();
  fs.reset();
  jobs.reset();  // joins the job threads; a running job stays "running" and resumes next time
  catalog.reset();
  cache.reset();  // joins the prefetch pool; destroys the tiers (L2 flushes its atimes)
  policies.reset();
  flash.reset();
  l3_store.reset();
  if (meta) {
    Status s = meta->Sync();
    if (!s.ok()) Logger(Module::kDaemon).warn("metastore sync at exit: {}", s.ToString());
    meta.reset();
  }
  origin.reset();
  transport.reset();
  cache_lock.reset();  // last: nothing touches the cache directory any more
}

namespace {

// Moves a damaged metadata store aside (to PATH.corrupt, replacing an older one) so the daemon
// can start with an empty index: the cache is a cache, and a power loss under MDB_NOSYNC must
// cost a cold cache, never the mount. The L2 start-up sweep then removes the block files the new
// index does not know. Stored policies and prefetch jobs are lost with it (logged).
Status MoveMetaStoreAside(const MetaStoreOptions& options, const Status& why) {
  const std::string& path = options.path;
  const std::string& shown = options.display_path.empty() ? path : options.display_path;
  const std::string aside = path + ".corrupt";
  Logger(Module::kDaemon)
      .error(
          "the metadata store at {} is damaged ({}); moving it to {}.corrupt and starting with "
          "an empty cache index (cached blocks, stored policies and prefetch jobs are dropped)",
          shown, why.ToString(), shown);
  std::error_code ec;
  std::filesystem::remove_all(aside, ec);
  std::filesystem::rename(path, aside, ec);
  if (ec) {
    return Status::IOError(
        fmt::format("cannot move the damaged metadata store {} aside: {}", shown, ec.message()));
  }
  return Status::OK();
}

// Replaces a damaged metadata store (`why`) with a new, empty one (MoveMetaStoreAside).
Result<std::unique_ptr<MetaStore>> RecreateMetaStore(const MetaStoreOptions& options,
                                                     const Status& why) {
  TIERFS_RETURN_IF_ERROR(MoveMetaStoreAside(options, why));
  return NewLmdbMetaStore(options);
}

// Opens the metadata store, recovering from a damaged one.
Result<std::unique_ptr<MetaStore>> OpenMetaStore(const MetaStoreOptions& options) {
  auto m = NewLmdbMetaStore(options);
  if (m.ok() || m.status().code() != Status::Code::kCorruption) return m;
  return RecreateMetaStore(options, m.status());
}

// metadata.manifest: reads the manifest (a local file, or an s3:// object read with the origin's
// endpoint, region and credentials), checks it describes the mounted source, and makes the
// catalog serving it.
Status OpenManifestCatalog(const DaemonOptions& o, Components* c) {
  Result<Manifest> m = Status::Internal("unset");
  if (o.manifest.starts_with("s3://")) {
    const size_t slash = o.manifest.find('/', 5);  // FinishOptions checked s3://BUCKET/KEY
    S3Options s3 = o.origin;
    s3.bucket = o.manifest.substr(5, slash - 5);
    s3.prefix.clear();
    TIERFS_RETURN_IF_ERROR(AttachCredentialChain(
        &s3, o.profile, !o.profile.empty() && !o.profile_from_env, o.origin_region_set,
        c->transport.get(), "the manifest " + o.manifest, kOriginCredentialsHint));
    auto store = NewS3BlobStore(s3, c->transport.get(), SystemClock());
    if (!store.ok()) return store.status().WithContext("reading the manifest " + o.manifest);
    m = FetchManifest(store->get(), o.manifest.substr(slash + 1), o.manifest);
  } else {
    m = ReadManifestFile(o.manifest);
  }
  if (!m.ok()) return m.status();
  TIERFS_RETURN_IF_ERROR(CheckManifestSource(*m, o.source, o.manifest));
  ManifestCatalogStats st;
  c->catalog = NewManifestCatalog(*m, &st);
  Logger(Module::kDaemon)
      .info("serving manifest {} (checksum {}, made {} s ago): {} files, {} directories{}",
            o.manifest, m->checksum,
            (SystemClock()->NowUnixNanos() - m->created_unix_ns) / 1'000'000'000, st.files,
            st.directories,
            st.hidden > 0 ? fmt::format(", {} keys not servable", st.hidden) : std::string());
  return Status::OK();
}

// First: a taken port fails the mount before anything is opened.
Status StartMetricsServer(const DaemonOptions& o, Components* c) {
  if (o.metrics_address.empty()) return Status::OK();
  MetricsServerOptions mo;
  mo.address = o.metrics_address;
  auto m = MetricsServer::Start(mo, &c->registry);
  if (!m.ok()) return m.status().WithContext("metrics.address (--metrics-address)");
  c->metrics_server = std::move(*m);
  c->process_metrics = RegisterProcessMetrics(&c->registry, std::string(Version()));
  Logger(Module::kDaemon)
      .info("serving metrics on http://{}/metrics", c->metrics_server->address());
  return Status::OK();
}

// The HTTP transport (when anything speaks S3) and the origin store.
Status OpenOrigin(const DaemonOptions& o, Components* c) {
  if (o.source_uri.scheme == SourceUri::Scheme::kS3 || !o.l3.empty() ||
      o.manifest.starts_with("s3://")) {
    auto t = NewHttpTransport(o.http);
    if (!t.ok()) return t.status().WithContext("starting the HTTP transport");
    c->transport = std::move(*t);
  }
  if (o.source_uri.scheme == SourceUri::Scheme::kS3) {
    S3Options origin = o.origin;
    TIERFS_RETURN_IF_ERROR(AttachCredentialChain(
        &origin, o.profile, !o.profile.empty() && !o.profile_from_env, o.origin_region_set,
        c->transport.get(), "the S3 origin", kOriginCredentialsHint));
    auto s = NewS3BlobStore(origin, c->transport.get(), SystemClock());
    if (!s.ok()) return s.status().WithContext("configuring the S3 origin");
    c->origin = std::move(*s);
  } else {
    auto s = NewFileBlobStore(o.file_origin);
    if (!s.ok()) return s.status().WithContext("opening the file:// origin");
    c->origin = std::move(*s);
  }
  return Status::OK();
}

// The cache directory, private and locked before any block or LMDB file in it is opened (or
// swept), and the metadata store in it. `*meta_options`: the store's options as opened.
Status OpenCacheDir(const DaemonOptions& o, Components* c, MetaStoreOptions* meta_options) {
  auto lock = PrepareCacheDir(o.cache_dir);
  if (!lock.ok()) return lock.status();
  c->cache_lock = std::move(*lock);
  // Everything under the cache directory is opened through the directory verified and held
  // open above, never again through its name (which another user could have swapped since).
  *meta_options = o.meta;
  meta_options->path = c->cache_lock->anchored_path() + "/meta";
  meta_options->display_path = o.meta.path;
  auto m = OpenMetaStore(*meta_options);
  if (!m.ok()) return m.status().WithContext("opening the metadata store at " + o.meta.path);
  c->meta = std::move(*m);
  return Status::OK();
}

// L1 (memory) and L2 (flash) into `host`, when configured.
Status AddHostTiers(const DaemonOptions& o, const MetaStoreOptions& meta_options, Components* c,
                    std::vector<std::unique_ptr<Tier>>* host) {
  Clock* clock = SystemClock();
  if (o.l1.capacity_bytes > 0) {
    MemoryTierOptions l1 = o.l1;
    l1.block_bytes = o.cache.block_size;
    if (const int shards = MemoryTierShards(l1); shards < l1.shards) {
      Logger(Module::kDaemon)
          .info(
              "l1: {} bytes in {} shards, not cache.l1_shards {}: each shard holds at least {} "
              "blocks of {} bytes",
              l1.capacity_bytes, shards, l1.shards, MemoryTierOptions::kMinBlocksPerShard,
              l1.block_bytes);
    }
    host->push_back(NewMemoryTier(l1));
  }
  if (o.l2.capacity_bytes == 0) return Status::OK();
  // Block files live in CACHE_DIR/blocks, apart from CACHE_DIR/meta: the L2 start-up sweep
  // removes files it does not know, and must never see the LMDB files.
  auto f = NewPosixFlashStore(c->cache_lock->anchored_path() + "/blocks", o.l2_fsync);
  if (!f.ok()) return f.status().WithContext("opening the flash cache at " + o.cache_dir);
  c->flash = std::move(*f);
  auto l2 = NewFlashTier(o.l2, c->flash.get(), c->meta.get(), clock);
  if (!l2.ok() && l2.status().code() == Status::Code::kCorruption) {
    // The store opened but its block index is unreadable: same recovery as a failed open.
    c->meta.reset();
    auto again = RecreateMetaStore(meta_options, l2.status());
    if (!again.ok()) return again.status().WithContext("reopening the metadata store");
    c->meta = std::move(*again);
    l2 = NewFlashTier(o.l2, c->flash.get(), c->meta.get(), clock);
  }
  if (!l2.ok()) return l2.status().WithContext("opening the L2 tier");
  host->push_back(std::move(*l2));
  return Status::OK();
}

// The L3 store (memcached pool or S3 bucket), probed: an unreachable L3 does not stop the mount.
Status OpenL3Store(const DaemonOptions& o, Components* c) {
  if (o.l3_is_memcached) {
    auto s = NewMemcachedBlobStore(o.l3_memcached);
    if (!s.ok()) return s.status().WithContext("configuring the L3 memcached pool " + o.l3);
    c->l3_store = std::move(*s);
    // One get: a miss (NotFound) is an answer; Unavailable when no server answers. Either way
    // the mount goes on, reading from the origin until the pool answers.
    auto probe = c->l3_store->Head("tierfs-probe");
    if (!probe.ok() && !probe.status().IsNotFound()) {
      Logger(Module::kDaemon)
          .warn("L3 {} does not answer: {}; reading from the origin until it does", o.l3,
                probe.status().ToString());
    }
    return Status::OK();
  }
  S3Options l3_options = o.l3_store;
  TIERFS_RETURN_IF_ERROR(AttachCredentialChain(&l3_options, o.l3_profile, !o.l3_profile.empty(),
                                               /*region_set=*/true, c->transport.get(),
                                               "the L3 store " + o.l3, kL3CredentialsHint));
  auto s = NewS3BlobStore(l3_options, c->transport.get(), SystemClock());
  if (!s.ok()) return s.status().WithContext("configuring the L3 store " + o.l3);
  c->l3_store = std::move(*s);
  // An unreachable L3 does not stop the mount: reads go to the origin until it answers.
  auto probe = c->l3_store->List("blocks/", "/", "", 1);
  if (!probe.ok()) {
    Logger(Module::kDaemon)
        .warn("L3 {} ({}) does not answer: {}; reading from the origin until it does", o.l3,
              c->l3_store->Describe(), probe.status().ToString());
  }
  return Status::OK();
}

// The L3 tier into `shared`, when configured; `*listing_share` is its share of directory
// listings (owned by the tier).
Status AddL3Tier(const DaemonOptions& o, Components* c, std::vector<std::unique_ptr<Tier>>* shared,
                 ListingShare** listing_share) {
  if (o.l3.empty()) return Status::OK();
  TIERFS_RETURN_IF_ERROR(OpenL3Store(o, c));
  auto l3 = NewRemoteTier(o.l3_tier, c->l3_store.get(), SystemClock());
  if (!l3.ok()) return l3.status().WithContext("opening the L3 tier");
  *listing_share = (*l3)->listing_share();  // directory listings shared through L3 too
  shared->push_back(std::move(*l3));
  return Status::OK();
}

// The policies and the tiered cache over `tiers`.
Status OpenCache(const DaemonOptions& o, metrics::Registry* registry, Components* c,
                 CacheTiers tiers) {
  PolicyOptions po = o.policies;
  if (po.pin_quota_bytes == UINT64_MAX)
    po.pin_quota_bytes = std::max<uint64_t>(1, o.l2.capacity_bytes / 2);
  auto policies = PolicyResolver::Open(po, c->meta.get());
  if (!policies.ok()) return policies.status().WithContext("loading the policies");
  c->policies = std::move(*policies);
  TieredCacheOptions cache_options = o.cache;
  cache_options.metrics = registry;
  PolicyResolver* resolver = c->policies.get();
  cache_options.placement = [resolver](std::string_view key) {
    return resolver->PlacementFor(key);
  };
  auto cache = TieredCache::Open(cache_options, std::move(tiers), c->origin.get(), SystemClock());
  if (!cache.ok()) return cache.status().WithContext("opening the tiered cache");
  c->cache = std::move(*cache);
  return Status::OK();
}

// cache.l1_prefault: L1's memory faulted in on an idle-priority thread.
void StartPrefault(const DaemonOptions& o, Components* c) {
  if (!o.l1_prefault || o.l1.capacity_bytes == 0) return;
  const uint64_t bytes = o.l1.capacity_bytes;
  const size_t block = o.cache.block_size;
  const size_t run = static_cast<size_t>(c->cache->readahead_run_blocks() * block);
  c->prefault = std::jthread([bytes, block, run](std::stop_token stop) {
    (void)::pthread_setname_np(::pthread_self(), "tierfs-prefault");
    // Idle priority: it runs on CPU time nothing else wants, and a read never waits for it
    // (one that comes first takes fresh memory as without it).
    sched_param param{};
    (void)::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &param);
    const auto start = std::chrono::steady_clock::now();
    const uint64_t done = Block::Prefault(bytes, block, run, stop);
    Logger(Module::kDaemon)
        .info("L1 memory faulted in: {} in {} ms", FormatSize(done),
              std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count());
  });
}

// The origin's and L3's request metrics (after the cache's, which come first in a scrape).
void RegisterStoreMetrics(const DaemonOptions& o, metrics::Registry* registry, Components* c) {
  BlobStore* origin = c->origin.get();
  c->origin_metrics = registry->Add(
      [origin](metrics::Exposition* e) { CollectStoreMetrics(origin->Stats(), "origin", e); });
  BlobStore* l3 = c->l3_store.get();
  if (l3 == nullptr) return;
  c->l3_metrics = registry->Add([l3, memcached = o.l3_is_memcached](metrics::Exposition* e) {
    CollectStoreMetrics(l3->Stats(), "l3", e);
    if (!memcached) return;
    const MemcachedStats m = GetMemcachedStats(*l3);
    e->AddCounter("tierfs_l3_memcached_server_failures_total",
                  "memcached calls a failed server turned into misses.", {},
                  static_cast<double>(m.server_failures));
    e->AddCounter("tierfs_l3_memcached_too_large_total",
                  "Blocks the memcached servers refused as larger than their item size (-I).", {},
                  static_cast<double>(m.too_large));
  });
}

// The catalog: the manifest's, or live listings of the origin, probed.
Status OpenCatalog(const DaemonOptions& o, ListingShare* listing_share, Components* c) {
  if (!o.manifest.empty()) {
    // A manifest mount: exactly the manifest's tree, and no LIST or HEAD to the origin at all
    // (not even the probe below: a wrong bucket shows as reads failing).
    return OpenManifestCatalog(o, c);
  }
  CatalogOptions catalog_options = o.catalog;
  // Shared listings carry no owner or mode: a file:// source's listings (whose entries show
  // the origin's owner and mode) are not shared, so no host serves them without.
  catalog_options.listing_share =
      c->origin->Describe().starts_with("file://") ? nullptr : listing_share;
  auto catalog = Catalog::Open(catalog_options, c->origin.get(), c->meta.get(), SystemClock());
  if (!catalog.ok()) return catalog.status().WithContext("opening the catalog");
  c->catalog = std::move(*catalog);

  // One List of the root now, so a wrong bucket, endpoint or credentials fails the mount with
  // a clear message instead of EIO later.
  if (!o.probe_origin) return Status::OK();
  auto probe = c->origin->List("", "/", "", 1);
  if (!probe.ok()) {
    return probe.status().WithContext(
        fmt::format("cannot list {} ({})", o.source, c->origin->Describe()));
  }
  return Status::OK();
}

// The Filesystem and the deep prefetch jobs it serves.
Status OpenFilesystem(const DaemonOptions& o, metrics::Registry* registry, Components* c) {
  c->fs = std::make_unique<Filesystem>(o.fs, c->catalog.get(), c->cache.get(), SystemClock());
  PrefetchJobsOptions jobs_options = o.prefetch_jobs;
  jobs_options.metrics = registry;
  jobs_options.origin_limit = [origin = c->origin.get()] {
    return origin->Stats().concurrency_limit;
  };
  auto jobs = PrefetchJobs::Open(jobs_options, c->catalog.get(), c->cache.get(), c->meta.get());
  if (!jobs.ok()) return jobs.status().WithContext("starting the prefetch jobs");
  c->jobs = std::move(*jobs);
  c->fs->AttachPrefetchJobs(c->jobs.get());
  c->fs->AttachPolicies(c->policies.get());
  return Status::OK();
}

// Builds everything below the FUSE server.
Status Build(const DaemonOptions& o, Components* c) {
  TIERFS_RETURN_IF_ERROR(StartMetricsServer(o, c));
  TIERFS_RETURN_IF_ERROR(OpenOrigin(o, c));
  metrics::Registry* const registry = c->metrics_server ? &c->registry : nullptr;
  MetaStoreOptions meta_options;
  TIERFS_RETURN_IF_ERROR(OpenCacheDir(o, c, &meta_options));
  CacheTiers tiers;  // L1 and L2 on this host, L3 shared by the region
  TIERFS_RETURN_IF_ERROR(AddHostTiers(o, meta_options, c, &tiers.host));
  ListingShare* listing_share = nullptr;  // owned by the L3 tier (in c->cache below)
  TIERFS_RETURN_IF_ERROR(AddL3Tier(o, c, &tiers.shared, &listing_share));
  TIERFS_RETURN_IF_ERROR(OpenCache(o, registry, c, std::move(tiers)));
  StartPrefault(o, c);
  if (registry != nullptr) RegisterStoreMetrics(o, registry, c);
  TIERFS_RETURN_IF_ERROR(OpenCatalog(o, listing_share, c));
  return OpenFilesystem(o, registry, c);
}

}  // namespace

Status BuildComponents(const DaemonOptions& o, Components* c) {
  try {
    return Build(o, c);
  } catch (const std::bad_alloc&) {
    return Status::Internal(
        "out of memory while opening the caches (std::bad_alloc): check the size settings "
        "(cache.l1_size, cache.l2_size, cache.readahead_budget) against this host");
  } catch (const std::system_error& e) {
    return Status::Internal(fmt::format(
        "while opening the caches: {} (a thread or another resource could not be created: "
        "check the process limits, ulimit -v and -u)",
        e.what()));
  } catch (const std::exception& e) {
    return Status::Internal(fmt::format("while opening the caches: {}", e.what()));
  }
}

}  // namespace tierfs
