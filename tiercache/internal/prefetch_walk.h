// The walk of deep prefetch (prefetch_jobs.h): the files a job hydrates, in walk order.
//
// Walk order: depth-first, each directory's entries in byte order of name (a subdirectory is
// walked where its name falls), so "file X comes before file Y" is a comparison of their paths
// component by component. The cursor is the path of the last file completed in that order; a
// resumed Walker starts just after it by seeking every directory on the cursor's path with the
// Catalog's name-after cursor.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "tiercache/catalog.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

// A file a job hydrates: its path (relative to the root) and catalog entry (a list item that
// vanished before its turn: size 0, nothing to fetch).
struct FileItem {
  std::string path;
  DirEntry entry;
};

// The object version a walked or listed file names (its catalog entry's size, ETag, mtime).
ObjectRef ObjectOf(const FileItem& file);

// The catalog entry of `path` (relative to the root, "a/b/c").
Result<DirEntry> LookUpPath(Catalog* catalog, std::string_view path);

// Depth-first walk below one path in walk order, one listing page per directory level in
// memory. Not thread-safe; used by one job's runner only. `catalog` is not owned and outlives
// the walker.
class Walker {
 public:
  Walker(Catalog* catalog, std::string root, std::string cursor)
      : catalog_(catalog), root_(std::move(root)), cursor_(std::move(cursor)) {}

  // The next file after the cursor; false at the end. Errors of the Catalog are returned, except
  // NotFound for a directory below the root (it vanished: nothing left to walk there).
  Result<bool> Next(FileItem* out);

 private:
  static constexpr size_t kPage = 1024;
  struct Frame {
    explicit Frame(std::string d) : dir(std::move(d)) {}
    std::string dir;
    std::string after;  // name-after cursor of the next page
    std::vector<DirEntry> page;
    size_t idx = 0;
    bool last_page = false;
  };

  Result<bool> StartAt();

  Catalog* const catalog_;
  const std::string root_;
  const std::string cursor_;
  bool started_ = false;
  std::optional<FileItem> root_file_;
  std::vector<Frame> stack_;
};

}  // namespace tierfs::tiercache_internal
