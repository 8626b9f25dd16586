// fuse/internal/filesystem_tables — the entries of the Filesystem's inode and handle tables
// (fuse/filesystem.h), shared by filesystem.cc (the request paths) and filesystem_state.cc (the
// tables handed to the daemon that takes the mount over). Internal to fuse/.
//
// Thread-safety: as each struct says; the tables themselves are the Filesystem's.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "fuse/filesystem.h"

namespace tierfs {

// A read that has not happened yet, for Inode::last_source.
inline constexpr int kNoRead = -2;

// One per inode the kernel knows: a listing of 200,000 files read with readdirplus makes 200,000
// of them, so it stays small (memory per cached entry). What only opened or read files
// need lives in `used`, made at the first Open or ReadInode.
struct Filesystem::Inode {
  Inode(InodeId i, std::string p, bool d) : ino(i), path(std::move(p)), is_dir(d) {}
  struct Used {
    std::string opened_etag;    // the version the last Open pinned: what the page cache may hold
    uint32_t open_handles = 0;  // handles Open made that are not released yet
    // Files read without an open (ReadInode): the reader of the version `etag` names. Reset
    // when the inode is forgotten (it points back at the inode).
    std::shared_ptr<FileHandle> reader;
  };
  // REQUIRES: Filesystem::mu_.
  Used& used_state() {
    if (used == nullptr) used = std::make_unique<Used>();
    return *used;
  }
  // Constant after construction.
  const InodeId ino;
  const std::string path;
  // State below is protected by Filesystem::mu_.
  uint64_t nlookup = 0;
  uint64_t size = 0;  // files: last seen version
  std::string etag;
  int64_t mtime_ns = 0;
  bool owner_known = false;  // the origin's owner and mode, as last seen (file://)
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t mode = 0;
  std::unique_ptr<Used> used;  // null until the file is opened or read
  // Which tier served the last read: a tier index, kOriginTier or kNoRead. Lock-free.
  std::atomic<int> last_source{kNoRead};
  const bool is_dir;  // constant; here to pack with last_source
};

// An open directory: the Catalog's shared snapshot of the listing (one copy however many handles
// have the directory open), taken at the first readdir and again at a rewind, so the offsets
// handed to the kernel (index + 3) stay valid for the life of the handle however the directory
// changes underneath.
struct Filesystem::DirHandle {
  // Constant after construction.
  InodeId ino = 0;
  InodeId parent_ino = kUnknownInode;
  std::string path;
  // Held across Catalog::Snapshot: only readers of this same handle wait (the kernel serialises
  // readdir per open directory anyway). Before Filesystem::mu_.
  Mutex mu;
  std::shared_ptr<const Listing> listing GUARDED_BY(mu);
  bool used GUARDED_BY(mu) = false;
};

// An open file: the pinned version and its readahead state.
struct Filesystem::FileHandle {
  FileHandle(ObjectRef o, std::shared_ptr<Inode> n) : stream(std::move(o)), node(std::move(n)) {}
  const ObjectRef& obj() const { return stream.object(); }
  Prefetcher::Stream stream;  // holds the pinned version
  const std::shared_ptr<Inode> node;
};

}  // namespace tierfs
