// daemon/config — every setting of the daemon in one struct (conventions C9), filled in one
// place: defaults, then the TOML config file, then the command-line flags, then (only for what
// neither set) the environment. Validate() names the bad key or flag.
//
// The config file's keys are the table in config_table.cc, one row per key with its type,
// range, default (read from DaemonOptions), flag and documentation (ConfigKeys() lists them,
// `tierfs config reference` prints them as docs/config-reference.md; sections
// [cache], [metadata], [s3], [fuse], [log], [metastore], [metrics], and [[policy]] tables of
// prefix, pin, ttl, policy, quota). packaging/tierfs.toml documents every key with its default
// (ConfigTest.ShippedConfigDocumentsEveryKey holds it to that), and `tierfs config check` prints
// each key's value and where it came from.
//
// Sizes are strings ("512MiB", "20GiB") or integers (bytes); durations are strings ("30s",
// "10m", "7d", "forever") or integers (seconds). Every key is checked: an unknown key or a value
// of the wrong type is an error naming the key and its file:line.
//
// Secrets never appear in the config file or in logs: S3 credentials come from the AWS credential
// chain (NewCredentialChain in blobclient/blob_store.h: environment, web identity, the shared
// config/credentials files, container, IMDS), built by the daemon at mount time.
//
// Thread-safety: plain functions over values; no shared state.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/logging.h"
#include "base/result.h"
#include "blobclient/blob_store.h"
#include "blobclient/memcached_store.h"
#include "fuse/filesystem.h"
#include "fuse/fuse_server.h"
#include "metastore/meta_store.h"
#include "tiercache/catalog.h"
#include "tiercache/policy.h"
#include "tiercache/prefetch_jobs.h"
#include "tiercache/tier.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {

inline constexpr const char* kDefaultCacheDir = "/var/cache/tierfs";

// The L3 store's S3 settings before the file and flags: a regional store is near, and a slow or
// dead one must cost a reader little (the origin serves it), so timeouts are short and there is
// one retry at most.
inline S3Options DefaultL3StoreOptions() {
  S3Options s;
  s.connect_timeout = std::chrono::milliseconds(1000);
  s.request_timeout = std::chrono::milliseconds(5000);
  s.low_speed_time = std::chrono::milliseconds(2000);
  s.max_attempts = 2;
  s.backoff_base = std::chrono::milliseconds(20);
  s.backoff_max = std::chrono::milliseconds(200);
  s.max_connections = 32;
  return s;
}

struct DaemonOptions {
  // The mount.
  std::string source;      // "s3://BUCKET[/PREFIX]" or "file:///PATH"
  SourceUri source_uri{};  // parsed from `source` by FinishOptions
  std::string mountpoint;
  // -o nonempty: mount over a directory that holds entries (hiding them); refused otherwise.
  bool allow_nonempty = false;
  // List the origin's root once at start-up, failing the mount on an error (a wrong bucket,
  // endpoint or credentials). Off for a daemon taking a live mount over (daemon/restart.h): the
  // mount worked, and an origin that does not answer for a moment must not end it.
  bool probe_origin = true;
  std::string cache_dir = kDefaultCacheDir;  // L2 block files + CACHE_DIR/meta (LMDB)
  bool foreground = false;
  // In the foreground too, serve under a supervisor that resumes the mount if the serving daemon
  // dies (daemon/supervisor.h; a daemonized mount always has one). --supervise.
  bool supervise = false;
  bool l2_fsync = false;  // fsync every L2 block file (a lost block is only a cache miss)
  // cache.l1_prefault: fault L1's memory in at start, on a thread of idle priority, and keep it
  // (Block::Prefault), so that no read pays for the first touch of the memory L1 fills.
  bool l1_prefault = false;
  // memory.limit: what the daemon's memory may come to (RSS); 0: derived from the host's memory
  // (daemon/memory_limit.h). Resolved before the mount, which fits L1, readahead and the prefetch
  // jobs into it and holds their blocks to it (base/memory_budget.h).
  uint64_t memory_limit = 0;
  // The keys ("cache.l1_size") a configuration file or a flag set, as opposed to defaults: a
  // value the user chose is kept or refused, never fitted silently (daemon/memory_limit.h).
  std::set<std::string, std::less<>> explicit_keys;

  // S3 origin: how to find credentials. The credential chain (blob_store.h NewCredentialChain:
  // environment, web identity, the shared files' `profile`, container, IMDS) is built at mount
  // time, after daemonizing, by the daemon.
  bool no_sign_request = false;  // anonymous requests (public buckets)
  std::string profile;           // AWS profile; empty: AWS_PROFILE, else "default"
  // FinishOptions: `profile` came from AWS_PROFILE, not from s3.profile / --profile (an explicit
  // profile skips the environment keys, as `aws --profile` does).
  bool profile_from_env = false;
  // FinishOptions: the origin's region was configured (flag, file, AWS_REGION,
  // AWS_DEFAULT_REGION); if not, the profile's `region` from the AWS config file is used.
  bool origin_region_set = false;
  // Set by the file or a flag; FinishOptions falls back to the environment, then to defaults,
  // and stores the result in `origin`.
  std::optional<std::string> endpoint;
  std::optional<std::string> region;
  // Owner of every inode; unset: the mounting user.
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  // fuse.control_group / --control-group: a group name or numeric gid whose members may set the
  // prefetch controls (FilesystemOptions::control_gid); FinishOptions resolves it.
  std::optional<std::string> control_group;
  // fuse.default_permissions / -o [no]default_permissions; unset: on exactly when allow_other
  // is (FinishOptions sets fuse.default_permissions).
  std::optional<bool> default_permissions;

  // L3, the regional tier (optional): empty `l3` = no L3. FinishOptions/FinishL3Options fill
  // `l3_store` from these. Its credentials are its own: the environment variables named by
  // l3_access_key_id_env/l3_secret_access_key_env, else the AWS profile l3_profile (else the
  // usual AWS_ACCESS_KEY_ID/... and default profile), resolved by ResolveL3Credentials.
  // "s3://BUCKET[/PREFIX]", or "memcached://HOST:PORT,HOST:PORT,..." (a memcached pool: then
  // FinishL3Options fills `l3_memcached` instead of `l3_store`, and the S3 keys of L3 are unused).
  std::string l3;
  std::optional<std::string> l3_endpoint;  // unset: AWS S3 for the region
  std::optional<std::string> l3_region;    // unset: the origin's region
  std::string l3_profile;
  std::string l3_access_key_id_env;
  std::string l3_secret_access_key_env;
  bool l3_no_sign_request = false;
  // cache.l3_key_file: a private file (mode 0600 or stricter) holding the secret key of the L3
  // objects' HMAC; read by LoadL3Key into l3_tier.mac_key. Empty: L3 objects carry no MAC.
  std::string l3_key_file;
  RemoteTierOptions l3_tier;  // ttl, write queue; block_size = cache.block_size
  RemoteGcOptions l3_gc;      // max_bytes (cache.l3_max_bytes); ttl = l3_tier.ttl
  S3Options l3_store = DefaultL3StoreOptions();
  bool l3_is_memcached = false;   // set by FinishL3Options from `l3`
  MemcachedOptions l3_memcached;  // servers from `l3`, expiration = l3_ttl (capped at 30 days)

  // Policies ([[policy]] tables; cache.pin_quota, UINT64_MAX = half of the L2 size) and deep
  // prefetch (cache.prefetch_job_threads).
  PolicyOptions policies;
  PrefetchJobsOptions prefetch_jobs;

  FuseOptions fuse;
  FilesystemOptions fs;
  // file_slices on: L2 hits are spliced from their files (cache.l2_splice).
  TieredCacheOptions cache = [] {
    TieredCacheOptions c;
    c.file_slices = true;
    return c;
  }();
  MemoryTierOptions l1;
  FlashTierOptions l2;
  CatalogOptions catalog;
  S3Options origin;
  FileStoreOptions file_origin;
  HttpTransportOptions http;
  MetaStoreOptions meta;
  LogOptions log;
  // metrics.address / --metrics-address: HOST:PORT of the Prometheus /metrics endpoint
  // (daemon/metrics_server.h). Empty: no endpoint.
  std::string metrics_address;
  // metadata.manifest / --manifest: serve exactly the tree of this dataset manifest
  // (tiercache/manifest.h), a local file (made absolute by FinishOptions) or s3://BUCKET/KEY
  // (read with the origin's endpoint, region and credentials). Empty: live listings.
  std::string manifest;
};

// Flags of `tierfs mount`, as typed (parsed and checked by ApplyFlags, so messages name the flag).
// Those that set a config key are registered from the key table (config_table.cc), whose row
// names the member here.
struct MountFlags {
  std::optional<std::string> endpoint;      // --endpoint
  std::optional<std::string> region;        // --region
  std::optional<std::string> cache_dir;     // --cache-dir
  std::optional<std::string> l1_size;       // --l1-size
  std::optional<std::string> l2_size;       // --l2-size
  std::optional<std::string> metadata_ttl;  // --metadata-ttl
  std::optional<std::string> block_size;    // --block-size
  std::optional<std::string> log_level;     // --log-level
  std::optional<std::string> log_file;      // --log-file
  std::optional<std::string> profile;       // --profile
  bool no_sign_request = false;             // --no-sign-request
  bool foreground = false;                  // -f / --foreground
  bool supervise = false;                   // --supervise
  std::optional<std::string> l3;            // --l3
  std::optional<std::string> l3_endpoint;   // --l3-endpoint
  std::vector<std::string> options;         // -o a,b=c (each -o may hold a comma list)
  // The names users of mountpoint-s3 and the aws CLI type; each maps onto a fuse.* key.
  bool allow_other = false;                    // --allow-other (fuse.allow_other)
  bool allow_root = false;                     // --allow-root (fuse.allow_root)
  std::optional<std::string> uid;              // --uid (fuse.uid)
  std::optional<std::string> gid;              // --gid (fuse.gid)
  std::optional<std::string> control_group;    // --control-group (fuse.control_group)
  std::optional<std::string> file_mode;        // --file-mode (fuse.file_mode)
  std::optional<std::string> dir_mode;         // --dir-mode (fuse.dir_mode)
  std::optional<std::string> log_format;       // --log-format (log.format)
  std::optional<std::string> metrics_address;  // --metrics-address (metrics.address)
  std::optional<std::string> memory_limit;     // --memory-limit (memory.limit)
  std::optional<std::string> manifest;         // --manifest (metadata.manifest)
};

using GetEnvFn = std::function<std::optional<std::string>(const char*)>;

// Applies a TOML document to `out`. `file_name` is used in messages ("tierfs.toml:12: ...").
// InvalidArgument naming the key on an unknown key, a wrong type or a bad value.
// `origins` (optional) gets "table.key" → "FILE:LINE" for every key the text sets.
using ConfigOrigins = std::map<std::string, std::string, std::less<>>;
Status ApplyConfigText(std::string_view toml_text, std::string_view file_name, DaemonOptions* out,
                       ConfigOrigins* origins = nullptr);
// Reads and applies a config file. InvalidArgument if it cannot be read or parsed.
Status ApplyConfigFile(const std::string& path, DaemonOptions* out,
                       ConfigOrigins* origins = nullptr);

// Every key of the config file ("cache.dir", ...), in schema order ([[policy]] not included).
std::vector<std::string> ConfigKeys();

// `tierfs config check FILE`: applies the file over the defaults, checks it as a mount would
// (Validate), and returns one line per key: "table.key = VALUE  # FILE:LINE" or "# default",
// then the [[policy]] tables. InvalidArgument with the usual message naming the key otherwise.
// `getenv` is injectable for tests (the environment fills what the file leaves unset).
Result<std::string> CheckConfigFile(const std::string& path, const GetEnvFn& getenv);
// `tierfs config reference`: a Markdown table of every config key (type, default, range, flag,
// one line of documentation), generated from the key table; committed as
// docs/config-reference.md.
std::string ConfigReferenceMarkdown();
// Whether CheckConfigFile can show the value of `key` (every key of ConfigKeys() should).
bool ConfigKeyHasGetter(std::string_view key);

// Overlays the command-line flags: the -o lists, then every flag of the key table (so a named
// flag wins over -o), each converted and range-checked as its key is in the config file.
// InvalidArgument naming the flag ("--l1-size: ...").
Status ApplyFlags(const MountFlags& flags, DaemonOptions* out);

// Applies one comma-separated -o list: tierfs's own (allow_other, noallow_other,
// default_permissions, nodefault_permissions, uid=N, gid=N, file_mode=OCTAL, dir_mode=OCTAL,
// max_threads=N, debug, nonempty, ro) and libfuse mount options passed
// through (nodev, nosuid, noexec, noatime, nodiratime, auto_unmount, ...). fstab-only words
// (defaults, auto, noauto, user, users, nouser, nofail, _netdev, x-*, comment=*) are ignored.
// "rw" is refused: the file system is read-only.
Status ApplyMountOptions(std::string_view list, DaemonOptions* out);

// Fills what neither the file nor the flags set from the environment (region: AWS_REGION /
// AWS_DEFAULT_REGION, endpoint: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, profile: AWS_PROFILE),
// parses the source, derives dependent settings (fsname, timeouts from metadata_ttl, the meta
// path, readahead bound) and runs Validate(). `getenv` is injectable for tests.
Status FinishOptions(DaemonOptions* out, const GetEnvFn& getenv);
std::optional<std::string> RealGetEnv(const char* name);

// The L3 part of FinishOptions (also used alone by `tierfs l3 gc`): parses `l3` into l3_store,
// resolves its endpoint and region, copies block size and ttl. OK and nothing done when `l3` is
// empty. InvalidArgument naming the key.
Status FinishL3Options(DaemonOptions* out, const GetEnvFn& getenv);

// Fills l3_store.credentials when they are fixed (cache.l3_access_key_id_env /
// l3_secret_access_key_env) or anonymous (cache.l3_no_sign_request); otherwise leaves them empty
// and the daemon builds the credential chain for cache.l3_profile at mount time. OK and nothing
// done without `l3`. InvalidArgument naming the key or the missing environment variable, never a
// secret.
Status ResolveL3Credentials(DaemonOptions* out, const GetEnvFn& getenv);

// How long one block fetch may take at most with these stores' timeouts, attempts and backoff
// (L3, then the origin): the bound of every wait on the network (TieredCacheOptions::
// wait_timeout; FuseOptions::request_timeout adds one request timeout). Set by FinishOptions.
std::chrono::nanoseconds NetworkWaitBound(const DaemonOptions& options);
// The timeouts NetworkWaitBound adds up, checked (by FinishOptions before it adds them, and by
// Validate): InvalidArgument naming the key when one is above 24h or an origin one is not positive.
Status CheckNetworkTimeouts(const DaemonOptions& options);

// cache.l3_key_file: a key needs at least 32 bytes (256 bits, the HMAC-SHA256 strength); a file
// larger than 4 KiB is not a key file.
inline constexpr size_t kMinL3KeyBytes = 32;
inline constexpr int64_t kMaxL3KeyFileBytes = 4096;

// Reads cache.l3_key_file into l3_tier.mac_key (nothing to do without `l3` or a key file). The
// file must be a regular file, not accessible by group or others, of at least kMinL3KeyBytes
// bytes after one trailing newline is dropped. InvalidArgument naming cache.l3_key_file and the
// path otherwise; the key itself never appears in a message.
Status LoadL3Key(DaemonOptions* out);

// Checks every setting; InvalidArgument naming the key.
Status Validate(const DaemonOptions& options);

// A human summary of the effective settings for the start-up log line; never credentials.
std::string DescribeOptions(const DaemonOptions& options);

}  // namespace tierfs
