// `tierfs restart` (daemon/restart_cli.h).

#include "daemon/restart_cli.h"

#include <fmt/format.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/fd.h"
#include "daemon/exit_codes.h"
#include "daemon/restart.h"

namespace tierfs {
namespace {

// The value of `key` in user.tierfs.daemon's "key=value ..." line; "" if absent.
std::string Field(const std::string& line, const std::string& key) {
  size_t pos = 0;
  while (pos < line.size()) {
    size_t end = line.find(' ', pos);
    if (end == std::string::npos) end = line.size();
    if (line.compare(pos, key.size() + 1, key + "=") == 0) {
      return line.substr(pos + key.size() + 1, end - pos - key.size() - 1);
    }
    pos = end + 1;
  }
  return {};
}

int Fail(int code, const std::string& msg) {
  std::fprintf(stderr, "tierfs restart: %s\n", msg.c_str());
  return code;
}

// The daemon's answer line, waiting up to `limit`.
std::string ReadAnswer(int fd, std::chrono::seconds limit) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[512];
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    struct pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  if (const size_t nl = line.find('\n'); nl != std::string::npos) line.resize(nl);
  return line;
}

}  // namespace

int RunRestart(const std::string& mountpoint, const std::string& binary) {
  std::string daemon(512, '\0');
  const ssize_t n =
      ::getxattr(mountpoint.c_str(), "user.tierfs.daemon", daemon.data(), daemon.size());
  if (n <= 0) {
    return Fail(kExitUsage, fmt::format("{} is not a tierfs mount served by a live daemon ({})",
                                        mountpoint, std::strerror(errno)));
  }
  daemon.resize(static_cast<size_t>(n));
  const std::string pid = Field(daemon, "pid");
  const std::string version = Field(daemon, "version");
  if (pid.empty()) return Fail(kExitUsage, "the daemon of " + mountpoint + " names no pid");
  std::string path;
  if (!binary.empty()) {
    char resolved[PATH_MAX];
    if (::realpath(binary.c_str(), resolved) == nullptr || ::access(resolved, X_OK) != 0) {
      return Fail(kExitUsage, fmt::format("--binary {}: {}", binary, std::strerror(errno)));
    }
    path = resolved;
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = RestartSocketName(std::atoi(pid.c_str()));
  std::memcpy(addr.sun_path, name.data(), std::min(name.size(), sizeof(addr.sun_path)));
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  if (fd.get() < 0 || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Fail(kExitRuntime,
                fmt::format("the daemon serving {} (pid {}, tierfs {}) does not take live "
                            "restarts ({}): it predates them, or it is not in this network "
                            "namespace. It keeps serving; to replace it, stop and mount again "
                            "(the mount is absent meanwhile: drain the jobs that read it first)",
                            mountpoint, pid, version, std::strerror(errno)));
  }
  const std::string request = "restart " + path + "\n";
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    // A daemon that refuses the caller answers why and closes before reading the request.
    const int err = errno;
    const std::string why = ReadAnswer(fd.get(), std::chrono::seconds(2));
    if (why.starts_with("error ")) {
      return Fail(kExitRuntime,
                  fmt::format("{} (pid {} serves {} on)", why.substr(6), pid, mountpoint));
    }
    return Fail(kExitRuntime, fmt::format("asking pid {}: {}", pid, std::strerror(err)));
  }
  // The daemon answers once the new one serves or has failed: the pause (fuse.shutdown_grace at
  // most) and the new daemon's checks (a minute at most).
  const std::string answer = ReadAnswer(fd.get(), std::chrono::minutes(5));
  if (answer.starts_with("ok ")) {
    std::printf("tierfs restart: %s is served by pid %s now (was pid %s, tierfs %s)\n",
                mountpoint.c_str(), answer.substr(3).c_str(), pid.c_str(), version.c_str());
    return kExitOk;
  }
  if (answer.starts_with("error ")) {
    return Fail(kExitRuntime,
                fmt::format("{} (pid {} serves {} on)", answer.substr(6), pid, mountpoint));
  }
  return Fail(kExitRuntime, fmt::format("no answer from pid {} (it serves {} on, or has ended: "
                                        "see its log)",
                                        pid, mountpoint));
}

}  // namespace tierfs
