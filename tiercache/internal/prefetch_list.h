// The list job's queue (prefetch_jobs.h, user.tierfs.prefetch_list): the files appended to it and
// not yet taken into a batch, in list order; the chunks of them stored in the MetaStore
// (PrefetchStore) that its cursor has not passed; the position of the next file appended; and
// how many of the queued files each uid appended (max_list_files_per_user).
//
// Not thread-safe; REQUIRES: external synchronization (the PrefetchJobs' mutex guards it).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "tiercache/catalog.h"
#include "tiercache/internal/prefetch_walk.h"

namespace tierfs::tiercache_internal {

// A file queued in the list job; `entry` is empty after a restart (looked up at its turn).
struct ListItem {
  std::string path;
  std::optional<DirEntry> entry;
  std::optional<uint32_t> owner;  // appended by AppendListAs(owner): counted until taken
};

class ListQueue {
 public:
  // Takes the queued paths of the list job from its stored chunks (first position, paths):
  // with `active` (an unfinished list job whose cursor is at position `base` with `done` files
  // completed), those past its cursor are queued; the keys of chunks of no unfinished list job,
  // or wholly passed, go to *stale.
  void Load(const std::vector<std::pair<uint64_t, std::string>>& chunks, bool active, uint64_t base,
            uint64_t done, std::vector<std::string>* stale);

  size_t pending() const { return pending_.size(); }
  // The position the next file appended gets.
  uint64_t next_pos() const { return next_pos_; }
  // Queued files `uid` appended.
  size_t QueuedBy(uint32_t uid) const;

  // Queues `items` (counted for `owner` when set) as a chunk; returns the first one's position.
  uint64_t Append(std::vector<ListItem> items, std::optional<uint32_t> owner);
  // The next queued file; nullopt when none is queued.
  std::optional<ListItem> Take();
  // Forgets every queued file; returns the keys of the chunks to delete.
  std::vector<std::string> Drop();
  // Forgets the chunks a cursor at position `next` has passed; returns their keys.
  std::vector<std::string> Passed(uint64_t next);

 private:
  std::deque<ListItem> pending_;
  std::map<uint32_t, size_t> queued_by_uid_;
  std::deque<std::pair<uint64_t, uint64_t>> chunks_;  // (first position, count)
  uint64_t next_pos_ = 0;
};

// The Catalog entries of `paths` (relative to the root), their sizes added to *bytes.
// InvalidArgument for a path that does not exist or is a directory (named in the message).
Result<std::vector<ListItem>> LookUpListFiles(Catalog* catalog,
                                              const std::vector<std::string>& paths,
                                              uint64_t* bytes);

// The file a taken item names, looked up if it was loaded from the store. A file gone since it
// was queued (or a directory now) becomes an empty item (skipped, logged).
Result<FileItem> ResolveListItem(Catalog* catalog, ListItem item);

}  // namespace tierfs::tiercache_internal
