#include "daemon/status.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/fd.h"
#include "base/strings.h"
#include "base/units.h"

namespace tierfs {
namespace {

// fgetxattr of a whole value; errno on failure.
Result<std::string> GetXattrValue(int fd, const char* name, int* err) {
  std::vector<char> buf(64 * 1024);
  const ssize_t n = fgetxattr(fd, name, buf.data(), buf.size());
  if (n < 0) {
    *err = errno;
    return Status::FromErrno(*err, name);
  }
  return std::string(buf.data(), static_cast<size_t>(n));
}

uint64_t Delta(const KeyValues& a, const KeyValues& b, std::string_view key) {
  const uint64_t x = a.Num(key), y = b.Num(key);
  return y >= x ? y - x : 0;
}

std::optional<double> RatioOf(uint64_t lookups, uint64_t origin_misses) {
  if (lookups == 0) return std::nullopt;
  if (origin_misses > lookups) origin_misses = lookups;
  return 1.0 - static_cast<double>(origin_misses) / static_cast<double>(lookups);
}

std::string Percent(const std::optional<double>& r) {
  return r ? fmt::format("{:.1f}%", *r * 100.0) : std::string("-");
}

}  // namespace

std::string KeyValues::Str(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return v;
  }
  return "";
}

uint64_t KeyValues::Num(std::string_view key) const {
  uint64_t v = 0;
  return ParseDecimal(Str(key), &v) ? v : 0;
}

bool KeyValues::Has(std::string_view key) const {
  for (const auto& kv : items) {
    if (kv.first == key) return true;
  }
  return false;
}

KeyValues ParseKeyValues(std::string_view text) {
  KeyValues out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find_first_of(" \n", pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view tok = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = tok.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    out.items.emplace_back(std::string(tok.substr(0, eq)), std::string(tok.substr(eq + 1)));
  }
  return out;
}

std::vector<std::string> StatsTiers(const KeyValues& stats) {
  std::vector<std::string> tiers;
  for (const auto& [k, v] : stats.items) {
    const size_t dot = k.find('.');
    if (dot == std::string::npos || k.substr(dot + 1) != "hits") continue;
    const std::string group = k.substr(0, dot);
    if (group.size() == 2 && group[0] == 'l' && group[1] >= '0' && group[1] <= '9')
      tiers.push_back(group);
  }
  return tiers;
}

std::optional<double> HitRatio(const KeyValues& s) {
  const auto tiers = StatsTiers(s);
  if (tiers.empty()) return std::nullopt;
  const uint64_t lookups = s.Num(tiers.front() + ".hits") + s.Num(tiers.front() + ".misses");
  return RatioOf(lookups, s.Num(tiers.back() + ".misses"));
}

Rates ComputeRates(const KeyValues& a, const KeyValues& b, double seconds) {
  Rates r;
  r.seconds = seconds;
  if (seconds <= 0) return r;
  r.reads_per_s = static_cast<double>(Delta(a, b, "fuse.reads")) / seconds;
  r.read_bytes_per_s = static_cast<double>(Delta(a, b, "fuse.read_bytes")) / seconds;
  const auto tiers = StatsTiers(b);
  for (const auto& t : tiers) {
    r.bytes_per_s.emplace_back(t, static_cast<double>(Delta(a, b, t + ".bytes")) / seconds);
  }
  r.bytes_per_s.emplace_back("origin", static_cast<double>(Delta(a, b, "origin.bytes")) / seconds);
  if (!tiers.empty()) {
    const uint64_t lookups =
        Delta(a, b, tiers.front() + ".hits") + Delta(a, b, tiers.front() + ".misses");
    r.hit_ratio = RatioOf(lookups, Delta(a, b, tiers.back() + ".misses"));
  }
  return r;
}

std::string MountSource(const MountInfo& m) {
  return m.source.rfind("tierfs:", 0) == 0 ? m.source.substr(7) : m.source;
}

UniqueFd OpenMountRoot(const MountInfo& m, int* err) {
  UniqueFd fd(open(m.mountpoint.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0) {
    *err = errno == ENOENT ? ESRCH : errno;
  } else if (fstat(fd.get(), &st) != 0) {
    *err = errno;
  } else if (st.st_dev != makedev(m.major, m.minor)) {
    *err = ESRCH;
  } else {
    *err = 0;
    return fd;
  }
  return UniqueFd();
}

MountStatus ProbeMountNow(const MountInfo& m) {
  MountStatus st;
  st.mount = m;
  int err = 0;
  const UniqueFd fd = OpenMountRoot(m, &err);
  Result<std::string> stats = fd.get() < 0 ? Result<std::string>(Status::FromErrno(err, "open"))
                                           : GetXattrValue(fd.get(), "user.tierfs.stats", &err);
  if (!stats.ok()) {
    if (err == ESRCH) {
      st.state = "gone";
      st.error = "no longer mounted (unmounted after the mount table was read)";
    } else if (err == ENOTCONN) {
      st.state = "stale";
      st.error =
          fmt::format("{} (the daemon is gone; unmount with `fusermount3 -u {}` and mount again)",
                      std::strerror(err), m.mountpoint);
    } else {
      st.state = "error";
      st.error = fmt::format(
          "cannot read user.tierfs.stats: {}{}", std::strerror(err),
          err == EACCES || err == EPERM
              ? " (a mount without allow_other is open to its mounting user only; ask root)"
              : "");
    }
    return st;
  }
  st.stats = ParseKeyValues(*stats);
  auto daemon = GetXattrValue(fd.get(), "user.tierfs.daemon", &err);
  if (daemon.ok()) st.daemon = ParseKeyValues(*daemon);  // older daemons: no such name
  return st;
}

MountProber::MountProber(std::chrono::milliseconds deadline, ProbeFn probe)
    : deadline_(deadline), probe_(std::move(probe)) {}

MountStatus MountProber::Probe(const MountInfo& m) {
  std::shared_future<MountStatus> answer;
  if (auto it = pending_.find(m.mountpoint); it != pending_.end()) {
    // An earlier probe that missed its deadline: wait on it again while it is still blocked; once
    // it has returned its answer is old, so ask again.
    if (it->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      pending_.erase(it);
    } else {
      answer = it->second;
    }
  }
  if (!answer.valid()) {
    answer = StartDetached<MountStatus>([probe = probe_, m] { return probe(m); });
  }
  if (answer.wait_for(deadline_) == std::future_status::ready) {
    pending_.erase(m.mountpoint);
    return answer.get();
  }
  pending_[m.mountpoint] = answer;
  MountStatus hung;
  hung.mount = m;
  hung.state = "hung";
  hung.error = fmt::format(
      "no answer in {:.1f} s (the daemon is stopped, stuck, or has every FUSE thread waiting on "
      "the origin: its log may say which; `umount -l {}` detaches the mount)",
      std::chrono::duration<double>(deadline_).count(), m.mountpoint);
  return hung;
}

std::string FormatStatusText(const std::vector<MountStatus>& mounts,
                             const std::vector<std::optional<Rates>>& rates) {
  std::string out;
  for (size_t i = 0; i < mounts.size(); ++i) {
    const MountStatus& m = mounts[i];
    if (i > 0) out += '\n';
    out += fmt::format("{}  {}  {}\n", EscapeForLog(m.mount.mountpoint),
                       EscapeForLog(MountSource(m.mount)), m.state);
    if (m.state != "ok") {
      out += fmt::format("  {}\n", m.error);
      continue;
    }
    const auto& d = m.daemon;
    if (!d.items.empty()) {
      out += fmt::format("  daemon   pid {}  version {}  log {} ({}, {})  cache {}\n", d.Str("pid"),
                         d.Str("version"), d.Str("log"), d.Str("log_level"), d.Str("log_format"),
                         d.Str("cache_dir"));
      if (!d.Str("started").empty()) {  // older daemons: none
        out += fmt::format("  daemon   started {}  mounted {}  live restarts {}\n",
                           d.Str("started"), d.Str("mounted"), d.Str("restarts"));
      }
      if (d.Has("supervisor_pid")) {  // older daemons: none
        out += fmt::format("  daemon   supervisor pid {}  crash resumes {}\n",
                           d.Str("supervisor_pid"), d.Str("resumes"));
      }
    }
    if (d.Has("memory_limit")) {
      out += fmt::format(
          "  memory   rss {} of limit {} ({})  budget {}: l1 {}  blocks {}  listings {}\n",
          FormatSize(d.Num("rss")), FormatSize(d.Num("memory_limit")), d.Str("memory_limit_from"),
          FormatSize(d.Num("memory_budget")), FormatSize(d.Num("memory_l1")),
          FormatSize(d.Num("memory_blocks")), FormatSize(d.Num("memory_listings")));
    }
    const auto& s = m.stats;
    out += fmt::format("  reads    {} requests, {} returned, hit ratio {}\n", s.Num("fuse.reads"),
                       FormatSize(s.Num("fuse.read_bytes")), Percent(HitRatio(s)));
    for (const auto& t : StatsTiers(s)) {
      const uint64_t cap = s.Num(t + ".capacity");
      out += fmt::format("  {:<8} hits {}  misses {}  served {}  used {} of {}\n", t,
                         s.Num(t + ".hits"), s.Num(t + ".misses"), FormatSize(s.Num(t + ".bytes")),
                         FormatSize(s.Num(t + ".used")), cap ? FormatSize(cap) : "-");
    }
    out += fmt::format("  origin   requests {}  errors {}  fetched {}\n", s.Num("origin.requests"),
                       s.Num("origin.errors"), FormatSize(s.Num("origin.bytes")));
    if (s.Has("admit.admitted")) {  // L2 admission (older daemons: none)
      out += fmt::format("  admit    admitted {}  rejected {}  ghost hits {}  scans {}\n",
                         s.Num("admit.admitted"), s.Num("admit.rejected"),
                         s.Num("admit.ghost_hits"), s.Num("admit.scans"));
    }
    if (i < rates.size() && rates[i]) {
      const Rates& r = *rates[i];
      std::string per_tier;
      for (const auto& [t, v] : r.bytes_per_s) {
        per_tier += fmt::format("  {} {}/s", t, FormatSize(static_cast<uint64_t>(v)));
      }
      out += fmt::format("  rates    {:.1f} reads/s  {}/s  hit ratio {}  |{}\n", r.reads_per_s,
                         FormatSize(static_cast<uint64_t>(r.read_bytes_per_s)),
                         Percent(r.hit_ratio), per_tier);
    }
  }
  return out;
}

std::string FormatStatusJson(const std::vector<MountStatus>& mounts,
                             const std::vector<std::optional<Rates>>& rates) {
  using nlohmann::ordered_json;
  ordered_json doc;
  doc["mounts"] = ordered_json::array();
  for (size_t i = 0; i < mounts.size(); ++i) {
    const MountStatus& m = mounts[i];
    ordered_json j;
    j["mountpoint"] = m.mount.mountpoint;
    j["source"] = MountSource(m.mount);
    j["state"] = m.state;
    if (!m.error.empty()) j["error"] = m.error;
    uint64_t pid = 0;
    if (ParseDecimal(m.daemon.Str("pid"), &pid)) {
      j["pid"] = pid;
    } else {
      j["pid"] = nullptr;
    }
    if (ParseDecimal(m.daemon.Str("supervisor_pid"), &pid)) {
      j["supervisor_pid"] = pid;
    } else {
      j["supervisor_pid"] = nullptr;
    }
    ordered_json daemon = ordered_json::object();
    for (const auto& [k, v] : m.daemon.items) {
      if (k != "pid" && k != "supervisor_pid") daemon[k] = v;
    }
    j["daemon"] = daemon;
    ordered_json stats = ordered_json::object();
    for (const auto& [k, v] : m.stats.items) {
      uint64_t n = 0;
      if (ParseDecimal(v, &n)) {
        stats[k] = n;
      } else {
        stats[k] = v;
      }
    }
    j["stats"] = stats;
    const auto hr = HitRatio(m.stats);
    j["hit_ratio"] = hr ? ordered_json(*hr) : ordered_json(nullptr);
    if (i < rates.size() && rates[i]) {
      const Rates& r = *rates[i];
      ordered_json rj;
      rj["seconds"] = r.seconds;
      rj["reads_per_s"] = r.reads_per_s;
      rj["read_bytes_per_s"] = r.read_bytes_per_s;
      ordered_json per = ordered_json::object();
      for (const auto& [t, v] : r.bytes_per_s) per[t] = v;
      rj["bytes_per_s"] = per;
      rj["hit_ratio"] = r.hit_ratio ? ordered_json(*r.hit_ratio) : ordered_json(nullptr);
      j["rates"] = rj;
    }
    doc["mounts"].push_back(std::move(j));
  }
  return doc.dump(2, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace tierfs
