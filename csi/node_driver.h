#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "base/thread_annotations.h"
#include "csi/node_ops.h"
#include "csi/node_state.h"
#include "csi/volume_spec.h"

namespace tierfs::csi {

struct NodeDriverOptions {
  // The driver's state (state.json), the daemons' mount points (mnt/KEY) and logs (log/KEY.log).
  std::string state_dir = "/var/lib/tierfs-csi";
  // The daemons' caches: one directory per daemon key (KEY/), kept when the daemon stops, so the
  // next daemon of the same volume starts warm.
  std::string cache_root = "/var/cache/tierfs-csi";
  // file:// sources must lie at or below this directory; empty: file:// sources are refused.
  std::string file_root;
};

// A NodePublishVolume request in tierfs terms (the gRPC layer has checked the capability: a
// mount, read-only access).
struct PublishRequest {
  std::string volume_id;
  std::string target_path;
  // Bind the target MS_RDONLY. Off, the volume is still read-only (the file system answers
  // EROFS to every write), and pods may start prefetches through user.tierfs.* xattrs.
  bool readonly = false;
  std::map<std::string, std::string> volume_context;
  std::map<std::string, std::string> secrets;
  std::vector<std::string> mount_flags;
};

// The CSI node logic: one tierfs daemon per distinct VolumeSpec::Key() on the node, shared by
// every pod volume that asks for the same thing, its mount bound read-only into each target and
// stopped when the last target is unpublished. The state is saved after every change and, when
// the driver starts, reconciled with the daemons and mounts that are really there.
//
// Thread-safe; no external synchronization needed. Operations run one at a time (mu_ is held
// across the daemon start and the mounts): they are rare, and serializing them keeps the
// reference counts and the state file consistent without per-volume locks.
class NodeDriver {
 public:
  // Loads the state of options.state_dir and reconciles it: daemons that died and targets no
  // longer mounted are dropped (their mounts removed), daemons left with no target are stopped,
  // tierfs mounts under state_dir/mnt that no record knows are unmounted. `ops` is not owned and
  // must outlive the driver.
  static Result<std::unique_ptr<NodeDriver>> Open(const NodeDriverOptions& options, NodeOps* ops);

  // Publishes the volume at request.target_path. Idempotent: the same volume at the same target
  // again is OK. InvalidArgument for a bad request or volume, AlreadyExists-like
  // FailedPrecondition when the target holds another volume, the daemon's failure otherwise
  // (nothing is left mounted then).
  Status Publish(const PublishRequest& request);
  // Unpublishes target_path; the daemon stops with its last target. An unknown target is OK.
  Status Unpublish(const std::string& volume_id, const std::string& target_path);

  NodeState TEST_State() const;

 private:
  NodeDriver(const NodeDriverOptions& options, NodeOps* ops, NodeState state);

  Status Reconcile() REQUIRES(mu_);
  // The running daemon for `spec`, started when there is none.
  Result<DaemonRecord*> EnsureDaemon(const VolumeSpec& spec) REQUIRES(mu_);
  // Stops a daemon and forgets it (targets must be unbound already).
  void StopAndErase(const std::string& key, const char* why) REQUIRES(mu_);
  Status Save() REQUIRES(mu_);
  Status CheckFileSource(const VolumeSpec& spec) const;

  // Constant after construction
  const NodeDriverOptions options_;
  NodeOps* const ops_;
  const std::string state_file_;

  mutable Mutex mu_;
  // State below is protected by mu_
  NodeState state_ GUARDED_BY(mu_);
};

}  // namespace tierfs::csi
