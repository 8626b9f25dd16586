// tierfs — the command line: `tierfs mount`, `tierfs status`, `tierfs prefetch`, `tierfs
// log-level`, `tierfs config check`, `tierfs manifest create|diff`, `tierfs l3 gc`, `tierfs
// --version`.
//
// mount: parse flags → config file → overlay flags → environment → Validate (exit 2 naming the
// bad flag/key) → resolve credentials → [daemonize] → build the components bottom-up (HTTP
// transport, origin BlobStore, MetaStore, L1/L2/L3 tiers, TieredCache, Catalog, Filesystem,
// FuseServer) → probe the origin with one List of the root → mount → serve → orderly teardown.
//
// Daemonizing: the parent forks before any thread exists (curl, LMDB writer, prefetch pool and
// FUSE workers are all created in the child). The child does the whole start-up and mount, then
// reports "OK" or the error through a pipe; the parent exits 0 only once the mount is usable,
// non-zero with the child's message otherwise.
//
// Exit codes: 0 ok (also after fusermount3 -u, SIGINT, SIGTERM), 1 runtime failure (origin
// unreachable, mount failed), 2 usage or configuration error.

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/units.h"
#include "daemon/cache_dir.h"
#include "daemon/config.h"
#include "daemon/host_limits.h"
#include "daemon/internal/config_table.h"
#include "daemon/log_control.h"
#include "daemon/manifest_cli.h"
#include "daemon/memory_limit.h"
#include "daemon/metrics_server.h"
#include "daemon/mounts.h"
#include "daemon/notify.h"
#include "daemon/prefetch_cli.h"
#include "daemon/status.h"
#include "tiercache/prefetch_jobs.h"

#ifndef TIERFS_VERSION
#define TIERFS_VERSION "0.0.0"
#endif

namespace tierfs {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

// A start-up failure: the exit code and the message for the user.
struct Failure {
  int code = kExitRuntime;
  std::string message;
};

// Reports the outcome of the start-up to the waiting parent (when daemonized).
class StartupPipe {
 public:
  explicit StartupPipe(UniqueFd fd) : fd_(std::move(fd)) {}
  void Report(const std::string& msg) {
    if (fd_.get() < 0) return;
    size_t off = 0;
    while (off < msg.size()) {
      ssize_t n = write(fd_.get(), msg.data() + off, msg.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    fd_.Reset();  // one report only
  }
  void Ok() { Report("OK\n"); }
  void Fail(const Failure& f) { Report(fmt::format("ERR {} {}\n", f.code, f.message)); }

 private:
  UniqueFd fd_;
};

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
  void Shutdown() {
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
};

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

// Gives `s3` a provider from the AWS credential chain (blob_store.h) for `profile`, unless its
// requests are anonymous or signed with fixed keys. Without a configured region, the profile's
// `region` from the AWS config file becomes the store's region (and so its endpoint's).
// InvalidArgument listing what was tried when no source yields credentials.
Status AttachCredentialChain(S3Options* s3, const std::string& profile, bool profile_explicit,
                             bool region_set, HttpTransport* transport, std::string_view what,
                             std::string_view hint) {
  if (s3->credentials.anonymous || !s3->credentials.access_key_id.empty()) return Status::OK();
  CredentialChainOptions co;
  co.getenv = RealGetEnv;
  co.profile = profile;
  co.profile_explicit = profile_explicit;
  co.region = region_set ? s3->region : std::string();
  co.transport = transport;
  co.clock = SystemClock();
  co.ca_bundle = s3->ca_bundle;
  auto chain = NewCredentialChain(co);
  if (!chain.ok()) {
    return Status::InvalidArgument(
        fmt::format("no credentials for {}: {}; {}", what, chain.status().message(), hint));
  }
  s3->credentials_provider = chain->provider;
  if (!region_set && !chain->profile_region.empty()) {
    s3->region = chain->profile_region;
    s3->discover_region = false;
  }
  Logger(Module::kDaemon)
      .info("{}: credentials from {}{}", what, chain->provider->source(),
            chain->provider->temporary() ? " (temporary, refreshed in the background)" : "");
  return Status::OK();
}

constexpr std::string_view kOriginCredentialsHint =
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, use --profile / AWS_PROFILE with "
    "~/.aws/credentials or ~/.aws/config, run with an instance role, IRSA or container "
    "credentials, or use --no-sign-request for a public bucket";
constexpr std::string_view kL3CredentialsHint =
    "set cache.l3_access_key_id_env and cache.l3_secret_access_key_env, cache.l3_profile, or "
    "cache.l3_no_sign_request";

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

// Builds everything below the FUSE server. Failures are runtime failures (exit 1).
Status Build(const DaemonOptions& o, Components* c) {
  Clock* clock = SystemClock();
  if (!o.metrics_address.empty()) {
    // First: a taken port fails the mount before anything is opened.
    MetricsServerOptions mo;
    mo.address = o.metrics_address;
    auto m = MetricsServer::Start(mo, &c->registry);
    if (!m.ok()) return m.status().WithContext("metrics.address (--metrics-address)");
    c->metrics_server = std::move(*m);
    c->process_metrics = RegisterProcessMetrics(&c->registry, TIERFS_VERSION);
    Logger(Module::kDaemon)
        .info("serving metrics on http://{}/metrics", c->metrics_server->address());
  }
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
    auto s = NewS3BlobStore(origin, c->transport.get(), clock);
    if (!s.ok()) return s.status().WithContext("configuring the S3 origin");
    c->origin = std::move(*s);
  } else {
    auto s = NewFileBlobStore(o.file_origin);
    if (!s.ok()) return s.status().WithContext("opening the file:// origin");
    c->origin = std::move(*s);
  }
  metrics::Registry* const registry = c->metrics_server ? &c->registry : nullptr;
  // Private and locked before any block or LMDB file in it is opened (or swept).
  auto lock = PrepareCacheDir(o.cache_dir);
  if (!lock.ok()) return lock.status();
  c->cache_lock = std::move(*lock);
  // Everything under the cache directory is opened through the directory verified and held
  // open above, never again through its name (which another user could have swapped since).
  const std::string anchored = c->cache_lock->anchored_path();
  MetaStoreOptions meta_options = o.meta;
  meta_options.path = anchored + "/meta";
  meta_options.display_path = o.meta.path;
  auto m = OpenMetaStore(meta_options);
  if (!m.ok()) return m.status().WithContext("opening the metadata store at " + o.meta.path);
  c->meta = std::move(*m);

  std::vector<std::unique_ptr<Tier>> tiers;
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
    tiers.push_back(NewMemoryTier(l1));
  }
  if (o.l2.capacity_bytes > 0) {
    // Block files live in CACHE_DIR/blocks, apart from CACHE_DIR/meta: the L2 start-up sweep
    // removes files it does not know, and must never see the LMDB files.
    auto f = NewPosixFlashStore(anchored + "/blocks", o.l2_fsync);
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
    tiers.push_back(std::move(*l2));
  }
  ListingShare* listing_share = nullptr;  // owned by the L3 tier (in c->cache below)
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
  } else if (!o.l3.empty()) {
    S3Options l3_options = o.l3_store;
    TIERFS_RETURN_IF_ERROR(AttachCredentialChain(&l3_options, o.l3_profile, !o.l3_profile.empty(),
                                                 /*region_set=*/true, c->transport.get(),
                                                 "the L3 store " + o.l3, kL3CredentialsHint));
    auto s = NewS3BlobStore(l3_options, c->transport.get(), clock);
    if (!s.ok()) return s.status().WithContext("configuring the L3 store " + o.l3);
    c->l3_store = std::move(*s);
    // An unreachable L3 does not stop the mount: reads go to the origin until it answers.
    auto probe = c->l3_store->List("blocks/", "/", "", 1);
    if (!probe.ok()) {
      Logger(Module::kDaemon)
          .warn("L3 {} ({}) does not answer: {}; reading from the origin until it does", o.l3,
                c->l3_store->Describe(), probe.status().ToString());
    }
  }
  if (!o.l3.empty()) {
    auto l3 = NewRemoteTier(o.l3_tier, c->l3_store.get(), clock);
    if (!l3.ok()) return l3.status().WithContext("opening the L3 tier");
    listing_share = (*l3)->listing_share();  // directory listings shared through L3 too
    tiers.push_back(std::move(*l3));
  }
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
  auto cache = TieredCache::Open(cache_options, std::move(tiers), c->origin.get(), clock);
  if (!cache.ok()) return cache.status().WithContext("opening the tiered cache");
  c->cache = std::move(*cache);
  if (o.l1_prefault && o.l1.capacity_bytes > 0) {
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
  if (registry != nullptr) {  // after the cache's metrics, which come first in a scrape
    BlobStore* origin = c->origin.get();
    c->origin_metrics = registry->Add(
        [origin](metrics::Exposition* e) { CollectStoreMetrics(origin->Stats(), "origin", e); });
    if (BlobStore* l3 = c->l3_store.get()) {
      c->l3_metrics = registry->Add([l3, memcached = o.l3_is_memcached](metrics::Exposition* e) {
        CollectStoreMetrics(l3->Stats(), "l3", e);
        if (!memcached) return;
        const MemcachedStats m = GetMemcachedStats(*l3);
        e->AddCounter("tierfs_l3_memcached_server_failures_total",
                      "memcached calls a failed server turned into misses.", {},
                      static_cast<double>(m.server_failures));
        e->AddCounter("tierfs_l3_memcached_too_large_total",
                      "Blocks the memcached servers refused as larger than their item size (-I).",
                      {}, static_cast<double>(m.too_large));
      });
    }
  }
  if (!o.manifest.empty()) {
    // A manifest mount: exactly the manifest's tree, and no LIST or HEAD to the origin at all
    // (not even the probe below: a wrong bucket shows as reads failing).
    TIERFS_RETURN_IF_ERROR(OpenManifestCatalog(o, c));
  } else {
    CatalogOptions catalog_options = o.catalog;
    // Shared listings carry no owner or mode: a file:// source's listings (whose entries show
    // the origin's owner and mode) are not shared, so no host serves them without.
    catalog_options.listing_share =
        c->origin->Describe().starts_with("file://") ? nullptr : listing_share;
    auto catalog = Catalog::Open(catalog_options, c->origin.get(), c->meta.get(), clock);
    if (!catalog.ok()) return catalog.status().WithContext("opening the catalog");
    c->catalog = std::move(*catalog);

    // One List of the root now, so a wrong bucket, endpoint or credentials fails the mount with
    // a clear message instead of EIO later.
    auto probe = c->origin->List("", "/", "", 1);
    if (!probe.ok()) {
      return probe.status().WithContext(
          fmt::format("cannot list {} ({})", o.source, c->origin->Describe()));
    }
  }
  c->fs = std::make_unique<Filesystem>(o.fs, c->catalog.get(), c->cache.get(), clock);
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

// Build, with an exception (an allocation the host cannot satisfy) turned into a Status that
// names it, so it reaches the log, the waiting parent and systemd like any other failure.
Status BuildOrExplain(const DaemonOptions& o, Components* c) {
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

// Blocks SIGINT, SIGTERM and SIGHUP, or unblocks SIGINT and SIGTERM: SIGHUP stays blocked in
// every thread and is taken by the HupReopener's sigwait (log reopen), never by the FUSE loop.
void SetSignalsBlocked(bool blocked) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (blocked) sigaddset(&set, SIGHUP);
  pthread_sigmask(blocked ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

void DetachStdio() {
  int fd = open("/dev/null", O_RDWR);
  if (fd < 0) return;
  dup2(fd, STDIN_FILENO);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  if (fd > STDERR_FILENO) close(fd);
}

// The mount proper, in the process that will serve it. `pipe` reports the outcome to a waiting
// parent (or does nothing in the foreground). Returns the exit code.
// Raises the soft limit on open files to the hard limit. The daemon's descriptors serve block
// files, origin connections and metrics clients at once, and the usual soft default (1024) is a
// limit meant for select(2), which tierfs does not use; the hard limit is what the admin (or
// systemd's LimitNOFILE) granted.
void RaiseOpenFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t soft = rl.rlim_cur;
  if (soft >= rl.rlim_max) {
    Logger(Module::kDaemon).info("open files: at most {}", soft);
    return;
  }
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    Logger(Module::kDaemon)
        .warn("open files: cannot raise the soft limit {} to the hard limit {}: {}", soft,
              rl.rlim_max, std::strerror(errno));
    return;
  }
  Logger(Module::kDaemon)
      .info("open files: at most {} (soft limit raised from {})", rl.rlim_max, soft);
}

int ServeMount(const DaemonOptions& o, StartupPipe* pipe) {
  spdlog::logger& log = Logger(Module::kDaemon);
  // Before any thread exists. Cache blocks are mappings of their own (tiercache/block.cc). For
  // the other large buffers (libfuse's request buffers, hedged-GET copies, listings) a fixed
  // mmap threshold keeps glibc from raising it after the first large free and carving them from
  // the arenas instead, where freed memory fragments and is not returned; and a few arenas
  // rather than 8 per core bound what the many short-lived small allocations of the FUSE,
  // prefetch and HTTP threads can strand.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_ARENA_MAX, 4);
  // Signals stay blocked in every thread the components start; only the FUSE loop's thread
  // takes SIGINT/SIGTERM (fuse_set_signal_handlers) so the loop wakes up and exits. SIGHUP goes
  // to `hup`, which reopens the log file.
  SetSignalsBlocked(true);
  HupReopener hup;
  DaemonLogControl control(o.cache_dir, TIERFS_VERSION);  // outlives `c` (user.tierfs.log_level)
  log.info("tierfs {} starting: {}", TIERFS_VERSION, DescribeOptions(o));
  RaiseOpenFileLimit();
  NotifyStatus(
      fmt::format("starting: opening the cache at {} and listing {}", o.cache_dir, o.source));
  Components c;
  Status s = BuildOrExplain(o, &c);
  // Checked again right before mounting: building may have taken a while.
  if (s.ok()) s = CheckMountpoint(o.mountpoint, o.allow_nonempty);
  if (!s.ok()) {
    log.error("{}", s.ToString());
    NotifyStatus("mount failed: " + s.ToString());
    pipe->Fail({kExitRuntime, s.ToString()});
    c.Shutdown();
    return kExitRuntime;
  }
  NotifyStatus(fmt::format("mounting {} at {}", o.source, o.mountpoint));
  c.fs->AttachDaemonControl(&control);
  FuseOptions fuse_options = o.fuse;
  if (c.metrics_server) fuse_options.metrics = &c.registry;
  auto server = FuseServer::Mount(fuse_options, c.fs.get(), o.mountpoint);
  if (!server.ok()) {
    log.error("{}", server.status().ToString());
    NotifyStatus("mount failed: " + server.status().ToString());
    pipe->Fail({kExitRuntime, server.status().ToString()});
    c.Shutdown();
    return kExitRuntime;
  }
  c.server = std::move(*server);
  log.info("serving {} at {}", o.source, o.mountpoint);
  // The mount is in place (the kernel queues requests until Run() serves them): the waiting
  // parent and systemd (Type=notify) learn it at the same point.
  pipe->Ok();
  NotifyReady(fmt::format("serving {} at {}", o.source, o.mountpoint));
  if (!o.foreground) {
    DetachStdio();
    if (chdir("/") != 0) log.warn("chdir /: {}", std::strerror(errno));
  }
  SetSignalsBlocked(false);
  Status run = c.server->Run();
  SetSignalsBlocked(true);
  NotifyStopping(fmt::format("{} unmounted; syncing the cache and stopping", o.mountpoint));
  int code = kExitOk;
  if (!run.ok()) {
    log.error("fuse loop: {}", run.ToString());
    code = kExitRuntime;
  }
  log.info("stats at exit: {} {}", c.cache->StatsText(), c.fs->StatsText());
  c.Shutdown();
  log.info("tierfs stopped");
  spdlog::shutdown();
  return code;
}

// How a child that closed the start-up pipe without a report ended (it has exited, or is about
// to: waited for).
std::string ChildEnd(pid_t pid) {
  int status = 0;
  pid_t r;
  while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (r != pid) return fmt::format("the daemon (pid {}) ended", pid);
  if (WIFSIGNALED(status)) {
    return fmt::format("the daemon (pid {}) was killed by signal {} ({})", pid, WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  }
  return fmt::format("the daemon (pid {}) exited with status {}", pid, WEXITSTATUS(status));
}

// Forks; the parent waits for the child's start-up report and returns its exit code. The child
// returns -1 from here with *child_pipe set. `log` names where the child logs.
int Daemonize(UniqueFd* child_pipe, pid_t* child_pid, const std::string& log) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "tierfs: pipe: %s\n", std::strerror(errno));
    return kExitRuntime;
  }
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "tierfs: fork: %s\n", std::strerror(errno));
    return kExitRuntime;
  }
  if (pid == 0) {
    read_end.Reset();
    setsid();
    *child_pipe = std::move(write_end);
    return -1;
  }
  write_end.Reset();
  *child_pid = pid;
  std::string msg;
  char buf[4096];
  for (;;) {
    ssize_t n = read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    msg.append(buf, static_cast<size_t>(n));
  }
  read_end.Reset();
  if (msg.rfind("OK", 0) == 0) return kExitOk;
  if (msg.rfind("ERR ", 0) == 0) {
    int code = std::atoi(msg.c_str() + 4);
    size_t sp = msg.find(' ', 4);
    std::string text = sp == std::string::npos ? msg : msg.substr(sp + 1);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    std::fprintf(stderr, "tierfs: %s\n", text.c_str());
    return code > 0 ? code : kExitRuntime;
  }
  // Its own messages, if it could write any, went to the terminal (stderr is detached only once
  // the mount is ready) and to the log.
  std::fprintf(stderr, "tierfs: %s before the mount was ready (its log: %s)\n",
               ChildEnd(pid).c_str(), log.c_str());
  return kExitRuntime;
}

bool UserAllowOtherConfigured() {
  std::ifstream in("/etc/fuse.conf");
  std::string line;
  while (std::getline(in, line)) {
    size_t start = line.find_first_not_of(" \t");
    if (start != std::string::npos && line.compare(start, 16, "user_allow_other") == 0) return true;
  }
  return false;
}

// What `tierfs mount` checks about the place and the host before anything is opened: the mount
// point is no mount point and empty (unless -o nonempty); the memory budgets fit the host's
// memory; an L2 above the cache file system is only warned about on stderr (the free-space
// floor, cache.l2_min_free, bounds it).
Status CheckMountpointAndSizes(const DaemonOptions& o) {
  TIERFS_RETURN_IF_ERROR(CheckMountpoint(o.mountpoint, o.allow_nonempty));
  const HostLimits host = ReadHostLimits(o.cache_dir);
  TIERFS_RETURN_IF_ERROR(CheckMemorySizes(o, host));
  if (o.l2.capacity_bytes > 0) {
    if (std::string w = L2SizeWarning(o.l2.capacity_bytes, o.cache_dir, host); !w.empty()) {
      std::fprintf(stderr, "tierfs mount: warning: %s\n", w.c_str());
    }
  }
  return Status::OK();
}

int RunMount(DaemonOptions o, const std::string& config_path, const MountFlags& flags) {
  auto usage = [](const Status& s) {
    std::fprintf(stderr, "tierfs mount: %s\n", s.message().c_str());
    return kExitUsage;
  };
  // Everything the daemon creates (cache directories and files, the log file) is private to its
  // user unless a mode is given explicitly.
  ::umask(077);
  if (!config_path.empty()) {
    Status s = ApplyConfigFile(config_path, &o);
    if (!s.ok()) return usage(s);
  }
  if (Status s = ApplyFlags(flags, &o); !s.ok()) return usage(s);
  if (Status s = FinishOptions(&o, RealGetEnv); !s.ok()) return usage(s);
  if (Status s = ApplyMemoryLimit(&o); !s.ok()) return usage(s);

  // A FUSE mount whose daemon died (a crash, kill -9) is still mounted there. stat() says so
  // (ENOTCONN) only while the kernel holds no attributes of its root: after a recent open of
  // the root they are served from its cache, dead daemon or not. statfs() always asks the
  // daemon, so it tells a dead one in both cases.
  struct stat st;
  struct statfs sfs;
  int stat_rc = stat(o.mountpoint.c_str(), &st);
  if (stat_rc == 0 && statfs(o.mountpoint.c_str(), &sfs) != 0 && errno == ENOTCONN) stat_rc = -1;
  if (stat_rc != 0) {
    const int err = errno;
    if (err == ENOTCONN) {
      return usage(Status::InvalidArgument(
          fmt::format("MOUNTPOINT {} is a stale mount ({}: its daemon is gone); unmount it first: "
                      "fusermount3 -u {}",
                      o.mountpoint, std::strerror(err), o.mountpoint)));
    }
    return usage(Status::InvalidArgument(
        fmt::format("MOUNTPOINT {}: {}", o.mountpoint, std::strerror(err))));
  }
  if (!S_ISDIR(st.st_mode)) {
    return usage(
        Status::InvalidArgument(fmt::format("MOUNTPOINT {} is not a directory", o.mountpoint)));
  }
  if (Status s = CheckMountpointAndSizes(o); !s.ok()) return usage(s);
  // Credentials other than anonymous ones come from the credential chain, built in Build() once
  // daemonized (it may start threads and talk to STS or IMDS).
  if (o.source_uri.scheme == SourceUri::Scheme::kS3 && o.no_sign_request) {
    o.origin.credentials = Credentials{};
    o.origin.credentials.anonymous = true;
  }
  if (Status s = ResolveL3Credentials(&o, RealGetEnv); !s.ok()) return usage(s);
  if (Status s = LoadL3Key(&o); !s.ok()) return usage(s);
  if (o.fuse.allow_other && getuid() != 0 && !UserAllowOtherConfigured()) {
    std::fprintf(stderr,
                 "tierfs mount: warning: allow_other needs user_allow_other in /etc/fuse.conf; "
                 "mounting for this user only\n");
    o.fuse.allow_other = false;
  }
  if (o.fuse.allow_other && !o.fuse.default_permissions) {
    std::fprintf(stderr,
                 "tierfs mount: warning: allow_other without default_permissions: every local "
                 "user can read every file, whatever fuse.file_mode/dir_mode say\n");
  }

  if (o.foreground) {
    LogOptions lo = o.log;  // stderr unless --log-file
    std::string err;
    if (!ConfigureLogging(lo, &err)) return usage(Status::InvalidArgument("--log-file: " + err));
    StartupPipe none{UniqueFd()};
    return ServeMount(o, &none);
  }
  // Open the log before forking so a bad --log-file is a usage error on the terminal.
  LogOptions lo = o.log;
  if (lo.destination.empty()) lo.destination = "syslog";
  std::string err;
  if (!ConfigureLogging(lo, &err)) return usage(Status::InvalidArgument("--log-file: " + err));
  UniqueFd child_fd;
  pid_t child = -1;
  int rc = Daemonize(&child_fd, &child, lo.destination);
  if (rc == kExitOk) {
    std::printf("tierfs: mounted %s at %s (pid %d, cache %s, log %s)\n", o.source.c_str(),
                o.mountpoint.c_str(), static_cast<int>(child), o.cache_dir.c_str(),
                lo.destination.c_str());
  }
  if (rc >= 0) return rc;  // the parent (or fork failed)
  StartupPipe pipe(std::move(child_fd));
  return ServeMount(o, &pipe);
}

// ---- tierfs status ----

// The tierfs mounts to report: every one of the host, or the one at `mountpoint` (found in
// mountinfo by its path first, so a stale mount, which cannot be stat'ed, is still found).
Result<std::vector<MountInfo>> StatusTargets(const std::string& mountpoint) {
  auto all = ReadMountInfo();
  if (!all.ok()) return all.status();
  std::vector<MountInfo> tierfs = TierfsMounts(*all);
  if (mountpoint.empty()) return tierfs;
  std::error_code ec;
  auto abs = std::filesystem::absolute(mountpoint, ec);
  std::string want = ec ? mountpoint : abs.lexically_normal().string();
  while (want.size() > 1 && want.back() == '/') want.pop_back();
  for (auto it = tierfs.rbegin(); it != tierfs.rend(); ++it) {
    if (it->mountpoint == want) return std::vector<MountInfo>{*it};
  }
  auto m = TierfsMountOf(mountpoint);
  if (!m.ok()) return m.status();
  return std::vector<MountInfo>{*m};
}

volatile sig_atomic_t g_watch_stop = 0;

int RunStatus(const std::string& mountpoint, bool raw, bool json,
              const std::optional<double>& watch) {
  if (raw) {
    if (mountpoint.empty()) {
      std::fprintf(stderr, "tierfs status: --raw needs a MOUNTPOINT\n");
      return kExitUsage;
    }
    std::vector<char> buf(64 * 1024);
    ssize_t n = getxattr(mountpoint.c_str(), "user.tierfs.stats", buf.data(), buf.size());
    if (n < 0) {
      std::fprintf(
          stderr, "tierfs status: cannot read user.tierfs.stats of %s: %s%s\n", mountpoint.c_str(),
          std::strerror(errno),
          errno == ENODATA || errno == ENOTSUP ? " (not the root of a tierfs mount?)" : "");
      return kExitRuntime;
    }
    std::printf("%s\n", std::string(buf.data(), static_cast<size_t>(n)).c_str());
    return kExitOk;
  }
  if (watch && !(*watch > 0 && *watch <= 3600)) {
    std::fprintf(stderr, "tierfs status: --watch: SECONDS must be > 0 and at most 3600\n");
    return kExitUsage;
  }
  auto targets = StatusTargets(mountpoint);
  if (!targets.ok()) {
    std::fprintf(stderr, "tierfs status: %s\n", targets.status().message().c_str());
    return kExitRuntime;
  }
  MountProber prober;
  // Every mount: one unmounted after the mount table was read is no longer one of them (another
  // job's unmount must not fail the command). A named one that is gone is reported.
  auto probe_all = [&prober, every = mountpoint.empty()](const std::vector<MountInfo>& ms) {
    std::vector<MountStatus> out;
    for (const auto& m : ms) {
      MountStatus st = prober.Probe(m);
      if (every && st.state == "gone") continue;
      out.push_back(std::move(st));
    }
    return out;
  };
  auto failed = [](const std::vector<MountStatus>& ms) {
    return std::any_of(ms.begin(), ms.end(), [](const MountStatus& m) { return m.state != "ok"; });
  };
  if (!watch) {
    const auto st = probe_all(*targets);
    if (json) {
      std::printf("%s\n", FormatStatusJson(st, {}).c_str());
    } else if (st.empty()) {
      std::printf("no tierfs mounts\n");
    } else {
      std::printf("%s", FormatStatusText(st, {}).c_str());
    }
    return failed(st) ? kExitRuntime : kExitOk;
  }
  // --watch: redraw every `watch` seconds with the rates since the previous sample, until ^C.
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_watch_stop = 1; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  std::vector<MountStatus> prev = probe_all(*targets);
  auto prev_time = std::chrono::steady_clock::now();
  bool first = true;
  while (!g_watch_stop) {
    if (!first) {
      const auto until = prev_time + std::chrono::duration<double>(*watch);
      while (!g_watch_stop && std::chrono::steady_clock::now() < until) usleep(50 * 1000);
      if (g_watch_stop) break;
      // Mounts come and go: re-read the list when listing them all.
      if (mountpoint.empty()) {
        auto again = StatusTargets(mountpoint);
        if (again.ok()) *targets = std::move(*again);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - prev_time).count();
    std::vector<MountStatus> cur = probe_all(*targets);
    std::vector<std::optional<Rates>> rates(cur.size());
    for (size_t i = 0; i < cur.size() && !first; ++i) {
      for (const auto& p : prev) {
        if (p.mount.mountpoint == cur[i].mount.mountpoint && p.state == "ok" &&
            cur[i].state == "ok") {
          rates[i] = ComputeRates(p.stats, cur[i].stats, secs);
        }
      }
    }
    if (json) {
      // One document per line (JSON Lines) so a script can read them as they come.
      std::string doc = FormatStatusJson(cur, rates);
      doc.erase(std::remove(doc.begin(), doc.end(), '\n'), doc.end());
      std::printf("%s\n", doc.c_str());
    } else {
      if (tty) std::printf("\033[H\033[2J");
      std::printf("tierfs status, every %.1fs (^C ends)%s\n\n", *watch,
                  first ? "; rates from the next sample" : "");
      std::printf("%s", cur.empty() ? "no tierfs mounts\n" : FormatStatusText(cur, rates).c_str());
      if (!tty) std::printf("\n");
    }
    std::fflush(stdout);
    prev = std::move(cur);
    prev_time = now;
    first = false;
  }
  return kExitOk;
}

// ---- tierfs log-level ----

int RunLogLevel(const std::string& level, const std::string& mountpoint) {
  spdlog::level::level_enum parsed;
  if (!ParseLogLevel(level, &parsed)) {
    std::fprintf(stderr,
                 "tierfs log-level: '%s' is not one of trace, debug, info, warn, error, critical, "
                 "off\n",
                 level.c_str());
    return kExitUsage;
  }
  auto targets = StatusTargets(mountpoint);
  if (!targets.ok()) {
    std::fprintf(stderr, "tierfs log-level: %s\n", targets.status().message().c_str());
    return kExitRuntime;
  }
  if (targets->empty()) {
    std::fprintf(stderr, "tierfs log-level: no tierfs mounts\n");
    return kExitRuntime;
  }
  int rc = kExitOk;
  for (const auto& m : *targets) {
    const std::optional<int> answer = CallWithDeadline<int>(
        [m, level] {
          // On the mount's root, checked to be still that mount (OpenMountRoot): a mount point
          // unmounted meanwhile is not written to.
          int err = 0;
          const UniqueFd fd = OpenMountRoot(m, &err);
          if (fd.get() < 0) return err;
          return fsetxattr(fd.get(), "user.tierfs.log_level", level.data(), level.size(), 0) == 0
                     ? 0
                     : errno;
        },
        kMountAnswerDeadline);
    if (!answer || *answer == ENOTCONN || *answer == ESRCH) {
      const char* why = !answer               ? "hung (its daemon did not answer)"
                        : *answer == ENOTCONN ? "stale (the daemon is gone)"
                                              : "gone (unmounted meanwhile)";
      if (mountpoint.empty()) {
        // "Every mount" means every live one: a mount whose daemon died or does not answer has no
        // level to change now (`tierfs status` reports it), and one unmounted since the mount
        // table was read is no mount; named on the command line, an error.
        std::fprintf(stderr, "tierfs log-level: %s: skipped, %s\n", m.mountpoint.c_str(), why);
        continue;
      }
      std::fprintf(stderr, "tierfs log-level: %s: %s\n", m.mountpoint.c_str(), why);
      rc = kExitRuntime;
      continue;
    }
    if (*answer != 0) {
      const int err = *answer;
      std::fprintf(stderr, "tierfs log-level: %s: %s%s\n", m.mountpoint.c_str(), std::strerror(err),
                   err == EPERM || err == EACCES
                       ? " (only root and the user who mounted may change the log level)"
                       : "");
      rc = kExitRuntime;
      continue;
    }
    std::printf("%s: log level %s\n", m.mountpoint.c_str(), level.c_str());
  }
  return rc;
}

// ---- tierfs config check ----

int RunConfigCheck(const std::string& path) {
  auto text = CheckConfigFile(path, RealGetEnv);
  if (!text.ok()) {
    std::fprintf(stderr, "tierfs config check: %s\n", text.status().message().c_str());
    return kExitUsage;
  }
  std::printf("%s", text->c_str());
  // What this host can give, as a mount here would check it: memory budgets above its memory
  // are errors, an L2 above the cache file system a warning.
  DaemonOptions o;
  if (Status s = ApplyConfigFile(path, &o); !s.ok()) return kExitUsage;  // checked above
  const HostLimits host = ReadHostLimits(o.cache_dir);
  std::printf("%s", DescribeMemoryLimit(o, host).c_str());
  if (Status s = CheckMemorySizes(o, host); !s.ok()) {
    std::fprintf(stderr, "tierfs config check: %s (a mount on this host refuses it)\n",
                 s.message().c_str());
    return kExitUsage;
  }
  if (o.l2.capacity_bytes > 0) {
    if (std::string w = L2SizeWarning(o.l2.capacity_bytes, o.cache_dir, host); !w.empty()) {
      std::fprintf(stderr, "tierfs config check: warning: %s\n", w.c_str());
    }
  }
  return kExitOk;
}

// ---- tierfs manifest create ----

// The origin as a mount would open it (config file, flags, environment, credential chain),
// then RunManifestCreate over it.
int RunManifestCreateCli(const std::string& source, const std::string& out,
                         const std::string& config_path, const MountFlags& flags) {
  auto usage = [](const Status& s) {
    std::fprintf(stderr, "tierfs manifest create: %s\n", s.message().c_str());
    return kExitUsage;
  };
  DaemonOptions o;
  if (!config_path.empty()) {
    if (Status s = ApplyConfigFile(config_path, &o); !s.ok()) return usage(s);
  }
  if (Status s = ApplyFlags(flags, &o); !s.ok()) return usage(s);
  o.source = source;
  o.mountpoint = "/";  // FinishOptions checks a mount's settings; nothing is mounted
  o.manifest.clear();
  o.l3.clear();
  if (Status s = FinishOptions(&o, RealGetEnv); !s.ok()) return usage(s);
  LogOptions lo = o.log;
  lo.destination = "stderr";
  if (lo.level == "info") lo.level = "warn";  // the summary line says what happened
  std::string err;
  ConfigureLogging(lo, &err);
  std::unique_ptr<HttpTransport> transport;
  std::unique_ptr<BlobStore> store;
  if (o.source_uri.scheme == SourceUri::Scheme::kS3) {
    if (o.no_sign_request) {
      o.origin.credentials = Credentials{};
      o.origin.credentials.anonymous = true;
    }
    auto t = NewHttpTransport(o.http);
    if (!t.ok()) {
      std::fprintf(stderr, "tierfs manifest create: %s\n", t.status().ToString().c_str());
      return kExitRuntime;
    }
    transport = std::move(*t);
    if (Status s = AttachCredentialChain(
            &o.origin, o.profile, !o.profile.empty() && !o.profile_from_env, o.origin_region_set,
            transport.get(), "the S3 origin", kOriginCredentialsHint);
        !s.ok()) {
      return usage(s);
    }
    auto s = NewS3BlobStore(o.origin, transport.get(), SystemClock());
    if (!s.ok()) return usage(s.status());
    store = std::move(*s);
  } else {
    auto s = NewFileBlobStore(o.file_origin);
    if (!s.ok()) {
      std::fprintf(stderr, "tierfs manifest create: %s\n", s.status().ToString().c_str());
      return kExitRuntime;
    }
    store = std::move(*s);
  }
  return RunManifestCreate(store.get(), o.source, out);
}

// ---- tierfs l3 gc ----

// Settings as for a mount (config file, then flags), then GcRemoteTier over the L3 store.
int RunL3Gc(const std::string& config_path, const MountFlags& flags,
            const std::optional<std::string>& ttl, const std::optional<std::string>& max_bytes,
            bool dry_run) {
  auto usage = [](const Status& s) {
    std::fprintf(stderr, "tierfs l3 gc: %s\n", s.message().c_str());
    return kExitUsage;
  };
  DaemonOptions o;
  if (!config_path.empty()) {
    if (Status s = ApplyConfigFile(config_path, &o); !s.ok()) return usage(s);
  }
  if (flags.l3) o.l3 = *flags.l3;
  if (flags.l3_endpoint) o.l3_endpoint = *flags.l3_endpoint;
  if (flags.region) o.region = *flags.region;
  if (ttl) {
    auto d = ParseDuration(*ttl);
    if (!d.ok()) return usage(Status::InvalidArgument("--l3-ttl: " + d.status().message()));
    o.l3_tier.ttl = *d;
  }
  if (max_bytes) {
    auto b = ParseSize(*max_bytes);
    if (!b.ok()) return usage(Status::InvalidArgument("--l3-max-bytes: " + b.status().message()));
    o.l3_gc.max_bytes = *b == 0 ? UINT64_MAX : *b;  // 0: no bound
  }
  if (o.l3.empty())
    return usage(Status::InvalidArgument("--l3 (or cache.l3 in --config) is required"));
  if (Status s = FinishL3Options(&o, RealGetEnv); !s.ok()) return usage(s);
  if (o.l3_is_memcached) {
    // Nothing to collect: memcached evicts by LRU within its memory limit (-m) and expires items
    // at cache.l3_ttl (up to 30 days) itself; it also cannot list its keys.
    std::printf(
        "tierfs l3 gc: %s is a memcached pool: no gc is needed (memcached evicts by LRU within "
        "its -m limit and expires items after cache.l3_ttl itself)\n",
        o.l3.c_str());
    return 0;
  }
  if (Status s = ResolveL3Credentials(&o, RealGetEnv); !s.ok()) return usage(s);
  o.l3_gc.dry_run = dry_run;
  // gc is not latency-bound: the ordinary retry budget.
  o.l3_store.max_attempts = std::max(o.l3_store.max_attempts, 5);
  o.l3_store.request_timeout =
      std::max(o.l3_store.request_timeout, std::chrono::milliseconds(30000));
  LogOptions lo = o.log;
  std::string err;
  ConfigureLogging(lo, &err);
  auto transport = NewHttpTransport(o.http);
  if (!transport.ok()) {
    std::fprintf(stderr, "tierfs l3 gc: %s\n", transport.status().ToString().c_str());
    return kExitRuntime;
  }
  if (Status s = AttachCredentialChain(&o.l3_store, o.l3_profile, !o.l3_profile.empty(),
                                       /*region_set=*/true, transport->get(), "the L3 store",
                                       kL3CredentialsHint);
      !s.ok()) {
    return usage(s);
  }
  auto store = NewS3BlobStore(o.l3_store, transport->get(), SystemClock());
  if (!store.ok()) return usage(store.status());
  std::printf("tierfs l3 gc: %s (%s): ttl=%s max_bytes=%s%s\n", o.l3.c_str(),
              (*store)->Describe().c_str(), FormatDuration(o.l3_gc.ttl).c_str(),
              o.l3_gc.max_bytes == UINT64_MAX ? "unlimited" : FormatSize(o.l3_gc.max_bytes).c_str(),
              dry_run ? " (dry run: nothing is deleted)" : "");
  auto rep = GcRemoteTier(o.l3_gc, store->get(), SystemClock());
  if (!rep.ok()) {
    std::fprintf(stderr, "tierfs l3 gc: %s\n", rep.status().ToString().c_str());
    return kExitRuntime;
  }
  const char* verb = dry_run ? "would delete" : "deleted";
  std::printf("found %llu objects (%s)\n", static_cast<unsigned long long>(rep->objects),
              FormatSize(rep->bytes).c_str());
  std::printf("left alone %llu objects (%s) that are not tierfs blocks\n",
              static_cast<unsigned long long>(rep->foreign),
              FormatSize(rep->foreign_bytes).c_str());
  std::printf("%s %llu expired blocks (%s)\n", verb, static_cast<unsigned long long>(rep->expired),
              FormatSize(rep->expired_bytes).c_str());
  std::printf("%s %llu oldest blocks (%s) to fit max_bytes\n", verb,
              static_cast<unsigned long long>(rep->trimmed),
              FormatSize(rep->trimmed_bytes).c_str());
  std::printf("remaining %llu blocks (%s)\n",
              static_cast<unsigned long long>(rep->remaining_objects),
              FormatSize(rep->remaining_bytes).c_str());
  if (rep->delete_errors > 0) {
    std::printf("%llu deletes failed (see the log)\n",
                static_cast<unsigned long long>(rep->delete_errors));
    return kExitRuntime;
  }
  return kExitOk;
}

// ---- the flags of tierfs mount that set config keys ----

constexpr const char* kGroupSource = "Source and S3";
constexpr const char* kGroupCache = "Cache";
constexpr const char* kGroupL3 = "Regional L3 tier";
constexpr const char* kGroupFuse = "FUSE and permissions";
constexpr const char* kGroupLog = "Logging and process";

const char* FlagGroup(const config::ConfigKey& k) {
  if (k.table == "cache") return k.name.starts_with("l3") ? kGroupL3 : kGroupCache;
  if (k.table == "fuse") return kGroupFuse;
  if (k.table == "log" || k.table == "metrics") return kGroupLog;
  return kGroupSource;
}

// Registers, from the key table, every flag that sets a config key (of `table` only, if given);
// its text lands in `flags` (checked by ApplyFlags), and its help is the key's documentation.
void AddConfigKeyFlags(CLI::App* mount, MountFlags* flags, std::string_view table = {}) {
  for (const char* group : {kGroupSource, kGroupCache, kGroupL3, kGroupFuse, kGroupLog}) {
    for (const config::ConfigKey& k : config::ConfigTable()) {
      if (k.flag.empty() || FlagGroup(k) != group) continue;
      if (!table.empty() && k.table != table) continue;
      std::string names(k.flag);
      if (!k.flag_alias.empty()) names += "," + std::string(k.flag_alias);
      const std::string help = config::FlagHelp(k);
      CLI::Option* opt = nullptr;
      if (k.flag_on != nullptr) {
        opt = mount->add_flag(names, flags->*k.flag_on, help);
      } else {
        opt = mount->add_option_function<std::string>(
            names, [flags, text = k.flag_text](const std::string& v) { flags->*text = v; }, help);
      }
      opt->group(group);
    }
  }
}

// What `tierfs mount` was given.
struct MountCli {
  std::string source;
  std::string mountpoint;
  std::string config_path;
  bool read_only = false;  // accepted; tierfs is read-only whatever it says
  MountFlags flags;
};

CLI::App* AddMountCommand(CLI::App* app, MountCli* cli) {
  CLI::App* mount = app->add_subcommand(
      "mount",
      "Mount SOURCE (s3://BUCKET[/PREFIX] or file:///PATH) read-only at MOUNTPOINT. Returns once "
      "the mount is usable; the daemon keeps serving in the background (-f: in the foreground). "
      "Unmount with `fusermount3 -u MOUNTPOINT` or `umount MOUNTPOINT`.");
  mount->footer(
      "Examples:\n"
      "  tierfs mount s3://my-bucket/imagenet /mnt/imagenet --region us-west-2\n"
      "  tierfs mount s3://public-data /mnt/pub --no-sign-request --l1-size 4GiB\n"
      "  tierfs mount s3://b /mnt/b --endpoint-url http://127.0.0.1:9000 --uid 1000 --gid 1000 \\\n"
      "      --file-mode 0444 --dir-mode 0555 --allow-other\n"
      "  tierfs mount file:///srv/datasets /mnt/ds -f --log-level debug\n"
      "  tierfs mount s3://b /mnt/b --config /etc/tierfs/tierfs.toml --log-file "
      "/var/log/tierfs/b.log --log-format json\n"
      "Flags override the config file; the config file overrides the environment.");
  mount->add_option("SOURCE", cli->source, "s3://BUCKET[/PREFIX] or file:///ABSOLUTE/PATH")
      ->required();
  mount->add_option("MOUNTPOINT", cli->mountpoint, "An existing empty directory (see -o nonempty)")
      ->required();
  mount->add_option("--config", cli->config_path,
                    "TOML config file (see /etc/tierfs/tierfs.toml); flags "
                    "override its settings");
  AddConfigKeyFlags(mount, &cli->flags);
  mount
      ->add_flag("--read-only", cli->read_only,
                 "Accepted for mountpoint-s3 compatibility; tierfs mounts are always read-only")
      ->group(kGroupFuse);
  mount
      ->add_option("-o", cli->flags.options,
                   "Mount options, comma-separated: allow_other (other users may enter; off by "
                   "default), noallow_other, allow_root, default_permissions (on with "
                   "allow_other), nodefault_permissions, uid=N, gid=N, file_mode=OCTAL (0644), "
                   "dir_mode=OCTAL (0755), max_threads=N, debug, nonempty (mount over a "
                   "directory that holds files), and libfuse's nodev, nosuid, "
                   "noexec, noatime, auto_unmount, ...")
      ->allow_extra_args(false)
      ->group(kGroupFuse);
  mount
      ->add_flag("-f,--foreground", cli->flags.foreground,
                 "Stay in the foreground, logging to stderr")
      ->group(kGroupLog);

  return mount;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "tierfs: mounts an object-store bucket (S3 API or a local directory) as a read-only "
      "file system, served through a memory (L1) and local-flash (L2) block cache and an "
      "optional regional L3 bucket."};
  app.set_version_flag("--version", std::string("tierfs ") + TIERFS_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  tierfs mount s3://my-bucket/datasets /mnt/data --region eu-west-1 --l2-size 200GiB\n"
      "  tierfs mount s3://b /mnt/b --endpoint-url http://127.0.0.1:9000 --allow-other\n"
      "  tierfs status                      # every tierfs mount of this host\n"
      "  tierfs status /mnt/data --watch 2  # rates, until ^C\n"
      "  tierfs prefetch --wait /mnt/data/train\n"
      "  tierfs log-level debug /mnt/data\n"
      "  tierfs config check /etc/tierfs/tierfs.toml\n"
      "  tierfs manifest create s3://my-bucket/datasets -o datasets.tfm\n"
      "Run `tierfs SUBCOMMAND --help` for the options of each.");

  // ---- mount ----
  MountCli mount_cli;
  AddMountCommand(&app, &mount_cli);  // the command when no other one was given

  // ---- status ----
  CLI::App* status = app.add_subcommand(
      "status",
      "Show every tierfs mount of this host (or the one at MOUNTPOINT): source, daemon pid, log, "
      "cache hits, misses and bytes per tier. A mount whose daemon died shows as stale, one whose "
      "daemon does not answer within 5 s as hung. Exit 1 when a mount is stale, hung or "
      "unreadable.");
  status->footer(
      "Examples:\n"
      "  tierfs status\n"
      "  tierfs status /mnt/data --json | jq '.mounts[0].hit_ratio'\n"
      "  tierfs status --watch 5");
  std::string status_mnt;
  bool raw = false, status_json = false;
  std::string watch_arg;
  status->add_option("MOUNTPOINT", status_mnt, "A tierfs mount point (default: every one)");
  status->add_flag("--json", status_json,
                   "One JSON document (with --watch: one per line) for scripts");
  auto* o_watch = status
                      ->add_option("--watch", watch_arg,
                                   "Redraw every SECONDS (default 2) with reads/s, bytes/s per "
                                   "tier and the hit ratio, until ^C")
                      ->expected(0, 1)
                      ->type_name("[SECONDS]");
  status->add_flag("--raw", raw, "Print the user.tierfs.stats attribute of MOUNTPOINT as it is");

  // ---- prefetch ----
  CLI::App* prefetch = app.add_subcommand(
      "prefetch",
      "Hydrate files or directories (recursively) of a mounted tierfs into a tier in "
      "the background (user.tierfs.prefetch); the job survives daemon restarts. Paths that are "
      "not on a tierfs mount are refused (exit 2) and nothing is started.");
  prefetch->footer(
      "Examples:\n"
      "  tierfs prefetch /mnt/data/train            # queue, return at once\n"
      "  tierfs prefetch --wait --tier l1 /mnt/data/val\n"
      "  tierfs prefetch --cancel /mnt/data/train\n"
      "  tierfs prefetch --wait --from-file order.txt   # a loader's order, in bulk");
  std::vector<std::string> pf_paths;
  PrefetchCliOptions pf;
  prefetch->add_option("PATH", pf_paths, "Files or directories on a tierfs mount");
  prefetch
      ->add_option("--from-file", pf.from_file,
                   "Prefetch the files listed in LIST (one path per line, absolute or "
                   "relative to the working directory, all on one tierfs mount; '-' = "
                   "stdin), in that order, as the mount's list job "
                   "(user.tierfs.prefetch_list); a path that is not a file on the mount "
                   "fails it (exit 1)")
      ->type_name("LIST");
  prefetch->add_option("--tier", pf.tier, "l1 (memory), l2 (flash, default) or l3 (region only)");
  prefetch->add_flag("--wait", pf.wait,
                     "Wait until every job finished (progress bar with rate and ETA on a "
                     "terminal); exit 1 if one failed or was cancelled");
  prefetch->add_flag("--cancel", pf.cancel, "Cancel the jobs of the paths instead");

  // ---- log-level ----
  CLI::App* loglevel = app.add_subcommand(
      "log-level",
      "Change the log level of running daemons at once (sets user.tierfs.log_level on the "
      "mount's root; root or the mounting user only). Without MOUNTPOINT: every live tierfs "
      "mount (stale and hung ones, whose daemon died or does not answer in 5 s, are skipped with a "
      "note).");
  loglevel->footer("Example:\n  tierfs log-level debug /mnt/data   # later: tierfs log-level info");
  std::string ll_level, ll_mnt;
  loglevel->add_option("LEVEL", ll_level, "trace, debug, info, warn, error, critical or off")
      ->required();
  loglevel->add_option("MOUNTPOINT", ll_mnt, "A tierfs mount point (default: every one)");

  // ---- config check ----
  CLI::App* config_cmd = app.add_subcommand("config", "Inspect configuration files");
  config_cmd->require_subcommand(1);
  CLI::App* check = config_cmd->add_subcommand(
      "check",
      "Check FILE as a mount would and print the effective configuration: every key, its value "
      "and where it came from (the file, the environment or the default). Exit 2 with the "
      "error naming the key and line on a bad file.");
  std::string check_file;
  check->add_option("FILE", check_file, "A TOML config file")->required();
  CLI::App* reference = config_cmd->add_subcommand(
      "reference",
      "Print every config key as a Markdown table: type, default, range, the flag of tierfs "
      "mount that sets it, and what it does (the source of docs/config-reference.md).");

  // ---- manifest ----
  CLI::App* manifest_cmd = app.add_subcommand(
      "manifest",
      "Dataset manifests: the list of every object of a source (key, size, ETag, mtime) at one "
      "moment, for `tierfs mount --manifest` (a fixed dataset version, no listing at mount "
      "time) and for comparing dataset versions");
  manifest_cmd->require_subcommand(1);
  CLI::App* mf_create = manifest_cmd->add_subcommand(
      "create",
      "List every object of SOURCE (s3://BUCKET[/PREFIX] or file:///PATH) and write the "
      "manifest to FILE (zstd-compressed, checksummed). Prints the object count and the "
      "checksum that user.tierfs.manifest shows on a mount of it. Exit 1 when the listing or "
      "the write fails, 2 for bad arguments.");
  mf_create->footer(
      "Examples:\n"
      "  tierfs manifest create s3://my-bucket/imagenet -o imagenet-2026-11.tfm\n"
      "  tierfs mount s3://my-bucket/imagenet /mnt/imagenet --manifest imagenet-2026-11.tfm\n"
      "  tierfs manifest create file:///srv/data -o data.tfm");
  std::string mf_source, mf_out, mf_config;
  MountFlags mf_flags;
  mf_create->add_option("SOURCE", mf_source, "s3://BUCKET[/PREFIX] or file:///ABSOLUTE/PATH")
      ->required();
  mf_create->add_option("-o,--output", mf_out, "The manifest file to write (replaced atomically)")
      ->type_name("FILE")
      ->required();
  mf_create->add_option("--config", mf_config, "TOML config file with the s3.* keys");
  AddConfigKeyFlags(mf_create, &mf_flags, "s3");  // --endpoint, --region, --profile, ...
  CLI::App* mf_diff = manifest_cmd->add_subcommand(
      "diff",
      "Compare two manifest files: one line per object added (+), removed (-) or changed in "
      "size or ETag (~), in key order, then a summary. Exit status as diff(1): 0 the same "
      "objects, 1 different, 2 trouble (a file unreadable or not a valid manifest).");
  mf_diff->footer("Example:\n  tierfs manifest diff imagenet-2026-10.tfm imagenet-2026-11.tfm");
  std::string mf_a, mf_b;
  bool mf_quiet = false;
  mf_diff->add_option("A", mf_a, "The older manifest file")->required();
  mf_diff->add_option("B", mf_b, "The newer manifest file")->required();
  mf_diff->add_flag("-q,--quiet", mf_quiet, "Print nothing; only the exit status tells");

  // ---- l3 gc ----
  CLI::App* l3_cmd = app.add_subcommand("l3", "Manage the regional L3 tier");
  l3_cmd->require_subcommand(1);
  CLI::App* gc = l3_cmd->add_subcommand(
      "gc",
      "Delete L3 blocks older than the TTL, then the oldest blocks until the tier holds at "
      "most --l3-max-bytes. Only objects in tierfs's block format are deleted (checked by "
      "name and header); anything else under blocks/ is reported and left alone");
  std::string gc_config, gc_l3, gc_endpoint, gc_region, gc_ttl, gc_max;
  bool gc_dry = false;
  gc->add_option("--config", gc_config, "TOML config file with the cache.l3* keys");
  auto* g_l3 = gc->add_option("--l3", gc_l3,
                              "The L3 store, s3://BUCKET[/PREFIX] (memcached:// needs no gc)");
  auto* g_endpoint = gc->add_option("--l3-endpoint", gc_endpoint, "Endpoint URL of the L3 store");
  auto* g_region = gc->add_option("--region", gc_region, "Region of the L3 store");
  auto* g_ttl = gc->add_option("--l3-ttl", gc_ttl, "Delete blocks older than this (cache.l3_ttl)");
  auto* g_max =
      gc->add_option("--l3-max-bytes", gc_max,
                     "Then trim the oldest blocks down to this size (cache.l3_max_bytes)");
  gc->add_flag("--dry-run", gc_dry, "Report what would be deleted; delete nothing");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (*status) {
    std::optional<double> watch;
    if (o_watch->count() > 0) {
      watch = 2.0;
      // `--watch /mnt/x` means the default interval and that mount point.
      char* end = nullptr;
      const double v = watch_arg.empty() ? 2.0 : std::strtod(watch_arg.c_str(), &end);
      if (!watch_arg.empty() && (end == watch_arg.c_str() || *end != '\0')) {
        if (!status_mnt.empty()) {
          std::fprintf(stderr, "tierfs status: --watch: '%s' is not a number of seconds\n",
                       watch_arg.c_str());
          return kExitUsage;
        }
        status_mnt = watch_arg;
      } else {
        watch = v;
      }
    }
    return RunStatus(status_mnt, raw, status_json, watch);
  }
  if (*prefetch) return RunPrefetchCli(pf_paths, pf);
  if (*loglevel) return RunLogLevel(ll_level, ll_mnt);
  if (*check) return RunConfigCheck(check_file);
  if (*reference) {
    std::printf("%s", ConfigReferenceMarkdown().c_str());
    return kExitOk;
  }
  if (*mf_create) {
    return RunManifestCreateCli(mf_source, mf_out, mf_config, mf_flags);
  }
  if (*mf_diff) {
    // diff(1)'s convention: usage trouble is 2 as well (CLI11 already exits 2 for bad flags).
    return RunManifestDiff(mf_a, mf_b, mf_quiet);
  }
  if (*gc) {
    MountFlags gf;
    if (g_l3->count() > 0) gf.l3 = gc_l3;
    if (g_endpoint->count() > 0) gf.l3_endpoint = gc_endpoint;
    if (g_region->count() > 0) gf.region = gc_region;
    std::optional<std::string> ttl_flag, max_flag;
    if (g_ttl->count() > 0) ttl_flag = gc_ttl;
    if (g_max->count() > 0) max_flag = gc_max;
    return RunL3Gc(gc_config, gf, ttl_flag, max_flag, gc_dry);
  }

  DaemonOptions options;
  options.source = mount_cli.source;
  options.mountpoint = mount_cli.mountpoint;
  return RunMount(std::move(options), mount_cli.config_path, mount_cli.flags);
}

}  // namespace
}  // namespace tierfs

// Nothing ends with an unexplained abort: an exception that escapes (an allocation the host
// cannot satisfy) is reported on stderr and in the log, and the exit code is 1.
int main(int argc, char** argv) {
  std::string what;
  try {
    return tierfs::Main(argc, argv);
  } catch (const std::bad_alloc&) {
    what =
        "out of memory (std::bad_alloc): check the size settings (cache.l1_size, "
        "cache.l2_size, cache.readahead_budget) against this host";
  } catch (const std::exception& e) {
    what = std::string("unexpected error: ") + e.what();
  }
  std::fprintf(stderr, "tierfs: %s\n", what.c_str());
  try {
    tierfs::Logger(tierfs::Module::kDaemon).critical("{}", what);
    spdlog::shutdown();
  } catch (...) {
  }
  return 1;
}
