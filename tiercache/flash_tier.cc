// L2: the flash tier. One file per block ("blocks/<2 hex>/<32 hex>", tiercache/FORMAT.md) in a
// FlashStore, and the block index (length, XXH3-64, atime, flags) in MetaStore.
//
// The tier keeps an in-memory mirror of the index (rebuilt from MetaStore::ScanBlocks at open,
// so the cache survives restarts) ordered as an LRU list; reads consult the mirror, not LMDB.
// Inserts are transactional: the file is written under a temp name and renamed, then the index
// record is written, and only then does the block enter the mirror and become readable. Every
// read verifies length and checksum; a block that fails (or whose file vanished, or that the
// cache disk cannot read back) is dropped from flash and index, counted as a corruption and
// reported as NotFound so the caller refetches it. A block that cannot be read for want of
// descriptors or memory is kept: that read goes to the next tier (ReadFailed).
//
// Space: used bytes (indexed + inserts in progress) never exceed capacity_bytes, and the cache
// filesystem keeps min_free_bytes free (statvfs every free_check_interval, estimated in
// between). Room is made by evicting LRU unpinned blocks before writing; if even that cannot
// make room the insert is declined with NoSpace and nothing is evicted. A probationary block
// (Placement::probation: admission's first sight of a `reuse` or scan block) takes free room, or
// the room of other probationary blocks (the least recently used first), never a protected
// block's: it is declined rather than evict one. Probationary blocks are indexed in quota group
// Placement::kProbationGroup (persisted, so a restart keeps them probationary) and are evicted
// by the LRU like any other to make room for a protected block.
//
// Access times are batched in memory and written to MetaStore by the tier's own thread
// ("tierfs-l2-atime"): a read that fills a batch only wakes it, so no read waits for an index
// write (a batch of 1,024 records over index pages the page cache no longer holds held a reader
// up for as long as 25 ms). A use joins a batch only atime_granularity after the access time the
// index holds. The destructor joins the thread and writes what is left.
//
// Lock order: mu_ and flush_mu_ are leaves, never held together; neither is held across
// FlashStore or MetaStore calls (C6).
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/logging.h"
#include "base/mutex.h"
#include "tiercache/internal/block_path.h"
#include "tiercache/internal/chunk_trailer.h"
#include "tiercache/internal/eviction_list.h"
#include "tiercache/single_flight.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace {

using tiercache_internal::BlockKeyHash;
using tiercache_internal::BlockPath;
using tiercache_internal::ChunksFor;
using tiercache_internal::ChunkSpan;
using tiercache_internal::ChunkTrailer;
using tiercache_internal::EvictionList;
using tiercache_internal::kBlocksDir;
using tiercache_internal::ParseBlockPath;
using tiercache_internal::VerifyChunks;

constexpr uint32_t kFlagPinned = 1u << 0;
constexpr uint32_t kFlagTtlOrder = 1u << 1;  // stored under policy=ttl
// The file carries a trailer of per-chunk checksums (tiercache/FORMAT.md,
// internal/chunk_trailer.h), so a part of the block can be read and verified without reading
// all of it (ReadRange). A whole object's block is stored without one (Placement::whole_object):
// its file then holds exactly the object's bytes (FileExtent::exact).
constexpr uint32_t kFlagChunked = 1u << 2;

constexpr std::string_view kTempMarker = ".tmp.";

// Thread-safe; no external synchronization needed.
class FlashTier final : public Tier {
 public:
  FlashTier(const FlashTierOptions& options, FlashStore* flash, MetaStore* meta, Clock* clock)
      : options_(options), flash_(flash), meta_(meta), clock_(clock) {
    stats_.capacity = options.capacity_bytes;
    flusher_ = std::jthread([this] { FlusherLoop(); });
  }

  ~FlashTier() override {
    {
      MutexLock l(&flush_mu_);
      flush_stop_ = true;
      flush_cv_.SignalAll();
    }
    flusher_.join();
    WriteAtimes();
  }

  // Rebuilds the mirror from the index and sweeps the directory. Called once, before sharing.
  Status Load() EXCLUDES(mu_) {
    std::vector<BlockRecord> records;
    TIERFS_RETURN_IF_ERROR(meta_->ScanBlocks([&](const BlockRecord& r) {
      records.push_back(r);
      return true;
    }));
    std::unordered_set<BlockKey, BlockKeyHash> indexed;
    for (const auto& r : records) indexed.insert(r.key);

    std::vector<std::string> files;
    TIERFS_RETURN_IF_ERROR(flash_->ListFiles(&files));
    std::unordered_set<BlockKey, BlockKeyHash> on_flash;
    uint64_t temps = 0, orphans = 0;
    for (const auto& f : files) {
      if (!std::string_view(f).starts_with(kBlocksDir)) continue;  // not ours (e.g. LMDB files)
      std::optional<BlockKey> key;
      if (f.find(kTempMarker) == std::string::npos) key = ParseBlockPath(f);
      if (key && indexed.count(*key)) {
        on_flash.insert(*key);
        continue;
      }
      // A temp file is a write cut short by a crash; any other file without an index record is
      // an insert whose index write never happened. Neither is visible; both are garbage.
      (key ? orphans : temps) += 1;
      Status st = flash_->RemoveFile(f);
      if (!st.ok())
        Logger(Module::kTierCache).warn("l2 sweep: cannot remove {}: {}", f, st.ToString());
    }

    std::vector<BlockKey> missing;
    std::vector<BlockRecord> live;
    for (const auto& r : records) {
      if (on_flash.count(r.key)) {
        live.push_back(r);
      } else {
        missing.push_back(r.key);
      }
    }
    if (!missing.empty()) {
      Status st = meta_->EraseBlocks(missing);
      if (!st.ok()) Logger(Module::kTierCache).warn("l2 sweep: erase index: {}", st.ToString());
    }
    // Oldest first, each pushed to the front: the most recently used ends up at the front.
    std::sort(live.begin(), live.end(),
              [](const BlockRecord& a, const BlockRecord& b) { return a.atime_ns < b.atime_ns; });
    {
      MutexLock l(&mu_);
      for (const auto& r : live) AddLocked(r);
      stats_.bytes_used = list_.used();
    }
    // The budget may have shrunk since the last run.
    std::vector<BlockKey> victims;
    {
      MutexLock l(&mu_);
      if (list_.used() > options_.capacity_bytes) {
        CollectVictimsLocked(list_.used() - options_.capacity_bytes, 0, 0, &victims);
      }
    }
    DeleteVictims(victims);
    {
      MutexLock l(&mu_);
      Logger(Module::kTierCache)
          .info(
              "l2 opened: {} blocks, {} bytes; swept {} orphan and {} temp files, {} index "
              "records without a file; evicted {} over budget",
              list_.size(), list_.used(), orphans, temps, missing.size(), victims.size());
    }
    RefreshFreeBytes(/*force=*/true);
    return Status::OK();
  }

  std::string_view name() const override { return "l2"; }

  Result<BlockRef> Read(const BlockKey& key) override EXCLUDES(mu_) {
    std::optional<Found> found = Lookup(key, /*use=*/true);
    if (!found) return Status::NotFound("l2 miss");
    const uint32_t length = found->length;
    const uint64_t checksum = found->checksum, gen = found->gen;
    auto block = Block::Allocate(length);
    Result<size_t> n = flash_->ReadFile(BlockPath(key), block->mutable_data());
    const char* problem = nullptr;
    if (!n.ok()) {
      problem = n.status().IsNotFound() ? "file missing" : "read failed";
    } else if (*n != length) {
      problem = "short file";
    } else if (BlockChecksum(block->mutable_data().first(length)) != checksum) {
      problem = "checksum mismatch";
    }
    if (problem) return ReadFailed(key, gen, problem, n.status());
    block->set_size(length);
    MarkVerified(key, gen);
    return Served(std::move(block));
  }

  // Blocks verified in this run: the open file (the bytes are not read here). A block not yet
  // verified in this run is read whole and checked first (a failure drops it, as in Read()),
  // which also leaves its pages in the page cache for the reply.
  Result<FileExtentRef> OpenExtent(const BlockKey& key) override EXCLUDES(mu_) {
    return Extent(key, /*use=*/true);
  }

  // Readahead: every block's file is read ahead by the kernel (posix_fadvise WILLNEED: all of
  // them at once, so their disk reads overlap), then the blocks not yet verified in this run are
  // verified, in order, on this readahead thread (their pages arrive meanwhile; the reader's
  // OpenExtent then finds them verified). Verifying them one by one without the hints would wait
  // for each file's disk reads in turn, and a fast reader would catch up and check the blocks
  // itself.
  void WillNeed(std::span<const BlockKey> keys) override EXCLUDES(mu_) {
    std::vector<BlockKey> unverified;
    for (const BlockKey& key : keys) {
      {
        MutexLock l(&mu_);
        List::Node* n = list_.Find(key);
        if (n == nullptr) continue;
        if (!n->payload.verified) unverified.push_back(key);
      }
      (void)flash_->WillNeed(BlockPath(key));  // a hint: a failure only costs speed
    }
    for (const BlockKey& key : unverified) {
      (void)Extent(key, /*use=*/false);  // a damaged block is dropped here, counted as usual
    }
  }

  void AppendExtraStats(std::vector<std::pair<std::string, uint64_t>>* out) const override {
    out->emplace_back("extent_reads", extent_reads_.load());
  }

  // Reads the chunks covering the range and the matching trailer entries, and checks each
  // chunk: a random 4 KiB read costs one 32 KiB chunk, not the whole block.
  bool SupportsRanges() const override { return true; }
  Result<BlockRef> ReadRange(const BlockKey& key, uint64_t offset, uint64_t length) override
      EXCLUDES(mu_) {
    uint32_t block_len;
    uint64_t gen;
    {
      MutexLock l(&mu_);
      List::Node* n = list_.Find(key);
      if (n == nullptr) {
        ++stats_.misses;
        return Status::NotFound("l2 miss");
      }
      if (!(n->payload.flags & kFlagChunked)) return Status::NotSupported("no chunk checksums");
      block_len = n->payload.length;
      gen = n->payload.gen;
      if (!ChunksFor(block_len, offset, length).ok()) {
        return Status::InvalidArgument("range outside the block");
      }
      MarkUsedLocked(key, n);
    }
    const ChunkSpan cs = *ChunksFor(block_len, offset, length);
    std::vector<std::byte> data(cs.data_end - cs.data_begin), sums(cs.sums_bytes);
    const FlashStore::ReadRange ranges[] = {{cs.data_begin, data}, {cs.sums_begin, sums}};
    Status st = flash_->ReadAt(BlockPath(key), ranges);
    const char* problem = nullptr;
    if (!st.ok()) {
      problem = st.IsNotFound() || st.code() == Status::Code::kCorruption ? "file missing or short"
                                                                          : "read failed";
    } else if (!VerifyChunks(data, sums)) {
      problem = "chunk checksum mismatch";
    }
    if (problem) return ReadFailed(key, gen, problem, st);
    auto out = Block::Allocate(length);
    std::memcpy(out->mutable_data().data(), data.data() + (offset - cs.data_begin), length);
    out->set_size(length);
    return Served(std::move(out));
  }

  Status Insert(const BlockKey& key, const BlockRef& block, const Placement& hint) override
      EXCLUDES(mu_) {
    if (!block) return Status::InvalidArgument("null block");
    const uint64_t len = block->size();
    if (len > std::numeric_limits<uint32_t>::max()) {
      return Status::InvalidArgument("block too large for L2");
    }
    RefreshFreeBytes(/*force=*/false);
    // (A block of a quota group stays in its group: the quota holds it to its share.)
    const bool probation = hint.probation && hint.quota_group == 0;
    std::vector<BlockKey> victims;
    {
      MutexLock l(&mu_);
      bool present = false;
      TIERFS_RETURN_IF_ERROR(ReserveLocked(key, len, hint, probation, &victims, &present));
      if (present) return Status::OK();
    }
    DeleteVictims(victims);
    const BlockRecord rec = RecordFor(key, *block, hint, probation);
    const std::string path = BlockPath(key);
    const std::vector<std::byte> trailer =
        hint.whole_object ? std::vector<std::byte>() : ChunkTrailer(block->data());
    Status st = flash_->WriteFile(path, block->data(), trailer);
    if (st.ok()) {
      st = meta_->PutBlocks(std::span<const BlockRecord>(&rec, 1));
      if (!st.ok()) (void)flash_->RemoveFile(path);
    }
    MutexLock l(&mu_);
    reserved_bytes_ -= len;
    if (hint.quota_group != 0) group_reserved_[hint.quota_group] -= len;
    inserting_.erase(key);
    if (!st.ok()) {
      free_estimate_ += len;
      ++stats_.errors;
      return st.WithContext("l2 insert " + BlockKeyHex(key));
    }
    AddLocked(rec);
    list_.Find(key)->payload.verified = true;  // written from the checksummed bytes in memory
    stats_.bytes_used = list_.used();
    ++stats_.inserts;
    stats_.bytes_inserted += len;
    return Status::OK();
  }

  // Insert's room: *present when `key` is stored or being stored already (a stronger pin noted;
  // nothing reserved); else `len` bytes reserved (in its quota group too) and the blocks to
  // evict for them in *victims. NoSpace when no room can be made: a probationary block displaces
  // only probationary ones, a quota group's only its own.
  Status ReserveLocked(const BlockKey& key, uint64_t len, const Placement& hint, bool probation,
                       std::vector<BlockKey>* victims, bool* present) REQUIRES(mu_) {
    if (List::Node* n = list_.Find(key)) {
      // Content-addressed: same key, same bytes. Only a stronger pin is news.
      if (hint.pinned && list_.SetPinned(key, true)) {
        n->payload.flags |= kFlagPinned;
        dirty_.insert(key);
      }
      *present = true;
      return Status::OK();
    }
    if (inserting_.count(key)) {  // another thread is writing it
      *present = true;
      return Status::OK();
    }
    if (deleting_.count(key)) return Status::Unavailable("l2 block is being deleted");
    uint64_t need = 0;
    const uint64_t used = list_.used() + reserved_bytes_;
    if (used + len > options_.capacity_bytes) need = used + len - options_.capacity_bytes;
    // Saturating: l2_min_free may be configured up to 2^64 - 1.
    const uint64_t want_free =
        options_.min_free_bytes > UINT64_MAX - len ? UINT64_MAX : options_.min_free_bytes + len;
    if (free_estimate_ < want_free) need = std::max(need, want_free - free_estimate_);
    if (probation) {
      if (len > options_.capacity_bytes || !list_.CanFree(need, Placement::kProbationGroup, need)) {
        return Status::NoSpace("l2: no room for a probationary block but protected blocks'");
      }
      if (need > 0) CollectVictimsLocked(need, Placement::kProbationGroup, need, victims);
      need = 0;
    }
    uint64_t group_need = 0;
    if (hint.quota_group != 0 && hint.quota_bytes > 0) {
      if (len > hint.quota_bytes) {
        return Status::NoSpace("l2: the block is larger than its prefix quota");
      }
      // Inserts of the group being written count too, or parallel readahead would overshoot.
      const uint64_t g = list_.group_used(hint.quota_group) + group_reserved_[hint.quota_group];
      if (g + len > hint.quota_bytes) group_need = g + len - hint.quota_bytes;
    }
    if (len > options_.capacity_bytes || !list_.CanFree(need, hint.quota_group, group_need)) {
      ++stats_.errors;
      return Status::NoSpace(group_need > 0 ? "l2: the prefix quota is full of pinned blocks"
                                            : "l2 full: cannot make room for the block");
    }
    if (need > 0 || group_need > 0) {
      CollectVictimsLocked(need, hint.quota_group, group_need, victims);
    }
    reserved_bytes_ += len;
    if (hint.quota_group != 0) group_reserved_[hint.quota_group] += len;
    free_estimate_ -= std::min(free_estimate_, len);
    inserting_.insert(key);
    return Status::OK();
  }

  // The index record of `block` stored now under `key`.
  BlockRecord RecordFor(const BlockKey& key, const Block& block, const Placement& hint,
                        bool probation) const {
    const int64_t now = clock_->NowUnixNanos();
    BlockRecord rec;
    rec.key = key;
    rec.length = static_cast<uint32_t>(block.size());
    rec.checksum = BlockChecksum(block.data());
    rec.atime_ns = now;
    rec.stored_ns = now;
    rec.flags = (hint.pinned ? kFlagPinned : 0) | (hint.ttl_order ? kFlagTtlOrder : 0) |
                (hint.whole_object ? 0 : kFlagChunked);
    rec.group = probation ? Placement::kProbationGroup : hint.quota_group;
    rec.expires_ns = hint.ExpiresAt(now) == INT64_MAX ? 0 : hint.ExpiresAt(now);
    rec.owner = hint.owner;
    return rec;
  }

  bool Contains(const BlockKey& key) override EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return list_.Contains(key);
  }

  // The pin flag is persisted with the next access-time batch (bit 0 of BlockRecord.flags).
  void SetPinned(const BlockKey& key, bool pinned) override EXCLUDES(mu_) {
    MutexLock l(&mu_);
    if (!list_.SetPinned(key, pinned)) return;
    Entry& e = list_.Find(key)->payload;
    if (pinned) {
      e.flags |= kFlagPinned;
    } else {
      e.flags &= ~kFlagPinned;
    }
    dirty_.insert(key);
  }

  std::optional<int64_t> StoredAt(const BlockKey& key) override EXCLUDES(mu_) {
    MutexLock l(&mu_);
    List::Node* n = list_.Find(key);
    if (n == nullptr) return std::nullopt;
    return n->payload.stored_ns;
  }

  uint64_t HeldOf(const ObjectId& object, std::vector<BlockKey>* keys) override EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return list_.HeldOf(object, keys);
  }

  void Erase(const BlockKey& key) override EXCLUDES(mu_) {
    std::vector<BlockKey> victims;
    {
      MutexLock l(&mu_);
      if (!RemoveLocked(key)) return;
      deleting_.insert(key);
      victims.push_back(key);
    }
    DeleteVictims(victims);
  }

  const TierStats& Stats() const override { return stats_; }

 private:
  struct Entry {
    uint32_t length = 0;
    uint64_t checksum = 0;
    int64_t atime_ns = 0;
    int64_t indexed_atime_ns = 0;  // the atime_ns the index holds (or is being written)
    int64_t stored_ns = 0;
    int64_t expires_ns = 0;  // as in BlockRecord: 0 = never
    uint32_t flags = 0;
    uint64_t gen = 0;  // distinguishes re-inserts of the same key
    // Verified in this run (never persisted): inserted by this process from checksummed memory,
    // or read back whole and checked. Only such blocks are handed out as FileExtents.
    bool verified = false;
  };
  using List = EvictionList<Entry>;

  // A read is a use: the block moves to the recent end, and its atime is batched for LMDB once
  // it is atime_granularity past the one the index holds. A ttl-ordered block keeps its place
  // (and atime = stored).
  void MarkUsedLocked(const BlockKey& key, List::Node* n) REQUIRES(mu_) {
    if (n->meta.ttl_order) return;
    Entry& e = n->payload;
    e.atime_ns = clock_->NowUnixNanos();
    list_.Touch(key);
    if (e.atime_ns - e.indexed_atime_ns >= options_.atime_granularity.count()) dirty_.insert(key);
  }

  // What the index holds for one block, copied out under the lock.
  struct Found {
    uint32_t length;
    uint64_t checksum;
    uint64_t gen;
    bool verified;
    bool exact;  // no chunk trailer: the file ends with the block
  };

  // The index entry of `key`, or nullopt. `use`: a reader's lookup (a miss is counted, a hit
  // moves the block to the recent end).
  std::optional<Found> Lookup(const BlockKey& key, bool use) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    List::Node* n = list_.Find(key);
    if (n == nullptr) {
      if (use) ++stats_.misses;
      return std::nullopt;
    }
    if (use) MarkUsedLocked(key, n);
    return Found{n->payload.length, n->payload.checksum, n->payload.gen, n->payload.verified,
                 (n->payload.flags & kFlagChunked) == 0};
  }

  // The open, verified file of `key` (verified first if it is not yet, see OpenExtent). `use`:
  // a reader's hit (LRU touch, hit counters); else a readahead check that counts nothing but a
  // damaged block.
  Result<FileExtentRef> Extent(const BlockKey& key, bool use) EXCLUDES(mu_) {
    std::optional<Found> found = Lookup(key, use);
    if (!found) return Status::NotFound("l2 miss");
    // Named copies, not a structured binding: the check's lambda captures them (clang < 16
    // cannot capture structured bindings).
    const uint32_t length = found->length;
    const uint64_t checksum = found->checksum, gen = found->gen;
    const bool verified = found->verified, exact = found->exact;
    Result<int> fd = flash_->OpenForRead(BlockPath(key));
    if (!fd.ok()) {
      return ReadFailed(key, gen, fd.status().IsNotFound() ? "file missing" : "open failed",
                        fd.status());
    }
    auto extent = std::make_shared<const FileExtent>(*fd, 0, length, exact);
    if (!verified) {
      // One check per block however many threads want it at once: readahead checking a block
      // and the reader catching up with it would otherwise both read and hash the file (the
      // others wait for the first one's verdict).
      bool merged = false;
      Result<bool> ok = verify_flight_.Do(
          key,
          [&]() -> Result<bool> {
            if (std::optional<Found> now = Lookup(key, /*use=*/false); now && now->verified) {
              return true;  // a check that ended between our lookup and Do()
            }
            // One pass: the checksum of exactly `length` bytes.
            Result<uint64_t> sum = extent->Checksum();
            const char* problem = nullptr;
            Status st;
            if (!sum.ok()) {
              st = sum.status();
              problem = st.code() == Status::Code::kCorruption ? "short file" : "read failed";
            } else if (*sum != checksum) {
              problem = "checksum mismatch";
            }
            if (problem) return ReadFailed(key, gen, problem, st);
            MarkVerified(key, gen);
            return true;
          },
          &merged);
      if (!ok.ok()) {
        if (use && merged) ++stats_.misses;  // the leader counted its own
        return ok.status();
      }
    }
    if (use) {
      ++stats_.hits;
      stats_.bytes_read += length;
      ++extent_reads_;
      RequestAtimeFlushIfDue();
    }
    return FileExtentRef(std::move(extent));
  }

  // Records that the file of `key` (generation `gen`) was read back in this run and matched its
  // checksum: OpenExtent may hand it out without reading it.
  void MarkVerified(const BlockKey& key, uint64_t gen) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    List::Node* n = list_.Find(key);
    if (n != nullptr && n->payload.gen == gen) n->payload.verified = true;
  }

  // The successful end of Read / ReadRange.
  BlockRef Served(std::shared_ptr<Block> b) EXCLUDES(mu_) {
    ++stats_.hits;
    stats_.bytes_read += b->size();
    RequestAtimeFlushIfDue();
    return BlockRef(std::move(b));
  }

  // The end of a Read / ReadRange / OpenExtent that found the block damaged or could not read
  // it (`problem`; `io`: the I/O status, OK for a checksum mismatch). The read is a miss either
  // way and the caller goes to the next tier. Damage drops the block, so it is fetched again
  // and rewritten: a checksum mismatch or short file (`io` OK or Corruption), a missing file
  // (NotFound), or an I/O error of the cache disk (IOError, e.g. EIO: a block that cannot be
  // read back is as good as lost, and its rewrite goes to other sectors). Anything else, above
  // all a transient shortage (Unavailable: EMFILE, ENFILE, ENOMEM, ENOBUFS), says nothing about
  // the block: it stays indexed (pinned or not) and the next read tries its file again.
  Status ReadFailed(const BlockKey& key, uint64_t gen, const char* problem, const Status& io)
      EXCLUDES(mu_) {
    const bool damage = io.ok() || io.IsNotFound() || io.code() == Status::Code::kCorruption ||
                        io.code() == Status::Code::kIOError;
    if (damage) return DropDamaged(key, gen, problem, io);
    ++stats_.errors;
    ++stats_.misses;
    // Not a log line per read: under a descriptor shortage every read would write one.
    const int64_t now = clock_->MonotonicNanos();
    int64_t next = next_read_error_log_mono_.load();
    if (now >= next &&
        next_read_error_log_mono_.compare_exchange_strong(
            next, now + std::chrono::nanoseconds(std::chrono::seconds(10)).count())) {
      Logger(Module::kTierCache)
          .warn(
              "l2 block {} not readable now ({}: {}); kept, this read goes to the next tier "
              "(at most one such line every 10 s; l2.errors counts them)",
              BlockKeyHex(key), problem, io.ToString());
    }
    return io;
  }

  // ReadFailed's damage case: the block is dropped and the read is a miss (NotFound), so the
  // caller refetches it.
  Status DropDamaged(const BlockKey& key, uint64_t gen, const char* problem, const Status& io)
      EXCLUDES(mu_) {
    // Drop only the entry we looked at: if it was evicted (or replaced) meanwhile, a missing
    // file is the eviction's doing, not a corruption.
    if (DropIfGeneration(key, gen)) {
      if (io.ok() || io.IsNotFound() || io.code() == Status::Code::kCorruption) {
        ++stats_.corruptions;
      } else {
        ++stats_.errors;
      }
      Logger(Module::kTierCache)
          .warn("l2 block {} dropped ({}{}); it will be refetched", BlockKeyHex(key), problem,
                io.ok() ? "" : ": " + io.ToString());
    }
    ++stats_.misses;
    return Status::NotFound("l2 block dropped");
  }

  void AddLocked(const BlockRecord& r) REQUIRES(mu_) {
    Entry e;
    e.length = r.length;
    e.checksum = r.checksum;
    e.atime_ns = r.atime_ns;
    e.indexed_atime_ns = r.atime_ns;
    e.stored_ns = r.stored_ns;
    e.expires_ns = r.expires_ns;
    e.flags = r.flags;
    e.gen = ++next_gen_;
    List::Meta m;
    m.charge = r.length;
    m.pinned = (r.flags & kFlagPinned) != 0;
    m.ttl_order = (r.flags & kFlagTtlOrder) != 0;
    m.group = r.group;
    m.expires_ns = r.expires_ns == 0 ? List::kNoExpiry : r.expires_ns;
    m.owner = r.owner;
    list_.Add(r.key, m, e);
  }

  // Unlinks `key` from the mirror; false if it is not there.
  bool RemoveLocked(const BlockKey& key) REQUIRES(mu_) {
    if (!list_.Remove(key)) return false;
    dirty_.erase(key);
    stats_.bytes_used = list_.used();
    return true;
  }

  // Unlinks unpinned blocks from the mirror in eviction order until `need` bytes are freed, and
  // `group_need` of them from quota group `group` (REQUIRES: list_.CanFree(...)). The caller
  // deletes them (DeleteVictims).
  void CollectVictimsLocked(uint64_t need, uint32_t group, uint64_t group_need,
                            std::vector<BlockKey>* victims) REQUIRES(mu_) {
    const size_t first = victims->size();
    const uint64_t freed = list_.Evict(need, group, group_need, clock_->NowUnixNanos(),
                                       [&](List::Node&& n) { victims->push_back(n.key); });
    for (size_t i = first; i < victims->size(); ++i) {
      dirty_.erase((*victims)[i]);
      deleting_.insert((*victims)[i]);
      ++stats_.evictions;
    }
    stats_.bytes_used = list_.used();
    free_estimate_ += freed;
  }

  // Removes files and index records of blocks already unlinked from the mirror.
  void DeleteVictims(const std::vector<BlockKey>& victims) EXCLUDES(mu_) {
    if (victims.empty()) return;
    for (const auto& k : victims) {
      Status st = flash_->RemoveFile(BlockPath(k));
      if (!st.ok()) {
        ++stats_.errors;
        Logger(Module::kTierCache).warn("l2: cannot remove block file: {}", st.ToString());
      }
    }
    Status st = meta_->EraseBlocks(victims);
    if (!st.ok()) {
      // The start-up sweep drops index records whose file is gone, so this only delays cleanup.
      ++stats_.errors;
      Logger(Module::kTierCache).warn("l2: cannot erase index records: {}", st.ToString());
    }
    MutexLock l(&mu_);
    for (const auto& k : victims) deleting_.erase(k);
  }

  // Drops `key` if its mirror entry is still generation `gen`. Returns true if it dropped it.
  bool DropIfGeneration(const BlockKey& key, uint64_t gen) EXCLUDES(mu_) {
    {
      MutexLock l(&mu_);
      List::Node* n = list_.Find(key);
      if (n == nullptr || n->payload.gen != gen) return false;
      RemoveLocked(key);
      deleting_.insert(key);
    }
    DeleteVictims({key});
    return true;
  }

  // A read's share in persisting access times: when a batch is full (atime_flush_batch touched
  // blocks) or old (atime_flush_interval), wakes the flusher thread; never waits for the write.
  void RequestAtimeFlushIfDue() EXCLUDES(mu_, flush_mu_) {
    {
      MutexLock l(&mu_);
      if (dirty_.empty()) return;
      const int64_t mono = clock_->MonotonicNanos();
      if (dirty_.size() < options_.atime_flush_batch &&
          mono - last_flush_mono_ < options_.atime_flush_interval.count()) {
        return;
      }
      last_flush_mono_ = mono;
    }
    MutexLock l(&flush_mu_);
    flush_requested_ = true;
    flush_cv_.Signal();
  }

  void FlusherLoop() EXCLUDES(flush_mu_) {
    pthread_setname_np(pthread_self(), "tierfs-l2-atime");
    for (;;) {
      {
        MutexLock l(&flush_mu_);
        while (!flush_requested_ && !flush_stop_) flush_cv_.Wait();
        if (flush_stop_) return;  // the destructor writes what is left
        flush_requested_ = false;
      }
      WriteAtimes();
    }
  }

  // Writes the access times of every block touched since the last write (one PutBlocks).
  void WriteAtimes() EXCLUDES(mu_) {
    std::vector<BlockRecord> records;
    {
      MutexLock l(&mu_);
      if (dirty_.empty()) return;
      records.reserve(dirty_.size());
      for (const auto& k : dirty_) {
        List::Node* n = list_.Find(k);
        if (n == nullptr) continue;
        Entry& e = n->payload;
        records.push_back(BlockRecord{k, e.length, e.checksum, e.atime_ns, e.stored_ns, e.flags,
                                      n->meta.group, e.expires_ns, n->meta.owner});
        e.indexed_atime_ns = e.atime_ns;
      }
      dirty_.clear();
    }
    // A record written here for a block evicted meanwhile resurrects an index entry without a
    // file; the next start-up sweep removes it, and until then the mirror ignores it.
    Status st = meta_->PutBlocks(records);
    if (!st.ok()) {
      ++stats_.errors;
      Logger(Module::kTierCache).warn("l2: cannot persist access times: {}", st.ToString());
    }
  }

  void RefreshFreeBytes(bool force) EXCLUDES(mu_) {
    const int64_t mono = clock_->MonotonicNanos();
    int64_t last = last_free_check_mono_.load();
    if (!force && mono - last < options_.free_check_interval.count()) return;
    if (!force && !last_free_check_mono_.compare_exchange_strong(last, mono)) return;
    if (force) last_free_check_mono_ = mono;
    Result<uint64_t> free = flash_->FreeBytes();
    if (!free.ok()) {
      ++stats_.errors;
      Logger(Module::kTierCache).warn("l2: cannot read free space: {}", free.status().ToString());
      return;
    }
    MutexLock l(&mu_);
    free_estimate_ = *free;
  }

  // Constant after construction.
  const FlashTierOptions options_;
  FlashStore* const flash_;
  MetaStore* const meta_;
  Clock* const clock_;

  TierStats stats_;
  std::atomic<uint64_t> extent_reads_{0};  // hits served as a FileExtent (spliced)
  std::atomic<int64_t> last_free_check_mono_{0};
  std::atomic<int64_t> next_read_error_log_mono_{0};  // ReadFailed logs no kept block before

  Mutex mu_;
  List list_ GUARDED_BY(mu_);                    // the mirror of the index, in eviction order
  uint64_t reserved_bytes_ GUARDED_BY(mu_) = 0;  // inserts being written
  std::unordered_map<uint32_t, uint64_t> group_reserved_ GUARDED_BY(mu_);  // ditto per group
  uint64_t free_estimate_ GUARDED_BY(mu_) = UINT64_MAX;
  uint64_t next_gen_ GUARDED_BY(mu_) = 0;
  int64_t last_flush_mono_ GUARDED_BY(mu_) = 0;
  // The first checks of blocks in this run (Extent) in flight, one per block.
  SingleFlight<BlockKey, Result<bool>, BlockKeyHash> verify_flight_;
  std::unordered_set<BlockKey, BlockKeyHash> inserting_ GUARDED_BY(mu_);
  std::unordered_set<BlockKey, BlockKeyHash> deleting_ GUARDED_BY(mu_);
  std::unordered_set<BlockKey, BlockKeyHash> dirty_ GUARDED_BY(mu_);  // atime not persisted

  Mutex flush_mu_;
  CondVar flush_cv_{&flush_mu_};  // a batch is due, or stopping
  bool flush_requested_ GUARDED_BY(flush_mu_) = false;
  bool flush_stop_ GUARDED_BY(flush_mu_) = false;
  std::jthread flusher_;  // last: started once every member above is initialised
};

}  // namespace

Result<std::unique_ptr<Tier>> NewFlashTier(const FlashTierOptions& options, FlashStore* flash,
                                           MetaStore* meta, Clock* clock) {
  if (flash == nullptr || meta == nullptr || clock == nullptr) {
    return Status::InvalidArgument("l2: flash store, metastore and clock are required");
  }
  if (options.capacity_bytes == 0) return Status::InvalidArgument("l2: capacity_bytes is 0");
  auto tier = std::make_unique<FlashTier>(options, flash, meta, clock);
  TIERFS_RETURN_IF_ERROR(tier->Load());
  return std::unique_ptr<Tier>(std::move(tier));
}

}  // namespace tierfs
