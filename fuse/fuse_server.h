// fuse — the libfuse3 low-level adapter. The one public header of the module (conventions C2).
//
// FuseServer mounts a Filesystem through /dev/fuse and serves the kernel's requests with
// libfuse's multi-threaded loop. Handlers are thin (C5): each translates the request into one call
// on the Filesystem (taken from fuse_req_userdata, never a global) and replies exactly once.
// Only fuse/fuse_server.cc includes fuse_lowlevel.h; nothing here exposes FUSE types.
//
// The mount is read-only: every write operation gets EROFS.
//
// Thread-safety: Mount/Run/Unmount/destructor are called from one thread (the daemon's main
// thread); the handlers run on libfuse's worker threads and only touch the (thread-safe)
// Filesystem.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/status.h"

struct fuse_session;

namespace tierfs {

class Filesystem;

struct FuseOptions {
  // libfuse worker threads (fuse_loop_cfg_set_max_threads). Each blocks during a fetch, so this
  // bounds the concurrent reads that reach the cache.
  int max_threads = 16;
  // One /dev/fuse fd per worker thread (less contention on the device).
  bool clone_fd = true;
  // -o allow_other: other users (the training job's) may use the mount. Off by default: only
  // the mounting user can. Needs user_allow_other in /etc/fuse.conf when not mounting as root.
  bool allow_other = false;
  // -o default_permissions: the kernel checks the mode bits and owner (FilesystemOptions) itself.
  // daemon/ turns it on with allow_other unless told otherwise.
  bool default_permissions = false;
  // "tierfs:SOURCE", shown by mount(8) and df(1). Subtype is always "tierfs" (type fuse.tierfs).
  std::string fsname = "tierfs";
  // Further -o options passed to libfuse as they are ("nodev", "noatime", "auto_unmount", ...).
  std::vector<std::string> extra_options;
  // Kernel cache lifetimes of entries, attributes and negative entries. daemon/ sets all three
  // from metadata_ttl; kForever becomes one year.
  std::chrono::nanoseconds entry_timeout = std::chrono::seconds(60);
  std::chrono::nanoseconds attr_timeout = std::chrono::seconds(60);
  std::chrono::nanoseconds negative_timeout = std::chrono::seconds(60);
  // Largest read request and kernel readahead (the kernel may lower both).
  uint32_t max_read = 1U << 20;
  uint32_t max_readahead = 1U << 20;
  // libfuse debug output (every request) through the fuse logger.
  bool debug = false;
};

// Where a Status is being turned into an errno: xattr operations map NotFound to ENODATA.
enum class ErrnoContext { kDefault, kXattr };

// The one Status → errno function of tierfs (conventions C4). Positive errno values.
int ToErrno(const Status& status, ErrnoContext context = ErrnoContext::kDefault);

// A kernel cache timeout in seconds for `d`; kForever and anything beyond a year → one year.
double TimeoutSeconds(std::chrono::nanoseconds d);

class FuseServer {
 public:
  // Creates the FUSE session with `options`, installs the signal handlers (SIGINT, SIGTERM,
  // SIGHUP end Run()) and mounts at `mountpoint`. When this returns OK the mount is in place: the
  // kernel queues requests until Run() serves them. `fs` is not owned and must outlive the server.
  static Result<std::unique_ptr<FuseServer>> Mount(const FuseOptions& options, Filesystem* fs,
                                                   const std::string& mountpoint);
  // Unmounts if still mounted and destroys the session.
  ~FuseServer();
  FuseServer(const FuseServer&) = delete;
  FuseServer& operator=(const FuseServer&) = delete;

  // Serves requests on max_threads workers until the file system is unmounted (fusermount3 -u,
  // umount) or a signal arrives. OK on either; an error only if the loop failed.
  Status Run();

  // Unmounts now (idempotent). Run() then returns.
  void Unmount();

  struct Context;  // opaque: what the handlers get from fuse_req_userdata

 private:
  FuseServer(const FuseOptions& options, std::unique_ptr<Context> ctx, fuse_session* se,
             std::string mountpoint);

  const FuseOptions options_;
  const std::unique_ptr<Context> ctx_;
  fuse_session* const se_;
  const std::string mountpoint_;
  bool mounted_ = true;
};

}  // namespace tierfs
