// What the node plug-in reads from the system about its daemons: the kernel's mount table and
// the messages of `tierfs mount`. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tierfs::csi {

// The mount points (unescaped: "\040" is a space) of the fuse.tierfs mounts of a
// /proc/PID/mountinfo text: daemons' mounts and bind mounts of them.
std::vector<std::string> ParseTierfsMountPoints(std::string_view mountinfo);

// The failure of `tierfs mount` (exit code, its output) as a Status with the daemon's own message.
// The daemon prints "tierfs: CODE: message" for a Status (PermissionDenied, NotFound, Unavailable,
// TimedOut, IOError, InvalidArgument keep their meaning; TimedOut and IOError count as
// Unavailable) and "tierfs mount: message" with exit code 2 for a setting it refused
// (InvalidArgument). Anything else is Internal. Warning lines are skipped.
Status DaemonFailureStatus(int exit_code, std::string_view output);

}  // namespace tierfs::csi
