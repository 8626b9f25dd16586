// The work of deep prefetch (prefetch_jobs.h): a job, the batch of files its runner walked and
// the tasks (runs of blocks) the workers take from it.
//
// A runner splits a batch into tasks of up to blocks_per_task consecutive blocks (a shorter tail
// than half that joins the task before it: PlanTasks); a run the target holds already is
// finished on the runner (TieredCache::TierHolds, then HydrateRun for its pin). A file of more
// than kPlannedTasks tasks is one span instead, from which the workers cut their tasks as they
// take them (Work::TakeTask), so that planning a file costs the same whatever its size (a sparse
// file of 2^62 bytes is 2^40 tasks: never listed).
//
// Not thread-safe: Job::st, Job::owner and every Work field but the constants are guarded by the
// PrefetchJobs' mutex (REQUIRES: it is held for the methods below).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tiercache/internal/prefetch_walk.h"
#include "tiercache/prefetch_jobs.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

struct Job {
  PrefetchJobStatus st;
  std::atomic<bool> cancel{false};
  // The uid that started it through StartAs (counted against its max_jobs_per_user); unset for
  // Start and for jobs resumed from the MetaStore.
  std::optional<uint32_t> owner;
};

struct Task {
  size_t file = 0;
  uint64_t first = 0, count = 0;
  bool span = false;  // the rest of a large file: tasks are cut from its front as handed out
};

// Files of more tasks than this are published as a span.
inline constexpr uint64_t kPlannedTasks = 1024;

// The blocks of the next task of a file with `left` blocks to go: `per`, or all that is left
// when the tail would be shorter than half a task (a file of 5 blocks is one GET, not a GET of 4
// blocks and another round trip for the last one).
inline uint64_t TaskBlocks(uint64_t left, uint64_t per) {
  const uint64_t n = std::min(per, left);
  return left - n < (per + 1) / 2 ? left : n;
}

// One batch of the job being executed.
struct Work {
  std::shared_ptr<Job> job;
  bool list = false;            // constant: the list job (position cursor, totals known)
  size_t target = 0;            // constant
  std::vector<FileItem> files;  // constant once published
  std::vector<Task> tasks;      // a span is cut from its front as tasks are handed out
  size_t next = 0;              // next task to hand out
  size_t in_flight = 0;
  std::vector<uint64_t> remaining;  // tasks left per file
  size_t completed = 0;             // files[0, completed) are done: the cursor is past them
  std::atomic<bool> failed{false};  // written under the mutex; read without it by FetchSlots

  // Drained: no task in flight and none will be handed out (all were, or the job stops:
  // failed, cancelled, or `stopping`).
  bool Drained(bool stopping) const {
    return in_flight == 0 && (next == tasks.size() || failed || job->cancel || stopping);
  }
  // Counts files whose tasks all finished; moves the job's cursor over the completed prefix.
  void Advance();
  // The next task (REQUIRES: next < tasks.size()): tasks[next], or a task of `per` blocks cut
  // from the front of a span, which stays for the next worker while blocks are left (a task more
  // for its file in `remaining`).
  Task TakeTask(uint64_t per);
};

// Splits the files of `w` into tasks of `per` blocks (spans for large files). A run the target
// holds already is finished here, not made a task: handed to a worker, it cost a wake-up and a
// fetch slot for a check of a few microseconds (a loader's warm epoch under PrefetchSampler sends
// only such files). Returns the bytes of those runs.
uint64_t PlanTasks(TieredCache* cache, uint64_t per, Work* w);

}  // namespace tierfs::tiercache_internal
