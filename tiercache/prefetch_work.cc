// The work of deep prefetch (internal/prefetch_work.h).
#include "tiercache/internal/prefetch_work.h"

namespace tierfs::tiercache_internal {

void Work::Advance() {
  PrefetchJobStatus& st = job->st;
  while (completed < files.size() && remaining[completed] == 0) {
    const FileItem& f = files[completed++];
    if (!list) st.cursor = f.path;  // a list job's cursor is its first position
    ++st.cursor_files;
    st.cursor_bytes += f.entry.size;
  }
  uint64_t beyond = 0;  // finished out of order, past the cursor
  for (size_t f = completed; f < files.size(); ++f) beyond += remaining[f] == 0;
  st.files_done = st.cursor_files + beyond;
}

Task Work::TakeTask(uint64_t per) {
  Task& t = tasks[next];
  if (!t.span) return tasks[next++];
  const uint64_t n = TaskBlocks(t.count, per);
  Task out{t.file, t.first, n};
  t.first += n;
  t.count -= n;
  if (t.count == 0) {
    ++next;
  } else {
    ++remaining[t.file];
  }
  return out;
}

uint64_t PlanTasks(TieredCache* cache, uint64_t per, Work* w) {
  const uint64_t bs = cache->block_size();
  w->remaining.assign(w->files.size(), 0);
  uint64_t held_bytes = 0;
  for (size_t f = 0; f < w->files.size(); ++f) {
    const uint64_t nblocks = (w->files[f].entry.size + bs - 1) / bs;
    const ObjectRef obj = ObjectOf(w->files[f]);
    if (nblocks / per > kPlannedTasks) {
      w->tasks.push_back(Task{f, 0, nblocks, /*span=*/true});
      ++w->remaining[f];
      continue;
    }
    for (uint64_t b = 0; b < nblocks;) {
      const uint64_t n = TaskBlocks(nblocks - b, per);
      // Should a block go between TierHolds and HydrateRun, this HydrateRun fetches it, on the
      // runner: rare, and still right.
      uint64_t done = 0;
      if (cache->TierHolds(obj, b, n, w->target) &&
          cache->HydrateRun(obj, b, n, w->target, &done).ok()) {
        held_bytes += done;
      } else {
        w->tasks.push_back(Task{f, b, n});
        ++w->remaining[f];
      }
      b += n;
    }
  }
  return held_bytes;
}

}  // namespace tierfs::tiercache_internal
