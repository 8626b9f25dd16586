// Policies per file or directory (user.tierfs.pin / ttl / policy, and [[policy]] tables of the
// config file): whether blocks are pinned in the host tiers, how long cached data is trusted
// before it is refetched (revalidated by ETag), and which eviction order L1/L2 use.
//
// Admission (user.tierfs.admit, [[policy]] admit; tiercache/admission.h) is a policy field too.
//
// A Policy sets some fields at one path; unset fields inherit. PolicyResolver::Resolve(path)
// takes each field from the nearest ancestor (the path itself first, then its parents up to the
// root "") that sets it in the MetaStore ("policy/<path>", metastore/FORMAT.md); fields still
// unset come from the config prefixes (the longest matching prefix first), then the defaults
// (no pin, no TTL, lru).
//
// Pins count against a pin quota: Set(pin=1) on a path adds the bytes below it (the caller
// measures them) to the pinned total and fails with NoSpace beyond the quota.
//
// Per-prefix byte quotas come from the config only ([[policy]] quota): the most specific
// prefix with a quota that covers a key puts its blocks in that prefix's quota group
// (QuotaGroupId), which L1 and L2 hold to the quota (tiercache/internal/eviction_list.h).
//
// Thread-safe; no external synchronization needed. All stored policies are held in memory
// (loaded at Open, updated on Set), so Resolve never touches LMDB.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "metastore/meta_store.h"
#include "tiercache/tier.h"

namespace tierfs {

enum class EvictionOrder : uint8_t { kLru = 0, kTtl = 1 };

struct Policy {
  std::optional<bool> pin;
  std::optional<std::chrono::nanoseconds> ttl;  // kForever: never expires
  std::optional<EvictionOrder> eviction;
  std::optional<AdmitPolicy> admit;  // never kDefault
  uint64_t pinned_bytes = 0;         // stored pins: the bytes counted against the pin quota
  bool empty() const { return !pin && !ttl && !eviction && !admit; }
};

struct EffectivePolicy {
  bool pin = false;
  std::chrono::nanoseconds ttl = std::chrono::nanoseconds::max();
  EvictionOrder eviction = EvictionOrder::kLru;
  // kDefault: no policy sets it (the cache default cache.admit and its scan detection apply).
  AdmitPolicy admit = AdmitPolicy::kDefault;
  std::string_view quota_prefix;  // the config prefix whose quota applies ("" and 0: none)
  uint64_t quota_bytes = 0;
};

// A [[policy]] table of the config file.
struct PrefixPolicy {
  std::string prefix;  // "datasets/imagenet/" (relative to the source, no leading '/')
  Policy policy;
  uint64_t quota_bytes = 0;  // 0: no per-prefix quota
};

struct PolicyOptions {
  std::vector<PrefixPolicy> prefixes;
  uint64_t pin_quota_bytes = UINT64_MAX;  // config cache.pin_quota (default: half of L2)
};

// Value parsers shared by the xattr handlers and the config file. InvalidArgument on a bad value.
Result<bool> ParsePinValue(std::string_view v);                      // "1" / "0"
Result<std::chrono::nanoseconds> ParseTtlValue(std::string_view v);  // "30s", "10m", "forever"
Result<EvictionOrder> ParseEvictionOrder(std::string_view v);        // "lru" / "ttl"
std::string_view EvictionOrderName(EvictionOrder e);

// Stored layout ("1 pin=<-|0|1> ttl=<-|ns> eviction=<-|lru|ttl> pinned_bytes=<n>
// admit=<-|always|reuse|never>"; admit is optional when decoding: records written before it).
std::string EncodePolicy(const Policy& p);
Result<Policy> DecodePolicy(std::string_view v);
std::string PolicyKey(std::string_view path);  // "policy/<path>"
// The quota group of a config prefix: the low 32 bits of XXH3-64 of it, never 0 (stable across
// restarts and config reorderings; stored in L2's block records).
uint32_t QuotaGroupId(std::string_view prefix);

class PolicyResolver {
 public:
  // Loads the stored policies. `meta` is not owned and must outlive the resolver.
  static Result<std::unique_ptr<PolicyResolver>> Open(const PolicyOptions& options,
                                                      MetaStore* meta);

  EffectivePolicy Resolve(std::string_view path) const;
  // The placement hint for inserts of blocks of object `key` (TieredCacheOptions::placement).
  Placement PlacementFor(std::string_view key) const;
  // The fields set exactly at `path` (stored; not the config prefixes).
  Policy GetExact(std::string_view path) const;

  // Merges the set fields of `update` into the policy stored at `path` and persists it.
  // For pin=1, `tree_bytes` is the size of everything below `path`: NoSpace (nothing changed)
  // if the pinned total would exceed the quota. pin=0 releases the bytes counted at `path`.
  Status Set(std::string_view path, const Policy& update, uint64_t tree_bytes = 0);

  uint64_t pinned_bytes() const;
  uint64_t pin_quota_bytes() const { return options_.pin_quota_bytes; }

 private:
  PolicyResolver(const PolicyOptions& options, MetaStore* meta);

  // Constant after construction.
  const PolicyOptions options_;
  MetaStore* const meta_;

  Mutex set_mu_;  // serialises Set (read-modify-persist); before mu_
  mutable Mutex mu_;
  std::map<std::string, Policy, std::less<>> stored_ GUARDED_BY(mu_);
  uint64_t pinned_total_ GUARDED_BY(mu_) = 0;
  std::atomic<bool> any_{false};  // a stored or configured policy exists (Resolve fast path)
};

}  // namespace tierfs
