// daemon/status — `tierfs status`: what each tierfs mount of the host reports.
//
//   ProbeMountNow reads the root's user.tierfs.stats and user.tierfs.daemon of one mount; a mount
//   whose daemon died answers ENOTCONN ("Transport endpoint is not connected") and is reported as
//   stale, not as an error of the command. MountProber runs those probes with a deadline: a mount
//   whose daemon does not answer (stopped or stuck) is reported as hung instead of hanging the
//   command. The rest is pure and unit-tested: parsing the stats text, hit ratio and rates
//   between two snapshots, the table and the JSON document.
//
// Thread-safe (no shared state), except MountProber (one command's loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/fd.h"
#include "daemon/mounts.h"

namespace tierfs {

// "k=v k=v ..." (user.tierfs.stats, user.tierfs.daemon), in order.
struct KeyValues {
  std::vector<std::pair<std::string, std::string>> items;
  // The value of `key`, "" if absent.
  std::string Str(std::string_view key) const;
  // The value as an unsigned integer, 0 if absent or not a number.
  uint64_t Num(std::string_view key) const;
  bool Has(std::string_view key) const;
};
KeyValues ParseKeyValues(std::string_view text);

// The cache tiers named in a stats text ("l1", "l2", "l3": those with a .hits counter), in tier
// order.
std::vector<std::string> StatsTiers(const KeyValues& stats);

// Share of block lookups served by a tier rather than the origin: 1 - misses of the last tier /
// lookups of the first. nullopt before any lookup or without tiers.
std::optional<double> HitRatio(const KeyValues& stats);

struct Rates {
  double seconds = 0;
  double reads_per_s = 0;       // FUSE read requests
  double read_bytes_per_s = 0;  // bytes returned to readers
  // Bytes per second served by each tier, then "origin".
  std::vector<std::pair<std::string, double>> bytes_per_s;
  std::optional<double> hit_ratio;  // over the interval
};
// Rates between two snapshots `seconds` apart (counters that went down count as 0: a restart).
Rates ComputeRates(const KeyValues& before, const KeyValues& after, double seconds);

// Runs `fn` on a detached thread of its own; the future gets its result. For calls into a FUSE
// mount, which block until its daemon answers (forever while the daemon is stopped): a caller
// that stops waiting leaves the thread behind, and the kernel ends its request when the process
// exits.
template <typename T>
std::shared_future<T> StartDetached(std::function<T()> fn) {
  auto task = std::make_shared<std::packaged_task<T()>>(std::move(fn));
  std::shared_future<T> result = task->get_future().share();
  std::thread([task] { (*task)(); }).detach();
  return result;
}
// Runs `fn` as StartDetached does and waits at most `deadline` for its result: nullopt when it
// has not returned by then.
template <typename T>
std::optional<T> CallWithDeadline(std::function<T()> fn, std::chrono::milliseconds deadline) {
  std::shared_future<T> result = StartDetached<T>(std::move(fn));
  if (result.wait_for(deadline) != std::future_status::ready) return std::nullopt;
  return result.get();
}

// How long `tierfs status` and `tierfs log-level` wait for a mount's daemon to answer.
inline constexpr std::chrono::milliseconds kMountAnswerDeadline{5000};

struct MountStatus {
  MountInfo mount;
  // "ok", "stale" (the daemon is gone: ENOTCONN), "hung" (no answer within the deadline), "gone"
  // (unmounted after the mount table was read), or "error" (another errno, in `error`).
  std::string state = "ok";
  std::string error;
  KeyValues daemon;  // pid, version, log_level, log_format, log, cache_dir
  KeyValues stats;
};

// The root of mount `m`, opened (O_RDONLY | O_DIRECTORY) for its xattrs, if the path is still that
// mount: its st_dev is the mount's device. A mount read from the mount table a moment ago may be
// gone by now (another job unmounted it), its mount point removed or a plain directory whose
// xattrs are not ours: no descriptor and *err = ESRCH then. When it cannot be opened, *err is the
// errno (ENOTCONN: the daemon is gone, EACCES: another user's mount); 0 with a descriptor. May
// wait for the daemon as long as it takes.
UniqueFd OpenMountRoot(const MountInfo& m, int* err);

// Reads the xattrs of `m`'s root, waiting for the daemon as long as it takes. Never fails:
// problems end up in state/error.
MountStatus ProbeMountNow(const MountInfo& m);

// Probes mounts (ProbeMountNow) with a deadline each: a mount whose daemon has not answered by
// then is reported as hung. At most one probe per mount point is outstanding: a mount that stays
// hung across the samples of `tierfs status --watch` is waited on again, not given a new thread
// each time (a stopped daemon would otherwise collect one blocked thread per sample). Not
// thread-safe: one command's loop.
class MountProber {
 public:
  using ProbeFn = std::function<MountStatus(const MountInfo&)>;
  explicit MountProber(std::chrono::milliseconds deadline = kMountAnswerDeadline,
                       ProbeFn probe = ProbeMountNow);
  MountStatus Probe(const MountInfo& m);
  // Probes still waiting for an answer.
  size_t outstanding() const { return pending_.size(); }

 private:
  const std::chrono::milliseconds deadline_;
  const ProbeFn probe_;
  std::map<std::string, std::shared_future<MountStatus>> pending_;  // by mount point
};

// The source as the user typed it ("s3://bucket/prefix"): the fsname without "tierfs:".
std::string MountSource(const MountInfo& m);

// Human-readable report of several mounts (with rates when given, one per mount).
std::string FormatStatusText(const std::vector<MountStatus>& mounts,
                             const std::vector<std::optional<Rates>>& rates);
// One JSON document: {"mounts":[{"mountpoint":..,"source":..,"state":..,"pid":..,
// "daemon":{..},"stats":{..},"hit_ratio":..,"rates":{..}}]}. Numeric stats are numbers.
std::string FormatStatusJson(const std::vector<MountStatus>& mounts,
                             const std::vector<std::optional<Rates>>& rates);

}  // namespace tierfs
