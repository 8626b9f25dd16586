// FileBlobStore — BlobStore over a local or NFS directory (file:// origins and tests).
//
// Keys are '/'-separated paths below the root. A key with an empty, "." or ".." component, a
// leading '/' or a NUL byte is refused (InvalidArgument), so no key can name a path outside the
// root. List emulates ListObjectsV2: keys in byte order, directories become common prefixes when
// the delimiter is "/", and the continuation token is the last key or prefix returned. A listing
// reads the directory once (names and d_type) and keeps the sorted names for its later pages;
// each page stats only its own files (see "listings" below). Put
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
// A directory that does not exist (or is not a real directory) lists as empty, as an S3 prefix
// without keys does. Every other failure to open, read or stat a directory during a listing
// (EACCES, EMFILE, EIO, ESTALE or ETIMEDOUT from NFS...) fails the listing with IOError: it is
// never served, or cached, as an empty or shortened listing.
//
// The root is resolved by path again at the start of each listing; a directory renamed over it
// (`mv new current`) is served from then on (see "the root" below).
// The ETag of a file is a hash of (size, mtime ns, ctime ns, inode, device), 15 characters (see
// MakeEtag): any rewrite, replacement, chmod or touch gives a new one. Read re-checks it with fstat
// after reading: a file changed during the read fails the read (FailedPrecondition, as an If-Match
// failure) rather than returning bytes of two versions.
//
// Thread-safe; no external synchronization needed (atomic counters; the current root, the
// listings in progress and the set of names already logged as skipped are guarded by mutexes).
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_set>
#include <utility>

#include "base/fd.h"
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
// Listings in progress whose names are kept between pages (see "listings" below), and how long.
constexpr size_t kMaxScans = 8;
constexpr std::chrono::seconds kScanMaxAge{60};

int64_t Nanos(const struct timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

// The ETag of a file: 90 bits of XXH3-128 over (size, mtime ns, ctime ns, inode, device), as
// 15 characters of the URL-safe base64 alphabet. 15 characters fit in std::string's inline
// buffer, so the copies of it in listings and inodes cost no allocation (memory per cached
// entry); 90 bits make two versions of a file colliding a 2^-90 chance.
std::string MakeEtag(const struct stat& st) {
  const uint64_t fields[5] = {static_cast<uint64_t>(st.st_size),
                              static_cast<uint64_t>(Nanos(st.st_mtim)),
                              static_cast<uint64_t>(Nanos(st.st_ctim)),
                              static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_dev)};
  const XXH128_hash_t h = XXH3_128bits(fields, sizeof(fields));
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string etag(15, '\0');
  uint64_t bits = h.low64;
  for (int i = 0; i < 15; ++i) {
    if (i == 10) bits = h.high64;  // 10 x 6 bits from low64, 5 x 6 from high64
    etag[static_cast<size_t>(i)] = kAlphabet[bits & 63];
    bits >>= 6;
  }
  return etag;
}

Ownership OwnerFromStat(const struct stat& st) {
  return Ownership{true, static_cast<uint32_t>(st.st_uid), static_cast<uint32_t>(st.st_gid),
                   static_cast<uint32_t>(st.st_mode & 0777)};
}

ObjectInfo InfoFromStat(const struct stat& st) {
  ObjectInfo info;
  info.size = static_cast<uint64_t>(st.st_size);
  info.etag = MakeEtag(st);
  info.mtime_ns = Nanos(st.st_mtim);
  info.owner = OwnerFromStat(st);
  return info;
}

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
  UniqueFd dir;
  int cur = dirfd;
  size_t pos = 0;
  for (;;) {
    const size_t slash = rel.find('/', pos);
    const std::string comp = rel.substr(pos, slash == std::string::npos ? rel.npos : slash - pos);
    if (slash == std::string::npos)
      return ::openat(cur, comp.c_str(), flags | O_CLOEXEC | O_NOFOLLOW);
    int next = ::openat(cur, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return -1;
    dir = UniqueFd(next);
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
  FileBlobStore(std::string root, UniqueFd root_fd, const struct stat& root_st, bool use_openat2)
      : root_(std::move(root)),
        have_openat2_(use_openat2),
        root_fd_(std::make_shared<const UniqueFd>(std::move(root_fd))),
        root_dev_(root_st.st_dev),
        root_ino_(root_st.st_ino) {}

  std::string Describe() const override { return "file://" + (root_.empty() ? "/" : root_); }

  Result<ObjectInfo> Head(std::string_view key) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    struct stat st;
    TIERFS_RETURN_IF_ERROR(StatRegular(CurrentRoot()->get(), key, &st));
    return InfoFromStat(st);
  }

  Result<size_t> Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                      std::string_view if_match_etag) override {
    return ReadInto(key, offset, ScatterBuffer(out), if_match_etag);
  }

  // ReadPinned's check (the pinned ETag) with the file read straight into the pieces.
  Result<size_t> ReadPinnedScatter(std::string_view key, uint64_t offset, const ScatterBuffer& out,
                                   const ObjectInfo& pinned) override {
    return ReadInto(key, offset, out, pinned.etag);
  }

 private:
  Result<size_t> ReadInto(std::string_view key, uint64_t offset, const ScatterBuffer& out,
                          std::string_view if_match_etag) {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    // Refuse anything but a regular file before opening it (opening a device node can have
    // effects of its own), then open without following a symlink and without blocking, and
    // check that what was opened is that same regular file.
    const std::shared_ptr<const UniqueFd> root = CurrentRoot();
    struct stat want;
    TIERFS_RETURN_IF_ERROR(StatRegular(root->get(), key, &want));
    UniqueFd fd(OpenBeneath(root->get(), std::string(key), O_RDONLY | O_NONBLOCK | O_NOCTTY,
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
    for (std::span<std::byte> piece : out.pieces()) {
      size_t in_piece = 0;
      while (in_piece < piece.size()) {
        ssize_t n = ::pread(fd.get(), piece.data() + in_piece, piece.size() - in_piece,
                            static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Fail(Status::FromErrno(errno, Ctx("pread", key)));
        if (n == 0) break;  // end of file
        in_piece += static_cast<size_t>(n);
        done += static_cast<size_t>(n);
      }
      if (in_piece < piece.size()) break;
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

 public:
  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckRelative(prefix, /*allow_trailing_slash=*/true, "prefix"));
    std::shared_ptr<const Scan> scan;
    if (!token.empty()) scan = FindScan(prefix, delimiter);
    if (scan == nullptr) {
      TIERFS_ASSIGN_OR_RETURN(scan, NewScan(prefix, delimiter));
    }

    ListPage page;
    const auto& items = scan->items;
    auto it = items.begin();
    if (!token.empty()) {
      it =
          std::upper_bound(items.begin(), items.end(), token,
                           [&](std::string_view t, const ScanItem& i) { return t < scan->Key(i); });
    }
    const size_t limit = static_cast<size_t>(std::clamp(max_keys, 1, 1000));
    // Files are stat'ed now, one directory open per run of keys with the same parent.
    std::string parent;
    bool have_parent = false;
    UniqueFd dir;
    // With delimiter "/" every prefix is a directory: it is stat'ed for its owner and mode.
    const bool dir_prefixes = delimiter == "/";
    for (; it != items.end() && page.objects.size() + page.prefixes.size() < limit; ++it) {
      const std::string_view key = scan->Key(*it);
      if (it->is_prefix && !dir_prefixes) {
        page.prefixes.emplace_back(key);
        continue;
      }
      // A prefix "a/b/" is the directory "b" in "a".
      const std::string_view path = it->is_prefix ? key.substr(0, key.size() - 1) : key;
      const auto [key_parent, key_name] = SplitPath(path);
      if (!have_parent || key_parent != parent) {
        have_parent = true;
        parent = std::string(key_parent);
        dir = UniqueFd(
            OpenBeneath(scan->root->get(), parent, O_RDONLY | O_DIRECTORY, &have_openat2_));
        if (dir.get() < 0 && !Gone(errno)) return ListFailure(errno, "open", parent);
      }
      if (dir.get() < 0) continue;  // the directory went away since the scan
      const std::string name(key_name);
      struct stat st;
      if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (Gone(errno)) continue;  // vanished since the scan
        return ListFailure(errno, "stat", key);
      }
      if (it->is_prefix) {
        if (!S_ISDIR(st.st_mode)) continue;  // replaced since the scan
        page.prefixes.emplace_back(key);
        page.prefix_owners.push_back(OwnerFromStat(st));
        continue;
      }
      if (!S_ISREG(st.st_mode)) {
        if (!S_ISDIR(st.st_mode)) LogSkipped(std::string(key), st.st_mode);
        continue;  // replaced since the scan
      }
      page.objects.push_back(ListEntry{std::string(key), InfoFromStat(st)});
    }
    if (it != items.end()) {
      page.next_token = std::string(scan->Key(*std::prev(it)));
      KeepScan(scan);
    } else {
      DropScan(scan);
    }
    return page;
  }

  Status Put(std::string_view key, std::span<const std::byte> data) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    const std::string path = Path(key);
    TIERFS_RETURN_IF_ERROR(MakeParents(key));
    std::string tmpl = JoinPath(SplitPath(path).first, std::string(kTempMarker) + "XXXXXX");
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

  // ---- listings ----
  //
  // A listing walks the directory once, reading names and d_type only (no stat), into a Scan:
  // its keys sorted, kept (at most kMaxScans, each at most kScanMaxAge) for the pages after the
  // first, so a directory of N entries costs one walk and N stats whatever the page size, not
  // one walk per page. Each page stats its own files when it is served, so sizes and ETags are
  // those of that moment; names created after the first page are not seen by that listing (as
  // in a listing of S3 taken while it changes), names removed are skipped.

  struct ScanItem {
    uint64_t offset = 0;  // of the key in Scan::arena
    uint32_t length = 0;
    bool is_prefix = false;  // a common prefix (directory with delimiter "/")
  };
  struct Scan {
    std::string prefix, delimiter;
    std::shared_ptr<const UniqueFd> root;  // the root directory the scan read
    std::string arena;                     // every key, back to back
    std::vector<ScanItem> items;           // sorted by key, no duplicates
    std::chrono::steady_clock::time_point taken;
    std::string_view Key(const ScanItem& i) const { return {arena.data() + i.offset, i.length}; }
  };

  Result<std::shared_ptr<const Scan>> NewScan(std::string_view prefix, std::string_view delimiter) {
    auto scan = std::make_shared<Scan>();
    scan->prefix = std::string(prefix);
    scan->delimiter = std::string(delimiter);
    scan->taken = std::chrono::steady_clock::now();
    TIERFS_ASSIGN_OR_RETURN(scan->root, ResolveRoot());
    // The directory part keeps its '/' ("a/b" → "a/" and "b").
    const std::string_view name_part = SplitPath(prefix).second;
    const std::string dir(prefix.substr(0, prefix.size() - name_part.size()));
    TIERFS_RETURN_IF_ERROR(Walk(dir, name_part, scan.get()));
    std::sort(scan->items.begin(), scan->items.end(),
              [&](const ScanItem& a, const ScanItem& b) { return scan->Key(a) < scan->Key(b); });
    scan->items.erase(std::unique(scan->items.begin(), scan->items.end(),
                                  [&](const ScanItem& a, const ScanItem& b) {
                                    return scan->Key(a) == scan->Key(b);
                                  }),
                      scan->items.end());
    scan->items.shrink_to_fit();
    return std::shared_ptr<const Scan>(std::move(scan));
  }

  std::shared_ptr<const Scan> FindScan(std::string_view prefix, std::string_view delimiter)
      EXCLUDES(scans_mu_) {
    const auto now = std::chrono::steady_clock::now();
    MutexLock l(&scans_mu_);
    std::erase_if(scans_, [&](const auto& s) { return now - s->taken > kScanMaxAge; });
    for (auto it = scans_.rbegin(); it != scans_.rend(); ++it) {
      if ((*it)->prefix == prefix && (*it)->delimiter == delimiter) return *it;
    }
    return nullptr;
  }
  void KeepScan(const std::shared_ptr<const Scan>& scan) EXCLUDES(scans_mu_) {
    MutexLock l(&scans_mu_);
    if (std::find(scans_.begin(), scans_.end(), scan) != scans_.end()) return;
    scans_.push_back(scan);
    if (scans_.size() > kMaxScans) scans_.pop_front();
  }
  void DropScan(const std::shared_ptr<const Scan>& scan) EXCLUDES(scans_mu_) {
    MutexLock l(&scans_mu_);
    std::erase(scans_, scan);
  }

  // Adds the keys below `dir` (relative, "" or ending in '/') whose names start with
  // `name_filter` (top level only) to `scan`. With delimiter "/", directories become common
  // prefixes and are not entered; otherwise the walk recurses. Only regular files and
  // directories are seen: symlinks (never followed, so no loops), FIFOs, sockets and devices are
  // skipped. Types come from d_type; only names without one (DT_UNKNOWN) are stat'ed.
  // A directory that is missing or not a real directory (ENOENT, ENOTDIR, a symlink) adds
  // nothing, like an S3 prefix without keys. Any other error (EACCES, EMFILE, EIO, ESTALE...),
  // opening or reading any directory of the walk, fails the whole walk: a listing is complete or
  // an error, never silently short.
  Status Walk(const std::string& dir, std::string_view name_filter, Scan* scan) {
    const std::string rel = dir.empty() ? std::string() : dir.substr(0, dir.size() - 1);
    UniqueFd dfd(OpenBeneath(scan->root->get(), rel, O_RDONLY | O_DIRECTORY, &have_openat2_));
    if (dfd.get() < 0) return Gone(errno) ? Status::OK() : ListFailure(errno, "open", rel);
    DIR* d = ::fdopendir(dfd.get());
    if (d == nullptr) return ListFailure(errno, "fdopendir", rel);
    const int fd = dfd.release();  // owned by `d` now
    std::unique_ptr<DIR, int (*)(DIR*)> closer(d, &::closedir);
    const std::string& prefix = scan->prefix;
    const std::string& delimiter = scan->delimiter;
    auto add = [&](std::string_view key, bool is_prefix) {
      scan->items.push_back(
          ScanItem{scan->arena.size(), static_cast<uint32_t>(key.size()), is_prefix});
      scan->arena.append(key);
    };
    std::string key;
    for (;;) {
      errno = 0;
      dirent* e = ::readdir(d);
      if (e == nullptr) {
        if (errno != 0) return ListFailure(errno, "readdir", rel);
        break;
      }
      std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (name.starts_with(kTempMarker)) continue;  // an in-progress Put
      if (!name.starts_with(name_filter)) continue;
      key = dir;
      key += name;
      mode_t mode = DTTOIF(e->d_type);
      if (e->d_type == DT_UNKNOWN) {
        struct stat st;
        if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (errno == ENOENT) continue;  // vanished
          return ListFailure(errno, "stat", key);
        }
        mode = st.st_mode;
      }
      if (S_ISDIR(mode)) {
        if (delimiter == "/") {
          key += '/';
          add(key, true);
        } else {
          TIERFS_RETURN_IF_ERROR(Walk(key + "/", "", scan));
        }
        continue;
      }
      if (!S_ISREG(mode)) {
        LogSkipped(key, mode);
        continue;
      }
      if (!delimiter.empty()) {
        size_t pos = key.find(delimiter, prefix.size());
        if (pos != std::string::npos) {
          add(std::string_view(key).substr(0, pos + delimiter.size()), true);
          continue;
        }
      }
      add(key, false);
    }
    return Status::OK();
  }

  // Whether a failed open/stat during a listing means "no such directory or file" (it lists as
  // absent): ENOENT, ENOTDIR, or a symlink in the way (ELOOP; EXDEV from openat2's resolver).
  static bool Gone(int err) {
    return err == ENOENT || err == ENOTDIR || err == ELOOP || err == EXDEV;
  }

  // Any other error of a listing: IOError naming the path and the cause, whatever the errno (a
  // directory the daemon may not read is an error of the origin, not an empty directory).
  Status ListFailure(int err, std::string_view op, std::string_view rel) {
    return Fail(Status::IOError(
        fmt::format("list: {} {}: {}", op,
                    EscapeForLog(rel.empty() ? root_ + "/" : root_ + "/" + std::string(rel)),
                    std::strerror(err))));
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

  // lstat of `key` below `root_fd` without following symlinks in any component; NotFound unless
  // it is a regular file.
  Status StatRegular(int root_fd, std::string_view key, struct stat* st) {
    const auto [parent_part, name_part] = SplitPath(key);
    const std::string parent(parent_part), name(name_part);
    UniqueFd dir(OpenBeneath(root_fd, parent, O_RDONLY | O_DIRECTORY, &have_openat2_));
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

  // ---- the root ----
  //
  // The root is opened by path at construction and again at the start of every listing (a
  // listing is what a metadata TTL expiring asks for). When the path then names another
  // directory (device or inode differ: `mv new current` published a new tree), that directory
  // becomes the root of every later call; its files have other inodes, so other ETags, and
  // nothing cached of the old tree is served for them. A call in progress keeps the root it
  // started with (shared_ptr). Between two listings, Head and Read resolve keys beneath the root
  // the last listing saw, so they agree with the listing the catalog holds.

  std::shared_ptr<const UniqueFd> CurrentRoot() EXCLUDES(root_mu_) {
    MutexLock l(&root_mu_);
    return root_fd_;
  }

  // Opens the root path again and makes it the current root if it is another directory.
  // IOError (never NotFound: a missing root is an unavailable origin, not an empty one) when it
  // cannot be opened or is not a directory.
  Result<std::shared_ptr<const UniqueFd>> ResolveRoot() EXCLUDES(root_mu_) {
    const std::string path = root_.empty() ? std::string("/") : root_;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct stat st;
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) {
      return Fail(Status::IOError(
          fmt::format("file store root {}: {}", EscapeForLog(path), std::strerror(errno))));
    }
    uint64_t old_dev = 0, old_ino = 0;
    {
      MutexLock l(&root_mu_);
      if (st.st_dev == root_dev_ && st.st_ino == root_ino_) return root_fd_;
      old_dev = root_dev_;
      old_ino = root_ino_;
      root_fd_ = std::make_shared<const UniqueFd>(std::move(fd));
      root_dev_ = st.st_dev;
      root_ino_ = st.st_ino;
    }
    Logger(Module::kBlobClient)
        .info(
            "file store root {} is another directory now (device:inode {}:{} -> {}:{}); serving "
            "the new tree",
            EscapeForLog(path), old_dev, old_ino, static_cast<uint64_t>(st.st_dev),
            static_cast<uint64_t>(st.st_ino));
    return CurrentRoot();
  }

  // Constant after construction.
  const std::string root_;
  std::atomic<bool> have_openat2_;
  Mutex root_mu_;  // a leaf
  // The root directory; every path is resolved beneath it.
  std::shared_ptr<const UniqueFd> root_fd_ GUARDED_BY(root_mu_);
  uint64_t root_dev_ GUARDED_BY(root_mu_);
  uint64_t root_ino_ GUARDED_BY(root_mu_);
  Mutex skipped_mu_;
  std::unordered_set<std::string> skipped_logged_ GUARDED_BY(skipped_mu_);
  Mutex scans_mu_;                                                       // a leaf
  std::deque<std::shared_ptr<const Scan>> scans_ GUARDED_BY(scans_mu_);  // oldest first
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
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) {
    return Status::FromErrno(errno, "file store root " + root);
  }
  if (root == "/") root.clear();  // keys then map to "/" + key
  return std::unique_ptr<BlobStore>(
      std::make_unique<FileBlobStore>(root, std::move(fd), st, options.use_openat2));
}

}  // namespace tierfs
