// daemon/mount_cli — `tierfs mount`: flags → config file → overlay flags → environment → Validate
// (exit 2 naming the bad flag/key) → checks of the mount point and the host → [daemonize] →
// build the components (daemon/components.h) → mount → serve → orderly teardown.
//
// Daemonizing: the parent forks before any thread exists (curl, LMDB writer, prefetch pool and
// FUSE workers are all created in the child). The child does the whole start-up and mount, then
// reports "OK" or the error through a pipe; the parent exits 0 only once the mount is usable,
// non-zero with the child's message otherwise.
//
// Thread-safety: RunMount is called once, from main, before any thread exists.
#pragma once

#include <string>

#include "daemon/config.h"

namespace tierfs {

// `o` holds the source and mount point; `config_path` ("": none) and `flags` come from the
// command line. Returns the exit code (daemon/exit_codes.h).
int RunMount(DaemonOptions o, const std::string& config_path, const MountFlags& flags);

}  // namespace tierfs
