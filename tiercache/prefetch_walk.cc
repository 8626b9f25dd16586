// The walk of deep prefetch (internal/prefetch_walk.h).
#include "tiercache/internal/prefetch_walk.h"

#include "base/strings.h"

namespace tierfs::tiercache_internal {

ObjectRef ObjectOf(const FileItem& file) {
  ObjectRef obj;
  obj.key = file.path;
  obj.info.size = file.entry.size;
  obj.info.etag = file.entry.etag;
  obj.info.mtime_ns = file.entry.mtime_ns;
  return obj;
}

Result<DirEntry> LookUpPath(Catalog* catalog, std::string_view path) {
  const auto [dir, base] = SplitPath(path);
  return catalog->Lookup(dir, base);
}

Result<bool> Walker::Next(FileItem* out) {
  if (!started_) {
    started_ = true;
    TIERFS_ASSIGN_OR_RETURN(bool single, StartAt());
    if (single) {
      if (!root_file_) return false;
      *out = std::move(*root_file_);
      root_file_.reset();
      return true;
    }
  }
  while (!stack_.empty()) {
    Frame& f = stack_.back();
    if (f.idx == f.page.size()) {
      if (f.last_page) {
        stack_.pop_back();
        continue;
      }
      f.page.clear();
      f.idx = 0;
      Status st = catalog_->ReadDir(f.dir, f.after, kPage, &f.page);
      if (!st.ok()) {
        if (st.IsNotFound() && stack_.size() > 1) {
          stack_.pop_back();
          continue;
        }
        return st;
      }
      f.last_page = f.page.size() < kPage;
      continue;
    }
    DirEntry& e = f.page[f.idx++];
    f.after = e.name;
    std::string p = JoinPath(f.dir, e.name);
    if (e.type == EntryType::kDir) {
      stack_.push_back(Frame{std::move(p)});
      continue;
    }
    *out = FileItem{std::move(p), std::move(e)};
    return true;
  }
  return false;
}

// Sets up the stack; true if the root is a single file (then root_file_ holds it, unless the
// cursor says it is done).
Result<bool> Walker::StartAt() {
  if (!root_.empty()) {
    TIERFS_ASSIGN_OR_RETURN(DirEntry e, LookUpPath(catalog_, root_));
    if (e.type != EntryType::kDir) {
      if (cursor_ != root_) root_file_ = FileItem{root_, std::move(e)};
      return true;
    }
  }
  stack_.push_back(Frame{root_});
  // Resume after the cursor: in every directory on its path, continue after its component.
  std::string_view rel = cursor_;
  if (!root_.empty()) {
    if (!rel.starts_with(root_ + "/")) return false;  // no (usable) cursor: from the start
    rel.remove_prefix(root_.size() + 1);
  }
  while (!rel.empty()) {
    const size_t slash = rel.find('/');
    const std::string name(rel.substr(0, slash));
    stack_.back().after = name;
    if (slash == std::string_view::npos) break;
    // The cursor lies inside directory `name`: walk the rest of it first.
    stack_.push_back(Frame{JoinPath(stack_.back().dir, name)});
    rel.remove_prefix(slash + 1);
  }
  return false;
}

}  // namespace tierfs::tiercache_internal
