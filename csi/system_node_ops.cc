// The real NodeOps: `tierfs mount` as a child process, mount(2)/umount2(2), /proc.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "base/fd.h"
#include "base/strings.h"
#include "csi/internal/daemon_text.h"
#include "csi/node_ops.h"

extern char** environ;

namespace tierfs::csi {
namespace {

using Clock = std::chrono::steady_clock;

// The variables that pick AWS credentials; dropped from a daemon's environment when the volume
// brings its own, so no node credential is mixed with them.
constexpr std::string_view kCredentialVars[] = {
    "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=",       "AWS_SESSION_TOKEN=",
    "AWS_PROFILE=",       "AWS_WEB_IDENTITY_TOKEN_FILE=", "AWS_ROLE_ARN="};

// The tierfs mount points of this mount namespace.
std::vector<std::string> TierfsMountPoints() {
  std::ifstream in("/proc/self/mountinfo");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseTierfsMountPoints(text);
}

std::string Normalize(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Fields 3 (state) and 22 (starttime) of /proc/PID/stat.
bool ReadProcStat(int64_t pid, char* state, uint64_t* start_time) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t rparen = text.rfind(')');
  if (rparen == std::string::npos) return false;
  std::istringstream ss(text.substr(rparen + 2));
  std::string field;
  for (int i = 3; i <= 22 && ss >> field; ++i) {
    if (i == 3) *state = field.empty() ? '?' : field[0];
    if (i == 22) return ParseDecimal(field, start_time);
  }
  return false;
}

// Waits up to `timeout` for `pid` to end (a pidfd works for processes that are not our children).
bool WaitGone(const ProcessId& p, std::chrono::milliseconds timeout,
              bool (*alive)(const ProcessId&)) {
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(p.pid), 0)));
  const auto deadline = Clock::now() + timeout;
  while (alive(p)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    if (pidfd.get() >= 0) {
      pollfd pfd{pidfd.get(), POLLIN, 0};
      ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    } else {
      ::usleep(20000);
    }
    // Reap it when it is our child (a daemon reparented to this process, e.g. as a container's
    // PID 1); ECHILD otherwise.
    ::waitpid(static_cast<pid_t>(p.pid), nullptr, WNOHANG);
  }
  return true;
}

bool ProcessAlive(const ProcessId& p) {
  if (p.pid <= 0) return false;
  char state = '?';
  uint64_t start = 0;
  if (!ReadProcStat(p.pid, &state, &start)) return false;
  if (state == 'Z' || state == 'X') return false;
  return p.start_time == 0 || start == p.start_time;
}

class SystemNodeOps final : public NodeOps {
 public:
  explicit SystemNodeOps(const SystemNodeOpsOptions& options) : options_(options) {}

  Result<ProcessId> StartDaemon(const DaemonLaunch& launch) override;

  Status StopDaemon(const std::string& mountpoint, const ProcessId& process) override {
    Status s = Unmount(mountpoint);
    const auto grace = std::chrono::seconds(options_.stop_timeout_seconds);
    if (WaitGone(process, grace, ProcessAlive)) return s;
    ::kill(static_cast<pid_t>(process.pid), SIGTERM);
    if (WaitGone(process, std::chrono::seconds(5), ProcessAlive)) return s;
    ::kill(static_cast<pid_t>(process.pid), SIGKILL);
    if (WaitGone(process, std::chrono::seconds(5), ProcessAlive)) return s;
    return Status::Internal(fmt::format("daemon pid {} does not exit after SIGKILL", process.pid));
  }

  bool Alive(const ProcessId& process) override { return ProcessAlive(process); }

  Status Bind(const std::string& from, const std::string& target, bool read_only) override {
    if (::mount(from.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return Status::FromErrno(errno, "bind mount " + from + " at " + target);
    }
    // A bind ignores flags other than MS_REC: a remount of the bind sets them.
    const unsigned long flags =
        MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (read_only ? MS_RDONLY : 0);
    if (::mount(nullptr, target.c_str(), nullptr, flags, nullptr) != 0) {
      Status s = Status::FromErrno(
          errno, "remount nosuid,nodev" + std::string(read_only ? ",ro " : " ") + target);
      ::umount2(target.c_str(), MNT_DETACH);
      return s;
    }
    return Status::OK();
  }

  Status Unmount(const std::string& path) override {
    if (::umount2(path.c_str(), UMOUNT_NOFOLLOW) == 0) return Status::OK();
    if (errno == EINVAL || errno == ENOENT) return Status::OK();  // not a mount point
    if (errno == EBUSY && ::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) {
      return Status::OK();
    }
    return Status::FromErrno(errno, "unmount " + path);
  }

  bool IsTierfsMount(const std::string& path) override {
    const std::string p = Normalize(path);
    for (const std::string& m : TierfsMountPoints()) {
      if (m == p) return true;
    }
    return false;
  }

  std::vector<std::string> TierfsMountsUnder(const std::string& dir) override {
    const std::string d = Normalize(dir) + "/";
    std::vector<std::string> out;
    for (const std::string& m : TierfsMountPoints()) {
      if (m.size() > d.size() && m.compare(0, d.size(), d) == 0) out.push_back(m);
    }
    return out;
  }

  Status MakeDirs(const std::string& path, uint32_t mode) override {
    for (size_t pos = 1; pos != std::string::npos;) {
      pos = path.find('/', pos + 1);
      const std::string part = path.substr(0, pos);
      if (::mkdir(part.c_str(), mode) != 0 && errno != EEXIST) {
        return Status::FromErrno(errno, "mkdir " + part);
      }
    }
    return Status::OK();
  }

  Status RemoveDir(const std::string& path) override {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return Status::OK();
    return Status::FromErrno(errno, "rmdir " + path);
  }

 private:
  // Runs argv with env; collects its output until it exits. -1 on timeout (killed).
  int RunCollect(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 std::string* output);

  const SystemNodeOpsOptions options_;
};

int SystemNodeOps::RunCollect(const std::vector<std::string>& argv,
                              const std::vector<std::string>& env, std::string* output) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -2;
  UniqueFd rd(fds[0]), wr(fds[1]);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t child = ::fork();
  if (child < 0) return -2;
  if (child == 0) {
    // The daemon starts with default signal handling: not this process's blocked SIGTERM/SIGINT
    // (main.cc waits for them in one thread) or its ignored signals (SIGPIPE; SIGINT/SIGQUIT when
    // a shell started it in the background), which exec would keep.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(wr.get(), 1);
    ::dup2(wr.get(), 2);
    ::syscall(SYS_close_range, 3, ~0U, 0);
    ::execvpe(cargv[0], cargv.data(), cenv.data());
    std::string msg =
        fmt::format("tierfs: Internal: cannot run {}: {}\n", argv[0], std::strerror(errno));
    (void)!::write(2, msg.data(), msg.size());
    ::_exit(127);
  }
  wr.Reset();
  ::fcntl(rd.get(), F_SETFL, O_NONBLOCK);
  const auto deadline = Clock::now() + std::chrono::seconds(options_.start_timeout_seconds);
  int status = 0;
  bool exited = false;
  char buf[4096];
  for (;;) {
    pollfd pfd{rd.get(), POLLIN, 0};
    ::poll(&pfd, 1, 100);
    ssize_t n;
    while ((n = ::read(rd.get(), buf, sizeof(buf))) > 0) output->append(buf, size_t(n));
    if (exited) break;
    // The daemon it leaves behind may hold the pipe a little longer: the exit of `tierfs mount`
    // ends the wait (one more read drains what it wrote).
    if (::waitpid(child, &status, WNOHANG) == child) {
      exited = true;
      continue;
    }
    if (Clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1;
    }
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Result<ProcessId> SystemNodeOps::StartDaemon(const DaemonLaunch& launch) {
  std::vector<std::string> argv = {options_.tierfs_binary,
                                   "mount",
                                   launch.source,
                                   launch.mountpoint,
                                   "--cache-dir=" + launch.cache_dir,
                                   "--log-file=" + launch.log_file,
                                   "--allow-other"};
  argv.insert(argv.end(), launch.flags.begin(), launch.flags.end());
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v(*e);
    bool drop = false;
    for (std::string_view c : kCredentialVars)
      drop = drop || (!launch.env.empty() && v.starts_with(c));
    if (!drop) env.emplace_back(v);
  }
  for (const auto& [k, v] : launch.env) env.push_back(k + "=" + v);

  std::string output;
  const int rc = RunCollect(argv, env, &output);
  ProcessId p;
  if (rc == 0) {
    std::ifstream lock(launch.cache_dir + "/lock");
    std::string pid_text;
    lock >> pid_text;
    uint64_t pid = 0;
    char state = '?';
    if (ParseDecimal(pid_text, &pid) && pid > 0 &&
        ReadProcStat(static_cast<int64_t>(pid), &state, &p.start_time)) {
      p.pid = static_cast<int64_t>(pid);
      if (IsTierfsMount(launch.mountpoint)) return p;
    }
  }
  // Nothing may stay behind: a mount made after all (a timeout) goes, and so does its daemon.
  if (IsTierfsMount(launch.mountpoint)) (void)Unmount(launch.mountpoint);
  if (p.pid > 0) (void)StopDaemon(launch.mountpoint, p);
  if (rc == -1) {
    return Status::Unavailable(fmt::format("the daemon did not report its mount ready within {}s",
                                           options_.start_timeout_seconds));
  }
  if (rc == 0) return Status::Internal("tierfs mount succeeded but its daemon was not found");
  if (rc == -2) return Status::Internal(fmt::format("fork/pipe: {}", std::strerror(errno)));
  return DaemonFailureStatus(rc, output);
}

}  // namespace

std::unique_ptr<NodeOps> NewSystemNodeOps(const SystemNodeOpsOptions& options) {
  return std::make_unique<SystemNodeOps>(options);
}

}  // namespace tierfs::csi
