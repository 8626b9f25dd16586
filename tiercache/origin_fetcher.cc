// OriginFetcher (internal/origin_fetcher.h): fetches below the host tiers with single-flight, the
// fetch pool, the readahead budget and the memory of recent origin failures.
//
// Remembered failures: a demand read whose block failed with a retryable error (the origin's,
// after the stores' retries; or its wait's deadline) records it for origin_failure_ttl, and
// demand reads of that block meanwhile get the same error at once (after L1/L2, which a readahead
// may have filled since). Why: the kernel answers a failed readahead FUSE READ by reading the page
// its reader waits on again, synchronously, right away; without the record that READ started a
// second fetch of the block, and a stalled origin held a reader for two or three fetch budgets
// (docs/failure-and-security.md). Readahead failures no reader saw are not recorded.
#include "tiercache/internal/origin_fetcher.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/logging.h"

namespace tierfs::tiercache_internal {
namespace {

// Counts a demand fetch (or a reader's readahead) on the network while it lives: deep prefetch
// yields to these (CacheStats::demand_remote_*). Thread-safe.
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

}  // namespace

OriginFetcher::OriginFetcher(const TieredCacheOptions& options, uint64_t run_blocks,
                             uint64_t budget_bytes, uint64_t small_object_bytes, HostTiers* host,
                             SharedTiers* shared, BlobStore* origin, const BlockSpace* space,
                             CacheStats* stats, EngineCounters* counters)
    : wait_timeout_(options.wait_timeout),
      projected_(options.sparse_read_max > 0),
      fetch_queue_limit_(options.fetch_queue_limit),
      run_blocks_(run_blocks),
      small_object_bytes_(small_object_bytes),
      all_tiers_(shared->end()),
      host_(host),
      shared_(shared),
      space_(space),
      stats_(stats),
      counters_(counters),
      origin_reader_(origin, options.block_size, stats),
      budget_(budget_bytes, options.memory_budget),
      failures_(options.origin_failure_ttl, space->clock()),
      fetch_pool_(ThreadPoolOptions{.name = "tierfs-fetch",
                                    .threads = options.fetch_threads,
                                    .queue_limit = options.fetch_queue_limit}) {}

void OriginFetcher::RequestStop() {
  // Queued jobs are destroyed unrun: their leases publish "abandoned" to readers still waiting.
  fetch_pool_.RequestStop(ThreadPool::kDiscard);
  budget_.WakeAll();
}

void OriginFetcher::Join() { fetch_pool_.Join(); }

Result<Served> OriginFetcher::Get(const ObjectRef& obj, uint64_t index, const CancelToken* token,
                                  bool demand) {
  const BlockKey key = space_->KeyFor(obj, index);
  host_->Expire(obj, key);
  const uint64_t expected = space_->ExpectedLength(obj, index);
  if (auto b = host_->ReadFirst(key, expected)) return Served{std::move(b), 0};
  if (demand) {
    if (std::optional<Status> failed = failures_.Recent(key)) {
      if (Served b = host_->Lookup(obj, index, key, expected); b.block) return b;
      ++stats_->failures_replayed;
      return *failed;
    }
  }
  Result<Served> r = FetchOrJoin(obj, index, key, expected, token);
  if (demand && IsRetryable(r.status())) failures_.Remember(key, r.status());
  return r;
}

// Get below the first tier: the single-flight for `key` (leader or follower), bounded by
// wait_timeout. The leader looks in the host tiers again (the previous leader may just have
// filled them), then fetches from below.
Result<Served> OriginFetcher::FetchOrJoin(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                                          uint64_t expected, const CancelToken* token) {
  return JoinFlight(
      key, token, "block",
      [&]() -> Result<Served> {
        if (Served b = host_->Lookup(obj, index, key, expected); b.block) return b;
        return FetchBelowHostTiers(obj, index, key, expected);
      },
      [&](Flights::Lease lease) {
        if (Served b = host_->Lookup(obj, index, key, expected); b.block) {
          lease.Complete(std::move(b));
          return;
        }
        FetchJob job(std::make_shared<const ObjectRef>(obj), index, expected, std::move(lease));
        ClaimRestOfSmallObject(&job);
        SubmitFetch(std::move(job));
      });
}

// The single-flight for `fkey`, leader or follower, bounded by wait_timeout. Without a token (or
// fetch pool) the leader runs `fetch` on its own thread. With one, the leader hands its lease to
// `lead` (which completes it from the host tiers, or queues a FetchJob for the fetch pool), and
// every reader waits for the call with the token.
template <typename Fetch, typename Lead>
Result<Served> OriginFetcher::JoinFlight(const BlockKey& fkey, const CancelToken* token,
                                         std::string_view what, Fetch&& fetch, Lead&& lead) {
  const auto deadline = DeadlineAfter(wait_timeout_);
  if (token == nullptr || fetch_pool_.threads() == 0) {
    bool merged = false;
    Result<Served> r = flights_.Do(fkey, std::forward<Fetch>(fetch), &merged, token, deadline);
    if (merged) ++stats_->singleflight_merged;
    return CountWaitEnd(std::move(r));
  }
  Flights::Joined j = flights_.Join(
      fkey, Status::Unavailable("the fetch of the " + std::string(what) + " was dropped"));
  if (j.lease) {
    lead(std::move(*j.lease));
  } else {
    ++stats_->singleflight_merged;
  }
  return CountWaitEnd(Flights::Wait(j.call, token, deadline));
}

Result<Served> OriginFetcher::CountWaitEnd(Result<Served> r) {
  if (r.status().code() == Status::Code::kCancelled) ++stats_->waits_cancelled;
  if (r.status().code() == Status::Code::kTimedOut) ++stats_->waits_timed_out;
  return r;
}

// A demand miss of a small object (small_object_bytes) fetches it whole: `job`'s leader also
// claims the adjacent blocks around job->index that no host tier holds and no one else fetches,
// so that the object costs one origin request (or one L3 ReadMany) instead of a demand GET plus a
// readahead GET.
void OriginFetcher::ClaimRestOfSmallObject(FetchJob* job) {
  const ObjectRef& obj = *job->obj;
  const uint64_t n = space_->NumBlocks(obj);
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
  if (job->leases.size() > 1) ++counters_->whole_fetches;
}

// Claims block `i` of `obj` for a fetch when no host tier holds it and no one else fetches it
// (nullopt otherwise). A leader that finished between the check and the claim is caught: its
// block, from the host tiers, goes to whoever waits on the claim, and nothing is claimed.
std::optional<Flights::Lease> OriginFetcher::TryClaimUncached(const ObjectRef& obj, uint64_t i,
                                                              std::string_view why) {
  const BlockKey key = space_->KeyFor(obj, i);
  if (host_->Holds(key)) return std::nullopt;
  std::optional<Flights::Lease> lease = TryClaim(key, why);
  if (lease && host_->Holds(key)) {
    if (Served b = host_->Lookup(obj, i, key, space_->ExpectedLength(obj, i)); b.block) {
      lease->Complete(std::move(b));
      return std::nullopt;
    }
  }
  return lease;
}

std::optional<Flights::Lease> OriginFetcher::TryClaim(const BlockKey& key, std::string_view why) {
  return flights_.TryClaim(key, Status::Unavailable(std::string(why)));
}

// Queues `job` for the fetch pool; a full queue completes it with Unavailable at once.
void OriginFetcher::SubmitFetch(FetchJob job) {
  // The pool's task; left as it was when the pool refuses it.
  struct Run {
    OriginFetcher* fetcher;
    FetchJob job;
    void operator()() { fetcher->RunFetchJob(job); }
  };
  Run run{this, std::move(job)};
  budget_.DemandJobQueued();  // before a fetch thread can take it (and end it)
  if (fetch_pool_.TrySubmit(std::move(run))) return;
  job = std::move(run.job);
  { const ReadaheadBudget::DemandJobDone undo(&budget_); }
  Logger(Module::kTierCache)
      .warn("{} origin fetches queued: failing the read of '{}' block {}", fetch_queue_limit_,
            job.obj->key, job.index);
  for (Flights::Lease& l : job.leases) {
    l.Complete(Status::Unavailable("too many fetches queued (the origin is not keeping up)"));
  }
}

// One job of the fetch pool, on one of its threads.
void OriginFetcher::RunFetchJob(FetchJob& job) {
  const ReadaheadBudget::DemandJobDone done(&budget_);
  if (job.sparse_end > 0) {
    if (flights_.AbandonIfUnwaited(job.leases[0],
                                   Status::Cancelled("every reader of the range gave up"))) {
      ++stats_->fetch_abandoned;
      return;
    }
    // The entries go to L1 before the readers are answered (none misses both the flight and
    // L1), to the slower tiers (a file write each in L2) after.
    Result<Served> r = FetchSparse(*job.obj, job.index, job.sparse_begin, job.sparse_end, 1);
    const BlockRef fetched = r.ok() ? r->block : nullptr;
    job.leases[0].Complete(std::move(r));
    if (fetched) StoreEntries(*job.obj, job.index, job.sparse_begin, fetched, 1, host_->size());
    return;
  }
  if (job.leases.size() > 1) {
    // A small object fetched whole (other readers may wait for its other blocks: it is fetched
    // even when this block's reader gave up).
    FetchClaimedRun(*job.obj, job.run_first, job.leases, /*readahead=*/false, BlockFill::kWhole);
    return;
  }
  if (flights_.AbandonIfUnwaited(job.demand(),
                                 Status::Cancelled("every reader of the block gave up"))) {
    ++stats_->fetch_abandoned;
    return;
  }
  const BlockKey key = job.demand().key();
  job.demand().Complete(FetchBelowHostTiers(*job.obj, job.index, key, job.expected));
}

Result<BlockRef> OriginFetcher::FetchRange(const ObjectRef& obj, uint64_t index, uint64_t begin,
                                           uint64_t end, const CancelToken* token) {
  const BlockKey key = space_->KeyFor(obj, index);
  if (std::optional<Status> failed = failures_.Recent(key)) {
    ++stats_->failures_replayed;
    return *failed;
  }
  // The flight's key names the stretch (a namespace of its own: flights are not tier keys).
  Result<Served> r = JoinFlight(
      MakeChunkKey(key, begin / kSparseChunkBytes, end - begin), token, "range",
      [&] { return FetchSparse(obj, index, begin, end, host_->size()); },
      [&](Flights::Lease lease) {
        FetchJob job(std::make_shared<const ObjectRef>(obj), index, 0, std::move(lease));
        job.sparse_begin = begin;
        job.sparse_end = end;
        SubmitFetch(std::move(job));
      });
  if (!r.ok()) {
    if (IsRetryable(r.status())) failures_.Remember(key, r.status());
    return r.status();
  }
  return std::move(r->block);
}

// The leader's fetch of a projected stretch: bytes [begin, end) of block `index` from the origin
// (one request, pinned to the version), stored as sparse entries in host tiers [0, upto).
Result<Served> OriginFetcher::FetchSparse(const ObjectRef& obj, uint64_t index, uint64_t begin,
                                          uint64_t end, size_t upto) {
  DemandInFlight demand(stats_, space_->clock());
  // A projected read fetches only what it reads: a duplicate GET would cost its bytes again for
  // a round trip's latency (5% of the GETs of a reader of ranges were ~5% more bytes).
  const UnhedgedReads unhedged;
  const uint64_t len = end - begin;
  auto buf = Block::Allocate(len);
  ++counters_->sparse_fetches;
  TIERFS_RETURN_IF_ERROR(origin_reader_.ReadExact(
      obj, index * space_->block_size() + begin, buf->mutable_data().first(len),
      "bytes " + std::to_string(begin) + "+" + std::to_string(len) + " of block " +
          std::to_string(index)));
  counters_->sparse_fetch_bytes += len;
  buf->set_size(len);
  BlockRef fetched(std::move(buf));
  StoreEntries(obj, index, begin, fetched, 0, upto);
  return Served{std::move(fetched), kOriginTier};
}

// `fetched` (bytes from `begin`, a chunk boundary, of block `index`) as the sparse entries of
// its chunks, in host tiers [from, upto).
void OriginFetcher::StoreEntries(const ObjectRef& obj, uint64_t index, uint64_t begin,
                                 const BlockRef& fetched, size_t from, size_t upto) {
  if (from >= upto) return;
  const BlockKey key = space_->KeyFor(obj, index);
  const uint64_t end = begin + fetched->size();
  for (uint64_t c = begin / kSparseChunkBytes; c * kSparseChunkBytes < end; ++c) {
    const uint64_t at = c * kSparseChunkBytes;
    const uint64_t n = std::min(kSparseChunkBytes, end - at);
    auto e = Block::Allocate(n);
    std::memcpy(e->mutable_data().data(), fetched->data().data() + (at - begin), n);
    e->set_size(n);
    host_->Store(obj, MakeChunkKey(key, c, n), space_->OwnerOf(obj, index, /*chunk=*/true),
                 BlockRef(std::move(e)), from, upto);
  }
}

// The shared tiers in order, then the origin; fills the tiers above the one that served.
Result<Served> OriginFetcher::FetchBelowHostTiers(const ObjectRef& obj, uint64_t index,
                                                  const BlockKey& key, uint64_t expected) {
  // Demand traffic on the network: deep prefetch watches these to yield (prefetch_jobs.cc).
  DemandInFlight demand(stats_, space_->clock());
  if (Served s = shared_->Read(obj, index, key, expected); s.block) {
    Fill(obj, key, index, s.block, 0, static_cast<size_t>(s.tier));
    return s;
  }
  std::vector<BlockRef> held;
  TIERFS_ASSIGN_OR_RETURN(BlockRef b, FetchFromOrigin(obj, index, key, expected, &held));
  Fill(obj, key, index, b, 0, all_tiers_);
  DropEntries(key, expected, held);
  return Served{std::move(b), kOriginTier};
}

Result<BlockRef> OriginFetcher::FetchFromOrigin(const ObjectRef& obj, uint64_t index,
                                                const BlockKey& key, uint64_t expected,
                                                std::vector<BlockRef>* held_out) {
  std::vector<BlockRef> held = HeldChunks(obj, key, expected);
  if (held.empty()) return origin_reader_.FetchBlock(obj, index, expected);
  Result<BlockRef> b = FillGaps(obj, index, expected, held);
  if (held_out != nullptr) *held_out = std::move(held);
  return b;
}

void OriginFetcher::DropEntries(const BlockKey& key, uint64_t expected,
                                const std::vector<BlockRef>& held) {
  for (size_t t = 0; t < host_->size() && !held.empty(); ++t) {
    Tier* tier = host_->tier(t);
    if (!tier->Contains(key)) continue;  // (not taken whole there: its entries still serve)
    for (uint64_t c = 0; c < held.size(); ++c) {
      if (held[c]) tier->Erase(MakeChunkKey(key, c, HostTiers::ChunkLength(expected, c)));
    }
  }
}

std::vector<bool> OriginFetcher::GapFillChunks(const ObjectRef& obj, const BlockKey& key,
                                               uint64_t expected) const {
  if (!projected_ || obj.info.size <= small_object_bytes_) return {};
  const uint64_t n = HostTiers::NumChunks(expected);
  std::vector<bool> has(n, false);
  uint64_t bytes = 0;
  for (uint64_t c = 0; c < n; ++c) {
    if (!host_->ChunkTier(key, expected, c)) continue;
    has[c] = true;
    bytes += HostTiers::ChunkLength(expected, c);
  }
  // A few entries save less than the requests their gaps take (a dense random reader's pages:
  // the block goes with its run, one request).
  if (bytes * kGapFillShare < expected) return {};
  return has;
}

std::vector<BlockRef> OriginFetcher::HeldChunks(const ObjectRef& obj, const BlockKey& key,
                                                uint64_t expected) {
  const std::vector<bool> has = GapFillChunks(obj, key, expected);
  std::vector<BlockRef> held(has.size());
  for (uint64_t c = 0; c < has.size(); ++c) {
    if (has[c]) held[c] = host_->ReadChunk(key, expected, c).block;  // null: a bad copy, fetched
  }
  return held;
}

// The gaps are the runs of chunks without an entry; joined while closer than the join distance,
// which doubles until at most kMaxGapRequests remain. Each is read from the origin into its place
// in the block (pinned to the version, as a whole block is), the entries are copied into the rest.
// An entry's length was checked when it was read (HostTiers::ReadChunk); the block goes to the
// tiers like any fetched block (L2 checksums it from these bytes).
Result<BlockRef> OriginFetcher::FillGaps(const ObjectRef& obj, uint64_t index, uint64_t expected,
                                         const std::vector<BlockRef>& held) {
  const uint64_t cb = kSparseChunkBytes, n = held.size();
  std::vector<std::pair<uint64_t, uint64_t>> gaps;  // [begin, end) in the block
  for (uint64_t c = 0; c < n;) {
    if (held[c]) {
      ++c;
      continue;
    }
    uint64_t e = c;
    while (e < n && !held[e]) ++e;
    gaps.emplace_back(c * cb, std::min(e * cb, expected));
    c = e;
  }
  for (uint64_t join = kGapJoinBytes;; join *= 2) {
    std::vector<std::pair<uint64_t, uint64_t>> joined;
    for (const auto& g : gaps) {
      if (!joined.empty() && g.first - joined.back().second < join) {
        joined.back().second = g.second;
      } else {
        joined.push_back(g);
      }
    }
    gaps = std::move(joined);
    if (gaps.size() <= kMaxGapRequests) break;
  }
  auto block = Block::Allocate(expected);
  std::span<std::byte> out = block->mutable_data().first(expected);
  for (uint64_t c = 0; c < n; ++c) {
    if (held[c]) std::memcpy(out.data() + c * cb, held[c]->data().data(), held[c]->size());
  }
  // Gap g goes to lane g % lanes; each lane's requests one after another, the lanes at once (the
  // caller's thread is lane 0). A lane reads as its caller does: hedged or not.
  const size_t lanes = std::min(gaps.size(), kGapLanes);
  const bool unhedged = UnhedgedReads::Active();
  std::vector<Status> failed(lanes);
  auto lane = [&](size_t l) {
    std::optional<UnhedgedReads> scope;
    if (unhedged) scope.emplace();
    for (size_t g = l; g < gaps.size() && failed[l].ok(); g += lanes) {
      const auto [b, e] = gaps[g];
      ++counters_->gap_requests;
      failed[l] =
          origin_reader_.ReadExact(obj, index * space_->block_size() + b, out.subspan(b, e - b),
                                   "bytes " + std::to_string(b) + "+" + std::to_string(e - b) +
                                       " of block " + std::to_string(index));
      if (failed[l].ok()) counters_->gap_bytes += e - b;
    }
  };
  {
    std::vector<std::jthread> others;
    size_t started = 1;
    for (; started < lanes; ++started) {
      try {
        others.emplace_back(lane, started);
      } catch (const std::system_error&) {  // no thread to be had (RLIMIT_NPROC): this one reads
        break;
      }
    }
    for (size_t l = 0; l < lanes; l = l == 0 ? started : l + 1) lane(l);
  }  // (joined)
  for (const Status& st : failed) TIERFS_RETURN_IF_ERROR(st);
  ++counters_->gap_fills;
  block->set_size(expected);
  return BlockRef(std::move(block));
}

void OriginFetcher::Fill(const ObjectRef& obj, const BlockKey& key, uint64_t index,
                         const BlockRef& block, size_t from, size_t upto) {
  const BlockOwner owner = space_->OwnerOf(obj, index);
  host_->Store(obj, key, owner, block, from, upto);
  shared_->Store(obj, key, owner, block, from, upto);
}

uint64_t OriginFetcher::FetchRun(const ObjectRef& obj, uint64_t first, uint64_t end, uint64_t seq,
                                 const std::stop_token& st, BlockFill fill) {
  const uint64_t bs = space_->block_size();
  const uint64_t most = std::min(end - first, run_blocks_);
  const uint64_t bytes = std::min(most * bs, obj.info.size - std::min(obj.info.size, first * bs));
  // Before claiming, so that no reader joins a fetch that waits for budget.
  if (!budget_.Acquire(bytes, seq, st)) return 0;
  // kGaps: a block filled from its gaps goes alone (its gaps take a few round trips, and the
  // readers of the next blocks should not wait for them: unclaimed, they read what they need).
  auto from_gaps = [&](uint64_t j) {
    return fill == BlockFill::kGaps &&
           !GapFillChunks(obj, space_->KeyFor(obj, j), space_->ExpectedLength(obj, j)).empty();
  };
  const bool alone = from_gaps(first);
  std::vector<Flights::Lease> leases;
  for (uint64_t j = first; j < end && leases.size() < run_blocks_; ++j) {
    if (j > first && (alone || from_gaps(j))) break;
    std::optional<Flights::Lease> lease =
        TryClaimUncached(obj, j, "readahead of the block was abandoned");
    if (!lease) break;
    leases.push_back(std::move(*lease));
  }
  if (!leases.empty()) FetchClaimedRun(obj, first, leases, /*readahead=*/true, fill);
  budget_.Release(bytes);
  return leases.size();
}

// Reads the claimed blocks [first, first + leases.size()) and stores and publishes them.
// `readahead`: counted as readahead blocks (else a small object's demand fetch).
void OriginFetcher::FetchClaimedRun(const ObjectRef& obj, uint64_t first,
                                    std::vector<Flights::Lease>& leases, bool readahead,
                                    BlockFill fill) {
  // Readahead serves readers: it counts as demand traffic for deep prefetch, too.
  DemandInFlight demand(stats_, space_->clock());
  const std::vector<Served> got = ReadClaimed(obj, first, leases, readahead, fill);
  PublishRun(obj, first, leases, got, readahead);
}

// From the shared tiers with one ReadMany each, then the rest from the origin: a block with sparse
// entries alone (FillGaps), the others one request per stretch of adjacent blocks. A block the
// origin failed is null in the result, its lease completed with the error; so is a block filled
// from its gaps, its lease completed with it (PublishRun).
std::vector<Served> OriginFetcher::ReadClaimed(const ObjectRef& obj, uint64_t first,
                                               std::vector<Flights::Lease>& leases, bool readahead,
                                               BlockFill fill) {
  const uint64_t n = leases.size();
  std::vector<Served> got(n);  // a null block: not read yet
  std::vector<uint64_t> indexes;
  std::vector<BlockKey> keys;
  for (uint64_t k = 0; k < n; ++k) {
    indexes.push_back(first + k);
    keys.push_back(leases[k].key());
  }
  shared_->ReadMany(obj, indexes, keys, shared_->first(), &got);
  // kGaps: a block with sparse entries gets only its gaps, published at once (its readers need
  // not wait for the rest of the run). It stays null in the result, its lease completed.
  std::vector<bool> done(n, false);
  for (uint64_t k = 0; k < n && fill == BlockFill::kGaps; ++k) {
    if (got[k].block) continue;
    const uint64_t expected = space_->ExpectedLength(obj, first + k);
    const std::vector<BlockRef> held = HeldChunks(obj, keys[k], expected);
    if (held.empty()) continue;
    done[k] = true;
    // The hydration of a reader of ranges: nobody waits on these gaps, so no duplicate GETs.
    const UnhedgedReads unhedged;
    Result<BlockRef> b = FillGaps(obj, first + k, expected, held);
    if (!b.ok()) {
      leases[k].Complete(b.status());
      continue;
    }
    std::vector<Flights::Lease> one;
    one.push_back(std::move(leases[k]));
    PublishRun(obj, first + k, one, {Served{std::move(*b), kOriginTier}}, readahead);
    DropEntries(keys[k], expected, held);
  }
  for (uint64_t k = 0; k < n;) {
    if (got[k].block || done[k]) {
      ++k;
      continue;
    }
    uint64_t m = 1;
    while (k + m < n && !got[k + m].block && !done[k + m]) ++m;
    Result<std::vector<BlockRef>> blocks = origin_reader_.FetchRun(obj, first + k, m);
    if (!blocks.ok()) {
      SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "readahead of '{}' blocks {}+{} failed: {}",
                          obj.key, first + k, m, blocks.status().ToString());
      for (uint64_t j = k; j < k + m; ++j) leases[j].Complete(blocks.status());
    } else {
      if (m > 1) ++counters_->readahead_runs;
      for (uint64_t j = 0; j < m; ++j) got[k + j] = Served{(*blocks)[j], kOriginTier};
    }
    k += m;
  }
  return got;
}

// Stores each block read in the tiers above the one that served it (every tier for an origin
// block) and completes its lease. L1 first, and each block published as soon as it is there, so
// that a reader never misses both the flight and L1; the slower tiers (an L2 file write each)
// after. A block L1 did not take (too large for its shard, or no L1) goes to every tier before its
// lease completes: otherwise a reader arriving in between would fetch it again (from L3: a second
// GET). A small file fetched ahead goes to the tiers below L1 only, when L2 takes it
// (HostTiers::SmallFileBelowFirst).
void OriginFetcher::PublishRun(const ObjectRef& obj, uint64_t first,
                               std::vector<Flights::Lease>& leases, const std::vector<Served>& got,
                               bool readahead) {
  const uint64_t n = leases.size();
  auto upto = [&](const Served& s) {
    return s.tier == kOriginTier ? all_tiers_ : static_cast<size_t>(s.tier);
  };
  std::vector<bool> stored(n, false);
  for (uint64_t k = 0; k < n; ++k) {
    if (!got[k].block) continue;  // its lease is complete (the origin's error)
    if (readahead) {
      counters_->readahead_bytes += got[k].block->size();
      ++stats_->readahead_blocks;
    }
    const BlockKey key = leases[k].key();
    const size_t to = upto(got[k]);
    if (readahead && to > 1 && host_->SmallFileBelowFirst(obj)) {
      Fill(obj, key, first + k, got[k].block, 1, to);
      stored[k] = true;
      if (host_->BelowHolds(0, key)) {
        ++counters_->readahead_below_l1;
        leases[k].Complete(got[k]);
        continue;
      }
    }
    Fill(obj, key, first + k, got[k].block, 0, std::min<size_t>(1, to));
    if (!stored[k] && to > 1 && !host_->FirstHolds(key)) {
      Fill(obj, key, first + k, got[k].block, 1, to);
      stored[k] = true;
    }
    leases[k].Complete(got[k]);
  }
  for (uint64_t k = 0; k < n; ++k) {
    if (got[k].block && !stored[k]) {
      Fill(obj, space_->KeyFor(obj, first + k), first + k, got[k].block, 1, upto(got[k]));
    }
  }
}

Result<Served> OriginFetcher::AwaitOrLead(const ObjectRef& obj, uint64_t index) {
  const BlockKey key = space_->KeyFor(obj, index);
  const uint64_t expected = space_->ExpectedLength(obj, index);
  Flights::Joined j =
      flights_.Join(key, Status::Unavailable("the hydration of the block was dropped"));
  if (j.lease) {
    Served b = host_->Lookup(obj, index, key, expected);
    if (b.block) {
      j.lease->Complete(std::move(b));
    } else {
      Result<BlockRef> f = FetchFromOrigin(obj, index, key, expected);
      j.lease->Complete(f.ok() ? Result<Served>(Served{*f, kOriginTier})
                               : Result<Served>(f.status()));
    }
  }
  return Flights::Wait(j.call, nullptr, DeadlineAfter(wait_timeout_));
}

}  // namespace tierfs::tiercache_internal
