#include "tiercache/policy.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <charconv>

#include "base/logging.h"
#include "base/strings.h"
#include "base/units.h"
#include "tiercache/admission.h"

namespace tierfs {
namespace {

constexpr std::string_view kPolicyPrefix = "policy/";

bool ParseI64(std::string_view s, int64_t* out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// Does config prefix `prefix` cover `path`? "a/b/" covers "a/b" and everything below it; a
// prefix without a trailing '/' is a plain string prefix ("logs/2024" covers "logs/2024-01").
bool Covers(std::string_view prefix, std::string_view path) {
  if (prefix.empty()) return true;
  if (path.starts_with(prefix)) return true;
  return prefix.back() == '/' && prefix.substr(0, prefix.size() - 1) == path;
}

void Fill(const Policy& p, EffectivePolicy* out, bool* pin, bool* ttl, bool* ev, bool* admit) {
  if (!*admit && p.admit) {
    out->admit = *p.admit;
    *admit = true;
  }
  if (!*pin && p.pin) {
    out->pin = *p.pin;
    *pin = true;
  }
  if (!*ttl && p.ttl) {
    out->ttl = *p.ttl;
    *ttl = true;
  }
  if (!*ev && p.eviction) {
    out->eviction = *p.eviction;
    *ev = true;
  }
}

}  // namespace

Result<bool> ParsePinValue(std::string_view v) {
  if (v == "1") return true;
  if (v == "0") return false;
  return Status::InvalidArgument(fmt::format("bad pin value '{}' (1 or 0)", v));
}

Result<std::chrono::nanoseconds> ParseTtlValue(std::string_view v) {
  if (v.empty()) return Status::InvalidArgument("empty ttl (e.g. 30s, 10m, 7d, forever)");
  auto d = ParseDuration(v);
  if (!d.ok()) {
    return Status::InvalidArgument(
        fmt::format("bad ttl '{}' (e.g. 30s, 10m, 7d, forever): {}", v, d.status().message()));
  }
  if (d->count() <= 0) return Status::InvalidArgument(fmt::format("ttl '{}' must be > 0", v));
  return *d;
}

Result<EvictionOrder> ParseEvictionOrder(std::string_view v) {
  if (v == "lru") return EvictionOrder::kLru;
  if (v == "ttl") return EvictionOrder::kTtl;
  return Status::InvalidArgument(fmt::format("bad policy '{}' (lru or ttl)", v));
}

std::string_view EvictionOrderName(EvictionOrder e) {
  return e == EvictionOrder::kTtl ? "ttl" : "lru";
}

uint32_t QuotaGroupId(std::string_view prefix) {
  const auto id = static_cast<uint32_t>(XXH3_64bits(prefix.data(), prefix.size()));
  return id == 0 || id == Placement::kProbationGroup ? 1 : id;
}

std::string PolicyKey(std::string_view path) {
  return std::string(kPolicyPrefix) + std::string(path);
}

std::string EncodePolicy(const Policy& p) {
  return fmt::format("1 pin={} ttl={} eviction={} pinned_bytes={} admit={}",
                     p.pin ? (*p.pin ? "1" : "0") : "-",
                     p.ttl ? std::to_string(p.ttl->count()) : std::string("-"),
                     p.eviction ? EvictionOrderName(*p.eviction) : std::string_view("-"),
                     p.pinned_bytes, p.admit ? AdmitPolicyName(*p.admit) : std::string_view("-"));
}

Result<Policy> DecodePolicy(std::string_view v) {
  Policy p;
  if (!v.starts_with("1 ")) return Status::Corruption("policy: unknown layout version");
  v.remove_prefix(2);
  bool seen_pin = false, seen_ttl = false, seen_ev = false;
  while (!v.empty()) {
    size_t sp = v.find(' ');
    std::string_view tok = v.substr(0, sp);
    v = sp == std::string_view::npos ? std::string_view() : v.substr(sp + 1);
    size_t eq = tok.find('=');
    if (eq == std::string_view::npos) return Status::Corruption("policy: bad field");
    std::string_view k = tok.substr(0, eq), val = tok.substr(eq + 1);
    if (k == "pin") {
      seen_pin = true;
      if (val == "-") continue;
      auto b = ParsePinValue(val);
      if (!b.ok()) return Status::Corruption("policy: bad pin");
      p.pin = *b;
    } else if (k == "ttl") {
      seen_ttl = true;
      if (val == "-") continue;
      int64_t ns;
      if (!ParseI64(val, &ns) || ns <= 0) return Status::Corruption("policy: bad ttl");
      p.ttl = std::chrono::nanoseconds(ns);
    } else if (k == "eviction") {
      seen_ev = true;
      if (val == "-") continue;
      auto e = ParseEvictionOrder(val);
      if (!e.ok()) return Status::Corruption("policy: bad eviction");
      p.eviction = *e;
    } else if (k == "admit") {
      if (val == "-") continue;
      auto a = ParseAdmitPolicy(val);
      if (!a.ok()) return Status::Corruption("policy: bad admit");
      p.admit = *a;
    } else if (k == "pinned_bytes") {
      int64_t n;
      if (!ParseI64(val, &n) || n < 0) return Status::Corruption("policy: bad pinned_bytes");
      p.pinned_bytes = static_cast<uint64_t>(n);
    }  // unknown fields: a later layout appended them; ignored
  }
  if (!seen_pin || !seen_ttl || !seen_ev) return Status::Corruption("policy: missing field");
  return p;
}

PolicyResolver::PolicyResolver(const PolicyOptions& options, MetaStore* meta)
    : options_([&] {
        PolicyOptions o = options;
        // Longest prefix first: the most specific config table wins.
        std::stable_sort(o.prefixes.begin(), o.prefixes.end(),
                         [](const PrefixPolicy& a, const PrefixPolicy& b) {
                           return a.prefix.size() > b.prefix.size();
                         });
        return o;
      }()),
      meta_(meta) {}

Result<std::unique_ptr<PolicyResolver>> PolicyResolver::Open(const PolicyOptions& options,
                                                             MetaStore* meta) {
  if (meta == nullptr) return Status::InvalidArgument("policy resolver: metastore is required");
  std::unique_ptr<PolicyResolver> r(new PolicyResolver(options, meta));
  std::vector<std::pair<std::string, std::string>> stored;
  TIERFS_RETURN_IF_ERROR(
      meta->ScanValues(kPolicyPrefix, [&](std::string_view k, std::string_view v) {
        stored.emplace_back(std::string(k.substr(kPolicyPrefix.size())), std::string(v));
        return true;
      }));
  {
    MutexLock l(&r->mu_);
    for (auto& [path, value] : stored) {
      auto p = DecodePolicy(value);
      if (!p.ok()) {
        Logger(Module::kTierCache)
            .warn("policy of '{}': unreadable record ({}); ignored", path, p.status().ToString());
        continue;
      }
      if (p->pin.value_or(false)) r->pinned_total_ += p->pinned_bytes;
      r->stored_[path] = *p;
    }
    r->any_ = !r->stored_.empty() || !r->options_.prefixes.empty();
  }
  return r;
}

EffectivePolicy PolicyResolver::Resolve(std::string_view path) const {
  EffectivePolicy out;
  if (!any_.load(std::memory_order_acquire)) return out;
  bool pin = false, ttl = false, ev = false, admit = false;
  {
    MutexLock l(&mu_);
    if (!stored_.empty()) {
      std::string_view p = path;
      while (true) {
        if (auto it = stored_.find(p); it != stored_.end()) {
          Fill(it->second, &out, &pin, &ttl, &ev, &admit);
        }
        if (p.empty() || (pin && ttl && ev && admit)) break;
        p = SplitPath(p).first;
      }
    }
  }
  bool quota = false;
  for (const auto& pp : options_.prefixes) {  // longest first
    if (pin && ttl && ev && admit && quota) break;
    if (!Covers(pp.prefix, path)) continue;
    Fill(pp.policy, &out, &pin, &ttl, &ev, &admit);
    if (!quota && pp.quota_bytes > 0) {
      out.quota_prefix = pp.prefix;
      out.quota_bytes = pp.quota_bytes;
      quota = true;
    }
  }
  return out;
}

Placement PolicyResolver::PlacementFor(std::string_view key) const {
  Placement h;
  if (!any_.load(std::memory_order_acquire)) return h;
  EffectivePolicy e = Resolve(key);
  h.pinned = e.pin;
  h.ttl = e.ttl;
  h.ttl_order = e.eviction == EvictionOrder::kTtl;
  h.admit = e.admit;
  if (e.quota_bytes > 0) {
    h.quota_group = QuotaGroupId(e.quota_prefix);
    h.quota_bytes = e.quota_bytes;
  }
  return h;
}

Policy PolicyResolver::GetExact(std::string_view path) const {
  MutexLock l(&mu_);
  auto it = stored_.find(path);
  return it == stored_.end() ? Policy{} : it->second;
}

uint64_t PolicyResolver::pinned_bytes() const {
  MutexLock l(&mu_);
  return pinned_total_;
}

Status PolicyResolver::Set(std::string_view path, const Policy& update, uint64_t tree_bytes) {
  MutexLock serial(&set_mu_);
  Policy next;
  uint64_t total_after;
  {
    MutexLock l(&mu_);
    auto it = stored_.find(path);
    next = it == stored_.end() ? Policy{} : it->second;
    total_after = pinned_total_;
    const bool was_pinned = next.pin.value_or(false);
    if (was_pinned) total_after -= std::min(total_after, next.pinned_bytes);
    if (update.pin) {
      next.pin = update.pin;
      next.pinned_bytes = *update.pin ? tree_bytes : 0;
      if (*update.pin) {
        if (total_after + tree_bytes > options_.pin_quota_bytes) {
          return Status::NoSpace(fmt::format(
              "pinning '{}' ({} bytes) exceeds the pin quota: {} of {} bytes already pinned", path,
              tree_bytes, total_after, options_.pin_quota_bytes));
        }
        total_after += tree_bytes;
      }
    } else if (was_pinned) {
      total_after += next.pinned_bytes;  // unchanged pin
    }
    if (update.ttl) next.ttl = update.ttl;
    if (update.eviction) next.eviction = update.eviction;
    if (update.admit) next.admit = update.admit;
  }
  // Persist first: the in-memory state follows only what is durable.
  TIERFS_RETURN_IF_ERROR(meta_->PutValue(PolicyKey(path), EncodePolicy(next)));
  MutexLock l(&mu_);
  stored_[std::string(path)] = next;
  pinned_total_ = total_after;
  any_.store(true, std::memory_order_release);
  return Status::OK();
}

}  // namespace tierfs
