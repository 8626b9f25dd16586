// PosixFlashStore: the real FlashStore (tier.h) — one regular file per path under a root
// directory. Writes go to a temp file in the destination directory ("<name>.tmp.<pid>.<n>"),
// are optionally fsynced, then renamed over the final name, so a reader sees either no file or
// the whole file. A large page-aligned block's whole pages are written with O_DIRECT (no copy
// into the page cache; WriteDirect), the rest buffered. Missing parent directories are created
// on demand. Directories are created 0700 and files 0600: cached bytes are private to the
// daemon's user. errno is translated into Status here, once (C3).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "base/fd.h"
#include "base/strings.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace {

// Creates every missing directory of `dir` (absolute), each mode 0700 (the cache is private to
// the daemon's user). EEXIST is fine; existing directories are left as they are.
Status MakeDirs(const std::string& dir) {
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    const std::string part = dir.substr(0, pos);
    if (!part.empty() && ::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, "mkdir " + part);
    }
    if (pos == std::string::npos) break;
  }
  return Status::OK();
}

// Thread-safe; no external synchronization needed (no mutable state besides atomics).
class PosixFlashStore final : public FlashStore {
 public:
  PosixFlashStore(std::string root, bool fsync) : root_(std::move(root)), fsync_(fsync) {}

  Status WriteFile(const std::string& rel_path, std::span<const std::byte> data,
                   std::span<const std::byte> trailer) override {
    const std::string path = Abs(rel_path);
    const std::string tmp =
        path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++tmp_counter_);
    // The page-aligned prefix of a page-aligned block (a block's own mapping: tiercache/block.cc)
    // goes through O_DIRECT, the rest buffered (below).
    const size_t direct = DirectPrefix(data);
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (direct > 0 ? O_DIRECT : 0);
    int fd = ::open(tmp.c_str(), flags, 0600);
    if (fd < 0 && errno == ENOENT) {
      TIERFS_RETURN_IF_ERROR(MakeDirs(std::string(SplitPath(tmp).first)));
      fd = ::open(tmp.c_str(), flags, 0600);
    }
    if (fd < 0 && errno == EINVAL && (flags & O_DIRECT) != 0) {  // no O_DIRECT here (tmpfs)
      direct_ok_.store(false, std::memory_order_relaxed);
      flags &= ~O_DIRECT;
      fd = ::open(tmp.c_str(), flags, 0600);
    }
    if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
    Status st;
    size_t done = 0;
    if ((flags & O_DIRECT) != 0) {
      st = WriteDirect(fd, data.first(direct), tmp, &done);
      // The rest (and all of it, had the filesystem refused the direct write) buffered.
      if (st.ok() && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT) != 0) {
        st = Status::FromErrno(errno, "fcntl " + tmp);
      }
    }
    if (st.ok()) st = WriteAll(fd, data.subspan(done), tmp);
    if (st.ok() && !trailer.empty()) st = WriteAll(fd, trailer, tmp);
    if (st.ok() && fsync_ && ::fdatasync(fd) != 0) st = Status::FromErrno(errno, "fsync " + tmp);
    if (::close(fd) != 0 && st.ok()) st = Status::FromErrno(errno, "close " + tmp);
    if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      st = Status::FromErrno(errno, "rename " + tmp);
    }
    if (!st.ok()) ::unlink(tmp.c_str());
    return st;
  }

  Result<size_t> ReadFile(const std::string& rel_path, std::span<std::byte> out) override {
    const std::string path = Abs(rel_path);
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return Status::FromErrno(errno, "open " + path);
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = ::pread(fd.get(), out.data() + got, out.size() - got, static_cast<off_t>(got));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "read " + path);
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    return got;
  }

  Status ReadAt(const std::string& rel_path, std::span<const ReadRange> ranges) override {
    const std::string path = Abs(rel_path);
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return Status::FromErrno(errno, "open " + path);
    Status st;
    for (const ReadRange& r : ranges) {
      size_t got = 0;
      while (st.ok() && got < r.out.size()) {
        ssize_t n = ::pread(fd.get(), r.out.data() + got, r.out.size() - got,
                            static_cast<off_t>(r.offset + got));
        if (n < 0) {
          if (errno == EINTR) continue;
          st = Status::FromErrno(errno, "read " + path);
        } else if (n == 0) {
          st = Status::Corruption("short file " + path);
        } else {
          got += static_cast<size_t>(n);
        }
      }
      if (!st.ok()) break;
    }
    return st;
  }

  Status RemoveFile(const std::string& rel_path) override {
    const std::string path = Abs(rel_path);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno(errno, "unlink " + path);
    }
    return Status::OK();
  }

  Result<int> OpenForRead(const std::string& rel_path) override {
    const std::string path = Abs(rel_path);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open " + path);
    return fd;
  }

  Status WillNeed(const std::string& rel_path) override {
    TIERFS_ASSIGN_OR_RETURN(int opened, OpenForRead(rel_path));
    const UniqueFd fd(opened);
    const int err = ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_WILLNEED);
    if (err != 0) return Status::FromErrno(err, "fadvise " + Abs(rel_path));
    return Status::OK();
  }

  Result<uint64_t> FreeBytes() override {
    struct statvfs sv;
    if (::statvfs(root_.c_str(), &sv) != 0) return Status::FromErrno(errno, "statvfs " + root_);
    return static_cast<uint64_t>(sv.f_bavail) * static_cast<uint64_t>(sv.f_frsize);
  }

  Status ListFiles(std::vector<std::string>* out) override {
    std::error_code ec;
    std::filesystem::recursive_directory_iterator it(root_, ec), end;
    if (ec) return Status::FromErrno(ec.value(), "list " + root_);
    for (; it != end; it.increment(ec)) {
      if (ec) return Status::FromErrno(ec.value(), "list " + root_);
      std::error_code fec;
      if (!it->is_regular_file(fec)) continue;
      out->push_back(std::filesystem::relative(it->path(), root_, fec).generic_string());
    }
    if (ec) return Status::FromErrno(ec.value(), "list " + root_);
    return Status::OK();
  }

 private:
  std::string Abs(const std::string& rel) const { return root_ + "/" + rel; }

  // Writing a block file through the page cache copies every byte into it (41% of the daemon's
  // CPU in a cold sequential read, 19% in a cold epoch over 128 KiB files:
  // copy_folio_from_iter_atomic) and leaves the host holding a second copy of what L1 holds. The
  // page-aligned prefix of a block whose bytes start on a page (every block of at least
  // Block::kMapThreshold: block arena storage or a mapping of its own) of at least kDirectMinBytes
  // is written with O_DIRECT instead, from L1's buffer to the device; the rest (a short last
  // page, the chunk trailer) is buffered. Smaller blocks stay buffered: a few pages are cheap to
  // copy, and a direct write of them would wait for the device.
  // Filesystems without O_DIRECT (tmpfs: EINVAL at open or at the first write) are written
  // buffered from then on.
  static constexpr size_t kDirectAlign = 4096;
  static constexpr size_t kDirectMinBytes = Block::kMapThreshold;
  size_t DirectPrefix(std::span<const std::byte> data) const {
    if (!direct_ok_.load(std::memory_order_relaxed) || data.size() < kDirectMinBytes ||
        reinterpret_cast<uintptr_t>(data.data()) % kDirectAlign != 0) {
      return 0;
    }
    return data.size() / kDirectAlign * kDirectAlign;
  }
  // Writes `data` (page-aligned, a multiple of pages) to `fd`, opened O_DIRECT; *done: the bytes
  // written. An EINVAL at the start (the filesystem refuses direct writes) is not an error: it
  // turns direct writes off, and the caller writes the rest buffered.
  Status WriteDirect(int fd, std::span<const std::byte> data, const std::string& what,
                     size_t* done) {
    while (*done < data.size()) {
      ssize_t n = ::write(fd, data.data() + *done, data.size() - *done);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EINVAL && *done == 0) {
          direct_ok_.store(false, std::memory_order_relaxed);
          return Status::OK();
        }
        return Status::FromErrno(errno, "write " + what);
      }
      *done += static_cast<size_t>(n);
      if (*done % kDirectAlign != 0) break;  // a short write: the rest buffered
    }
    return Status::OK();
  }

  static Status WriteAll(int fd, std::span<const std::byte> data, const std::string& what) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "write " + what);
      }
      done += static_cast<size_t>(n);
    }
    return Status::OK();
  }

  const std::string root_;
  const bool fsync_;
  std::atomic<uint64_t> tmp_counter_{0};
  std::atomic<bool> direct_ok_{true};
};

}  // namespace

Result<std::unique_ptr<FlashStore>> NewPosixFlashStore(const std::string& root, bool fsync) {
  if (root.empty()) return Status::InvalidArgument("empty flash cache directory");
  TIERFS_RETURN_IF_ERROR(MakeDirs(root));
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return std::unique_ptr<FlashStore>(std::make_unique<PosixFlashStore>(r, fsync));
}

}  // namespace tierfs
