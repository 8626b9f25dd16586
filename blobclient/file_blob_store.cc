// FileBlobStore — BlobStore over a local or NFS directory (file:// origins and tests).
//
// Keys are '/'-separated paths below the root. A key with an empty, "." or ".." component, a
// leading '/' or a NUL byte is refused (InvalidArgument), so no key can name a path outside the
// root. The ETag of a file is derived from (size, mtime in ns, inode): any rewrite or replacement
// gives a new ETag, which is what open-to-close consistency needs. List emulates ListObjectsV2:
// keys in byte order, directories become common prefixes when the delimiter is "/", and the
// continuation token is the last key or prefix returned. Put writes a temp file and renames it,
// so readers never see a partial object.
//
// Thread-safe; no external synchronization needed (no mutable state besides atomic counters).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <map>
#include <optional>

#include "base/logging.h"
#include "blobclient/blob_store.h"

namespace tierfs {
namespace {

constexpr std::string_view kTempMarker = ".tierfs-tmp-";

std::string MakeEtag(const struct stat& st) {
  int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000LL + st.st_mtim.tv_nsec;
  char buf[80];
  std::snprintf(buf, sizeof(buf), "%llx-%llx-%llx", static_cast<unsigned long long>(st.st_size),
                static_cast<unsigned long long>(mtime_ns),
                static_cast<unsigned long long>(st.st_ino));
  return buf;
}

ObjectInfo InfoFromStat(const struct stat& st) {
  ObjectInfo info;
  info.size = static_cast<uint64_t>(st.st_size);
  info.etag = MakeEtag(st);
  info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000LL + st.st_mtim.tv_nsec;
  return info;
}

// Checks every '/'-separated component of `path` (allowing a trailing '/' when allow_dir).
Status CheckRelative(std::string_view path, bool allow_trailing_slash, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("file store: " + std::string(what) + " '" + std::string(path) +
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
  explicit FileBlobStore(std::string root) : root_(std::move(root)) {}

  std::string Describe() const override { return "file://" + (root_.empty() ? "/" : root_); }

  Result<ObjectInfo> Head(std::string_view key) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    struct stat st;
    if (::stat(Path(key).c_str(), &st) != 0)
      return Fail(Status::FromErrno(errno, Ctx("stat", key)));
    if (!S_ISREG(st.st_mode)) return Status::NotFound(Ctx("not a regular file", key));
    return InfoFromStat(st);
  }

  Result<size_t> Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                      std::string_view if_match_etag) override {
    ++requests_;
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    int fd = ::open(Path(key).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Fail(Status::FromErrno(errno, Ctx("open", key)));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::NotFound(Ctx("not a regular file", key));
    }
    if (!if_match_etag.empty() && if_match_etag != MakeEtag(st)) {
      ::close(fd);
      return Fail(Status::FailedPrecondition(Ctx("object changed (ETag mismatch)", key)));
    }
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n =
          ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        Status s = Status::FromErrno(errno, Ctx("pread", key));
        ::close(fd);
        return Fail(s);
      }
      if (n == 0) break;  // end of file
      done += static_cast<size_t>(n);
    }
    ::close(fd);
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
    return std::string(op) + " " + root_ + "/" + std::string(key);
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
  // are not entered; otherwise the walk recurses (real directories only, so symlink loops cannot
  // trap it) and the delimiter is applied to the full keys.
  void Walk(const std::string& dir, std::string_view name_filter, const std::string& prefix,
            const std::string& delimiter, std::map<std::string, std::optional<ObjectInfo>>* out) {
    const std::string abs = dir.empty() ? root_ : root_ + "/" + dir.substr(0, dir.size() - 1);
    DIR* d = ::opendir(abs.c_str());
    if (d == nullptr) return;  // a missing "directory" lists as empty, like S3
    int dfd = ::dirfd(d);
    while (dirent* e = ::readdir(d)) {
      std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (name.starts_with(kTempMarker)) continue;  // an in-progress Put
      if (!name.starts_with(name_filter)) continue;
      const std::string rel = dir + std::string(name);
      struct stat st;
      if (::fstatat(dfd, e->d_name, &st, 0) != 0) continue;  // vanished or dangling symlink
      if (S_ISDIR(st.st_mode)) {
        if (delimiter == "/") {
          (*out)[rel + "/"] = std::nullopt;
          continue;
        }
        struct stat lst;
        if (::fstatat(dfd, e->d_name, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(lst.st_mode)) {
          Walk(rel + "/", "", prefix, delimiter, out);
        }
        continue;
      }
      if (!S_ISREG(st.st_mode)) continue;
      if (!delimiter.empty()) {
        size_t pos = rel.find(delimiter, prefix.size());
        if (pos != std::string::npos) {
          (*out)[rel.substr(0, pos + delimiter.size())] = std::nullopt;
          continue;
        }
      }
      (*out)[rel] = InfoFromStat(st);
    }
    ::closedir(d);
  }

  // Constant after construction.
  const std::string root_;
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
  if (root == "/") root.clear();  // keys then map to "/" + key
  return std::unique_ptr<BlobStore>(std::make_unique<FileBlobStore>(root));
}

}  // namespace tierfs
