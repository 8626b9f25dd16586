// TieredCache (tiered_cache.h): the facade that wires the cache's roles and engines (cvmfs
// TieredCacheManager: an upper tier over a lower one; conventions C14, C15).
//
// Roles, fast→slow:
//   HostTiers (internal/host_tiers.h)      L1 and L2: lookups with copy-up, inserts under the L2
//                                          admission policy, promotion, TTL expiry.
//   SharedTiers (internal/shared_tiers.h)  the optional L3 tier(s) shared by the region.
//   the origin                             read through OriginReader, pinned to a version.
// Engines, each with a narrow interface:
//   OriginFetcher (internal/origin_fetcher.h)  fetches what the host tiers lack: single-flight,
//                                          the fetch pool, the readahead budget, failure memory.
//   Readahead (internal/readahead.h)       the bounded prefetch queue and its workers.
//   SparseReader (internal/sparse_reader.h)  projected reads from sparse entries.
//   Hydrator (internal/hydrator.h)         deep prefetch into one target tier.
//   CacheStatsSource (internal/cache_stats.h)  the one source of the counters.
// Calls run one way: facade → {sparse reader, readahead, hydrator} → fetcher → {host tiers,
// shared tiers, origin}. No engine calls back up into the facade or into a peer that calls it
// back; a fetched block goes to its reader as a return value (or through the single-flight lease
// it waits on) and into the tiers through the roles' Store.
//
// Read of one block (Read):
//   1. With file slices, a block only L2 holds is served from its file (HostTiers::TryExtent);
//      a read of under half a block that L2 holds reads just that range (TryRange).
//   2. A small read of a large object that no tier holds whole may be projected (SparseReader).
//   3. Otherwise OriginFetcher::Get: L1, then the single-flight on the block key; the leader
//      re-checks the host tiers (copying a hit up), then the shared tier, then the origin, and
//      fills the tiers above the one that served. Insert failures (full, ENOSPC, EIO) are
//      counted, never returned: the reader already has correct bytes.
// A block served by a tier must have the length the object's size implies; otherwise the tier's
// copy is erased and the block is read from below. The origin is read with If-Match = the ETag
// of the ObjectRef (BlobStore::ReadPinned): fewer bytes than the size implies, or an answer of
// another version, means the object changed (FailedPrecondition) and nothing is cached or
// served.
#include "tiercache/tiered_cache.h"

#include <sys/stat.h>

#include <algorithm>

#include "base/metrics.h"
#include "tiercache/internal/block_space.h"
#include "tiercache/internal/cache_stats.h"
#include "tiercache/internal/host_tiers.h"
#include "tiercache/internal/hydrator.h"
#include "tiercache/internal/origin_fetcher.h"
#include "tiercache/internal/readahead.h"
#include "tiercache/internal/shared_tiers.h"
#include "tiercache/internal/sparse_reader.h"

namespace tierfs {
namespace {

using tiercache_internal::Served;

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

class TieredCacheImpl final : public TieredCache {
 public:
  TieredCacheImpl(const TieredCacheOptions& options, CacheTiers tiers, BlobStore* origin,
                  Clock* clock)
      : options_(options),
        host_tiers_(tiers.host.size()),
        tiers_(Concat(std::move(tiers))),
        run_blocks_(RunBlocks(options)),
        small_object_bytes_(std::min(options.small_object_bytes, run_blocks_ * options.block_size)),
        space_(origin->Describe(), options.block_size, options.placement, clock),
        host_({tiers_.data(), host_tiers_}, options, &space_, &counters_, &stats_.bytes_served),
        shared_(tiers_, host_tiers_, &space_, &counters_),
        fetcher_(options, run_blocks_,
                 std::min(options.readahead_budget_bytes,
                          kRunsInFlight * run_blocks_ * options.block_size),
                 small_object_bytes_, &host_, &shared_, origin, &space_, &stats_, &counters_),
        readahead_(options.prefetch_threads, run_blocks_,
                   std::max<uint64_t>(1, options.readahead_budget_bytes / options.block_size),
                   options.file_slices, &fetcher_, &host_, &space_, &stats_, &counters_),
        sparse_(options.sparse_read_max, small_object_bytes_, &host_, &shared_, &fetcher_, &space_,
                &counters_),
        hydrator_(tiers_, &host_, &shared_, &fetcher_, &space_, &counters_),
        stats_src_(
            &tiers_, host_tiers_, origin, &host_.admission(), &read_latency_,
            [this] { return QueueDepthsNow(); }, &stats_, &counters_) {
    if (options_.metrics != nullptr) {
      for (size_t i = 0; i <= tiers_.size(); ++i) {
        read_latency_.push_back(std::make_unique<metrics::Histogram>());
      }
    }
  }

  ~TieredCacheImpl() override {
    metrics_reg_.Reset();  // no scrape reads this cache any more
    readahead_.RequestStop();
    fetcher_.RequestStop();
    readahead_.Join();  // a worker finishes the fetch it is in, then exits
    fetcher_.Join();
  }

  void RegisterMetrics() {
    if (options_.metrics != nullptr) {
      metrics_reg_ =
          options_.metrics->Add([this](metrics::Exposition* e) { stats_src_.Collect(e); });
    }
  }

  Result<std::vector<BlockSlice>> Read(const ObjectRef& obj, uint64_t offset, uint64_t length,
                                       const CancelToken* token, ReadHint hint) override {
    const auto start = read_latency_.empty() ? std::chrono::steady_clock::time_point()
                                             : std::chrono::steady_clock::now();
    auto r = ReadSlices(obj, offset, length, token, hint);
    if (r.ok() && !r->empty() && !read_latency_.empty()) {
      const int tier = ServingTier(*r);
      const size_t h = tier == kOriginTier ? tiers_.size() : static_cast<size_t>(tier);
      if (h < read_latency_.size()) {
        read_latency_[h]->ObserveDuration(std::chrono::steady_clock::now() - start);
      }
    }
    return r;
  }

  bool HostHolds(const ObjectRef& obj, uint64_t offset, uint64_t length) override {
    const uint64_t size = obj.info.size;
    if (length == 0 || offset >= size) return true;
    const uint64_t end = offset + std::min(length, size - offset);
    const uint64_t bs = options_.block_size;
    for (uint64_t i = offset / bs; i * bs < end; ++i) {
      if (host_.Holds(space_.KeyFor(obj, i))) continue;
      // A small range within one block may be held as sparse entries.
      const uint64_t from = std::max(offset, i * bs), to = std::min(end, (i + 1) * bs);
      if (!sparse_.HoldsEntries(obj, i, from - i * bs, to - from)) return false;
    }
    return true;
  }

  Result<FileExtentRef> OpenWholeFile(const ObjectRef& obj) override {
    const uint64_t size = obj.info.size;
    if (!options_.file_slices || size == 0 || size > options_.block_size) {
      return Status::NotFound("not a one-block object served from files");
    }
    int tier = kOriginTier;
    FileExtentRef ext = host_.TryExtent(obj, 0, 0, size, size, &tier, /*promote=*/nullptr);
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
    return host_.HandOff(obj, offset, length);
  }

  uint64_t Prefetch(const ObjectRef& obj, uint64_t first_block, uint64_t count,
                    BlockFill fill) override {
    return readahead_.Prefetch(obj, first_block, count, fill);
  }

  void SetGuessesProven(bool proven) override { fetcher_.SetGuessesProven(proven); }

  std::vector<std::pair<std::string, uint64_t>> Residency(const ObjectRef& obj) override {
    std::vector<std::pair<std::string, uint64_t>> out;
    // From each tier's index by object (Tier::HeldOf): what a tier holds of the object, never
    // the object's size, decides the cost (a sparse file of 2^62 bytes answers at once).
    const ObjectId id = space_.IdOf(obj);
    const uint64_t n = space_.NumBlocks(obj);
    for (const auto& t : tiers_) {
      out.emplace_back(std::string(t->name()), std::min(n, t->HeldOf(id, nullptr)));
    }
    return out;
  }

  Status Hydrate(const ObjectRef& obj, uint64_t index, size_t target,
                 const Placement& hint) override {
    return hydrator_.Hydrate(obj, index, target, hint);
  }
  bool TierHolds(const ObjectRef& obj, uint64_t first, uint64_t count, size_t target) override {
    return hydrator_.TierHolds(obj, first, count, target);
  }
  Status HydrateRun(const ObjectRef& obj, uint64_t first, uint64_t count, size_t target,
                    uint64_t* bytes_done) override {
    return hydrator_.HydrateRun(obj, first, count, target, bytes_done);
  }

  void SetPinned(const ObjectRef& obj, bool pinned) override {
    host_.ForEachKey(obj, [&](Tier* t, const BlockKey& key) { t->SetPinned(key, pinned); });
  }

  void Evict(const ObjectRef& obj) override {
    // L3 is shared with other hosts: not evicted here.
    host_.ForEachKey(obj, [](Tier* t, const BlockKey& key) { t->Erase(key); });
  }

  HostSpaceInfo HostSpace() const override { return host_.Space(); }
  uint64_t HostCapacityBytes() const override { return host_.MostCapacity(); }

  std::string_view TierName(int tier) const override {
    if (tier == kOriginTier) return "origin";
    if (tier < 0 || static_cast<size_t>(tier) >= tiers_.size()) return {};
    return tiers_[tier]->name();
  }

  uint64_t block_size() const override { return options_.block_size; }
  uint64_t readahead_run_blocks() const override { return run_blocks_; }
  uint64_t readahead_window_bytes() const override {
    const uint64_t l1 = host_tiers_ > 0 ? tiers_[0]->Stats().capacity.load() : 0;
    return std::min<uint64_t>(options_.readahead_budget_bytes, l1 > 0 ? l1 / 4 : ~0ULL);
  }
  uint64_t small_object_bytes() const override { return small_object_bytes_; }
  bool ReadsSparse(const ObjectRef& obj, uint64_t offset, uint64_t length,
                   ReadHint hint) const override {
    return sparse_.Eligible(obj, length, options_.block_size, hint);
  }
  const std::vector<std::unique_ptr<Tier>>& tiers() const override { return tiers_; }
  const CacheStats& Stats() const override { return stats_; }
  std::string StatsText() const override { return stats_src_.Text(); }

 private:
  // The tiers in index order: the host ones, then the shared ones.
  static std::vector<std::unique_ptr<Tier>> Concat(CacheTiers tiers) {
    std::vector<std::unique_ptr<Tier>> all = std::move(tiers.host);
    for (auto& t : tiers.shared) all.push_back(std::move(t));
    return all;
  }

  tiercache_internal::QueueDepths QueueDepthsNow() const {
    return {readahead_.queued_blocks(), fetcher_.queued_jobs()};
  }

  Result<std::vector<BlockSlice>> ReadSlices(const ObjectRef& obj, uint64_t offset, uint64_t length,
                                             const CancelToken* token, ReadHint hint) {
    ++stats_.read_calls;
    std::vector<BlockSlice> slices;
    const uint64_t size = obj.info.size;
    if (length == 0 || offset >= size) return slices;
    host_.NoteRead(obj, offset, length);
    const uint64_t end = offset + std::min(length, size - offset);
    const uint64_t bs = options_.block_size;
    slices.reserve((end - 1) / bs - offset / bs + 1);
    uint64_t served = 0;
    for (uint64_t pos = offset; pos < end;) {
      TIERFS_ASSIGN_OR_RETURN(BlockSlice slice, ReadPiece(obj, pos, end - pos, token, hint));
      pos += slice.length;
      served += slice.length;
      slices.push_back(std::move(slice));
    }
    stats_.bytes_served += served;
    return slices;
  }

  // The slice of the read at `pos` (at most `left` bytes, within one block): from a host tier's
  // file or range, a projected read, or the whole block.
  Result<BlockSlice> ReadPiece(const ObjectRef& obj, uint64_t pos, uint64_t left,
                               const CancelToken* token, ReadHint hint) {
    const uint64_t bs = options_.block_size;
    const uint64_t index = pos / bs;
    const uint64_t in_block = pos - index * bs;
    const uint64_t block_len = space_.ExpectedLength(obj, index);
    const uint64_t want = std::min<uint64_t>(left, block_len - in_block);
    bool promote = false;  // an L2 block due for L1: read whole (the fetcher copies it up)
    if (options_.file_slices) {
      int ext_tier = kOriginTier;
      if (FileExtentRef ext =
              host_.TryExtent(obj, index, in_block, want, block_len, &ext_tier, &promote)) {
        return BlockSlice{nullptr, static_cast<size_t>(in_block), static_cast<size_t>(want),
                          ext_tier, std::move(ext)};
      }
    }
    if (!promote && 2 * want < block_len) {  // under half of the block: maybe not all of it
      int part_tier = kOriginTier;
      BlockRef part = host_.TryRange(obj, index, in_block, want, &part_tier);
      if (part && part->size() == want) {
        return BlockSlice{std::move(part), 0, static_cast<size_t>(want), part_tier, nullptr};
      }
    }
    if (!promote && sparse_.Takes(obj, index, want, block_len, hint)) {
      TIERFS_ASSIGN_OR_RETURN(std::optional<BlockSlice> part,
                              sparse_.Read(obj, index, in_block, want, token));
      if (part) return std::move(*part);
    }
    TIERFS_ASSIGN_OR_RETURN(Served got, fetcher_.Get(obj, index, token, /*demand=*/true));
    if (got.block->size() != block_len) {  // Get guarantees it; never slice past the end
      return Status::Internal("block " + std::to_string(index) + " of '" + obj.key + "' has " +
                              std::to_string(got.block->size()) + " bytes, expected " +
                              std::to_string(block_len));
    }
    return BlockSlice{std::move(got.block), static_cast<size_t>(in_block),
                      static_cast<size_t>(want), got.tier, nullptr};
  }

  // Constant after construction.
  const TieredCacheOptions options_;
  const size_t host_tiers_;  // tiers_[0, host_tiers_) are host tiers (L1, L2), the rest shared
  const std::vector<std::unique_ptr<Tier>> tiers_;
  const uint64_t run_blocks_;
  const uint64_t small_object_bytes_;
  const tiercache_internal::BlockSpace space_;
  // One per tier, then the origin's; empty without options_.metrics.
  std::vector<std::unique_ptr<metrics::Histogram>> read_latency_;
  // Every counter of the cache (atomics), bumped by the engines.
  CacheStats stats_;
  tiercache_internal::EngineCounters counters_;

  // The roles and engines, in the order calls run (each uses only those declared before it).
  tiercache_internal::HostTiers host_;
  tiercache_internal::SharedTiers shared_;
  tiercache_internal::OriginFetcher fetcher_;
  tiercache_internal::Readahead readahead_;
  tiercache_internal::SparseReader sparse_;
  tiercache_internal::Hydrator hydrator_;
  // Both renderings of the counters (StatsText, /metrics).
  tiercache_internal::CacheStatsSource stats_src_;
  metrics::Registry::Registration metrics_reg_;
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
                                                       CacheTiers tiers, BlobStore* origin,
                                                       Clock* clock) {
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
  for (const auto* list : {&tiers.host, &tiers.shared}) {
    for (const auto& t : *list) {
      if (!t) return Status::InvalidArgument("tiered cache: null tier");
    }
  }
  if (tiers.host.size() > 2) {
    return Status::InvalidArgument(
        "tiered cache: at most two host tiers (L1 over L2); a shared tier (L3) goes to "
        "CacheTiers::shared");
  }
  auto cache = std::make_unique<TieredCacheImpl>(options, std::move(tiers), origin, clock);
  cache->RegisterMetrics();
  return std::unique_ptr<TieredCache>(std::move(cache));
}

}  // namespace tierfs
