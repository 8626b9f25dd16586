// L3: the regional tier over an S3-compatible BlobStore (tier.h, NewRemoteTier), and its garbage
// collector (GcRemoteTier). Object format: tiercache/FORMAT.md, "L3: the regional tier".
//
// Why the shape below:
// - Read is one GET of header + block (no HEAD first): an L3 hit costs one round trip, a miss one
//   404. The header carries the block key, so an object stored under the wrong name is caught
//   like a checksum failure. ReadMany (readahead and hydrate runs) issues a run's GETs at once,
//   so that a run from L3 costs about one round trip, like one ranged GET of a run at the origin
//   (one object per block is kept: the format, gc and write-back stay per block).
// - Insert never blocks the reader: it takes a reference to the (immutable) block and queues it;
//   a few owned threads upload. A full queue drops the write, because L3 is best-effort.
// - A dead or slow L3 must cost readers little: the store gets short timeouts and few attempts
//   (daemon/), and a circuit breaker skips L3 entirely for a cool-down after a run of failures.
// - A corrupt object is not deleted: the origin refetch that follows the miss writes the block
//   back under the same key, overwriting it (no extra request, no delete racing another host's
//   good write).
// - The tier is also the ListingShare (listing_share.h): directory listings are objects
//   "listings/<32 hex>" in the same framing (l3_listing.h), read on the caller's thread through
//   the same store (short timeouts) and breaker, and written by the same uploaders and queue.
#include <algorithm>
#include <array>
#include <cstring>
#include <latch>
#include <unordered_map>
#include <unordered_set>

#include "base/logging.h"
#include "base/mutex.h"
#include "base/thread_pool.h"
#include "tiercache/internal/block_key_hash.h"
#include "tiercache/internal/l3_listing.h"
#include "tiercache/internal/l3_object.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace {

using tiercache_internal::BlockKeyHash;
using tiercache_internal::DecodeL3Listing;
using tiercache_internal::EncodeL3Listing;
using tiercache_internal::EncodeL3Object;
using tiercache_internal::kL3FixedHeaderBytes;
using tiercache_internal::kL3MaxHeaderBytes;
using tiercache_internal::kMaxListingObjectBytes;
using tiercache_internal::L3Header;
using tiercache_internal::ListingKey;
using tiercache_internal::ListingObjectName;
using tiercache_internal::ParseL3Header;
using tiercache_internal::ParseL3Object;

constexpr std::string_view kBlocksDir = "blocks/";

std::string ObjectName(const BlockKey& key) { return std::string(kBlocksDir) + BlockKeyHex(key); }

// "blocks/" and 32 lower-case hex digits: the only names tierfs writes (ObjectName).
bool IsBlockObjectName(std::string_view name) {
  if (!name.starts_with(kBlocksDir)) return false;
  name.remove_prefix(kBlocksDir.size());
  return name.size() == 32 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// A directory listing waiting for upload (ListingShare::Publish).
struct ListingJob {
  std::string source, dir;
  SharedListing listing;
};

// A block, or (with `listing` set) a listing under key ListingKey(source, dir).
struct WriteJob {
  BlockKey key;
  BlockRef block;
  std::shared_ptr<const ListingJob> listing;
  BlockOwner owner = {};  // the block's (Placement::owner), remembered once it is uploaded
};

// The first GET of a listing object asks for this many bytes; a larger one takes a second GET
// of the rest (its header tells how long it is).
constexpr size_t kListingFirstRead = 256 * 1024;

// ReadMany's helper threads: read_parallel - 1 per call and read_parallel over all calls (none
// when each call reads alone).
int ReadHelperThreads(const RemoteTierOptions& options) {
  return options.read_parallel > 1 ? options.read_parallel : 0;
}

// Thread-safe; no external synchronization needed.
class RemoteTier final : public Tier, public ListingShare {
 public:
  RemoteTier(const RemoteTierOptions& options, BlobStore* store, Clock* clock)
      : options_(options),
        store_(store),
        clock_(clock),
        readers_({.name = "tierfs-l3-r",
                  .number_threads = false,
                  .threads = ReadHelperThreads(options),
                  .queue_limit = static_cast<size_t>(ReadHelperThreads(options))}),
        writers_({.name = "tierfs-l3-w",
                  .number_threads = false,
                  .threads = options.write_threads,
                  .queue_limit = options.write_queue}) {}

  ~RemoteTier() override {
    // Pending uploads are abandoned: L3 is a cache, and shutdown must not wait on a slow store.
    // A writer finishes the upload it is in.
    write_dropped_ += writers_.Stop(ThreadPool::kDiscard);
  }

  std::string_view name() const override { return "l3"; }

  Result<BlockRef> Read(const BlockKey& key) override {
    if (!BreakerAllows()) {
      ++skipped_;
      return Status::Unavailable("l3: circuit open after repeated failures");
    }
    const size_t cap = kL3MaxHeaderBytes + options_.block_size;
    auto buf = std::make_unique_for_overwrite<std::byte[]>(cap);
    Result<size_t> n = store_->Read(ObjectName(key), 0, {buf.get(), cap}, "");
    if (!n.ok()) {
      if (n.status().IsNotFound()) {
        RecordSuccess();
        ++stats_.misses;
        Forget(key);
        return n.status();
      }
      RecordFailure(n.status());
      ++stats_.errors;
      return n.status();
    }
    RecordSuccess();
    uint64_t stored_ns = 0;
    // A store claiming more bytes than the buffer holds is never trusted (nor read past).
    Status bad = *n > cap ? Status::Corruption("the store returned more bytes than asked for")
                          : Verify(key, {buf.get(), *n}, &stored_ns);
    if (!bad.ok()) {
      ++stats_.corruptions;
      ++stats_.misses;
      Forget(key);
      Logger(Module::kTierCache)
          .warn("l3 block {} is corrupt ({}); reading it from below", BlockKeyHex(key),
                bad.message());
      return Status::NotFound("l3: corrupt block");
    }
    if (Expired(stored_ns)) {
      ++expired_;
      ++stats_.misses;
      Forget(key);
      return Status::NotFound("l3: block expired");
    }
    // Verify checked the header; the block's bytes follow it.
    const size_t header_bytes = ParseL3Header({buf.get(), *n})->header_bytes;
    const size_t len = *n - header_bytes;
    auto block = Block::Allocate(len);
    std::memcpy(block->mutable_data().data(), buf.get() + header_bytes, len);
    block->set_size(len);
    ++stats_.hits;
    stats_.bytes_read += len;
    Remember(key);
    return BlockRef(std::move(block));
  }

  // A run's GETs at once: this thread and helper threads, each taking the next key until none is
  // left. Helpers are bounded per call (read_parallel - 1) and across the calls running at once
  // (read_parallel in all), so that many readahead runs do not pile up GETs on a busy L3. Every
  // result slot is written by one thread, read after the joins.
  std::vector<Result<BlockRef>> ReadMany(std::span<const BlockKey> keys) override {
    const int cap = std::max(1, options_.read_parallel);
    const size_t want = std::min<size_t>(keys.size(), static_cast<size_t>(cap)) - 1;
    size_t helpers_n = 0;
    while (helpers_n < want && BreakerAllows()) {
      int in_use = read_helpers_.load(std::memory_order_relaxed);
      if (in_use >= cap) break;
      if (read_helpers_.compare_exchange_weak(in_use, in_use + 1, std::memory_order_relaxed)) {
        ++helpers_n;
      }
    }
    if (helpers_n == 0) return Tier::ReadMany(keys);
    std::vector<Result<BlockRef>> out(keys.size(), Status::Unavailable("l3: not read"));
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < keys.size();) {
        out[i] = Read(keys[i]);
      }
    };
    // Each helper task counts down when it is destroyed: after its work() ran, or at once when
    // the pool refuses it (then this thread reads its share).
    struct CountDown {
      std::shared_ptr<std::latch> done;
      explicit CountDown(std::shared_ptr<std::latch> d) : done(std::move(d)) {}
      CountDown(CountDown&&) noexcept = default;
      ~CountDown() {
        if (done) done->count_down();
      }
    };
    auto done = std::make_shared<std::latch>(static_cast<std::ptrdiff_t>(helpers_n));
    for (size_t w = 0; w < helpers_n; ++w) {
      (void)readers_.TrySubmit([&work, c = CountDown(done)] { work(); });
    }
    work();
    done->wait();  // every helper is out of `work`: the slots and `next` are ours again
    read_helpers_.fetch_sub(static_cast<int>(helpers_n), std::memory_order_relaxed);
    return out;
  }

  Status Insert(const BlockKey& key, const BlockRef& block, const Placement& hint) override {
    if (block->size() > options_.block_size) {
      return Status::InvalidArgument("l3: block larger than block_size");
    }
    if (Known(key)) {  // already there (written or read by this process)
      if (hint.owner.known()) Remember(key, hint.owner);
      return Status::OK();
    }
    if (!BreakerAllows()) {
      ++write_dropped_;
      return Status::Unavailable("l3: circuit open; write dropped");
    }
    if (!QueueWrite(WriteJob{key, block, nullptr, hint.owner})) {
      return Status::NoSpace("l3: write queue full; write dropped");
    }
    return Status::OK();
  }

  bool Contains(const BlockKey& key) override { return Known(key); }

  // Forgets the block locally only: the object is shared with other hosts, and its lifecycle
  // belongs to `tierfs l3 gc` (a bad copy is overwritten by the next write of the block).
  void Erase(const BlockKey& key) override { Forget(key); }

  void NoteOwner(const BlockKey& key, const BlockOwner& owner) override {
    MutexLock l(&known_mu_);
    auto k = known_.find(key);
    if (k != known_.end()) SetOwnerLocked(k, owner);
  }

  uint64_t HeldOf(const ObjectId& object, std::vector<BlockKey>* keys) override {
    MutexLock l(&known_mu_);
    auto o = owners_.find(object);
    if (o == owners_.end()) return 0;
    if (keys != nullptr) keys->insert(keys->end(), o->second.begin(), o->second.end());
    return o->second.size();
  }

  const TierStats& Stats() const override { return stats_; }

  ListingShare* listing_share() override { return this; }

  // ---- ListingShare ----

  Result<SharedListing> Fetch(std::string_view source, std::string_view dir,
                              int64_t min_listed_at_ns) override {
    if (!BreakerAllows()) {
      ++skipped_;
      return Status::Unavailable("l3: circuit open after repeated failures");
    }
    const std::string name = ListingObjectName(source, dir);
    std::vector<std::byte> buf(kListingFirstRead);
    Result<size_t> n = store_->Read(name, 0, buf, "");
    if (n.ok() && *n == buf.size()) {
      // Maybe more: the header says how long the object is.
      Result<L3Header> h = ParseL3Header(buf);
      const uint64_t total = h.ok() ? h->header_bytes + h->length : 0;
      if (h.ok() && total > buf.size() && total <= kMaxListingObjectBytes) {
        buf.resize(total);
        Result<size_t> more = store_->Read(name, *n, std::span(buf).subspan(*n), "");
        n = more.ok() ? Result<size_t>(*n + std::min(*more, total - *n)) : more;
      }
    }
    if (!n.ok()) {
      if (n.status().IsNotFound()) {
        RecordSuccess();
        return n.status();
      }
      RecordFailure(n.status());
      ++listing_errors_;
      return n.status();
    }
    RecordSuccess();
    buf.resize(std::min(*n, buf.size()));
    uint64_t stored_ns = 0;
    Result<SharedListing> l = DecodeL3Listing(buf, source, dir, MacKey(), &stored_ns);
    if (!l.ok()) {
      ++listings_rejected_;
      Logger(Module::kTierCache)
          .warn("l3 listing of '{}' ({}) is rejected ({}); listing it from the origin", dir, name,
                l.status().message());
      return Status::NotFound("l3: listing rejected");
    }
    if (Expired(stored_ns) || l->listed_at_ns < min_listed_at_ns) {
      ++listings_old_;
      return Status::NotFound("l3: listing too old");
    }
    ++listings_hits_;
    return l;
  }

  void Publish(std::string_view source, std::string_view dir, SharedListing listing) override {
    if (!BreakerAllows()) {
      ++write_dropped_;
      return;
    }
    auto job = std::make_shared<ListingJob>(
        ListingJob{std::string(source), std::string(dir), std::move(listing)});
    (void)QueueWrite(WriteJob{ListingKey(source, dir), nullptr, std::move(job), BlockOwner{}});
  }

  void AppendExtraStats(std::vector<std::pair<std::string, uint64_t>>* out) const override {
    uint64_t pending;
    {
      MutexLock l(&pending_mu_);
      pending = pending_.size();
    }
    out->emplace_back("write.pending", pending);
    out->emplace_back("write.dropped", write_dropped_.load());
    out->emplace_back("write.errors", write_errors_.load());
    out->emplace_back("expired", expired_.load());
    out->emplace_back("skipped", skipped_.load());
    out->emplace_back("breaker.trips", breaker_trips_.load());
    out->emplace_back("breaker.open", BreakerOpenNow() ? 1 : 0);
    out->emplace_back("listings.hits", listings_hits_.load());
    out->emplace_back("listings.stored", listings_stored_.load());
    out->emplace_back("listings.rejected", listings_rejected_.load());
    out->emplace_back("listings.old", listings_old_.load());
    out->emplace_back("listings.errors", listing_errors_.load());
    AppendStoreStats(store_->Stats(), out);
  }

 private:
  // The object's format, checksum and (with a key) MAC, and that it holds the block asked for.
  Status Verify(const BlockKey& key, std::span<const std::byte> obj, uint64_t* stored_ns) const {
    Result<L3Header> h = ParseL3Object(obj, MacKey());
    if (!h.ok()) return h.status();
    // The read buffer has room for the longer (version 2) header, so a version 1 object could
    // carry 32 bytes more than a block: never more than block_size.
    if (h->length > options_.block_size) {
      return Status::Corruption("length " + std::to_string(h->length) + " exceeds the block size");
    }
    if (h->key != key) return Status::Corruption("header names another block");
    *stored_ns = h->stored_ns;
    return Status::OK();
  }

  std::span<const std::byte> MacKey() const { return std::as_bytes(std::span(options_.mac_key)); }

  bool Expired(uint64_t stored_ns) const {
    if (options_.ttl == std::chrono::nanoseconds::max()) return false;
    const int64_t age = clock_->NowUnixNanos() - static_cast<int64_t>(stored_ns);
    return age > options_.ttl.count();
  }

  // ---- circuit breaker ----

  bool BreakerOpenNow() const {
    return clock_->MonotonicNanos() < open_until_ns_.load(std::memory_order_relaxed);
  }
  bool BreakerAllows() const { return !BreakerOpenNow(); }

  void RecordSuccess() {
    if (consecutive_failures_.exchange(0, std::memory_order_relaxed) >= options_.breaker_failures) {
      Logger(Module::kTierCache).info("l3 answers again; circuit closed");
    }
  }

  void RecordFailure(const Status& s) {
    const int n = consecutive_failures_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n < options_.breaker_failures) return;
    const int64_t now = clock_->MonotonicNanos();
    const int64_t until = now + options_.breaker_cooldown.count();
    int64_t prev = open_until_ns_.load(std::memory_order_relaxed);
    // Open (or re-open after the cool-down) once per period; racing failures lose the CAS.
    while (prev <= now) {
      if (open_until_ns_.compare_exchange_weak(prev, until, std::memory_order_relaxed)) {
        ++breaker_trips_;
        Logger(Module::kTierCache)
            .warn("l3: {} consecutive failures (last: {}); skipping L3 for {} ms", n, s.ToString(),
                  options_.breaker_cooldown.count() / 1000000);
        break;
      }
    }
  }

  // ---- the known-present set ----

  bool Known(const BlockKey& key) {
    MutexLock l(&known_mu_);
    return known_.count(key) != 0;
  }
  // `owner` unknown: the key alone (a read hit); a known owner also indexes it for HeldOf.
  void Remember(const BlockKey& key, const BlockOwner& owner = BlockOwner{}) {
    MutexLock l(&known_mu_);
    auto k = known_.find(key);
    if (k == known_.end()) {
      if (known_.size() >= options_.known_keys_max) {
        known_.clear();
        owners_.clear();
      }
      k = known_.emplace(key, ObjectId{}).first;
    }
    SetOwnerLocked(k, owner);
  }
  using KnownMap = std::unordered_map<BlockKey, ObjectId, BlockKeyHash>;
  // Indexes the known block at `k` under `owner` (no-op for an unknown owner).
  void SetOwnerLocked(KnownMap::iterator k, const BlockOwner& owner) REQUIRES(known_mu_) {
    if (!owner.known() || k->second == owner.object) return;
    if (k->second != ObjectId{}) UnindexLocked(k->second, k->first);
    k->second = owner.object;
    owners_[owner.object].insert(k->first);
  }
  void Forget(const BlockKey& key) {
    MutexLock l(&known_mu_);
    auto k = known_.find(key);
    if (k == known_.end()) return;
    if (k->second != ObjectId{}) UnindexLocked(k->second, key);
    known_.erase(k);
  }
  void UnindexLocked(const ObjectId& object, const BlockKey& key) REQUIRES(known_mu_) {
    auto o = owners_.find(object);
    if (o == owners_.end()) return;
    o->second.erase(key);
    if (o->second.empty()) owners_.erase(o);
  }

  // ---- the uploaders ----

  // Queues `job` for the uploaders unless its key is queued or being uploaded already (true: it
  // is on its way); false when the queue is full (the write is dropped and counted).
  bool QueueWrite(WriteJob job) EXCLUDES(pending_mu_) {
    {
      MutexLock l(&pending_mu_);
      if (!pending_.insert(job.key).second) return true;  // one queued or just taken is on its way
    }
    const BlockKey key = job.key;
    auto upload = [this, job = std::move(job)] {
      // One scratch buffer per uploader thread, reused from upload to upload.
      thread_local std::vector<std::byte> buf;
      Upload(job, &buf);
      MutexLock l(&pending_mu_);
      pending_.erase(job.key);
    };
    if (writers_.TrySubmit(std::move(upload))) return true;
    ++write_dropped_;
    MutexLock l(&pending_mu_);
    pending_.erase(key);
    return false;
  }

  void Upload(const WriteJob& job, std::vector<std::byte>* buf) {
    if (!BreakerAllows()) {
      ++write_dropped_;
      return;
    }
    if (job.listing) {
      UploadListing(*job.listing, buf);
      return;
    }
    const auto data = job.block->data();
    EncodeL3Object(job.key, data, static_cast<uint64_t>(clock_->NowUnixNanos()), MacKey(), buf);
    if (!PutObject(ObjectName(job.key), *buf, "block " + BlockKeyHex(job.key))) return;
    ++stats_.inserts;
    stats_.bytes_inserted += data.size();
    Remember(job.key, job.owner);
  }

  // One upload of an encoded L3 object: true when stored. A refusal as too large (memcached:
  // larger than its item size) is a drop, and no sign that the store is down. NotFound is the
  // store saying the object's server is lost while the others answer (memcached: one server of
  // the pool down, blob_store.h "Failures"): a write error, but no breaker failure, as a read of
  // it is a miss. Its writes come in runs (each block that missed there is fetched from the origin
  // and written back to the same lost server), and counted, five in a row opened the breaker and
  // took the live servers' hits away too. Any other failure counts towards the breaker.
  bool PutObject(const std::string& name, std::span<const std::byte> body, std::string_view what) {
    Status s = store_->Put(name, body);
    if (s.code() == Status::Code::kNoSpace) {
      RecordSuccess();
      ++write_dropped_;
      return false;
    }
    if (!s.ok()) {
      if (!s.IsNotFound()) RecordFailure(s);
      ++write_errors_;
      SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "l3 write of the {} failed: {}", what,
                          s.ToString());
      return false;
    }
    RecordSuccess();
    return true;
  }

  void UploadListing(const ListingJob& job, std::vector<std::byte>* buf) {
    Status s = EncodeL3Listing(job.source, job.dir, job.listing,
                               static_cast<uint64_t>(clock_->NowUnixNanos()), MacKey(), buf);
    if (!s.ok()) {
      ++write_dropped_;
      SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "l3: listing of '{}' not shared: {}",
                          job.dir, s.ToString());
      return;
    }
    if (!PutObject(ListingObjectName(job.source, job.dir), *buf, "listing of '" + job.dir + "'")) {
      return;
    }
    ++listings_stored_;
    if (buf->capacity() > (4u << 20)) *buf = std::vector<std::byte>();  // blocks need far less
  }

  // Constant after construction.
  const RemoteTierOptions options_;
  BlobStore* const store_;
  Clock* const clock_;

  TierStats stats_;
  std::atomic<uint64_t> write_dropped_{0}, write_errors_{0}, expired_{0}, skipped_{0};
  std::atomic<uint64_t> breaker_trips_{0};
  // Shared listings: served, stored, refused (corrupt, foreign, MAC), older than asked (or than
  // l3_ttl), GETs that failed.
  std::atomic<uint64_t> listings_hits_{0}, listings_stored_{0}, listings_rejected_{0};
  std::atomic<uint64_t> listings_old_{0}, listing_errors_{0};
  std::atomic<int> consecutive_failures_{0};
  std::atomic<int> read_helpers_{0};  // ReadMany helper tasks running now (<= read_parallel)
  std::atomic<int64_t> open_until_ns_{INT64_MIN};

  Mutex known_mu_;
  // Blocks known to be in L3, each with its owner's object (zero: unknown), and the keys of each
  // owner (for HeldOf).
  KnownMap known_ GUARDED_BY(known_mu_);
  std::unordered_map<ObjectId, std::unordered_set<BlockKey, BlockKeyHash>, BlockKeyHash> owners_
      GUARDED_BY(known_mu_);

  mutable Mutex pending_mu_;  // a leaf
  // Keys queued or being uploaded (so one block is not queued twice).
  std::unordered_set<BlockKey, BlockKeyHash> pending_ GUARDED_BY(pending_mu_);

  // Declared last: destroyed (joined) first, while everything their tasks use is alive. ReadMany
  // helpers (bounded by read_helpers_, so never queued long), and the uploaders.
  ThreadPool readers_;
  ThreadPool writers_;
};

}  // namespace

Result<std::unique_ptr<Tier>> NewRemoteTier(const RemoteTierOptions& options, BlobStore* store,
                                            Clock* clock) {
  if (store == nullptr) return Status::InvalidArgument("l3: store is required");
  if (clock == nullptr) clock = SystemClock();
  if (options.block_size == 0 || options.block_size > (1ULL << 31)) {
    return Status::InvalidArgument("l3: block_size must be in (0, 2GiB]");
  }
  if (options.write_queue < 1) return Status::InvalidArgument("l3: write_queue must be >= 1");
  if (options.write_threads < 1 || options.write_threads > 64) {
    return Status::InvalidArgument("l3: write_threads must be in [1, 64]");
  }
  if (options.breaker_failures < 1) {
    return Status::InvalidArgument("l3: breaker_failures must be >= 1");
  }
  if (options.ttl.count() <= 0) return Status::InvalidArgument("l3: ttl must be positive");
  return std::unique_ptr<Tier>(std::make_unique<RemoteTier>(options, store, clock));
}

namespace {

// One run of the L3 collector: expiry by age, then trimming to a size, oldest first. Only
// tierfs's own objects are deleted: the name says which block, and the header, read just before
// the delete, must be tierfs's and name the same block.
class L3Collector {
 public:
  L3Collector(const RemoteGcOptions& options, BlobStore* store)
      : options_(options), store_(store) {}

  Result<RemoteGcReport> Run(Clock* clock) {
    std::vector<ListEntry> blocks;
    TIERFS_RETURN_IF_ERROR(ForEachListPage(store_, kBlocksDir, "", 1000, [&](ListPage& page) {
      for (auto& e : page.objects) {
        rep_.objects++;
        rep_.bytes += e.info.size;
        blocks.push_back(std::move(e));
      }
      return Status::OK();
    }));
    std::vector<ListEntry> kept = Expire(std::move(blocks), clock->NowUnixNanos());
    Trim(&kept);
    rep_.remaining_objects = rep_.objects - rep_.expired - rep_.trimmed - rep_.foreign;
    rep_.remaining_bytes = kept_bytes_;
    return rep_;
  }

 private:
  enum class Removed { kYes, kForeign, kError };

  void Foreign(const ListEntry& e, std::string_view why) {
    ++rep_.foreign;
    rep_.foreign_bytes += e.info.size;
    Logger(Module::kTierCache).info("l3 gc: {} is not a tierfs block ({}); left alone", e.key, why);
  }

  Removed Remove(const ListEntry& e) {
    std::array<std::byte, kL3FixedHeaderBytes> head;
    Result<size_t> n = store_->Read(e.key, 0, head, "");
    if (!n.ok()) {
      ++rep_.delete_errors;
      Logger(Module::kTierCache)
          .warn("l3 gc: cannot read the header of {}: {}", e.key, n.status().ToString());
      return Removed::kError;
    }
    Result<L3Header> h = ParseL3Header(std::span(head).first(std::min(*n, head.size())));
    if (!h.ok() || BlockKeyHex(h->key) != e.key.substr(kBlocksDir.size())) {
      Foreign(e, h.ok() ? "its header names another block" : h.status().message());
      return Removed::kForeign;
    }
    if (options_.dry_run) return Removed::kYes;
    Status s = store_->Delete(e.key);
    if (!s.ok()) {
      ++rep_.delete_errors;
      Logger(Module::kTierCache).warn("l3 gc: cannot delete {}: {}", e.key, s.ToString());
      return Removed::kError;
    }
    return Removed::kYes;
  }

  // Deletes the expired blocks; returns the blocks kept (and counts their bytes).
  std::vector<ListEntry> Expire(std::vector<ListEntry> blocks, int64_t now) {
    std::vector<ListEntry> kept;
    for (auto& e : blocks) {
      if (!IsBlockObjectName(e.key)) {
        Foreign(e, "not named blocks/<32 hex digits>");
        continue;
      }
      if (e.info.size < kL3FixedHeaderBytes) {
        Foreign(e, "shorter than a tierfs header");
        continue;
      }
      const bool expired = options_.ttl != std::chrono::nanoseconds::max() &&
                           now - e.info.mtime_ns > options_.ttl.count();
      const Removed r = expired ? Remove(e) : Removed::kError;
      if (r == Removed::kForeign) continue;
      if (r == Removed::kYes) {
        ++rep_.expired;
        rep_.expired_bytes += e.info.size;
        continue;
      }
      kept_bytes_ += e.info.size;
      kept.push_back(std::move(e));
    }
    return kept;
  }

  // Deletes the oldest kept blocks until they fit in options_.max_bytes.
  void Trim(std::vector<ListEntry>* kept) {
    if (kept_bytes_ <= options_.max_bytes) return;
    // Oldest first; the key breaks ties so the order is deterministic.
    std::sort(kept->begin(), kept->end(), [](const ListEntry& a, const ListEntry& b) {
      return a.info.mtime_ns != b.info.mtime_ns ? a.info.mtime_ns < b.info.mtime_ns : a.key < b.key;
    });
    for (const auto& e : *kept) {
      if (kept_bytes_ <= options_.max_bytes) break;
      const Removed r = Remove(e);
      if (r == Removed::kYes) {
        ++rep_.trimmed;
        rep_.trimmed_bytes += e.info.size;
      }
      if (r != Removed::kError) kept_bytes_ -= e.info.size;
    }
  }

  const RemoteGcOptions& options_;
  BlobStore* const store_;
  RemoteGcReport rep_;
  uint64_t kept_bytes_ = 0;
};

}  // namespace

Result<RemoteGcReport> GcRemoteTier(const RemoteGcOptions& options, BlobStore* store,
                                    Clock* clock) {
  if (store == nullptr) return Status::InvalidArgument("l3 gc: store is required");
  if (clock == nullptr) clock = SystemClock();
  return L3Collector(options, store).Run(clock);
}

}  // namespace tierfs
