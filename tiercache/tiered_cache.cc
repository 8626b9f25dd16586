// TieredCache (tiered_cache.h): L1 → L2 → ... → origin with single-flight, copy-up and a
// bounded prefetch pool.
//
// Read of one block:
//   1. tiers[0] (L1) fast path: a hit returns without any shared lock beyond the L1 shard.
//   2. Otherwise SingleFlight on the block key. The leader re-checks L1 (the previous leader
//      may just have filled it), then the lower tiers in order, then the origin; readers that
//      arrive meanwhile wait for the leader's result (counted in singleflight.merged).
//   3. A hit in tier i is copied into tiers [0, i); an origin fetch into every tier. Insert
//      failures (full, ENOSPC, EIO) are counted and logged, never returned: the reader already
//      has correct bytes.
// A block served by a tier must have the length the object's size implies; otherwise the tier's
// copy is erased and the block is read from below. The origin is read with If-Match = the ETag
// of the ObjectRef, through BlobStore::ReadPinned, which checks each answer against the pinned
// version (ETag, size, range, length); fewer bytes than the size implies, or an answer of another
// version, means the object changed (FailedPrecondition) and nothing is cached or served. A store
// claiming more bytes than its buffer is an error (Internal), never copied.
//
// Prefetch: Prefetch() enqueues (object, first block, count) tasks of at most run_blocks_
// adjacent blocks on a bounded queue (in blocks) served by `prefetch_threads` owned jthreads; a
// full queue drops tasks (prefetch is advisory). Demand reads never pass through that queue; a
// prefetch in flight for a block a demand read needs is simply joined through the single-flight.
// A worker brings each block of its task to L1: a block in L2 is read from there (readahead from
// flash ahead of the reader); blocks no host tier holds are claimed in the single-flight
// (TryClaim) and fetched as one run: with an L3 tier, first from L3 with one Tier::ReadMany (the
// run's GETs at once), then the blocks L3 lacks from the origin, one request for each stretch of
// adjacent blocks (up to readahead_run_bytes), written straight into the blocks' storage (from the
// block arena, tiercache/internal/block_arena.h: adjacent storage when it has it, else one piece
// per block through BlobStore::ReadPinnedScatter; never a copy of the run).
//
// Fetch pool (demand reads with a CancelToken): the single-flight leader reads L1 and the other
// host tiers on its own thread; on a miss it queues a FetchJob (its Lease) for the
// `fetch_threads` owned jthreads, which read L3/the origin and complete the lease. Every reader
// waits for the call with its token and wait_timeout (SingleFlight::Wait), so an interrupt or a
// stalled origin never holds a reader longer than that. A job whose readers all left before it
// started is dropped (AbandonIfUnwaited); one already fetching finishes and fills the cache.
//
// Projected reads (sparse_read_max): a small read of a large object whose block no tier above the
// origin holds and no one fetches whole is served from sparse entries (MakeChunkKey: the fetched
// prefix of one 32 KiB chunk, in L1/L2) and fetches what they lack with one origin request from
// the first missing chunk's start to the read's end rounded up to a page (SparseRead). Its own
// single-flight key names the stretch; with a token the fetch runs on the fetch pool like a
// block's (FetchJob::sparse_end). A read that would make three quarters of the block's chunks
// present takes the whole-block path instead.
//
// Remembered failures: a demand read whose block failed with a retryable error (the origin's,
// after the stores' retries; or its wait's deadline) records it for origin_failure_ttl, and
// demand reads of that block meanwhile get the same error at once (after L1/L2, which a readahead
// may have filled since). Why: the kernel answers a failed readahead FUSE READ by reading the page
// its reader waits on again, synchronously, right away; without the record that READ started a
// second fetch of the block, and a stalled origin held a reader for two or three fetch budgets
// (docs/failure-and-security.md). Readahead failures no reader saw are not recorded.
#include "tiercache/tiered_cache.h"

#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <stop_token>
#include <thread>

#include "base/logging.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "tiercache/internal/block_key_hash.h"
#include "tiercache/internal/cache_stats.h"
#include "tiercache/internal/failure_memory.h"
#include "tiercache/internal/job_pool.h"
#include "tiercache/internal/origin_reader.h"
#include "tiercache/internal/promotion_window.h"
#include "tiercache/internal/readahead_budget.h"
#include "tiercache/single_flight.h"

namespace tierfs {
namespace {

using tiercache_internal::BlockKeyHash;

struct PrefetchTask {
  std::shared_ptr<const ObjectRef> obj;
  uint64_t first = 0;
  uint64_t count = 0;
  uint64_t seq = 0;  // queue order: runs waiting for room in flight go in this order
};

// A block and the tier it was read from (kOriginTier: fetched from the origin).
struct Served {
  BlockRef block;
  int tier = kOriginTier;
};

using Flights = SingleFlight<BlockKey, Result<Served>, BlockKeyHash>;

// The remote part of one demand read's block, for the fetch pool.
struct FetchJob {
  std::shared_ptr<const ObjectRef> obj;
  uint64_t index = 0;     // the demand read's block
  uint64_t expected = 0;  // its length
  // The claimed blocks [run_first, run_first + leases.size()) in order, `index` among them:
  // one, or a small object's blocks fetched whole (ClaimRestOfSmallObject).
  uint64_t run_first = 0;
  std::vector<Flights::Lease> leases;
  // A projected read (TieredCacheOptions::sparse_read_max): only bytes [sparse_begin,
  // sparse_end) of block `index`; leases[0] is the stretch's flight. sparse_end == 0: blocks.
  uint64_t sparse_begin = 0;
  uint64_t sparse_end = 0;

  FetchJob(std::shared_ptr<const ObjectRef> o, uint64_t i, uint64_t len, Flights::Lease lease)
      : obj(std::move(o)), index(i), expected(len), run_first(i) {
    leases.push_back(std::move(lease));
  }
  Flights::Lease& demand() { return leases[index - run_first]; }
};

// Projected reads fetch whole pages (the kernel's unit).
constexpr uint64_t kPage = 4096;

CancelToken::TimePoint DeadlineAfter(std::chrono::nanoseconds d) {
  const auto now = CancelToken::SteadyClock::now();
  if (d >= CancelToken::TimePoint::max() - now) return CancelToken::TimePoint::max();
  return now + std::chrono::duration_cast<CancelToken::SteadyClock::duration>(d);
}

// Readahead bytes being fetched stay within this many runs (ReadaheadBudget).
constexpr uint64_t kRunsInFlight = 16;

// Blocks in one readahead run: readahead_run_bytes, shrunk so that the runs that may be fetched
// at once (one per prefetch thread, at most kRunsInFlight) fit in the readahead budget; at least
// one block. More threads than that carry small objects, not smaller runs: 64 threads kept the
// 8 MiB runs of 32.
uint64_t RunBlocks(const TieredCacheOptions& o) {
  const uint64_t bs = std::max<uint64_t>(1, o.block_size);
  const uint64_t runs =
      std::min<uint64_t>(kRunsInFlight, static_cast<uint64_t>(std::max(1, o.prefetch_threads)));
  const uint64_t bytes = std::min(o.readahead_run_bytes, o.readahead_budget_bytes / runs);
  return std::max<uint64_t>(1, bytes / bs);
}

// Which tier is which, decided once when the cache is opened: the roles below use tier indexes
// and never ask a tier what it is.
struct TierLayout {
  size_t host_tiers = 0;  // tiers [0, host_tiers) are host tiers (L1, L2); the rest shared (L3)
  bool has_l1 = false;    // tiers[0] is the memory tier L1 (not L2 alone)

  // Admission (tiercache/admission.h) guards the host tiers below L1 (L2), and only when there
  // is an L1: without one, a block kept out of L2 would be kept nowhere, not even by the
  // readahead that fetched it for the reader.
  bool Admitted(size_t t) const { return has_l1 && t > 0 && t < host_tiers; }
};

// The layout of `tiers` (fast→slow); InvalidArgument unless every host tier comes before every
// shared one.
Result<TierLayout> LayoutOf(const std::vector<std::unique_ptr<Tier>>& tiers) {
  TierLayout layout;
  while (layout.host_tiers < tiers.size() && tiers[layout.host_tiers]->kind() == TierKind::kHost) {
    ++layout.host_tiers;
  }
  for (size_t t = layout.host_tiers; t < tiers.size(); ++t) {
    if (tiers[t]->kind() == TierKind::kHost) {
      return Status::InvalidArgument("tiered cache: host tier '" + std::string(tiers[t]->name()) +
                                     "' below a shared tier");
    }
  }
  layout.has_l1 = !tiers.empty() && tiers[0]->name() == "l1";
  return layout;
}

// The capacity of the tier admission guards (its scan threshold); 0 if there is none.
uint64_t AdmittedTierCapacity(const TierLayout& layout,
                              const std::vector<std::unique_ptr<Tier>>& tiers) {
  for (size_t t = 0; t < tiers.size(); ++t) {
    if (layout.Admitted(t)) return tiers[t]->Stats().capacity.load();
  }
  return 0;
}

// Thread-safe; no external synchronization needed.
// Counts a demand fetch (or a reader's readahead) on the network while it lives: deep prefetch
// yields to these (CacheStats::demand_remote_*).
class DemandInFlight {
 public:
  DemandInFlight(CacheStats* s, Clock* clock) : s_(s) {
    ++s_->demand_remote_in_flight;
    s_->demand_remote_last_ns = clock->MonotonicNanos();
  }
  ~DemandInFlight() { --s_->demand_remote_in_flight; }
  DemandInFlight(const DemandInFlight&) = delete;
  DemandInFlight& operator=(const DemandInFlight&) = delete;

 private:
  CacheStats* const s_;
};

class TieredCacheImpl final : public TieredCache {
 public:
  TieredCacheImpl(const TieredCacheOptions& options, const TierLayout& layout,
                  std::vector<std::unique_ptr<Tier>> tiers, BlobStore* origin, Clock* clock)
      : options_(options),
        tiers_(std::move(tiers)),
        clock_(clock),
        source_(origin->Describe()),
        queue_limit_(std::max<uint64_t>(
            1, options.readahead_budget_bytes / std::max<uint64_t>(1, options.block_size))),
        run_blocks_(RunBlocks(options)),
        budget_(std::min(options.readahead_budget_bytes,
                         kRunsInFlight * run_blocks_ * std::max<uint64_t>(1, options.block_size)),
                options.memory_budget),
        small_object_bytes_(
            std::min(options.small_object_bytes,
                     RunBlocks(options) * std::max<uint64_t>(1, options.block_size))),
        layout_(layout),
        host_tiers_(layout.host_tiers),
        admission_(options.admission, AdmittedTierCapacity(layout, tiers_), options.block_size),
        stats_src_(&tiers_, host_tiers_, origin, &admission_, &read_latency_,
                   [this] { return QueueDepthsNow(); }),
        stats_(stats_src_.stats()),
        counters_(stats_src_.counters()),
        origin_reader_(origin, options.block_size, &stats_),
        promotion_(options.promote_hits, &counters_.promotions),
        failures_(options.origin_failure_ttl, clock),
        queue_cv_(&queue_mu_),
        fetch_pool_("tierfs-fetch", options.fetch_queue_limit) {
    if (options_.metrics != nullptr) {
      for (size_t i = 0; i <= tiers_.size(); ++i) {
        read_latency_.push_back(std::make_unique<metrics::Histogram>());
      }
    }
  }

  ~TieredCacheImpl() override {
    metrics_reg_.Reset();  // no scrape reads this cache any more
    for (auto& t : workers_) t.request_stop();
    {
      MutexLock l(&queue_mu_);
      queue_.clear();
      queued_blocks_ = 0;
    }
    queue_cv_.SignalAll();
    fetch_pool_.RequestStop();  // queued jobs' leases publish "abandoned" to readers still waiting
    budget_.WakeAll();
    workers_.clear();  // joins; a worker finishes the fetch it is in, then exits
    fetch_pool_.Join();
  }

  void RegisterMetrics() {
    if (options_.metrics == nullptr) return;
    metrics_reg_ = options_.metrics->Add([this](metrics::Exposition* e) { Collect(e); });
  }

  void StartWorkers() {
    for (int i = 0; i < options_.prefetch_threads; ++i) {
      workers_.emplace_back([this, i](std::stop_token st) { WorkerLoop(st, i); });
    }
    fetch_pool_.Start(options_.fetch_threads, [this](FetchJob& job) { RunFetchJob(job); });
  }

  bool HostHolds(const ObjectRef& obj, uint64_t offset, uint64_t length) override {
    const uint64_t size = obj.info.size;
    if (length == 0 || offset >= size) return true;
    const uint64_t end = offset + std::min(length, size - offset);
    for (uint64_t i = offset / options_.block_size; i * options_.block_size < end; ++i) {
      if (!CachedAnywhere(KeyFor(obj, i))) return false;
    }
    return true;
  }

  Result<FileExtentRef> OpenWholeFile(const ObjectRef& obj) override {
    const uint64_t size = obj.info.size;
    if (!options_.file_slices || size == 0 || size > options_.block_size) {
      return Status::NotFound("not a one-block object served from files");
    }
    int tier = kOriginTier;
    FileExtentRef ext = TryExtent(obj, 0, 0, size, size, &tier, /*promote=*/nullptr);
    // The kernel reads the file to its end: exact (no trailer), and no longer than the block on
    // disk either.
    struct stat st {};
    if (ext == nullptr || !ext->exact() || ::fstat(ext->fd(), &st) != 0 ||
        static_cast<uint64_t>(st.st_size) != size) {
      return Status::NotFound("no file holds exactly the object");
    }
    return ext;
  }

  uint64_t HandOff(const ObjectRef& obj, uint64_t offset, uint64_t length) override {
    const uint64_t size = obj.info.size;
    if (tiers_.size() < 2 || host_tiers_ == 0 || length == 0 || offset >= size) {
      return 0;
    }
    if (options_.placement && options_.placement(obj.key).pinned) return 0;
    const uint64_t end = offset + std::min(length, size - offset);
    const uint64_t bs = options_.block_size;
    uint64_t dropped = 0;
    // Only blocks the range covers whole: the kernel holds the rest of a partly covered one
    // only if it was stored another time.
    for (uint64_t i = (offset + bs - 1) / bs; i * bs < end; ++i) {
      if (i * bs + ExpectedLength(obj, i) > end) break;
      const BlockKey key = KeyFor(obj, i);
      if (!tiers_[0]->Contains(key) || !HostTierBelowHolds(0, key)) continue;
      tiers_[0]->Erase(key);
      ++dropped;
    }
    counters_.handoffs += dropped;
    return dropped;
  }

  Result<std::vector<BlockSlice>> Read(const ObjectRef& obj, uint64_t offset, uint64_t length,
                                       const CancelToken* token) override {
    const auto start = read_latency_.empty() ? std::chrono::steady_clock::time_point()
                                             : std::chrono::steady_clock::now();
    auto r = ReadSlices(obj, offset, length, token);
    if (r.ok() && !r->empty() && !read_latency_.empty()) {
      const int tier = ServingTier(*r);
      const size_t h = tier == kOriginTier ? tiers_.size() : static_cast<size_t>(tier);
      if (h < read_latency_.size()) {
        read_latency_[h]->ObserveDuration(std::chrono::steady_clock::now() - start);
      }
    }
    return r;
  }

  Result<std::vector<BlockSlice>> ReadSlices(const ObjectRef& obj, uint64_t offset, uint64_t length,
                                             const CancelToken* token) {
    ++stats_.read_calls;
    std::vector<BlockSlice> slices;
    const uint64_t size = obj.info.size;
    if (length == 0 || offset >= size) return slices;
    admission_.NoteRead(obj.key, size, offset, length);
    const uint64_t end = offset + std::min(length, size - offset);
    const uint64_t bs = options_.block_size;
    slices.reserve((end - 1) / bs - offset / bs + 1);
    uint64_t served = 0;
    for (uint64_t pos = offset; pos < end;) {
      const uint64_t index = pos / bs;
      const uint64_t block_len = ExpectedLength(obj, index);
      const uint64_t want = std::min<uint64_t>(end - pos, block_len - (pos - index * bs));
      bool promote = false;  // an L2 block due for L1: read whole (GetBlock copies it up)
      if (options_.file_slices) {
        int ext_tier = kOriginTier;
        if (FileExtentRef ext =
                TryExtent(obj, index, pos - index * bs, want, block_len, &ext_tier, &promote)) {
          slices.push_back(BlockSlice{nullptr, static_cast<size_t>(pos - index * bs),
                                      static_cast<size_t>(want), ext_tier, std::move(ext)});
          pos += want;
          served += want;
          continue;
        }
      }
      if (!promote &&
          2 * want < block_len) {  // under half of the block: maybe without reading all of it
        int part_tier = kOriginTier;
        BlockRef part = TryRange(obj, index, pos - index * bs, want, &part_tier);
        if (part && part->size() == want) {
          slices.push_back(
              BlockSlice{std::move(part), 0, static_cast<size_t>(want), part_tier, nullptr});
          pos += want;
          served += want;
          continue;
        }
      }
      if (!promote && SparseEligible(obj, want, block_len)) {
        TIERFS_ASSIGN_OR_RETURN(std::optional<BlockSlice> part,
                                SparseRead(obj, index, pos - index * bs, want, token));
        if (part) {
          slices.push_back(std::move(*part));
          pos += want;
          served += want;
          continue;
        }
      }
      TIERFS_ASSIGN_OR_RETURN(Served got, GetBlock(obj, index, token, /*demand=*/true));
      BlockRef block = std::move(got.block);
      const uint64_t in_block = pos - index * bs;
      if (block->size() != block_len) {  // GetBlock guarantees it; never slice past the end
        return Status::Internal("block " + std::to_string(index) + " of '" + obj.key + "' has " +
                                std::to_string(block->size()) + " bytes, expected " +
                                std::to_string(block_len));
      }
      const uint64_t n = std::min<uint64_t>(end - pos, block->size() - in_block);
      slices.push_back(BlockSlice{std::move(block), static_cast<size_t>(in_block),
                                  static_cast<size_t>(n), got.tier, nullptr});
      pos += n;
      served += n;
    }
    stats_.bytes_served += served;
    return slices;
  }

  uint64_t Prefetch(const ObjectRef& obj, uint64_t first_block, uint64_t count) override {
    if (workers_.empty() || count == 0) return 0;
    const uint64_t nblocks = NumBlocks(obj);
    if (first_block >= nblocks) return 0;
    count = std::min(count, nblocks - first_block);
    auto shared = std::make_shared<const ObjectRef>(obj);
    // Tasks of up to run_blocks_ adjacent blocks that the fastest tier lacks.
    std::vector<PrefetchTask> tasks;
    for (uint64_t i = first_block; i < first_block + count; ++i) {
      const BlockKey key = KeyFor(obj, i);
      if (flights_.InFlight(key) || InFastestTier(key)) continue;
      if (!tasks.empty() && tasks.back().first + tasks.back().count == i &&
          tasks.back().count < run_blocks_) {
        ++tasks.back().count;
      } else {
        tasks.push_back(PrefetchTask{shared, i, 1});
      }
    }
    uint64_t queued = 0, dropped = 0;
    {
      MutexLock l(&queue_mu_);
      for (PrefetchTask& t : tasks) {
        if (queued_blocks_ + t.count > queue_limit_) {
          counters_.prefetch_dropped += t.count;
          dropped += t.count;
          continue;
        }
        queued_blocks_ += t.count;
        t.seq = next_task_seq_++;
        queue_.push_back(std::move(t));
        ++queued;
      }
    }
    if (queued == 1) {
      queue_cv_.Signal();
    } else if (queued > 1) {
      queue_cv_.SignalAll();
    }
    return dropped;
  }

  void SetGuessesProven(bool proven) override { budget_.SetGuessesProven(proven); }

  std::vector<std::pair<std::string, uint64_t>> Residency(const ObjectRef& obj) override {
    std::vector<std::pair<std::string, uint64_t>> out;
    // From each tier's index by object (Tier::HeldOf): what a tier holds of the object, never
    // the object's size, decides the cost (a sparse file of 2^62 bytes answers at once).
    const ObjectId id = IdOf(obj);
    const uint64_t n = NumBlocks(obj);
    for (const auto& t : tiers_) {
      out.emplace_back(std::string(t->name()), std::min(n, t->HeldOf(id, nullptr)));
    }
    return out;
  }

  Status Hydrate(const ObjectRef& obj, uint64_t index, size_t target,
                 const Placement& hint) override {
    if (target >= tiers_.size()) return Status::InvalidArgument("hydrate: no such tier");
    if (index >= NumBlocks(obj)) return Status::InvalidArgument("hydrate: block past the end");
    const BlockKey key = KeyFor(obj, index);
    const uint64_t expected = ExpectedLength(obj, index);
    Tier* dst = tiers_[target].get();
    Placement h = InsertPlacement(obj);
    h.pinned = h.pinned || hint.pinned;
    if (h.ttl != std::chrono::nanoseconds::max()) ExpireIfOlder(key, h.ttl);
    if (dst->Contains(key)) {
      if (h.pinned) dst->SetPinned(key, true);
      return Status::OK();
    }
    BlockRef b;
    size_t from = tiers_.size();
    // A faster host tier's copy (L1 above an L2 target: read there, kept out of L2 by admission)
    // saves the network.
    if ((b = FromHostTierAbove(target, key, expected))) from = target + 1;
    for (size_t t = target + 1; t < tiers_.size() && !b; ++t) {
      if ((b = TryTier(t, key, expected))) {
        from = t;
        NoteSharedHit(t, obj, index, key);
      }
    }
    if (!b) {
      TIERFS_ASSIGN_OR_RETURN(b, origin_reader_.FetchBlock(obj, index, expected));
    }
    return InsertHydrated(obj, index, b, h, target, from);
  }

  // The copy of `key` a host tier above `target` holds, or null.
  BlockRef FromHostTierAbove(size_t target, const BlockKey& key, uint64_t expected) {
    for (size_t t = 0; t < target; ++t) {
      if (t >= host_tiers_ || !tiers_[t]->Contains(key)) continue;
      if (BlockRef b = TryTier(t, key, expected)) return b;
    }
    return nullptr;
  }

  // Deep prefetch's insert of `b` into tiers [target, upto): counts it as hydrated when the
  // target took it, and returns the target's answer (the others' errors are only counted). A
  // remote tier's write queue may be full: prefetch waits for room (bounded), it is not in a
  // reader's way.
  Status InsertHydrated(const ObjectRef& obj, uint64_t index, const BlockRef& b,
                        const Placement& placement, size_t target, size_t upto) {
    const BlockKey key = KeyFor(obj, index);
    Placement h = placement;
    h.owner = OwnerOf(obj, index);
    Status last = Status::OK();
    for (size_t t = target; t < upto; ++t) {
      Status st = tiers_[t]->Insert(key, b, h);
      for (int tries = 0; st.code() == Status::Code::kNoSpace && t >= host_tiers_ && tries < 500;
           ++tries) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        st = tiers_[t]->Insert(key, b, h);
      }
      if (!st.ok()) {
        ++counters_.insert_errors;
        if (t == target) last = st;
      }
    }
    if (last.ok()) {
      ++counters_.hydrated_blocks;
      counters_.hydrated_bytes += b->size();
    }
    return last;
  }

  bool TierHolds(const ObjectRef& obj, uint64_t first, uint64_t count, size_t target) override {
    if (target >= tiers_.size() || count == 0 || first + count > NumBlocks(obj)) return false;
    if (InsertPlacement(obj).ttl != std::chrono::nanoseconds::max()) return false;
    for (uint64_t i = first; i < first + count; ++i) {
      if (!tiers_[target]->Contains(KeyFor(obj, i))) return false;
    }
    return true;
  }

  Status HydrateRun(const ObjectRef& obj, uint64_t first, uint64_t count, size_t target,
                    uint64_t* bytes_done) override {
    if (target >= tiers_.size()) return Status::InvalidArgument("hydrate: no such tier");
    if (count == 0 || first + count > NumBlocks(obj)) {
      return Status::InvalidArgument("hydrate: blocks past the end");
    }
    auto done = [&](uint64_t index) {
      if (bytes_done != nullptr) *bytes_done += ExpectedLength(obj, index);
    };
    // The blocks to fetch: not in the target and not in a host tier below it (those are copied
    // by Hydrate without the network).
    std::vector<uint64_t> need;
    for (uint64_t i = first; i < first + count; ++i) {
      const BlockKey key = KeyFor(obj, i);
      if (HostTierBelowHolds(target, key) || tiers_[target]->Contains(key)) {
        TIERFS_RETURN_IF_ERROR(Hydrate(obj, i, target, Placement{}));
        done(i);
        continue;
      }
      need.push_back(i);
    }
    const Placement h = InsertPlacement(obj);
    // A remote tier below the target (L3 under L2) may hold them: one ReadMany (its GETs at once)
    // per tier, then the rest from the origin.
    for (size_t t = target + 1; t < tiers_.size() && !need.empty(); ++t) {
      if (t < host_tiers_) continue;
      std::vector<BlockKey> keys;
      for (uint64_t i : need) keys.push_back(KeyFor(obj, i));
      std::vector<Result<BlockRef>> rs = tiers_[t]->ReadMany(keys);
      std::vector<uint64_t> rest;
      for (size_t j = 0; j < need.size(); ++j) {
        BlockRef b = j < rs.size()
                         ? CheckedBlock(t, keys[j], std::move(rs[j]), ExpectedLength(obj, need[j]))
                         : nullptr;
        if (!b) {
          rest.push_back(need[j]);
          continue;
        }
        NoteSharedHit(t, obj, need[j], keys[j]);
        TIERFS_RETURN_IF_ERROR(InsertHydrated(obj, need[j], b, h, target, t));
        done(need[j]);
      }
      need = std::move(rest);
    }
    // Into [target, upto) (every tier from the target down for an origin block).
    auto store = [&](uint64_t index, const BlockRef& b, size_t upto) -> Status {
      TIERFS_RETURN_IF_ERROR(InsertHydrated(obj, index, b, h, target, upto));
      done(index);
      return Status::OK();
    };
    // The rest is never fetched twice. A block a faster host tier holds (L1 above an L2 target:
    // a reader got there first, and admission kept it out of L2) is copied down. A block a
    // reader's fetch (or readahead) is bringing in is waited for. The others are claimed, so a
    // reader arriving while they are fetched waits for this fetch instead of sending its own GET:
    // a loader reading what its PrefetchSampler hydrates a moment earlier costs the origin once.
    std::vector<uint64_t> claimed_index, busy;
    std::vector<Flights::Lease> leases;
    for (uint64_t i : need) {
      const BlockKey key = KeyFor(obj, i);
      if (BlockRef above = FromHostTierAbove(target, key, ExpectedLength(obj, i))) {
        TIERFS_RETURN_IF_ERROR(store(i, above, target + 1));
        continue;
      }
      std::optional<Flights::Lease> lease =
          flights_.TryClaim(key, Status::Unavailable("the hydration of the block was dropped"));
      if (!lease) {
        busy.push_back(i);
        continue;
      }
      claimed_index.push_back(i);
      leases.push_back(std::move(*lease));
    }
    Status failed = Status::OK();
    for (size_t k = 0; k < claimed_index.size();) {
      size_t n = 1;
      while (k + n < claimed_index.size() && claimed_index[k + n] == claimed_index[k] + n) ++n;
      // After a failure the rest is not fetched: their readers get that error.
      Result<std::vector<BlockRef>> blocks =
          failed.ok() ? origin_reader_.FetchRun(obj, claimed_index[k], n) : failed;
      if (!blocks.ok()) {
        failed = blocks.status();
        for (size_t j = k; j < k + n; ++j) leases[j].Complete(failed);
        k += n;
        continue;
      }
      for (size_t j = 0; j < n; ++j) {
        const BlockRef& b = (*blocks)[j];
        Status st = store(claimed_index[k + j], b, tiers_.size());
        // The waiting readers get the bytes either way (an L2 insert error is not theirs).
        leases[k + j].Complete(Served{b, kOriginTier});
        if (!st.ok() && failed.ok()) failed = st;
      }
      k += n;
    }
    TIERFS_RETURN_IF_ERROR(failed);
    for (uint64_t i : busy) {
      // Someone else fetches it now: wait for that fetch and copy the block to the target. If it
      // ended in between, lead a fetch of the block here (host tiers first, then the origin).
      const BlockKey key = KeyFor(obj, i);
      const uint64_t expected = ExpectedLength(obj, i);
      Flights::Joined j =
          flights_.Join(key, Status::Unavailable("the hydration of the block was dropped"));
      if (j.lease) {
        Served b = FetchFromHostTiers(obj, i, key, expected);
        if (b.block) {
          j.lease->Complete(std::move(b));
        } else {
          Result<BlockRef> f = origin_reader_.FetchBlock(obj, i, expected);
          j.lease->Complete(f.ok() ? Result<Served>(Served{*f, kOriginTier})
                                   : Result<Served>(f.status()));
        }
      }
      Result<Served> r = Flights::Wait(j.call, nullptr, DeadlineAfter(options_.wait_timeout));
      if (r.ok() && r->block && r->block->size() == expected) {
        const size_t upto = r->tier == kOriginTier
                                ? tiers_.size()
                                : std::max(target + 1, static_cast<size_t>(r->tier));
        TIERFS_RETURN_IF_ERROR(store(i, r->block, upto));
        continue;
      }
      TIERFS_RETURN_IF_ERROR(Hydrate(obj, i, target, Placement{}));
      done(i);
    }
    return Status::OK();
  }

  void SetPinned(const ObjectRef& obj, bool pinned) override {
    ForEachHostKey(obj, [&](Tier* t, const BlockKey& key) { t->SetPinned(key, pinned); });
  }

  void Evict(const ObjectRef& obj) override {
    // L3 is shared with other hosts: not evicted here.
    ForEachHostKey(obj, [](Tier* t, const BlockKey& key) { t->Erase(key); });
  }

  HostSpaceInfo HostSpace() const override {
    HostSpaceInfo h;
    for (const auto& t : HostTiers()) {
      const TierStats& ts = t->Stats();
      h.tier = std::string(t->name());
      h.capacity_bytes = ts.capacity.load();
      h.used_bytes = std::min(h.capacity_bytes, ts.bytes_used.load());
    }
    return h;
  }

  std::string_view TierName(int tier) const override {
    if (tier == kOriginTier) return "origin";
    if (tier < 0 || static_cast<size_t>(tier) >= tiers_.size()) return {};
    return tiers_[tier]->name();
  }

  uint64_t block_size() const override { return options_.block_size; }
  uint64_t readahead_run_blocks() const override { return run_blocks_; }
  uint64_t small_object_bytes() const override { return small_object_bytes_; }
  bool ReadsSparse(const ObjectRef& obj, uint64_t offset, uint64_t length) const override {
    return SparseEligible(obj, length, options_.block_size);
  }
  const std::vector<std::unique_ptr<Tier>>& tiers() const override { return tiers_; }
  const CacheStats& Stats() const override { return stats_; }

  // The metrics of docs/operations.md, "Metrics", read from the counters that StatsText
  // (user.tierfs.stats) prints, so both always agree.
  void Collect(metrics::Exposition* e) const { stats_src_.Collect(e); }

  std::string StatsText() const override { return stats_src_.Text(); }

  tiercache_internal::QueueDepths QueueDepthsNow() const {
    tiercache_internal::QueueDepths q;
    {
      MutexLock l(&queue_mu_);
      q.readahead_blocks = queued_blocks_;
    }
    q.fetch_jobs = fetch_pool_.queued();
    return q;
  }

 private:
  // The host tiers (L1, L2), fast→slow.
  std::span<const std::unique_ptr<Tier>> HostTiers() const { return {tiers_.data(), host_tiers_}; }

  uint64_t NumBlocks(const ObjectRef& obj) const {
    return (obj.info.size + options_.block_size - 1) / options_.block_size;
  }

  BlockKey KeyFor(const ObjectRef& obj, uint64_t index) const {
    return MakeBlockKey(source_, obj.key, obj.info, options_.block_size, index);
  }

  ObjectId IdOf(const ObjectRef& obj) const {
    return MakeObjectId(source_, obj.key, obj.info, options_.block_size);
  }

  // The owner the tiers index block `index` of `obj` by (`chunk`: one of its sparse entries).
  BlockOwner OwnerOf(const ObjectRef& obj, uint64_t index, bool chunk = false) const {
    return BlockOwner{IdOf(obj), index, chunk};
  }

  // Block `index` of `obj` was read from tier `t`: a shared tier (L3) learns its owner, so that it
  // counts the block for the object (Residency) although this process did not upload it.
  void NoteSharedHit(size_t t, const ObjectRef& obj, uint64_t index, const BlockKey& key) {
    if (t >= host_tiers_) tiers_[t]->NoteOwner(key, OwnerOf(obj, index));
  }

  // Bytes block `index` of `obj` holds: block_size, or less for the last block.
  uint64_t ExpectedLength(const ObjectRef& obj, uint64_t index) const {
    const uint64_t start = index * options_.block_size;
    return std::min<uint64_t>(options_.block_size, obj.info.size - start);
  }

  // In a host tier (L1/L2). A block in L3 still gets prefetched: prefetch brings blocks to the
  // host, and L3's Contains() is only a hint.
  bool CachedAnywhere(const BlockKey& key) {
    for (const auto& t : HostTiers()) {
      if (t->Contains(key)) return true;
    }
    return false;
  }

  // A host tier below tier `t` (L2 below L1) holds the block.
  bool HostTierBelowHolds(size_t t, const BlockKey& key) {
    for (size_t u = t + 1; u < host_tiers_; ++u) {
      if (tiers_[u]->Contains(key)) return true;
    }
    return false;
  }

  // In the first tier (L1; L2 when there is no L1): nothing left for readahead to do.
  // A small file (one block) that readahead fetched goes to L2 (its file, and the kernel's page
  // cache that its buffered write fills) and not to L1: its reader gets it whole from L2 at its
  // first open (store at open) or as a file slice, and L1 would give it up then anyway (HandOff).
  // In L1 every such guess held memory until it was read (fresh pages first: in a cold loader
  // epoch their first touch made the HTTP thread's copy 20% of the daemon's CPU, 6.5% without,
  // and the daemon's peak RSS fell from 935 to 282 MiB). Only with L2 hits served from files
  // (file_slices), an L1 above a host tier, the file's block whole, and the file not pinned (L1
  // keeps a pinned file's blocks, as HandOff does).
  bool SmallFileBelowL1(const ObjectRef& obj) const {
    return options_.file_slices && host_tiers_ > 1 && layout_.has_l1 && obj.info.size > 0 &&
           obj.info.size <= options_.block_size && !InsertPlacement(obj).pinned;
  }

  bool InFastestTier(const BlockKey& key) { return host_tiers_ > 0 && tiers_[0]->Contains(key); }

  // TTL policy: drops the block from the host tiers when a tier stored it longer ago than
  // `ttl`, so the read that follows refetches it from below (the origin, with If-Match).
  // Returns true if it dropped the block (its TTL had passed).
  bool ExpireIfOlder(const BlockKey& key, std::chrono::nanoseconds ttl) {
    const int64_t now = clock_->NowUnixNanos();
    bool expired = false;
    for (const auto& t : HostTiers()) {
      std::optional<int64_t> at = t->StoredAt(key);
      if (at && now - *at > ttl.count()) expired = true;
    }
    if (!expired) return false;
    ++counters_.ttl_expired;
    for (const auto& t : HostTiers()) t->Erase(key);
    return true;
  }

  // REQUIRES: index < NumBlocks(obj). With a token, the remote part goes to the fetch pool and
  // the wait observes the token (see the file comment). `demand`: a reader's (not readahead's)
  // read, which replays and records the block's recent failure (see the file comment).
  Result<Served> GetBlock(const ObjectRef& obj, uint64_t index, const CancelToken* token = nullptr,
                          bool demand = false) {
    const BlockKey key = KeyFor(obj, index);
    if (options_.placement) {
      const Placement p = options_.placement(obj.key);
      if (p.ttl != std::chrono::nanoseconds::max()) ExpireIfOlder(key, p.ttl);
    }
    const uint64_t expected = ExpectedLength(obj, index);
    if (!tiers_.empty()) {
      if (auto b = TryTier(0, key, expected)) return Served{std::move(b), 0};
    }
    if (demand) {
      if (std::optional<Status> failed = failures_.Recent(key)) {
        if (Served b = FetchFromHostTiers(obj, index, key, expected); b.block) return b;
        ++stats_.failures_replayed;
        return *failed;
      }
    }
    Result<Served> r = FetchOrJoin(obj, index, key, expected, token);
    if (demand && IsRetryable(r.status())) failures_.Remember(key, r.status());
    return r;
  }

  // GetBlock below L1: the single-flight for `key` (leader or follower), bounded by wait_timeout.
  Result<Served> FetchOrJoin(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                             uint64_t expected, const CancelToken* token) {
    return JoinFlight(
        key, token, "block", [&] { return FetchBelowL1(obj, index, key, expected); },
        [&](Flights::Lease lease) {
          if (Served b = FetchFromHostTiers(obj, index, key, expected); b.block) {
            lease.Complete(std::move(b));
            return;
          }
          FetchJob job(std::make_shared<const ObjectRef>(obj), index, expected, std::move(lease));
          ClaimRestOfSmallObject(&job);
          SubmitFetch(std::move(job));
        });
  }

  // The single-flight for `fkey`, leader or follower, bounded by wait_timeout. Without a token
  // (or fetch pool) the leader runs `fetch` on its own thread. With one, the leader hands its
  // lease to `lead` (which completes it from the host tiers, or queues a FetchJob for the fetch
  // pool), and every reader waits for the call with the token.
  template <typename Fetch, typename Lead>
  Result<Served> JoinFlight(const BlockKey& fkey, const CancelToken* token, std::string_view what,
                            Fetch&& fetch, Lead&& lead) {
    const auto deadline = DeadlineAfter(options_.wait_timeout);
    if (token == nullptr || fetch_pool_.threads() == 0) {
      bool merged = false;
      Result<Served> r = flights_.Do(fkey, std::forward<Fetch>(fetch), &merged, token, deadline);
      if (merged) ++stats_.singleflight_merged;
      return CountWaitEnd(std::move(r));
    }
    Flights::Joined j = flights_.Join(
        fkey, Status::Unavailable("the fetch of the " + std::string(what) + " was dropped"));
    if (j.lease) {
      lead(std::move(*j.lease));
    } else {
      ++stats_.singleflight_merged;
    }
    return CountWaitEnd(Flights::Wait(j.call, token, deadline));
  }

  Result<Served> CountWaitEnd(Result<Served> r) {
    if (r.status().code() == Status::Code::kCancelled) ++stats_.waits_cancelled;
    if (r.status().code() == Status::Code::kTimedOut) ++stats_.waits_timed_out;
    return r;
  }

  // A demand miss of a small object (small_object_bytes_) fetches it whole: `job`'s leader also
  // claims the adjacent blocks around job->index that no host tier holds and no one else
  // fetches, so that the object costs one origin request (or one L3 ReadMany) instead of a
  // demand GET plus a readahead GET.
  void ClaimRestOfSmallObject(FetchJob* job) {
    const ObjectRef& obj = *job->obj;
    const uint64_t n = NumBlocks(obj);
    if (n < 2 || obj.info.size > small_object_bytes_) return;
    const std::string_view why = "the fetch of the object was dropped";
    std::vector<Flights::Lease> before;  // job->index - 1, job->index - 2, ...
    for (uint64_t i = job->index; i-- > 0;) {
      std::optional<Flights::Lease> l = TryClaimUncached(obj, i, why);
      if (!l) break;
      before.push_back(std::move(*l));
    }
    std::vector<Flights::Lease> leases;
    while (!before.empty()) {
      leases.push_back(std::move(before.back()));
      before.pop_back();
    }
    job->run_first = job->index - leases.size();
    leases.push_back(std::move(job->leases[0]));
    for (uint64_t i = job->index + 1; i < n; ++i) {
      std::optional<Flights::Lease> l = TryClaimUncached(obj, i, why);
      if (!l) break;
      leases.push_back(std::move(*l));
    }
    job->leases = std::move(leases);
    if (job->leases.size() > 1) ++counters_.whole_fetches;
  }

  // Claims block `i` of `obj` for a fetch when no host tier holds it and no one else fetches it
  // (nullopt otherwise). A leader that finished between the check and the claim is caught: its
  // block, from the host tiers, goes to whoever waits on the claim, and nothing is claimed.
  std::optional<Flights::Lease> TryClaimUncached(const ObjectRef& obj, uint64_t i,
                                                 std::string_view why) {
    const BlockKey key = KeyFor(obj, i);
    if (CachedAnywhere(key)) return std::nullopt;
    std::optional<Flights::Lease> lease = flights_.TryClaim(key, Status::Unavailable(why));
    if (lease && CachedAnywhere(key)) {
      if (Served b = FetchFromHostTiers(obj, i, key, ExpectedLength(obj, i)); b.block) {
        lease->Complete(std::move(b));
        return std::nullopt;
      }
    }
    return lease;
  }

  // Queues `job` for the fetch pool; a full queue completes it with Unavailable at once.
  void SubmitFetch(FetchJob job) {
    budget_.DemandJobQueued();  // before a fetch thread can take it (and end it)
    if (fetch_pool_.TrySubmit(std::move(job))) return;
    { const tiercache_internal::ReadaheadBudget::DemandJobDone undo(&budget_); }
    Logger(Module::kTierCache)
        .warn("{} origin fetches queued: failing the read of '{}' block {}",
              options_.fetch_queue_limit, job.obj->key, job.index);
    for (Flights::Lease& l : job.leases) {
      l.Complete(Status::Unavailable("too many fetches queued (the origin is not keeping up)"));
    }
  }

  // One job of the fetch pool, on one of its threads.
  void RunFetchJob(FetchJob& job) {
    const tiercache_internal::ReadaheadBudget::DemandJobDone done(&budget_);
    if (job.sparse_end > 0) {
      if (flights_.AbandonIfUnwaited(job.leases[0],
                                     Status::Cancelled("every reader of the range gave up"))) {
        ++stats_.fetch_abandoned;
        return;
      }
      job.leases[0].Complete(FetchSparse(*job.obj, job.index, job.sparse_begin, job.sparse_end));
      return;
    }
    if (job.leases.size() > 1) {
      // A small object fetched whole (other readers may wait for its other blocks: it is
      // fetched even when this block's reader gave up).
      FetchClaimedRun(*job.obj, job.run_first, job.leases, /*readahead=*/false);
      return;
    }
    if (flights_.AbandonIfUnwaited(job.demand(),
                                   Status::Cancelled("every reader of the block gave up"))) {
      ++stats_.fetch_abandoned;
      return;
    }
    const BlockKey key = job.demand().key();
    job.demand().Complete(FetchFromRemote(*job.obj, job.index, key, job.expected));
  }

  // Projected reads (TieredCacheOptions::sparse_read_max). A sparse entry is the prefix of one
  // 32 KiB chunk of a block that a projected read fetched, stored in the host tiers under
  // MakeChunkKey(block, chunk, its length): a whole chunk, or up to the 4 KiB page where the read
  // ended (or the block's end).
  //
  // Whether reads of `obj` can be projected at all: on, blocks of at least four chunks (else a
  // chunk is most of a block), and not a small object (fetched whole).
  bool SparseObject(const ObjectRef& obj) const {
    return options_.sparse_read_max > 0 && options_.block_size >= 4 * kSparseChunkBytes &&
           obj.info.size > small_object_bytes_;
  }
  bool SparseEligible(const ObjectRef& obj, uint64_t length, uint64_t block_len) const {
    return SparseObject(obj) && length <= options_.sparse_read_max && 2 * length < block_len;
  }

  // The lengths a sparse entry of chunk `c` of a block of `block_len` bytes can have that cover
  // its first `need` bytes (need 0: every length), longest first: whole pages, then the chunk's
  // end.
  static std::vector<uint64_t> ChunkEntryLengths(uint64_t block_len, uint64_t c, uint64_t need) {
    const uint64_t full = std::min(kSparseChunkBytes, block_len - c * kSparseChunkBytes);
    std::vector<uint64_t> out{full};
    for (uint64_t len = (full - 1) / kPage * kPage; len >= std::max<uint64_t>(need, 1) && len > 0;
         len -= kPage) {
      out.push_back(len);
    }
    return out;
  }

  // Where a sparse entry of chunk `c` of block `key` covering its first `need` bytes (0: any)
  // is: the fastest host tier holding one, and its length; nullopt when none does.
  std::optional<std::pair<size_t, uint64_t>> ChunkHolder(const BlockKey& key, uint64_t block_len,
                                                         uint64_t c, uint64_t need) {
    for (uint64_t len : ChunkEntryLengths(block_len, c, need)) {
      const BlockKey ck = MakeChunkKey(key, c, len);
      for (size_t t = 0; t < host_tiers_; ++t) {
        if (tiers_[t]->Contains(ck)) return std::make_pair(t, len);
      }
    }
    return std::nullopt;
  }

  // The sparse entry of chunk `c` of block `key` that covers its first `need` bytes, from the
  // fastest host tier holding one (copied up into the faster ones), or a null block.
  Served FindChunk(const ObjectRef& obj, uint64_t index, const BlockKey& key, uint64_t block_len,
                   uint64_t c, uint64_t need) {
    const auto held = ChunkHolder(key, block_len, c, need);
    if (!held) return Served{};
    const auto [t, len] = *held;
    const BlockKey ck = MakeChunkKey(key, c, len);
    if (options_.placement) {
      const Placement p = options_.placement(obj.key);
      if (p.ttl != std::chrono::nanoseconds::max() && ExpireIfOlder(ck, p.ttl)) return Served{};
    }
    BlockRef b = TryTier(t, ck, len);  // null: a bad copy (erased): fetched again
    if (!b) return Served{};
    if (t > 0) CopyUp(obj, ck, OwnerOf(obj, index, /*chunk=*/true), b, t);
    return Served{std::move(b), static_cast<int>(t)};
  }

  // Calls fn(tier, key) for every host tier and every key it holds of `obj` (Tier::HeldOf: its
  // blocks and their sparse entries), so the cost is what the host holds of the object, never
  // its size. Stops early when the request's token (CancelToken::Current(): the request was
  // interrupted, or the session is ending) is cancelled.
  template <typename Fn>
  void ForEachHostKey(const ObjectRef& obj, Fn fn) {
    const ObjectId id = IdOf(obj);
    const CancelToken* token = CancelToken::Current();
    for (const auto& t : HostTiers()) {
      std::vector<BlockKey> keys;
      t->HeldOf(id, &keys);
      for (size_t k = 0; k < keys.size(); ++k) {
        if (token != nullptr && token->cancelled()) return;
        fn(t.get(), keys[k]);
      }
    }
  }

  // Bytes [in_block, in_block + want) of block `index` by a projected read: from sparse entries,
  // fetching the part they lack with one origin request (from the first missing chunk's start to
  // the read's end rounded up to a page), which becomes sparse entries. nullopt: the read takes
  // the whole block instead (a tier above the origin holds it or it is being fetched whole, or
  // this read would make three quarters of its chunks present: dense completion).
  Result<std::optional<BlockSlice>> SparseRead(const ObjectRef& obj, uint64_t index,
                                               uint64_t in_block, uint64_t want,
                                               const CancelToken* token) {
    // (Spelled out: a bare nullopt would convert to an OK Status, not to an empty optional.)
    const std::optional<BlockSlice> kWholeBlock;
    const BlockKey key = KeyFor(obj, index);
    if (CachedAnywhere(key) || flights_.InFlight(key)) return kWholeBlock;
    for (size_t t = host_tiers_; t < tiers_.size(); ++t) {
      if (tiers_[t]->Contains(key)) return kWholeBlock;  // a shared tier (L3) holds it whole
    }
    const uint64_t cb = kSparseChunkBytes;
    const uint64_t block_len = ExpectedLength(obj, index);
    const uint64_t end = in_block + want;
    const uint64_t c0 = in_block / cb, c1 = (end - 1) / cb;
    std::vector<BlockRef> have;  // the entries of chunks c0, c0 + 1, ... before the first missing
    int tier = 0;
    uint64_t missing = c1 + 1;
    for (uint64_t c = c0; c <= c1; ++c) {
      Served e = FindChunk(obj, index, key, block_len, c, std::min(end, (c + 1) * cb) - c * cb);
      if (!e.block) {
        missing = c;
        break;
      }
      tier = std::max(tier, e.tier);
      have.push_back(std::move(e.block));
    }
    BlockRef fetched;
    uint64_t fetch_begin = 0;
    if (missing <= c1) {
      const uint64_t nchunks = (block_len + cb - 1) / cb;
      uint64_t present = c1 - missing + 1;
      for (uint64_t c = 0; c < nchunks; ++c) {
        if ((c < missing || c > c1) && ChunkHolder(key, block_len, c, 0)) ++present;
      }
      if (4 * present >= 3 * nchunks) {
        ++counters_.sparse_dense;
        return kWholeBlock;
      }
      if (std::optional<Status> failed = failures_.Recent(key)) {
        ++stats_.failures_replayed;
        return *failed;
      }
      fetch_begin = missing * cb;
      const uint64_t fetch_end = std::min(block_len, (end + kPage - 1) / kPage * kPage);
      Result<Served> r = FetchSparseOrJoin(obj, index, key, fetch_begin, fetch_end, token);
      if (!r.ok()) {
        if (IsRetryable(r.status())) failures_.Remember(key, r.status());
        return r.status();
      }
      fetched = std::move(r->block);
      tier = kOriginTier;
    } else {
      ++counters_.sparse_hits;
    }
    // One slice: a part of one buffer when one holds it all, else a copy of the pieces.
    if (have.empty()) {
      return BlockSlice{fetched, static_cast<size_t>(in_block - fetch_begin),
                        static_cast<size_t>(want), tier, nullptr};
    }
    if (have.size() == 1 && !fetched) {
      return BlockSlice{have[0], static_cast<size_t>(in_block - c0 * cb), static_cast<size_t>(want),
                        tier, nullptr};
    }
    auto out = Block::Allocate(want);
    std::byte* dst = out->mutable_data().data();
    uint64_t pos = in_block;
    for (size_t k = 0; k < have.size(); ++k) {
      const uint64_t c = c0 + k;
      const uint64_t n = std::min(end, (c + 1) * cb) - pos;
      std::memcpy(dst + (pos - in_block), have[k]->data().data() + (pos - c * cb), n);
      pos += n;
    }
    if (pos < end) {
      std::memcpy(dst + (pos - in_block), fetched->data().data() + (pos - fetch_begin), end - pos);
    }
    out->set_size(want);
    return BlockSlice{BlockRef(std::move(out)), 0, static_cast<size_t>(want), tier, nullptr};
  }

  // The single-flight of a projected read's stretch [begin, end) of block `index` (leader or
  // follower); with a token the leader's fetch runs on the fetch pool, like a block's.
  Result<Served> FetchSparseOrJoin(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                                   uint64_t begin, uint64_t end, const CancelToken* token) {
    // The flight's key names the stretch (a namespace of its own: flights are not tier keys).
    return JoinFlight(
        MakeChunkKey(key, begin / kSparseChunkBytes, end - begin), token, "range",
        [&] { return FetchSparse(obj, index, begin, end); },
        [&](Flights::Lease lease) {
          FetchJob job(std::make_shared<const ObjectRef>(obj), index, 0, std::move(lease));
          job.sparse_begin = begin;
          job.sparse_end = end;
          SubmitFetch(std::move(job));
        });
  }

  // Bytes [begin, end) of block `index` from the origin (one request, pinned to the version),
  // stored as the sparse entries of the chunks from begin (a chunk boundary) on in the host
  // tiers. The Served block holds exactly those bytes.
  Result<Served> FetchSparse(const ObjectRef& obj, uint64_t index, uint64_t begin, uint64_t end) {
    DemandInFlight demand(&stats_, clock_);
    const uint64_t len = end - begin;
    auto buf = Block::Allocate(len);
    ++counters_.sparse_fetches;
    TIERFS_RETURN_IF_ERROR(origin_reader_.ReadExact(
        obj, index * options_.block_size + begin, buf->mutable_data().first(len),
        "bytes " + std::to_string(begin) + "+" + std::to_string(len) + " of block " +
            std::to_string(index)));
    counters_.sparse_fetch_bytes += len;
    buf->set_size(len);
    BlockRef fetched(std::move(buf));
    const BlockKey key = KeyFor(obj, index);
    for (uint64_t c = begin / kSparseChunkBytes; c * kSparseChunkBytes < end; ++c) {
      const uint64_t from = c * kSparseChunkBytes;
      const uint64_t n = std::min(kSparseChunkBytes, end - from);
      auto e = Block::Allocate(n);
      std::memcpy(e->mutable_data().data(), fetched->data().data() + (from - begin), n);
      e->set_size(n);
      CopyUp(obj, MakeChunkKey(key, c, n), OwnerOf(obj, index, /*chunk=*/true),
             BlockRef(std::move(e)), host_tiers_);
    }
    return Served{std::move(fetched), kOriginTier};
  }

  // Block `index` as a verified file extent of the fastest host tier that holds it, for a read of
  // its bytes [in_block, in_block + length), when that tier keeps files (L2) and no faster tier
  // holds the block; null otherwise (a miss, L1 holds
  // it, a damaged block (dropped by the tier), or the block is due for promotion into L1: the
  // caller then reads it the usual way, which copies it up; `promote` null: never promoted).
  FileExtentRef TryExtent(const ObjectRef& obj, uint64_t index, uint64_t in_block, uint64_t length,
                          uint64_t expected, int* tier_out, bool* promote) {
    const BlockKey key = KeyFor(obj, index);
    for (size_t t = 0; t < tiers_.size(); ++t) {
      Tier* tier = tiers_[t].get();
      if (t >= host_tiers_) return nullptr;
      if (!tier->Contains(key)) continue;
      if (options_.placement) {
        const Placement p = options_.placement(obj.key);
        if (p.ttl != std::chrono::nanoseconds::max() && ExpireIfOlder(key, p.ttl)) {
          return nullptr;
        }
      }
      if (t > 0 && promote != nullptr &&
          promotion_.Use(key, in_block, length, stats_.bytes_served.load(std::memory_order_relaxed),
                         tiers_[0]->Stats().capacity.load())) {
        *promote = true;
        return nullptr;
      }
      Result<FileExtentRef> r = tier->OpenExtent(key);
      if (!r.ok()) return nullptr;  // L1 (no files), a miss, a dropped block
      if ((*r)->length() != expected) {
        Logger(Module::kTierCache)
            .warn("{} block {} has {} bytes, expected {}; dropping it", tier->name(),
                  BlockKeyHex(key), (*r)->length(), expected);
        tier->Erase(key);
        return nullptr;
      }
      *tier_out = static_cast<int>(t);
      return std::move(r).value();
    }
    return nullptr;
  }

  // True when a lower host tier (L2) holds `key`: with file slices on, readahead leaves such a
  // block where it is (HintLowerHostTiers) instead of copying it to L1.
  bool LowerHostTierHolds(const BlockKey& key) {
    for (size_t t = 1; t < host_tiers_; ++t) {
      if (tiers_[t]->Contains(key)) return true;
    }
    return false;
  }

  // Readahead of blocks [first, end) of `obj` that a lower host tier holds and the fastest does
  // not: the tier is asked to have them ready (Tier::WillNeed: page cache, verified), all of a
  // task's at once so that their files' disk reads overlap.
  void HintLowerHostTiers(const ObjectRef& obj, uint64_t first, uint64_t end) {
    for (size_t t = 1; t < host_tiers_; ++t) {
      std::vector<BlockKey> keys;
      for (uint64_t i = first; i < end; ++i) {
        const BlockKey key = KeyFor(obj, i);
        if (tiers_[t]->Contains(key) && !InFastestTier(key)) keys.push_back(key);
      }
      if (!keys.empty()) tiers_[t]->WillNeed(keys);
    }
  }

  // Bytes [in_block, in_block + length) of block `index`, read alone from the fastest host tier
  // that holds the block when that tier can read parts (L2), or null (then the whole block goes
  // the usual way: a random small read of a block only L2 holds costs one chunk, not a block, and
  // is not copied up).
  BlockRef TryRange(const ObjectRef& obj, uint64_t index, uint64_t in_block, uint64_t length,
                    int* tier_out) {
    const BlockKey key = KeyFor(obj, index);
    for (size_t t = 0; t < tiers_.size(); ++t) {
      Tier* tier = tiers_[t].get();
      if (t >= host_tiers_) return nullptr;
      if (!tier->Contains(key)) continue;
      if (!tier->SupportsRanges()) return nullptr;  // L1 holds it: take the block from there
      if (options_.placement) {
        const Placement p = options_.placement(obj.key);
        if (p.ttl != std::chrono::nanoseconds::max() && ExpireIfOlder(key, p.ttl)) {
          return nullptr;
        }
      }
      Result<BlockRef> r = tier->ReadRange(key, in_block, length);
      if (!r.ok()) return nullptr;  // a block without chunk checksums, a miss, a bad chunk
      *tier_out = static_cast<int>(t);
      return std::move(r).value();
    }
    return nullptr;
  }

  // A block from tier `t` with the expected length, or null on a miss (or a bad copy, which is
  // erased from that tier).
  BlockRef TryTier(size_t t, const BlockKey& key, uint64_t expected) {
    return CheckedBlock(t, key, tiers_[t]->Read(key), expected);
  }

  // The outcome of a read of `key` from tier `t`: the block if it has the expected length, else
  // null (a miss, an error, or a bad copy, which is erased from that tier).
  BlockRef CheckedBlock(size_t t, const BlockKey& key, Result<BlockRef> r, uint64_t expected) {
    if (!r.ok()) {
      if (!r.status().IsNotFound()) {
        SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "{} read failed: {}", tiers_[t]->name(),
                            r.status().ToString());
      }
      return nullptr;
    }
    if ((*r)->size() != expected) {
      Logger(Module::kTierCache)
          .warn("{} block {} has {} bytes, expected {}; dropping it", tiers_[t]->name(),
                BlockKeyHex(key), (*r)->size(), expected);
      tiers_[t]->Erase(key);
      return nullptr;
    }
    return std::move(r).value();
  }

  // The single-flight leader's work: L1 again, then the lower tiers, then the origin.
  Result<Served> FetchBelowL1(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                              uint64_t expected) {
    if (Served b = FetchFromHostTiers(obj, index, key, expected); b.block) return b;
    return FetchFromRemote(obj, index, key, expected);
  }

  // L1 again (the previous leader may just have filled it), then the other host tiers (copied
  // up on a hit); a null block when none holds it. Never waits on the network.
  Served FetchFromHostTiers(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                            uint64_t expected) {
    if (!tiers_.empty() && tiers_[0]->Contains(key)) {
      if (auto b = TryTier(0, key, expected)) return Served{std::move(b), 0};
    }
    for (size_t t = 1; t < host_tiers_; ++t) {
      if (auto b = TryTier(t, key, expected)) {
        CopyUp(obj, key, OwnerOf(obj, index), b, t);
        return Served{std::move(b), static_cast<int>(t)};
      }
    }
    return Served{};
  }

  // The remote tiers (L3) in order, then the origin; fills the tiers above the one that served.
  Result<Served> FetchFromRemote(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                                 uint64_t expected) {
    // Demand traffic on the network: deep prefetch watches these to yield (prefetch_jobs.cc).
    DemandInFlight demand(&stats_, clock_);
    for (size_t t = host_tiers_; t < tiers_.size(); ++t) {
      if (auto b = TryTier(t, key, expected)) {
        NoteSharedHit(t, obj, index, key);
        CopyUp(obj, key, OwnerOf(obj, index), b, t);
        return Served{std::move(b), static_cast<int>(t)};
      }
    }
    TIERFS_ASSIGN_OR_RETURN(BlockRef b, origin_reader_.FetchBlock(obj, index, expected));
    CopyUp(obj, key, OwnerOf(obj, index), b, tiers_.size());
    return Served{std::move(b), kOriginTier};
  }

  bool Admitted(size_t t) const { return layout_.Admitted(t); }

  // The placement of a block of `obj` inserted now: the object's policy (pin, TTL, quota), the
  // time, and whether the block is the whole object (L2 then stores it without a chunk trailer,
  // so that OpenWholeFile can hand its file to the kernel).
  Placement InsertPlacement(const ObjectRef& obj) const {
    Placement h = options_.placement ? options_.placement(obj.key) : Placement{};
    h.stored_ns = clock_->NowUnixNanos();
    h.whole_object = obj.info.size > 0 && obj.info.size <= options_.block_size;
    return h;
  }

  // Offers `block` to tiers [from, upto), with the object's placement (pin) policy; the flash tier
  // only when admission lets it in.
  void CopyUp(const ObjectRef& obj, const BlockKey& key, const BlockOwner& owner,
              const BlockRef& block, size_t upto, size_t from = 0) {
    Placement hint = InsertPlacement(obj);
    hint.owner = owner;
    for (size_t t = from; t < upto; ++t) {
      // Admission guards the host's flash tier (tiercache/admission.h).
      Placement h = hint;
      if (Admitted(t)) {
        const AdmitDecision d = admission_.Decide(key, obj.key, obj.info.size, hint);
        if (d == AdmitDecision::kNo) continue;
        h.probation = d == AdmitDecision::kProbation;
      }
      Status st = tiers_[t]->Insert(key, block, h);
      if (!st.ok()) {
        ++counters_.insert_errors;
        SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "{} insert declined: {}",
                            tiers_[t]->name(), st.ToString());
      }
    }
  }

  void WorkerLoop(std::stop_token st, int n) {
    const std::string name = "tierfs-pf-" + std::to_string(n);  // 15-byte kernel limit
    pthread_setname_np(pthread_self(), name.c_str());
    while (true) {
      PrefetchTask task;
      {
        MutexLock l(&queue_mu_);
        while (queue_.empty() && !st.stop_requested()) queue_cv_.Wait();
        if (st.stop_requested()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
        queued_blocks_ -= task.count;
      }
      RunTask(task, st);
    }
  }

  // Brings blocks [task.first, task.first + task.count) to the fastest tier; stops early when
  // the cache shuts down.
  void RunTask(const PrefetchTask& task, const std::stop_token& st) {
    const ObjectRef& obj = *task.obj;
    const uint64_t end = task.first + task.count;
    if (options_.file_slices) HintLowerHostTiers(obj, task.first, end);
    for (uint64_t i = task.first; i < end && !st.stop_requested();) {
      const BlockKey key = KeyFor(obj, i);
      if (InFastestTier(key) || flights_.InFlight(key) ||
          (options_.file_slices && LowerHostTierHolds(key))) {
        ++i;
        continue;
      }
      if (!CachedAnywhere(key)) {
        const uint64_t n = FetchRun(obj, i, end, task.seq, st);
        if (n > 0) {
          i += n;
          continue;
        }
        if (st.stop_requested()) break;
      }
      Result<Served> r = GetBlock(obj, i);
      if (r.ok()) {
        ++stats_.readahead_blocks;
        counters_.readahead_bytes += r->block->size();
      } else {
        SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "prefetch of '{}' block {} failed: {}",
                            obj.key, i, r.status().ToString());
      }
      ++i;
    }
  }

  // Claims blocks first, first+1, ... (before `end`, at most run_blocks_) while no host tier holds
  // them and no one else fetches them, and reads them as one run (FetchClaimedRun). Returns how
  // many blocks it handled (0: none could be claimed; the caller takes the one-block path).
  // The run's bytes are taken from the in-flight budget first (before claiming, so no reader
  // joins a fetch that waits for it), in the order of the task's `seq` among the runs waiting.
  uint64_t FetchRun(const ObjectRef& obj, uint64_t first, uint64_t end, uint64_t seq,
                    const std::stop_token& st) {
    const uint64_t bs = options_.block_size;
    const uint64_t most = std::min(end - first, run_blocks_);
    const uint64_t bytes = std::min(most * bs, obj.info.size - std::min(obj.info.size, first * bs));
    if (!budget_.Acquire(bytes, seq, st)) return 0;
    std::vector<Flights::Lease> leases;
    for (uint64_t j = first; j < end && leases.size() < run_blocks_; ++j) {
      std::optional<Flights::Lease> lease =
          TryClaimUncached(obj, j, "readahead of the block was abandoned");
      if (!lease) break;
      leases.push_back(std::move(*lease));
    }
    if (!leases.empty()) FetchClaimedRun(obj, first, leases, /*readahead=*/true);
    budget_.Release(bytes);
    return leases.size();
  }

  // Reads the claimed blocks [first, first + leases.size()): from the remote tiers (L3) with one
  // ReadMany each, then the rest from the origin, one request per stretch of adjacent blocks;
  // fills the tiers above the one that served each block and completes its lease. `readahead`:
  // counted as readahead blocks (else a small object's demand fetch, ClaimRestOfSmallObject).
  void FetchClaimedRun(const ObjectRef& obj, uint64_t first, std::vector<Flights::Lease>& leases,
                       bool readahead) {
    const uint64_t n = leases.size();
    // Readahead serves readers: it counts as demand traffic for deep prefetch, too.
    DemandInFlight demand(&stats_, clock_);
    std::vector<Served> got(n);  // a null block: not read yet
    for (size_t t = host_tiers_; t < tiers_.size(); ++t) {
      std::vector<BlockKey> keys;
      std::vector<uint64_t> which;
      for (uint64_t k = 0; k < n; ++k) {
        if (got[k].block) continue;
        keys.push_back(leases[k].key());
        which.push_back(k);
      }
      if (keys.empty()) break;
      std::vector<Result<BlockRef>> rs = tiers_[t]->ReadMany(keys);
      for (size_t j = 0; j < keys.size() && j < rs.size(); ++j) {
        const uint64_t k = which[j];
        BlockRef b = CheckedBlock(t, keys[j], std::move(rs[j]), ExpectedLength(obj, first + k));
        if (!b) continue;
        NoteSharedHit(t, obj, first + k, keys[j]);
        got[k] = Served{std::move(b), static_cast<int>(t)};
      }
    }
    // The blocks no remote tier had, a stretch of adjacent ones per origin request.
    for (uint64_t k = 0; k < n;) {
      if (got[k].block) {
        ++k;
        continue;
      }
      uint64_t m = 1;
      while (k + m < n && !got[k + m].block) ++m;
      Result<std::vector<BlockRef>> blocks = origin_reader_.FetchRun(obj, first + k, m);
      if (!blocks.ok()) {
        SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache),
                            "readahead of '{}' blocks {}+{} failed: {}", obj.key, first + k, m,
                            blocks.status().ToString());
        for (uint64_t j = k; j < k + m; ++j) leases[j].Complete(blocks.status());
      } else {
        if (m > 1) ++counters_.readahead_runs;
        for (uint64_t j = 0; j < m; ++j) got[k + j] = Served{(*blocks)[j], kOriginTier};
      }
      k += m;
    }
    // The tiers above the one that served: every tier for an origin block.
    auto upto = [&](const Served& s) {
      return s.tier == kOriginTier ? tiers_.size() : static_cast<size_t>(s.tier);
    };
    // L1 first, and publish each block as soon as it is there, so that a reader never misses
    // both the flight and L1; the slower tiers (an L2 file write each) after. A block L1 did not
    // take (too large for its shard, or no L1) goes to every tier before its lease completes:
    // otherwise a reader arriving in between would fetch it again (from L3: a second GET).
    // A small file fetched ahead goes to the tiers below L1 only, when L2 takes it
    // (SmallFileBelowL1).
    std::vector<bool> stored(n, false);
    for (uint64_t k = 0; k < n; ++k) {
      if (!got[k].block) continue;  // its lease is complete (the origin's error)
      if (readahead) {
        counters_.readahead_bytes += got[k].block->size();
        ++stats_.readahead_blocks;
      }
      const BlockKey& key = leases[k].key();
      if (readahead && upto(got[k]) > 1 && SmallFileBelowL1(obj)) {
        CopyUp(obj, key, OwnerOf(obj, first + k), got[k].block, upto(got[k]), 1);
        stored[k] = true;
        if (HostTierBelowHolds(0, key)) {
          ++counters_.readahead_below_l1;
          leases[k].Complete(got[k]);
          continue;
        }
      }
      CopyUp(obj, key, OwnerOf(obj, first + k), got[k].block, std::min<size_t>(1, upto(got[k])));
      if (!stored[k] && upto(got[k]) > 1 && (tiers_.empty() || !tiers_[0]->Contains(key))) {
        CopyUp(obj, key, OwnerOf(obj, first + k), got[k].block, upto(got[k]), 1);
        stored[k] = true;
      }
      leases[k].Complete(got[k]);
    }
    for (uint64_t k = 0; k < n; ++k) {
      if (got[k].block && !stored[k]) {
        CopyUp(obj, KeyFor(obj, first + k), OwnerOf(obj, first + k), got[k].block, upto(got[k]), 1);
      }
    }
  }

  // Constant after construction.
  const TieredCacheOptions options_;
  const std::vector<std::unique_ptr<Tier>> tiers_;
  Clock* const clock_;
  const std::string source_;
  const size_t queue_limit_;  // in blocks
  const uint64_t run_blocks_;
  // The readahead fetches' bytes in flight, and their count while readers wait for fetches of
  // their own.
  tiercache_internal::ReadaheadBudget budget_;
  const uint64_t small_object_bytes_;
  const TierLayout layout_;
  const size_t host_tiers_;  // tiers_[0, host_tiers_) are host tiers (L1, L2), the rest shared

  Admission admission_;
  // One per tier, then the origin's; empty without options_.metrics.
  std::vector<std::unique_ptr<metrics::Histogram>> read_latency_;
  // Every counter of the cache, and both renderings of them (StatsText, Collect).
  tiercache_internal::CacheStatsSource stats_src_;
  CacheStats& stats_;
  tiercache_internal::EngineCounters& counters_;
  // Reads blocks and ranges of the pinned version of an object from the origin.
  tiercache_internal::OriginReader origin_reader_;
  // Which L2 hits are reuses that earn a copy in L1 (file_slices).
  tiercache_internal::PromotionWindow promotion_;
  metrics::Registry::Registration metrics_reg_;
  Flights flights_;

  // Blocks whose demand read failed recently (FailureMemory::Recent).
  tiercache_internal::FailureMemory failures_;

  mutable Mutex queue_mu_;
  CondVar queue_cv_;
  std::deque<PrefetchTask> queue_ GUARDED_BY(queue_mu_);
  uint64_t queued_blocks_ GUARDED_BY(queue_mu_) = 0;
  uint64_t next_task_seq_ GUARDED_BY(queue_mu_) = 0;

  // Declared last: destroyed (joined) first, while everything they use is alive.
  std::vector<std::jthread> workers_;
  tiercache_internal::JobPool<FetchJob> fetch_pool_;
};

}  // namespace

int ServingTier(const std::vector<BlockSlice>& slices) {
  int slowest = kOriginTier;
  bool any = false;
  for (const BlockSlice& s : slices) {
    if (s.tier == kOriginTier) return kOriginTier;
    slowest = any ? std::max(slowest, s.tier) : s.tier;
    any = true;
  }
  return slowest;
}

Result<std::unique_ptr<TieredCache>> TieredCache::Open(const TieredCacheOptions& options,
                                                       std::vector<std::unique_ptr<Tier>> tiers,
                                                       BlobStore* origin, Clock* clock) {
  if (origin == nullptr) return Status::InvalidArgument("tiered cache: origin is required");
  if (clock == nullptr) clock = SystemClock();
  if (options.block_size == 0 || options.block_size > (1ULL << 31)) {
    return Status::InvalidArgument("tiered cache: block_size must be in (0, 2GiB]");
  }
  if (options.prefetch_threads < 0 || options.prefetch_threads > 256) {
    return Status::InvalidArgument("tiered cache: prefetch_threads must be in [0, 256]");
  }
  if (options.fetch_threads < 0 || options.fetch_threads > 1024) {
    return Status::InvalidArgument("tiered cache: fetch_threads must be in [0, 1024]");
  }
  if (options.wait_timeout <= std::chrono::nanoseconds::zero()) {
    return Status::InvalidArgument("tiered cache: wait_timeout must be positive");
  }
  for (const auto& t : tiers) {
    if (!t) return Status::InvalidArgument("tiered cache: null tier");
  }
  TIERFS_ASSIGN_OR_RETURN(const TierLayout layout, LayoutOf(tiers));
  auto cache = std::make_unique<TieredCacheImpl>(options, layout, std::move(tiers), origin, clock);
  cache->StartWorkers();
  cache->RegisterMetrics();
  return std::unique_ptr<TieredCache>(std::move(cache));
}

}  // namespace tierfs
