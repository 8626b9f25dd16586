// PrefetchStore: where deep prefetch (prefetch_jobs.h) keeps its jobs across restarts, in the
// MetaStore (metastore/FORMAT.md): one record "prefetch/job/<path>" per job
// (EncodePrefetchJob), and the list job's queued paths as chunks "prefetch/list/<position>"
// (one path a line). Write errors are logged, never returned: a record that could not be written
// costs the resume after a restart, not the job.
//
// Thread-safe; no external synchronization needed (the MetaStore is). `meta` is not owned and
// outlives this object.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "metastore/meta_store.h"
#include "tiercache/prefetch_jobs.h"

namespace tierfs::tiercache_internal {

class PrefetchStore {
 public:
  explicit PrefetchStore(MetaStore* meta) : meta_(meta) {}
  PrefetchStore(const PrefetchStore&) = delete;
  PrefetchStore& operator=(const PrefetchStore&) = delete;

  // What the MetaStore holds.
  struct Stored {
    std::vector<std::pair<std::string, std::string>> jobs;  // (path, record)
    std::vector<std::pair<uint64_t, std::string>> chunks;   // (first position, paths)
    std::vector<std::string> stale_chunks;                  // keys of unreadable chunks
  };
  Result<Stored> Scan();

  // Writes the record of job `st`.
  void Put(const PrefetchJobStatus& st);
  // Deletes the records of the jobs `paths`.
  void Forget(const std::vector<std::string>& paths);
  // Writes the chunk of `paths` queued from position `first` on.
  void PutChunk(uint64_t first, const std::vector<std::string>& paths);
  // Deletes the chunks `keys` (ChunkKey).
  void DeleteChunks(const std::vector<std::string>& keys);

  // The key of the chunk that starts at position `first`.
  static std::string ChunkKey(uint64_t first);
  // The paths of a chunk's value.
  static std::vector<std::string> ChunkPaths(std::string_view value);

 private:
  MetaStore* const meta_;
};

}  // namespace tierfs::tiercache_internal
