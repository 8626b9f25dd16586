// A live restart, the serving daemon's side (daemon/restart.h).

#include "daemon/restart.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
#include <vector>

#include "base/logging.h"
#include "daemon/notify.h"
#include "fuse/fuse_server.h"

extern char** environ;

namespace tierfs {
namespace {

// The descriptor number the new daemon finds its end of the socket pair at.
constexpr int kChildChannelFd = 3;
// How long the new daemon may take to check the handover and answer.
constexpr auto kStartLimit = std::chrono::seconds(60);

socklen_t AbstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr->sun_path));
  std::memcpy(addr->sun_path, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n);
}

// This process's command line, as it was started.
std::vector<std::string> OwnCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return args;
}

// The path this process's binary was started from: where a package upgrade installs the new one
// (the old file, replaced, reads "PATH (deleted)").
std::string OwnBinary() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  std::string path(buf, static_cast<size_t>(n));
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.ends_with(kDeleted)) path.resize(path.size() - kDeleted.size());
  return path;
}

// Reads one request line (at most 4 KiB) within a few seconds.
std::string ReadLine(int fd) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  char c;
  while (line.size() < 4096 && std::chrono::steady_clock::now() < deadline) {
    struct pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::read(fd, &c, 1);
    if (n <= 0 || c == '\n') break;
    line.push_back(c);
  }
  return line;
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

std::string RestartSocketName(int pid) {
  return std::string(1, '\0') + fmt::format("tierfs/restart/{}", pid);
}

namespace {

// The descriptor the environment variable `name` names (removed from the environment), made
// close-on-exec; -1 if none.
int InheritedFd(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return -1;
  const int fd = std::atoi(v);
  ::unsetenv(name);
  if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) return -1;
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

}  // namespace

int TakeoverChannel() { return InheritedFd(kTakeoverFdEnv); }

namespace {

constexpr const char* kSupervisorFdEnv = "TIERFS_SUPERVISOR_FD";
constexpr const char* kCrashResumesEnv = "TIERFS_CRASH_RESUMES";
constexpr const char* kCrashResumeEnv = "TIERFS_CRASH_RESUME";

// The value of the environment variable `name` (removed from the environment); "" if unset.
std::string TakeEnv(const char* name) {
  const char* v = std::getenv(name);
  std::string out = v == nullptr ? "" : v;
  ::unsetenv(name);
  return out;
}

}  // namespace

Supervision InheritedSupervision() {
  Supervision s;
  s.fd = InheritedFd(kSupervisorFdEnv);
  s.resumes = static_cast<uint32_t>(std::strtoul(TakeEnv(kCrashResumesEnv).c_str(), nullptr, 10));
  s.resuming = TakeEnv(kCrashResumeEnv) == "1";
  if (s.fd < 0) s = Supervision{};
  return s;
}

Result<int> StartSuccessor(const std::string& binary, int channel, const Supervision& supervision) {
  const int supervisor = supervision.fd;
  const std::string path = binary.empty() ? OwnBinary() : binary;
  if (path.empty()) return Status::Internal("cannot tell this daemon's binary (/proc/self/exe)");
  if (::access(path.c_str(), X_OK) != 0) {
    return Status::FromErrno(errno, "the new binary " + path);
  }
  std::vector<std::string> args = OwnCommandLine();
  if (args.empty()) return Status::Internal("cannot read this daemon's command line");
  args[0] = path;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store;
  const std::string prefix = std::string(kTakeoverFdEnv) + "=";
  const std::string supervision_vars[] = {std::string(kSupervisorFdEnv) + "=",
                                          std::string(kCrashResumesEnv) + "=",
                                          std::string(kCrashResumeEnv) + "="};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view var(*e);
    bool drop = var.starts_with(prefix);
    for (const std::string& v : supervision_vars) drop = drop || var.starts_with(v);
    if (!drop) env_store.emplace_back(*e);
  }
  env_store.push_back(prefix + std::to_string(kChildChannelFd));
  if (supervisor >= 0) {
    env_store.push_back(supervision_vars[0] + std::to_string(kChildChannelFd + 1));
    env_store.push_back(supervision_vars[1] + std::to_string(supervision.resumes));
    if (supervision.resuming) env_store.push_back(supervision_vars[2] + "1");
  }
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // dup2 to another number clears close-on-exec on the copy.
  posix_spawn_file_actions_adddup2(&fa, channel, kChildChannelFd);
  if (supervisor >= 0) posix_spawn_file_actions_adddup2(&fa, supervisor, kChildChannelFd + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The new daemon starts with no signal blocked (this thread blocks them all).
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, path.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return Status::FromErrno(err, "starting " + path);
  Logger(Module::kDaemon).info("restart: started {} (pid {}) to take the mount over", path, pid);
  return static_cast<int>(pid);
}

Result<std::unique_ptr<RestartListener>> RestartListener::Start(
    FuseServer* server, std::chrono::nanoseconds pause_limit, std::function<void()> release,
    std::function<Result<Filesystem*>()> restore, Supervision supervision) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::FromErrno(errno, "restart socket");
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(RestartSocketName(getpid()), &addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(fd.get(), 4) != 0) {
    return Status::FromErrno(errno, "binding the restart socket");
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return Status::FromErrno(errno, "pipe");
  return std::unique_ptr<RestartListener>(
      new RestartListener(server, pause_limit, std::move(release), std::move(restore), supervision,
                          std::move(fd), UniqueFd(p[0]), UniqueFd(p[1])));
}

RestartListener::RestartListener(FuseServer* server, std::chrono::nanoseconds pause_limit,
                                 std::function<void()> release,
                                 std::function<Result<Filesystem*>()> restore,
                                 Supervision supervision, UniqueFd listen_fd, UniqueFd stop_read,
                                 UniqueFd stop_write)
    : server_(server),
      pause_limit_(pause_limit),
      release_(std::move(release)),
      restore_(std::move(restore)),
      supervision_(supervision),
      listen_fd_(std::move(listen_fd)),
      stop_read_(std::move(stop_read)),
      stop_write_(std::move(stop_write)) {
  // No signal for this thread: the daemon's threads leave them to the FUSE loop and sigwaits.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  thread_ = std::jthread([this] { Loop(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

RestartListener::~RestartListener() {
  const char c = 0;
  [[maybe_unused]] ssize_t n = ::write(stop_write_.get(), &c, 1);
  if (thread_.joinable()) thread_.join();
}

void RestartListener::Loop() {
  pthread_setname_np(pthread_self(), "tierfs-restart");
  while (true) {
    struct pollfd p[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Logger(Module::kDaemon).error("restart socket: poll: {}", std::strerror(errno));
      return;
    }
    if (p[1].revents != 0) return;
    UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) continue;
    Serve(conn.get());
    if (server_->handed_over()) return;
  }
}

void RestartListener::Serve(int conn) {
  spdlog::logger& log = Logger(Module::kDaemon);
  struct ucred peer {};
  socklen_t len = sizeof(peer);
  if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 ||
      (peer.uid != 0 && peer.uid != ::geteuid())) {
    log.warn("restart: refused a request from uid {} (pid {})", peer.uid, peer.pid);
    WriteAll(conn, fmt::format("error only root or uid {} may restart this daemon\n", ::geteuid()));
    return;
  }
  const std::string line = ReadLine(conn);
  if (!line.starts_with("restart")) {
    WriteAll(conn, "error unknown request\n");
    return;
  }
  std::string binary = line.size() > 8 ? line.substr(8) : std::string();
  log.info("restart: asked by pid {} (uid {}), binary {}", peer.pid, peer.uid,
           binary.empty() ? OwnBinary() + " (as installed)" : binary);
  FuseServer::HandOverHooks hooks;
  // A supervised daemon's successor logs to the same supervisor (and is no crash resume).
  Supervision passed = supervision_;
  passed.resuming = false;
  hooks.start = [&binary, &passed](int channel) { return StartSuccessor(binary, channel, passed); };
  hooks.release = release_;
  hooks.restore = restore_;
  Result<int> pid = server_->HandOver(hooks, pause_limit_, kStartLimit);
  if (!pid.ok()) {
    log.warn("restart: {}", pid.status().ToString());
    WriteAll(conn, "error " + pid.status().message() + "\n");
    return;
  }
  // systemd (NotifyAccess=main) takes the new daemon as the unit's main process.
  // (A supervised daemon's supervisor stays the main process: it adopts the new daemon.)
  if (supervision_.fd < 0) NotifyMainPid(*pid);
  WriteAll(conn, fmt::format("ok {}\n", *pid));
}

}  // namespace tierfs
