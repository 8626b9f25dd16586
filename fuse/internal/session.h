// fuse/internal/session — the FUSE session of one mount: the one place that owns the /dev/fuse
// descriptor (through libfuse's fuse_session, which opened it at mount), the custom I/O on it
// (passthrough, fuse/internal/kernel_protocol.h), the stop signals, and the loop with its
// supervisor. Everything the kernel connection's lifetime depends on is here: handing the
// descriptor and this state to another process would start and end in this class.
//
// Stopping (Drain). libfuse's SIGINT/SIGTERM handler would end the loop at once and leave the
// requests in flight to the kernel's ENOTCONN; ours only wakes a supervisor thread through a
// pipe. It stops new network-bound work (EIO at once), waits up to FuseOptions::shutdown_grace
// for the dispatched requests, cancels the rest "for shutdown" (their Cancelled maps to EIO, not
// EINTR, see RequestToken::CancelForShutdown), detaches the mount, lets the loop answer for a
// moment more while open files are closed, then ends the loop (fuse_session_exit, and
// pthread_kill to wake its sem_wait).
//
// Thread-safety: Mount, Run, Unmount and the destructor are called from one thread (the daemon's
// main thread); the signal handler and the supervisor thread touch only atomics and the pipe.
// One session per process (the signal handlers are the process's).
#pragma once

#include <pthread.h>

#include <atomic>
#include <memory>
#include <string>

#include "base/fd.h"
#include "base/result.h"
#include "base/status.h"
#include "fuse/fuse_server.h"
#include "fuse/internal/context.h"

namespace tierfs::fuse_internal {

class Session {
 public:
  // Creates the session serving `ctx` (its userdata, not owned, outliving the session) with the
  // libfuse options `options` asks for, installs the signal handlers (see FuseServer::Mount),
  // mounts at ctx->mountpoint and, with ctx->passthrough_wanted, puts the custom I/O on the
  // mounted descriptor. Sets ctx->se.
  static Result<std::unique_ptr<Session>> Mount(const FuseOptions& options, Context* ctx);
  // Unmounts if still mounted, puts the signal handlers back and destroys the session (closing
  // the descriptor).
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Serves requests on max_threads workers until the file system is unmounted or a stop signal's
  // drain ended the loop (FuseServer::Run). REQUIRES: ctx->remote is set.
  Status Run();

  // Unmounts now (idempotent).
  void Unmount();

 private:
  Session(const FuseOptions& options, Context* ctx, fuse_session* se, UniqueFd stop_read,
          UniqueFd stop_write);

  // The supervisor thread of Run(): waits for a stop signal (then Drain) or the session's end.
  void Supervise();
  // The orderly stop after SIGINT/SIGTERM `sig` (FuseOptions::shutdown_grace).
  void Drain(int sig);
  void WakeSupervisor();

  // Constant after construction.
  const FuseOptions options_;
  Context* const ctx_;
  fuse_session* const se_;
  // The stop pipe: SIGINT/SIGTERM and the loop's end write a byte, the supervisor waits on it.
  const UniqueFd stop_read_;
  const UniqueFd stop_write_;

  bool mounted_ = true;                 // the calling thread's
  std::atomic<bool> detached_{false};   // the drain detached the mount
  std::atomic<bool> loop_done_{false};  // fuse_session_loop_mt returned
  pthread_t loop_thread_{};             // the thread running the loop (Run's caller)
};

}  // namespace tierfs::fuse_internal
