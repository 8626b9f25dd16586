// Filesystem — the FUSE semantics of tierfs in tierfs terms, with no FUSE types (conventions C5):
// an inode table with kernel lookup counts, lookup/getattr/readdir over the Catalog, open/read
// over the TieredCache (readahead and next-files prefetch by its Prefetcher), statfs, and the
// user.tierfs.* xattrs. The handlers of fuse/ops.cc and fuse/file_ops.cc translate kernel
// requests into calls on this class and replies; everything here is testable without
// mounting.
//
// Inodes. Inode 1 is the root (path ""). Every other inode names a path relative to the source
// ("a/b/c"); numbers are never reused within one Filesystem, so the generation is constant. An
// inode lives while the kernel holds lookups on it (Lookup/LookupDirItem add one, Forget drops
// n); Forget re-finds the inode by number under the table lock before erasing it, and erases the
// path → inode mapping only if it still points at that inode (a path whose type changed gets a
// new inode while the kernel still holds the old one; so does a file opened at one version
// whose lookup names another: the page cache is per inode, see Obtain).
//
// Open-to-close consistency: Open() revalidates the object (Catalog::Revalidate) and pins its
// version (key, size, ETag) in the file handle; every Read of that handle reads that version.
// Open tells the caller whether the kernel may keep its page cache: only when the ETag equals the
// one the inode last saw. A read that meets another version fails with FailedPrecondition (ESTALE)
// and marks the file in the Catalog (Invalidate), so the next Open HEADs it and pins the new
// version at once, whatever metadata_ttl says. An Open that finds another version than the one
// handles still open on the inode pinned fails with FailedPrecondition (ESTALE) and unmaps the
// path from the inode: the kernel looks the path up again and opens the new version on a new
// inode, so the old handles never read the new version's pages (the page cache is per inode).
//
// Thread-safe; no external synchronization needed. Lock order (outer first):
//   DirHandle::mu → Filesystem::mu_ ; handles_mu_ is a leaf (the Prefetcher's locks too).
// No lock is held across a Catalog or TieredCache call.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/cancel.h"
#include "base/clock.h"
#include "base/mutex.h"
#include "base/result.h"
#include "tiercache/catalog.h"
#include "tiercache/prefetcher.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {

class XattrHandler;
class XattrRegistry;
struct XattrTarget;
class PrefetchJobs;
class PolicyResolver;

// What the daemon behind the mount offers the root's user.tierfs.log_level and
// user.tierfs.daemon (fuse/xattr_handlers.h). fuse/ parses and checks the values; the daemon owns
// the logger setup and acts. Implementations are thread-safe.
class DaemonControl {
 public:
  virtual ~DaemonControl() = default;
  // The current log level's name ("info").
  virtual std::string LogLevel() const = 0;
  // Sets the log level of every logger; `level` is one ParseLogLevel accepts.
  virtual Status SetLogLevel(std::string_view level) = 0;
  // "pid=N version=V cache_dir=PATH log=DEST log_format=text|json" (no spaces inside values
  // other than the last; values are escaped).
  virtual std::string Describe() const = 0;
};

using InodeId = uint64_t;
inline constexpr InodeId kRootInode = 1;
// st_ino reported by plain readdir for entries the kernel has not looked up yet (as libfuse's
// high-level API does with FUSE_UNKNOWN_INO).
inline constexpr InodeId kUnknownInode = 0xffffffff;

struct FilesystemOptions {
  uint32_t uid = 0;  // owner of every inode (daemon/: the mounting user unless configured)
  uint32_t gid = 0;
  // Permission bits of every file and directory. The owner's write bit lets the owner set
  // user.tierfs.* when the kernel checks modes (default_permissions); writes still get EROFS.
  uint32_t file_mode = 0644;
  uint32_t dir_mode = 0755;
  // Files and directories whose origin reports an owner, group and mode (file://, DirEntry::
  // owner_known) show those instead, so the kernel's default_permissions check applies the
  // origin's permissions; only the fields the user set (daemon/: fuse.uid, fuse.gid,
  // fuse.file_mode, fuse.dir_mode given) replace the origin's, for every inode. The root shows
  // uid/gid/dir_mode.
  bool uid_set = false;
  bool gid_set = false;
  bool file_mode_set = false;
  bool dir_mode_set = false;
  // Who may set user.tierfs.* attributes besides root: the mounting user (daemon/: the daemon's
  // uid). Others get PermissionDenied (EPERM); reading the attributes stays open to all.
  uint32_t control_uid = 0;
  // The control group (daemon/: fuse.control_group): a caller whose primary or supplementary
  // groups hold this gid may set the names XattrHandler::GroupSettable() allows (the prefetch
  // names), as owner of the jobs it starts. Unset: nobody but root and control_uid.
  std::optional<uint32_t> control_gid;
  // Readahead and the next-files prefetch (tiercache/prefetcher.h), driven by opens and reads.
  PrefetcherOptions prefetch;
};

// Who sets an attribute, as the kernel names the caller of a request: its uid, and its primary
// and supplementary gids (fuse/: the request's gid and /proc/PID/status's Groups).
struct XattrCaller {
  uint32_t uid = 0;
  std::vector<uint32_t> gids;
};

// The attributes of an inode, as stat(2) shows them.
struct InodeAttr {
  InodeId ino = 0;
  bool is_dir = false;
  uint32_t mode = 0;   // S_IFDIR|dir_mode or S_IFREG|file_mode
  uint32_t nlink = 1;  // 2 for directories
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t blksize = 0;  // the cache's block size: the unit reads are best issued in
};

// A positive lookup: the kernel now holds one more lookup on `attr.ino`.
struct LookupEntry {
  uint64_t generation = 0;
  InodeAttr attr;
};

// One directory entry as readdir returns it. `next_offset` is the offset to pass to ReadDir to
// continue after this entry; offsets are stable for the life of the directory handle.
struct DirItem {
  std::string name;
  bool is_dir = false;
  bool is_dot = false;  // "." or "..": never looked up by readdirplus
  InodeId ino = kUnknownInode;
  uint64_t size = 0;
  std::string etag;
  int64_t mtime_ns = 0;
  bool owner_known = false;  // the origin's owner and mode (DirEntry)
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t mode = 0;
  uint64_t next_offset = 0;
};

struct OpenResult {
  uint64_t fh = 0;          // handle id for Read/Release
  bool keep_cache = false;  // the kernel may keep cached pages of this inode
  // The open saw another size or mtime than the inode had: the kernel's cached attributes (its
  // i_size) are stale and must be invalidated, or reads would stop at the old size.
  bool attr_changed = false;
  // No open of this inode since the kernel looked it up: the kernel holds none of its pages, so
  // pages stored with this open (ReadWholeIfLocal) may be kept whatever keep_cache says.
  bool first_open = false;
  // The version pinned, as block keys name it (BlockVersion): equal strings, the same bytes.
  std::string version;
};

struct FsStatsInfo {
  uint64_t block_size = 0;    // f_bsize / f_frsize
  uint64_t total_blocks = 0;  // capacity of the largest host tier, in blocks
  uint64_t free_blocks = 0;
  uint64_t files = 0;  // inodes known
  uint32_t name_max = 255;
};

// Counters of the FUSE layer (C20), shown in user.tierfs.stats as fuse.* (with the Prefetcher's
// readahead_requests and next_file_prefetches).
struct FsCounters {
  std::atomic<uint64_t> lookups{0};
  std::atomic<uint64_t> negative_lookups{0};
  std::atomic<uint64_t> opens{0};
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> stale_reads{0};  // reads failed with ESTALE: the object changed
  std::atomic<uint64_t> open_stores{0};  // files read whole at their open (ReadWholeIfLocal)
  // Opens answered with a backing file the kernel reads itself (FUSE passthrough: FileForKernel,
  // NotePassthroughOpen).
  std::atomic<uint64_t> passthrough_opens{0};
};

// The inode and handle tables of a Filesystem, as a daemon hands them to the one that takes its
// mount over (a live restart: fuse/FORMAT.md). Inode numbers, lookup counts and handle ids stay
// what the kernel holds; each open file keeps the version it pinned. Readahead state and
// directory listings are not carried: the new daemon starts them afresh (a directory handle
// re-lists at its next readdir).
struct FilesystemState {
  struct InodeRec {
    InodeId ino = 0;
    std::string path;
    bool is_dir = false;
    bool mapped = true;  // its path names it (false: a newer version of the path has its own)
    uint64_t nlookup = 0;
    uint64_t size = 0;
    std::string etag;
    int64_t mtime_ns = 0;
    bool owner_known = false;
    uint32_t uid = 0;
    uint32_t gid = 0;
    uint32_t mode = 0;
    std::string opened_etag;    // the version the last Open pinned ("" when never opened)
    uint32_t open_handles = 0;  // Open handles not released yet
  };
  struct FileRec {
    uint64_t fh = 0;
    InodeId ino = 0;
    std::string key;  // the pinned version
    uint64_t size = 0;
    std::string etag;
    int64_t mtime_ns = 0;
  };
  struct DirRec {
    uint64_t dh = 0;
    InodeId ino = 0;
    InodeId parent_ino = kUnknownInode;
    std::string path;
  };
  InodeId next_ino = kRootInode + 1;
  uint64_t next_handle = 1;
  std::vector<InodeRec> inodes;  // the root included
  std::vector<FileRec> files;
  std::vector<DirRec> dirs;
};

class Filesystem {
 public:
  // `catalog`, `cache` and `clock` are not owned and must outlive the Filesystem.
  Filesystem(const FilesystemOptions& options, Catalog* catalog, TieredCache* cache, Clock* clock);
  ~Filesystem();
  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  // ---- inodes ----
  // The entry `name` of directory `parent`; adds one lookup. NotFound: no such entry (the caller
  // replies a negative entry). FailedPrecondition: `parent` is not a known directory inode.
  Result<LookupEntry> Lookup(InodeId parent, std::string_view name);
  // For readdirplus: makes `item` (from ReadDir of `parent`) known and adds one lookup, without
  // asking the Catalog again. REQUIRES: !item.is_dot.
  Result<LookupEntry> LookupDirItem(InodeId parent, const DirItem& item);
  // Drops `nlookup` lookups; the inode is forgotten at zero (then true). The root is never
  // forgotten.
  bool Forget(InodeId ino, uint64_t nlookup);
  // Attributes, refreshed from the Catalog (cached attributes if the origin is unreachable).
  Result<InodeAttr> GetAttr(InodeId ino);
  uint64_t generation() const { return kGeneration; }

  // ---- directories ----
  Result<uint64_t> OpenDir(InodeId ino);
  // Up to `max` items starting at `offset` (0 = the start: ".", "..", then the entries in byte
  // order). An empty result is the end of the directory. Offset 0 on a used handle rewinds it
  // (re-reading the listing, as rewinddir(3) allows).
  Status ReadDir(uint64_t dh, uint64_t offset, size_t max, std::vector<DirItem>* out);
  void ReleaseDir(uint64_t dh);

  // ---- files ----
  // Pins the current version of the file. NotFound if it is gone; InvalidArgument for a
  // directory. Write access is refused by the caller (EROFS) before this is called.
  Result<OpenResult> Open(InodeId ino);
  // Slices covering [offset, offset + size) of the pinned version, short at EOF. Starts readahead
  // when reads are sequential. `token` (not owned, may be null): the kernel request's
  // cancellation (a FUSE interrupt → Cancelled) and deadline (→ TimedOut), see TieredCache::Read.
  Result<std::vector<BlockSlice>> Read(uint64_t fh, uint64_t offset, uint64_t size,
                                       const CancelToken* token = nullptr);
  // True when Read(fh, offset, size) will be served from the host tiers (L1/L2) without waiting
  // on the network (a hint for fuse_server's scheduling; false for an unknown handle).
  bool ReadIsLocal(uint64_t fh, uint64_t offset, uint64_t size);
  // The whole pinned version of a file of 1..max_bytes bytes whose every byte is in the host
  // tiers (L1/L2), read as Read(fh, 0, size) would (a read for the stats and the prefetcher);
  // an empty result otherwise, and for an unknown handle. For handing a small file to the kernel
  // with its open (fuse_server's store at open), so that reading it costs no further request.
  Result<std::vector<BlockSlice>> ReadWholeIfLocal(uint64_t fh, uint64_t max_bytes);
  // The kernel now holds the whole file of `fh` (its store at open succeeded): L1 gives up its
  // copy of the blocks L2 holds (TieredCache::HandOff). No-op for an unknown handle.
  void HandedToKernel(uint64_t fh);
  // The one file of the host tiers that holds exactly the pinned version of `fh` (an object of at
  // most one block that L2 holds whole; TieredCache::OpenWholeFile), verified, for the kernel to
  // read itself (FUSE passthrough). NotFound otherwise, and for an unknown handle.
  Result<FileExtentRef> FileForKernel(uint64_t fh);
  // An open was answered with a backing file the kernel reads (fuse.passthrough_opens). The
  // reads of such a handle never reach the Filesystem.
  void NotePassthroughOpen();
  // Reads without an open (the kernel handles opens itself: FuseOptions::open_in_kernel). The
  // version read is pinned at the inode: the one its last lookup, readdirplus, getattr or Open saw
  // (user.tierfs.etag); the inode keeps one reader (readahead state) per version, and the first
  // read of a version counts as its open for the next-files prefetch. A read that meets another
  // version fails with FailedPrecondition (ESTALE) as Read does, and the inode takes the origin's
  // current version at once (one HEAD), so the next read (after the kernel refreshes its
  // attributes) reads that version whole. FailedPrecondition for an unknown inode.
  Result<std::vector<BlockSlice>> ReadInode(InodeId ino, uint64_t offset, uint64_t size,
                                            const CancelToken* token = nullptr);
  bool ReadInodeIsLocal(InodeId ino, uint64_t offset, uint64_t size);
  void Release(uint64_t fh);

  FsStatsInfo StatFs();

  // ---- live restart (filesystem_state.cc) ----
  // The tables as they are now. Consistent when no request is being served (the session is
  // paused); else a snapshot of each table in turn.
  FilesystemState ExportState() const;
  // What was handed out from inode number `first_ino` and handle `first_handle` on (a former
  // state's next_ino and next_handle): those inodes and handles, the inodes of those file handles
  // as they are now, and the current next_ino and next_handle. O(inodes and handles handed out
  // since), not O(table): inode and handle numbers are never reused, so a number in the range
  // that is in no table was handed out and dropped since.
  FilesystemState ExportStateSince(InodeId first_ino, uint64_t first_handle) const;
  // Grows whenever an inode or a handle is handed out: a state exported at an equal value holds
  // every inode and handle the kernel may know (FuseServer::LogStateTo).
  uint64_t TablesVersion() const;
  // Replaces the tables with `state` (another daemon's ExportState). InvalidArgument (naming the
  // record) for a state that does not hold together: an inode twice, a handle of an unknown inode,
  // no root. REQUIRES: no request served yet, and no prefetch job attached yet.
  Status ImportState(const FilesystemState& state);

  // ---- extended attributes (user.tierfs.*, see fuse/xattr_handlers.h) ----
  // NotFound: no such attribute here (ENODATA).
  Result<std::string> GetXattr(InodeId ino, std::string_view name);
  // Names that apply to the inode.
  Result<std::vector<std::string>> ListXattr(InodeId ino);
  // NotSupported: unknown name (ENOTSUP). InvalidArgument: read-only name or bad value (EINVAL).
  // PermissionDenied (EPERM): a user.tierfs.* name set by a caller other than root and
  // FilesystemOptions::control_uid, unless the name is GroupSettable() and the caller is in
  // FilesystemOptions::control_gid.
  Status SetXattr(InodeId ino, std::string_view name, std::string_view value,
                  const XattrCaller& caller);
  // The same for a caller known by its uid only (no group membership).
  Status SetXattr(InodeId ino, std::string_view name, std::string_view value, uint32_t caller_uid) {
    return SetXattr(ino, name, value, XattrCaller{caller_uid, {}});
  }
  // NotFound for unknown names (ENODATA); InvalidArgument for the read-only tierfs names.
  Status RemoveXattr(InodeId ino, std::string_view name);

  // "fuse.inodes=.. fuse.open_files=.. fuse.lookups=.. ..." (part of user.tierfs.stats).
  std::string StatsText() const;
  const FsCounters& counters() const { return counters_; }
  const PrefetcherStats& prefetch_stats() const { return prefetcher_.Stats(); }
  size_t InodeCount() const;
  // Test hook: the kernel's lookup count of `ino`, 0 if the inode is unknown.
  uint64_t TEST_LookupCount(InodeId ino) const;

  Catalog* catalog() const { return catalog_; }
  TieredCache* cache() const { return cache_; }
  // Deep prefetch jobs (user.tierfs.prefetch); null until attached (the xattr then answers
  // "state=none" and refuses to start jobs). `jobs` is not owned and must outlive the
  // Filesystem or be detached (nullptr) first.
  void AttachPrefetchJobs(PrefetchJobs* jobs) { prefetch_jobs_.store(jobs); }
  PrefetchJobs* prefetch_jobs() const { return prefetch_jobs_.load(); }
  // Policies (user.tierfs.pin/ttl/policy); null: the names answer the defaults and refuse sets.
  // Same lifetime rule as AttachPrefetchJobs.
  void AttachPolicies(PolicyResolver* policies) { policies_.store(policies); }
  PolicyResolver* policies() const { return policies_.load(); }
  // The daemon's controls (user.tierfs.log_level, user.tierfs.daemon); null: log_level answers
  // the current level and refuses sets, daemon answers the pid only. Same lifetime rule.
  void AttachDaemonControl(DaemonControl* control) { daemon_control_.store(control); }
  DaemonControl* daemon_control() const { return daemon_control_.load(); }

 private:
  static constexpr uint64_t kGeneration = 1;
  struct Inode;
  struct DirHandle;
  struct FileHandle;

  std::shared_ptr<Inode> FindInode(InodeId ino) const;
  XattrTarget XattrTargetFor(InodeId ino, const Inode& n) EXCLUDES(mu_);
  std::string WhoMaySet(const XattrHandler* h) const;
  // Finds or creates the inode of `path` with `entry`'s attributes; adds one lookup.
  LookupEntry Obtain(const std::string& path, const DirEntry& entry);
  // Whether `node` is a file last opened at another version than `entry` names.
  bool OpenedOtherVersion(const Inode& node, const DirEntry& entry) const REQUIRES(mu_);
  InodeAttr AttrOf(const Inode& node) const REQUIRES(mu_);
  // The origin's owner and mode of `node` onto `a`, where the user did not set them (options_).
  void ApplyOwner(const Inode& node, InodeAttr* a) const REQUIRES(mu_);
  // `entry`'s owner and mode as the inode's.
  void SetOwner(const DirEntry& entry, Inode* node) REQUIRES(mu_);
  InodeAttr DirAttr(InodeId ino) const;
  std::shared_ptr<DirHandle> FindDir(uint64_t dh) const;
  std::shared_ptr<FileHandle> FindFile(uint64_t fh) const;
  // The inode's reader of its current version (ReadInode), made if there is none and `create`;
  // null for an unknown inode or a directory (or none and !create).
  std::shared_ptr<FileHandle> InodeReader(InodeId ino, bool create) EXCLUDES(mu_);
  Result<std::vector<BlockSlice>> ReadFrom(FileHandle& h, uint64_t offset, uint64_t size,
                                           const CancelToken* token);

  // `o` with its next-files prefetch stepping aside while the attached PrefetchJobs has a list
  // job (PrefetchJobs::ListJobActive), unless the caller set its own `guided`.
  PrefetcherOptions Guided(PrefetcherOptions o);

  // Constant after construction.
  const FilesystemOptions options_;
  Catalog* const catalog_;
  TieredCache* const cache_;
  const int64_t mount_time_ns_;
  std::unique_ptr<XattrRegistry> xattrs_;
  std::atomic<PrefetchJobs*> prefetch_jobs_{nullptr};
  std::atomic<PolicyResolver*> policies_{nullptr};
  std::atomic<DaemonControl*> daemon_control_{nullptr};

  mutable FsCounters counters_;
  Prefetcher prefetcher_;

  // The inode table is two sets keyed by a field of the inode itself (looked up by InodeId and by
  // path): a node holds one pointer, 32 bytes with malloc's header where a map node of key and
  // value took 48 (memory per cached entry matters at dataset scale: one per inode the kernel
  // knows).
  struct InoHash {
    using is_transparent = void;
    size_t operator()(InodeId ino) const noexcept { return std::hash<InodeId>()(ino); }
    size_t operator()(const std::shared_ptr<Inode>& n) const noexcept;
  };
  struct InoEq {
    using is_transparent = void;
    bool operator()(const std::shared_ptr<Inode>& a, const std::shared_ptr<Inode>& b) const {
      return a == b;
    }
    bool operator()(InodeId a, const std::shared_ptr<Inode>& b) const;
    bool operator()(const std::shared_ptr<Inode>& a, InodeId b) const;
  };
  // Not noexcept: the set then keeps each node's hash (no rehashing of paths when walking a
  // bucket), which still fits the same 32-byte allocation.
  struct PathHash {
    using is_transparent = void;
    size_t operator()(std::string_view path) const { return std::hash<std::string_view>()(path); }
    size_t operator()(const Inode* n) const;
  };
  struct PathEq {
    using is_transparent = void;
    bool operator()(const Inode* a, const Inode* b) const;
    bool operator()(std::string_view a, const Inode* b) const;
    bool operator()(const Inode* a, std::string_view b) const;
  };

  mutable Mutex mu_;  // the inode table; after DirHandle::mu
  std::unordered_set<std::shared_ptr<Inode>, InoHash, InoEq> by_ino_ GUARDED_BY(mu_);
  // The inode of each path (an inode in by_ino_: an entry is erased or re-keyed before its inode
  // leaves by_ino_); the path is stored once, in the inode.
  std::unordered_set<Inode*, PathHash, PathEq> by_path_ GUARDED_BY(mu_);
  using InodesByIno = std::unordered_set<std::shared_ptr<Inode>, InoHash, InoEq>;
  using InodesByPath = std::unordered_set<Inode*, PathHash, PathEq>;
  // ImportState's parts: `state`'s inodes into `by_ino`/`by_path`, and its handles (of those
  // inodes) into `files`/`dirs`, checked (InvalidArgument naming the record).
  static Status ImportInodes(const FilesystemState& state, InodesByIno* by_ino,
                             InodesByPath* by_path);
  FilesystemState::InodeRec InodeRecOf(const Inode& n) const REQUIRES(mu_);
  static Status ImportHandles(const FilesystemState& state, const InodesByIno& by_ino,
                              std::unordered_map<uint64_t, std::shared_ptr<FileHandle>>* files,
                              std::unordered_map<uint64_t, std::shared_ptr<DirHandle>>* dirs);
  InodeId next_ino_ GUARDED_BY(mu_) = kRootInode + 1;
  std::atomic<size_t> forgotten_{0};  // inodes forgotten since the last ReleaseFreeMemory

  mutable Mutex handles_mu_;  // leaf
  std::unordered_map<uint64_t, std::shared_ptr<DirHandle>> dirs_ GUARDED_BY(handles_mu_);
  std::unordered_map<uint64_t, std::shared_ptr<FileHandle>> files_ GUARDED_BY(handles_mu_);
  uint64_t next_handle_ GUARDED_BY(handles_mu_) = 1;
};

}  // namespace tierfs
