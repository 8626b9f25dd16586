// metastore — durable metadata in LMDB. The one public header of the module (conventions C2).
//
// Holds, for every source (origin) the host has mounted:
//   * directory listings: one record per directory (when it was listed) and one per entry
//     (name → file/dir + size, ETag, mtime), so a lookup is one point read and readdir a range
//     scan, however large the directory;
//   * the L2 block index: block key → where the block lives on flash, its length, checksum and
//     last access time;
//   * small named values (schema version, per-path policies, the prefetch queue in later work).
//
// Keys are strings chosen by the caller. Directory keys are "<source>\n<dir path>" by convention
// of tiercache (see tiercache/FORMAT.md); the metastore does not interpret them.
// Missing data is std::nullopt, not an error. Errors are IOError/Corruption/NoSpace.
//
// Thread-safe; no external synchronization needed. Readers never block each other or the writer
// (LMDB MVCC); writes are serialised.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace tierfs {

enum class EntryType : uint8_t { kFile = 1, kDir = 2 };

struct DirEntry {
  std::string name;  // one path component, no '/'
  EntryType type = EntryType::kFile;
  uint64_t size = 0;     // files only
  std::string etag;      // files only
  int64_t mtime_ns = 0;  // files only (directories: 0)
  // Owner, group and permission bits (0777) as the origin reports them (file://); S3 entries
  // have none (owner_known false) and show the mount's fuse.uid/gid/file_mode/dir_mode.
  bool owner_known = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t mode = 0;
};

struct DirRecord {
  int64_t listed_at_ns = 0;  // wall clock time the listing was fetched (for metadata_ttl)
  uint64_t entry_count = 0;
};

// 16-byte content key of a block: XXH3-128 of (source, key, etag, block size, block index).
using BlockKey = std::array<uint8_t, 16>;
// 16-byte key of one version of one object as cut into blocks: XXH3-128 of (source, key, etag,
// block size) (tiercache MakeObjectId). The blocks a tier holds are indexed by it, so that what
// is cached of one object is found at the cost of what is cached of it, not of its size.
using ObjectId = std::array<uint8_t, 16>;

// The object a stored block (or sparse entry) belongs to. An all-zero `object`: unknown (a
// record written before owners were stored).
struct BlockOwner {
  ObjectId object{};
  uint64_t index = 0;  // the block's index in the object
  bool chunk = false;  // a sparse entry of block `index` (a part of it), not the whole block
  bool known() const {
    for (uint8_t b : object) {
      if (b != 0) return true;
    }
    return false;
  }
};

struct BlockRecord {
  BlockKey key{};
  uint32_t length = 0;     // bytes of data in the block (the last block of an object is short)
  uint64_t checksum = 0;   // XXH3-64 of the data
  int64_t atime_ns = 0;    // last access (wall clock), for LRU ordering across restarts
  int64_t stored_ns = 0;   // when the block was written (for TTLs)
  uint32_t flags = 0;      // bit 0: pinned; bit 1: evicted in stored order (policy=ttl)
  uint32_t group = 0;      // quota group of the block's [[policy]] prefix; 0: none
  int64_t expires_ns = 0;  // when its TTL runs out (wall clock); 0: never
  BlockOwner owner = {};   // which object the block belongs to (unknown in older records)
};

// Longest key the store accepts, in bytes (LMDB's default key limit): a directory entry needs
// dir_key.size() + 1 + name.size() <= kMaxMetaKeyBytes, a value name name.size() <=
// kMaxMetaKeyBytes. Writes of longer keys fail with InvalidArgument; reads of them find nothing.
// Both implementations enforce it, so tests over NewMemMetaStore() see the same refusals.
// Likewise: dir keys are non-empty without NUL; entry names are non-empty without '/' or NUL.
inline constexpr size_t kMaxMetaKeyBytes = 511;

struct MetaStoreOptions {
  std::string path;  // directory holding data.mdb/lock.mdb; created if missing
  // How messages name the store; empty: `path`. For a `path` an operator would not recognise
  // (the daemon opens its store through /proc/self/fd/N/meta).
  std::string display_path;
  uint64_t map_size = 64ULL << 30;  // LMDB map size (virtual; sparse on disk)
  // Writes are committed by a single writer thread in batches; durability of the last few
  // milliseconds of index updates is traded for throughput (MDB_NOSYNC + periodic sync). A lost
  // index update only loses a cache entry, never serves wrong bytes.
  bool sync_every_commit = false;
  // Largest number of directory entries ReplaceDir writes in one transaction (see there): a
  // directory of millions of entries never needs one huge write transaction (LMDB's dirty-page
  // limit, and every other writer waiting behind it).
  size_t dir_entries_per_txn = 50'000;
};

struct MetaStoreStats {
  uint64_t reads = 0;
  uint64_t writes = 0;   // records written
  uint64_t commits = 0;  // write transactions
  uint64_t map_bytes_used = 0;
};

class MetaStore {
 public:
  virtual ~MetaStore() = default;

  // ---- directory listings ----
  virtual Result<std::optional<DirRecord>> GetDir(std::string_view dir_key) = 0;
  virtual Result<std::optional<DirEntry>> GetDirEntry(std::string_view dir_key,
                                                      std::string_view name) = 0;
  // Up to `max` entries with name > `after` ("" = from the start), in byte order of name.
  virtual Status ListDirEntries(std::string_view dir_key, std::string_view after, size_t max,
                                std::vector<DirEntry>* out) = 0;
  // Replaces the directory's record and all its entries (a name given twice: the last wins).
  // Up to MetaStoreOptions::
  // dir_entries_per_txn entries this is one atomic transaction. A larger directory is written in
  // chunks of that many entries, one transaction each, in name order (each chunk also removes
  // the old entries of its name range), and the record last: a concurrent reader sees every name
  // in its old or its new state, never a missing one that exists in both, and the record (its
  // listed_at) changes only once every entry is written. If a chunk fails, the record stays the
  // old one (the listing stays stale and is listed again). REQUIRES: no concurrent ReplaceDir of
  // the same directory (tiercache's single-flight guarantees it).
  virtual Status ReplaceDir(std::string_view dir_key, const DirRecord& record,
                            std::span<const DirEntry> entries) = 0;
  // Inserts or replaces one entry without touching the others (after a HEAD refreshed it).
  virtual Status PutDirEntry(std::string_view dir_key, const DirEntry& entry) = 0;
  // Removes one entry (the object is gone).
  virtual Status DeleteDirEntry(std::string_view dir_key, std::string_view name) = 0;
  // Removes the record and the entries of every directory whose key starts with `key_prefix`.
  virtual Status DropDirs(std::string_view key_prefix) = 0;

  // ---- L2 block index ----
  virtual Result<std::optional<BlockRecord>> GetBlock(const BlockKey& key) = 0;
  virtual Status PutBlocks(std::span<const BlockRecord> records) = 0;
  virtual Status EraseBlocks(std::span<const BlockKey> keys) = 0;
  // Calls fn for every block record (no order promised). Used at start-up to rebuild the
  // in-memory LRU of L2. fn returns false to stop early.
  virtual Status ScanBlocks(const std::function<bool(const BlockRecord&)>& fn) = 0;

  // ---- small named values ----
  virtual Result<std::optional<std::string>> GetValue(std::string_view name) = 0;
  virtual Status PutValue(std::string_view name, std::string_view value) = 0;
  virtual Status DeleteValue(std::string_view name) = 0;
  // Values whose name starts with `prefix`, in byte order: (name, value) pairs.
  virtual Status ScanValues(std::string_view prefix,
                            const std::function<bool(std::string_view, std::string_view)>& fn) = 0;

  // Makes everything written so far durable (fsync).
  virtual Status Sync() = 0;

  virtual MetaStoreStats Stats() const = 0;
};

// Opens (creating if needed) the LMDB environment at options.path. Fails with
// FailedPrecondition if the schema version on disk is newer than this binary understands (the
// data is fine, this binary is old: the caller must not discard it), and with Corruption if the
// files are damaged or not LMDB (the daemon then moves them aside and starts an empty index).
Result<std::unique_ptr<MetaStore>> NewLmdbMetaStore(const MetaStoreOptions& options);

// An in-memory MetaStore with the same semantics, for tests (conventions C7).
std::unique_ptr<MetaStore> NewMemMetaStore();

}  // namespace tierfs
