// `tierfs l3 gc` (daemon/l3_gc_cli.h).

#include "daemon/l3_gc_cli.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "base/clock.h"
#include "base/logging.h"
#include "base/units.h"
#include "daemon/credential_chain.h"
#include "daemon/exit_codes.h"

namespace tierfs {
namespace {

int Usage(const Status& s) {
  std::fprintf(stderr, "tierfs l3 gc: %s\n", s.message().c_str());
  return kExitUsage;
}

// The settings of the gc: the config file's, then the flags; InvalidArgument naming the flag.
Status GcOptions(const std::string& config_path, const MountFlags& flags,
                 const std::optional<std::string>& ttl, const std::optional<std::string>& max_bytes,
                 DaemonOptions* o) {
  if (!config_path.empty()) TIERFS_RETURN_IF_ERROR(ApplyConfigFile(config_path, o));
  if (flags.l3) o->l3 = *flags.l3;
  if (flags.l3_endpoint) o->l3_endpoint = *flags.l3_endpoint;
  if (flags.region) o->region = *flags.region;
  if (ttl) {
    auto d = ParseDuration(*ttl);
    if (!d.ok()) return Status::InvalidArgument("--l3-ttl: " + d.status().message());
    o->l3_tier.ttl = *d;
  }
  if (max_bytes) {
    auto b = ParseSize(*max_bytes);
    if (!b.ok()) return Status::InvalidArgument("--l3-max-bytes: " + b.status().message());
    o->l3_gc.max_bytes = *b == 0 ? UINT64_MAX : *b;  // 0: no bound
  }
  if (o->l3.empty()) return Status::InvalidArgument("--l3 (or cache.l3 in --config) is required");
  return FinishL3Options(o, RealGetEnv);
}

// What the gc found and did; exit 1 when a delete failed.
int PrintGcReport(const RemoteGcReport& rep, bool dry_run) {
  const char* verb = dry_run ? "would delete" : "deleted";
  std::printf("found %llu objects (%s)\n", static_cast<unsigned long long>(rep.objects),
              FormatSize(rep.bytes).c_str());
  std::printf("left alone %llu objects (%s) that are not tierfs blocks\n",
              static_cast<unsigned long long>(rep.foreign), FormatSize(rep.foreign_bytes).c_str());
  std::printf("%s %llu expired blocks (%s)\n", verb, static_cast<unsigned long long>(rep.expired),
              FormatSize(rep.expired_bytes).c_str());
  std::printf("%s %llu oldest blocks (%s) to fit max_bytes\n", verb,
              static_cast<unsigned long long>(rep.trimmed), FormatSize(rep.trimmed_bytes).c_str());
  std::printf("remaining %llu blocks (%s)\n",
              static_cast<unsigned long long>(rep.remaining_objects),
              FormatSize(rep.remaining_bytes).c_str());
  if (rep.delete_errors > 0) {
    std::printf("%llu deletes failed (see the log)\n",
                static_cast<unsigned long long>(rep.delete_errors));
    return kExitRuntime;
  }
  return kExitOk;
}

}  // namespace

int RunL3Gc(const std::string& config_path, const MountFlags& flags,
            const std::optional<std::string>& ttl, const std::optional<std::string>& max_bytes,
            bool dry_run) {
  DaemonOptions o;
  if (Status s = GcOptions(config_path, flags, ttl, max_bytes, &o); !s.ok()) return Usage(s);
  if (o.l3_is_memcached) {
    // Nothing to collect: memcached evicts by LRU within its memory limit (-m) and expires items
    // at cache.l3_ttl (up to 30 days) itself; it also cannot list its keys.
    std::printf(
        "tierfs l3 gc: %s is a memcached pool: no gc is needed (memcached evicts by LRU within "
        "its -m limit and expires items after cache.l3_ttl itself)\n",
        o.l3.c_str());
    return 0;
  }
  if (Status s = ResolveL3Credentials(&o, RealGetEnv); !s.ok()) return Usage(s);
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
    return Usage(s);
  }
  auto store = NewS3BlobStore(o.l3_store, transport->get(), SystemClock());
  if (!store.ok()) return Usage(store.status());
  std::printf("tierfs l3 gc: %s (%s): ttl=%s max_bytes=%s%s\n", o.l3.c_str(),
              (*store)->Describe().c_str(), FormatDuration(o.l3_gc.ttl).c_str(),
              o.l3_gc.max_bytes == UINT64_MAX ? "unlimited" : FormatSize(o.l3_gc.max_bytes).c_str(),
              dry_run ? " (dry run: nothing is deleted)" : "");
  auto rep = GcRemoteTier(o.l3_gc, store->get(), SystemClock());
  if (!rep.ok()) {
    std::fprintf(stderr, "tierfs l3 gc: %s\n", rep.status().ToString().c_str());
    return kExitRuntime;
  }
  return PrintGcReport(*rep, dry_run);
}

}  // namespace tierfs
