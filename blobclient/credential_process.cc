// credential_process: runs the profile's command and parses its JSON (see credentials.h).
//
// As the SDKs do, the command line goes to /bin/sh -c unchanged (it comes from the user's own
// config file; nothing else is spliced into it). Unlike a bare popen(): stdin is /dev/null, no
// descriptor of the daemon (FUSE device, LMDB, sockets) leaks into the child, the child runs in
// its own process group so a timeout kills whatever it started, stdout is bounded and stderr is
// kept only as a short excerpt for the error message.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "base/fd.h"
#include "blobclient/credentials.h"

extern char** environ;

namespace tierfs::blobclient {
namespace {

constexpr size_t kMaxStderr = 4096;

// The program's name for messages: the first word of the command (arguments may hold secrets).
std::string ProgramOf(const std::string& command) {
  size_t b = command.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = command.find_first_of(" \t", b);
  return command.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

std::string FirstLine(std::string s) {
  while (!s.empty() && (s.front() == '\n' || s.front() == '\r' || s.front() == ' ')) s.erase(0, 1);
  s = s.substr(0, s.find_first_of("\r\n"));
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return s;
}

// The child's stdout and stderr excerpt, as read until both pipes closed, the output grew too
// large, or the deadline passed.
struct Output {
  std::string out, err;
  bool too_big = false;
  bool timed_out = false;
};

// Starts `sh -c command` with stdin /dev/null, stdout and stderr into *out_r and *err_r, no other
// descriptor, default signal handling, in its own process group.
Result<pid_t> Spawn(const std::string& command, const std::string& what, UniqueFd* out_r,
                    UniqueFd* err_r) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Status::IOError(what + ": pipe: " + std::strerror(errno));
  }
  UniqueFd out_w(out_pipe[1]);
  *out_r = UniqueFd(out_pipe[0]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return Status::IOError(what + ": pipe: " + std::strerror(errno));
  }
  UniqueFd err_w(err_pipe[1]);
  *err_r = UniqueFd(err_pipe[0]);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_w.get(), 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGHUP);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::string sh = "sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::IOError(what + ": cannot start /bin/sh: " + std::strerror(rc));
  return pid;
}

// Reads both pipes until they close (stdout up to kMaxProcessOutput, stderr up to kMaxStderr),
// or until `deadline`.
Output ReadOutput(int out_fd, int err_fd, std::chrono::steady_clock::time_point deadline) {
  Output o;
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      o.timed_out = true;
      break;
    }
    pollfd p[2] = {{out_open ? out_fd : -1, POLLIN, 0}, {err_open ? err_fd : -1, POLLIN, 0}};
    int n = ::poll(p, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || p[i].revents == 0) continue;
      ssize_t got = ::read(p[i].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      std::string& dst = i == 0 ? o.out : o.err;
      const size_t cap = i == 0 ? kMaxProcessOutput : kMaxStderr;
      const size_t n_got = static_cast<size_t>(got);
      if (i == 0 && dst.size() + n_got > cap) o.too_big = true;
      if (dst.size() < cap) dst.append(buf, std::min(n_got, cap - dst.size()));
    }
    if (o.too_big) break;
  }
  return o;
}

// Waits for the child (until `deadline`, unless the output already failed) and returns its wait
// status; a child that does not end in time is killed with its process group.
int Reap(pid_t pid, std::chrono::steady_clock::time_point deadline, Output* o) {
  int wstatus = 0;
  bool reaped = false;
  // Both pipes closed: the child is ending (or closed them and lingers: still bounded).
  while (!o->timed_out && !o->too_big) {
    pid_t w = ::waitpid(pid, &wstatus, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) {
      reaped = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      o->timed_out = true;
      break;
    }
    ::usleep(5000);
  }
  if (!reaped) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
  }
  return wstatus;
}

class ProcessSource final : public CredentialSource {
 public:
  ProcessSource(std::string command, std::chrono::milliseconds timeout, std::string describe)
      : command_(std::move(command)), timeout_(timeout), describe_(std::move(describe)) {}

  Result<FetchedCredentials> Fetch() override {
    const std::string what = "credential_process '" + ProgramOf(command_) + "'";
    UniqueFd out_r, err_r;
    TIERFS_ASSIGN_OR_RETURN(const pid_t pid, Spawn(command_, what, &out_r, &err_r));
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    Output o = ReadOutput(out_r.get(), err_r.get(), deadline);
    const int wstatus = Reap(pid, deadline, &o);
    if (o.timed_out) {
      return Status::TimedOut(what + ": no answer within " + std::to_string(timeout_.count()) +
                              " ms (killed)");
    }
    if (o.too_big) {
      return Status::Corruption(what + ": output larger than " +
                                std::to_string(kMaxProcessOutput / 1024) + " KiB (killed)");
    }
    if (WIFSIGNALED(wstatus)) {
      return Status::Unavailable(what + " killed by signal " + std::to_string(WTERMSIG(wstatus)) +
                                 (o.err.empty() ? "" : ": " + FirstLine(o.err)));
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      return Status::Unavailable(what + " exited " + std::to_string(WEXITSTATUS(wstatus)) +
                                 (o.err.empty() ? "" : ": " + FirstLine(o.err)));
    }
    return ParseCredentialsJson(o.out, what, "SessionToken", /*require_version=*/true);
  }

  std::string Describe() const override { return describe_; }

 private:
  const std::string command_;
  const std::chrono::milliseconds timeout_;
  const std::string describe_;
};

}  // namespace

std::unique_ptr<CredentialSource> NewProcessSource(std::string command,
                                                   std::chrono::milliseconds timeout,
                                                   std::string describe) {
  return std::make_unique<ProcessSource>(std::move(command), timeout, std::move(describe));
}

}  // namespace tierfs::blobclient
