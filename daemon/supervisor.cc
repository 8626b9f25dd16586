// The supervisor of a daemonized mount (daemon/supervisor.h).

#include "daemon/supervisor.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "base/logging.h"
#include "daemon/restart.h"
#include "fuse/fuse_server.h"

namespace tierfs {
namespace {

std::atomic<int> g_forward_signal{0};

extern "C" void OnSupervisorSignal(int sig) { g_forward_signal.store(sig); }

void InstallForwarding() {
  struct sigaction sa {};
  sa.sa_handler = OnSupervisorSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll returns EINTR
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    sigaction(sig, &sa, nullptr);
    sigaddset(&set, sig);
  }
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

// How a waitpid status reads in a log line.
std::string HowItEnded(int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  }
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

// The supervisor's view of its serving daemon.
struct Serving {
  pid_t pid = -1;
  UniqueFd channel;         // its state log
  bool log_failed = false;  // a message of the log could not be taken: the copy lacks records
  std::chrono::steady_clock::time_point since;
};

// Waits for `daemon` to end, keeping the copy of the state it logs (and the /dev/fuse
// descriptor, from its first message). Its waitpid status.
// Takes the next message of `daemon`'s state log into `state` (the /dev/fuse descriptor from the
// first one that carries it into *fuse_fd), waiting up to `wait`. False when there was none.
bool TakeLogMessage(Serving* daemon, FuseServer::LoggedState* state, UniqueFd* fuse_fd,
                    int wait_ms) {
  if (daemon->channel.get() < 0) return false;
  struct pollfd p = {daemon->channel.get(), POLLIN, 0};
  if (::poll(&p, 1, wait_ms) <= 0) return false;
  int fd = -1;
  const Status got = state->Receive(daemon->channel.get(), std::chrono::seconds(10), &fd);
  UniqueFd came(fd);
  if (!got.ok()) {
    // The daemon closed its end: it is ending (waitpid tells how), or it cannot log any more.
    if (got.code() != Status::Code::kUnavailable) {
      Logger(Module::kDaemon)
          .error("supervisor: the state log of pid {} failed ({}): a crash would end the mount",
                 daemon->pid, got.ToString());
      daemon->log_failed = true;
    }
    daemon->channel.Reset();
    return false;
  }
  if (came.get() >= 0 && fuse_fd->get() < 0) {
    *fuse_fd = std::move(came);
    Logger(Module::kDaemon).info("supervisor: holding the FUSE descriptor of pid {}", daemon->pid);
  }
  return true;
}

// Waits for `daemon` to end, keeping the copy of the state it logs. Its waitpid status, once
// every message it sent before is taken.
int Watch(Serving* daemon, FuseServer::LoggedState* state, UniqueFd* fuse_fd) {
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(daemon->pid, &status, WNOHANG);
    if (r < 0 && errno == ECHILD) {
      // Not ours to wait for (a live restart's daemon that was not adopted): it serves on
      // unsupervised.
      Logger(Module::kDaemon)
          .warn("supervisor: pid {} is not this supervisor's child; stopping", daemon->pid);
      return 0;
    }
    if (r == daemon->pid) {
      while (TakeLogMessage(daemon, state, fuse_fd, 0)) {
      }
      return status;
    }
    if (const int sig = g_forward_signal.exchange(0); sig != 0) {
      // SIGHUP (logrotate): this process reopens its log file too.
      if (sig == SIGHUP) {
        if (Status s = ReopenLogFile(); !s.ok()) {
          Logger(Module::kDaemon).error("supervisor: SIGHUP: {}", s.ToString());
        }
      }
      ::kill(daemon->pid, sig);
    }
    // The log is taken in batches: a daemon's message waits in the socket's buffer (sized for
    // it, Session::LogStateTo) instead of waking this process each time.
    ::poll(nullptr, 0, static_cast<int>(kLogDrainPeriod.count()));
    while (TakeLogMessage(daemon, state, fuse_fd, 0)) {
    }
  }
}

// Starts the installed binary to take the mount over from the dead daemon: the state and the
// descriptor as a live restart hands them over. The new daemon, or why not.
Result<Serving> Resume(const FuseServer::LoggedState& state, int fuse_fd, uint32_t resumes) {
  int handover[2], log_pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, handover) != 0) {
    return Status::FromErrno(errno, "socketpair");
  }
  UniqueFd ours(handover[0]), theirs(handover[1]);
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, log_pair) != 0) {
    return Status::FromErrno(errno, "socketpair");
  }
  Serving next;
  next.channel = UniqueFd(log_pair[0]);
  UniqueFd their_log(log_pair[1]);
  TIERFS_ASSIGN_OR_RETURN(next.pid, StartSuccessor("", theirs.get(),
                                                   Supervision{their_log.get(), resumes,
                                                               /*resuming=*/true}));
  theirs.Reset();
  their_log.Reset();
  if (Status s = state.HandTo(ours.get(), fuse_fd, std::chrono::seconds(60)); !s.ok()) {
    ::kill(next.pid, SIGKILL);
    int st = 0;
    while (::waitpid(next.pid, &st, 0) < 0 && errno == EINTR) {
    }
    return Status::Unavailable(
        fmt::format("the new daemon (pid {}) {}: {}", next.pid, HowItEnded(st), s.ToString()));
  }
  next.since = std::chrono::steady_clock::now();
  return next;
}

void DetachMountpoint(const std::string& mountpoint) {
  if (::umount2(mountpoint.c_str(), MNT_DETACH) == 0) return;
  Logger(Module::kDaemon)
      .error("supervisor: cannot unmount {}: {} (fusermount3 -u -z {})", mountpoint,
             std::strerror(errno), mountpoint);
}

}  // namespace

int Supervise(const std::string& mountpoint, pid_t daemon, UniqueFd channel) {
  spdlog::logger& log = Logger(Module::kDaemon);
  InstallForwarding();
  // A live restart's new daemon is the serving daemon's child: when that one exits, it becomes
  // ours to wait for.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    log.warn("supervisor: cannot adopt a live restart's daemon ({}): a restart ends supervision",
             std::strerror(errno));
  }
  Serving serving;
  serving.pid = daemon;
  serving.channel = std::move(channel);
  serving.since = std::chrono::steady_clock::now();
  FuseServer::LoggedState state;
  UniqueFd fuse_fd;
  int quick_deaths = 0;
  uint32_t resumes = 0;
  for (;;) {
    const int status = Watch(&serving, &state, &fuse_fd);
    const int successor = state.TakeSuccessor();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      if (successor > 0) {
        // A live restart: the new daemon (the old one's child, ours now: we are the subreaper)
        // logs on the same socket.
        log.info("supervisor: pid {} took {} over from pid {} (live restart)", successor,
                 mountpoint, serving.pid);
        serving.pid = successor;
        serving.since = std::chrono::steady_clock::now();
        serving.log_failed = false;
        quick_deaths = 0;  // a deliberate new daemon (often a new binary): counted afresh
        continue;
      }
      log.info("supervisor: the daemon (pid {}) ended; stopping", serving.pid);
      return 0;
    }
    if (fuse_fd.get() < 0 || state.empty()) {
      // It never served: the mount (if any) is its failure's, as without a supervisor.
      return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    if (serving.log_failed) {
      log.error(
          "supervisor: the daemon serving {} (pid {}) {}, and its state log had failed: unmounting "
          "{} (its readers get ENOTCONN)",
          mountpoint, serving.pid, HowItEnded(status), mountpoint);
      DetachMountpoint(mountpoint);
      return 1;
    }
    const bool quick = std::chrono::steady_clock::now() - serving.since < kSettleTime;
    quick_deaths = quick ? quick_deaths + 1 : 1;
    log.error("supervisor: the daemon serving {} (pid {}) {}; resuming the mount", mountpoint,
              serving.pid, HowItEnded(status));
    for (;;) {
      if (quick_deaths > kMaxQuickDeaths) {
        log.error(
            "supervisor: the daemon serving {} died {} times in a row, each within {} s of its "
            "start; "
            "unmounting {} (its readers get ENOTCONN)",
            mountpoint, quick_deaths, kSettleTime.count(), mountpoint);
        DetachMountpoint(mountpoint);
        return 1;
      }
      if (quick_deaths > 1) {
        const auto wait = std::chrono::milliseconds(250) * (1 << std::min(quick_deaths - 2, 6));
        log.warn("supervisor: waiting {} ms before the next start", wait.count());
        std::this_thread::sleep_for(wait);
      }
      Result<Serving> next = Resume(state, fuse_fd.get(), resumes + 1);
      if (next.ok()) {
        serving = std::move(*next);
        ++resumes;
        log.info("supervisor: pid {} serves {} (crash resume {})", serving.pid, mountpoint,
                 resumes);
        break;
      }
      log.error("supervisor: resuming {} failed: {}", mountpoint, next.status().ToString());
      ++quick_deaths;
    }
  }
}

}  // namespace tierfs
