#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.h"

namespace tierfs::csi {

// A pod volume bound to a daemon's mount.
struct TargetRecord {
  std::string volume_id;
  bool readonly = false;  // bound MS_RDONLY (the request's readonly)
  bool operator==(const TargetRecord&) const = default;
};

// A tierfs daemon as the driver records it: enough to find it again after a restart of the driver
// (its PID and the start time of that process, so a reused PID is not taken for it) and the pod
// volumes bound to its mount. Holds no secret (credentials_id is a hash). Plain value.
struct DaemonRecord {
  std::string key;  // VolumeSpec::Key()
  std::string source;
  std::string endpoint;
  std::string region;
  std::string credentials_id;
  std::vector<std::string> flags;  // VolumeSpec::MountFlags(), for `tierfs mount` and for people
  std::string mountpoint;          // the daemon's own mount, bound into each target
  std::string cache_dir;
  std::string log_file;
  int64_t pid = 0;
  uint64_t start_time = 0;  // field 22 of /proc/PID/stat (clock ticks since boot)
  // Every pod volume bound to mountpoint, by target_path.
  std::map<std::string, TargetRecord> targets;
};

// Everything the driver keeps across restarts: one record per running daemon, by key.
struct NodeState {
  std::map<std::string, DaemonRecord> daemons;
};

// The state file's format version; DecodeState refuses others (see csi/FORMAT.md).
inline constexpr int kStateVersion = 1;

std::string EncodeState(const NodeState& state);
// Corruption naming what is wrong for a document that is not a version-1 state.
Result<NodeState> DecodeState(std::string_view json);

// Reads `path`; a missing file is an empty state.
Result<NodeState> LoadState(const std::string& path);
// Replaces `path` atomically (write to PATH.tmp with mode 0600, fsync, rename, fsync the
// directory): after a crash the file holds either the old or the new state.
Status SaveState(const std::string& path, const NodeState& state);

}  // namespace tierfs::csi
