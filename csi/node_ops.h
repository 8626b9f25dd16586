#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"

namespace tierfs::csi {

// A running process, told apart from a later process with the same PID by its start time.
struct ProcessId {
  int64_t pid = 0;
  uint64_t start_time = 0;
};

// How to start one tierfs daemon.
struct DaemonLaunch {
  std::string source;
  std::string mountpoint;  // an existing empty directory
  std::string cache_dir;
  std::string log_file;
  std::vector<std::string> flags;          // VolumeSpec::MountFlags()
  std::map<std::string, std::string> env;  // credentials; empty: the node's own
};

// The node-side effects of the driver: daemons, mounts, directories. The real implementation
// (NewSystemNodeOps) runs `tierfs mount` and calls mount(2); tests use a fake. Implementations
// are thread-safe.
class NodeOps {
 public:
  virtual ~NodeOps() = default;

  // Starts a daemon and returns once its mount is usable. On failure nothing is left mounted or
  // running, and the Status carries the daemon's own message with its code
  // (PermissionDenied: credentials refused; Unavailable: origin unreachable; NotFound: no such
  // bucket or directory; InvalidArgument: a setting the daemon refused; else Internal).
  virtual Result<ProcessId> StartDaemon(const DaemonLaunch& launch) = 0;
  // Unmounts `mountpoint` (the daemon then exits by itself) and waits, bounded, for the process
  // to end; escalates to SIGTERM and SIGKILL. OK when it is gone.
  virtual Status StopDaemon(const std::string& mountpoint, const ProcessId& process) = 0;
  // The process runs (not a zombie) and is the one started at process.start_time.
  virtual bool Alive(const ProcessId& process) = 0;

  // Bind-mounts `from` at `target` (an existing directory), nosuid and nodev; MS_RDONLY when
  // `read_only`. (The file system refuses every write itself; a read-only VFS mount also refuses
  // the user.tierfs.* setxattr that starts prefetches.)
  virtual Status Bind(const std::string& from, const std::string& target, bool read_only) = 0;
  // Unmounts `path` (lazily if it is busy). OK when it was not mounted.
  virtual Status Unmount(const std::string& path) = 0;
  // `path` is a mount point of a tierfs file system (fuse.tierfs; binds of one included).
  virtual bool IsTierfsMount(const std::string& path) = 0;
  // The tierfs mount points strictly below `dir`.
  virtual std::vector<std::string> TierfsMountsUnder(const std::string& dir) = 0;

  // mkdir -p with `mode` for what it creates; OK when it exists.
  virtual Status MakeDirs(const std::string& path, uint32_t mode) = 0;
  // rmdir; OK when it does not exist.
  virtual Status RemoveDir(const std::string& path) = 0;
};

// Options of the real NodeOps.
struct SystemNodeOpsOptions {
  std::string tierfs_binary =
      "tierfs";                     // run as `tierfs mount ...`; a bare name is looked up in PATH
  int start_timeout_seconds = 120;  // for `tierfs mount` to report the mount ready
  int stop_timeout_seconds = 20;    // for the daemon to exit after its unmount
};

std::unique_ptr<NodeOps> NewSystemNodeOps(const SystemNodeOpsOptions& options);

}  // namespace tierfs::csi
