// `tierfs prefetch [--tier l2] [--wait] [--cancel] PATH...`: starts (or cancels) deep prefetch
// jobs on paths of a mounted tierfs through the user.tierfs.prefetch xattr, and with --wait polls
// every job until it finishes: a progress bar when stdout is a terminal, one plain line per
// change otherwise.
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

}  // namespace tierfs
