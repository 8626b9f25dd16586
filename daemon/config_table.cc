#include "daemon/internal/config_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <type_traits>
#include <utility>

#include "base/strings.h"
#include "base/units.h"

namespace tierfs {
namespace config {
namespace {

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};

std::chrono::milliseconds ToMillis(std::chrono::nanoseconds d) {
  if (d == kForever) return std::chrono::milliseconds(std::chrono::hours(24 * 365));
  return std::chrono::duration_cast<std::chrono::milliseconds>(d);
}

std::string SizeText(uint64_t v) {
  return v == UINT64_MAX ? Quote("unlimited") : Quote(FormatSize(v));
}

// Stores a converted value into a DaemonOptions field of type T (range already checked).
template <typename T>
void Assign(const Value& v, Kind kind, T* dst) {
  if constexpr (IsOptional<T>::value) {
    typename T::value_type x{};
    Assign(v, kind, &x);
    *dst = std::move(x);
  } else if constexpr (std::is_same_v<T, std::string>) {
    *dst = v.str;
  } else if constexpr (std::is_same_v<T, bool>) {
    *dst = v.b;
  } else if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
    *dst = ToMillis(v.duration);
  } else if constexpr (std::is_same_v<T, std::chrono::nanoseconds>) {
    *dst = v.duration;
  } else {
    static_assert(std::is_integral_v<T>);
    *dst = kind == Kind::kSize ? static_cast<T>(v.size) : static_cast<T>(v.i);
  }
}

// A field's value as a TOML value; "" for an unset optional.
template <typename T>
std::string Render(const T& v, Kind kind) {
  if constexpr (IsOptional<T>::value) {
    return v ? Render(*v, kind) : std::string();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return Quote(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::chrono::milliseconds> ||
                       std::is_same_v<T, std::chrono::nanoseconds>) {
    return Quote(FormatDuration(v));
  } else {
    static_assert(std::is_integral_v<T>);
    return kind == Kind::kSize ? SizeText(static_cast<uint64_t>(v)) : fmt::to_string(v);
  }
}

template <typename T>
bool IsSet(const T& v) {
  if constexpr (IsOptional<T>::value) {
    return v.has_value();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return !v.empty();
  } else {
    return true;
  }
}

Status ParseAddressing(std::string_view v, S3Options::Addressing* out) {
  if (v == "auto") {
    *out = S3Options::Addressing::kAuto;
  } else if (v == "path") {
    *out = S3Options::Addressing::kPath;
  } else if (v == "virtual" || v == "virtual-host") {
    *out = S3Options::Addressing::kVirtualHost;
  } else {
    return Status::InvalidArgument(
        fmt::format("'{}' is not an addressing style (auto, path, virtual)", v));
  }
  return Status::OK();
}

using Setter = std::function<Status(const Value&, DaemonOptions*)>;
using Getter = std::function<std::string(const DaemonOptions&)>;

// Builds one row (its table is set by the section it is in, BuildTable). `field` is a generic
// lambda returning a reference to the member the key sets (FIELD below), so one expression serves
// the setter, the getter and the default.
class Row {
 public:
  template <typename F>
  Row(Kind kind, std::string_view name, F field, std::string_view doc) {
    Init(kind, name, doc);
    k_.set = [field, kind](const Value& v, DaemonOptions* o) {
      Assign(v, kind, &field(*o));
      return Status::OK();
    };
    k_.get = [field, kind](const DaemonOptions& o) { return Render(field(o), kind); };
    k_.is_set = [field](const DaemonOptions& o) { return IsSet(field(o)); };
    using T = std::remove_cvref_t<decltype(field(std::declval<const DaemonOptions&>()))>;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (kind == Kind::kInt) {
        k_.int_value = [field](const DaemonOptions& o) { return static_cast<int64_t>(field(o)); };
      }
    }
  }
  // A key with custom logic: its setter and getter are given.
  Row(Kind kind, std::string_view name, Setter set, Getter get, std::string_view doc) {
    Init(kind, name, doc);
    k_.set = std::move(set);
    k_.get = std::move(get);
    k_.is_set = [](const DaemonOptions&) { return true; };
  }

  // The flag of `tierfs mount` that sets the key, as typed into `member` of MountFlags.
  Row& Flag(std::string_view flag, std::optional<std::string> MountFlags::*member,
            std::string_view alias = {}) {
    k_.flag = flag;
    k_.flag_alias = alias;
    k_.flag_text = member;
    return *this;
  }
  // A flag without a value that sets a boolean key to true.
  Row& Flag(std::string_view flag, bool MountFlags::*member) {
    k_.flag = flag;
    k_.flag_on = member;
    return *this;
  }
  Row& Range(int64_t lo, int64_t hi) {
    k_.min = lo;
    k_.max = hi;
    return *this;
  }
  Row& ZeroDisables() {
    k_.zero_disables = true;
    return *this;
  }
  Row& MaxSize(uint64_t bytes) {
    k_.max_size = bytes;
    return *this;
  }
  Row& MaxDuration(std::chrono::nanoseconds d) {
    k_.max_duration = d;
    return *this;
  }
  Row& Positive() {
    k_.positive = true;
    return *this;
  }
  Row& NonEmpty() {
    k_.non_empty = true;
    return *this;
  }
  Row& Unset(std::string_view meaning) {
    k_.unset = meaning;
    return *this;
  }
  Row& Env(std::vector<const char*> names) {
    k_.env = std::move(names);
    return *this;
  }
  // The key sets a second field as well (the L3 store's copy of an origin setting).
  template <typename F>
  Row& Also(F field) {
    k_.set = [first = std::move(k_.set), field, kind = k_.kind](const Value& v, DaemonOptions* o) {
      TIERFS_RETURN_IF_ERROR(first(v, o));
      Assign(v, kind, &field(*o));
      return Status::OK();
    };
    return *this;
  }
  Row& Set(Setter set) {
    k_.set = std::move(set);
    return *this;
  }
  Row& Get(Getter get) {
    k_.get = std::move(get);
    return *this;
  }

  operator ConfigKey() const { return k_; }  // NOLINT(google-explicit-constructor)

 private:
  void Init(Kind kind, std::string_view name, std::string_view doc) {
    k_.kind = kind;
    k_.name = name;
    k_.doc = doc;
  }
  ConfigKey k_;
};

// The member of DaemonOptions a key sets, for a const or non-const DaemonOptions.
#define FIELD(member) \
  [](auto& o) -> auto& { return o.member; }

constexpr Kind kStr = Kind::kString;
constexpr Kind kSize = Kind::kSize;
constexpr uint64_t kGiB = 1ULL << 30;
constexpr uint64_t kMiB = 1ULL << 20;
constexpr int64_t kMaxId = 0xffffffffLL;

// One constructor per Kind, so that a row reads: name, member, [range,] documentation, then
// what else the key has (its flag, what unset means, ...).
template <Kind K>
struct RowOf {
  template <typename F>
  Row operator()(std::string_view name, F field, std::string_view doc) const {
    return Row(K, name, field, doc);
  }
};
constexpr RowOf<Kind::kString> Str;
constexpr RowOf<Kind::kBool> Bool;
constexpr RowOf<Kind::kSize> Size;
constexpr RowOf<Kind::kDuration> Dur;
// An integer key has a range.
template <typename F>
Row Int(std::string_view name, F field, int64_t min, int64_t max, std::string_view doc) {
  return Row(Kind::kInt, name, field, doc).Range(min, max);
}
// A key with custom logic: its setter and getter are given.
Row Custom(Kind kind, std::string_view name, Setter set, Getter get, std::string_view doc) {
  return Row(kind, name, std::move(set), std::move(get), doc);
}

// ---- the setters and getters of keys with custom logic ----

Status SetAdmit(const Value& v, DaemonOptions* o) {
  TIERFS_ASSIGN_OR_RETURN(o->cache.admission.default_policy, ParseAdmitPolicy(v.str));
  return Status::OK();
}
std::string ShowAdmit(const DaemonOptions& o) {
  const AdmitPolicy p = o.cache.admission.default_policy;
  return Quote(AdmitPolicyName(p == AdmitPolicy::kDefault ? AdmitPolicy::kAlways : p));
}
std::string ShowGhostBytes(const DaemonOptions& o) {
  return o.cache.admission.ghost_bytes == 0 ? Quote("twice the blocks of cache.l2_size")
                                            : SizeText(o.cache.admission.ghost_bytes);
}
std::string ShowMemoryLimit(const DaemonOptions& o) {
  return o.memory_limit == 0 ? Quote("1/4 of the host's memory, 3/4 of its cgroup's")
                             : SizeText(o.memory_limit);
}

std::string ShowPinQuota(const DaemonOptions& o) {
  return o.policies.pin_quota_bytes == UINT64_MAX ? Quote("half of cache.l2_size")
                                                  : SizeText(o.policies.pin_quota_bytes);
}
Status SetL3MaxBytes(const Value& v, DaemonOptions* o) {
  o->l3_gc.max_bytes = v.size == 0 ? UINT64_MAX : v.size;  // 0: no bound
  return Status::OK();
}
std::string ShowL3MaxBytes(const DaemonOptions& o) { return SizeText(o.l3_gc.max_bytes); }
Status SetAddressing(const Value& v, DaemonOptions* o) {
  return ParseAddressing(v.str, &o->origin.addressing);
}
std::string ShowAddressing(const DaemonOptions& o) {
  switch (o.origin.addressing) {
    case S3Options::Addressing::kPath:
      return Quote("path");
    case S3Options::Addressing::kVirtualHost:
      return Quote("virtual");
    default:
      return Quote("auto");
  }
}
// s3.max_connections bounds the transport's connections too.
Status SetMaxConnections(const Value& v, DaemonOptions* o) {
  o->origin.max_connections = static_cast<int>(v.i);
  o->http.max_host_connections = o->origin.max_connections;
  o->http.max_total_connections =
      std::max<int>(o->http.max_total_connections, o->origin.max_connections);
  return Status::OK();
}
Status SetMode(const Value& v, uint32_t* mode, bool* set) {
  *set = true;
  return ParseMode(v.what, v.str, mode);
}
std::string ModeText(uint32_t m) { return Quote(fmt::format("{:04o}", m)); }
Status SetFileMode(const Value& v, DaemonOptions* o) {
  return SetMode(v, &o->fs.file_mode, &o->fs.file_mode_set);
}
std::string ShowFileMode(const DaemonOptions& o) { return ModeText(o.fs.file_mode); }
Status SetDirMode(const Value& v, DaemonOptions* o) {
  return SetMode(v, &o->fs.dir_mode, &o->fs.dir_mode_set);
}
std::string ShowDirMode(const DaemonOptions& o) { return ModeText(o.fs.dir_mode); }
Status SetMountOptions(const Value& v, DaemonOptions* o) { return ApplyMountOptions(v.str, o); }
std::string ShowMountOptions(const DaemonOptions& o) {
  std::string list;
  for (const auto& e : o.fuse.extra_options) list += (list.empty() ? "" : ",") + e;
  return Quote(list);
}

// ---- the keys, one row each, by section ----

std::vector<ConfigKey> CacheKeys() {
  return {
      Str("dir", FIELD(cache_dir),
          "Cache directory: L2 block files and the metadata store; private (0700) and locked, one "
          "daemon per directory")
          .Flag("--cache-dir", &MountFlags::cache_dir),
      Size("block_size", FIELD(cache.block_size),
           "Cache block size, a power of two between 4KiB and 64MiB")
          .Flag("--block-size", &MountFlags::block_size),
      Size("l1_size", FIELD(l1.capacity_bytes), "Memory cache (L1) size; 0 disables L1")
          .Flag("--l1-size", &MountFlags::l1_size),
      Int("l1_shards", FIELD(l1.shards), 1, 1024, "Number of L1 shards (LRU lists)"),
      Bool("l1_prefault", FIELD(l1_prefault),
           "Fault L1's memory in at start, on an idle-priority thread, and keep it resident"),
      Size("l2_size", FIELD(l2.capacity_bytes), "Flash cache (L2) size; 0 disables L2")
          .Flag("--l2-size", &MountFlags::l2_size),
      Size("l2_min_free", FIELD(l2.min_free_bytes),
           "L2 stops admitting (and evicts) below this much free space on its file system"),
      Bool("l2_fsync", FIELD(l2_fsync), "fsync every L2 block file"),
      Bool("l2_splice", FIELD(cache.file_slices), "Serve L2 hits by splicing from the block files"),
      Int("l2_promote_hits", FIELD(cache.promote_hits), 0, 1000000,
          "Copy an L2 block into L1 on its Nth recent read (1: every hit, 0: never)"),
      // Capped at one readahead run when the cache is built (TieredCache::small_object_bytes).
      Size("whole_object_max", FIELD(cache.small_object_bytes),
           "A miss on a file of at most this size fetches the whole file with one request; 0: off")
          .MaxSize(kGiB),
      Size("sparse_read_max", FIELD(cache.sparse_read_max),
           "A small read inside an uncached block fetches only the 4KiB pages it reads; 0: off")
          .MaxSize(kGiB),
      Custom(kStr, "admit", SetAdmit, ShowAdmit,
             "L2 admission of fetched blocks: always, reuse or never"),
      Size("admit_ghost_bytes", FIELD(cache.admission.ghost_bytes),
           "Memory of the reuse policy's ghost list (8 bytes per block); at most 64MiB")
          .Get(ShowGhostBytes),
      Int("admit_scan_percent", FIELD(cache.admission.scan_percent), 0, 100,
          "A sequential read of a file of at least this % of l2_size is a scan, admitted as reuse"),
      Size("pin_quota", FIELD(policies.pin_quota_bytes),
           "Bytes that may be pinned; a pin beyond it fails with ENOSPC")
          .Positive()
          .Get(ShowPinQuota),
  };
}

std::vector<ConfigKey> CachePrefetchKeys() {
  return {
      Int("prefetch_job_threads", FIELD(prefetch_jobs.threads), 1, 64,
          "Threads of the deep prefetch jobs (user.tierfs.prefetch, tierfs prefetch)"),
      Int("fetch_threads", FIELD(cache.fetch_threads), 1, 1024,
          "Threads fetching blocks from L3 and the origin for demand reads"),
      Int("prefetch_threads", FIELD(cache.prefetch_threads), 0, 256,
          "Threads of the readahead/prefetch pool (origin requests readahead keeps in flight)"),
      Size("readahead_max", FIELD(cache.readahead_max_bytes),
           "Upper bound of the per-file readahead window; 0 disables readahead"),
      Int("prefetch_next_files", FIELD(fs.prefetch.next_files), 0, 1024,
          "Opens of small files in a directory prefetch the next N of its listing; 0: off")
          .ZeroDisables(),
      Int("random_hydrate_misses", FIELD(fs.prefetch.random_hydrate_misses), 0, 1000000,
          "After this many random misses in one open file, fetch the rest of it; 0: off")
          .ZeroDisables(),
      Size("prefetch_job_memory", FIELD(prefetch_jobs.memory_budget),
           "Memory of the blocks the deep prefetch jobs have in flight")
          .Positive(),
      Size("readahead_budget", FIELD(cache.readahead_budget_bytes),
           "Readahead memory of the whole daemon (queue and blocks being fetched)"),
      Size("readahead_run", FIELD(cache.readahead_run_bytes),
           "Bytes of adjacent blocks readahead fetches with one origin read")
          .Positive(),
  };
}

std::vector<ConfigKey> MemoryKeys() {
  return {
      Size("limit", FIELD(memory_limit),
           "What the daemon's memory (RSS) may come to: L1, readahead, prefetch jobs, blocks in "
           "flight and listings draw from it, L1 giving back first; at least 32MiB + 16 blocks; "
           "0: a quarter of the host's memory, or 3/4 of the cgroup's memory.max when lower")
          .Flag("--memory-limit", &MountFlags::memory_limit)
          .Get(ShowMemoryLimit),
  };
}

std::vector<ConfigKey> L3Keys() {
  return {
      Str("l3", FIELD(l3),
          "Regional L3 tier shared by the hosts of a region: s3://BUCKET[/PREFIX] on any "
          "S3-compatible store, or memcached://HOST:PORT,HOST:PORT,... (servers need -I above the "
          "block size + 80 bytes)")
          .Flag("--l3", &MountFlags::l3),
      Str("l3_endpoint", FIELD(l3_endpoint), "Endpoint URL of the L3 store (not for memcached://)")
          .Flag("--l3-endpoint", &MountFlags::l3_endpoint)
          .Unset("AWS S3 for the region"),
      Str("l3_region", FIELD(l3_region), "Region for signing L3 requests")
          .Unset("the origin's region"),
      Str("l3_profile", FIELD(l3_profile), "AWS profile of the L3 credentials"),
      Str("l3_access_key_id_env", FIELD(l3_access_key_id_env),
          "Environment variable holding the L3 access key id (with l3_secret_access_key_env)"),
      Str("l3_secret_access_key_env", FIELD(l3_secret_access_key_env),
          "Environment variable holding the L3 secret key (with l3_access_key_id_env)"),
      Bool("l3_no_sign_request", FIELD(l3_no_sign_request), "Send anonymous requests to L3"),
      Dur("l3_ttl", FIELD(l3_tier.ttl),
          "L3 blocks stored longer ago are ignored (and deleted by tierfs l3 gc)"),
      Custom(kSize, "l3_max_bytes", SetL3MaxBytes, ShowL3MaxBytes,
             "Size tierfs l3 gc trims L3 to, oldest blocks first; 0: no bound"),
      Int("l3_write_queue", FIELD(l3_tier.write_queue), 1, 65536,
          "L3 write-back queue in blocks; a full queue drops the write"),
      Int("l3_write_threads", FIELD(l3_tier.write_threads), 1, 64, "Threads uploading to L3"),
      Dur("l3_request_timeout", FIELD(l3_store.request_timeout),
          "Per-attempt timeout of L3 requests"),
      Int("l3_max_attempts", FIELD(l3_store.max_attempts), 1, 100,
          "Attempts per L3 request (1 = no retries)"),
      Str("l3_key_file", FIELD(l3_key_file),
          "Private file (mode 0600) holding the HMAC key of L3 objects; unset: no MAC")
          .NonEmpty(),
  };
}

std::vector<ConfigKey> MetadataKeys() {
  return {
      Dur("ttl", FIELD(catalog.metadata_ttl),
          "How long listings and object metadata are trusted (also the kernel's cache lifetime): "
          "30s, 10m, 7d or forever")
          .Flag("--metadata-ttl", &MountFlags::metadata_ttl),
      Str("manifest", FIELD(manifest),
          "Serve exactly the tree of this dataset manifest made by tierfs manifest create (a file, "
          "or s3://BUCKET/KEY read with the origin's settings): no LIST or HEAD to the origin, "
          "every file pinned to its ETag")
          .Flag("--manifest", &MountFlags::manifest)
          .NonEmpty()
          .Unset("live listings"),
  };
}

std::vector<ConfigKey> S3Keys() {
  return {
      Str("endpoint", FIELD(endpoint), "S3 endpoint URL, with scheme")
          .Flag("--endpoint", &MountFlags::endpoint, "--endpoint-url")
          .Unset("AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS S3")
          .Env({"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}),
      Str("region", FIELD(region), "Region for request signing")
          .Flag("--region", &MountFlags::region)
          .Unset("AWS_REGION, AWS_DEFAULT_REGION, else us-east-1")
          .Env({"AWS_REGION", "AWS_DEFAULT_REGION"}),
      Custom(kStr, "addressing", SetAddressing, ShowAddressing, "URL style: auto, path or virtual"),
      Str("profile", FIELD(profile),
          "AWS profile of ~/.aws/config and ~/.aws/credentials; set, it skips the "
          "AWS_ACCESS_KEY_ID environment keys")
          .Flag("--profile", &MountFlags::profile)
          .Unset("AWS_PROFILE, else default")
          .Env({"AWS_PROFILE"}),
      Bool("no_sign_request", FIELD(no_sign_request), "Send anonymous requests (public buckets)")
          .Flag("--no-sign-request", &MountFlags::no_sign_request),
      Str("ca_bundle", FIELD(origin.ca_bundle),
          "CA bundle file for https endpoints; empty: AWS_CA_BUNDLE, else the system store"),
      Dur("connect_timeout", FIELD(origin.connect_timeout), "Per-attempt TCP/TLS connect timeout"),
      Dur("request_timeout", FIELD(origin.request_timeout), "Per-attempt whole-request timeout"),
      Dur("low_speed_time", FIELD(origin.low_speed_time), "How long a response body may stall"),
      Int("max_attempts", FIELD(origin.max_attempts), 1, 100,
          "Attempts per request (1 = no retries)"),
      Dur("backoff_base", FIELD(origin.backoff_base), "Smallest backoff between retries"),
      Dur("backoff_max", FIELD(origin.backoff_max), "Largest backoff between retries"),
  };
}

std::vector<ConfigKey> S3TransferKeys() {
  return {
      Int("max_connections", FIELD(origin.max_connections), 1, 4096,
          "Concurrent connections to the endpoint: the ceiling of the adaptive request limit")
          .Set(SetMaxConnections),
      Int("initial_concurrency", FIELD(origin.initial_concurrency), 1, 4096,
          "Requests in flight the adaptive limit starts at"),
      Bool("hedge", FIELD(origin.hedge),
           "Hedged GETs (origin and L3): a slow ranged GET gets one duplicate")
          .Also(FIELD(l3_store.hedge)),
      Dur("hedge_min_delay", FIELD(origin.hedge_min_delay), "Least wait before a GET is hedged")
          .Also(FIELD(l3_store.hedge_min_delay)),
      Int("hedge_percent", FIELD(origin.hedge_percent), 0, 100,
          "At most this share of GETs (in %) is hedged")
          .Also(FIELD(l3_store.hedge_percent)),
      Size("hedge_max_size", FIELD(origin.hedge_max_bytes),
           "Only GETs of at most this size are hedged")
          .Also(FIELD(l3_store.hedge_max_bytes)),
      Size("part_size", FIELD(origin.part_size),
           "Reads larger than this are split into parallel ranged GETs"),
      Int("max_parts_in_flight", FIELD(origin.max_parts_in_flight), 1, 256,
          "Parallel ranged GETs per read"),
  };
}

std::vector<ConfigKey> FuseKeys() {
  return {
      Int("max_threads", FIELD(fuse.max_threads), 1, 1024,
          "FUSE worker threads: bounds the requests served at once"),
      Int("remote_threads", FIELD(fuse.remote_threads), 1, 4096,
          "Threads taking the network-bound requests beyond the FUSE workers' share"),
      Bool("clone_fd", FIELD(fuse.clone_fd), "One /dev/fuse descriptor per worker"),
      Bool("open_in_kernel", FIELD(fuse.open_in_kernel),
           "Opens handled in the kernel: no open/release request per file"),
      Bool("passthrough", FIELD(fuse.passthrough),
           "FUSE passthrough of one-block files L2 holds (Linux 6.9+, root)"),
      Bool("splice_sized_reads", FIELD(fuse.fit_reads_to_splice_pipe),
           "Ask the kernel for reads a default splice pipe holds (1004KiB)"),
      Size("store_on_open_max", FIELD(fuse.store_on_open_max),
           "Write a cached small file into the page cache at its first open; 0: off")
          .MaxSize(4 * kMiB),
      Bool("allow_other", FIELD(fuse.allow_other),
           "Let other users use the mount (turns on default_permissions); needs user_allow_other "
           "in /etc/fuse.conf unless root")
          .Flag("--allow-other", &MountFlags::allow_other),
      Bool("allow_root", FIELD(fuse.allow_root),
           "Let root use the mount besides the mounting user (not with allow_other)")
          .Flag("--allow-root", &MountFlags::allow_root),
      Bool("default_permissions", FIELD(default_permissions),
           "Let the kernel enforce the owner and mode bits")
          .Unset("on with allow_other/allow_root"),
      Custom(kStr, "file_mode", SetFileMode, ShowFileMode, "Permission bits of every file, octal")
          .Flag("--file-mode", &MountFlags::file_mode),
      Custom(kStr, "dir_mode", SetDirMode, ShowDirMode, "Permission bits of every directory, octal")
          .Flag("--dir-mode", &MountFlags::dir_mode),
      Int("uid", FIELD(uid), 0, kMaxId, "Owner of every file and directory")
          .Flag("--uid", &MountFlags::uid)
          .Unset("the mounting user"),
      Int("gid", FIELD(gid), 0, kMaxId, "Group of every file and directory")
          .Flag("--gid", &MountFlags::gid)
          .Unset("the mounting user's group"),
      Dur("shutdown_grace", FIELD(fuse.shutdown_grace),
          "On SIGTERM, how long requests waiting on the origin may still take")
          .MaxDuration(std::chrono::hours(1)),
      Str("control_group", FIELD(control_group),
          "Group (name or gid) whose members may start prefetches (user.tierfs.prefetch, "
          "prefetch_list)")
          .Flag("--control-group", &MountFlags::control_group)
          .Unset("only root and the mounting user"),
      Custom(kStr, "options", SetMountOptions, ShowMountOptions,
             "Extra mount options, comma-separated, as with -o"),
      Bool("debug", FIELD(fuse.debug), "libfuse debug output of every request"),
  };
}

std::vector<ConfigKey> LogKeys() {
  return {
      Str("level", FIELD(log.level),
          "trace, debug, info, warn, error, critical or off; changeable later with tierfs "
          "log-level")
          .Flag("--log-level", &MountFlags::log_level),
      Str("file", FIELD(log.destination), "Log file; SIGHUP reopens it")
          .Flag("--log-file", &MountFlags::log_file)
          .Unset("stderr with -f, syslog otherwise"),
      Str("format", FIELD(log.format),
          "text, or json: one object per line with time, level, thread, logger, message")
          .Flag("--log-format", &MountFlags::log_format),
  };
}

std::vector<ConfigKey> MetastoreKeys() {
  return {
      Size("map_size", FIELD(meta.map_size),
           "LMDB map size: the upper bound of the metadata store"),
      Bool("sync_every_commit", FIELD(meta.sync_every_commit), "fsync every metadata commit"),
  };
}

std::vector<ConfigKey> MetricsKeys() {
  return {
      Str("address", FIELD(metrics_address), "HOST:PORT of the Prometheus /metrics endpoint")
          .Flag("--metrics-address", &MountFlags::metrics_address)
          .Unset("no metrics endpoint"),
  };
}

#undef FIELD

// The sections in the order of the config file's documentation, each with its table.
std::vector<ConfigKey> BuildTable() {
  using Section = std::pair<std::string_view, std::vector<ConfigKey> (*)()>;
  const Section sections[] = {
      {"cache", CacheKeys},         {"cache", CachePrefetchKeys}, {"cache", L3Keys},
      {"memory", MemoryKeys},       {"metadata", MetadataKeys},   {"s3", S3Keys},
      {"s3", S3TransferKeys},       {"fuse", FuseKeys},           {"log", LogKeys},
      {"metastore", MetastoreKeys}, {"metrics", MetricsKeys},
  };
  std::vector<ConfigKey> all;
  for (const auto& [table, keys] : sections) {
    for (ConfigKey& k : keys()) {
      k.table = table;
      all.push_back(std::move(k));
    }
  }
  return all;
}

}  // namespace

std::string ConfigKey::FullName() const { return fmt::format("{}.{}", table, name); }

const std::vector<ConfigKey>& ConfigTable() {
  static const std::vector<ConfigKey> kTable = BuildTable();
  return kTable;
}

const ConfigKey* FindConfigKey(std::string_view table, std::string_view name) {
  for (const ConfigKey& k : ConfigTable()) {
    if (k.table == table && k.name == name) return &k;
  }
  return nullptr;
}

Status CheckRange(const ConfigKey& k, const Value& v) {
  switch (k.kind) {
    case Kind::kInt:
      if (v.i < k.min || v.i > k.max) {
        return Status::InvalidArgument(
            fmt::format("{} is out of range (must be {}..{})", v.i, k.min, k.max));
      }
      break;
    case Kind::kSize:
      if (k.positive && v.size == 0) return Status::InvalidArgument("must be > 0");
      if (v.size > k.max_size) {
        return Status::InvalidArgument(fmt::format("must be at most {}", FormatSize(k.max_size)));
      }
      break;
    case Kind::kDuration:
      if (v.duration > k.max_duration) {
        return Status::InvalidArgument(
            fmt::format("must be at most {}", FormatDuration(k.max_duration)));
      }
      break;
    case Kind::kString:
      if (k.non_empty && v.str.empty()) {
        return Status::InvalidArgument("must not be empty (leave it out)");
      }
      break;
    case Kind::kBool:
      break;
  }
  return Status::OK();
}

Status CheckIntRanges(const DaemonOptions& o) {
  for (const ConfigKey& k : ConfigTable()) {
    if (!k.int_value) continue;
    const int64_t v = k.int_value(o);
    if (v < k.min || v > k.max) {
      return Status::InvalidArgument(fmt::format("{}: must be {}..{}{}", k.FullName(), k.min, k.max,
                                                 k.zero_disables ? " (0 disables it)" : ""));
    }
  }
  return Status::OK();
}

std::string FlagHelp(const ConfigKey& k) {
  if (k.flag_on != nullptr) return fmt::format("{} ({})", k.doc, k.FullName());
  const DaemonOptions defaults;
  std::string d;
  if (!k.unset.empty() && !k.is_set(defaults)) {
    d = k.unset;
  } else {
    d = k.get(defaults);
    if (d == "\"\"") {
      d = "none";
    } else if (d.size() >= 2 && d.front() == '"' && d.back() == '"') {
      d = d.substr(1, d.size() - 2);
    }
  }
  return fmt::format("{} ({}; default: {})", k.doc, k.FullName(), d);
}

std::string Show(const ConfigKey& k, const DaemonOptions& o) {
  if (!k.unset.empty() && !k.is_set(o)) return fmt::format("(unset: {})", k.unset);
  if (k.secret) return "(secret)";
  return k.get(o);
}

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : EscapeForLog(s, 4096)) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

Status ParseUint(std::string_view what, std::string_view text, uint64_t max, uint64_t* out) {
  uint64_t v = 0;
  if (text.empty()) return Status::InvalidArgument(fmt::format("{}: empty number", what));
  for (char c : text) {
    if (c < '0' || c > '9') {
      return Status::InvalidArgument(fmt::format("{}: '{}' is not a number", what, text));
    }
    v = v * 10 + static_cast<uint64_t>(c - '0');
    if (v > max) return Status::InvalidArgument(fmt::format("{}: {} is too large", what, text));
  }
  *out = v;
  return Status::OK();
}

Status ParseMode(std::string_view what, std::string_view text, uint32_t* out) {
  uint32_t v = 0;
  if (text.empty() || text.size() > 4) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not an octal mode such as \"0644\"", what, text));
  }
  for (char c : text) {
    if (c < '0' || c > '7') {
      return Status::InvalidArgument(
          fmt::format("{}: '{}' is not an octal mode such as \"0644\"", what, text));
    }
    v = v * 8 + static_cast<uint32_t>(c - '0');
  }
  if (v > 0777) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' has bits beyond 0777 (no setuid, setgid or sticky bit)", what, text));
  }
  *out = v;
  return Status::OK();
}

}  // namespace config
}  // namespace tierfs
