// `tierfs config check FILE` (CheckConfigFile in daemon/config.h): the effective value of every
// config key and where it came from.

#include <fmt/format.h>

#include <functional>
#include <map>

#include "base/strings.h"
#include "base/units.h"
#include "daemon/config.h"

namespace tierfs {
namespace {

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : EscapeForLog(s, 4096)) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}
std::string Size(uint64_t v) { return v == UINT64_MAX ? Quote("unlimited") : Quote(FormatSize(v)); }
std::string Dur(std::chrono::nanoseconds d) { return Quote(FormatDuration(d)); }
std::string Bool(bool b) { return b ? "true" : "false"; }
std::string Mode(uint32_t m) { return Quote(fmt::format("{:04o}", m)); }
template <typename T>
std::string Opt(const std::optional<T>& v, std::string_view unset) {
  if (!v) return fmt::format("(unset: {})", unset);
  if constexpr (std::is_same_v<T, std::string>) {
    return Quote(*v);
  } else {
    return fmt::to_string(*v);
  }
}

using Getter = std::function<std::string(const DaemonOptions&)>;

// How each key of the schema reads back out of DaemonOptions (the inverse of its setter).
const std::map<std::string, Getter, std::less<>>& Getters() {
  static const std::map<std::string, Getter, std::less<>> kGetters = {
      {"cache.dir", [](const DaemonOptions& o) { return Quote(o.cache_dir); }},
      {"cache.block_size", [](const DaemonOptions& o) { return Size(o.cache.block_size); }},
      {"cache.l1_size", [](const DaemonOptions& o) { return Size(o.l1.capacity_bytes); }},
      {"cache.l1_shards", [](const DaemonOptions& o) { return fmt::to_string(o.l1.shards); }},
      {"cache.l1_prefault", [](const DaemonOptions& o) { return Bool(o.l1_prefault); }},
      {"cache.l2_size", [](const DaemonOptions& o) { return Size(o.l2.capacity_bytes); }},
      {"cache.l2_min_free", [](const DaemonOptions& o) { return Size(o.l2.min_free_bytes); }},
      {"cache.l2_fsync", [](const DaemonOptions& o) { return Bool(o.l2_fsync); }},
      {"cache.l2_splice", [](const DaemonOptions& o) { return Bool(o.cache.file_slices); }},
      {"cache.l2_promote_hits",
       [](const DaemonOptions& o) { return fmt::to_string(o.cache.promote_hits); }},
      {"cache.whole_object_max",
       [](const DaemonOptions& o) { return Size(o.cache.small_object_bytes); }},
      {"cache.sparse_read_max",
       [](const DaemonOptions& o) { return Size(o.cache.sparse_read_max); }},
      {"cache.admit",
       [](const DaemonOptions& o) {
         return Quote(AdmitPolicyName(o.cache.admission.default_policy == AdmitPolicy::kDefault
                                          ? AdmitPolicy::kAlways
                                          : o.cache.admission.default_policy));
       }},
      {"cache.admit_ghost_bytes",
       [](const DaemonOptions& o) {
         return o.cache.admission.ghost_bytes == 0 ? Quote("twice the blocks of cache.l2_size")
                                                   : Size(o.cache.admission.ghost_bytes);
       }},
      {"cache.admit_scan_percent",
       [](const DaemonOptions& o) { return fmt::to_string(o.cache.admission.scan_percent); }},
      {"cache.pin_quota",
       [](const DaemonOptions& o) {
         return o.policies.pin_quota_bytes == UINT64_MAX ? Quote("half of cache.l2_size")
                                                         : Size(o.policies.pin_quota_bytes);
       }},
      {"cache.prefetch_job_threads",
       [](const DaemonOptions& o) { return fmt::to_string(o.prefetch_jobs.threads); }},
      {"cache.fetch_threads",
       [](const DaemonOptions& o) { return fmt::to_string(o.cache.fetch_threads); }},
      {"cache.prefetch_threads",
       [](const DaemonOptions& o) { return fmt::to_string(o.cache.prefetch_threads); }},
      {"cache.readahead_max",
       [](const DaemonOptions& o) { return Size(o.cache.readahead_max_bytes); }},
      {"cache.prefetch_next_files",
       [](const DaemonOptions& o) { return fmt::to_string(o.fs.prefetch.next_files); }},
      {"cache.random_hydrate_misses",
       [](const DaemonOptions& o) { return fmt::to_string(o.fs.prefetch.random_hydrate_misses); }},
      {"cache.prefetch_job_memory",
       [](const DaemonOptions& o) { return Size(o.prefetch_jobs.memory_budget); }},
      {"cache.readahead_budget",
       [](const DaemonOptions& o) { return Size(o.cache.readahead_budget_bytes); }},
      {"cache.readahead_run",
       [](const DaemonOptions& o) { return Size(o.cache.readahead_run_bytes); }},
      {"cache.l3", [](const DaemonOptions& o) { return Quote(o.l3); }},
      {"cache.l3_endpoint",
       [](const DaemonOptions& o) { return Opt(o.l3_endpoint, "AWS S3 for the region"); }},
      {"cache.l3_region",
       [](const DaemonOptions& o) { return Opt(o.l3_region, "the origin's region"); }},
      {"cache.l3_profile", [](const DaemonOptions& o) { return Quote(o.l3_profile); }},
      {"cache.l3_access_key_id_env",
       [](const DaemonOptions& o) { return Quote(o.l3_access_key_id_env); }},
      {"cache.l3_secret_access_key_env",
       [](const DaemonOptions& o) { return Quote(o.l3_secret_access_key_env); }},
      {"cache.l3_no_sign_request",
       [](const DaemonOptions& o) { return Bool(o.l3_no_sign_request); }},
      {"cache.l3_ttl", [](const DaemonOptions& o) { return Dur(o.l3_tier.ttl); }},
      {"cache.l3_max_bytes", [](const DaemonOptions& o) { return Size(o.l3_gc.max_bytes); }},
      {"cache.l3_write_queue",
       [](const DaemonOptions& o) { return fmt::to_string(o.l3_tier.write_queue); }},
      {"cache.l3_write_threads",
       [](const DaemonOptions& o) { return fmt::to_string(o.l3_tier.write_threads); }},
      {"cache.l3_request_timeout",
       [](const DaemonOptions& o) { return Dur(o.l3_store.request_timeout); }},
      {"cache.l3_max_attempts",
       [](const DaemonOptions& o) { return fmt::to_string(o.l3_store.max_attempts); }},
      {"cache.l3_key_file", [](const DaemonOptions& o) { return Quote(o.l3_key_file); }},
      {"metadata.ttl", [](const DaemonOptions& o) { return Dur(o.catalog.metadata_ttl); }},
      {"metadata.manifest",
       [](const DaemonOptions& o) {
         return o.manifest.empty() ? std::string("(unset: live listings)") : Quote(o.manifest);
       }},
      {"s3.endpoint",
       [](const DaemonOptions& o) {
         return Opt(o.endpoint, "AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS S3");
       }},
      {"s3.region",
       [](const DaemonOptions& o) {
         return Opt(o.region, "AWS_REGION, AWS_DEFAULT_REGION, else us-east-1");
       }},
      {"s3.addressing",
       [](const DaemonOptions& o) {
         switch (o.origin.addressing) {
           case S3Options::Addressing::kPath:
             return Quote("path");
           case S3Options::Addressing::kVirtualHost:
             return Quote("virtual");
           default:
             return Quote("auto");
         }
       }},
      {"s3.profile",
       [](const DaemonOptions& o) {
         return o.profile.empty() ? std::string("(unset: AWS_PROFILE, else default)")
                                  : Quote(o.profile);
       }},
      {"s3.no_sign_request", [](const DaemonOptions& o) { return Bool(o.no_sign_request); }},
      {"s3.ca_bundle", [](const DaemonOptions& o) { return Quote(o.origin.ca_bundle); }},
      {"s3.connect_timeout", [](const DaemonOptions& o) { return Dur(o.origin.connect_timeout); }},
      {"s3.request_timeout", [](const DaemonOptions& o) { return Dur(o.origin.request_timeout); }},
      {"s3.low_speed_time", [](const DaemonOptions& o) { return Dur(o.origin.low_speed_time); }},
      {"s3.max_attempts",
       [](const DaemonOptions& o) { return fmt::to_string(o.origin.max_attempts); }},
      {"s3.backoff_base", [](const DaemonOptions& o) { return Dur(o.origin.backoff_base); }},
      {"s3.backoff_max", [](const DaemonOptions& o) { return Dur(o.origin.backoff_max); }},
      {"s3.max_connections",
       [](const DaemonOptions& o) { return fmt::to_string(o.origin.max_connections); }},
      {"s3.initial_concurrency",
       [](const DaemonOptions& o) { return fmt::to_string(o.origin.initial_concurrency); }},
      {"s3.hedge", [](const DaemonOptions& o) { return Bool(o.origin.hedge); }},
      {"s3.hedge_min_delay", [](const DaemonOptions& o) { return Dur(o.origin.hedge_min_delay); }},
      {"s3.hedge_max_size", [](const DaemonOptions& o) { return Size(o.origin.hedge_max_bytes); }},
      {"s3.hedge_percent",
       [](const DaemonOptions& o) { return fmt::to_string(o.origin.hedge_percent); }},
      {"s3.part_size", [](const DaemonOptions& o) { return Size(o.origin.part_size); }},
      {"s3.max_parts_in_flight",
       [](const DaemonOptions& o) { return fmt::to_string(o.origin.max_parts_in_flight); }},
      {"fuse.max_threads",
       [](const DaemonOptions& o) { return fmt::to_string(o.fuse.max_threads); }},
      {"fuse.remote_threads",
       [](const DaemonOptions& o) { return fmt::to_string(o.fuse.remote_threads); }},
      {"fuse.clone_fd", [](const DaemonOptions& o) { return Bool(o.fuse.clone_fd); }},
      {"fuse.open_in_kernel", [](const DaemonOptions& o) { return Bool(o.fuse.open_in_kernel); }},
      {"fuse.passthrough", [](const DaemonOptions& o) { return Bool(o.fuse.passthrough); }},
      {"fuse.splice_sized_reads",
       [](const DaemonOptions& o) { return Bool(o.fuse.fit_reads_to_splice_pipe); }},
      {"fuse.store_on_open_max",
       [](const DaemonOptions& o) { return Size(o.fuse.store_on_open_max); }},
      {"fuse.allow_other", [](const DaemonOptions& o) { return Bool(o.fuse.allow_other); }},
      {"fuse.allow_root", [](const DaemonOptions& o) { return Bool(o.fuse.allow_root); }},
      {"fuse.default_permissions",
       [](const DaemonOptions& o) {
         return o.default_permissions ? Bool(*o.default_permissions)
                                      : std::string("(unset: on with allow_other/allow_root)");
       }},
      {"fuse.file_mode", [](const DaemonOptions& o) { return Mode(o.fs.file_mode); }},
      {"fuse.dir_mode", [](const DaemonOptions& o) { return Mode(o.fs.dir_mode); }},
      {"fuse.uid", [](const DaemonOptions& o) { return Opt(o.uid, "the mounting user"); }},
      {"fuse.gid", [](const DaemonOptions& o) { return Opt(o.gid, "the mounting user's group"); }},
      {"fuse.shutdown_grace", [](const DaemonOptions& o) { return Dur(o.fuse.shutdown_grace); }},
      {"fuse.control_group",
       [](const DaemonOptions& o) {
         return o.control_group ? Quote(*o.control_group)
                                : std::string("(unset: only root and the mounting user)");
       }},
      {"fuse.options",
       [](const DaemonOptions& o) {
         std::string list;
         for (const auto& e : o.fuse.extra_options) list += (list.empty() ? "" : ",") + e;
         return Quote(list);
       }},
      {"fuse.debug", [](const DaemonOptions& o) { return Bool(o.fuse.debug); }},
      {"log.level", [](const DaemonOptions& o) { return Quote(o.log.level); }},
      {"log.file",
       [](const DaemonOptions& o) {
         return o.log.destination.empty() ? std::string("(unset: stderr with -f, syslog otherwise)")
                                          : Quote(o.log.destination);
       }},
      {"log.format", [](const DaemonOptions& o) { return Quote(o.log.format); }},
      {"metastore.map_size", [](const DaemonOptions& o) { return Size(o.meta.map_size); }},
      {"metastore.sync_every_commit",
       [](const DaemonOptions& o) { return Bool(o.meta.sync_every_commit); }},
      {"metrics.address",
       [](const DaemonOptions& o) {
         return o.metrics_address.empty() ? std::string("(unset: no metrics endpoint)")
                                          : Quote(o.metrics_address);
       }},
  };
  return kGetters;
}

}  // namespace

bool ConfigKeyHasGetter(std::string_view key) { return Getters().count(key) > 0; }

Result<std::string> CheckConfigFile(const std::string& path, const GetEnvFn& getenv) {
  DaemonOptions o;
  ConfigOrigins origins;
  TIERFS_RETURN_IF_ERROR(ApplyConfigFile(path, &o, &origins));
  // Checked as a mount would check it (the cross-key rules of Validate); SOURCE and MOUNTPOINT
  // are not config keys, so placeholders stand in for them.
  {
    DaemonOptions check = o;
    check.source = "file:///";
    check.mountpoint = "/";
    TIERFS_RETURN_IF_ERROR(FinishOptions(&check, getenv));
    TIERFS_RETURN_IF_ERROR(FinishL3Options(&check, getenv));
  }
  // What the environment fills in for a mount when the file leaves these unset.
  static const std::map<std::string, std::vector<const char*>, std::less<>> kEnv = {
      {"s3.endpoint", {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}},
      {"s3.region", {"AWS_REGION", "AWS_DEFAULT_REGION"}},
      {"s3.profile", {"AWS_PROFILE"}}};
  std::string out = fmt::format("# tierfs: effective configuration of {}\n", path);
  size_t width = 0;
  for (const auto& k : ConfigKeys()) width = std::max(width, k.size());
  for (const auto& key : ConfigKeys()) {
    auto g = Getters().find(key);
    std::string value = g == Getters().end() ? std::string("(not shown)") : g->second(o);
    std::string from = "default";
    if (auto it = origins.find(key); it != origins.end()) {
      from = it->second;
    } else if (auto env = kEnv.find(key); env != kEnv.end()) {
      for (const char* name : env->second) {
        if (auto v = getenv(name)) {
          value = Quote(*v);
          from = fmt::format("environment {}", name);
          break;
        }
      }
    }
    out += fmt::format("{:<{}} = {}  # {}\n", key, width, value, from);
  }
  if (o.policies.prefixes.empty()) {
    out += "# no [[policy]] tables\n";
  }
  for (const auto& p : o.policies.prefixes) {
    out += fmt::format("[[policy]] prefix = {}", Quote(p.prefix));
    if (p.policy.pin) out += fmt::format(", pin = {}", Bool(*p.policy.pin));
    if (p.policy.ttl) out += fmt::format(", ttl = {}", Dur(*p.policy.ttl));
    if (p.policy.eviction) {
      const auto name = EvictionOrderName(*p.policy.eviction);
      out += fmt::format(", policy = {}", Quote(name));
    }
    if (p.quota_bytes) out += fmt::format(", quota = {}", Size(p.quota_bytes));
    out += fmt::format("  # {}\n", origins.count("policy") ? origins["policy"] : path);
  }
  return out;
}

}  // namespace tierfs
