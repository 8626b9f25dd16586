// `tierfs status` and `tierfs log-level` (daemon/status_cli.h).

#include "daemon/status_cli.h"

#include <signal.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "base/fd.h"
#include "base/logging.h"
#include "daemon/exit_codes.h"
#include "daemon/log_control.h"
#include "daemon/mounts.h"
#include "daemon/status.h"

namespace tierfs {
namespace {

// The tierfs mounts to report: every one of the host, or the one at `mountpoint` (found in
// mountinfo by its path first, so a stale mount, which cannot be stat'ed, is still found).
Result<std::vector<MountInfo>> StatusTargets(const std::string& mountpoint) {
  auto all = ReadMountInfo();
  if (!all.ok()) return all.status();
  std::vector<MountInfo> tierfs = TierfsMounts(*all);
  if (mountpoint.empty()) return tierfs;
  std::error_code ec;
  auto abs = std::filesystem::absolute(mountpoint, ec);
  std::string want = ec ? mountpoint : abs.lexically_normal().string();
  while (want.size() > 1 && want.back() == '/') want.pop_back();
  for (auto it = tierfs.rbegin(); it != tierfs.rend(); ++it) {
    if (it->mountpoint == want) return std::vector<MountInfo>{*it};
  }
  auto m = TierfsMountOf(mountpoint);
  if (!m.ok()) return m.status();
  return std::vector<MountInfo>{*m};
}

volatile sig_atomic_t g_watch_stop = 0;

// --raw: the user.tierfs.stats attribute of `mountpoint` as it is.
int PrintRawStats(const std::string& mountpoint) {
  if (mountpoint.empty()) {
    std::fprintf(stderr, "tierfs status: --raw needs a MOUNTPOINT\n");
    return kExitUsage;
  }
  std::vector<char> buf(64 * 1024);
  ssize_t n = getxattr(mountpoint.c_str(), "user.tierfs.stats", buf.data(), buf.size());
  if (n < 0) {
    std::fprintf(stderr, "tierfs status: cannot read user.tierfs.stats of %s: %s%s\n",
                 mountpoint.c_str(), std::strerror(errno),
                 errno == ENODATA || errno == ENOTSUP ? " (not the root of a tierfs mount?)" : "");
    return kExitRuntime;
  }
  std::printf("%s\n", std::string(buf.data(), static_cast<size_t>(n)).c_str());
  return kExitOk;
}

// Probes the mounts of a status. Every mount: one unmounted after the mount table was read is no
// longer one of them (another job's unmount must not fail the command). A named one that is gone
// is reported.
class StatusProbe {
 public:
  explicit StatusProbe(bool every) : every_(every) {}
  std::vector<MountStatus> Probe(const std::vector<MountInfo>& ms) {
    std::vector<MountStatus> out;
    for (const auto& m : ms) {
      MountStatus st = prober_.Probe(m);
      if (every_ && st.state == "gone") continue;
      out.push_back(std::move(st));
    }
    return out;
  }

 private:
  const bool every_;
  MountProber prober_;
};

bool AnyFailed(const std::vector<MountStatus>& ms) {
  return std::any_of(ms.begin(), ms.end(), [](const MountStatus& m) { return m.state != "ok"; });
}

// The rates of each mount of `cur` since its sample in `prev`, `secs` earlier.
std::vector<std::optional<Rates>> RatesSince(const std::vector<MountStatus>& prev,
                                             const std::vector<MountStatus>& cur, double secs) {
  std::vector<std::optional<Rates>> rates(cur.size());
  for (size_t i = 0; i < cur.size(); ++i) {
    for (const auto& p : prev) {
      if (p.mount.mountpoint == cur[i].mount.mountpoint && p.state == "ok" &&
          cur[i].state == "ok") {
        rates[i] = ComputeRates(p.stats, cur[i].stats, secs);
      }
    }
  }
  return rates;
}

// One sample of --watch: a JSON line, or the screen redrawn.
void PrintSample(const std::vector<MountStatus>& cur,
                 const std::vector<std::optional<Rates>>& rates, bool json, bool tty, double watch,
                 bool first) {
  if (json) {
    // One document per line (JSON Lines) so a script can read them as they come.
    std::string doc = FormatStatusJson(cur, rates);
    doc.erase(std::remove(doc.begin(), doc.end(), '\n'), doc.end());
    std::printf("%s\n", doc.c_str());
  } else {
    if (tty) std::printf("\033[H\033[2J");
    std::printf("tierfs status, every %.1fs (^C ends)%s\n\n", watch,
                first ? "; rates from the next sample" : "");
    std::printf("%s", cur.empty() ? "no tierfs mounts\n" : FormatStatusText(cur, rates).c_str());
    if (!tty) std::printf("\n");
  }
  std::fflush(stdout);
}

// --watch: redraw every `watch` seconds with the rates since the previous sample, until ^C.
int WatchStatus(const std::string& mountpoint, std::vector<MountInfo> targets, bool json,
                double watch) {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_watch_stop = 1; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  StatusProbe probe(mountpoint.empty());
  const bool tty = isatty(STDOUT_FILENO) != 0;
  std::vector<MountStatus> prev = probe.Probe(targets);
  auto prev_time = std::chrono::steady_clock::now();
  bool first = true;
  while (!g_watch_stop) {
    if (!first) {
      const auto until = prev_time + std::chrono::duration<double>(watch);
      while (!g_watch_stop && std::chrono::steady_clock::now() < until) usleep(50 * 1000);
      if (g_watch_stop) break;
      // Mounts come and go: re-read the list when listing them all.
      if (mountpoint.empty()) {
        auto again = StatusTargets(mountpoint);
        if (again.ok()) targets = std::move(*again);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - prev_time).count();
    std::vector<MountStatus> cur = probe.Probe(targets);
    const auto rates =
        first ? std::vector<std::optional<Rates>>(cur.size()) : RatesSince(prev, cur, secs);
    PrintSample(cur, rates, json, tty, watch, first);
    prev = std::move(cur);
    prev_time = now;
    first = false;
  }
  return kExitOk;
}

}  // namespace

int RunStatus(const std::string& mountpoint, bool raw, bool json,
              const std::optional<double>& watch) {
  if (raw) return PrintRawStats(mountpoint);
  if (watch && !(*watch > 0 && *watch <= 3600)) {
    std::fprintf(stderr, "tierfs status: --watch: SECONDS must be > 0 and at most 3600\n");
    return kExitUsage;
  }
  auto targets = StatusTargets(mountpoint);
  if (!targets.ok()) {
    std::fprintf(stderr, "tierfs status: %s\n", targets.status().message().c_str());
    return kExitRuntime;
  }
  if (watch) return WatchStatus(mountpoint, std::move(*targets), json, *watch);
  const auto st = StatusProbe(mountpoint.empty()).Probe(*targets);
  if (json) {
    std::printf("%s\n", FormatStatusJson(st, {}).c_str());
  } else if (st.empty()) {
    std::printf("no tierfs mounts\n");
  } else {
    std::printf("%s", FormatStatusText(st, {}).c_str());
  }
  return AnyFailed(st) ? kExitRuntime : kExitOk;
}

int RunLogLevel(const std::string& level, const std::string& mountpoint) {
  spdlog::level::level_enum parsed;
  if (!ParseLogLevel(level, &parsed)) {
    std::fprintf(stderr,
                 "tierfs log-level: '%s' is not one of trace, debug, info, warn, error, critical, "
                 "off\n",
                 level.c_str());
    return kExitUsage;
  }
  auto targets = StatusTargets(mountpoint);
  if (!targets.ok()) {
    std::fprintf(stderr, "tierfs log-level: %s\n", targets.status().message().c_str());
    return kExitRuntime;
  }
  if (targets->empty()) {
    std::fprintf(stderr, "tierfs log-level: no tierfs mounts\n");
    return kExitRuntime;
  }
  int rc = kExitOk;
  for (const auto& m : *targets) {
    const std::optional<int> answer = CallWithDeadline<int>(
        [m, level] {
          // On the mount's root, checked to be still that mount (OpenMountRoot): a mount point
          // unmounted meanwhile is not written to.
          int err = 0;
          const UniqueFd fd = OpenMountRoot(m, &err);
          if (fd.get() < 0) return err;
          return fsetxattr(fd.get(), "user.tierfs.log_level", level.data(), level.size(), 0) == 0
                     ? 0
                     : errno;
        },
        kMountAnswerDeadline);
    if (!answer || *answer == ENOTCONN || *answer == ESRCH) {
      const char* why = !answer               ? "hung (its daemon did not answer)"
                        : *answer == ENOTCONN ? "stale (the daemon is gone)"
                                              : "gone (unmounted meanwhile)";
      if (mountpoint.empty()) {
        // "Every mount" means every live one: a mount whose daemon died or does not answer has no
        // level to change now (`tierfs status` reports it), and one unmounted since the mount
        // table was read is no mount; named on the command line, an error.
        std::fprintf(stderr, "tierfs log-level: %s: skipped, %s\n", m.mountpoint.c_str(), why);
        continue;
      }
      std::fprintf(stderr, "tierfs log-level: %s: %s\n", m.mountpoint.c_str(), why);
      rc = kExitRuntime;
      continue;
    }
    if (*answer != 0) {
      const int err = *answer;
      std::fprintf(stderr, "tierfs log-level: %s: %s%s\n", m.mountpoint.c_str(), std::strerror(err),
                   err == EPERM || err == EACCES
                       ? " (only root and the user who mounted may change the log level)"
                       : "");
      rc = kExitRuntime;
      continue;
    }
    std::printf("%s: log level %s\n", m.mountpoint.c_str(), level.c_str());
  }
  return rc;
}

}  // namespace tierfs
