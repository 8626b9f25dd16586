// The cache directory of one daemon (CACHE_DIR: `lock`, `meta/` for LMDB, `blocks/` for L2;
// layout in tiercache/FORMAT.md), made private and locked before anything in it is touched.
//
// Thread-compatible: called once from the daemon's main thread at start-up.
#pragma once

#include <memory>
#include <string>

#include "base/result.h"

namespace tierfs {

// Holds the exclusive lock on a cache directory for as long as it lives.
class CacheDirLock {
 public:
  explicit CacheDirLock(int fd) : fd_(fd) {}
  ~CacheDirLock();
  CacheDirLock(const CacheDirLock&) = delete;
  CacheDirLock& operator=(const CacheDirLock&) = delete;

 private:
  const int fd_;  // CACHE_DIR/lock, flock(LOCK_EX) held
};

// Creates `dir` (and missing parents) mode 0700; refuses (PermissionDenied, naming the directory,
// its owner and its mode) an existing one that the effective uid does not own or that group or
// others may write; narrows a group/other-readable one to 0700 (with a warning); then takes an
// exclusive flock on DIR/lock (0600) and writes our PID into it. A second daemon on the same
// directory gets Unavailable naming the first one's PID, before it has read or removed any
// block or LMDB file. The lock is released when the returned object is destroyed (or the
// process exits).
Result<std::unique_ptr<CacheDirLock>> PrepareCacheDir(const std::string& dir);

}  // namespace tierfs
