// daemon/supervisor — crash resume of a daemonized mount (docs/operations.md, "Crash resume";
// fuse/FORMAT.md, "Crash resume"). The daemonized `tierfs mount` forks twice: the first child is
// the supervisor, which does nothing but this; its child serves the mount. The serving daemon
// sends its state (the handover state: INIT, inode and handle tables) with a duplicate of the
// /dev/fuse descriptor over a socket pair, and again whenever it hands out inodes or handles.
// When the serving daemon dies (a signal, an abort, an exit other than 0), the supervisor starts
// the installed binary with the daemon's command line to take the mount over exactly as a live
// restart does (the supervisor playing the old daemon's part), and the new daemon asks the
// kernel to send again the requests that were in flight (FUSE_NOTIFY_RESEND). A daemon that
// dies within kSettleTime of taking over, kMaxQuickDeaths times in a row, ends the mount: the
// supervisor unmounts it (lazily) with an error log line and exits 1. A daemon that exits 0
// (unmounted, stopped by SIGTERM, handed over by a live restart) ends the supervisor too.
//
// Thread-safety: single-threaded, in a process of its own.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "base/fd.h"

namespace tierfs {

inline constexpr std::chrono::seconds kSettleTime{30};
inline constexpr int kMaxQuickDeaths = 5;
// How often the supervisor takes what its daemon logged.
inline constexpr std::chrono::milliseconds kLogDrainPeriod{20};

// Supervises the serving daemon `daemon` (this process's child) of `mountpoint`; `channel` is
// this end of its state log. SIGINT, SIGTERM and SIGHUP are passed on to the serving daemon
// (SIGHUP also reopens this process's log file, for logrotate). Returns this
// process's exit code: the daemon's own when it failed before it served.
int Supervise(const std::string& mountpoint, pid_t daemon, UniqueFd channel);

}  // namespace tierfs
