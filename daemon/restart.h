// daemon/restart — a live restart (`tierfs restart MOUNTPOINT`, the unit's ExecReload=): the
// serving daemon's side and the new daemon's start. docs/operations.md, "Upgrades", says how it
// is used; fuse/FORMAT.md, "Handover", what passes between the two daemons.
//
// The serving daemon listens on the abstract unix socket RestartSocketName(its pid). A request
// (from root or the daemon's own user: SO_PEERCRED) names the binary to start ("" = the one this
// daemon was started from, as it is installed now). FuseServer::HandOver then pauses the mount,
// starts that binary with this daemon's command line and TIERFS_TAKEOVER_FD naming one end of a
// socket pair, and passes it the /dev/fuse descriptor and the session's state. The new daemon
// (RunMount sees TIERFS_TAKEOVER_FD) checks them and answers; this one then releases its
// components (the cache directory's lock, the metrics port), the new one builds its own and
// serves, and this one exits; if the new one fails on the way, this one builds its components
// again and serves on. The answer to the request is one line: "ok PID" or "error MESSAGE".
//
// Thread-safety: RestartListener is created and destroyed by the daemon's main thread; its own
// thread serves the requests one at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/fd.h"
#include "base/result.h"

namespace tierfs {

class FuseServer;
class Filesystem;

// "\0tierfs/restart/PID": the abstract socket name of the daemon with `pid` (a leading NUL).
std::string RestartSocketName(int pid);

// The environment variable naming the descriptor of the new daemon's end of the socket pair.
inline constexpr const char* kTakeoverFdEnv = "TIERFS_TAKEOVER_FD";

// The descriptor kTakeoverFdEnv names (and removes from the environment), or -1 when this
// process was not started to take a mount over.
int TakeoverChannel();

// A supervised daemon's link to its supervisor (daemon/supervisor.h): its end of the state log,
// the mount's crash resumes so far, and whether this daemon was started to resume after a
// crash (not for a live restart). Passed to a daemon in the environment: TIERFS_SUPERVISOR_FD
// names the descriptor, TIERFS_CRASH_RESUMES the count, TIERFS_CRASH_RESUME=1 a resume.
struct Supervision {
  int fd = -1;  // -1: not supervised
  uint32_t resumes = 0;
  bool resuming = false;
};

// This process's Supervision from its environment (the variables removed; the descriptor made
// close-on-exec); fd -1 when it has none.
Supervision InheritedSupervision();

// Starts `binary` ("" = this process's own, as installed now) with this process's command line
// and environment, plus kTakeoverFdEnv naming `channel` (inherited) and, when `supervision.fd`
// >= 0, the supervision variables. Its pid.
Result<int> StartSuccessor(const std::string& binary, int channel,
                           const Supervision& supervision = {});

class RestartListener {
 public:
  // Listens for restart requests for `server` (not owned; must outlive the listener): each waits
  // up to `pause_limit` for the requests in flight (fuse.shutdown_grace). A listener that cannot
  // bind is an error the daemon logs and serves on without.
  // `release` and `restore` are the daemon's part of FuseServer::HandOver (HandOverHooks).
  // A supervised daemon passes its `supervision` on to the new one (the supervisor then
  // supervises it).
  static Result<std::unique_ptr<RestartListener>> Start(
      FuseServer* server, std::chrono::nanoseconds pause_limit, std::function<void()> release,
      std::function<Result<Filesystem*>()> restore, Supervision supervision = {});
  ~RestartListener();  // stops and joins the thread
  RestartListener(const RestartListener&) = delete;
  RestartListener& operator=(const RestartListener&) = delete;

 private:
  RestartListener(FuseServer* server, std::chrono::nanoseconds pause_limit,
                  std::function<void()> release, std::function<Result<Filesystem*>()> restore,
                  Supervision supervision, UniqueFd listen_fd, UniqueFd stop_read,
                  UniqueFd stop_write);
  void Loop();
  void Serve(int conn);

  // Constant after construction.
  FuseServer* const server_;
  const std::chrono::nanoseconds pause_limit_;
  const std::function<void()> release_;
  const std::function<Result<Filesystem*>()> restore_;
  const Supervision supervision_;
  const UniqueFd listen_fd_;
  const UniqueFd stop_read_;
  const UniqueFd stop_write_;
  std::jthread thread_;
};

}  // namespace tierfs
