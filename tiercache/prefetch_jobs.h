// PrefetchJobs — deep prefetch (user.tierfs.prefetch, `tierfs prefetch`): durable background jobs
// that hydrate a file, or a directory recursively, into one tier.
//
// A job is named by the path it was started on (one job per path; starting again replaces a
// finished job and leaves a queued or running one alone). It walks the Catalog depth-first, files
// in listing order, then reads every block of every file through TieredCache::Hydrate into the
// target tier: "l1" (memory, and L2 below it), "l2" (flash; L1 is not filled), "l3" (the regional
// tier only: no copy on this host). Up to max_running_jobs jobs run at once (the others wait,
// FIFO), sharing `threads` owned worker threads ("tierfs-pfjob-N") round-robin, with one runner
// per running job ("tierfs-pfjob"). Many blocks are in flight at once (small files: one GET
// each; large files: runs of blocks on many workers), bounded by the threads, memory_budget and
// the origin's adaptive concurrency limit less what demand reads use; while demand reads fetch
// from the network prefetch (except the list job) drops to slots_while_demand blocks in flight.
// Demand reads never pass through these threads, so a reader never queues behind prefetch traffic.
//
// The walk is incremental: files are taken from the Catalog a batch at a time (depth-first,
// names in byte order, a directory's files and subdirectories interleaved by name), so memory
// stays bounded by one listing page per directory level plus one batch, however large the tree.
//
// Durability: every job is a MetaStore value "prefetch/job/<path>" (metastore/FORMAT.md) holding
// its state, target, totals, progress and a cursor: the path of the last file completed in walk
// order (a name, not a position). A job that was queued or running when the daemon stopped is
// resumed at the next start from just after the cursor: nothing is loaded but the record, a
// directory that changed meanwhile neither skips nor repeats files (names are compared, not
// counted), and blocks the target already holds are skipped without I/O. Finished jobs (done,
// failed, cancelled) are kept for getxattr for `finished_ttl` (24 h) and at most
// `keep_finished` of them, then dropped from memory and the MetaStore.
//
// The list job (user.tierfs.prefetch_list, `tierfs prefetch --from-file`): one per mount, named
// kPrefetchListJob (not a path a file can have). AppendList checks every path against the
// Catalog (a path that does not exist or is a directory refuses the whole call: nothing is
// queued) and appends the files, in the given order, to the list job, creating it when there is
// none queued or running. Its files are fetched in list order (several at once); its record
// "prefetch/job//list" carries the position cursor (files completed in list order) and the
// queued paths are stored as "prefetch/list/<position>" chunks (metastore/FORMAT.md), so a list
// job resumes after a restart like the others; chunks are deleted once passed or finished.
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "metastore/meta_store.h"
#include "tiercache/catalog.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {

enum class PrefetchState : uint8_t { kQueued, kRunning, kDone, kFailed, kCancelled };
std::string_view PrefetchStateName(PrefetchState s);

struct PrefetchJobStatus {
  std::string path;  // "" for the root
  std::string tier;  // "l1", "l2", "l3"
  PrefetchState state = PrefetchState::kQueued;
  // Totals count the files the walk has found so far (final once the job is done).
  uint64_t files_done = 0, files_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;
  // The resume point: the path of the last file completed in walk order ("" = none yet), and
  // the files and bytes of the walk up to and including it.
  std::string cursor;
  uint64_t cursor_files = 0, cursor_bytes = 0;
  int64_t finished_at_ns = 0;  // wall clock when it became done/failed/cancelled; 0 otherwise
  std::string error;           // failed: the first error
};

// "state=running tier=l2 files=3/10 bytes=3145728/10485760" (+ " error=<text>" when failed;
// spaces in the error are replaced by '_'). The value of user.tierfs.prefetch.
std::string FormatPrefetchStatus(const PrefetchJobStatus& s);
// The value layout stored in MetaStore (FORMAT.md) and its parser (Corruption if malformed).
std::string EncodePrefetchJob(const PrefetchJobStatus& s);
Result<PrefetchJobStatus> DecodePrefetchJob(std::string_view path, std::string_view value);
// The MetaStore value name of the job of `path`.
std::string PrefetchJobKey(std::string_view path);

// The name of the mount's list job in Get/Cancel (a leading '/' no real path has).
inline constexpr std::string_view kPrefetchListJob = "/list";

// A value of user.tierfs.prefetch_list, parsed: an optional first line "tier=l1|l2|l3" (default
// l2), then one path per line relative to the mount root (a leading '/' means the mount root;
// trailing '\r' and empty lines are ignored), or the single word "cancel".
struct PrefetchListRequest {
  bool cancel = false;
  std::string tier = "l2";
  std::vector<std::string> paths;  // normalized: no leading '/'
};
// InvalidArgument: not UTF-8, a NUL byte, a path with an empty, "." or ".." component, or a bad
// tier line.
Result<PrefetchListRequest> ParsePrefetchList(std::string_view value);

struct PrefetchJobsOptions {
  // Worker threads: the most blocks the jobs fetch at once (one GET each; a small file is one
  // block, a large one is spread over many workers as runs of blocks_per_task blocks). 64: as
  // many as the origin's connections (s3.max_connections); a cold PrefetchSampler epoch of
  // 128 KiB files read the origin at 32 GETs in flight slower than at 64
  // (bench/results/2026-12-05-prefetch-gets-in-flight.md).
  int threads = 64;
  // A worker takes this many consecutive blocks of a file (a tail of less than half as many
  // joins the task before it: a file of 5 blocks is one task).
  uint64_t blocks_per_task = 4;
  // Jobs running at once (their tasks are handed out round-robin); the others wait in FIFO.
  int max_running_jobs = 4;
  // Jobs one user may have queued or running through StartAs (the control group's members);
  // beyond it StartAs is refused with NoSpace (ENOSPC), so no user can queue without bound.
  size_t max_jobs_per_user = 16;
  // Files one user may have queued in the list job through AppendListAs (not yet taken for
  // fetching); an append past it is refused whole with NoSpace (ENOSPC). A PrefetchSampler keeps
  // about `ahead` files queued; a whole-dataset list of more files is appended in steps, or by
  // root or the mounting user.
  size_t max_list_files_per_user = 1 << 20;
  // The bytes of the runs in flight are also bounded by memory_budget (one run always may go).
  uint64_t memory_budget = 64ull << 20;
  // The origin's current adaptive concurrency limit (BlobStoreStats::concurrency_limit; 0 or
  // unset: none). Prefetch takes only the slots demand reads are not using.
  std::function<uint64_t()> origin_limit;
  // While demand reads fetch from the network (or did within demand_quiet), prefetch keeps at
  // most slots_while_demand blocks in flight: demand reads come first. Not the list job: its
  // files are what its loader reads next (PrefetchSampler), so it keeps its slots.
  int slots_while_demand = 2;
  std::chrono::nanoseconds demand_quiet = std::chrono::milliseconds(200);
  // Progress is written to the MetaStore at most this often (and at every state change).
  std::chrono::milliseconds persist_interval{500};
  // Finished jobs (done/failed/cancelled) are kept for getxattr this long, and at most
  // keep_finished of them (the oldest are dropped first); then forgotten, also on disk.
  std::chrono::nanoseconds finished_ttl = std::chrono::hours(24);
  size_t keep_finished = 1024;
  // Files walked per batch (the most the job holds in memory at once).
  size_t batch_files = 256;
  // Where tierfs_prefetch_jobs{state} and tierfs_prefetch_jobs_finished_total{state} are
  // published (docs/operations.md, "Metrics"). Not owned; must outlive the object. Null: not
  // published.
  metrics::Registry* metrics = nullptr;
};

class PrefetchJobs {
 public:
  // Loads the jobs stored in `meta`, drops the expired finished ones and resumes the
  // queued/running ones. `catalog`, `cache`, `meta` and `clock` (nullptr: the system clock) are
  // not owned and must outlive the object.
  static Result<std::unique_ptr<PrefetchJobs>> Open(const PrefetchJobsOptions& options,
                                                    Catalog* catalog, TieredCache* cache,
                                                    MetaStore* meta, Clock* clock = nullptr);
  // Stops the threads (the running job keeps its state and cursor for the next start).
  virtual ~PrefetchJobs() = default;

  // Starts (or restarts, when finished) the job of `path` into `tier`. InvalidArgument: unknown
  // tier name or no such tier in this daemon (e.g. "l3" without an L3). A queued or running job
  // of the same path is left as it is (OK).
  virtual Status Start(std::string_view path, std::string_view tier) = 0;
  // Start on behalf of `uid` (a member of the mount's control group): the job counts against
  // the uid's max_jobs_per_user while queued or running; NoSpace when the uid is at that cap (a
  // job of the same path already queued or running is OK, as for Start). Not persisted: a job
  // resumed after a restart has no owner.
  virtual Status StartAs(uint32_t uid, std::string_view path, std::string_view tier) = 0;
  // NotFound when `path` has no job.
  virtual Result<PrefetchJobStatus> Get(std::string_view path) = 0;
  // Cancels the job of `path` (queued or running). NotFound: no job; OK for a finished one.
  virtual Status Cancel(std::string_view path) = 0;
  // Appends `paths` (relative to the source root, no leading '/') in that order to the list job,
  // starting one into `tier` if none is queued or running. InvalidArgument (nothing queued): a
  // path that does not exist or is a directory (named in the message), a bad tier, or a tier other
  // than that of the queued/running list job. Other Catalog errors are returned as they are.
  virtual Status AppendList(std::string_view tier, const std::vector<std::string>& paths) = 0;
  // AppendList on behalf of `uid` (a member of the mount's control group): NoSpace, and nothing
  // queued, when the uid's files queued and not yet taken would pass max_list_files_per_user.
  // Not persisted: files resumed after a restart have no owner.
  virtual Status AppendListAs(uint32_t uid, std::string_view tier,
                              const std::vector<std::string>& paths) = 0;
  // Whether the list job is queued or running: a loader is handing tierfs the exact order it will
  // read in (PrefetchSampler), so guessing it (next-files prefetch, tiercache/prefetcher.h) only
  // takes the origin's capacity from the files it names.
  virtual bool ListJobActive() = 0;
  // Test hook: blocks until no job is queued or running, or `timeout` passes (false).
  virtual bool TEST_WaitIdle(std::chrono::milliseconds timeout) = 0;
};

}  // namespace tierfs
