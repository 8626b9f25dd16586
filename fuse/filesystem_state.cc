// The Filesystem's tables as another daemon takes them over (fuse/filesystem.h, FilesystemState).
// Here because the inode and handle structs are private to the Filesystem; filesystem.cc keeps
// the request paths.

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "fuse/filesystem.h"
#include "fuse/internal/filesystem_tables.h"

namespace tierfs {

uint64_t Filesystem::TablesVersion() const {
  uint64_t v = 0;
  {
    MutexLock l(&mu_);
    v = next_ino_;
  }
  MutexLock l(&handles_mu_);
  return v + next_handle_;
}

FilesystemState::InodeRec Filesystem::InodeRecOf(const Inode& n) const {
  FilesystemState::InodeRec r;
  r.ino = n.ino;
  r.path = n.path;
  r.is_dir = n.is_dir;
  auto p = by_path_.find(std::string_view(n.path));
  r.mapped = p != by_path_.end() && *p == &n;
  r.nlookup = n.nlookup;
  r.size = n.size;
  r.etag = n.etag;
  r.mtime_ns = n.mtime_ns;
  r.owner_known = n.owner_known;
  r.uid = n.uid;
  r.gid = n.gid;
  r.mode = n.mode;
  if (n.used != nullptr) {
    r.opened_etag = n.used->opened_etag;
    r.open_handles = n.used->open_handles;
  }
  return r;
}

namespace {

FilesystemState::FileRec FileRecOf(uint64_t fh, InodeId ino, const ObjectRef& obj) {
  FilesystemState::FileRec r;
  r.fh = fh;
  r.ino = ino;
  r.key = obj.key;
  r.size = obj.info.size;
  r.etag = obj.info.etag;
  r.mtime_ns = obj.info.mtime_ns;
  return r;
}

}  // namespace

FilesystemState Filesystem::ExportState() const {
  FilesystemState s;
  {
    MutexLock l(&mu_);
    s.next_ino = next_ino_;
    s.inodes.reserve(by_ino_.size());
    for (const auto& n : by_ino_) s.inodes.push_back(InodeRecOf(*n));
  }
  MutexLock l(&handles_mu_);
  s.next_handle = next_handle_;
  for (const auto& [fh, h] : files_) s.files.push_back(FileRecOf(fh, h->node->ino, h->obj()));
  for (const auto& [dh, d] : dirs_) {
    s.dirs.push_back(FilesystemState::DirRec{dh, d->ino, d->parent_ino, d->path});
  }
  return s;
}

FilesystemState Filesystem::ExportStateSince(InodeId first_ino, uint64_t first_handle) const {
  FilesystemState s;
  std::vector<InodeId> opened;  // the inodes of the new file handles
  {
    // Handles first: an inode a new handle names is then exported as it is after that open.
    MutexLock l(&handles_mu_);
    s.next_handle = next_handle_;
    for (uint64_t h = first_handle; h < next_handle_; ++h) {
      if (auto f = files_.find(h); f != files_.end()) {
        s.files.push_back(FileRecOf(h, f->second->node->ino, f->second->obj()));
        opened.push_back(f->second->node->ino);
      } else if (auto d = dirs_.find(h); d != dirs_.end()) {
        const DirHandle& dh = *d->second;
        s.dirs.push_back(FilesystemState::DirRec{h, dh.ino, dh.parent_ino, dh.path});
      }
    }
  }
  MutexLock l(&mu_);
  s.next_ino = next_ino_;
  for (InodeId i = std::max(first_ino, kRootInode); i < next_ino_; ++i) {
    if (auto n = by_ino_.find(i); n != by_ino_.end()) s.inodes.push_back(InodeRecOf(**n));
  }
  for (InodeId i : opened) {
    if (i >= first_ino) continue;  // exported above
    if (auto n = by_ino_.find(i); n != by_ino_.end()) s.inodes.push_back(InodeRecOf(**n));
  }
  return s;
}

Status Filesystem::ImportInodes(const FilesystemState& state, InodesByIno* by_ino_out,
                                InodesByPath* by_path_out) {
  InodesByIno& by_ino = *by_ino_out;
  InodesByPath& by_path = *by_path_out;
  InodeId highest = kRootInode;
  for (const FilesystemState::InodeRec& r : state.inodes) {
    if (r.ino == 0 || r.ino == kUnknownInode) {
      return Status::InvalidArgument(fmt::format("inode number {} is reserved", r.ino));
    }
    if (r.ino == kRootInode && (!r.is_dir || !r.path.empty())) {
      return Status::InvalidArgument("the root inode is not the root directory");
    }
    auto n = std::make_shared<Inode>(r.ino, r.path, r.is_dir);
    n->nlookup = r.nlookup;
    n->size = r.size;
    n->etag = r.etag;
    n->mtime_ns = r.mtime_ns;
    n->owner_known = r.owner_known;
    n->uid = r.uid;
    n->gid = r.gid;
    n->mode = r.mode;
    if (!r.opened_etag.empty() || r.open_handles > 0) {
      n->used_state().opened_etag = r.opened_etag;
      n->used_state().open_handles = r.open_handles;
    }
    if (r.mapped && !by_path.insert(n.get()).second) {
      return Status::InvalidArgument(fmt::format("path of inode {} named twice", r.ino));
    }
    if (!by_ino.insert(std::move(n)).second) {
      return Status::InvalidArgument(fmt::format("inode {} listed twice", r.ino));
    }
    highest = std::max(highest, r.ino);
  }
  if (by_ino.find(kRootInode) == by_ino.end()) {
    return Status::InvalidArgument("the state has no root inode");
  }
  if (state.next_ino <= highest) {
    return Status::InvalidArgument(
        fmt::format("next inode {} is not above the highest inode {}", state.next_ino, highest));
  }
  return Status::OK();
}

Status Filesystem::ImportHandles(
    const FilesystemState& state, const InodesByIno& by_ino,
    std::unordered_map<uint64_t, std::shared_ptr<FileHandle>>* files_out,
    std::unordered_map<uint64_t, std::shared_ptr<DirHandle>>* dirs_out) {
  auto& files = *files_out;
  auto& dirs = *dirs_out;
  uint64_t highest_handle = 0;
  for (const FilesystemState::FileRec& r : state.files) {
    auto n = by_ino.find(r.ino);
    if (n == by_ino.end() || (*n)->is_dir) {
      return Status::InvalidArgument(
          fmt::format("file handle {} names inode {}, not a known file", r.fh, r.ino));
    }
    ObjectRef obj;
    obj.key = r.key;
    obj.info.size = r.size;
    obj.info.etag = r.etag;
    obj.info.mtime_ns = r.mtime_ns;
    if (!files.emplace(r.fh, std::make_shared<FileHandle>(std::move(obj), *n)).second) {
      return Status::InvalidArgument(fmt::format("file handle {} listed twice", r.fh));
    }
    highest_handle = std::max(highest_handle, r.fh);
  }
  for (const FilesystemState::DirRec& r : state.dirs) {
    auto n = by_ino.find(r.ino);
    if (n == by_ino.end() || !(*n)->is_dir) {
      return Status::InvalidArgument(
          fmt::format("directory handle {} names inode {}, not a known directory", r.dh, r.ino));
    }
    auto d = std::make_shared<DirHandle>();
    d->ino = r.ino;
    d->parent_ino = r.parent_ino;
    d->path = r.path;
    if (files.count(r.dh) != 0 || !dirs.emplace(r.dh, std::move(d)).second) {
      return Status::InvalidArgument(fmt::format("handle {} listed twice", r.dh));
    }
    highest_handle = std::max(highest_handle, r.dh);
  }
  if (state.next_handle <= highest_handle) {
    return Status::InvalidArgument(fmt::format("next handle {} is not above the highest handle {}",
                                               state.next_handle, highest_handle));
  }
  return Status::OK();
}

Status Filesystem::ImportState(const FilesystemState& state) {
  InodesByIno by_ino;
  InodesByPath by_path;
  TIERFS_RETURN_IF_ERROR(ImportInodes(state, &by_ino, &by_path));
  std::unordered_map<uint64_t, std::shared_ptr<FileHandle>> files;
  std::unordered_map<uint64_t, std::shared_ptr<DirHandle>> dirs;
  TIERFS_RETURN_IF_ERROR(ImportHandles(state, by_ino, &files, &dirs));
  {
    MutexLock l(&mu_);
    for (const auto& node : by_ino_) node->used.reset();
    by_path_ = std::move(by_path);
    by_ino_ = std::move(by_ino);
    next_ino_ = state.next_ino;
  }
  MutexLock l(&handles_mu_);
  files_ = std::move(files);
  dirs_ = std::move(dirs);
  next_handle_ = state.next_handle;
  return Status::OK();
}

}  // namespace tierfs
