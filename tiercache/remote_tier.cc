// L3: the regional tier over an S3-compatible BlobStore (tier.h, NewRemoteTier), and its garbage
// collector (GcRemoteTier). Object format: tiercache/FORMAT.md, "L3: the regional tier".
//
// Why the shape below:
// - Read is one GET of header + block (no HEAD first): an L3 hit costs one round trip, a miss one
//   404. The header carries the block key, so an object stored under the wrong name is caught
//   like a checksum failure.
// - Insert never blocks the reader: it takes a reference to the (immutable) block and queues it;
//   a few owned threads upload. A full queue drops the write, because L3 is best-effort.
// - A dead or slow L3 must cost readers little: the store gets short timeouts and few attempts
//   (daemon/), and a circuit breaker skips L3 entirely for a cool-down after a run of failures.
// - A corrupt object is not deleted: the origin refetch that follows the miss writes the block
//   back under the same key, overwriting it (no extra request, no delete racing another host's
//   good write).
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <stop_token>
#include <thread>
#include <unordered_set>

#include "base/logging.h"
#include "base/mutex.h"
#include "tiercache/internal/block_key_hash.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace {

using tiercache_internal::BlockKeyHash;

void WaitWhileHeld(CondVar* cv) NO_THREAD_SAFETY_ANALYSIS { cv->Wait(); }

// ---- the object header (FORMAT.md) ----

constexpr char kMagic[4] = {'T', 'F', 'L', '3'};
constexpr uint32_t kVersion = 1;
// magic(4) version(4) length(8) checksum(8) stored_ns(8) key(16)
constexpr size_t kHeaderSize = 48;
constexpr std::string_view kBlocksDir = "blocks/";

void PutU32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
void PutU64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t GetU64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string ObjectName(const BlockKey& key) { return std::string(kBlocksDir) + BlockKeyHex(key); }

struct WriteJob {
  BlockKey key;
  BlockRef block;
};

// Thread-safe; no external synchronization needed.
class RemoteTier final : public Tier {
 public:
  RemoteTier(const RemoteTierOptions& options, BlobStore* store, Clock* clock)
      : options_(options), store_(store), clock_(clock), queue_cv_(&queue_mu_) {}

  ~RemoteTier() override {
    // Pending uploads are abandoned: L3 is a cache, and shutdown must not wait on a slow store.
    for (auto& t : writers_) t.request_stop();
    {
      MutexLock l(&queue_mu_);
      write_dropped_ += queue_.size();
      queue_.clear();
    }
    queue_cv_.SignalAll();
    writers_.clear();  // joins; a writer finishes the upload it is in
  }

  void StartWriters() {
    for (int i = 0; i < options_.write_threads; ++i) {
      writers_.emplace_back([this](std::stop_token st) { WriterLoop(st); });
    }
  }

  std::string_view name() const override { return "l3"; }
  bool IsRemote() const override { return true; }

  Result<BlockRef> Read(const BlockKey& key) override {
    if (!BreakerAllows()) {
      ++skipped_;
      return Status::Unavailable("l3: circuit open after repeated failures");
    }
    const size_t cap = kHeaderSize + options_.block_size;
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
    const size_t len = *n - kHeaderSize;
    auto block = Block::Allocate(len);
    std::memcpy(block->mutable_data().data(), buf.get() + kHeaderSize, len);
    block->set_size(len);
    ++stats_.hits;
    stats_.bytes_read += len;
    Remember(key);
    return BlockRef(std::move(block));
  }

  Status Insert(const BlockKey& key, const BlockRef& block, const Placement& /*hint*/) override {
    if (block->size() > options_.block_size) {
      return Status::InvalidArgument("l3: block larger than block_size");
    }
    if (Known(key)) return Status::OK();  // already there (written or read by this process)
    if (!BreakerAllows()) {
      ++write_dropped_;
      return Status::Unavailable("l3: circuit open; write dropped");
    }
    {
      MutexLock l(&queue_mu_);
      if (pending_.count(key) != 0) return Status::OK();
      if (queue_.size() >= options_.write_queue) {
        ++write_dropped_;
        return Status::NoSpace("l3: write queue full; write dropped");
      }
      queue_.push_back(WriteJob{key, block});
      pending_.insert(key);
    }
    queue_cv_.Signal();
    return Status::OK();
  }

  bool Contains(const BlockKey& key) override { return Known(key); }

  // Forgets the block locally only: the object is shared with other hosts, and its lifecycle
  // belongs to `tierfs l3 gc` (a bad copy is overwritten by the next write of the block).
  void Erase(const BlockKey& key) override { Forget(key); }

  const TierStats& Stats() const override { return stats_; }

  void AppendExtraStats(std::vector<std::pair<std::string, uint64_t>>* out) const override {
    uint64_t pending;
    {
      MutexLock l(&queue_mu_);
      pending = pending_.size();
    }
    out->emplace_back("write.pending", pending);
    out->emplace_back("write.dropped", write_dropped_.load());
    out->emplace_back("write.errors", write_errors_.load());
    out->emplace_back("expired", expired_.load());
    out->emplace_back("skipped", skipped_.load());
    out->emplace_back("breaker.trips", breaker_trips_.load());
    out->emplace_back("breaker.open", BreakerOpenNow() ? 1 : 0);
    AppendStoreStats(store_->Stats(), out);
  }

 private:
  Status Verify(const BlockKey& key, std::span<const std::byte> obj, uint64_t* stored_ns) const {
    if (obj.size() < kHeaderSize) return Status::Corruption("shorter than its header");
    const std::byte* h = obj.data();
    if (std::memcmp(h, kMagic, 4) != 0) return Status::Corruption("bad magic");
    if (GetU32(h + 4) != kVersion) return Status::Corruption("unknown format version");
    const uint64_t len = GetU64(h + 8);
    if (len > options_.block_size) {
      return Status::Corruption("length " + std::to_string(len) + " exceeds the block size");
    }
    if (len != obj.size() - kHeaderSize) {
      return Status::Corruption("length " + std::to_string(len) + " but " +
                                std::to_string(obj.size() - kHeaderSize) + " bytes of data");
    }
    if (std::memcmp(h + 32, key.data(), key.size()) != 0) {
      return Status::Corruption("header names another block");
    }
    if (BlockChecksum(obj.subspan(kHeaderSize)) != GetU64(h + 16)) {
      return Status::Corruption("checksum mismatch");
    }
    *stored_ns = GetU64(h + 24);
    return Status::OK();
  }

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
  void Remember(const BlockKey& key) {
    MutexLock l(&known_mu_);
    if (known_.size() >= options_.known_keys_max) known_.clear();
    known_.insert(key);
  }
  void Forget(const BlockKey& key) {
    MutexLock l(&known_mu_);
    known_.erase(key);
  }

  // ---- the uploaders ----

  void WriterLoop(std::stop_token st) {
    pthread_setname_np(pthread_self(), "tierfs-l3-w");
    std::vector<std::byte> buf;
    while (true) {
      WriteJob job;
      {
        MutexLock l(&queue_mu_);
        while (queue_.empty() && !st.stop_requested()) WaitWhileHeld(&queue_cv_);
        if (st.stop_requested()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      Upload(job, &buf);
      {
        MutexLock l(&queue_mu_);
        pending_.erase(job.key);
      }
    }
  }

  void Upload(const WriteJob& job, std::vector<std::byte>* buf) {
    if (!BreakerAllows()) {
      ++write_dropped_;
      return;
    }
    const auto data = job.block->data();
    buf->resize(kHeaderSize + data.size());
    std::byte* h = buf->data();
    std::memcpy(h, kMagic, 4);
    PutU32(h + 4, kVersion);
    PutU64(h + 8, data.size());
    PutU64(h + 16, BlockChecksum(data));
    PutU64(h + 24, static_cast<uint64_t>(clock_->NowUnixNanos()));
    std::memcpy(h + 32, job.key.data(), job.key.size());
    if (!data.empty()) std::memcpy(h + kHeaderSize, data.data(), data.size());
    Status s = store_->Put(ObjectName(job.key), *buf);
    if (!s.ok()) {
      RecordFailure(s);
      ++write_errors_;
      SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "l3 write of {} failed: {}",
                          BlockKeyHex(job.key), s.ToString());
      return;
    }
    RecordSuccess();
    ++stats_.inserts;
    stats_.bytes_inserted += data.size();
    Remember(job.key);
  }

  // Constant after construction.
  const RemoteTierOptions options_;
  BlobStore* const store_;
  Clock* const clock_;

  TierStats stats_;
  std::atomic<uint64_t> write_dropped_{0}, write_errors_{0}, expired_{0}, skipped_{0};
  std::atomic<uint64_t> breaker_trips_{0};
  std::atomic<int> consecutive_failures_{0};
  std::atomic<int64_t> open_until_ns_{INT64_MIN};

  Mutex known_mu_;
  std::unordered_set<BlockKey, BlockKeyHash> known_ GUARDED_BY(known_mu_);

  mutable Mutex queue_mu_;
  CondVar queue_cv_;
  // State below is protected by queue_mu_.
  std::deque<WriteJob> queue_ GUARDED_BY(queue_mu_);
  // Keys queued or being uploaded (so one block is not queued twice).
  std::unordered_set<BlockKey, BlockKeyHash> pending_ GUARDED_BY(queue_mu_);

  // Declared last: destroyed (joined) first, while everything they use is alive.
  std::vector<std::jthread> writers_;
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
  auto tier = std::make_unique<RemoteTier>(options, store, clock);
  tier->StartWriters();
  return std::unique_ptr<Tier>(std::move(tier));
}

Result<RemoteGcReport> GcRemoteTier(const RemoteGcOptions& options, BlobStore* store,
                                    Clock* clock) {
  if (store == nullptr) return Status::InvalidArgument("l3 gc: store is required");
  if (clock == nullptr) clock = SystemClock();
  RemoteGcReport rep;
  std::vector<ListEntry> blocks;
  TIERFS_RETURN_IF_ERROR(ForEachListPage(store, kBlocksDir, "", 1000, [&](ListPage& page) {
    for (auto& e : page.objects) {
      rep.objects++;
      rep.bytes += e.info.size;
      blocks.push_back(std::move(e));
    }
    return Status::OK();
  }));

  auto remove = [&](const ListEntry& e) {
    if (options.dry_run) return true;
    Status s = store->Delete(e.key);
    if (!s.ok()) {
      ++rep.delete_errors;
      Logger(Module::kTierCache).warn("l3 gc: cannot delete {}: {}", e.key, s.ToString());
      return false;
    }
    return true;
  };

  const int64_t now = clock->NowUnixNanos();
  std::vector<ListEntry> kept;
  uint64_t kept_bytes = 0;
  for (auto& e : blocks) {
    const bool expired = options.ttl != std::chrono::nanoseconds::max() &&
                         now - e.info.mtime_ns > options.ttl.count();
    if (expired && remove(e)) {
      ++rep.expired;
      rep.expired_bytes += e.info.size;
      continue;
    }
    kept_bytes += e.info.size;
    kept.push_back(std::move(e));
  }
  if (kept_bytes > options.max_bytes) {
    // Oldest first; the key breaks ties so the order is deterministic.
    std::sort(kept.begin(), kept.end(), [](const ListEntry& a, const ListEntry& b) {
      return a.info.mtime_ns != b.info.mtime_ns ? a.info.mtime_ns < b.info.mtime_ns : a.key < b.key;
    });
    for (const auto& e : kept) {
      if (kept_bytes <= options.max_bytes) break;
      if (remove(e)) {
        ++rep.trimmed;
        rep.trimmed_bytes += e.info.size;
        kept_bytes -= e.info.size;
      }
    }
  }
  rep.remaining_objects = rep.objects - rep.expired - rep.trimmed;
  rep.remaining_bytes = kept_bytes;
  return rep;
}

}  // namespace tierfs
