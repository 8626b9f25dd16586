// `tierfs prefetch [--tier l2] [--wait] [--cancel] PATH...`: starts (or cancels) deep prefetch
// jobs on paths of a mounted tierfs through the user.tierfs.prefetch xattr, and with --wait polls
// every job until it finishes: a progress bar with rate and ETA when stdout is a terminal, one
// plain line per change otherwise (and a summary line with the mean rate at the end).
// `--from-file LIST` hands a list of files (one per line, in fetch order) over in bulk to the
// mount's list job (user.tierfs.prefetch_list on the mount root, in sets under 64 KiB).
//
// Thread-safety: plain functions; no shared state.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace tierfs {

struct PrefetchCliOptions {
  std::string tier = "l2";
  bool wait = false;
  bool cancel = false;
  // A file of paths (one per line, absolute or relative to the working directory, all on one
  // tierfs mount), "-" for stdin; "" = none. With it, PATH arguments are not allowed.
  std::string from_file;
  std::chrono::milliseconds poll_interval{200};
};

// Returns the process exit code: 0 when every job was started (and, with --wait, finished
// "done"), 1 when a job failed or was cancelled or an xattr call failed, 2 for a bad tier or a
// path that is not on a tierfs mount (then nothing is started).
int RunPrefetchCli(const std::vector<std::string>& paths, const PrefetchCliOptions& options);

// Parses a user.tierfs.prefetch value ("state=running tier=l2 files=3/10 bytes=5/100") into its
// fields; false when a field is missing or malformed. Exposed for tests.
struct PrefetchProgress {
  std::string state;
  uint64_t files_done = 0, files_total = 0, bytes_done = 0, bytes_total = 0;
};
bool ParsePrefetchProgress(std::string_view value, PrefetchProgress* out);

// Values of user.tierfs.prefetch_list for `rel_paths` (relative to the mount root, in order):
// each "tier=<tier>\n" followed by whole lines, at most `max_bytes` long (a path too long for one
// value alone gets a value of its own). Exposed for tests.
std::vector<std::string> PrefetchListValues(const std::vector<std::string>& rel_paths,
                                            std::string_view tier, size_t max_bytes = 65000);

// "12.5MiB/s 310 files/s ETA 1m30s" from the progress `elapsed` after `start` (the first
// sample); "" until there is something to measure. Exposed for tests.
std::string FormatPrefetchRate(const PrefetchProgress& start, const PrefetchProgress& now,
                               std::chrono::nanoseconds elapsed);

}  // namespace tierfs
