#include "daemon/cache_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <deque>

#include "base/fd.h"
#include "base/logging.h"
#include "base/strings.h"

namespace tierfs {
namespace {

// Symlinks followed on the way to the cache directory, at most (the kernel's limit).
constexpr int kMaxSymlinks = 40;

std::string UserName(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    return fmt::format("{} ({})", uid, found->pw_name);
  }
  return std::to_string(uid);
}

bool TrustedOwner(uid_t uid) { return uid == 0 || uid == ::geteuid(); }

bool OthersMayWrite(const struct stat& st) { return (st.st_mode & (S_IWGRP | S_IWOTH)) != 0; }

// Components of `path`, in order; "." dropped.
std::deque<std::string> Components(const std::string& path) {
  std::deque<std::string> out;
  size_t start = 0;
  while (start < path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    std::string part = path.substr(start, slash - start);
    if (!part.empty() && part != ".") out.push_back(std::move(part));
    start = slash + 1;
  }
  return out;
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

// A directory on the way to the cache directory must be one no other user can change: otherwise
// its owner, or anyone who may write it, could replace the next name with a symlink of their own.
Status CheckTraversed(const std::string& dir, const std::string& path, const struct stat& st) {
  const unsigned mode = st.st_mode & 07777;
  if (!TrustedOwner(st.st_uid)) {
    return Status::PermissionDenied(fmt::format(
        "cache directory {}: {} is owned by uid {} (mode {:04o}), who could replace what it "
        "holds; refusing it: use a cache directory whose parents only root or uid {} can change",
        dir, path, UserName(st.st_uid), mode, UserName(::geteuid())));
  }
  if (OthersMayWrite(st) && (st.st_mode & S_ISVTX) == 0) {
    return Status::PermissionDenied(fmt::format(
        "cache directory {}: {} has mode {:04o}: writable by other users without the sticky "
        "bit, so any of them could replace what it holds (with a symlink to a directory of "
        "their choosing); refusing it: use a cache directory whose parents only root or uid {} "
        "can write",
        dir, path, mode, UserName(::geteuid())));
  }
  return Status::OK();
}

// The cache directory itself: ours, and writable by nobody else; readable ones are narrowed.
Status CheckCacheDir(const std::string& dir, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "cache directory " + dir);
  const unsigned mode = st.st_mode & 07777;
  if (st.st_uid != ::geteuid()) {
    return Status::PermissionDenied(fmt::format(
        "cache directory {} is owned by uid {} (mode {:04o}), not by this daemon's uid {}; "
        "refusing to use it (another user could read or plant cached data): use a directory of "
        "your own (--cache-dir) or chown it",
        dir, UserName(st.st_uid), mode, UserName(::geteuid())));
  }
  if (OthersMayWrite(st)) {
    return Status::PermissionDenied(fmt::format(
        "cache directory {} (owner uid {}) has mode {:04o}: writable by group or others; "
        "refusing to use it (another user could plant cached data): chmod 700 {}",
        dir, UserName(st.st_uid), mode, dir));
  }
  if ((mode & 077) != 0) {
    if (::fchmod(fd, mode & 07700) != 0) {
      return Status::FromErrno(errno, "chmod 700 of the cache directory " + dir);
    }
    Logger(Module::kDaemon)
        .warn("cache directory {} had mode {:04o}; narrowed to {:04o} (the cache is private)", dir,
              mode, mode & 07700);
  }
  return Status::OK();
}

// What the walk below holds: the directory reached so far, open, and its path (for messages).
struct WalkPos {
  UniqueFd fd;
  std::string path;
  struct stat st;
};

// Opens `name` in `at` (a directory), creating it 0700 when missing. A symlink is not followed:
// *link gets its target instead (and the fd is -1).
Result<UniqueFd> OpenStep(const std::string& dir, const WalkPos& at, const std::string& name,
                          std::string* link) {
  const std::string path = Join(at.path, name);
  for (int attempt = 0; attempt < 2; ++attempt) {
    UniqueFd fd(::openat(at.fd.get(), name.c_str(),
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (fd.get() >= 0) return fd;
    const int err = errno;
    if (err == ENOENT) {
      if (::mkdirat(at.fd.get(), name.c_str(), 0700) != 0 && errno != EEXIST) {
        return Status::FromErrno(errno, "cannot create the cache directory " + path);
      }
      continue;
    }
    struct stat lst;
    if (::fstatat(at.fd.get(), name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0) {
      return Status::FromErrno(err, "cache directory " + dir + ": " + path);
    }
    if (!S_ISLNK(lst.st_mode)) {
      if (err == ENOTDIR || err == ELOOP) {
        return Status::InvalidArgument(
            fmt::format("cache directory {}: {} is not a directory", dir, path));
      }
      return Status::FromErrno(err, "cache directory " + dir + ": " + path);
    }
    // A symlink: only one that no other user could have planted or replaced is followed.
    if (!TrustedOwner(lst.st_uid)) {
      return Status::PermissionDenied(fmt::format(
          "cache directory {}: {} is a symlink owned by uid {} in {} (mode {:04o}), which other "
          "users can write; refusing to follow it (it could point the daemon at any directory)",
          dir, path, UserName(lst.st_uid), at.path, at.st.st_mode & 07777));
    }
    std::string target(4096, '\0');
    const ssize_t n = ::readlinkat(at.fd.get(), name.c_str(), target.data(), target.size());
    if (n < 0) return Status::FromErrno(errno, "cache directory " + dir + ": readlink " + path);
    target.resize(static_cast<size_t>(n));
    *link = std::move(target);
    return UniqueFd();
  }
  return Status::Unavailable(fmt::format("cache directory {}: {} keeps changing", dir, path));
}

// Walks `dir` from `/` (see PrepareCacheDir) and returns the cache directory, open.
Result<UniqueFd> OpenCacheDir(const std::string& dir) {
  std::deque<std::string> todo = Components(dir);
  if (todo.empty()) {
    return Status::InvalidArgument(fmt::format("cache directory '{}' is the root directory", dir));
  }
  WalkPos at{UniqueFd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)), "/", {}};
  if (at.fd.get() < 0 || ::fstat(at.fd.get(), &at.st) != 0) {
    return Status::FromErrno(errno, "cache directory " + dir + ": /");
  }
  TIERFS_RETURN_IF_ERROR(CheckTraversed(dir, at.path, at.st));
  int links = 0;
  while (!todo.empty()) {
    const std::string name = todo.front();
    todo.pop_front();
    std::string link;
    Result<UniqueFd> next =
        name == ".." ? Result<UniqueFd>(UniqueFd(::openat(
                           at.fd.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)))
                     : OpenStep(dir, at, name, &link);
    if (!next.ok()) return next.status();
    if (!link.empty()) {
      if (++links > kMaxSymlinks) {
        return Status::InvalidArgument(
            fmt::format("cache directory {}: too many levels of symbolic links", dir));
      }
      std::deque<std::string> more = Components(link);
      todo.insert(todo.begin(), more.begin(), more.end());
      if (link.front() == '/') {
        at.fd = UniqueFd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        at.path = "/";
        if (at.fd.get() < 0 || ::fstat(at.fd.get(), &at.st) != 0) {
          return Status::FromErrno(errno, "cache directory " + dir + ": /");
        }
      }
      if (todo.empty()) return Status::InvalidArgument("cache directory " + dir + " leads to /");
      continue;
    }
    if (next->get() < 0) return Status::FromErrno(errno, "cache directory " + dir + ": ..");
    at.path = name == ".." ? std::string(ParentDir(at.path)) : Join(at.path, name);
    at.fd = std::move(*next);
    if (todo.empty()) break;  // the cache directory itself: CheckCacheDir
    if (::fstat(at.fd.get(), &at.st) != 0) return Status::FromErrno(errno, "stat " + at.path);
    TIERFS_RETURN_IF_ERROR(CheckTraversed(dir, at.path, at.st));
  }
  return std::move(at.fd);
}

}  // namespace

CacheDirLock::CacheDirLock(int dir_fd, int lock_fd)
    : dir_fd_(dir_fd), fd_(lock_fd), anchored_(fmt::format("/proc/self/fd/{}", dir_fd)) {}

CacheDirLock::~CacheDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

Result<std::unique_ptr<CacheDirLock>> PrepareCacheDir(const std::string& dir) {
  if (dir.empty() || dir.front() != '/') {
    return Status::InvalidArgument(fmt::format("cache directory '{}' is not absolute", dir));
  }
  TIERFS_ASSIGN_OR_RETURN(UniqueFd dir_fd, OpenCacheDir(dir));
  TIERFS_RETURN_IF_ERROR(CheckCacheDir(dir, dir_fd.get()));

  const std::string lock_path = dir + "/lock";
  UniqueFd fd(
      ::openat(dir_fd.get(), "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (fd.get() < 0) return Status::FromErrno(errno, "cannot open the cache lock " + lock_path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("the cache lock " + lock_path + " is not a regular file");
  }
  const int raw_fd = fd.get();
  auto lock = std::make_unique<CacheDirLock>(dir_fd.release(), fd.release());
  if (::flock(raw_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) return Status::FromErrno(err, "cannot lock " + lock_path);
    char buf[32] = {};
    ssize_t n = ::pread(raw_fd, buf, sizeof(buf) - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) pid = "unknown";
    return Status::Unavailable(fmt::format(
        "cache directory {} is in use by another tierfs daemon (pid {}, holding {}); each "
        "daemon needs its own --cache-dir",
        dir, pid, lock_path));
  }
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(raw_fd, 0) != 0 ||
      ::pwrite(raw_fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    return Status::FromErrno(errno, "cannot write the pid into " + lock_path);
  }
  ::fchmod(raw_fd, 0600);
  return lock;
}

}  // namespace tierfs
