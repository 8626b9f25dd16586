#include "daemon/cache_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "base/logging.h"

namespace tierfs {
namespace {

std::string UserName(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    return fmt::format("{} ({})", uid, found->pw_name);
  }
  return std::to_string(uid);
}

// mkdir -p: each missing component is created 0700 (existing ones are left as they are).
Status MakePrivateDirs(const std::string& dir) {
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    const std::string part = dir.substr(0, pos);
    if (!part.empty() && ::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, "cannot create the cache directory " + part);
    }
    if (pos == std::string::npos) break;
  }
  return Status::OK();
}

}  // namespace

CacheDirLock::~CacheDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

Result<std::unique_ptr<CacheDirLock>> PrepareCacheDir(const std::string& dir) {
  if (dir.empty() || dir.front() != '/') {
    return Status::InvalidArgument(fmt::format("cache directory '{}' is not absolute", dir));
  }
  TIERFS_RETURN_IF_ERROR(MakePrivateDirs(dir));
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "cache directory " + dir);
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(fmt::format("cache directory {} is not a directory", dir));
  }
  const unsigned mode = st.st_mode & 07777;
  if (st.st_uid != ::geteuid()) {
    return Status::PermissionDenied(fmt::format(
        "cache directory {} is owned by uid {} (mode {:04o}), not by this daemon's uid {}; "
        "refusing to use it (another user could read or plant cached data): use a directory of "
        "your own (--cache-dir) or chown it",
        dir, UserName(st.st_uid), mode, UserName(::geteuid())));
  }
  if ((mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status::PermissionDenied(fmt::format(
        "cache directory {} (owner uid {}) has mode {:04o}: writable by group or others; "
        "refusing to use it (another user could plant cached data): chmod 700 {}",
        dir, UserName(st.st_uid), mode, dir));
  }
  if ((mode & 077) != 0) {
    if (::chmod(dir.c_str(), mode & 07700) != 0) {
      return Status::FromErrno(errno, "chmod 700 of the cache directory " + dir);
    }
    Logger(Module::kDaemon)
        .warn("cache directory {} had mode {:04o}; narrowed to {:04o} (the cache is private)", dir,
              mode, mode & 07700);
  }

  const std::string lock_path = dir + "/lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::FromErrno(errno, "cannot open the cache lock " + lock_path);
  auto lock = std::make_unique<CacheDirLock>(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) return Status::FromErrno(err, "cannot lock " + lock_path);
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) pid = "unknown";
    return Status::Unavailable(fmt::format(
        "cache directory {} is in use by another tierfs daemon (pid {}, holding {}); each "
        "daemon needs its own --cache-dir",
        dir, pid, lock_path));
  }
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    return Status::FromErrno(errno, "cannot write the pid into " + lock_path);
  }
  ::fchmod(fd, 0600);
  return lock;
}

}  // namespace tierfs
