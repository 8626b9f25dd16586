#include "daemon/internal/config_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// Builds one row. `field` is a generic lambda returning a reference to the member the key sets
// (FIELD below), so one expression serves the setter, the getter and the default.
class Row {
 public:
  template <typename F>
  Row(Kind kind, std::string_view table, std::string_view name, F field, std::string_view doc) {
    Init(kind, table, name, doc);
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
  Row(Kind kind, std::string_view table, std::string_view name, Setter set, Getter get,
      std::string_view doc) {
    Init(kind, table, name, doc);
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
  void Init(Kind kind, std::string_view table, std::string_view name, std::string_view doc) {
    k_.kind = kind;
    k_.table = table;
    k_.name = name;
    k_.doc = doc;
  }
  ConfigKey k_;
};

// The member of DaemonOptions a key sets, for a const or non-const DaemonOptions.
#define FIELD(member) \
  [](auto& o) -> auto& { return o.member; }

constexpr Kind kStr = Kind::kString;
constexpr Kind kBool = Kind::kBool;
constexpr Kind kInt = Kind::kInt;
constexpr Kind kSize = Kind::kSize;
constexpr Kind kDur = Kind::kDuration;
constexpr uint64_t kGiB = 1ULL << 30;
constexpr uint64_t kMiB = 1ULL << 20;
constexpr int64_t kMaxId = 0xffffffffLL;

Status SetMode(const Value& v, uint32_t* mode, bool* set) {
  *set = true;
  return ParseMode(v.what, v.str, mode);
}
std::string ModeText(uint32_t m) { return Quote(fmt::format("{:04o}", m)); }

std::vector<ConfigKey> CacheKeys() {
  return {
      Row(kStr, "cache", "dir", FIELD(cache_dir),
          "Cache directory: L2 block files and the metadata store; private (0700) and locked, "
          "one daemon per directory")
          .Flag("--cache-dir", &MountFlags::cache_dir),
      Row(kSize, "cache", "block_size", FIELD(cache.block_size),
          "Cache block size, a power of two between 4KiB and 64MiB")
          .Flag("--block-size", &MountFlags::block_size),
      Row(kSize, "cache", "l1_size", FIELD(l1.capacity_bytes),
          "Memory cache (L1) size; 0 disables L1")
          .Flag("--l1-size", &MountFlags::l1_size),
      Row(kInt, "cache", "l1_shards", FIELD(l1.shards), "Number of L1 shards (LRU lists)")
          .Range(1, 1024),
      Row(kBool, "cache", "l1_prefault", FIELD(l1_prefault),
          "Fault L1's memory in at start, on an idle-priority thread, and keep it resident"),
      Row(kSize, "cache", "l2_size", FIELD(l2.capacity_bytes),
          "Flash cache (L2) size; 0 disables L2")
          .Flag("--l2-size", &MountFlags::l2_size),
      Row(kSize, "cache", "l2_min_free", FIELD(l2.min_free_bytes),
          "L2 stops admitting (and evicts) below this much free space on its file system"),
      Row(kBool, "cache", "l2_fsync", FIELD(l2_fsync), "fsync every L2 block file"),
      Row(kBool, "cache", "l2_splice", FIELD(cache.file_slices),
          "Serve L2 hits by splicing from the block files"),
      Row(kInt, "cache", "l2_promote_hits", FIELD(cache.promote_hits),
          "Copy an L2 block into L1 on its Nth recent read (1: every hit, 0: never)")
          .Range(0, 1000000),
      // Capped at one readahead run when the cache is built (TieredCache::small_object_bytes).
      Row(kSize, "cache", "whole_object_max", FIELD(cache.small_object_bytes),
          "A miss on a file of at most this size fetches the whole file with one request; 0: off")
          .MaxSize(kGiB),
      Row(kSize, "cache", "sparse_read_max", FIELD(cache.sparse_read_max),
          "A small read inside an uncached block fetches only the 32KiB chunks it reads; 0: off")
          .MaxSize(kGiB),
      Row(
          kStr, "cache", "admit",
          [](const Value& v, DaemonOptions* o) {
            TIERFS_ASSIGN_OR_RETURN(o->cache.admission.default_policy, ParseAdmitPolicy(v.str));
            return Status::OK();
          },
          [](const DaemonOptions& o) {
            const AdmitPolicy p = o.cache.admission.default_policy;
            return Quote(AdmitPolicyName(p == AdmitPolicy::kDefault ? AdmitPolicy::kAlways : p));
          },
          "L2 admission of fetched blocks: always, reuse or never"),
      Row(kSize, "cache", "admit_ghost_bytes", FIELD(cache.admission.ghost_bytes),
          "Memory of the reuse policy's ghost list (8 bytes per block); at most 64MiB")
          .Get([](const DaemonOptions& o) {
            return o.cache.admission.ghost_bytes == 0 ? Quote("twice the blocks of cache.l2_size")
                                                      : SizeText(o.cache.admission.ghost_bytes);
          }),
      Row(kInt, "cache", "admit_scan_percent", FIELD(cache.admission.scan_percent),
          "A sequential read of a file of at least this % of l2_size is a scan, admitted as reuse")
          .Range(0, 100),
      Row(kSize, "cache", "pin_quota", FIELD(policies.pin_quota_bytes),
          "Bytes that may be pinned; a pin beyond it fails with ENOSPC")
          .Positive()
          .Get([](const DaemonOptions& o) {
            return o.policies.pin_quota_bytes == UINT64_MAX ? Quote("half of cache.l2_size")
                                                            : SizeText(o.policies.pin_quota_bytes);
          }),
  };
}

std::vector<ConfigKey> CachePrefetchKeys() {
  return {
      Row(kInt, "cache", "prefetch_job_threads", FIELD(prefetch_jobs.threads),
          "Threads of the deep prefetch jobs (user.tierfs.prefetch, tierfs prefetch)")
          .Range(1, 64),
      Row(kInt, "cache", "fetch_threads", FIELD(cache.fetch_threads),
          "Threads fetching blocks from L3 and the origin for demand reads")
          .Range(1, 1024),
      Row(kInt, "cache", "prefetch_threads", FIELD(cache.prefetch_threads),
          "Threads of the readahead/prefetch pool (origin requests readahead keeps in flight)")
          .Range(0, 256),
      Row(kSize, "cache", "readahead_max", FIELD(cache.readahead_max_bytes),
          "Upper bound of the per-file readahead window; 0 disables readahead"),
      Row(kInt, "cache", "prefetch_next_files", FIELD(fs.prefetch.next_files),
          "Opens of small files in a directory prefetch the next N of its listing; 0: off")
          .Range(0, 1024)
          .ZeroDisables(),
      Row(kInt, "cache", "random_hydrate_misses", FIELD(fs.prefetch.random_hydrate_misses),
          "After this many random misses in one open file, fetch the rest of it; 0: off")
          .Range(0, 1000000)
          .ZeroDisables(),
      Row(kSize, "cache", "prefetch_job_memory", FIELD(prefetch_jobs.memory_budget),
          "Memory of the blocks the deep prefetch jobs have in flight")
          .Positive(),
      Row(kSize, "cache", "readahead_budget", FIELD(cache.readahead_budget_bytes),
          "Readahead memory of the whole daemon (queue and blocks being fetched)"),
      Row(kSize, "cache", "readahead_run", FIELD(cache.readahead_run_bytes),
          "Bytes of adjacent blocks readahead fetches with one origin read")
          .Positive(),
  };
}

std::vector<ConfigKey> MemoryKeys() {
  return {
      Row(kSize, "memory", "limit", FIELD(memory_limit),
          "What the daemon's memory (RSS) may come to: L1, readahead, prefetch jobs, blocks in "
          "flight and listings draw from it, L1 giving back first; at least 32MiB + 16 blocks; "
          "0: a quarter of the host's memory, or 3/4 of the cgroup's memory.max when lower")
          .Flag("--memory-limit", &MountFlags::memory_limit)
          .Get([](const DaemonOptions& o) {
            return o.memory_limit == 0 ? Quote("1/4 of the host's memory, 3/4 of its cgroup's")
                                       : SizeText(o.memory_limit);
          }),
  };
}

std::vector<ConfigKey> L3Keys() {
  return {
      Row(kStr, "cache", "l3", FIELD(l3),
          "Regional L3 tier shared by the hosts of a region: s3://BUCKET[/PREFIX] on any "
          "S3-compatible store, or memcached://HOST:PORT,HOST:PORT,... (servers need -I above the "
          "block size + 80 bytes)")
          .Flag("--l3", &MountFlags::l3),
      Row(kStr, "cache", "l3_endpoint", FIELD(l3_endpoint),
          "Endpoint URL of the L3 store (not for memcached://)")
          .Flag("--l3-endpoint", &MountFlags::l3_endpoint)
          .Unset("AWS S3 for the region"),
      Row(kStr, "cache", "l3_region", FIELD(l3_region), "Region for signing L3 requests")
          .Unset("the origin's region"),
      Row(kStr, "cache", "l3_profile", FIELD(l3_profile), "AWS profile of the L3 credentials"),
      Row(kStr, "cache", "l3_access_key_id_env", FIELD(l3_access_key_id_env),
          "Environment variable holding the L3 access key id (with l3_secret_access_key_env)"),
      Row(kStr, "cache", "l3_secret_access_key_env", FIELD(l3_secret_access_key_env),
          "Environment variable holding the L3 secret key (with l3_access_key_id_env)"),
      Row(kBool, "cache", "l3_no_sign_request", FIELD(l3_no_sign_request),
          "Send anonymous requests to L3"),
      Row(kDur, "cache", "l3_ttl", FIELD(l3_tier.ttl),
          "L3 blocks stored longer ago are ignored (and deleted by tierfs l3 gc)"),
      Row(
          kSize, "cache", "l3_max_bytes",
          [](const Value& v, DaemonOptions* o) {
            o->l3_gc.max_bytes = v.size == 0 ? UINT64_MAX : v.size;  // 0: no bound
            return Status::OK();
          },
          [](const DaemonOptions& o) { return SizeText(o.l3_gc.max_bytes); },
          "Size tierfs l3 gc trims L3 to, oldest blocks first; 0: no bound"),
      Row(kInt, "cache", "l3_write_queue", FIELD(l3_tier.write_queue),
          "L3 write-back queue in blocks; a full queue drops the write")
          .Range(1, 65536),
      Row(kInt, "cache", "l3_write_threads", FIELD(l3_tier.write_threads),
          "Threads uploading to L3")
          .Range(1, 64),
      Row(kDur, "cache", "l3_request_timeout", FIELD(l3_store.request_timeout),
          "Per-attempt timeout of L3 requests"),
      Row(kInt, "cache", "l3_max_attempts", FIELD(l3_store.max_attempts),
          "Attempts per L3 request (1 = no retries)")
          .Range(1, 100),
      Row(kStr, "cache", "l3_key_file", FIELD(l3_key_file),
          "Private file (mode 0600) holding the HMAC key of L3 objects; unset: no MAC")
          .NonEmpty(),
  };
}

std::vector<ConfigKey> MetadataAndS3Keys() {
  return {
      Row(kDur, "metadata", "ttl", FIELD(catalog.metadata_ttl),
          "How long listings and object metadata are trusted (also the kernel's cache lifetime): "
          "30s, 10m, 7d or forever")
          .Flag("--metadata-ttl", &MountFlags::metadata_ttl),
      Row(kStr, "metadata", "manifest", FIELD(manifest),
          "Serve exactly the tree of this dataset manifest made by tierfs manifest create (a file, "
          "or "
          "s3://BUCKET/KEY read with the origin's settings): no LIST or HEAD to the origin, every "
          "file pinned to its ETag")
          .Flag("--manifest", &MountFlags::manifest)
          .NonEmpty()
          .Unset("live listings"),
      Row(kStr, "s3", "endpoint", FIELD(endpoint), "S3 endpoint URL, with scheme")
          .Flag("--endpoint", &MountFlags::endpoint, "--endpoint-url")
          .Unset("AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS S3")
          .Env({"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}),
      Row(kStr, "s3", "region", FIELD(region), "Region for request signing")
          .Flag("--region", &MountFlags::region)
          .Unset("AWS_REGION, AWS_DEFAULT_REGION, else us-east-1")
          .Env({"AWS_REGION", "AWS_DEFAULT_REGION"}),
      Row(
          kStr, "s3", "addressing",
          [](const Value& v, DaemonOptions* o) {
            return ParseAddressing(v.str, &o->origin.addressing);
          },
          [](const DaemonOptions& o) {
            switch (o.origin.addressing) {
              case S3Options::Addressing::kPath:
                return Quote("path");
              case S3Options::Addressing::kVirtualHost:
                return Quote("virtual");
              default:
                return Quote("auto");
            }
          },
          "URL style: auto, path or virtual"),
      Row(kStr, "s3", "profile", FIELD(profile),
          "AWS profile of ~/.aws/config and ~/.aws/credentials; set, it skips the "
          "AWS_ACCESS_KEY_ID environment keys")
          .Flag("--profile", &MountFlags::profile)
          .Unset("AWS_PROFILE, else default")
          .Env({"AWS_PROFILE"}),
      Row(kBool, "s3", "no_sign_request", FIELD(no_sign_request),
          "Send anonymous requests (public buckets)")
          .Flag("--no-sign-request", &MountFlags::no_sign_request),
      Row(kStr, "s3", "ca_bundle", FIELD(origin.ca_bundle),
          "CA bundle file for https endpoints; empty: AWS_CA_BUNDLE, else the system store"),
      Row(kDur, "s3", "connect_timeout", FIELD(origin.connect_timeout),
          "Per-attempt TCP/TLS connect timeout"),
      Row(kDur, "s3", "request_timeout", FIELD(origin.request_timeout),
          "Per-attempt whole-request timeout"),
      Row(kDur, "s3", "low_speed_time", FIELD(origin.low_speed_time),
          "How long a response body may stall"),
      Row(kInt, "s3", "max_attempts", FIELD(origin.max_attempts),
          "Attempts per request (1 = no retries)")
          .Range(1, 100),
      Row(kDur, "s3", "backoff_base", FIELD(origin.backoff_base),
          "Smallest backoff between retries"),
      Row(kDur, "s3", "backoff_max", FIELD(origin.backoff_max), "Largest backoff between retries"),
  };
}

std::vector<ConfigKey> S3TransferKeys() {
  return {
      Row(kInt, "s3", "max_connections", FIELD(origin.max_connections),
          "Concurrent connections to the endpoint: the ceiling of the adaptive request limit")
          .Range(1, 4096)
          .Set([](const Value& v, DaemonOptions* o) {
            o->origin.max_connections = static_cast<int>(v.i);
            o->http.max_host_connections = o->origin.max_connections;
            o->http.max_total_connections =
                std::max<int>(o->http.max_total_connections, o->origin.max_connections);
            return Status::OK();
          }),
      Row(kInt, "s3", "initial_concurrency", FIELD(origin.initial_concurrency),
          "Requests in flight the adaptive limit starts at")
          .Range(1, 4096),
      Row(kBool, "s3", "hedge", FIELD(origin.hedge),
          "Hedged GETs (origin and L3): a slow ranged GET gets one duplicate")
          .Also(FIELD(l3_store.hedge)),
      Row(kDur, "s3", "hedge_min_delay", FIELD(origin.hedge_min_delay),
          "Least wait before a GET is hedged")
          .Also(FIELD(l3_store.hedge_min_delay)),
      Row(kInt, "s3", "hedge_percent", FIELD(origin.hedge_percent),
          "At most this share of GETs (in %) is hedged")
          .Range(0, 100)
          .Also(FIELD(l3_store.hedge_percent)),
      Row(kSize, "s3", "hedge_max_size", FIELD(origin.hedge_max_bytes),
          "Only GETs of at most this size are hedged")
          .Also(FIELD(l3_store.hedge_max_bytes)),
      Row(kSize, "s3", "part_size", FIELD(origin.part_size),
          "Reads larger than this are split into parallel ranged GETs"),
      Row(kInt, "s3", "max_parts_in_flight", FIELD(origin.max_parts_in_flight),
          "Parallel ranged GETs per read")
          .Range(1, 256),
  };
}

std::vector<ConfigKey> FuseKeys() {
  return {
      Row(kInt, "fuse", "max_threads", FIELD(fuse.max_threads),
          "FUSE worker threads: bounds the requests served at once")
          .Range(1, 1024),
      Row(kInt, "fuse", "remote_threads", FIELD(fuse.remote_threads),
          "Threads taking the network-bound requests beyond the FUSE workers' share")
          .Range(1, 4096),
      Row(kBool, "fuse", "clone_fd", FIELD(fuse.clone_fd), "One /dev/fuse descriptor per worker"),
      Row(kBool, "fuse", "open_in_kernel", FIELD(fuse.open_in_kernel),
          "Opens handled in the kernel: no open/release request per file"),
      Row(kBool, "fuse", "passthrough", FIELD(fuse.passthrough),
          "FUSE passthrough of one-block files L2 holds (Linux 6.9+, root)"),
      Row(kBool, "fuse", "splice_sized_reads", FIELD(fuse.fit_reads_to_splice_pipe),
          "Ask the kernel for reads a default splice pipe holds (1004KiB)"),
      Row(kSize, "fuse", "store_on_open_max", FIELD(fuse.store_on_open_max),
          "Write a cached small file into the page cache at its first open; 0: off")
          .MaxSize(4 * kMiB),
      Row(kBool, "fuse", "allow_other", FIELD(fuse.allow_other),
          "Let other users use the mount (turns on default_permissions); needs "
          "user_allow_other in /etc/fuse.conf unless root")
          .Flag("--allow-other", &MountFlags::allow_other),
      Row(kBool, "fuse", "allow_root", FIELD(fuse.allow_root),
          "Let root use the mount besides the mounting user (not with allow_other)")
          .Flag("--allow-root", &MountFlags::allow_root),
      Row(kBool, "fuse", "default_permissions", FIELD(default_permissions),
          "Let the kernel enforce the owner and mode bits")
          .Unset("on with allow_other/allow_root"),
      Row(
          kStr, "fuse", "file_mode",
          [](const Value& v, DaemonOptions* o) {
            return SetMode(v, &o->fs.file_mode, &o->fs.file_mode_set);
          },
          [](const DaemonOptions& o) { return ModeText(o.fs.file_mode); },
          "Permission bits of every file, octal")
          .Flag("--file-mode", &MountFlags::file_mode),
      Row(
          kStr, "fuse", "dir_mode",
          [](const Value& v, DaemonOptions* o) {
            return SetMode(v, &o->fs.dir_mode, &o->fs.dir_mode_set);
          },
          [](const DaemonOptions& o) { return ModeText(o.fs.dir_mode); },
          "Permission bits of every directory, octal")
          .Flag("--dir-mode", &MountFlags::dir_mode),
      Row(kInt, "fuse", "uid", FIELD(uid), "Owner of every file and directory")
          .Range(0, kMaxId)
          .Flag("--uid", &MountFlags::uid)
          .Unset("the mounting user"),
      Row(kInt, "fuse", "gid", FIELD(gid), "Group of every file and directory")
          .Range(0, kMaxId)
          .Flag("--gid", &MountFlags::gid)
          .Unset("the mounting user's group"),
      Row(kDur, "fuse", "shutdown_grace", FIELD(fuse.shutdown_grace),
          "On SIGTERM, how long requests waiting on the origin may still take")
          .MaxDuration(std::chrono::hours(1)),
      Row(kStr, "fuse", "control_group", FIELD(control_group),
          "Group (name or gid) whose members may start prefetches (user.tierfs.prefetch, "
          "prefetch_list)")
          .Flag("--control-group", &MountFlags::control_group)
          .Unset("only root and the mounting user"),
      Row(
          kStr, "fuse", "options",
          [](const Value& v, DaemonOptions* o) { return ApplyMountOptions(v.str, o); },
          [](const DaemonOptions& o) {
            std::string list;
            for (const auto& e : o.fuse.extra_options) list += (list.empty() ? "" : ",") + e;
            return Quote(list);
          },
          "Extra mount options, comma-separated, as with -o"),
      Row(kBool, "fuse", "debug", FIELD(fuse.debug), "libfuse debug output of every request"),
  };
}

std::vector<ConfigKey> OtherKeys() {
  return {
      Row(kStr, "log", "level", FIELD(log.level),
          "trace, debug, info, warn, error, critical or off; changeable later with tierfs "
          "log-level")
          .Flag("--log-level", &MountFlags::log_level),
      Row(kStr, "log", "file", FIELD(log.destination), "Log file; SIGHUP reopens it")
          .Flag("--log-file", &MountFlags::log_file)
          .Unset("stderr with -f, syslog otherwise"),
      Row(kStr, "log", "format", FIELD(log.format),
          "text, or json: one object per line with time, level, thread, logger, message")
          .Flag("--log-format", &MountFlags::log_format),
      Row(kSize, "metastore", "map_size", FIELD(meta.map_size),
          "LMDB map size: the upper bound of the metadata store"),
      Row(kBool, "metastore", "sync_every_commit", FIELD(meta.sync_every_commit),
          "fsync every metadata commit"),
      Row(kStr, "metrics", "address", FIELD(metrics_address),
          "HOST:PORT of the Prometheus /metrics endpoint")
          .Flag("--metrics-address", &MountFlags::metrics_address)
          .Unset("no metrics endpoint"),
  };
}

#undef FIELD

std::vector<ConfigKey> BuildTable() {
  std::vector<ConfigKey> all;
  for (auto part : {CacheKeys, CachePrefetchKeys, L3Keys, MemoryKeys, MetadataAndS3Keys,
                    S3TransferKeys, FuseKeys, OtherKeys}) {
    for (ConfigKey& k : part()) all.push_back(std::move(k));
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

namespace {

std::string_view TypeName(Kind k) {
  switch (k) {
    case Kind::kString:
      return "string";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kSize:
      return "size";
    case Kind::kDuration:
      return "duration";
  }
  return "?";
}

std::string RangeText(const ConfigKey& k) {
  std::vector<std::string> parts;
  switch (k.kind) {
    case Kind::kInt:
      parts.push_back(
          fmt::format("{}..{}{}", k.min, k.max, k.zero_disables ? " (0 disables it)" : ""));
      break;
    case Kind::kSize:
      if (k.positive) parts.push_back("> 0");
      if (k.max_size != UINT64_MAX) parts.push_back("at most " + FormatSize(k.max_size));
      break;
    case Kind::kDuration:
      if (k.max_duration != std::chrono::nanoseconds::max()) {
        parts.push_back("at most " + FormatDuration(k.max_duration));
      }
      break;
    case Kind::kString:
      if (k.non_empty) parts.push_back("not empty");
      break;
    case Kind::kBool:
      break;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// A table cell: '|' would end it.
std::string Cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string Code(std::string_view s) { return s.empty() ? std::string() : fmt::format("`{}`", s); }

}  // namespace

}  // namespace config

std::string ConfigReferenceMarkdown() {
  using config::ConfigKey;
  using config::ConfigTable;
  std::string out =
      "<!-- Generated from the key table in daemon/config_table.cc by\n"
      "     `tierfs config reference > docs/config-reference.md`; do not edit by hand. -->\n"
      "# Configuration reference\n\n"
      "Every key of the TOML config file (`tierfs mount --config FILE`; `tierfs config check "
      "FILE` prints the effective value of each). Flags override the file; for s3.endpoint, "
      "s3.region and s3.profile the file overrides the environment.\n\n"
      "Sizes are strings (\"512MiB\", \"20GiB\") or integers (bytes); durations are strings "
      "(\"250ms\", \"30s\", \"10m\", \"7d\", \"forever\") or integers (seconds). The "
      "default is the value a mount uses when the key is not set.\n";
  const DaemonOptions defaults;
  std::string_view table;
  for (const ConfigKey& k : ConfigTable()) {
    if (k.table != table) {
      table = k.table;
      out += fmt::format(
          "\n## [{}]\n\n| key | type | default | range | flag | description |\n"
          "| --- | --- | --- | --- | --- | --- |\n",
          table);
    }
    std::string flags = config::Code(k.flag);
    if (!k.flag_alias.empty()) flags += ", " + config::Code(k.flag_alias);
    out +=
        fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", k.FullName(), config::TypeName(k.kind),
                    config::Cell(config::Code(config::Show(k, defaults))),
                    config::Cell(config::RangeText(k)), flags, config::Cell(k.doc));
  }
  out +=
      "\n## [[policy]]\n\n"
      "Policies per path prefix, one `[[policy]]` table each: `prefix` (required), `pin`, `ttl`, "
      "`policy` (lru or ttl), `admit` (always, reuse or never) and `quota` (a size).\n";
  return out;
}

}  // namespace tierfs
