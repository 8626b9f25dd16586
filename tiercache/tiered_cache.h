// TieredCache — composes the tiers fast→slow above the origin (cvmfs TieredCacheManager, N
// levels; conventions C14, C15).
//
// Read path for one block: L1 → L2 → (L3) → origin. A hit in a lower tier fills the tiers above
// it; a block fetched from the origin fills every tier (L3 asynchronously, through its write
// queue). A tier that errs (L3 down, slow, full) is a miss: the read goes below, never fails
// because of it. Concurrent misses on the same block are merged into one fetch (single-flight);
// the winner re-checks the upper tiers first.
// Readahead and prefetch run on a bounded pool of owned threads ("tierfs-prefetch-N") below demand
// reads in priority.
//
// Interrupts and deadlines. A demand read given a CancelToken never waits on the
// network on its own thread: the single-flight leader reads the host tiers itself (L1, L2: local,
// fast) and hands the remote part (L3, origin) to an owned fetch pool ("tierfs-fetch-N",
// fetch_threads); every reader of the block, leader included, then waits for the result with
// the token and wait_timeout. A cancelled reader returns Cancelled at once; the fetch goes on
// and fills the cache for the readers still waiting and for the next read (a fetch still queued
// when every reader has given up is dropped: fetch.abandoned). A reader that waits longer than
// wait_timeout gets TimedOut. Reads without a token (readahead, Hydrate) fetch on their own
// thread as before; their single-flight waits are bounded by wait_timeout too.
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/cancel.h"
#include "base/clock.h"
#include "base/result.h"
#include "blobclient/blob_store.h"
#include "tiercache/admission.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace metrics {
class Registry;
}

// One version of one object, as pinned by an open file handle.
struct ObjectRef {
  std::string key;  // relative to the source (BlobStore key)
  ObjectInfo info;  // size and ETag at open: every block read is of this version
};

// Which tier served a block: 0..tiers-1 (an index into TieredCache::tiers()), or kOriginTier.
inline constexpr int kOriginTier = -1;

// How a handle reads its file (Prefetcher::Stream::Hint). kWhole: from its start, as image, npy
// and tar loaders do: a small object (TieredCacheOptions::small_object_bytes) is fetched whole at
// its first miss. kRanges: the handle's first read was elsewhere, or it has seeked (a column
// reader): its small reads of a small object are projected like those of a large one
// (TieredCacheOptions::sparse_read_max).
enum class ReadHint { kWhole, kRanges };

// How readahead fetches a block that has sparse entries (TieredCache::Prefetch). kWhole: with
// the other blocks of its run, one request per stretch (a dense random reader's hydration waits
// on round trips, not bytes). kGaps: only the gaps between its entries, when they hold an eighth
// of it or more (the hydration of a reader of ranges: bytes it did not read).
enum class BlockFill { kWhole, kGaps };

// A slice of a block that a reply can send without copying: the BlockRef keeps it alive. Either
// `block` is set (the bytes are in memory), or `file` is (the bytes are in a cache file: bytes
// [offset, offset + length) of the block are at file->offset() + offset of file->fd(), verified,
// for a reply that splices them; only with TieredCacheOptions::file_slices).
struct BlockSlice {
  BlockRef block;
  size_t offset = 0;  // within the block
  size_t length = 0;
  // The tier this read got the block from (a reader that waited for another's fetch of the
  // block reports the tier that fetch read), or kOriginTier.
  int tier = kOriginTier;
  FileExtentRef file;
};

// The tier that served a whole read: the slowest of its slices' tiers (the origin if any slice
// came from it, else the highest tier index); kOriginTier for no slices.
int ServingTier(const std::vector<BlockSlice>& slices);

// The space of the cache on this host as `df` shows it (TieredCache::HostSpace).
struct HostSpaceInfo {
  std::string tier;             // the tier it describes ("l2"; "l1" without L2; empty: none)
  uint64_t capacity_bytes = 0;  // its byte budget
  uint64_t used_bytes = 0;      // bytes it holds now (at most capacity_bytes)
};

struct TieredCacheOptions {
  // Reads may return slices backed by a host tier's file (BlockSlice::file) for blocks no faster
  // tier holds (L2 hits), so that the reply splices them from the file instead of reading them
  // into memory. Off: every slice is in memory (what callers that copy bytes want). daemon/:
  // cache.l2_splice.
  bool file_slices = false;
  // With file_slices: an L2 block served as a file slice is copied into L1 (promoted) on its
  // `promote_hits`-th use among the blocks read from L2 recently (a window of the last 65,536
  // distinct blocks hit; a read starting past the previous one's start in the block is the same
  // pass, not a use; a use after more than L1's capacity / 4 bytes were read since the block's
  // previous one starts the count again); 0: never promoted. Sequential readahead of blocks held in
  // L2 only asks the kernel to read their files ahead (Tier::WillNeed) instead of copying them to
  // L1. Without file_slices every L2 hit is copied into L1, as before. daemon/:
  // cache.l2_promote_hits.
  uint32_t promote_hits = 2;
  // Block size. 1 MiB: matches the kernel's largest FUSE read, so one read touches at most two
  // blocks, and is large enough that per-request latency amortises (docs/configuration.md,
  // `cache.block_size`).
  uint64_t block_size = 1ULL << 20;
  // The readahead/prefetch pool: up to this many origin requests in flight (16 while readers
  // wait for fetches of their own, until SetGuessesProven), but at most 16 runs' bytes (16 x the
  // run size, within the readahead budget: two sequential readers' windows) whatever the threads:
  // many small files (a loader's next files, one GET each) go at once, large runs no more than
  // that; runs waiting for room start in the order they were asked for.
  int prefetch_threads = 64;
  uint64_t readahead_max_bytes = 64ULL << 20;  // per open file, adaptive window upper bound
  // Readahead memory of the whole process: the queue holds at most this many bytes' worth of
  // blocks, and the blocks being fetched (at most 16 runs' bytes, runs of at most
  // readahead_run_bytes) never exceed it (the run is shrunk to budget / min(prefetch_threads,
  // 16)).
  // Fetched blocks go to L1 and count against its budget from then on.
  uint64_t readahead_budget_bytes = 256ULL << 20;
  // The memory budget (memory.limit) readahead runs must fit in besides L1
  // (tiercache/internal/readahead_budget.h), or null. Not owned; must outlive the cache.
  MemoryBudget* memory_budget = nullptr;
  // Readahead fetches up to this many bytes of adjacent blocks that no host tier holds with one
  // origin request (the S3 store splits a large read into parallel ranged GETs of its part
  // size), instead of one GET per block. With an L3 tier the run is first read from L3 with
  // Tier::ReadMany (its GETs at once), and only the blocks L3 lacks go to the origin, one
  // request per stretch of adjacent ones.
  uint64_t readahead_run_bytes = 8ULL << 20;
  // A demand read that misses every host tier on an object of at most this many bytes (and at
  // most one readahead run) fetches the whole object with one request: its fetch also claims the
  // object's other blocks that no host tier holds and no one else fetches (one origin GET, or
  // one L3 ReadMany), and callers do not ask readahead for such an object (a training loader
  // reading many small files whole pays one round trip per file). 0: off.
  uint64_t small_object_bytes = 4ULL << 20;
  // Projected reads: a piece of a read of at most this many bytes within one block (and under
  // half of it; blocks of at least 128 KiB), of an object larger than small_object_bytes, whose
  // block no tier above the origin holds whole and no one is fetching whole, fetches only what it
  // reads: from its first missing 4 KiB page (kSparseChunkBytes) to its end rounded up to a page,
  // one origin request, kept in the host tiers as sparse entries (MakeChunkKey: one per page). A
  // reader that would make three quarters of a block's pages present fetches the rest of the
  // block instead (dense completion: only the gaps between the entries); sequential readers get
  // whole blocks from readahead. Such reads under 96 KiB count towards the random-read hydration
  // of the file only by their share of it (Prefetcher). 0: off. daemon/: cache.sparse_read_max.
  uint64_t sparse_read_max = 128ULL << 10;
  // Owned threads that fetch blocks from the remote tiers (L3, origin) for demand reads given a
  // CancelToken (see the file comment). 0: such reads fetch on their own thread.
  int fetch_threads = 16;
  // Fetches queued for the fetch pool beyond which a demand read fails at once (Unavailable):
  // bounded memory when the origin stalls and readers keep asking for new blocks.
  size_t fetch_queue_limit = 4096;
  // Longest a reader waits for a block being fetched by another thread (single-flight follower,
  // fetch pool): TimedOut (EIO) after it. daemon/ derives it from the stores' request timeouts,
  // attempts and backoff, so it ends only waits whose fetch is itself past its deadline.
  std::chrono::nanoseconds wait_timeout = std::chrono::minutes(5);
  // A demand read that failed with the origin's retryable error (Unavailable, TimedOut, IOError:
  // after the stores' own retries) is remembered for this long: reads of the same block in that
  // time get the same error at once instead of a fetch of their own. The kernel retries a failed
  // readahead FUSE READ at once with a synchronous one for the page its reader waits on; without
  // this, that retry starts a second fetch, and an outage costs a reader two or three fetch
  // budgets instead of one. Short, so that a read after the origin is back fetches again.
  // Zero: never remembered.
  std::chrono::nanoseconds origin_failure_ttl = std::chrono::seconds(1);
  // Per-object placement (pin) for blocks inserted by reads: called with the object key on
  // every insert. Empty: no pins. Must be thread-safe and cheap (tiercache/policy.h provides
  // PolicyResolver::PlacementFor).
  std::function<Placement(std::string_view key)> placement;
  // Which blocks fetched from below reach the second host tier (L2) (tiercache/admission.h):
  // the default policy, the ghost list and the scan detection. Pinned blocks and deep prefetch
  // (Hydrate, HydrateRun) are always admitted; L1 is never subject to it. daemon/: cache.admit,
  // cache.admit_ghost_bytes, cache.admit_scan_percent.
  AdmissionOptions admission;
  // Where the cache publishes its metrics (per tier hits, misses, bytes, occupancy, evictions,
  // corruptions; read latency by serving tier; readahead and fetch queues; see
  // docs/operations.md, "Metrics"): not owned, must outlive the cache. Null: no metrics (the read
  // latency is then not measured).
  metrics::Registry* metrics = nullptr;
};

struct CacheStats {
  std::atomic<uint64_t> origin_requests{0};  // block fetches from the origin
  std::atomic<uint64_t> origin_bytes{0};
  std::atomic<uint64_t> origin_errors{0};
  std::atomic<uint64_t> singleflight_merged{0};  // readers that waited on another's fetch
  std::atomic<uint64_t> readahead_blocks{0};
  std::atomic<uint64_t> read_calls{0};
  std::atomic<uint64_t> bytes_served{0};
  std::atomic<uint64_t> waits_cancelled{0};  // reads that stopped waiting: interrupted
  std::atomic<uint64_t> waits_timed_out{0};  // reads that stopped waiting: wait_timeout passed
  std::atomic<uint64_t> fetch_abandoned{0};  // queued fetches dropped: no reader waited any more
  // Demand reads answered with a block's origin failure of the last origin_failure_ttl.
  std::atomic<uint64_t> failures_replayed{0};
  // Demand reads (and readahead runs for readers) now fetching from a remote tier or the origin,
  // and when the last one started (Clock::MonotonicNanos; 0 = never): deep prefetch yields to them
  // (prefetch_jobs.h).
  std::atomic<int64_t> demand_remote_in_flight{0};
  std::atomic<int64_t> demand_remote_last_ns{0};
};

// The tiers of a cache by role, each list fast→slow: the tiers on this host (L1 memory over L2
// flash: with two, the first is L1 and the second L2; either may be absent) and the tiers shared
// with the other hosts of the region (L3). The cache's tier indexes (BlockSlice::tier, tiers())
// count the host tiers first, then the shared ones. A vector of tiers converts to host tiers
// only.
struct CacheTiers {
  CacheTiers() = default;
  CacheTiers(std::vector<std::unique_ptr<Tier>> host_tiers)  // NOLINT(google-explicit-constructor)
      : host(std::move(host_tiers)) {}
  CacheTiers(std::vector<std::unique_ptr<Tier>> host_tiers,
             std::vector<std::unique_ptr<Tier>> shared_tiers)
      : host(std::move(host_tiers)), shared(std::move(shared_tiers)) {}

  std::vector<std::unique_ptr<Tier>> host;    // L1, L2: Evict, pins, TTL, `df` are about these
  std::vector<std::unique_ptr<Tier>> shared;  // L3: Contains() is only a hint; never evicted
};

class TieredCache {
 public:
  // `tiers` by role (CacheTiers); either list may be empty, the host one holds at most two
  // (InvalidArgument otherwise). `origin` and `clock` are not owned and must outlive the cache.
  static Result<std::unique_ptr<TieredCache>> Open(const TieredCacheOptions& options,
                                                   CacheTiers tiers, BlobStore* origin,
                                                   Clock* clock);
  virtual ~TieredCache() = default;

  // Returns slices covering [offset, offset + length) of `obj`, short at end of object (empty at
  // or past it). Errors: the origin's (NotFound if the object is gone, FailedPrecondition if it
  // changed since `obj` was taken, Unavailable/TimedOut/IOError after retries). With a `token`
  // (not owned, may be null) the remote part runs on the fetch pool and the read returns
  // Cancelled as soon as the token is cancelled, TimedOut when its deadline passes.
  // `hint`: how the handle reads (ReadHint).
  virtual Result<std::vector<BlockSlice>> Read(const ObjectRef& obj, uint64_t offset,
                                               uint64_t length, const CancelToken* token = nullptr,
                                               ReadHint hint = ReadHint::kWhole) = 0;

  // True when every block of [offset, offset + length) of `obj` is in a host tier (L1/L2) now,
  // or for a projected read's range the sparse entries of its pages are: a read of it will not
  // wait on the network (a hint: a block may be evicted meanwhile).
  virtual bool HostHolds(const ObjectRef& obj, uint64_t offset, uint64_t length) = 0;

  // The kernel's page cache now holds bytes [offset, offset + length) of `obj` (fuse/ stored
  // them whole at open): the first tier's (L1's) copy of every block of that range that a host
  // tier below it (L2) also holds is dropped, unless the object is pinned, so that L1's memory
  // goes to blocks not yet read rather than to a third copy of these. A read that later misses
  // the page cache is served from L2, and L1 takes the block again on reuse. Returns the number
  // of blocks dropped (`handoffs` in StatsText).
  virtual uint64_t HandOff(const ObjectRef& obj, uint64_t offset, uint64_t length) = 0;

  // The open file of a host tier that holds exactly the bytes of `obj` (FileExtent::exact: an
  // object of 1..block_size bytes whose block L2 holds, stored without a chunk trailer), for a
  // kernel that reads the file itself (FUSE passthrough, fuse/): its size on disk is checked
  // too, since the kernel reads to the end of the file. Only verified bytes: a block
  // not yet verified in this run is read whole and checked first (a failure drops it). Counts as
  // a hit of the tier, never promotes the block into L1. NotFound when no such file is there: a
  // larger object, a faster tier (L1) holds the block (memory is the faster source), a miss, a
  // block stored with a trailer (before this existed), or file_slices off.
  virtual Result<FileExtentRef> OpenWholeFile(const ObjectRef& obj) = 0;

  // Starts background fetches of blocks [first, first + count) of `obj` into the host tiers, at
  // prefetch priority: from the origin (runs of adjacent blocks share one request), or from L2
  // into L1 ahead of the reader. Returns at once; blocks already in the fastest tier or in flight
  // are skipped; a full queue drops the rest (counted in readahead.dropped). Returns the number
  // of blocks dropped.
  virtual uint64_t Prefetch(const ObjectRef& obj, uint64_t first_block, uint64_t count,
                            BlockFill fill = BlockFill::kWhole) = 0;

  // Whether the readahead guesses are being read (the Prefetcher's next-files guesses: a quarter
  // or more of the opens find their file already held). While readers wait for fetches of their
  // own, the pool keeps only 16 readahead fetches in flight, so that a reader's request does not
  // queue at the origin behind guesses that may never be read; once they are proven read,
  // readahead takes every prefetch thread, readers' waits or not. False at the start.
  virtual void SetGuessesProven(bool proven) = 0;

  // Which tier holds each block: counts per tier name, every tier in order (fast→slow, zero
  // counts included), e.g. {"l1":3,"l2":25}. For L3 the count is of blocks this process
  // uploaded or read there, not a remote lookup. Read from the tiers' indexes by object
  // (Tier::HeldOf): costs what they hold of `obj`, never its size.
  virtual std::vector<std::pair<std::string, uint64_t>> Residency(const ObjectRef& obj) = 0;

  // Deep prefetch (tiercache/prefetch_jobs.h): makes tier `target` (an index into tiers())
  // hold block `index` of `obj`, copying it from a host tier above `target` that holds it (L1
  // over an L2 target), else reading it from the tiers below `target` or the origin and
  // inserting it into `target` and the tiers between (not into the tiers above it: an L2
  // prefetch does not fill L1, an L3 prefetch leaves no copy on this host). OK at once when the
  // target already holds it. Runs on the caller's thread; demand reads never wait for it (no
  // shared queue; a concurrent demand read of the same block may fetch it too). REQUIRES:
  // index < blocks of obj, target < tiers().size(). Errors: the origin's; NoSpace when the
  // target declined the block.
  virtual Status Hydrate(const ObjectRef& obj, uint64_t index, size_t target,
                         const Placement& hint) = 0;
  // True when tier `target` holds every block of [first, first + count) of `obj` now, so a
  // HydrateRun of them fetches and copies nothing (a hint: a block may be evicted meanwhile).
  // False for an object with a TTL placement (whether a block expired is HydrateRun's to find)
  // and for a bad range or tier. Deep prefetch finishes such runs on its runner thread instead
  // of handing each to a worker.
  virtual bool TierHolds(const ObjectRef& obj, uint64_t first, uint64_t count, size_t target) = 0;
  // Hydrate of blocks [first, first + count): the blocks the target and the tiers below it lack
  // are fetched from the origin as runs of adjacent blocks, one ranged GET per run (a large file
  // at the origin's ranged-GET speed); with a remote tier below the target (L3 under L2) they are
  // first read from it with one Tier::ReadMany (its GETs at once), and only the blocks it lacks go
  // to the origin. No block is fetched twice: one a host tier above the target holds is copied
  // from there, one a demand read or readahead is fetching is waited for, and the origin fetches
  // are single-flight leaders, so a demand read of those blocks waits for them instead of
  // sending its own GET. `*bytes_done` (may be null) grows by the bytes of every block the target
  // holds at the end, also on error. REQUIRES: count >= 1, first + count <= blocks of obj.
  virtual Status HydrateRun(const ObjectRef& obj, uint64_t first, uint64_t count, size_t target,
                            uint64_t* bytes_done) = 0;

  // Pins (or unpins) the blocks of `obj` the host tiers hold now (user.tierfs.pin; blocks
  // inserted later get their pin from TieredCacheOptions::placement). Like Evict, costs what the
  // host tiers hold of `obj` (Tier::HeldOf), and stops early once the thread's CancelToken
  // (CancelToken::Current()) is cancelled.
  virtual void SetPinned(const ObjectRef& obj, bool pinned) = 0;

  // Drops every block (and sparse entry) of `obj` from the host tiers.
  virtual void Evict(const ObjectRef& obj) = 0;

  // The largest host tier (L2 local flash; L1 when there is no L2): what the cache occupies on
  // this host. A shared tier (L3) is never it.
  virtual HostSpaceInfo HostSpace() const = 0;
  // The budget of the host tier that holds the most (L1's when it is larger than L2's): what the
  // host tiers can keep of one file (Prefetcher: the room for hydrations).
  virtual uint64_t HostCapacityBytes() const = 0;
  // Name of a tier index as BlockSlice::tier and ServingTier give it: "l1", "l2", "l3", or
  // "origin" for kOriginTier; empty for an index the cache does not have.
  virtual std::string_view TierName(int tier) const = 0;

  virtual uint64_t block_size() const = 0;
  // Blocks one readahead run fetches together (>= 1): callers ask for readahead in steps of
  // about this many blocks, so that the runs are full.
  virtual uint64_t readahead_run_blocks() const = 0;
  // The most bytes readahead should fetch ahead of one reader now: what the first host tier (L1)
  // keeps until the reader gets there, a quarter of its capacity (readahead blocks of a scan are
  // not kept in L2 beyond its free room, so a window larger than L1 fetches blocks that are
  // evicted before they are read, and read again; L1 also holds the blocks just read, which its
  // LRU keeps before the unread ones: with half of an 8 MiB L1 a scan still fetched 8% twice),
  // and no more than the readahead budget.
  virtual uint64_t readahead_window_bytes() const = 0;
  // Objects this size or smaller are fetched whole by their first demand miss
  // (TieredCacheOptions::small_object_bytes, capped at one readahead run); 0: none.
  virtual uint64_t small_object_bytes() const = 0;
  // True when a read of [offset, offset + length) of `obj` would fetch only what it reads if its
  // blocks miss (TieredCacheOptions::sparse_read_max): a projected read, not a dense one.
  virtual bool ReadsSparse(const ObjectRef& obj, uint64_t offset, uint64_t length,
                           ReadHint hint = ReadHint::kWhole) const = 0;
  virtual const std::vector<std::unique_ptr<Tier>>& tiers() const = 0;
  virtual const CacheStats& Stats() const = 0;
  // "l1.hits=.. l1.misses=.. l1.bytes=.. l2.hits=.. ... origin.requests=.. origin.bytes=.."
  virtual std::string StatsText() const = 0;
};

}  // namespace tierfs
