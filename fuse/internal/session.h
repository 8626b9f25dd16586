// fuse/internal/session — the FUSE session of one mount: the one place that owns the /dev/fuse
// descriptor (through libfuse's fuse_session, which opened it at mount), the custom I/O on it
// (passthrough, fuse/internal/kernel_protocol.h), the stop signals, and the loop with its
// supervisor. Everything the kernel connection's lifetime depends on is here, and so is a live
// restart's (fuse/FORMAT.md, "Handover"): HandOver gives the descriptor and the session's state
// to a new daemon, whose Adopt takes them.
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
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/fd.h"
#include "base/mutex.h"
#include "base/result.h"
#include "base/status.h"
#include "fuse/fuse_server.h"
#include "fuse/internal/context.h"
#include "fuse/internal/handover.h"

namespace tierfs::fuse_internal {

using HandOverHooks = FuseServer::HandOverHooks;

class Session {
 public:
  // Creates the session serving `ctx` (its userdata, not owned, outliving the session) with the
  // libfuse options `options` asks for, installs the signal handlers (see FuseServer::Mount),
  // mounts at ctx->mountpoint and, with ctx->passthrough_wanted, puts the custom I/O on the
  // mounted descriptor. Sets ctx->se.
  static Result<std::unique_ptr<Session>> Mount(const FuseOptions& options, Context* ctx);
  // Serves the connection `state` describes on `fd`, another daemon's (a live restart): creates
  // the session as Mount does but mounts nothing, and answers the kernel's INIT again to libfuse
  // (Context::synthetic_init). InvalidArgument, naming each, when a setting fixed for the life of
  // the connection differs from the running daemon's, or the INIT reply would (the new
  // configuration cannot apply to the live mount). Sets ctx->se.
  static Result<std::unique_ptr<Session>> Adopt(const FuseOptions& options, Context* ctx,
                                                UniqueFd fd, const HandoverState& state);

  // Hands the connection to a new daemon, from any thread while Run() serves (see
  // FuseServer::HandOver): parks the readers and waits up to `pause_limit` for the requests in
  // flight to be answered (Unavailable if they are not; the session serves on), starts the new
  // daemon with one end of a socket pair, sends it the descriptor and the state, and waits up to
  // `start_limit` for its "ok"; then hooks.release, "go", and up to kHandoverServeLimit for its
  // "serving". Then the session ends (Run returns; the mount stays) and the new daemon's pid is
  // returned. A new daemon that fails after the release is replaced by hooks.restore's
  // Filesystem, given back the tables. One handover at a time.
  Result<int> HandOver(const HandOverHooks& hooks, std::chrono::nanoseconds pause_limit,
                       std::chrono::nanoseconds start_limit);
  bool handed_over() const { return handed_over_.load(); }

  // Sends the state (HandoverState, fuse/FORMAT.md "Crash resume") on `channel` once the kernel
  // has initialised the connection, with the /dev/fuse descriptor on the first message, and
  // again before any reply that hands the kernel an inode or a handle the last state lacks
  // (Context::LogState), until Run returns or a send fails. Call before Run.
  void LogStateTo(int channel);
  static constexpr std::chrono::milliseconds kStateLogPeriod{10};
  static constexpr int kStateLogBuffer = 16 << 20;
  // Asks the kernel to send again the requests a daemon of this connection read and never
  // answered (FUSE_NOTIFY_RESEND): a daemon that took the mount over after a crash. False where
  // the kernel cannot (before Linux 6.9).
  bool AskResend();

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
  // HandOver's parts once the readers are parked.
  struct Successor {
    int pid = 0;
    UniqueFd channel;
    // Ends (SIGKILL) and reaps it; how it had ended by itself (" (it exited with status 1)").
    std::string End();
  };
  // The handover state: the connection's INIT and settings, the mount's history and io table,
  // with `fs` (the tables, or an update of them).
  HandoverState Snapshot(FilesystemState fs) const;
  std::vector<KernelIoRec> KernelIoRecords() const;
  // Starts the new daemon, sends it the descriptor and `state`, and waits for its "ok".
  Status StartSuccessor(const HandoverState& state,
                        const std::function<Result<int>(int channel)>& start,
                        std::chrono::nanoseconds start_limit, Successor* next);
  // hooks.release, "go", and the wait for "serving"; on failure hooks.restore and `state`'s
  // tables back (or, if that fails too, the session ends).
  Status Release(const HandOverHooks& hooks, const HandoverState& state, Successor* next);

  // Constant after construction.
  const FuseOptions options_;
  Context* const ctx_;
  fuse_session* const se_;
  // The stop pipe: SIGINT/SIGTERM and the loop's end write a byte, the supervisor waits on it.
  const UniqueFd stop_read_;
  const UniqueFd stop_write_;

  bool mounted_ = true;                 // the calling thread's (Adopt: from Run on)
  std::atomic<bool> detached_{false};   // the drain detached the mount
  std::atomic<bool> loop_done_{false};  // fuse_session_loop_mt returned
  pthread_t loop_thread_{};             // the thread running the loop (Run's caller)
  bool adopted_ = false;                // Adopt: libfuse did not mount, and cannot unmount
  std::atomic<bool> handed_over_{false};
  std::mutex handover_mu_;  // one HandOver at a time
  // LogStateTo's thread (stopped and joined by Run's end) and the log: what was last sent.
  std::jthread state_log_;
  // Sends the state if an inode or a handle was handed out since the last one sent (the first
  // time, with the descriptor).
  void SendState() EXCLUDES(log_mu_);
  // Tells the supervisor which daemon takes the mount over in a live restart (`pid`), or that
  // the handover failed (0). Whether it was sent (false: no supervisor).
  bool LogSuccessor(int pid) EXCLUDES(log_mu_);
  Mutex log_mu_;
  int log_channel_ GUARDED_BY(log_mu_) = -1;  // -1: none, or the supervisor is gone
  bool log_first_ GUARDED_BY(log_mu_) = true;
  uint64_t log_sent_ GUARDED_BY(log_mu_) = 0;  // TablesVersion of the last state sent
  // Where the next update starts (the last message's next_ino and next_handle), the records of
  // the last whole state and of the updates sent since.
  InodeId log_next_ino_ GUARDED_BY(log_mu_) = 0;
  uint64_t log_next_handle_ GUARDED_BY(log_mu_) = 0;
  size_t log_whole_records_ GUARDED_BY(log_mu_) = 0;
  size_t log_update_records_ GUARDED_BY(log_mu_) = 0;
  static constexpr size_t kLogWholeMin = 4096;
};

}  // namespace tierfs::fuse_internal
