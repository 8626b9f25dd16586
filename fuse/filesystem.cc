#include "fuse/filesystem.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>

#include "base/logging.h"
#include "base/memory.h"
#include "base/strings.h"
#include "fuse/internal/filesystem_tables.h"
#include "fuse/xattr_handlers.h"
#include "tiercache/prefetch_jobs.h"

namespace tierfs {

size_t Filesystem::InoHash::operator()(const std::shared_ptr<Inode>& n) const noexcept {
  return (*this)(n->ino);
}
bool Filesystem::InoEq::operator()(InodeId a, const std::shared_ptr<Inode>& b) const {
  return a == b->ino;
}
bool Filesystem::InoEq::operator()(const std::shared_ptr<Inode>& a, InodeId b) const {
  return a->ino == b;
}
size_t Filesystem::PathHash::operator()(const Inode* n) const { return (*this)(n->path); }
bool Filesystem::PathEq::operator()(const Inode* a, const Inode* b) const {
  return a->path == b->path;
}
bool Filesystem::PathEq::operator()(std::string_view a, const Inode* b) const {
  return a == b->path;
}
bool Filesystem::PathEq::operator()(const Inode* a, std::string_view b) const {
  return a->path == b;
}

PrefetcherOptions Filesystem::Guided(PrefetcherOptions o) {
  if (!o.guided) {
    o.guided = [this] {
      PrefetchJobs* jobs = prefetch_jobs_.load();
      return jobs != nullptr && jobs->ListJobActive();
    };
  }
  return o;
}

Filesystem::Filesystem(const FilesystemOptions& options, Catalog* catalog, TieredCache* cache,
                       Clock* clock)
    : options_(options),
      catalog_(catalog),
      cache_(cache),
      mount_time_ns_(clock->NowUnixNanos()),
      xattrs_(NewDefaultXattrRegistry()),
      prefetcher_(Guided(options.prefetch), cache, catalog) {
  auto root = std::make_shared<Inode>(kRootInode, std::string(), /*is_dir=*/true);
  root->nlookup = 1;  // the kernel holds the root implicitly; it is never forgotten
  MutexLock l(&mu_);
  by_path_.insert(root.get());
  by_ino_.insert(std::move(root));
}

Filesystem::~Filesystem() {
  // An inode's reader points back at the inode: break the cycles of inodes still known.
  MutexLock l(&mu_);
  for (const auto& node : by_ino_) node->used.reset();
}

std::shared_ptr<Filesystem::Inode> Filesystem::FindInode(InodeId ino) const {
  MutexLock l(&mu_);
  auto it = by_ino_.find(ino);
  return it == by_ino_.end() ? nullptr : *it;
}

InodeAttr Filesystem::DirAttr(InodeId ino) const {
  InodeAttr a;
  a.ino = ino;
  a.is_dir = true;
  a.mode = S_IFDIR | (options_.dir_mode & 07777);
  a.nlink = 2;
  a.uid = options_.uid;
  a.gid = options_.gid;
  a.size = 0;
  a.mtime_ns = mount_time_ns_;
  a.blksize = static_cast<uint32_t>(cache_->block_size());
  return a;
}

void Filesystem::ApplyOwner(const Inode& node, InodeAttr* a) const {
  if (!node.owner_known) return;
  if (!options_.uid_set) a->uid = node.uid;
  if (!options_.gid_set) a->gid = node.gid;
  if (!(node.is_dir ? options_.dir_mode_set : options_.file_mode_set)) {
    a->mode = (a->mode & S_IFMT) | (node.mode & 0777);
  }
}

InodeAttr Filesystem::AttrOf(const Inode& node) const {
  if (node.is_dir) {
    InodeAttr a = DirAttr(node.ino);
    ApplyOwner(node, &a);
    return a;
  }
  InodeAttr a;
  a.ino = node.ino;
  a.is_dir = false;
  a.mode = S_IFREG | (options_.file_mode & 07777);
  a.nlink = 1;
  a.uid = options_.uid;
  a.gid = options_.gid;
  a.size = node.size;
  a.mtime_ns = node.mtime_ns;
  a.blksize = static_cast<uint32_t>(cache_->block_size());
  ApplyOwner(node, &a);
  return a;
}

LookupEntry Filesystem::Obtain(const std::string& path, const DirEntry& entry) {
  const bool is_dir = entry.type == EntryType::kDir;
  MutexLock l(&mu_);
  std::shared_ptr<Inode> node;
  if (auto it = by_path_.find(std::string_view(path)); it != by_path_.end()) {
    auto n = by_ino_.find((*it)->ino);
    // A path whose type changed gets a new inode; the kernel drops the old one when it notices.
    // So does a file opened at another version than the entry names (replaced, or its tree
    // renamed over): the kernel's page cache is per inode, and an open of the new version
    // sharing the old inode would let a handle still open on the old version read the new
    // version's pages. With a new inode the old handle keeps its own pages, and its reads pin
    // the old version (old bytes, or ESTALE once the origin no longer has them).
    if (n != by_ino_.end() && (*n)->is_dir == is_dir && !OpenedOtherVersion(**n, entry)) {
      node = *n;
    }
  }
  if (!node) {
    node = std::make_shared<Inode>(next_ino_++, path, is_dir);
    by_ino_.insert(node);
    // Re-keyed: the path may name an inode of another type that is going away.
    if (auto it = by_path_.find(std::string_view(path)); it != by_path_.end()) by_path_.erase(it);
    by_path_.insert(node.get());
  }
  ++node->nlookup;
  SetOwner(entry, node.get());
  if (!is_dir) {
    node->size = entry.size;
    node->etag = entry.etag;
    node->mtime_ns = entry.mtime_ns;
  }
  return LookupEntry{kGeneration, AttrOf(*node)};
}

void Filesystem::SetOwner(const DirEntry& entry, Inode* node) {
  node->owner_known = entry.owner_known;
  node->uid = entry.uid;
  node->gid = entry.gid;
  node->mode = entry.mode;
}

bool Filesystem::OpenedOtherVersion(const Inode& node, const DirEntry& entry) const {
  return !node.is_dir && node.used != nullptr && node.used->open_handles > 0 &&
         !node.used->opened_etag.empty() && !entry.etag.empty() &&
         node.used->opened_etag != entry.etag;
}

Result<LookupEntry> Filesystem::Lookup(InodeId parent, std::string_view name) {
  ++counters_.lookups;
  auto p = FindInode(parent);
  if (!p || !p->is_dir) {
    return Status::FailedPrecondition(fmt::format("lookup in unknown directory inode {}", parent));
  }
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos) {
    ++counters_.negative_lookups;
    return Status::NotFound(fmt::format("no entry '{}'", name));
  }
  auto e = catalog_->Lookup(p->path, name);
  if (!e.ok()) {
    if (e.status().IsNotFound()) {
      ++counters_.negative_lookups;
    } else {
      Logger(Module::kFuse)
          .warn("lookup '{}' in '{}': {}", EscapeForLog(name), EscapeForLog(p->path),
                e.status().ToString());
    }
    return e.status();
  }
  return Obtain(JoinPath(p->path, name), *e);
}

Result<LookupEntry> Filesystem::LookupDirItem(InodeId parent, const DirItem& item) {
  auto p = FindInode(parent);
  if (!p || !p->is_dir) {
    return Status::FailedPrecondition(fmt::format("readdir of unknown directory inode {}", parent));
  }
  DirEntry e;
  e.name = item.name;
  e.type = item.is_dir ? EntryType::kDir : EntryType::kFile;
  e.size = item.size;
  e.etag = item.etag;
  e.mtime_ns = item.mtime_ns;
  e.owner_known = item.owner_known;
  e.uid = item.uid;
  e.gid = item.gid;
  e.mode = item.mode;
  return Obtain(JoinPath(p->path, item.name), e);
}

bool Filesystem::Forget(InodeId ino, uint64_t nlookup) {
  if (ino == kRootInode) return false;
  std::shared_ptr<Inode> gone;  // freed after the table lock is released
  {
    MutexLock l(&mu_);
    // Re-find by number under the table lock: the inode may already be gone.
    auto it = by_ino_.find(ino);
    if (it == by_ino_.end()) return false;
    Inode& node = **it;
    node.nlookup -= std::min(node.nlookup, nlookup);
    if (node.nlookup > 0) return false;
    // The path may point at a newer inode by now (type change); only erase our own mapping.
    if (auto p = by_path_.find(std::string_view(node.path)); p != by_path_.end() && *p == &node) {
      by_path_.erase(p);
    }
    node.used.reset();
    gone = *it;
    by_ino_.erase(it);
  }
  gone.reset();
  // The kernel drops the inodes of a large directory in bursts (memory pressure, drop_caches):
  // give the memory of every few thousand forgotten inodes back (base/memory.h).
  if (forgotten_.fetch_add(1, std::memory_order_relaxed) + 1 == kReleaseMemoryAfterEntries) {
    forgotten_.store(0, std::memory_order_relaxed);
    ReleaseFreeMemory();
  }
  return true;
}

uint64_t Filesystem::TEST_LookupCount(InodeId ino) const {
  MutexLock l(&mu_);
  auto it = by_ino_.find(ino);
  return it == by_ino_.end() ? 0 : (*it)->nlookup;
}

size_t Filesystem::InodeCount() const {
  MutexLock l(&mu_);
  return by_ino_.size();
}

Result<InodeAttr> Filesystem::GetAttr(InodeId ino) {
  auto n = FindInode(ino);
  if (!n) return Status::FailedPrecondition(fmt::format("getattr of unknown inode {}", ino));
  if (n->is_dir) {
    MutexLock l(&mu_);
    return AttrOf(*n);
  }
  {
    // An inode its path no longer maps to (a newer version has its own inode) keeps the
    // attributes of its version, for the handles still open on it.
    MutexLock l(&mu_);
    auto p = by_path_.find(std::string_view(n->path));
    if (p == by_path_.end() || *p != n.get()) return AttrOf(*n);
  }
  auto [dir, base] = SplitPath(n->path);
  auto e = catalog_->Lookup(dir, base);
  MutexLock l(&mu_);
  if (e.ok()) {
    if (e->type == EntryType::kDir) {
      return Status::FailedPrecondition(fmt::format("'{}' is now a directory", n->path));
    }
    n->size = e->size;
    n->etag = e->etag;
    n->mtime_ns = e->mtime_ns;
    SetOwner(*e, n.get());
  } else if (e.status().IsNotFound()) {
    return e.status();
  }
  // Other errors (origin unreachable with a stale listing): the attributes last seen are the
  // best answer; the next getattr tries again.
  return AttrOf(*n);
}

Result<uint64_t> Filesystem::OpenDir(InodeId ino) {
  auto n = FindInode(ino);
  if (!n) return Status::FailedPrecondition(fmt::format("opendir of unknown inode {}", ino));
  if (!n->is_dir) return Status::InvalidArgument(fmt::format("'{}' is not a directory", n->path));
  auto d = std::make_shared<DirHandle>();
  d->ino = ino;
  d->path = n->path;
  if (ino == kRootInode) {
    d->parent_ino = kRootInode;
  } else {
    std::string parent(SplitPath(n->path).first);
    MutexLock l(&mu_);
    if (auto it = by_path_.find(std::string_view(parent)); it != by_path_.end()) {
      d->parent_ino = (*it)->ino;
    }
  }
  MutexLock l(&handles_mu_);
  uint64_t id = next_handle_++;
  dirs_[id] = std::move(d);
  return id;
}

std::shared_ptr<Filesystem::DirHandle> Filesystem::FindDir(uint64_t dh) const {
  MutexLock l(&handles_mu_);
  auto it = dirs_.find(dh);
  return it == dirs_.end() ? nullptr : it->second;
}

std::shared_ptr<Filesystem::FileHandle> Filesystem::FindFile(uint64_t fh) const {
  MutexLock l(&handles_mu_);
  auto it = files_.find(fh);
  return it == files_.end() ? nullptr : it->second;
}

Status Filesystem::ReadDir(uint64_t dh, uint64_t offset, size_t max, std::vector<DirItem>* out) {
  out->clear();
  auto d = FindDir(dh);
  if (!d) return Status::FailedPrecondition(fmt::format("unknown directory handle {}", dh));
  MutexLock l(&d->mu);
  if (d->listing == nullptr || (offset == 0 && d->used)) {  // first read, or rewinddir: afresh
    Result<std::shared_ptr<const Listing>> snap = catalog_->Snapshot(d->path);
    if (!snap.ok()) {
      Logger(Module::kFuse).warn("readdir '{}': {}", d->path, snap.status().ToString());
      return snap.status();
    }
    d->listing = std::move(*snap);
  }
  d->used = true;
  const std::vector<DirEntry>& entries = d->listing->entries;
  uint64_t pos = offset;
  while (out->size() < max) {
    if (pos < 2) {
      DirItem dot;
      dot.name = pos == 0 ? "." : "..";
      dot.is_dir = true;
      dot.is_dot = true;
      dot.ino = pos == 0 ? d->ino : d->parent_ino;
      dot.next_offset = pos + 1;
      out->push_back(std::move(dot));
      ++pos;
      continue;
    }
    const uint64_t i = pos - 2;
    if (i >= entries.size()) break;
    const DirEntry& e = entries[i];
    DirItem item;
    item.name = e.name;
    item.is_dir = e.type == EntryType::kDir;
    item.size = e.size;
    item.etag = e.etag;
    item.mtime_ns = e.mtime_ns;
    item.owner_known = e.owner_known;
    item.uid = e.uid;
    item.gid = e.gid;
    item.mode = e.mode;
    item.next_offset = pos + 1;
    out->push_back(std::move(item));
    ++pos;
  }
  // Inode numbers of entries the kernel already knows (one table lock for the batch).
  MutexLock t(&mu_);
  for (DirItem& item : *out) {
    if (item.is_dot) continue;
    if (auto it = by_path_.find(std::string_view(JoinPath(d->path, item.name)));
        it != by_path_.end()) {
      item.ino = (*it)->ino;
    }
  }
  return Status::OK();
}

void Filesystem::ReleaseDir(uint64_t dh) {
  std::shared_ptr<DirHandle> d;
  {
    MutexLock l(&handles_mu_);
    if (auto it = dirs_.find(dh); it != dirs_.end()) {
      d = std::move(it->second);  // destroyed after the lock is released
      dirs_.erase(it);
    }
  }
  if (d == nullptr) return;
  std::shared_ptr<const Listing> listing;
  {
    MutexLock l(&d->mu);
    listing = std::move(d->listing);
  }
  // The last handle of a large directory let go of its snapshot: give its memory back.
  if (listing != nullptr && listing.use_count() == 1 &&
      listing->entries.size() >= kReleaseMemoryAfterEntries) {
    listing.reset();
    ReleaseFreeMemory();
  }
}

Result<OpenResult> Filesystem::Open(InodeId ino) {
  ++counters_.opens;
  auto n = FindInode(ino);
  if (!n) return Status::FailedPrecondition(fmt::format("open of unknown inode {}", ino));
  if (n->is_dir) return Status::InvalidArgument(fmt::format("'{}' is a directory", n->path));
  auto e = catalog_->Revalidate(n->path);
  if (!e.ok()) {
    if (!e.status().IsNotFound()) {
      Logger(Module::kFuse).warn("open '{}': {}", EscapeForLog(n->path), e.status().ToString());
    }
    return e.status();
  }
  if (e->type == EntryType::kDir) {
    return Status::FailedPrecondition(fmt::format("'{}' is now a directory", n->path));
  }
  ObjectRef obj;
  obj.key = n->path;
  obj.info.size = e->size;
  obj.info.etag = e->etag;
  obj.info.mtime_ns = e->mtime_ns;
  OpenResult result;
  result.version = BlockVersion(obj.info);
  auto fh = std::make_shared<FileHandle>(std::move(obj), n);
  {
    MutexLock l(&mu_);
    DirEntry now;
    now.etag = e->etag;
    if (OpenedOtherVersion(*n, now)) {
      // Handles of the version opened before are still open, and they share this inode's page
      // cache. The path is unmapped from this inode and the open fails with ESTALE, which the
      // kernel answers by looking the path up again (LOOKUP_REVAL) and opening the new inode it
      // then gets (see Obtain); the handles open on this one keep their version.
      if (auto p = by_path_.find(std::string_view(n->path)); p != by_path_.end() && *p == n.get()) {
        by_path_.erase(p);
      }
      return Status::FailedPrecondition(
          fmt::format("'{}' has a new version while handles of the old one are open: it gets a "
                      "new inode",
                      EscapeForLog(n->path)));
    }
    ++n->used_state().open_handles;
    std::string& opened_etag = n->used_state().opened_etag;
    result.keep_cache = !opened_etag.empty() && opened_etag == e->etag;
    result.first_open = opened_etag.empty();
    result.attr_changed = n->size != e->size || n->mtime_ns != e->mtime_ns;
    opened_etag = e->etag;
    n->size = e->size;
    n->etag = e->etag;
    n->mtime_ns = e->mtime_ns;
  }
  prefetcher_.OnOpen(fh->obj());
  MutexLock l(&handles_mu_);
  result.fh = next_handle_++;
  SPDLOG_LOGGER_DEBUG(&Logger(Module::kFuse), "open '{}' size {} etag {}: fh {} keep_cache {}",
                      EscapeForLog(n->path), e->size, EscapeForLog(e->etag), result.fh,
                      result.keep_cache);
  files_[result.fh] = std::move(fh);
  return result;
}

bool Filesystem::ReadIsLocal(uint64_t fh, uint64_t offset, uint64_t size) {
  auto h = FindFile(fh);
  if (!h) return true;  // answered at once (ESTALE)
  return cache_->HostHolds(h->obj(), offset, size);
}

Result<std::vector<BlockSlice>> Filesystem::ReadWholeIfLocal(uint64_t fh, uint64_t max_bytes) {
  auto h = FindFile(fh);
  if (!h) return std::vector<BlockSlice>();
  const uint64_t size = h->obj().info.size;
  if (size == 0 || size > max_bytes || !cache_->HostHolds(h->obj(), 0, size)) {
    return std::vector<BlockSlice>();
  }
  ++counters_.open_stores;
  return ReadFrom(*h, 0, size, nullptr);
}

void Filesystem::HandedToKernel(uint64_t fh) {
  if (auto h = FindFile(fh)) cache_->HandOff(h->obj(), 0, h->obj().info.size);
}

Result<FileExtentRef> Filesystem::FileForKernel(uint64_t fh) {
  auto h = FindFile(fh);
  if (!h) return Status::NotFound(fmt::format("unknown file handle {}", fh));
  return cache_->OpenWholeFile(h->obj());
}

void Filesystem::NotePassthroughOpen() { ++counters_.passthrough_opens; }

Result<std::vector<BlockSlice>> Filesystem::Read(uint64_t fh, uint64_t offset, uint64_t size,
                                                 const CancelToken* token) {
  auto h = FindFile(fh);
  if (!h) return Status::FailedPrecondition(fmt::format("unknown file handle {}", fh));
  return ReadFrom(*h, offset, size, token);
}

std::shared_ptr<Filesystem::FileHandle> Filesystem::InodeReader(InodeId ino, bool create) {
  auto n = FindInode(ino);
  if (!n || n->is_dir) return nullptr;
  std::shared_ptr<FileHandle> r;
  {
    MutexLock l(&mu_);
    if (n->used != nullptr && n->used->reader != nullptr) {
      const ObjectInfo& v = n->used->reader->obj().info;
      if (v.etag == n->etag && v.size == n->size && v.mtime_ns == n->mtime_ns) {
        return n->used->reader;
      }
    }
    if (!create) return nullptr;
    ObjectRef obj;
    obj.key = n->path;
    obj.info.size = n->size;
    obj.info.etag = n->etag;
    obj.info.mtime_ns = n->mtime_ns;
    r = std::make_shared<FileHandle>(std::move(obj), n);
    n->used_state().reader = r;
  }
  prefetcher_.OnOpen(r->obj());  // the first read of this version: what an open would be
  return r;
}

bool Filesystem::ReadInodeIsLocal(InodeId ino, uint64_t offset, uint64_t size) {
  // Without a reader of the current version yet: not local. Making one may list the directory
  // (the next-files prefetch), which is not for a FUSE worker to wait on.
  auto h = InodeReader(ino, /*create=*/false);
  return h != nullptr && cache_->HostHolds(h->obj(), offset, size);
}

Result<std::vector<BlockSlice>> Filesystem::ReadInode(InodeId ino, uint64_t offset, uint64_t size,
                                                      const CancelToken* token) {
  auto h = InodeReader(ino, /*create=*/true);
  if (!h) return Status::FailedPrecondition(fmt::format("read of unknown file inode {}", ino));
  auto r = ReadFrom(*h, offset, size, token);
  if (r.ok() || r.status().code() != Status::Code::kFailedPrecondition) return r;
  // Another version at the origin: there is no next open to pin it, so the inode takes it now
  // (ReadFrom invalidated the catalog's entry: this HEADs), or every read would stay stale until
  // the metadata TTL.
  auto e = catalog_->Revalidate(h->node->path);
  if (e.ok() && e->type == EntryType::kFile) {
    MutexLock l(&mu_);
    h->node->size = e->size;
    h->node->etag = e->etag;
    h->node->mtime_ns = e->mtime_ns;
  }
  return r;
}

Result<std::vector<BlockSlice>> Filesystem::ReadFrom(FileHandle& h, uint64_t offset, uint64_t size,
                                                     const CancelToken* token) {
  ++counters_.reads;
  if (size == 0 || offset >= h.obj().info.size) return std::vector<BlockSlice>();
  size = std::min(size, h.obj().info.size - offset);
  prefetcher_.OnRead(&h.stream, offset, size);
  auto r = cache_->Read(h.obj(), offset, size, token, h.stream.Hint());
  if (!r.ok()) {
    if (r.status().code() == Status::Code::kCancelled) return r.status();  // the reader left
    Logger(Module::kFuse)
        .warn("read '{}' etag {} offset {} size {}: {}", h.obj().key, h.obj().info.etag, offset,
              size, r.status().ToString());
    if (r.status().code() == Status::Code::kFailedPrecondition) {
      // The origin has another version than this handle pinned: this handle fails (ESTALE), and
      // the next open HEADs the object instead of trusting the catalog (even with ttl=forever).
      ++counters_.stale_reads;
      catalog_->Invalidate(h.obj().key);
    }
    return r.status();
  }
  // The tier the cache reports for this read (the slowest of its blocks'), not a guess made
  // before it.
  const int tier = r->empty() ? kNoRead : ServingTier(*r);
  if (!r->empty()) h.node->last_source.store(tier, std::memory_order_relaxed);
  uint64_t bytes = 0;
  for (const auto& s : *r) bytes += s.length;
  counters_.read_bytes += bytes;
  SPDLOG_LOGGER_DEBUG(&Logger(Module::kFuse), "read '{}' offset {} size {}: {} bytes, tier {}",
                      h.obj().key, offset, size, bytes,
                      tier == kNoRead ? std::string_view("none") : cache_->TierName(tier));
  return r;
}

void Filesystem::Release(uint64_t fh) {
  std::shared_ptr<FileHandle> h;
  {
    MutexLock l(&handles_mu_);
    if (auto it = files_.find(fh); it != files_.end()) {
      h = std::move(it->second);
      files_.erase(it);
    }
  }
  if (h == nullptr) return;
  MutexLock l(&mu_);
  if (h->node->used != nullptr && h->node->used->open_handles > 0) --h->node->used->open_handles;
}

FsStatsInfo Filesystem::StatFs() {
  FsStatsInfo s;
  s.block_size = cache_->block_size();
  if (s.block_size == 0) s.block_size = 4096;
  // What the cache may occupy on this host is what "capacity" means to a user: L2, the flash
  // cache (L1 without one); never the shared L3.
  const HostSpaceInfo h = cache_->HostSpace();
  s.total_blocks = h.capacity_bytes / s.block_size;
  s.free_blocks = (h.capacity_bytes - std::min(h.capacity_bytes, h.used_bytes)) / s.block_size;
  s.files = InodeCount();
  return s;
}

// What an xattr handler sees of an inode: its path and kind, and the object version it holds.
// REQUIRES: `n` outlives the returned target (it points into n.path).
XattrTarget Filesystem::XattrTargetFor(InodeId ino, const Inode& n) {
  XattrTarget t;
  t.path = n.path;
  t.is_dir = n.is_dir;
  t.is_root = ino == kRootInode;
  t.fs = this;
  MutexLock l(&mu_);
  t.object.key = n.path;
  t.object.info.size = n.size;
  t.object.info.etag = n.etag;
  t.object.info.mtime_ns = n.mtime_ns;
  return t;
}

Result<std::string> Filesystem::GetXattr(InodeId ino, std::string_view name) {
  auto n = FindInode(ino);
  if (!n) return Status::FailedPrecondition(fmt::format("getxattr of unknown inode {}", ino));
  const XattrHandler* h = xattrs_->Find(name);
  if (!h) return Status::NotFound(fmt::format("no attribute {}", name));
  XattrTarget t = XattrTargetFor(ino, *n);
  const int src = n->last_source.load(std::memory_order_relaxed);
  if (src != kNoRead) t.source = cache_->TierName(src);
  if (!h->AppliesTo(t)) return Status::NotFound(fmt::format("no attribute {} here", name));
  return h->Get(t);
}

Result<std::vector<std::string>> Filesystem::ListXattr(InodeId ino) {
  auto n = FindInode(ino);
  if (!n) return Status::FailedPrecondition(fmt::format("listxattr of unknown inode {}", ino));
  return xattrs_->List(XattrTargetFor(ino, *n));
}

Status Filesystem::SetXattr(InodeId ino, std::string_view name, std::string_view value,
                            const XattrCaller& caller) {
  auto n = FindInode(ino);
  if (!n) return Status::FailedPrecondition(fmt::format("setxattr of unknown inode {}", ino));
  const XattrHandler* h = xattrs_->Find(name);
  XattrTarget t = XattrTargetFor(ino, *n);
  if (name.starts_with(kXattrPrefix) && caller.uid != 0 && caller.uid != options_.control_uid) {
    // The controls (evict, prefetch, pin, ttl, ...) act for every user of the mount: only root
    // and the mounting user may use them, and the control group the prefetch names.
    const bool member = options_.control_gid &&
                        std::find(caller.gids.begin(), caller.gids.end(), *options_.control_gid) !=
                            caller.gids.end();
    if (!member || h == nullptr || !h->GroupSettable()) {
      Logger(Module::kFuse)
          .warn("setxattr {} on '{}' by uid {} refused: {}", EscapeForLog(name),
                EscapeForLog(n->path), caller.uid, WhoMaySet(h));
      return Status::PermissionDenied(fmt::format("uid {} may not set {}", caller.uid, name));
    }
    t.job_owner = caller.uid;
  }
  if (!h) {
    if (name.starts_with(kXattrPrefix)) {
      Logger(Module::kFuse)
          .warn("setxattr of unknown attribute {} on '{}'", EscapeForLog(name),
                EscapeForLog(n->path));
    }
    return Status::NotSupported(fmt::format("attribute {} cannot be set", name));
  }
  return h->Set(t, value);
}

// Who may set the attribute of `h` (null: unknown name), for the refusal's log line.
std::string Filesystem::WhoMaySet(const XattrHandler* h) const {
  std::string who = fmt::format("only root and the mounting user (uid {})", options_.control_uid);
  if (h != nullptr && h->GroupSettable()) {
    who += options_.control_gid
               ? fmt::format(" and members of the control group (gid {})", *options_.control_gid)
               : std::string(" (no fuse.control_group is set)");
  }
  return who + " may set it";
}

Status Filesystem::RemoveXattr(InodeId ino, std::string_view name) {
  auto n = FindInode(ino);
  if (!n) return Status::FailedPrecondition(fmt::format("removexattr of unknown inode {}", ino));
  if (!xattrs_->Find(name)) return Status::NotFound(fmt::format("no attribute {}", name));
  Logger(Module::kFuse)
      .warn("removexattr {} on '{}' refused: read-only", EscapeForLog(name), EscapeForLog(n->path));
  return Status::InvalidArgument(fmt::format("{} is read-only", name));
}

std::string Filesystem::StatsText() const {
  size_t open_files;
  {
    MutexLock l(&handles_mu_);
    open_files = files_.size();
  }
  return fmt::format(
      "fuse.inodes={} fuse.open_files={} fuse.lookups={} fuse.negative_lookups={} fuse.opens={} "
      "fuse.reads={} fuse.read_bytes={} fuse.readahead_requests={} "
      "fuse.next_file_prefetches={} fuse.next_file_opens={} fuse.next_file_hits={} "
      "fuse.random_hydrations={} fuse.stale_reads={} "
      "fuse.open_stores={} fuse.passthrough_opens={}",
      InodeCount(), open_files, counters_.lookups.load(), counters_.negative_lookups.load(),
      counters_.opens.load(), counters_.reads.load(), counters_.read_bytes.load(),
      prefetcher_.Stats().readahead_requests.load(),
      prefetcher_.Stats().next_file_prefetches.load(), prefetcher_.Stats().next_file_opens.load(),
      prefetcher_.Stats().next_file_hits.load(), prefetcher_.Stats().random_hydrations.load(),
      counters_.stale_reads.load(), counters_.open_stores.load(),
      counters_.passthrough_opens.load());
}

}  // namespace tierfs
