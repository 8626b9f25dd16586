// OriginFetcher: brings blocks the host tiers lack from below them (the shared tier, then the
// origin) and stores them in the tiers above the one that served. It owns what a fetch needs:
// the single-flight of block keys (one fetch per block however many readers wait; conventions
// C14), the fetch pool that runs demand fetches for readers given a CancelToken
// ("tierfs-fetch-N"), the byte budget of the readahead runs in flight (ReadaheadBudget), the
// memory of recent origin failures (FailureMemory) and the origin reader (OriginReader).
//
// Calls run one way: the engines above (the facade's demand reads, readahead, the sparse reader,
// the hydrator) call the fetcher; the fetcher calls the host tiers (lookups, stores) and the
// shared tiers, never back up. A fetched block goes back to its reader as the return value (or
// the lease it waits on) and into the tiers through HostTiers::Store / SharedTiers::Store.
//
// Interrupts and deadlines (tiered_cache.h): a read given a CancelToken never waits on the network
// on its own thread. The single-flight leader reads the host tiers itself and hands the remote
// part to the fetch pool; every reader, leader included, waits with the token and wait_timeout.
// A job whose readers all left before it started is dropped (fetch.abandoned).
//
// Thread-safe; no external synchronization needed. `host`, `shared`, `origin`, `space`, `stats`
// and `counters` are not owned and outlive this object. REQUIRES: RequestStop() and Join() before
// destruction once Start() was called.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string_view>
#include <vector>

#include "base/cancel.h"
#include "base/result.h"
#include "base/thread_pool.h"
#include "blobclient/blob_store.h"
#include "tiercache/internal/block_key_hash.h"
#include "tiercache/internal/block_space.h"
#include "tiercache/internal/cache_stats.h"
#include "tiercache/internal/failure_memory.h"
#include "tiercache/internal/host_tiers.h"
#include "tiercache/internal/origin_reader.h"
#include "tiercache/internal/readahead_budget.h"
#include "tiercache/internal/shared_tiers.h"
#include "tiercache/single_flight.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

using Flights = SingleFlight<BlockKey, Result<Served>, BlockKeyHash>;

// The remote part of one demand read's block (or projected stretch), for the fetch pool.
struct FetchJob {
  std::shared_ptr<const ObjectRef> obj;
  uint64_t index = 0;     // the demand read's block
  uint64_t expected = 0;  // its length
  // The claimed blocks [run_first, run_first + leases.size()) in order, `index` among them: one,
  // or a small object's blocks fetched whole.
  uint64_t run_first = 0;
  std::vector<Flights::Lease> leases;
  // A projected read: only bytes [sparse_begin, sparse_end) of block `index`; leases[0] is the
  // stretch's flight. sparse_end == 0: blocks.
  uint64_t sparse_begin = 0;
  uint64_t sparse_end = 0;

  FetchJob(std::shared_ptr<const ObjectRef> o, uint64_t i, uint64_t len, Flights::Lease lease)
      : obj(std::move(o)), index(i), expected(len), run_first(i) {
    leases.push_back(std::move(lease));
  }
  Flights::Lease& demand() { return leases[index - run_first]; }
};

class OriginFetcher {
 public:
  // `run_blocks`: blocks of one readahead run; `budget_bytes`: the readahead bytes in flight;
  // `small_object_bytes`: objects fetched whole by a demand miss (0: none).
  OriginFetcher(const TieredCacheOptions& options, uint64_t run_blocks, uint64_t budget_bytes,
                uint64_t small_object_bytes, HostTiers* host, SharedTiers* shared,
                BlobStore* origin, const BlockSpace* space, CacheStats* stats,
                EngineCounters* counters);
  OriginFetcher(const OriginFetcher&) = delete;
  OriginFetcher& operator=(const OriginFetcher&) = delete;

  // Drops queued fetches (their readers get "abandoned") and wakes readahead runs waiting for
  // budget; Join() then waits for the pool's threads.
  void RequestStop();
  void Join();

  // Block `index` of `obj` from the fastest tier that holds it, else fetched (single-flight).
  // With a token the remote part runs on the fetch pool and the wait observes the token.
  // `demand`: a reader's read (not readahead's), which replays and records the block's recent
  // origin failure. REQUIRES: index < blocks of obj.
  Result<Served> Get(const ObjectRef& obj, uint64_t index, const CancelToken* token, bool demand);

  // Bytes [begin, end) of block `index` of `obj` for a projected read: one origin request
  // (single-flight per stretch; with a token on the fetch pool), stored as the sparse entries
  // of the chunks from `begin` (a chunk boundary) on in the host tiers. The block holds exactly
  // those bytes. Replays and records the block's recent origin failure.
  Result<BlockRef> FetchRange(const ObjectRef& obj, uint64_t index, uint64_t begin, uint64_t end,
                              const CancelToken* token);

  // Readahead: claims blocks first, first+1, ... (before `end`, at most one run) while no host
  // tier holds them and no one fetches them, and reads them as one run: from the shared tiers
  // with one ReadMany each, the rest from the origin, one request per stretch of adjacent blocks;
  // every block goes to the tiers above the one that served it. The run's bytes are taken from
  // the budget first, in the order of `seq` among the runs waiting. `fill` kGaps: a block with
  // sparse entries is filled from its gaps (FillGaps) instead, and claimed alone (readers of the
  // blocks after it do not wait for its gaps). Returns how many blocks it handled (0: none could
  // be claimed, or `st` stopped the wait).
  uint64_t FetchRun(const ObjectRef& obj, uint64_t first, uint64_t end, uint64_t seq,
                    const std::stop_token& st, BlockFill fill = BlockFill::kWhole);

  // A fetch of `key` is in flight.
  bool InFlight(const BlockKey& key) const { return flights_.InFlight(key); }
  // Leadership of `key` when no fetch of it is in flight (deep prefetch's own fetches): readers
  // arriving meanwhile wait for the lease. `why`: the error they get if it is dropped.
  std::optional<Flights::Lease> TryClaim(const BlockKey& key, std::string_view why);
  // Waits (bounded by wait_timeout) for the fetch of block `index` in flight; if none is (it
  // ended in between), leads one here: host tiers, then the origin.
  Result<Served> AwaitOrLead(const ObjectRef& obj, uint64_t index);
  // Reads of the origin pinned to the object's version, counted.
  OriginReader& origin() { return origin_reader_; }

  // TieredCache::SetGuessesProven.
  void SetGuessesProven(bool proven) { budget_.SetGuessesProven(proven); }
  // Demand fetches queued for the fetch pool.
  size_t queued_jobs() const { return fetch_pool_.queued(); }

 private:
  Result<Served> FetchOrJoin(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                             uint64_t expected, const CancelToken* token);
  template <typename Fetch, typename Lead>
  Result<Served> JoinFlight(const BlockKey& fkey, const CancelToken* token, std::string_view what,
                            Fetch&& fetch, Lead&& lead);
  Result<Served> CountWaitEnd(Result<Served> r);
  void ClaimRestOfSmallObject(FetchJob* job);
  std::optional<Flights::Lease> TryClaimUncached(const ObjectRef& obj, uint64_t i,
                                                 std::string_view why);
  void SubmitFetch(FetchJob job);
  void RunFetchJob(FetchJob& job);
  Result<Served> FetchSparse(const ObjectRef& obj, uint64_t index, uint64_t begin, uint64_t end,
                             size_t upto);
  void StoreEntries(const ObjectRef& obj, uint64_t index, uint64_t begin, const BlockRef& fetched,
                    size_t from, size_t upto);
  Result<Served> FetchBelowHostTiers(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                                     uint64_t expected);
  // Block `index` of `obj` from the origin; when the host tiers hold sparse entries of it, only
  // the gaps between them (FillGaps), and `held_out` (if given) gets the entries it used.
  Result<BlockRef> FetchFromOrigin(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                                   uint64_t expected, std::vector<BlockRef>* held_out = nullptr);
  // Erases the sparse entries `held` (by chunk, null where none) of block `key` from each host
  // tier that now holds the block whole: a block filled from its gaps does not keep its pages
  // twice (a hydrated file's entries were up to a third of it more). A reader in the middle of
  // reading them finds one missing and fetches that range again.
  void DropEntries(const BlockKey& key, uint64_t expected, const std::vector<BlockRef>& held);
  // The sparse entries the host tiers hold of block `key` (of `expected` bytes), by chunk, null
  // where missing; empty when they hold less than 1/kGapFillShare of it (or `obj` is not read
  // projected): then the block is fetched whole.
  std::vector<BlockRef> HeldChunks(const ObjectRef& obj, const BlockKey& key, uint64_t expected);
  // Which chunks of block `key` have sparse entries, when the block is filled from its gaps
  // (what HeldChunks reads); empty when it is fetched whole.
  std::vector<bool> GapFillChunks(const ObjectRef& obj, const BlockKey& key,
                                  uint64_t expected) const;
  // The block assembled from `held` (the sparse entries of its chunks, null where missing) and
  // the gaps between them fetched from the origin (gaps closer than kGapJoinBytes joined, at most
  // kMaxGapRequests requests), on up to kGapLanes requests at once.
  Result<BlockRef> FillGaps(const ObjectRef& obj, uint64_t index, uint64_t expected,
                            const std::vector<BlockRef>& held);
  // Reads the claimed run, then stores and publishes it (PublishRun).
  void FetchClaimedRun(const ObjectRef& obj, uint64_t first, std::vector<Flights::Lease>& leases,
                       bool readahead, BlockFill fill);
  std::vector<Served> ReadClaimed(const ObjectRef& obj, uint64_t first,
                                  std::vector<Flights::Lease>& leases, bool readahead,
                                  BlockFill fill);
  void PublishRun(const ObjectRef& obj, uint64_t first, std::vector<Flights::Lease>& leases,
                  const std::vector<Served>& got, bool readahead);
  // Offers `block` to every tier in [from, upto): host tiers, then shared ones.
  void Fill(const ObjectRef& obj, const BlockKey& key, uint64_t index, const BlockRef& block,
            size_t from, size_t upto);

  // Gaps between sparse entries closer than this are fetched as one request (fetching a few held
  // pages again costs less than a round trip; a projected read's entries, 16 KiB and more, are
  // not fetched again), and a block's gaps take at most kMaxGapRequests requests (the join
  // distance doubles until they do).
  static constexpr uint64_t kGapJoinBytes = 16 << 10;
  static constexpr size_t kMaxGapRequests = 16;
  // A block's gaps are read on this many requests at once: a block of a reader of a third of it
  // has about ten, and its readers wait for it (a dense completion, or the hydration's block
  // they read next) a round trip or two rather than ten.
  static constexpr size_t kGapLanes = 4;
  // A block whose entries hold less than 1/kGapFillShare of it is fetched whole.
  static constexpr uint64_t kGapFillShare = 8;

  // Constant after construction.
  const std::chrono::nanoseconds wait_timeout_;
  // Projected reads are on: blocks of objects larger than small_object_bytes may have sparse
  // entries (a small object's, a range reader's, are not looked for: its blocks come whole).
  const bool projected_;
  const size_t fetch_queue_limit_;
  const uint64_t run_blocks_;
  const uint64_t small_object_bytes_;
  const size_t all_tiers_;  // host + shared tiers: "every tier" for an origin block
  HostTiers* const host_;
  SharedTiers* const shared_;
  const BlockSpace* const space_;
  CacheStats* const stats_;
  EngineCounters* const counters_;

  OriginReader origin_reader_;
  // The readahead fetches' bytes in flight, and their count while readers wait for fetches of
  // their own.
  ReadaheadBudget budget_;
  // Blocks whose demand read failed recently (FailureMemory::Recent).
  FailureMemory failures_;
  Flights flights_;
  // Runs FetchJobs ("tierfs-fetch-N"); a job still queued at the stop is destroyed unrun, and
  // its leases tell the readers still waiting that it was dropped. Declared last: destroyed
  // (joined) first, while everything its jobs use is alive.
  ThreadPool fetch_pool_;
};

}  // namespace tierfs::tiercache_internal
