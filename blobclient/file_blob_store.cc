// FileBlobStore — BlobStore over a local or NFS directory (file:// origins and tests).
//
// Keys are '/'-separated paths below the root. A key with an empty, "." or ".." component, a
// leading '/' or a NUL byte is refused (InvalidArgument), so no key can name a path outside the
// root. List emulates ListObjectsV2: keys in byte order, directories become common prefixes when
// the delimiter is "/", and the continuation token is the last key or prefix returned. Put
// writes a temp file and renames it, so readers never see a partial object.
//
// Only regular files and directories below the root are served. Symlinks are never followed,
// in any component of a key: paths are resolved with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) where the kernel has it (Linux >= 5.6), else one O_NOFOLLOW openat per
// component. Symlinks, FIFOs, sockets and device nodes are hidden from listings (one info log
// line per name) and Head/Read of them is NotFound, so `ln -s /etc/shadow x` is not served and
// `ln -s .. loop` is not an endless tree. Files are opened O_NONBLOCK and checked with fstat, so
// a FIFO swapped in at the last moment cannot block a worker.
//
// The ETag of a file is derived from (size, mtime ns, ctime ns, inode, device): any rewrite,
// replacement, chmod or touch gives a new one. Read re-checks it with fstat after reading: a file
// changed during the read fails the read (FailedPrecondition, as an If-Match failure) rather
// than returning bytes of two versions.
//
// Thread-safe; no external synchronization needed (atomic counters; the set of names already
// logged as skipped is guarded by a mutex).
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <map>
#include <optional>
#include <unordered_set>
#include <utility>

#include "base/logging.h"
#include "base/mutex.h"
#include "base/strings.h"
#include "blobclient/blob_store.h"

namespace tierfs {
namespace {

constexpr std::string_view kTempMarker = ".tierfs-tmp-";
// At most this many distinct skipped names are remembered (and logged); later ones are skipped
// silently.
constexpr size_t kMaxLoggedSkips = 4096;

int64_t Nanos(const struct timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

std::string MakeEtag(const struct stat& st) {
  char buf[128];
  std::snprintf(
      buf, sizeof(buf), "%llx-%llx-%llx-%llx-%llx", static_cast<unsigned long long>(st.st_size),
      static_cast<unsigned long long>(Nanos(st.st_mtim)),
      static_cast<unsigned long long>(Nanos(st.st_ctim)),
      static_cast<unsigned long long>(st.st_ino), static_cast<unsigned long long>(st.st_dev));
  return buf;
}

ObjectInfo InfoFromStat(const struct stat& st) {
  ObjectInfo info;
  info.size = static_cast<uint64_t>(st.st_size);
  info.etag = MakeEtag(st);
  info.mtime_ns = Nanos(st.st_mtim);
  return info;
}

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Opens `rel` (relative, no empty, "." or ".." component) below `dirfd` without following any
// symlink. -1 and errno on failure; ELOOP/ENOTDIR when a component is a symlink.
// `have_openat2`: whether to try openat2(2); cleared on the first ENOSYS (kernels before 5.6;
// some seccomp filters answer EPERM).
int OpenBeneath(int dirfd, const std::string& rel, int flags, std::atomic<bool>* have_openat2) {
  if (rel.empty()) return ::openat(dirfd, ".", flags | O_CLOEXEC);
  if (have_openat2->load(std::memory_order_relaxed)) {
    struct open_how how = {};
    how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    long fd = ::syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof(how));
    if (fd >= 0) return static_cast<int>(fd);
    if (errno != ENOSYS && errno != EPERM) return -1;
    have_openat2->store(false, std::memory_order_relaxed);
  }
  // Fallback: one component at a time, each directory opened O_NOFOLLOW | O_DIRECTORY.
  Fd dir;
  int cur = dirfd;
  size_t pos = 0;
  for (;;) {
    const size_t slash = rel.find('/', pos);
    const std::string comp = rel.substr(pos, slash == std::string::npos ? rel.npos : slash - pos);
    if (slash == std::string::npos)
      return ::openat(cur, comp.c_str(), flags | O_CLOEXEC | O_NOFOLLOW);
    int next = ::openat(cur, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return -1;
    dir = Fd(next);
    cur = next;
    pos = slash + 1;
  }
}

// Checks every '/'-separated component of `path` (allowing a trailing '/' when allow_dir).
Status CheckRelative(std::string_view path, bool allow_trailing_slash, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("file store: " + std::string(what) + " '" + EscapeForLog(path) +
                                   "' " + std::string(why));
  };
  if (path.find('\0') != std::string_view::npos) return bad("contains NUL");
  if (path.starts_with('/')) return bad("starts with '/'");
  std::string_view rest = path;
  while (!rest.empty()) {
    size_t slash = rest.find('/');
    std::string_view comp = rest.substr(0, slash);
    if (slash == std::string_view::npos) {
      if (comp == "." || comp == "..") return bad("has a '.' or '..' component");
      break;
    }
    if (comp.empty()) return bad("has an empty component");
    if (comp == "." || comp == "..") return bad("has a '.' or '..' component");
    rest.remove_prefix(slash + 1);
    if (rest.empty() && !allow_trailing_slash) return bad("ends in '/'");
  }
  return Status::OK();
}

class FileBlobStore final : public BlobStore {
 public:
  FileBlobStore(std::string root, Fd root_fd, bool use_openat2)
      : root_(std::move(root)), root_fd_(std::move(root_fd)), have_openat2_(use_openat2) {}

  std::string Describe() const override { return "file://" + (root_.empty() ? "/" : root_); }

  Result<ObjectInfo> Head(std::string_view key) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    struct stat st;
    TIERFS_RETURN_IF_ERROR(StatRegular(key, &st));
    return InfoFromStat(st);
  }

  Result<size_t> Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                      std::string_view if_match_etag) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    // Refuse anything but a regular file before opening it (opening a device node can have
    // effects of its own), then open without following a symlink and without blocking, and
    // check that what was opened is that same regular file.
    struct stat want;
    TIERFS_RETURN_IF_ERROR(StatRegular(key, &want));
    Fd fd(OpenBeneath(root_fd_.get(), std::string(key), O_RDONLY | O_NONBLOCK | O_NOCTTY,
                      &have_openat2_));
    if (fd.get() < 0) return OpenFailure(errno, key);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return Fail(Status::FromErrno(errno, Ctx("fstat", key)));
    if (!S_ISREG(st.st_mode) || st.st_ino != want.st_ino || st.st_dev != want.st_dev) {
      return Status::NotFound(Ctx("not a regular file", key));
    }
    const std::string etag = MakeEtag(st);
    if (!if_match_etag.empty() && if_match_etag != etag) {
      return Fail(Status::FailedPrecondition(Ctx("object changed (ETag mismatch)", key)));
    }
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd.get(), out.data() + done, out.size() - done,
                          static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Fail(Status::FromErrno(errno, Ctx("pread", key)));
      if (n == 0) break;  // end of file
      done += static_cast<size_t>(n);
    }
    // Rewritten in place while we read: the bytes may mix two versions. Refuse them.
    struct stat after;
    if (::fstat(fd.get(), &after) != 0) return Fail(Status::FromErrno(errno, Ctx("fstat", key)));
    if (MakeEtag(after) != etag) {
      return Fail(Status::FailedPrecondition(Ctx("object changed during the read", key)));
    }
    bytes_read_ += done;
    return done;
  }

  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckRelative(prefix, /*allow_trailing_slash=*/true, "prefix"));
    const size_t cut = prefix.rfind('/');
    const std::string dir(cut == std::string_view::npos ? "" : prefix.substr(0, cut + 1));
    const std::string name_part(cut == std::string_view::npos ? prefix : prefix.substr(cut + 1));
    // key → info for objects, nullopt for common prefixes; std::map orders keys bytewise.
    std::map<std::string, std::optional<ObjectInfo>> entries;
    Walk(dir, name_part, std::string(prefix), std::string(delimiter), &entries);

    ListPage page;
    auto it = token.empty() ? entries.begin() : entries.upper_bound(std::string(token));
    const size_t limit = static_cast<size_t>(std::clamp(max_keys, 1, 1000));
    size_t taken = 0;
    for (; it != entries.end() && taken < limit; ++it, ++taken) {
      if (it->second.has_value()) {
        page.objects.push_back(ListEntry{it->first, *it->second});
      } else {
        page.prefixes.push_back(it->first);
      }
    }
    if (it != entries.end()) page.next_token = std::prev(it)->first;
    return page;
  }

  Status Put(std::string_view key, std::span<const std::byte> data) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    const std::string path = Path(key);
    TIERFS_RETURN_IF_ERROR(MakeParents(key));
    const size_t slash = path.rfind('/');
    std::string tmpl = path.substr(0, slash + 1) + std::string(kTempMarker) + "XXXXXX";
    int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) return Fail(Status::FromErrno(errno, Ctx("mkstemp for", key)));
    size_t done = 0;
    Status st;
    while (done < data.size()) {
      ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        st = Status::FromErrno(errno, Ctx("write", key));
        break;
      }
      done += static_cast<size_t>(n);
    }
    if (st.ok() && ::fsync(fd) != 0) st = Status::FromErrno(errno, Ctx("fsync", key));
    ::fchmod(fd, 0644);
    ::close(fd);
    if (st.ok() && ::rename(tmpl.c_str(), path.c_str()) != 0) {
      st = Status::FromErrno(errno, Ctx("rename", key));
    }
    if (!st.ok()) {
      ::unlink(tmpl.c_str());
      return Fail(st);
    }
    bytes_written_ += data.size();
    return Status::OK();
  }

  Status Delete(std::string_view key) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    if (::unlink(Path(key).c_str()) != 0 && errno != ENOENT) {
      return Fail(Status::FromErrno(errno, Ctx("unlink", key)));
    }
    return Status::OK();
  }

  BlobStoreStats Stats() const override {
    BlobStoreStats s;
    s.requests = requests_.load();
    s.bytes_read = bytes_read_.load();
    s.bytes_written = bytes_written_.load();
    s.errors = errors_.load();
    return s;
  }

 private:
  Status CheckKey(std::string_view key) const {
    if (key.empty()) return Status::InvalidArgument("file store: empty key");
    return CheckRelative(key, /*allow_trailing_slash=*/false, "key");
  }
  std::string Path(std::string_view key) const { return root_ + "/" + std::string(key); }
  std::string Ctx(std::string_view op, std::string_view key) const {
    return std::string(op) + " " + EscapeForLog(root_ + "/" + std::string(key));
  }
  Status Fail(Status st) {
    if (!st.ok() && !st.IsNotFound()) ++errors_;
    return st;
  }

  Status MakeParents(std::string_view key) {
    for (size_t pos = key.find('/'); pos != std::string_view::npos; pos = key.find('/', pos + 1)) {
      std::string dir = root_ + "/" + std::string(key.substr(0, pos));
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        return Fail(Status::FromErrno(errno, "mkdir " + dir));
      }
    }
    return Status::OK();
  }

  // Collects the entries below `dir` (relative, "" or ending in '/') whose names start with
  // `name_filter` (top level only). With delimiter "/", directories become common prefixes and
  // are not entered; otherwise the walk recurses. Only regular files and directories are seen:
  // symlinks (never followed, so no loops), FIFOs, sockets and devices are skipped.
  void Walk(const std::string& dir, std::string_view name_filter, const std::string& prefix,
            const std::string& delimiter, std::map<std::string, std::optional<ObjectInfo>>* out) {
    const std::string rel = dir.empty() ? std::string() : dir.substr(0, dir.size() - 1);
    Fd dfd(OpenBeneath(root_fd_.get(), rel, O_RDONLY | O_DIRECTORY, &have_openat2_));
    if (dfd.get() < 0) return;  // missing, or not a real directory: lists as empty, like S3
    DIR* d = ::fdopendir(dfd.get());
    if (d == nullptr) return;
    const int fd = dfd.release();  // owned by `d` now
    while (dirent* e = ::readdir(d)) {
      std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (name.starts_with(kTempMarker)) continue;  // an in-progress Put
      if (!name.starts_with(name_filter)) continue;
      const std::string key = dir + std::string(name);
      struct stat st;
      if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // vanished
      if (S_ISDIR(st.st_mode)) {
        if (delimiter == "/") {
          (*out)[key + "/"] = std::nullopt;
        } else {
          Walk(key + "/", "", prefix, delimiter, out);
        }
        continue;
      }
      if (!S_ISREG(st.st_mode)) {
        LogSkipped(key, st.st_mode);
        continue;
      }
      if (!delimiter.empty()) {
        size_t pos = key.find(delimiter, prefix.size());
        if (pos != std::string::npos) {
          (*out)[key.substr(0, pos + delimiter.size())] = std::nullopt;
          continue;
        }
      }
      (*out)[key] = InfoFromStat(st);
    }
    ::closedir(d);
  }

  // One info line per skipped name (at most kMaxLoggedSkips names), not one per listing.
  void LogSkipped(const std::string& key, mode_t mode) {
    {
      MutexLock l(&skipped_mu_);
      if (skipped_logged_.size() >= kMaxLoggedSkips || !skipped_logged_.insert(key).second) return;
    }
    const char* kind = S_ISLNK(mode)    ? "a symlink (not followed)"
                       : S_ISFIFO(mode) ? "a FIFO"
                       : S_ISSOCK(mode) ? "a socket"
                       : S_ISCHR(mode)  ? "a character device"
                       : S_ISBLK(mode)  ? "a block device"
                                        : "not a regular file";
    Logger(Module::kBlobClient)
        .info("file store {}: hiding '{}': {}", EscapeForLog(root_), EscapeForLog(key), kind);
  }

  // lstat of `key` below the root without following symlinks in any component; NotFound unless
  // it is a regular file.
  Status StatRegular(std::string_view key, struct stat* st) {
    const std::string k(key);
    const size_t slash = k.rfind('/');
    const std::string parent = slash == std::string::npos ? std::string() : k.substr(0, slash);
    const std::string name = slash == std::string::npos ? k : k.substr(slash + 1);
    Fd dir(OpenBeneath(root_fd_.get(), parent, O_RDONLY | O_DIRECTORY, &have_openat2_));
    if (dir.get() < 0) return OpenFailure(errno, key);
    if (::fstatat(dir.get(), name.c_str(), st, AT_SYMLINK_NOFOLLOW) != 0) {
      return OpenFailure(errno, key);
    }
    if (!S_ISREG(st->st_mode)) return Status::NotFound(Ctx("not a regular file", key));
    return Status::OK();
  }

  // errno of a failed open/stat below the root as a Status: a symlink in the way (ELOOP, or
  // ENOTDIR/EXDEV from the resolver) or a missing name is NotFound.
  Status OpenFailure(int err, std::string_view key) {
    if (err == ELOOP || err == ENOTDIR || err == EXDEV || err == ENXIO || err == ENOENT) {
      return Status::NotFound(Ctx("no regular file", key));
    }
    return Fail(Status::FromErrno(err, Ctx("open", key)));
  }

  // Constant after construction.
  const std::string root_;
  const Fd root_fd_;  // the root directory; every path is resolved beneath it
  std::atomic<bool> have_openat2_;
  Mutex skipped_mu_;
  std::unordered_set<std::string> skipped_logged_ GUARDED_BY(skipped_mu_);
  std::atomic<uint64_t> requests_{0}, bytes_read_{0}, bytes_written_{0}, errors_{0};
};

}  // namespace

Result<std::unique_ptr<BlobStore>> NewFileBlobStore(const FileStoreOptions& options) {
  std::string root = options.root;
  if (root.empty() || root.front() != '/') {
    return Status::InvalidArgument("file store root must be an absolute path: '" + root + "'");
  }
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) return Status::FromErrno(errno, "file store root " + root);
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("file store root is not a directory: '" + root + "'");
  }
  Fd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, "file store root " + root);
  if (root == "/") root.clear();  // keys then map to "/" + key
  return std::unique_ptr<BlobStore>(
      std::make_unique<FileBlobStore>(root, std::move(fd), options.use_openat2));
}

}  // namespace tierfs
