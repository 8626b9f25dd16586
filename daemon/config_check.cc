// `tierfs config check FILE` (CheckConfigFile in daemon/config.h): the effective value of every
// config key and where it came from.

#include <fmt/format.h>

#include <algorithm>

#include "base/strings.h"
#include "base/units.h"
#include "daemon/config.h"
#include "daemon/internal/config_table.h"

namespace tierfs {
namespace {

using config::Quote;

std::string Size(uint64_t v) { return v == UINT64_MAX ? Quote("unlimited") : Quote(FormatSize(v)); }
std::string Dur(std::chrono::nanoseconds d) { return Quote(FormatDuration(d)); }
std::string Bool(bool b) { return b ? "true" : "false"; }

}  // namespace

bool ConfigKeyHasGetter(std::string_view key) {
  const size_t dot = key.find('.');
  if (dot == std::string_view::npos) return false;
  const config::ConfigKey* k = config::FindConfigKey(key.substr(0, dot), key.substr(dot + 1));
  return k != nullptr && k->get != nullptr;
}

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
  std::string out = fmt::format("# tierfs: effective configuration of {}\n", path);
  size_t width = 0;
  for (const auto& k : ConfigKeys()) width = std::max(width, k.size());
  for (const config::ConfigKey& k : config::ConfigTable()) {
    const std::string key = k.FullName();
    std::string value = config::Show(k, o);
    std::string from = "default";
    if (auto it = origins.find(key); it != origins.end()) {
      from = it->second;
    } else {
      for (const char* name : k.env) {
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
