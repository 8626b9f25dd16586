// `tierfs mount` (daemon/mount_cli.h): the checks before the mount, daemonizing, and serving.

#include "daemon/mount_cli.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "base/fd.h"
#include "base/logging.h"
#include "base/version.h"
#include "daemon/components.h"
#include "daemon/exit_codes.h"
#include "daemon/host_limits.h"
#include "daemon/log_control.h"
#include "daemon/memory_limit.h"
#include "daemon/mounts.h"
#include "daemon/notify.h"
#include "daemon/restart.h"
#include "daemon/supervisor.h"

namespace tierfs {
namespace {

// A start-up failure: the exit code and the message for the user.
struct Failure {
  int code = kExitRuntime;
  std::string message;
};

// Reports the outcome of the start-up to the waiting parent (when daemonized).
class StartupPipe {
 public:
  explicit StartupPipe(UniqueFd fd) : fd_(std::move(fd)) {}
  void Report(const std::string& msg) {
    if (fd_.get() < 0) return;
    size_t off = 0;
    while (off < msg.size()) {
      ssize_t n = write(fd_.get(), msg.data() + off, msg.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    fd_.Reset();  // one report only
  }
  void Ok() { Report("OK\n"); }
  void Fail(const Failure& f) { Report(fmt::format("ERR {} {}\n", f.code, f.message)); }

 private:
  UniqueFd fd_;
};

// Blocks SIGINT, SIGTERM and SIGHUP, or unblocks SIGINT and SIGTERM: SIGHUP stays blocked in
// every thread and is taken by the HupReopener's sigwait (log reopen), never by the FUSE loop.
void SetSignalsBlocked(bool blocked) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (blocked) sigaddset(&set, SIGHUP);
  pthread_sigmask(blocked ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

void DetachStdio() {
  int fd = open("/dev/null", O_RDWR);
  if (fd < 0) return;
  dup2(fd, STDIN_FILENO);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  if (fd > STDERR_FILENO) close(fd);
}

// Raises the soft limit on open files to the hard limit. The daemon's descriptors serve block
// files, origin connections and metrics clients at once, and the usual soft default (1024) is a
// limit meant for select(2), which tierfs does not use; the hard limit is what the admin (or
// systemd's LimitNOFILE) granted.
void RaiseOpenFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t soft = rl.rlim_cur;
  if (soft >= rl.rlim_max) {
    Logger(Module::kDaemon).info("open files: at most {}", soft);
    return;
  }
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    Logger(Module::kDaemon)
        .warn("open files: cannot raise the soft limit {} to the hard limit {}: {}", soft,
              rl.rlim_max, std::strerror(errno));
    return;
  }
  Logger(Module::kDaemon)
      .info("open files: at most {} (soft limit raised from {})", rl.rlim_max, soft);
}

// A failed start-up: logged, told to systemd and the waiting parent; exit 1.
int StartupFailed(const Status& s, StartupPipe* pipe, Components* c) {
  Logger(Module::kDaemon).error("{}", s.ToString());
  NotifyStatus("mount failed: " + s.ToString());
  pipe->Fail({kExitRuntime, s.ToString()});
  c->Shutdown();
  return kExitRuntime;
}

// `o` for a daemon that serves a live mount (taken over, or taken back after a failed handover):
// no listing of the origin first; the mount worked, and an origin that does not answer for a
// moment must not end it.
DaemonOptions LiveMountOptions(const DaemonOptions& o) {
  DaemonOptions build = o;
  build.probe_origin = false;
  return build;
}

// A live restart's new daemon (daemon/restart.h): takes the mount over from the daemon at the
// other end of `channel`, waits for it to release the cache directory, builds the components and
// gives the server their Filesystem. Until the server is attached, a failure here leaves (or
// gives back) the mount to the old daemon.
Status TakeOverMount(const DaemonOptions& o, const FuseOptions& fuse_options, int channel,
                     Components* c) {
  const UniqueFd owned(channel);
  auto server = FuseServer::TakeOver(fuse_options, o.mountpoint, channel, std::chrono::seconds(30));
  if (!server.ok()) return server.status();
  Logger(Module::kDaemon)
      .info("took {} over from pid {}; waiting for it to release the cache", o.mountpoint,
            getppid());
  TIERFS_RETURN_IF_ERROR((*server)->AwaitRelease(std::chrono::minutes(1)));
  TIERFS_RETURN_IF_ERROR(BuildComponents(LiveMountOptions(o), c));
  TIERFS_RETURN_IF_ERROR((*server)->Attach(c->fs.get()));
  c->server = std::move(*server);
  return Status::OK();
}

// Builds the components and mounts (or, with `channel` >= 0, takes the mount over).
Status BuildAndMount(const DaemonOptions& o, int channel, DaemonLogControl* control,
                     Components* c) {
  FuseOptions fuse_options = o.fuse;
  if (channel >= 0) {
    if (!o.metrics_address.empty()) fuse_options.metrics = &c->registry;
    TIERFS_RETURN_IF_ERROR(TakeOverMount(o, fuse_options, channel, c));
    c->fs->AttachDaemonControl(control);
    return Status::OK();
  }
  TIERFS_RETURN_IF_ERROR(BuildComponents(o, c));
  // Checked again right before mounting: building may have taken a while.
  TIERFS_RETURN_IF_ERROR(CheckMountpoint(o.mountpoint, o.allow_nonempty));
  NotifyStatus(fmt::format("mounting {} at {}", o.source, o.mountpoint));
  c->fs->AttachDaemonControl(control);
  if (c->metrics_server) fuse_options.metrics = &c->registry;
  TIERFS_ASSIGN_OR_RETURN(c->server, FuseServer::Mount(fuse_options, c->fs.get(), o.mountpoint));
  return Status::OK();
}

// The supervisor at the other end of the state log `fd`: the process that made the socket pair
// (a daemon a live restart started inherits its predecessor's end). 0 if unknown.
int SupervisorPid(int fd) {
  struct ucred peer {};
  socklen_t len = sizeof(peer);
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 ? peer.pid : 0;
}

// A supervised daemon's part of crash resume (daemon/supervisor.h): a daemon that resumes after
// a crash asks the kernel for the requests the dead one never answered; each logs its tables to
// the supervisor.
void JoinSupervision(const Supervision& supervision, bool takeover, FuseServer* server,
                     DaemonLogControl* control) {
  if (takeover && supervision.resuming) {
    server->ResumeAfterCrash(supervision.resumes);
  } else {
    server->CountCrashResumes(supervision.resumes);
  }
  server->LogStateTo(supervision.fd);
  control->SetSupervision(SupervisorPid(supervision.fd), supervision.resumes);
}

// Serves the mount of `c` until it is unmounted or handed over, with `tierfs restart` listening;
// the exit code.
int RunLoop(const DaemonOptions& o, Components* c, DaemonLogControl* control,
            const Supervision& supervision) {
  spdlog::logger& log = Logger(Module::kDaemon);
  // `tierfs restart` (daemon/restart.h); the daemon serves on without it if it cannot listen.
  // Its hooks run on the listener's thread while this one waits in Run(), and touch `c` only
  // while the session is paused.
  FuseServer* const server = c->server.get();
  auto release = [c, &log] {
    log.info("restart: stats before the handover: {} {}", c->cache->StatsText(),
             c->fs->StatsText());
    std::unique_ptr<FuseServer> keep = std::move(c->server);
    c->Shutdown();  // the cache directory's lock and the metrics port, for the new daemon
    c->server = std::move(keep);
  };
  auto restore = [&o, c, control]() -> Result<Filesystem*> {
    TIERFS_RETURN_IF_ERROR(BuildComponents(LiveMountOptions(o), c));
    c->fs->AttachDaemonControl(control);
    return c->fs.get();
  };
  auto restart =
      RestartListener::Start(server, o.fuse.shutdown_grace, release, restore, supervision);
  if (!restart.ok()) log.warn("no live restart: {}", restart.status().ToString());
  SetSignalsBlocked(false);
  Status run = c->server->Run();
  SetSignalsBlocked(true);
  if (restart.ok()) restart->reset();
  int code = kExitOk;
  if (!run.ok()) {
    log.error("fuse loop: {}", run.ToString());
    code = kExitRuntime;
  }
  if (c->server->handed_over()) {
    log.info("{} handed over to the new daemon; stopping", o.mountpoint);
  } else {
    NotifyStopping(fmt::format("{} unmounted; syncing the cache and stopping", o.mountpoint));
    if (c->metrics_server) c->metrics_server->SetHealth(false, "stopping: the mount has ended");
    if (c->cache && c->fs)
      log.info("stats at exit: {} {}", c->cache->StatsText(), c->fs->StatsText());
  }
  return code;
}

// The mount proper, in the process that will serve it. `pipe` reports the outcome to a waiting
// parent (or does nothing in the foreground); `channel` >= 0: take the mount over from the
// daemon at its other end (daemon/restart.h). Returns the exit code.
int ServeMount(const DaemonOptions& o, StartupPipe* pipe, int channel, Supervision supervision) {
  spdlog::logger& log = Logger(Module::kDaemon);
  // Before any thread exists. Cache blocks are mappings of their own (tiercache/block.cc). For
  // the other large buffers (libfuse's request buffers, hedged-GET copies, listings) a fixed
  // mmap threshold keeps glibc from raising it after the first large free and carving them from
  // the arenas instead, where freed memory fragments and is not returned; and a few arenas
  // rather than 8 per core bound what the many short-lived small allocations of the FUSE,
  // prefetch and HTTP threads can strand.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_ARENA_MAX, 4);
  // Signals stay blocked in every thread the components start; only the FUSE loop's thread
  // takes SIGINT/SIGTERM (fuse_set_signal_handlers) so the loop wakes up and exits. SIGHUP goes
  // to `hup`, which reopens the log file.
  SetSignalsBlocked(true);
  HupReopener hup;
  // Outlives `c` (user.tierfs.log_level).
  DaemonLogControl control(o.cache_dir, std::string(Version()));
  log.info("tierfs {} starting: {}", Version(), DescribeOptions(o));
  RaiseOpenFileLimit();
  // A daemon taking a live mount over tells systemd nothing: the unit is active, and its main
  // process stays the supervisor, or becomes this daemon when the one it replaces names it
  // (MAINPID) once it serves.
  const bool takeover = channel >= 0;
  if (!takeover) {
    NotifyStatus(
        fmt::format("starting: opening the cache at {} and listing {}", o.cache_dir, o.source));
  }
  Components c;
  if (Status s = BuildAndMount(o, channel, &control, &c); !s.ok()) {
    return StartupFailed(s, pipe, &c);
  }
  if (supervision.fd >= 0) JoinSupervision(supervision, takeover, c.server.get(), &control);
  const FuseServer::History history = c.server->history();
  control.SetMountHistory(history.mounted_at_ns, history.restarts);
  log.info("serving {} at {}", o.source, o.mountpoint);
  // The mount is in place (the kernel queues requests until Run() serves them): the waiting
  // parent and systemd (Type=notify) learn it at the same point.
  pipe->Ok();
  // Under a supervisor, it stays the unit's main process (a crash of this one is its to mend).
  if (!takeover) {
    NotifyReady(fmt::format("serving {} at {}", o.source, o.mountpoint),
                supervision.fd >= 0 ? getppid() : getpid());
  }
  if (c.metrics_server) {
    c.metrics_server->SetHealth(true, fmt::format("serving {} at {}", o.source, o.mountpoint));
  }
  if (!o.foreground) {
    DetachStdio();
    if (chdir("/") != 0) log.warn("chdir /: {}", std::strerror(errno));
  }
  const int code = RunLoop(o, &c, &control, supervision);
  c.Shutdown();
  log.info("tierfs stopped");
  spdlog::shutdown();
  return code;
}

// How a child that closed the start-up pipe without a report ended (it has exited, or is about
// to: waited for).
std::string ChildEnd(pid_t pid) {
  int status = 0;
  pid_t r;
  while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (r != pid) return fmt::format("the daemon (pid {}) ended", pid);
  if (WIFSIGNALED(status)) {
    return fmt::format("the daemon (pid {}) was killed by signal {} ({})", pid, WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  }
  return fmt::format("the daemon (pid {}) exited with status {}", pid, WEXITSTATUS(status));
}

// Forks; the parent waits for the child's start-up report and returns its exit code. The child
// returns -1 from here with *child_pipe set. `log` names where the child logs.
int Daemonize(UniqueFd* child_pipe, pid_t* child_pid, const std::string& log) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "tierfs: pipe: %s\n", std::strerror(errno));
    return kExitRuntime;
  }
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "tierfs: fork: %s\n", std::strerror(errno));
    return kExitRuntime;
  }
  if (pid == 0) {
    read_end.Reset();
    setsid();
    *child_pipe = std::move(write_end);
    return -1;
  }
  write_end.Reset();
  *child_pid = pid;
  std::string msg;
  char buf[4096];
  for (;;) {
    ssize_t n = read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    msg.append(buf, static_cast<size_t>(n));
  }
  read_end.Reset();
  if (msg.rfind("OK", 0) == 0) return kExitOk;
  if (msg.rfind("ERR ", 0) == 0) {
    int code = std::atoi(msg.c_str() + 4);
    size_t sp = msg.find(' ', 4);
    std::string text = sp == std::string::npos ? msg : msg.substr(sp + 1);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    std::fprintf(stderr, "tierfs: %s\n", text.c_str());
    return code > 0 ? code : kExitRuntime;
  }
  // Its own messages, if it could write any, went to the terminal (stderr is detached only once
  // the mount is ready) and to the log.
  std::fprintf(stderr, "tierfs: %s before the mount was ready (its log: %s)\n",
               ChildEnd(pid).c_str(), log.c_str());
  return kExitRuntime;
}

bool UserAllowOtherConfigured() {
  std::ifstream in("/etc/fuse.conf");
  std::string line;
  while (std::getline(in, line)) {
    size_t start = line.find_first_not_of(" \t");
    if (start != std::string::npos && line.compare(start, 16, "user_allow_other") == 0) return true;
  }
  return false;
}

// What `tierfs mount` checks about the place and the host before anything is opened: the mount
// point is no mount point and empty (unless -o nonempty); the memory budgets fit the host's
// memory; an L2 above the cache file system is only warned about on stderr (the free-space
// floor, cache.l2_min_free, bounds it).
Status CheckMountpointAndSizes(const DaemonOptions& o) {
  TIERFS_RETURN_IF_ERROR(CheckMountpoint(o.mountpoint, o.allow_nonempty));
  const HostLimits host = ReadHostLimits(o.cache_dir);
  TIERFS_RETURN_IF_ERROR(CheckMemorySizes(o, host));
  if (o.l2.capacity_bytes > 0) {
    if (std::string w = L2SizeWarning(o.l2.capacity_bytes, o.cache_dir, host); !w.empty()) {
      std::fprintf(stderr, "tierfs mount: warning: %s\n", w.c_str());
    }
  }
  return Status::OK();
}

// MOUNTPOINT is a directory, and no stale mount. A FUSE mount whose daemon died (a crash,
// kill -9) is still mounted there. stat() says so (ENOTCONN) only while the kernel holds no
// attributes of its root: after a recent open of the root they are served from its cache, dead
// daemon or not. statfs() always asks the daemon, so it tells a dead one in both cases.
Status CheckMountpointUsable(const std::string& mountpoint) {
  struct stat st;
  struct statfs sfs;
  int stat_rc = stat(mountpoint.c_str(), &st);
  if (stat_rc == 0 && statfs(mountpoint.c_str(), &sfs) != 0 && errno == ENOTCONN) stat_rc = -1;
  if (stat_rc != 0) {
    const int err = errno;
    if (err == ENOTCONN) {
      return Status::InvalidArgument(
          fmt::format("MOUNTPOINT {} is a stale mount ({}: its daemon is gone); unmount it first: "
                      "fusermount3 -u {}",
                      mountpoint, std::strerror(err), mountpoint));
    }
    return Status::InvalidArgument(
        fmt::format("MOUNTPOINT {}: {}", mountpoint, std::strerror(err)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(fmt::format("MOUNTPOINT {} is not a directory", mountpoint));
  }
  return Status::OK();
}

// The credentials known before daemonizing (anonymous origin requests, L3 keys) and the
// permission options, with a warning on stderr where allow_other is not what it seems.
Status PrepareAccess(DaemonOptions* o) {
  // Credentials other than anonymous ones come from the credential chain, built by BuildComponents
  // once daemonized (it may start threads and talk to STS or IMDS).
  if (o->source_uri.scheme == SourceUri::Scheme::kS3 && o->no_sign_request) {
    o->origin.credentials = Credentials{};
    o->origin.credentials.anonymous = true;
  }
  TIERFS_RETURN_IF_ERROR(ResolveL3Credentials(o, RealGetEnv));
  TIERFS_RETURN_IF_ERROR(LoadL3Key(o));
  if (o->fuse.allow_other && getuid() != 0 && !UserAllowOtherConfigured()) {
    std::fprintf(stderr,
                 "tierfs mount: warning: allow_other needs user_allow_other in /etc/fuse.conf; "
                 "mounting for this user only\n");
    o->fuse.allow_other = false;
  }
  if (o->fuse.allow_other && !o->fuse.default_permissions) {
    std::fprintf(stderr,
                 "tierfs mount: warning: allow_other without default_permissions: every local "
                 "user can read every file, whatever fuse.file_mode/dir_mode say\n");
  }
  return Status::OK();
}

int Usage(const Status& s) {
  std::fprintf(stderr, "tierfs mount: %s\n", s.message().c_str());
  return kExitUsage;
}

// A live restart's new daemon (daemon/restart.h): started by the serving daemon, with its
// command line, in its place (no fork: the serving daemon is already detached, or the unit's).
int StartTakeover(const DaemonOptions& o, int channel) {
  LogOptions lo = o.log;
  if (!o.foreground && lo.destination.empty()) lo.destination = "syslog";
  std::string err;
  if (!ConfigureLogging(lo, &err)) {
    const Status s = Status::InvalidArgument("--log-file: " + err);
    FuseServer::RefuseTakeOver(channel, s);
    return Usage(s);
  }
  StartupPipe none{UniqueFd()};
  const Supervision supervision = InheritedSupervision();
  const UniqueFd supervisor(supervision.fd);  // closed at the end
  DaemonOptions served = o;
  if (supervision.fd >= 0) served.fuse.clone_fd = false;  // see SuperviseAndServe
  return ServeMount(served, &none, channel, supervision);
}

// A supervised mount's first process (daemon/supervisor.h): forks the serving daemon, which
// reports to the waiting parent through `startup` (daemonized) or to systemd (in the foreground,
// naming this process the unit's main one), and supervises it. The serving daemon reads
// /dev/fuse with one descriptor (no clone_fd): the requests a dying daemon read through its own
// clone descriptors would be failed (ECONNABORTED) as those close, not kept for the next one.
int SuperviseAndServe(DaemonOptions o, UniqueFd startup) {
  o.fuse.clone_fd = false;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    StartupPipe(std::move(startup)).Fail({kExitRuntime, "socketpair for the supervisor"});
    return kExitRuntime;
  }
  UniqueFd ours(pair[0]), theirs(pair[1]);
  const pid_t daemon = fork();
  if (daemon < 0) {
    StartupPipe(std::move(startup)).Fail({kExitRuntime, "fork of the serving daemon failed"});
    return kExitRuntime;
  }
  if (daemon == 0) {
    ours.Reset();
    StartupPipe pipe(std::move(startup));
    return ServeMount(o, &pipe, -1, Supervision{theirs.get(), 0, false});
  }
  theirs.Reset();
  startup.Reset();
  if (!o.foreground) {
    DetachStdio();
    if (chdir("/") != 0) Logger(Module::kDaemon).warn("chdir /: {}", std::strerror(errno));
  }
  Logger(Module::kDaemon)
      .info("supervisor (pid {}) of {}: serving daemon pid {}", getpid(), o.mountpoint, daemon);
  return Supervise(o.mountpoint, daemon, std::move(ours));
}

// Serves the checked options `o` in the foreground, or in a daemon once it reports the mount
// usable.
int StartServing(const DaemonOptions& o) {
  if (o.foreground) {
    LogOptions lo = o.log;  // stderr unless --log-file
    std::string err;
    if (!ConfigureLogging(lo, &err)) return Usage(Status::InvalidArgument("--log-file: " + err));
    if (o.supervise) return SuperviseAndServe(o, UniqueFd());
    StartupPipe none{UniqueFd()};
    return ServeMount(o, &none, -1, Supervision{});
  }
  // Open the log before forking so a bad --log-file is a usage error on the terminal.
  LogOptions lo = o.log;
  if (lo.destination.empty()) lo.destination = "syslog";
  std::string err;
  if (!ConfigureLogging(lo, &err)) return Usage(Status::InvalidArgument("--log-file: " + err));
  UniqueFd child_fd;
  pid_t child = -1;
  int rc = Daemonize(&child_fd, &child, lo.destination);
  if (rc == kExitOk) {
    std::printf("tierfs: mounted %s at %s (pid %d, cache %s, log %s)\n", o.source.c_str(),
                o.mountpoint.c_str(), static_cast<int>(child), o.cache_dir.c_str(),
                lo.destination.c_str());
  }
  if (rc >= 0) return rc;  // the parent (or fork failed)
  return SuperviseAndServe(o, std::move(child_fd));
}

}  // namespace

int RunMount(DaemonOptions o, const std::string& config_path, const MountFlags& flags) {
  // Everything the daemon creates (cache directories and files, the log file) is private to its
  // user unless a mode is given explicitly.
  ::umask(077);
  if (!config_path.empty()) {
    if (Status s = ApplyConfigFile(config_path, &o); !s.ok()) return Usage(s);
  }
  if (Status s = ApplyFlags(flags, &o); !s.ok()) return Usage(s);
  if (Status s = FinishOptions(&o, RealGetEnv); !s.ok()) return Usage(s);
  if (Status s = ApplyMemoryLimit(&o); !s.ok()) return Usage(s);
  if (const int channel = TakeoverChannel(); channel >= 0) {
    // A live restart: the mount point is the serving daemon's, paused (a stat of it would wait
    // for this daemon); the rest was checked when it was mounted, and is again as it is built.
    if (Status s = PrepareAccess(&o); !s.ok()) {
      FuseServer::RefuseTakeOver(channel, s);
      return Usage(s);
    }
    return StartTakeover(o, channel);
  }
  if (Status s = CheckMountpointUsable(o.mountpoint); !s.ok()) return Usage(s);
  if (Status s = CheckMountpointAndSizes(o); !s.ok()) return Usage(s);
  if (Status s = PrepareAccess(&o); !s.ok()) return Usage(s);
  return StartServing(o);
}

}  // namespace tierfs
