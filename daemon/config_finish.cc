// The second half of reading the configuration (daemon/config.h): what FinishOptions and
// FinishL3Options derive from the environment and the settings once the file and the flags are
// applied, the L3 credentials and key, Validate, and the one-line description of a mount's
// settings. Parsing the file and the flags is daemon/config.cc.

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/strings.h"
#include "base/units.h"
#include "daemon/config.h"
#include "daemon/internal/config_table.h"
#include "daemon/metrics_server.h"

namespace tierfs {

using config::ParseUint;

namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

std::optional<std::string> RealGetEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// metadata.manifest: s3://BUCKET/KEY stays as it is; a local path (or file:///PATH) becomes
// absolute (the daemon changes to / after daemonizing).
static Status FinishManifestOption(DaemonOptions* o) {
  const std::string& m = o->manifest;
  if (m.starts_with("s3://")) {
    const size_t slash = m.find('/', 5);
    if (slash == 5 || slash == std::string::npos || slash + 1 == m.size() || m.back() == '/') {
      return Status::InvalidArgument(fmt::format(
          "metadata.manifest (--manifest): '{}' is not s3://BUCKET/KEY", EscapeForLog(m)));
    }
    return Status::OK();
  }
  std::string path = m.starts_with("file://") ? m.substr(7) : m;
  if (path.empty() || (m.find("://") != std::string::npos && !m.starts_with("file:///"))) {
    return Status::InvalidArgument(
        fmt::format("metadata.manifest (--manifest): '{}' is neither a file nor s3://BUCKET/KEY",
                    EscapeForLog(m)));
  }
  std::error_code ec;
  auto abs = std::filesystem::absolute(path, ec);
  o->manifest = ec ? path : abs.lexically_normal().string();
  return Status::OK();
}

// fuse.control_group: the gid of a group name or number. Its members may set the prefetch
// controls; with default_permissions the kernel lets a user's setxattr through only with write
// permission on the inode, so every inode belongs to that group and has its group write bit
// (writes still fail with EROFS).
static Status FinishControlGroup(DaemonOptions* o) {
  if (!o->control_group) return Status::OK();
  const std::string& name = *o->control_group;
  constexpr std::string_view kWhat = "fuse.control_group (--control-group)";
  uint32_t gid = 0;
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
    uint64_t v = 0;
    TIERFS_RETURN_IF_ERROR(ParseUint(kWhat, name, 0xfffffffeULL, &v));
    gid = static_cast<uint32_t>(v);
  } else {
    if (name.empty()) return Status::InvalidArgument(fmt::format("{}: empty group name", kWhat));
    group g{};
    group* found = nullptr;
    std::vector<char> buf(16384);
    int err = 0;
    while ((err = getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found)) == ERANGE &&
           buf.size() < (1U << 24)) {
      buf.resize(buf.size() * 2);
    }
    if (found == nullptr) {
      return Status::InvalidArgument(
          fmt::format("{}: no group '{}'{}", kWhat, EscapeForLog(name),
                      err != 0 ? fmt::format(" ({})", std::strerror(err)) : std::string()));
    }
    gid = static_cast<uint32_t>(g.gr_gid);
  }
  if (o->gid && *o->gid != gid) {
    return Status::InvalidArgument(fmt::format(
        "fuse.gid (--gid) {} differs from {} '{}' (gid {}): the files belong to the control "
        "group; leave fuse.gid unset",
        *o->gid, kWhat, EscapeForLog(name), gid));
  }
  o->fs.control_gid = gid;
  o->fs.gid = gid;
  o->fs.file_mode |= S_IWGRP;
  o->fs.dir_mode |= S_IWGRP;
  return Status::OK();
}

// The origin's endpoint, region, CA bundle and profile: flag > config file > environment >
// default.
static void FinishOriginFromEnvironment(DaemonOptions* o, const GetEnvFn& getenv) {
  if (o->endpoint) {
    o->origin.endpoint = *o->endpoint;
  } else if (auto e = getenv("AWS_ENDPOINT_URL_S3")) {
    o->origin.endpoint = *e;
  } else if (auto e2 = getenv("AWS_ENDPOINT_URL")) {
    o->origin.endpoint = *e2;
  }
  o->origin_region_set = true;
  if (o->region) {
    o->origin.region = *o->region;
  } else if (auto r = getenv("AWS_REGION")) {
    o->origin.region = *r;
  } else if (auto r2 = getenv("AWS_DEFAULT_REGION")) {
    o->origin.region = *r2;
  } else {
    o->origin_region_set = false;
    // The profile's region, else the bucket's x-amz-bucket-region, else the default.
    o->origin.discover_region = true;
  }
  // AWS_CA_BUNDLE as the AWS SDKs honour it, when s3.ca_bundle is unset (used for https only).
  if (o->origin.ca_bundle.empty()) {
    if (auto ca = getenv("AWS_CA_BUNDLE")) o->origin.ca_bundle = *ca;
  }
  if (o->profile.empty()) {
    if (auto p = getenv("AWS_PROFILE")) {
      o->profile = *p;
      o->profile_from_env = true;
    }
  }
}

// Absolute paths: the daemon changes to / after daemonizing.
static void MakePathsAbsolute(DaemonOptions* o) {
  std::error_code ec;
  if (!o->cache_dir.empty()) {
    auto abs = std::filesystem::absolute(o->cache_dir, ec);
    if (!ec) o->cache_dir = abs.lexically_normal().string();
    while (o->cache_dir.size() > 1 && o->cache_dir.back() == '/') o->cache_dir.pop_back();
  }
  {
    auto abs = std::filesystem::absolute(o->mountpoint, ec);
    if (!ec) o->mountpoint = abs.lexically_normal().string();
    while (o->mountpoint.size() > 1 && o->mountpoint.back() == '/') o->mountpoint.pop_back();
  }
  if (!o->log.destination.empty() && o->log.destination != "syslog" &&
      o->log.destination != "stderr") {
    auto abs = std::filesystem::absolute(o->log.destination, ec);
    if (!ec) o->log.destination = abs.string();
  }
}

Status FinishOptions(DaemonOptions* o, const GetEnvFn& getenv) {
  if (o->source.empty())
    return Status::InvalidArgument("SOURCE is required (s3://BUCKET[/PREFIX] or file:///PATH)");
  if (o->mountpoint.empty()) return Status::InvalidArgument("MOUNTPOINT is required");
  auto uri = ParseSourceUri(o->source);
  if (!uri.ok()) return Status::InvalidArgument(fmt::format("SOURCE: {}", uri.status().message()));
  o->source_uri = *uri;
  if (uri->scheme == SourceUri::Scheme::kS3) {
    o->origin.bucket = uri->bucket;
    o->origin.prefix = uri->prefix;
  } else {
    o->file_origin.root = uri->path;
  }
  FinishOriginFromEnvironment(o, getenv);
  MakePathsAbsolute(o);
  o->meta.path = o->cache_dir + "/meta";
  o->fuse.fsname = "tierfs:" + o->source;
  o->fuse.entry_timeout = o->catalog.metadata_ttl;
  o->fuse.attr_timeout = o->catalog.metadata_ttl;
  o->fuse.negative_timeout = o->catalog.metadata_ttl;
  if (!o->manifest.empty()) {
    TIERFS_RETURN_IF_ERROR(FinishManifestOption(o));
    // A manifest's tree never changes: the kernel may keep every entry and attribute.
    o->fuse.entry_timeout = o->fuse.attr_timeout = o->fuse.negative_timeout = kForever;
  }
  // Read requests sized so the splice pipe holds them only where L2 hits are replied from files.
  o->fuse.fit_reads_to_splice_pipe =
      o->fuse.fit_reads_to_splice_pipe && o->cache.file_slices && o->l2.capacity_bytes != 0;
  o->fs.prefetch.readahead_max_bytes = o->cache.readahead_max_bytes;
  // Runs outstanding for a random-read hydration: at most 8 (half of the 16 runs' bytes the pool
  // fetches at once, TieredCacheOptions::prefetch_threads), so the readahead queue never
  // overflows and a sequential reader of another file keeps room beside it.
  o->fs.prefetch.hydrate_runs = std::min(o->cache.prefetch_threads, 8);
  o->fs.uid = o->uid.value_or(static_cast<uint32_t>(getuid()));
  o->fs.gid = o->gid.value_or(static_cast<uint32_t>(getgid()));
  // A file:// origin's owner, group and mode are shown where the user set none of these
  // (FilesystemOptions); S3 objects have none and always show these.
  o->fs.uid_set = o->uid.has_value();
  o->fs.gid_set = o->gid.has_value();
  // Root and the mounting user (the daemon's uid) may set user.tierfs.* controls.
  o->fs.control_uid = static_cast<uint32_t>(getuid());
  TIERFS_RETURN_IF_ERROR(FinishControlGroup(o));
  // Other users get in only with allow_other, and then the kernel checks modes and owner
  // (fuse.file_mode / fuse.dir_mode / fuse.uid / fuse.gid) unless told otherwise.
  o->fuse.default_permissions =
      o->default_permissions.value_or(o->fuse.allow_other || o->fuse.allow_root);
  TIERFS_RETURN_IF_ERROR(FinishL3Options(o, getenv));
  // Every wait on the network has a deadline (docs/semantics.md): a reader waits for a block
  // at most as long as the fetch itself may take, and a request at most that plus one more
  // request timeout (its own HEAD or listing page). The timeouts are checked before they are
  // added up.
  TIERFS_RETURN_IF_ERROR(CheckNetworkTimeouts(*o));
  o->cache.wait_timeout = NetworkWaitBound(*o);
  o->fuse.request_timeout = o->cache.wait_timeout + o->origin.request_timeout;
  return Validate(*o);
}

std::chrono::nanoseconds NetworkWaitBound(const DaemonOptions& o) {
  // One store: every attempt may wait for a concurrency slot (at most request_timeout), connect
  // and run to its timeout, with the largest backoff between attempts.
  auto store = [](const S3Options& s) -> std::chrono::nanoseconds {
    const int attempts = std::clamp(s.max_attempts, 1, 100);
    return attempts * (2 * s.request_timeout + s.connect_timeout) + (attempts - 1) * s.backoff_max;
  };
  std::chrono::nanoseconds bound = store(o.origin);
  if (o.l3_is_memcached) {  // a block is looked up in L3 first: one get, no retries
    const MemcachedOptions& m = o.l3_memcached;
    bound += m.connect_timeout + 2 * m.io_timeout + m.io_timeout /* a pool connection */;
  } else if (!o.l3.empty()) {
    bound += store(o.l3_store);
  }
  return bound;
}

namespace {

// cache.l3 = memcached://...: the pool's servers; the S3 settings of L3 do not apply.
Status FinishMemcachedL3Options(DaemonOptions* o) {
  auto servers = ParseMemcachedUri(o->l3);
  if (!servers.ok()) {
    return Status::InvalidArgument(fmt::format("cache.l3 (--l3): {}", servers.status().message()));
  }
  if (o->l3_endpoint) {
    return Status::InvalidArgument(
        "cache.l3_endpoint (--l3-endpoint): not used with a memcached L3; the servers are named "
        "in cache.l3 (--l3 memcached://HOST:PORT,HOST:PORT,...)");
  }
  if (o->l3_tier.ttl <= std::chrono::nanoseconds(0)) {
    return Status::InvalidArgument("cache.l3_ttl: must be positive (or \"forever\")");
  }
  TIERFS_RETURN_IF_ERROR(config::CheckIntRanges(*o));  // cache.l3_write_threads among them
  o->l3_memcached.servers = std::move(*servers);
  // memcached takes an exptime above 30 days as a Unix time: longer TTLs (and "forever") leave
  // the items to its LRU; RemoteTier still checks every block's age against l3_ttl.
  constexpr auto kMaxExptime = std::chrono::hours(24 * 30);
  o->l3_memcached.expiration =
      o->l3_tier.ttl >= kMaxExptime
          ? std::chrono::seconds(0)
          : std::max(std::chrono::seconds(1),
                     std::chrono::duration_cast<std::chrono::seconds>(o->l3_tier.ttl));
  o->l3_tier.block_size = o->cache.block_size;
  o->l3_gc.ttl = o->l3_tier.ttl;
  return Status::OK();
}

}  // namespace

Status FinishL3Options(DaemonOptions* o, const GetEnvFn& getenv) {
  if (o->l3.empty()) return Status::OK();
  o->l3_is_memcached = IsMemcachedUri(o->l3);
  if (o->l3_is_memcached) return FinishMemcachedL3Options(o);
  auto uri = ParseSourceUri(o->l3);
  if (!uri.ok())
    return Status::InvalidArgument(fmt::format("cache.l3 (--l3): {}", uri.status().message()));
  if (uri->scheme != SourceUri::Scheme::kS3) {
    return Status::InvalidArgument(
        fmt::format("cache.l3 (--l3): '{}' must be s3://BUCKET[/PREFIX]", o->l3));
  }
  o->l3_store.bucket = uri->bucket;
  o->l3_store.prefix = uri->prefix;
  if (o->l3_endpoint) o->l3_store.endpoint = *o->l3_endpoint;
  if (o->l3_region) {
    o->l3_store.region = *o->l3_region;
  } else if (o->region) {
    o->l3_store.region = *o->region;
  } else if (auto r = getenv("AWS_REGION")) {
    o->l3_store.region = *r;
  } else if (auto r2 = getenv("AWS_DEFAULT_REGION")) {
    o->l3_store.region = *r2;
  }
  if (o->l3_store.ca_bundle.empty()) {
    if (auto ca = getenv("AWS_CA_BUNDLE")) o->l3_store.ca_bundle = *ca;
  }
  o->l3_store.addressing = S3Options::Addressing::kAuto;
  o->l3_tier.block_size = o->cache.block_size;
  o->l3_gc.ttl = o->l3_tier.ttl;
  auto bad = [](std::string_view key, std::string_view why) {
    return Status::InvalidArgument(fmt::format("{}: {}", key, why));
  };
  if (!o->l3_store.endpoint.empty() && !o->l3_store.endpoint.starts_with("http://") &&
      !o->l3_store.endpoint.starts_with("https://")) {
    return bad(
        "cache.l3_endpoint (--l3-endpoint)",
        fmt::format("'{}' must start with http:// or https://", RedactUrl(o->l3_store.endpoint)));
  }
  if (o->l3_store.region.empty()) return bad("cache.l3_region", "must not be empty");
  if (o->l3_tier.ttl <= std::chrono::nanoseconds(0)) {
    return bad("cache.l3_ttl", "must be positive (or \"forever\")");
  }
  // cache.l3_write_threads, cache.l3_max_attempts among them (`tierfs l3 gc` runs no Validate).
  TIERFS_RETURN_IF_ERROR(config::CheckIntRanges(*o));
  if (o->l3_store.request_timeout.count() <= 0) {
    return bad("cache.l3_request_timeout", "must be positive");
  }
  if (o->l3_access_key_id_env.empty() != o->l3_secret_access_key_env.empty()) {
    return bad("cache.l3_access_key_id_env / cache.l3_secret_access_key_env",
               "set both or neither");
  }
  return Status::OK();
}

Status ResolveL3Credentials(DaemonOptions* o, const GetEnvFn& getenv) {
  if (o->l3.empty()) return Status::OK();
  if (o->l3_no_sign_request) {
    o->l3_store.credentials = Credentials{};
    o->l3_store.credentials.anonymous = true;
    return Status::OK();
  }
  if (!o->l3_access_key_id_env.empty()) {
    auto id = getenv(o->l3_access_key_id_env.c_str());
    auto secret = getenv(o->l3_secret_access_key_env.c_str());
    if (!id || !secret) {
      return Status::InvalidArgument(fmt::format(
          "cache.l3_access_key_id_env / cache.l3_secret_access_key_env: environment variable {} "
          "is not set",
          !id ? o->l3_access_key_id_env : o->l3_secret_access_key_env));
    }
    o->l3_store.credentials = Credentials{};
    o->l3_store.credentials.access_key_id = *id;
    o->l3_store.credentials.secret_access_key = *secret;
    return Status::OK();
  }
  // Neither fixed nor anonymous: the daemon builds the credential chain for cache.l3_profile.
  o->l3_store.credentials = Credentials{};
  return Status::OK();
}

Status LoadL3Key(DaemonOptions* o) {
  o->l3_tier.mac_key.clear();
  if (o->l3.empty() || o->l3_key_file.empty()) return Status::OK();
  const std::string& path = o->l3_key_file;
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("cache.l3_key_file: '{}' {}", path, why));
  };
  // Followed if a symlink (Kubernetes mounts secrets through them); checked on what was opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return bad(fmt::format("cannot be opened: {}", std::strerror(errno)));
  struct stat st {};
  std::string key;
  Status result = Status::OK();
  if (::fstat(fd, &st) != 0) {
    result = bad(fmt::format("cannot be read: {}", std::strerror(errno)));
  } else if (!S_ISREG(st.st_mode)) {
    result = bad("is not a regular file");
  } else if ((st.st_mode & 077) != 0) {
    result = bad(fmt::format(
        "is accessible by group or others (mode {:04o}); the key must be private: chmod 600 it",
        st.st_mode & 07777));
  } else if (st.st_size > kMaxL3KeyFileBytes) {
    result = bad(
        fmt::format("holds {} bytes; a key file holds at most {}", st.st_size, kMaxL3KeyFileBytes));
  } else {
    key.resize(static_cast<size_t>(kMaxL3KeyFileBytes) + 1);
    size_t got = 0;
    while (got < key.size()) {
      const ssize_t n = ::read(fd, key.data() + got, key.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        result = bad(fmt::format("cannot be read: {}", std::strerror(errno)));
        break;
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    key.resize(got);
  }
  ::close(fd);
  TIERFS_RETURN_IF_ERROR(result);
  if (key.size() > static_cast<size_t>(kMaxL3KeyFileBytes)) {
    return bad(fmt::format("holds more than {} bytes", kMaxL3KeyFileBytes));
  }
  // One trailing newline (as `echo` or an editor leaves it) is not part of the key, so hosts
  // whose files differ only in it agree.
  if (!key.empty() && key.back() == '\n') key.pop_back();
  if (!key.empty() && key.back() == '\r') key.pop_back();
  if (key.size() < kMinL3KeyBytes) {
    return bad(
        fmt::format("holds {} bytes; a key needs at least {} (e.g. head -c 32 /dev/urandom > FILE)",
                    key.size(), kMinL3KeyBytes));
  }
  o->l3_tier.mac_key = std::move(key);
  return Status::OK();
}

// The timeouts NetworkWaitBound adds up: positive (the origin's), and at most 24h (a timeout of
// years is a typo, and the sum in nanoseconds would overflow).
Status CheckNetworkTimeouts(const DaemonOptions& o) {
  constexpr std::chrono::hours kMax{24};
  struct Timeout {
    const char* key;
    std::chrono::nanoseconds value;
    bool positive;  // zero or less is an error (else checked where its tier is set up)
  };
  for (const Timeout& t :
       {Timeout{"s3.connect_timeout", o.origin.connect_timeout, true},
        Timeout{"s3.request_timeout", o.origin.request_timeout, true},
        Timeout{"s3.backoff_max", o.origin.backoff_max, false},
        Timeout{"cache.l3_request_timeout", o.l3_store.request_timeout, false}}) {
    if (t.positive && t.value.count() <= 0) {
      return Status::InvalidArgument(fmt::format("{}: must be positive", t.key));
    }
    if (t.value > kMax)
      return Status::InvalidArgument(fmt::format("{}: must be at most 24h", t.key));
  }
  return Status::OK();
}

namespace {

Status Bad(std::string_view key, std::string_view why) {
  return Status::InvalidArgument(fmt::format("{}: {}", key, why));
}

// The block size and the budgets measured in blocks.
Status ValidateCacheSizes(const DaemonOptions& o) {
  const uint64_t bs = o.cache.block_size;
  if (!IsPowerOfTwo(bs) || bs < (4ULL << 10) || bs > (64ULL << 20)) {
    return Bad("cache.block_size (--block-size)",
               fmt::format("{} must be a power of two between 4KiB and 64MiB", FormatSize(bs)));
  }
  if (o.l1.capacity_bytes != 0 && o.l1.capacity_bytes < bs) {
    return Bad("cache.l1_size (--l1-size)",
               fmt::format("{} is smaller than one block ({}); use 0 to disable L1",
                           FormatSize(o.l1.capacity_bytes), FormatSize(bs)));
  }
  if (o.l2.capacity_bytes != 0 && o.l2.capacity_bytes < bs) {
    return Bad("cache.l2_size (--l2-size)",
               fmt::format("{} is smaller than one block ({}); use 0 to disable L2",
                           FormatSize(o.l2.capacity_bytes), FormatSize(bs)));
  }
  if (o.cache.admission.ghost_bytes > AdmissionOptions::kMaxGhostBytes) {
    return Bad("cache.admit_ghost_bytes",
               fmt::format("{} is more than {} (8 bytes per remembered block)",
                           FormatSize(o.cache.admission.ghost_bytes),
                           FormatSize(AdmissionOptions::kMaxGhostBytes)));
  }
  if (o.cache.readahead_max_bytes != 0 && o.cache.readahead_budget_bytes < bs) {
    return Bad("cache.readahead_budget",
               fmt::format("{} is smaller than one block ({}); set cache.readahead_max = 0 to "
                           "disable readahead",
                           FormatSize(o.cache.readahead_budget_bytes), FormatSize(bs)));
  }
  return Status::OK();
}

// The S3 origin's settings.
Status ValidateOrigin(const DaemonOptions& o) {
  if (o.source_uri.scheme == SourceUri::Scheme::kS3) {
    if (o.origin.bucket.empty()) return Bad("SOURCE", "no bucket");
    if (!o.origin.endpoint.empty() && !o.origin.endpoint.starts_with("http://") &&
        !o.origin.endpoint.starts_with("https://")) {
      return Bad("s3.endpoint (--endpoint)", fmt::format("'{}' must start with http:// or https://",
                                                         RedactUrl(o.origin.endpoint)));
    }
    if (o.origin.region.empty()) return Bad("s3.region (--region)", "must not be empty");
  }
  if (o.origin.hedge_min_delay.count() <= 0) return Bad("s3.hedge_min_delay", "must be positive");
  if (o.origin.part_size < (64u << 10)) return Bad("s3.part_size", "must be at least 64KiB");
  return Status::OK();
}

}  // namespace

Status Validate(const DaemonOptions& o) {
  auto bad = [](std::string_view key, std::string_view why) {
    return Status::InvalidArgument(fmt::format("{}: {}", key, why));
  };
  if (o.source.empty()) return bad("SOURCE", "required");
  if (o.mountpoint.empty()) return bad("MOUNTPOINT", "required");
  if (o.cache_dir.empty()) return bad("cache.dir (--cache-dir)", "must not be empty");
  TIERFS_RETURN_IF_ERROR(ValidateCacheSizes(o));
  if (o.catalog.metadata_ttl <= std::chrono::nanoseconds(0)) {
    return bad("metadata.ttl (--metadata-ttl)", "must be positive (or \"forever\")");
  }
  TIERFS_RETURN_IF_ERROR(ValidateOrigin(o));
  TIERFS_RETURN_IF_ERROR(CheckNetworkTimeouts(o));
  // Every integer key within the range of its row (set by -o or the code, not only the file).
  TIERFS_RETURN_IF_ERROR(config::CheckIntRanges(o));
  static const std::vector<std::string_view> kLevels = {"trace",   "debug", "info",     "warn",
                                                        "warning", "error", "critical", "off"};
  if (std::find(kLevels.begin(), kLevels.end(), o.log.level) == kLevels.end()) {
    return bad("log.level (--log-level)",
               fmt::format("'{}' is not one of trace, debug, info, warn, error, critical, off",
                           o.log.level));
  }
  if (o.log.format != "text" && o.log.format != "json") {
    return bad("log.format (--log-format)",
               fmt::format("'{}' is not text or json", EscapeForLog(o.log.format, 64)));
  }
  if (o.fuse.allow_other && o.fuse.allow_root) {
    return bad("fuse.allow_root (--allow-root)",
               "cannot be combined with allow_other (--allow-other), which already lets root in");
  }
  if (o.meta.map_size < (16ULL << 20)) return bad("metastore.map_size", "must be at least 16MiB");
  if (!o.metrics_address.empty()) {
    auto hp = ParseHostPort(o.metrics_address);
    if (!hp.ok()) return bad("metrics.address (--metrics-address)", hp.status().message());
  }
  return Status::OK();
}

std::string DescribeOptions(const DaemonOptions& o) {
  std::string s = fmt::format(
      "source={} mountpoint={} cache_dir={} block_size={} l1={} l2={} metadata_ttl={} "
      "fuse.max_threads={} allow_other={} default_permissions={} file_mode={:04o} "
      "dir_mode={:04o} prefetch_threads={} readahead_max={}",
      EscapeForLog(RedactUrl(o.source)), EscapeForLog(o.mountpoint), EscapeForLog(o.cache_dir),
      FormatSize(o.cache.block_size), FormatSize(o.l1.capacity_bytes),
      FormatSize(o.l2.capacity_bytes), FormatDuration(o.catalog.metadata_ttl), o.fuse.max_threads,
      o.fuse.allow_other, o.fuse.default_permissions, o.fs.file_mode, o.fs.dir_mode,
      o.cache.prefetch_threads, FormatSize(o.cache.readahead_max_bytes));
  if (o.source_uri.scheme == SourceUri::Scheme::kS3) {
    s += fmt::format(
        " endpoint={} region={} credentials={}",
        o.origin.endpoint.empty() ? "(aws default)" : EscapeForLog(RedactUrl(o.origin.endpoint)),
        EscapeForLog(o.origin.region), o.no_sign_request ? "anonymous" : "signed");
  }
  if (o.l3_is_memcached) {
    s += fmt::format(" l3={} l3_ttl={} l3_write_queue={} l3_mac={}", EscapeForLog(o.l3),
                     FormatDuration(o.l3_tier.ttl), o.l3_tier.write_queue,
                     o.l3_key_file.empty() ? "none" : "hmac-sha256");
  } else if (!o.l3.empty()) {
    s += fmt::format(" l3={} l3_endpoint={} l3_region={} l3_ttl={} l3_write_queue={} l3_mac={}",
                     EscapeForLog(RedactUrl(o.l3)),
                     o.l3_store.endpoint.empty() ? "(aws default)"
                                                 : EscapeForLog(RedactUrl(o.l3_store.endpoint)),
                     o.l3_store.region, FormatDuration(o.l3_tier.ttl), o.l3_tier.write_queue,
                     o.l3_key_file.empty() ? "none" : "hmac-sha256");
  }
  if (!o.metrics_address.empty()) {
    s += fmt::format(" metrics={}", EscapeForLog(o.metrics_address));
  }
  return s;
}

}  // namespace tierfs
