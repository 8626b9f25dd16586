#include "daemon/config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "base/strings.h"
#include "base/units.h"
#include "daemon/internal/config_table.h"
#include "daemon/metrics_server.h"

namespace tierfs {
namespace {

// The keys themselves are the table of daemon/config_table.cc.
using config::ConfigKey;
using config::ConfigTable;
using config::Kind;
using config::ParseMode;
using config::ParseUint;
using config::Value;

std::string_view KindName(Kind k) {
  switch (k) {
    case Kind::kString:
      return "a string";
    case Kind::kBool:
      return "a boolean (true or false)";
    case Kind::kInt:
      return "an integer";
    case Kind::kSize:
      return "a size (a string like \"512MiB\" or an integer number of bytes)";
    case Kind::kDuration:
      return "a duration (a string like \"30s\", \"10m\", \"7d\", \"forever\" or an integer "
             "number of seconds)";
  }
  return "?";
}

std::string_view TomlTypeName(toml::node_type t) {
  switch (t) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "a value";
  }
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// " (did you mean 'cache.l1_size'?)" for a near miss, else "".
std::string Suggest(std::string_view full_key) {
  std::string best;
  size_t best_d = 3;
  for (const ConfigKey& k : ConfigTable()) {
    std::string cand = k.FullName();
    size_t d = EditDistance(full_key, cand);
    if (d < best_d) {
      best_d = d;
      best = cand;
    }
  }
  return best.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", best);
}

std::string Where(std::string_view file, const toml::source_region& src) {
  return fmt::format("{}:{}", file, src.begin.line);
}

Status ConvertValue(const toml::node& n, Kind kind, Value* v, std::string* why) {
  switch (kind) {
    case Kind::kString:
      if (!n.is_string()) return Status::InvalidArgument("type");
      v->str = *n.value<std::string>();
      return Status::OK();
    case Kind::kBool:
      if (!n.is_boolean()) return Status::InvalidArgument("type");
      v->b = *n.value<bool>();
      return Status::OK();
    case Kind::kInt:
      if (!n.is_integer()) return Status::InvalidArgument("type");
      v->i = *n.value<int64_t>();
      return Status::OK();
    case Kind::kSize:
      if (n.is_integer()) {
        int64_t i = *n.value<int64_t>();
        if (i < 0) {
          *why = fmt::format("{} is negative", i);
          return Status::InvalidArgument("value");
        }
        v->size = static_cast<uint64_t>(i);
        return Status::OK();
      }
      if (n.is_string()) {
        auto r = ParseSize(*n.value<std::string>());
        if (!r.ok()) {
          *why = r.status().message();
          return Status::InvalidArgument("value");
        }
        v->size = *r;
        return Status::OK();
      }
      return Status::InvalidArgument("type");
    case Kind::kDuration:
      if (n.is_integer()) {
        int64_t i = *n.value<int64_t>();
        if (i < 0) {
          *why = fmt::format("{} is negative", i);
          return Status::InvalidArgument("value");
        }
        // Seconds as nanoseconds must stay below kForever (INT64_MAX ns, ~292 years).
        if (i >= std::chrono::duration_cast<std::chrono::seconds>(kForever).count()) {
          *why = fmt::format("{} seconds is too long (or \"forever\")", i);
          return Status::InvalidArgument("value");
        }
        v->duration = std::chrono::seconds(i);
        return Status::OK();
      }
      if (n.is_string()) {
        auto r = ParseDuration(*n.value<std::string>());
        if (!r.ok()) {
          *why = r.status().message();
          return Status::InvalidArgument("value");
        }
        v->duration = *r;
        return Status::OK();
      }
      return Status::InvalidArgument("type");
  }
  return Status::Internal("unknown kind");
}

// One key `k` of a [[policy]] table into `pp`. InvalidArgument with the reason; NotFound for a
// key a [[policy]] table does not take.
Status ApplyPolicyKey(std::string_view k, const toml::node& v, PrefixPolicy* pp) {
  auto bad = [](std::string_view why) { return Status::InvalidArgument(why); };
  if (k == "prefix") {
    if (!v.is_string()) return bad("must be a string");
    pp->prefix = *v.value<std::string>();
    while (!pp->prefix.empty() && pp->prefix.front() == '/') pp->prefix.erase(0, 1);
  } else if (k == "pin") {
    if (!v.is_boolean()) return bad("must be a boolean (true or false)");
    pp->policy.pin = *v.value<bool>();
  } else if (k == "ttl") {
    Value val;
    std::string why;
    if (!ConvertValue(v, Kind::kDuration, &val, &why).ok()) {
      return bad(why.empty() ? "must be a duration (\"30s\", \"10m\", \"forever\")" : why);
    }
    if (val.duration.count() <= 0) return bad("must be > 0");
    pp->policy.ttl = val.duration;
  } else if (k == "policy") {
    if (!v.is_string()) return bad("must be a string (lru or ttl)");
    auto e = ParseEvictionOrder(*v.value<std::string>());
    if (!e.ok()) return bad(e.status().message());
    pp->policy.eviction = *e;
  } else if (k == "admit") {
    if (!v.is_string()) return bad("must be a string (always, reuse or never)");
    auto a = ParseAdmitPolicy(*v.value<std::string>());
    if (!a.ok()) return bad(a.status().message());
    pp->policy.admit = *a;
  } else if (k == "quota") {
    Value val;
    std::string why;
    if (!ConvertValue(v, Kind::kSize, &val, &why).ok()) {
      return bad(why.empty() ? "must be a size (\"50GiB\")" : why);
    }
    if (val.size == 0) return bad("must be > 0 (leave it out for no quota)");
    pp->quota_bytes = val.size;
  } else {
    return Status::NotFound(k);
  }
  return Status::OK();
}

// [[policy]] tables: prefix (required), pin, ttl, policy, admit, quota. Every key is checked.
Status ApplyPolicyTables(const toml::node& node, std::string_view file_name, DaemonOptions* out) {
  if (!node.is_array_of_tables()) {
    return Status::InvalidArgument(fmt::format(
        "{}: 'policy' must be an array of tables ([[policy]] with prefix = \"datasets/x/\")",
        Where(file_name, node.source())));
  }
  for (const toml::node& el : *node.as_array()) {
    const toml::table& t = *el.as_table();
    PrefixPolicy pp;
    bool has_prefix = false;
    for (auto&& [key, v] : t) {
      const std::string k(key.str());
      Status s = ApplyPolicyKey(k, v, &pp);
      if (s.code() == Status::Code::kNotFound) {
        return Status::InvalidArgument(fmt::format(
            "{}: unknown key 'policy.{}' (a [[policy]] table takes prefix, pin, ttl, policy, "
            "admit, quota)",
            Where(file_name, key.source()), k));
      }
      if (!s.ok()) {
        return Status::InvalidArgument(
            fmt::format("{}: key 'policy.{}': {}", Where(file_name, v.source()), k, s.message()));
      }
      has_prefix = has_prefix || k == "prefix";
    }
    if (!has_prefix) {
      return Status::InvalidArgument(
          fmt::format("{}: a [[policy]] table needs a prefix", Where(file_name, t.source())));
    }
    out->policies.prefixes.push_back(std::move(pp));
  }
  return Status::OK();
}

}  // namespace

Status ApplyConfigText(std::string_view toml_text, std::string_view file_name, DaemonOptions* out,
                       ConfigOrigins* origins) {
  toml::table root;
  try {
    root = toml::parse(toml_text, file_name);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(
        fmt::format("{}: {}", Where(file_name, e.source()), e.description()));
  }
  static constexpr std::string_view kTables =
      "[cache], [metadata], [s3], [fuse], [log], [metastore], [[policy]]";
  for (auto&& [tkey, tnode] : root) {
    const std::string tname(tkey.str());
    if (tname == "policy") {
      TIERFS_RETURN_IF_ERROR(ApplyPolicyTables(tnode, file_name, out));
      if (origins) (*origins)["policy"] = Where(file_name, tkey.source());
      continue;
    }
    const bool known_table = std::any_of(ConfigTable().begin(), ConfigTable().end(),
                                         [&](const ConfigKey& k) { return k.table == tname; });
    if (!tnode.is_table() || !known_table) {
      return Status::InvalidArgument(
          fmt::format("{}: unknown key '{}'{} (settings live in the tables {})",
                      Where(file_name, tkey.source()), tname, Suggest(tname), kTables));
    }
    for (auto&& [key, node] : *tnode.as_table()) {
      const std::string kname(key.str());
      const std::string full = fmt::format("{}.{}", tname, kname);
      const ConfigKey* spec = config::FindConfigKey(tname, kname);
      if (spec == nullptr) {
        return Status::InvalidArgument(fmt::format(
            "{}: unknown key '{}'{}", Where(file_name, key.source()), full, Suggest(full)));
      }
      Value v;
      v.what = full;
      std::string why;
      Status s = ConvertValue(node, spec->kind, &v, &why);
      if (!s.ok()) {
        if (why.empty()) {
          return Status::InvalidArgument(
              fmt::format("{}: key '{}' must be {}, not {}", Where(file_name, node.source()), full,
                          KindName(spec->kind), TomlTypeName(node.type())));
        }
        return Status::InvalidArgument(
            fmt::format("{}: key '{}': {}", Where(file_name, node.source()), full, why));
      }
      s = config::CheckRange(*spec, v);
      if (s.ok()) s = spec->set(v, out);
      if (s.ok()) out->explicit_keys.insert(full);
      if (!s.ok()) {
        return Status::InvalidArgument(
            fmt::format("{}: key '{}': {}", Where(file_name, node.source()), full, s.message()));
      }
      if (origins) (*origins)[full] = Where(file_name, node.source());
    }
  }
  return Status::OK();
}

Status ApplyConfigFile(const std::string& path, DaemonOptions* out, ConfigOrigins* origins) {
  std::ifstream in(path);
  if (!in) {
    return Status::InvalidArgument(
        fmt::format("--config: cannot read '{}': {}", path, std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ApplyConfigText(ss.str(), path, out, origins);
}

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> keys;
  for (const ConfigKey& k : ConfigTable()) keys.push_back(k.FullName());
  return keys;
}

Status ApplyMountOptions(std::string_view list, DaemonOptions* out) {
  static const std::vector<std::string_view> kPassThrough = {
      "suid",        "nosuid",        "dev",        "nodev",      "exec",
      "noexec",      "async",         "sync",       "dirsync",    "atime",
      "noatime",     "diratime",      "nodiratime", "relatime",   "norelatime",
      "strictatime", "nostrictatime", "lazytime",   "nolazytime", "auto_unmount"};
  static const std::vector<std::string_view> kFstabOnly = {
      "defaults", "auto", "noauto", "user", "users", "nouser", "owner", "nofail", "_netdev"};
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string_view opt = list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? list.size() + 1 : comma + 1;
    if (opt.empty() || opt == "ro") continue;
    size_t eq = opt.find('=');
    std::string_view name = opt.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : opt.substr(eq + 1);
    if (std::find(kFstabOnly.begin(), kFstabOnly.end(), opt) != kFstabOnly.end() ||
        name.starts_with("x-") || name == "comment") {
      continue;
    }
    if (opt == "rw") {
      return Status::InvalidArgument("-o rw: tierfs is read-only");
    } else if (opt == "allow_other") {
      out->fuse.allow_other = true;
    } else if (opt == "noallow_other") {
      out->fuse.allow_other = false;
    } else if (opt == "allow_root") {
      out->fuse.allow_root = true;
    } else if (opt == "default_permissions") {
      out->default_permissions = true;
    } else if (opt == "nodefault_permissions") {
      out->default_permissions = false;
    } else if (name == "file_mode" || name == "dir_mode") {
      TIERFS_RETURN_IF_ERROR(
          ParseMode(fmt::format("-o {}", name), value,
                    name == "file_mode" ? &out->fs.file_mode : &out->fs.dir_mode));
      (name == "file_mode" ? out->fs.file_mode_set : out->fs.dir_mode_set) = true;
    } else if (opt == "debug") {
      out->fuse.debug = true;
    } else if (opt == "nonempty") {
      out->allow_nonempty = true;
    } else if (name == "uid" || name == "gid") {
      uint64_t v;
      TIERFS_RETURN_IF_ERROR(ParseUint(fmt::format("-o {}", name), value, 0xffffffffULL, &v));
      (name == "uid" ? out->uid : out->gid) = static_cast<uint32_t>(v);
    } else if (name == "max_threads") {
      uint64_t v;
      TIERFS_RETURN_IF_ERROR(ParseUint("-o max_threads", value, 1024, &v));
      out->fuse.max_threads = static_cast<int>(v);
    } else if (std::find(kPassThrough.begin(), kPassThrough.end(), opt) != kPassThrough.end()) {
      out->fuse.extra_options.emplace_back(opt);
    } else {
      return Status::InvalidArgument(fmt::format(
          "-o: unknown mount option '{}' (tierfs: allow_other, noallow_other, allow_root, "
          "default_permissions, "
          "nodefault_permissions, uid=N, gid=N, file_mode=OCTAL, dir_mode=OCTAL, max_threads=N, "
          "debug, nonempty; libfuse: nodev, nosuid, noexec, noatime, "
          "auto_unmount, ...)",
          opt));
    }
  }
  return Status::OK();
}

namespace {

// A flag's text as the value of its key; messages name the flag.
Status ConvertFlag(const ConfigKey& k, const std::string& text, Value* v) {
  v->what = k.flag;
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("{}: {}", k.flag, why));
  };
  switch (k.kind) {
    case Kind::kString:
      if (k.non_empty && text.empty()) return bad("must not be empty");
      v->str = text;
      break;
    case Kind::kBool:
      return Status::Internal(fmt::format("{} takes no value", k.flag));
    case Kind::kInt: {
      // Only the owner ids have flags: non-negative, so "-1" is not a number.
      uint64_t u = 0;
      TIERFS_RETURN_IF_ERROR(ParseUint(k.flag, text, static_cast<uint64_t>(k.max), &u));
      v->i = static_cast<int64_t>(u);
      break;
    }
    case Kind::kSize: {
      auto r = ParseSize(text);
      if (!r.ok()) return bad(r.status().message());
      v->size = *r;
      break;
    }
    case Kind::kDuration: {
      auto r = ParseDuration(text);
      if (!r.ok()) return bad(r.status().message());
      v->duration = *r;
      break;
    }
  }
  if (Status s = config::CheckRange(k, *v); !s.ok()) return bad(s.message());
  return Status::OK();
}

}  // namespace

Status ApplyFlags(const MountFlags& f, DaemonOptions* out) {
  // -o first: a named flag is the more specific (--uid over -o uid=N).
  for (const auto& o : f.options) TIERFS_RETURN_IF_ERROR(ApplyMountOptions(o, out));
  for (const ConfigKey& k : ConfigTable()) {
    Value v;
    if (k.flag_on != nullptr) {
      if (!(f.*k.flag_on)) continue;
      v.what = k.flag;
      v.b = true;
    } else if (k.flag_text != nullptr) {
      const std::optional<std::string>& text = f.*k.flag_text;
      if (!text) continue;
      TIERFS_RETURN_IF_ERROR(ConvertFlag(k, *text, &v));
    } else {
      continue;
    }
    // A setter that can fail names v.what, the flag.
    TIERFS_RETURN_IF_ERROR(k.set(v, out));
    out->explicit_keys.insert(fmt::format("{}.{}", k.table, k.name));
  }
  if (f.foreground) out->foreground = true;
  if (f.supervise) out->supervise = true;
  return Status::OK();
}

}  // namespace tierfs
