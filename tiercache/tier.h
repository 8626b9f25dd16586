// tiercache — one level of the cache hierarchy, and the block it stores.
//
// A block is a fixed-size slice of one version of one object; the last block of an object is
// short. It is named by a BlockKey: XXH3-128 over (source, key, ETag, block size, block index)
// (MakeBlockKey), so a changed object can never be served from stale blocks and identical
// requests from different hosts name the same block (what makes the shared L3 work).
//
// Tiers: L1 memory (NewMemoryTier), L2 local flash (NewFlashTier), L3 regional object store
// shared by the hosts of a region (NewRemoteTier). The origin is not a Tier: TieredCache reads it
// through BlobStore.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/memory_budget.h"
#include "base/result.h"
#include "blobclient/blob_store.h"
#include "metastore/meta_store.h"
#include "tiercache/listing_share.h"

namespace tierfs {

// An immutable run of bytes once published. Built by the fetcher (mutable_data, set_size), then
// shared as BlockRef by every tier and reader that holds it; freed when the last ref drops.
//
// Storage of kMapThreshold bytes or more is not malloc'd: glibc raises its dynamic mmap threshold
// after the first large free, after which 1 MiB buffers come from the malloc arenas, which
// fragment and never shrink, so the daemon's RSS grew well past the L1 budget. It comes from the
// block arena (tiercache/internal/block_arena.h: size-classed slabs, freed storage reused while
// the memory kept for reuse is within a fixed budget, the rest given back to the kernel), or for
// sizes the arena does not serve from an anonymous mapping of its own, unmapped when freed.
//
// Every block's storage is charged to the process's memory budget (base/memory_budget.h,
// MemoryUse::kBlocks) while it lives, when there is one: an allocation that would take it over
// its limit first has L1 give back blocks (the budget's reclaimer).
class Block {
 public:
  static constexpr size_t kMapThreshold = 64 * 1024;
  // Uninitialised storage of `capacity` bytes; size() is 0 until set_size().
  static std::shared_ptr<Block> Allocate(size_t capacity);
  // `n` blocks of `capacity` bytes whose storage is adjacent (block k's mutable_data() starts
  // where block k - 1's ends), so that one read can fill them all, each freed on its own. Empty
  // when the block arena has no adjacent storage of that size to give without faulting in more
  // than n separate allocations would (BlockArena::AllocateAdjacent), or serves no such size.
  static std::vector<std::shared_ptr<Block>> AllocateAdjacent(size_t capacity, size_t n);
  // Bytes of block storage held by live blocks of kMapThreshold bytes or more in the whole
  // process (the storage they were given, not their sizes).
  static uint64_t MappedBytes();
  // The block arena's figures: bytes mapped in slabs, freed storage kept for reuse, and how many
  // allocations reused storage or took fresh pages.
  struct PoolStats {
    uint64_t slab_bytes = 0;
    uint64_t free_resident_bytes = 0;
    uint64_t reused = 0;
    uint64_t fresh = 0;
  };
  static PoolStats Pool();
  // Keeps up to `bytes` of block storage resident in all, live blocks and freed storage
  // (BlockArena::SetReserve; the daemon passes L1's capacity), and faults storage for blocks of
  // `block_size` in ahead of use on the calling thread, in pieces of `run_bytes` adjacent
  // storage, until that much is resident or `stop` is requested (BlockArena::Prefill). Returns
  // the bytes faulted in.
  static uint64_t Prefault(uint64_t bytes, size_t block_size, size_t run_bytes,
                           std::stop_token stop);
  // Keeps at most `bytes` of freed block storage for reuse beyond what was freed in the last
  // few seconds (the daemon lowers it under memory.limit; 64 MiB by default).
  static void LimitPool(uint64_t bytes);
  std::span<std::byte> mutable_data() { return {data_.get(), capacity_}; }
  std::span<const std::byte> data() const { return {data_.get(), size_}; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  void set_size(size_t n) { size_ = n; }

 private:
  struct Free {
    // (No default member initializer: unique_ptr needs Free default-constructible while Block
    // is still incomplete.)
    Free() : mapped(0), slab(nullptr), charged(0) {}
    explicit Free(size_t m, void* s = nullptr) : mapped(m), slab(s), charged(0) {}
    size_t mapped;   // bytes of storage, or 0 when it came from new[]
    void* slab;      // the arena slab it came from, or null for a mapping of its own
    size_t charged;  // bytes charged to the process's memory budget (MemoryUse::kBlocks)
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte[], Free> data_;
  size_t capacity_ = 0;
  size_t size_ = 0;
};
using BlockRef = std::shared_ptr<const Block>;

// An open, read-only file that holds a block's bytes at [offset(), offset() + length()): the L2
// block file, so that a reply can send the bytes straight from the file (splice, no copy through
// user space). Only handed out for bytes the tier has verified (tiercache/FORMAT.md, "Verified
// state"). Closes the descriptor when the last reference drops; an evicted block's file stays
// readable through it until then.
class FileExtent {
 public:
  FileExtent(int fd, uint64_t offset, uint64_t length, bool exact = false)
      : fd_(fd), offset_(offset), length_(length), exact_(exact) {}
  ~FileExtent();
  FileExtent(const FileExtent&) = delete;
  FileExtent& operator=(const FileExtent&) = delete;
  int fd() const { return fd_; }
  uint64_t offset() const { return offset_; }
  uint64_t length() const { return length_; }
  // The file holds exactly the extent's bytes: offset 0, and nothing after them (an L2 block
  // stored without a chunk trailer). Only such a file may be handed to the kernel to read on its
  // own (FUSE passthrough), which reads the file up to its end.
  bool exact() const { return exact_; }
  // Every page of the extent is in the page cache now (cachestat(2), Linux 6.5+; false where the
  // kernel cannot tell): a hint that the file was read lately.
  bool AllCached() const;
  // Copies bytes [at, at + out.size()) of the extent into `out` (pread): for callers that need
  // the bytes in memory. Corruption if the file is shorter.
  Status ReadAt(uint64_t at, std::span<std::byte> out) const;
  // BlockChecksum (XXH3-64) of the extent's bytes, read in pieces through a small per-thread
  // buffer. Errors as ReadAt's.
  Result<uint64_t> Checksum() const;

 private:
  const int fd_;
  const uint64_t offset_, length_;
  const bool exact_;
};
using FileExtentRef = std::shared_ptr<const FileExtent>;

// XXH3-128 of the length-prefixed fields. Stable across versions: FORMAT.md documents it.
BlockKey MakeBlockKey(std::string_view source, std::string_view key, std::string_view etag,
                      uint64_t block_size, uint64_t block_index);
// The version field of an object's block keys: its ETag, or for an object without one
// " size=<size> mtime_ns=<mtime_ns>" (a space cannot occur in an ETag), so that block keys are
// never version-less (FORMAT.md).
std::string BlockVersion(const ObjectInfo& info);
// MakeBlockKey with BlockVersion(info) as the version: what every reader of a source uses.
BlockKey MakeBlockKey(std::string_view source, std::string_view key, const ObjectInfo& info,
                      uint64_t block_size, uint64_t block_index);
// The id of one version of an object as cut into blocks of `block_size` (the owner its blocks
// are indexed by in the tiers, BlockOwner): XXH3-128 of "tierfs-object" (13 bytes) and the
// length-prefixed source, key and BlockVersion(info), then u64 LE block_size (FORMAT.md).
ObjectId MakeObjectId(std::string_view source, std::string_view key, const ObjectInfo& info,
                      uint64_t block_size);
// The key of a sparse entry (TieredCacheOptions::sparse_read_max; FORMAT.md "Sparse entries"):
// bytes [chunk * kSparseChunkBytes, chunk * kSparseChunkBytes + length) of the block named
// `block`. XXH3-128 of "tierfs-chunk" (12 bytes), the 16 bytes of `block`, u64 LE
// kSparseChunkBytes, u64 LE chunk, u64 LE length. The length is part of the key so that a key
// still names exactly one byte string, and the chunk size so that an entry cut at another size
// (an older cache's 32 KiB chunks) is never taken for one of these.
inline constexpr uint64_t kSparseChunkBytes = 4 << 10;
BlockKey MakeChunkKey(const BlockKey& block, uint64_t chunk, uint64_t length);
std::string BlockKeyHex(const BlockKey& key);
// XXH3-64 of the data: the checksum stored with every block on flash and in L3.
uint64_t BlockChecksum(std::span<const std::byte> data);

struct TierStats {
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> bytes_read{0};  // bytes served from this tier
  std::atomic<uint64_t> inserts{0};
  std::atomic<uint64_t> bytes_inserted{0};
  std::atomic<uint64_t> evictions{0};
  std::atomic<uint64_t> corruptions{0};  // blocks that failed their checksum (dropped)
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> bytes_used{0};  // current occupancy
  std::atomic<uint64_t> capacity{0};    // byte budget
};

// The request-level counters of a BlobStore as "<name>=<value>" pairs for StatsText
// (retries, hedges, hedge_wins, concurrency_limit, throttled (limit cuts), throttled_answers
// (503/429), ttfb_p95_us, parallel_reads, credential_refreshes, credential_refresh_failures,
// credential_forced_refreshes).
void AppendStoreStats(const BlobStoreStats& s, std::vector<std::pair<std::string, uint64_t>>* out);

// Which blocks the host's flash tier (L2) keeps (tiercache/admission.h): kDefault follows the
// cache's default (cache.admit) and its scan detection; the others are set by a policy.
enum class AdmitPolicy : uint8_t { kDefault = 0, kAlways = 1, kReuse = 2, kNever = 3 };

// Hints that travel with an insert, from the object's policy (tiercache/policy.h).
// L1 and L2 evict by tiercache/internal/eviction_list.h: expired blocks first, then a quota
// group over its budget gives up its own blocks, then least recently used.
struct Placement {
  bool pinned = false;  // never evicted from this tier (L1/L2) while pinned
  // Cached data older than this is refetched (TieredCache checks Tier::StoredAt on reads), and
  // a block past it is evicted before any live block.
  std::chrono::nanoseconds ttl = std::chrono::nanoseconds::max();
  int64_t stored_ns = 0;   // wall-clock insert time for tiers without a clock (L1); 0: unknown
  bool ttl_order = false;  // policy=ttl: evicted in the order stored; reads do not refresh it
  // [[policy]] quota: the block belongs to quota group `quota_group` (0: none), which may hold
  // at most `quota_bytes` in each host tier (L1 applies it per shard, see NewMemoryTier).
  uint32_t quota_group = 0;
  uint64_t quota_bytes = 0;
  // [[policy]] admit / user.tierfs.admit: L2 admission (TieredCache decides before the insert).
  AdmitPolicy admit = AdmitPolicy::kDefault;
  // Set by TieredCache from admission (AdmitDecision::kProbation): L2 stores the block as
  // probationary, in free room or in place of other probationary blocks only, never evicting a
  // protected one (a first sight of a `reuse` block, or a scan's). Other tiers ignore it.
  bool probation = false;
  // The group L2 keeps probationary blocks in (the group field of their index records,
  // tiercache/FORMAT.md); never a quota group's id (QuotaGroupId).
  static constexpr uint32_t kProbationGroup = 0xFFFFFFFFu;
  // Set by TieredCache: the block is the whole object (block 0 of an object of at most one
  // block). L2 then stores it without a chunk trailer, so that its file holds exactly the
  // object's bytes and can back a file the kernel reads directly (FileExtent::exact).
  bool whole_object = false;
  // Set by TieredCache: the object and block index the block (or sparse entry) belongs to, by
  // which the tier indexes it for HeldOf. Unknown (zero): the block is found only by its key.
  BlockOwner owner = {};

  // stored_ns + ttl, or INT64_MAX if the block never expires (or stored_ns is unknown).
  int64_t ExpiresAt(int64_t stored) const {
    if (ttl == std::chrono::nanoseconds::max() || stored <= 0) return INT64_MAX;
    return ttl.count() > INT64_MAX - stored ? INT64_MAX : stored + ttl.count();
  }
};

// Thread-safe; no external synchronization needed.
class Tier {
 public:
  virtual ~Tier() = default;
  virtual std::string_view name() const = 0;  // "l1", "l2", "l3"

  // NotFound on a miss (a normal outcome, not logged). A block that fails its checksum is
  // dropped by the tier and reported as NotFound too (counted in corruptions), so the caller
  // fetches it again from below. Other errors: the tier is unhealthy; the caller goes below.
  virtual Result<BlockRef> Read(const BlockKey& key) = 0;
  // Read() of every key, one result per key in order (a run of adjacent blocks for readahead).
  // A tier whose reads wait on the network (L3) issues them concurrently; the default reads one
  // after the other.
  virtual std::vector<Result<BlockRef>> ReadMany(std::span<const BlockKey> keys) {
    std::vector<Result<BlockRef>> out;
    out.reserve(keys.size());
    for (const BlockKey& k : keys) out.push_back(Read(k));
    return out;
  }

  // Offers a block. The tier may decline (NoSpace when everything is pinned, NotSupported).
  // Visible to readers only once fully written and indexed (transactional insert).
  virtual Status Insert(const BlockKey& key, const BlockRef& block, const Placement& hint) = 0;

  virtual bool Contains(const BlockKey& key) = 0;
  virtual void Erase(const BlockKey& key) = 0;
  // What the tier holds of one object, by the owner its inserts named (Placement::owner): the
  // number of its whole blocks, and when `keys` is not null, every key held for it (its blocks
  // and their sparse entries) appended to *keys. Costs what the tier holds of the object, never
  // the object's size. Blocks stored without an owner (by an older tierfs) are not found. For a
  // shared tier (L3): the blocks this process uploaded or read there (see NoteOwner).
  virtual uint64_t HeldOf(const ObjectId& object, std::vector<BlockKey>* keys) = 0;
  // The block `key` just read from this tier belongs to `owner`. A tier whose reads do not learn
  // the owner (L3: Read takes only the key) records it for HeldOf; no-op for the others (their
  // blocks got the owner with their insert).
  virtual void NoteOwner(const BlockKey& key, const BlockOwner& owner) {}
  virtual const TierStats& Stats() const = 0;

  // Bytes [offset, offset + length) of a block the tier holds, without reading the whole block
  // where the tier can verify a part (L2: per-chunk checksums). Same outcomes as Read();
  // NotSupported: use Read() (always, unless SupportsRanges(); L2 for blocks stored without
  // chunk checksums).
  virtual bool SupportsRanges() const { return false; }
  virtual Result<BlockRef> ReadRange(const BlockKey& key, uint64_t offset, uint64_t length) {
    return Status::NotSupported("partial reads");
  }
  // The block as a FileExtent a reply can splice from, for tiers that keep blocks in files (L2).
  // Only verified bytes are handed out: a block not yet verified in this run is read whole and
  // checked first (a failure drops it, as in Read()). Counts as a hit. NotFound on a miss or a
  // dropped block; NotSupported: use Read().
  virtual Result<FileExtentRef> OpenExtent(const BlockKey& key) {
    return Status::NotSupported("file extents");
  }
  // A hint that these blocks will be read soon, in this order (L2: the kernel starts reading all
  // their files into the page cache at once, asynchronously, and blocks not yet verified in this
  // run are then verified in order, each as its pages arrive). Keys the tier does not hold are
  // skipped. No-op for tiers without files.
  virtual void WillNeed(std::span<const BlockKey> keys) {}
  // Pins or unpins a block the tier holds (no-op if it does not hold it, or for tiers without
  // pins). A pinned block is never evicted; Erase still drops it.
  virtual void SetPinned(const BlockKey& key, bool pinned) {}
  // When the block was stored (wall clock, ns), if the tier holds it and knows.
  virtual std::optional<int64_t> StoredAt(const BlockKey& key) { return std::nullopt; }
  // Counters beyond TierStats, appended as (name without the tier prefix, value), e.g.
  // ("write.dropped", 3); TieredCache::StatsText prints them as "<tier>.<name>=<value>".
  virtual void AppendExtraStats(std::vector<std::pair<std::string, uint64_t>>* out) const {}
  // The tier's store for directory listings shared between hosts (L3), or nullptr. Lives as
  // long as the tier.
  virtual ListingShare* listing_share() { return nullptr; }
};

struct MemoryTierOptions {
  uint64_t capacity_bytes = 1ULL << 30;  // --l1-size
  int shards = 16;
  // The largest block the tier is given (cache.block_size; 0: unknown). With it, a small tier
  // gets fewer shards than `shards`, so that each shard holds at least kMinBlocksPerShard such
  // blocks: with 16 shards an 8 MiB L1 of 1 MiB blocks had 512 KiB shards and held nothing.
  uint64_t block_bytes = 0;
  static constexpr uint64_t kMinBlocksPerShard = 4;
  // The memory budget the blocks count against (memory.limit), or null. Set: the blocks L1 holds
  // are charged as MemoryUse::kL1 (moved from kBlocks, where their storage is charged), and L1
  // is the budget's reclaimer: it evicts its least recently used unpinned blocks when another
  // charge needs room, so it holds at most what the budget leaves. Not owned; must outlive the
  // tier.
  MemoryBudget* memory_budget = nullptr;
};
// The shards a memory tier with `options` has: `options.shards`, fewer when the capacity gives
// each fewer than kMinBlocksPerShard blocks of block_bytes, at least 1.
int MemoryTierShards(const MemoryTierOptions& options);
// L1: sharded LRU, charge = block bytes (leveldb Cache model). A block held by a reader stays
// alive through its BlockRef even after eviction, so the budget counts cached blocks only.
// Budgets are per shard: capacity/shards (MemoryTierShards), and a quota group may hold
// quota/shards in a shard (at least the block being inserted), so a group's L1 share is its quota
// give or take the unevenness of the key hash.
std::unique_ptr<Tier> NewMemoryTier(const MemoryTierOptions& options);

// The seam below the L2 tier (conventions C7): block files on local flash.
// Thread-safe. Paths are relative to the cache directory.
class FlashStore {
 public:
  virtual ~FlashStore() = default;
  // Writes a whole file atomically (temp file + rename); optionally fsyncs. The file is `data`
  // followed by `trailer` (may be empty).
  virtual Status WriteFile(const std::string& rel_path, std::span<const std::byte> data,
                           std::span<const std::byte> trailer) = 0;
  // Reads up to out.size() bytes from the start of the file; returns bytes read.
  virtual Result<size_t> ReadFile(const std::string& rel_path, std::span<std::byte> out) = 0;
  // Fills each range's `out` from its `offset`, with one open of the file. A range the file
  // does not cover in full is an error (Corruption: "short file").
  struct ReadRange {
    uint64_t offset = 0;
    std::span<std::byte> out;
  };
  virtual Status ReadAt(const std::string& rel_path, std::span<const ReadRange> ranges) = 0;
  virtual Status RemoveFile(const std::string& rel_path) = 0;
  // Opens the file read-only; the caller owns (and closes) the descriptor.
  virtual Result<int> OpenForRead(const std::string& rel_path) = 0;
  // Asks the kernel to read the file into the page cache (posix_fadvise WILLNEED); returns at once.
  virtual Status WillNeed(const std::string& rel_path) = 0;
  // Free bytes on the filesystem holding the cache directory (statvfs f_bavail * f_frsize).
  virtual Result<uint64_t> FreeBytes() = 0;
  // Lists every file below the root (relative paths), for the start-up orphan sweep.
  virtual Status ListFiles(std::vector<std::string>* out) = 0;
};
// Real block files under `root` (created if missing).
Result<std::unique_ptr<FlashStore>> NewPosixFlashStore(const std::string& root, bool fsync);

struct FlashTierOptions {
  uint64_t capacity_bytes = 10ULL << 30;  // --l2-size
  uint64_t min_free_bytes = 1ULL << 30;   // free-space floor on the cache filesystem
  // How often FlashStore::FreeBytes (statvfs) is consulted; between checks the tier estimates
  // free space from the bytes it wrote and deleted itself.
  std::chrono::nanoseconds free_check_interval = std::chrono::seconds(1);
  // Access times are persisted lazily: a batch is written when this many blocks were touched or
  // this much time passed since the last batch (and when the tier is destroyed), by the tier's
  // own thread ("tierfs-l2-atime"): the read that fills a batch does not wait for its write.
  size_t atime_flush_batch = 1024;
  std::chrono::nanoseconds atime_flush_interval = std::chrono::seconds(30);
  // A use counts towards a batch only when it is at least this much later than the access time
  // the index holds for the block (relatime, for the index): the LRU order a restart rebuilds is
  // exact to within this, and reading blocks again within it writes nothing to the index (an
  // epoch over a dataset read a minute ago writes no record). 0: every use. In memory the LRU
  // order is always exact.
  std::chrono::nanoseconds atime_granularity = std::chrono::minutes(10);
};
// L2: one file per block under the FlashStore + the block index in MetaStore; LRU by access time
// (rebuilt from the index at start-up, so a restart keeps the cache); checksum verified on every
// read. `flash` and `meta` are not owned and must outlive the tier.
Result<std::unique_ptr<Tier>> NewFlashTier(const FlashTierOptions& options, FlashStore* flash,
                                           MetaStore* meta, Clock* clock);

struct RemoteTierOptions {
  // Largest block the tier reads or writes (TieredCacheOptions::block_size): a read GETs at most
  // this plus the object header.
  uint64_t block_size = 1ULL << 20;
  // Blocks stored longer ago than this are ignored (a miss); kForever keeps them. `tierfs l3 gc`
  // deletes them. Config: cache.l3_ttl.
  std::chrono::nanoseconds ttl = std::chrono::nanoseconds::max();
  // Write-back queue, in blocks (each holds a reference to its block's bytes until uploaded). A
  // full queue drops the write (counted in write.dropped); a reader never waits for L3.
  // Config: cache.l3_write_queue.
  size_t write_queue = 256;
  int write_threads = 2;  // owned uploader threads "tierfs-l3-w"
  // Circuit breaker: after this many consecutive failed requests (errors other than NotFound)
  // the tier is skipped (reads miss at once, writes are dropped) for `breaker_cooldown`; then
  // requests are let through again and the first success closes the breaker.
  int breaker_failures = 5;
  std::chrono::nanoseconds breaker_cooldown = std::chrono::seconds(15);
  // Bound of the in-memory set of blocks known to be in L3 (written or read by this process);
  // Contains() answers from it. When full it is cleared (it is only a hint).
  size_t known_keys_max = 1 << 18;
  // Secret key of the L3 objects' HMAC-SHA256 (cache.l3_key_file; a secret: never logged). Set:
  // every object written carries a MAC over its header and bytes, and a read accepts only
  // objects whose MAC verifies with this key (others are corruptions: a miss, never served).
  // Empty: no MAC is written or required, and L3 is trusted as far as its checksum goes.
  std::string mac_key;
  // ReadMany (a readahead or hydrate run) issues its GETs at once from the calling thread and
  // helper threads (an owned pool "tierfs-l3-r"; the call waits for its helpers): at most
  // read_parallel - 1 helpers per call and read_parallel helpers over all calls running at once
  // (the rest of a run is read by its caller's thread). 1: one GET after the other.
  int read_parallel = 8;
};

// L3: a tier over any S3-compatible BlobStore (MinIO, Ceph RGW, S3 Express; `file://` works too)
// shared by every host of a region. One object per block, "blocks/<32 hex>" (BlockKeyHex) under
// the store's prefix: a header (magic, version, length, XXH3-64 checksum, stored-at time, block
// key, and with a mac_key an HMAC-SHA256; tiercache/FORMAT.md) followed by the bytes. Read = one
// GET, verified (a bad object is counted in corruptions and is a miss); Insert = enqueued for
// asynchronous upload. Any store
// error is a miss for the caller. `store` and `clock` are not owned and must outlive the tier.
Result<std::unique_ptr<Tier>> NewRemoteTier(const RemoteTierOptions& options, BlobStore* store,
                                            Clock* clock);

// `tierfs l3 gc`: lists blocks/ of an L3 store, deletes blocks stored longer ago than `ttl`
// (by the store's Last-Modified), then the oldest blocks until at most `max_bytes` remain. Only
// objects in tierfs's own format are deleted: a name "blocks/<32 hex>" and, read before each
// delete, a header with tierfs's magic, a known version and that same block key. Anything else
// is counted in `foreign` and left alone (and does not count against max_bytes).
struct RemoteGcOptions {
  std::chrono::nanoseconds ttl = std::chrono::nanoseconds::max();  // kForever: no expiry
  uint64_t max_bytes = UINT64_MAX;                                 // no trim
  bool dry_run = false;  // count what would be deleted, delete nothing
};
struct RemoteGcReport {
  uint64_t objects = 0, bytes = 0;          // found under blocks/
  uint64_t expired = 0, expired_bytes = 0;  // deleted (or would be) for their age
  uint64_t trimmed = 0, trimmed_bytes = 0;  // deleted (or would be) to fit max_bytes
  uint64_t foreign = 0, foreign_bytes = 0;  // not tierfs's format: left alone
  uint64_t delete_errors = 0;               // deletes (or header reads before one) that failed
  uint64_t remaining_objects = 0, remaining_bytes = 0;  // tierfs blocks left
};
Result<RemoteGcReport> GcRemoteTier(const RemoteGcOptions& options, BlobStore* store, Clock* clock);

}  // namespace tierfs
