// daemon/restart_cli — `tierfs restart MOUNTPOINT [--binary PATH]`: asks the daemon serving
// MOUNTPOINT to hand the mount to a new daemon (daemon/restart.h) and reports the outcome.
//
// Thread-safety: called once, from main.
#pragma once

#include <string>

namespace tierfs {

// `binary` "": the daemon's own binary as installed now. Returns the exit code
// (daemon/exit_codes.h): 0 once the new daemon serves, 1 when the restart did not happen (the
// old daemon serves on; the message says why), 2 for a MOUNTPOINT that is no tierfs mount or a
// binary that cannot run.
int RunRestart(const std::string& mountpoint, const std::string& binary);

}  // namespace tierfs
