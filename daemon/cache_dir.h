// The cache directory of one daemon (CACHE_DIR: `lock`, `meta/` for LMDB, `blocks/` for L2;
// layout in tiercache/FORMAT.md), made private and locked before anything in it is touched.
//
// Thread-compatible: called once from the daemon's main thread at start-up.
#pragma once

#include <memory>
#include <string>

#include "base/result.h"

namespace tierfs {

// Holds the verified cache directory open, and the exclusive lock on it, for as long as it lives.
class CacheDirLock {
 public:
  CacheDirLock(int dir_fd, int lock_fd);
  ~CacheDirLock();
  CacheDirLock(const CacheDirLock&) = delete;
  CacheDirLock& operator=(const CacheDirLock&) = delete;

  // "/proc/self/fd/N": a path that names the directory that was verified, whatever is done to
  // the names leading to it afterwards (a rename, a symlink swapped in). Everything under the
  // cache directory (the LMDB store, the block files) is opened through it.
  const std::string& anchored_path() const { return anchored_; }

 private:
  const int dir_fd_;  // CACHE_DIR itself, O_DIRECTORY
  const int fd_;      // CACHE_DIR/lock, flock(LOCK_EX) held
  const std::string anchored_;
};

// Opens `dir` one component at a time from `/` without following a symlink another user could
// have planted, creating missing components mode 0700 (mkdirat, relative to the parent held
// open), and refuses (PermissionDenied, naming the directory and why):
//   - a directory on the way that another user may change: owned by a uid other than root and
//     the effective uid, or writable by group or others without the sticky bit;
//   - a symlink on the way, unless its directory is writable only by root and the effective uid
//     or (sticky) the link belongs to root or the effective uid;
//   - a cache directory that the effective uid does not own or that group or others may write.
// A group/other-readable cache directory is narrowed to 0700 (fchmod, with a warning). Then takes
// an exclusive flock on DIR/lock (0600, opened O_NOFOLLOW relative to the directory) and writes
// our PID into it. A second daemon on the same directory gets Unavailable naming the first one's
// PID, before it has read or removed any block or LMDB file. The lock is released when the
// returned object is destroyed (or the process exits).
Result<std::unique_ptr<CacheDirLock>> PrepareCacheDir(const std::string& dir);

}  // namespace tierfs
