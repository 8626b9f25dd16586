// daemon/status_cli — `tierfs status` (every tierfs mount of the host, or one: its source,
// daemon, log and cache statistics; --watch redraws with rates; --json; --raw) and
// `tierfs log-level` (sets user.tierfs.log_level on the roots of running mounts).
//
// Thread-safety: called once, from main.
#pragma once

#include <optional>
#include <string>

namespace tierfs {

// `mountpoint` "": every mount. `watch`: redraw every that many seconds until SIGINT/SIGTERM.
// Returns the exit code (daemon/exit_codes.h): 1 when a mount is stale, hung or unreadable.
int RunStatus(const std::string& mountpoint, bool raw, bool json,
              const std::optional<double>& watch);

// Sets the log level `level` of the daemon at `mountpoint` ("": every live mount).
int RunLogLevel(const std::string& level, const std::string& mountpoint);

}  // namespace tierfs
