// LmdbMetaStore: see lmdb_meta_store.h for the contract and metastore/FORMAT.md for the bytes.
#include "metastore/lmdb_meta_store.h"

#include <lmdb.h>
#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "base/coding.h"
#include "base/logging.h"
#include "metastore/internal/lmdb_txn.h"
#include "metastore/internal/records.h"
#include "metastore/key_rules.h"

namespace tierfs {
namespace metastore_internal {
namespace {

// The store's name in messages (MetaStoreOptions::display_path).
const std::string& ShownPath(const MetaStoreOptions& o) {
  return o.display_path.empty() ? o.path : o.display_path;
}

using Clock = std::chrono::steady_clock;

constexpr std::string_view kSchemaVersionKey = "schema_version";

// Operations per group commit. Bounds the dirty pages of one transaction (MDB_TXN_FULL) and
// the latency the first caller of a batch sees.
constexpr size_t kMaxBatchOps = 1024;
// Records read per read transaction by the scans, so a long scan never pins old pages for long
// and no transaction is open while the caller's callback runs.
constexpr size_t kScanChunk = 1024;
constexpr auto kSyncInterval = std::chrono::seconds(1);
constexpr unsigned int kMaxReaders = 1024;

// The store's directory (and its parents): private to the daemon's user, 0700.
Status CreateStoreDir(const MetaStoreOptions& options) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(options.path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    return Status::FromErrno(ec.value(), "creating meta store directory " + ShownPath(options));
  }
  if (::mkdir(options.path.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, "creating meta store directory " + ShownPath(options));
  }
  return Status::OK();
}

// The schema version record in `meta`: written in an empty store (the `data` sub-databases hold
// nothing), checked against this binary's otherwise.
Status CheckSchema(Txn* txn, MDB_dbi meta, std::initializer_list<MDB_dbi> data,
                   const std::string& where) {
  auto& log = Logger(Module::kMetaStore);
  TIERFS_ASSIGN_OR_RETURN(auto version, txn->Get(meta, kSchemaVersionKey));
  if (!version.has_value()) {
    // No version record: only acceptable for an empty environment, which gets the current one.
    for (MDB_dbi dbi : data) {
      MDB_stat st;
      const int rc = mdb_stat(txn->get(), dbi, &st);
      if (rc != MDB_SUCCESS) return MdbStatus(rc, where + ": mdb_stat");
      if (st.ms_entries != 0) {
        return Status::Corruption(where + ": data present but no schema version record");
      }
    }
    std::string v;
    PutFixed32(&v, kSchemaVersion);
    WriteTxn w(txn->get());
    TIERFS_RETURN_IF_ERROR(w.Put(meta, kSchemaVersionKey, v).WithContext(where));
    log.info("{}: initialised empty store at schema version {}", where, kSchemaVersion);
    return Status::OK();
  }
  if (version->size() != 4) {
    return Status::Corruption(where + ": schema version record is not 4 bytes");
  }
  const uint32_t on_disk = DecodeFixed32(version->data());
  if (on_disk > kSchemaVersion) {
    Status s = Status::FailedPrecondition(
        where + ": schema version " + std::to_string(on_disk) +
        " is newer than this binary understands (" + std::to_string(kSchemaVersion) +
        "); refusing to open. Upgrade tierfs, or delete the directory to start an empty "
        "cache index");
    log.error("{}", s.message());
    return s;
  }
  if (on_disk < kSchemaVersion) {
    // Upgrades run here, one step per version, inside this transaction (FORMAT.md). There is no
    // older schema than 1 yet, so anything lower is not ours.
    return Status::Corruption(where + ": unknown schema version " + std::to_string(on_disk));
  }
  return Status::OK();
}

}  // namespace

void LmdbMetaStore::EnvCloser::operator()(MDB_env* env) const { mdb_env_close(env); }

Result<std::unique_ptr<LmdbMetaStore>> LmdbMetaStore::Open(const MetaStoreOptions& options) {
  if (options.path.empty()) return Status::InvalidArgument("meta store path is empty");
  TIERFS_RETURN_IF_ERROR(CreateStoreDir(options));
  const std::string where = "meta store " + ShownPath(options);
  TIERFS_ASSIGN_OR_RETURN(auto env, OpenEnv(options, where));
  TIERFS_ASSIGN_OR_RETURN(const Dbis dbis, OpenDbis(env.get(), where));
  // The key limit is part of the interface (kMaxMetaKeyBytes), not of the liblmdb build.
  const int lmdb_max_key = mdb_env_get_maxkeysize(env.get());
  if (lmdb_max_key < 0 || static_cast<size_t>(lmdb_max_key) < kMaxMetaKeyBytes) {
    return Status::Internal(where + ": liblmdb built with MDB_MAXKEYSIZE " +
                            std::to_string(lmdb_max_key) + " < " +
                            std::to_string(kMaxMetaKeyBytes));
  }
  const size_t max_key = kMaxMetaKeyBytes;
  Logger(Module::kMetaStore)
      .info("{}: opened (map_size {} MiB, {})", where, options.map_size >> 20,
            options.sync_every_commit ? "sync every commit" : "nosync + periodic sync");
  return std::unique_ptr<LmdbMetaStore>(new LmdbMetaStore(options, env.release(), dbis, max_key));
}

Result<std::unique_ptr<MDB_env, LmdbMetaStore::EnvCloser>> LmdbMetaStore::OpenEnv(
    const MetaStoreOptions& options, const std::string& where) {
  auto& log = Logger(Module::kMetaStore);
  MDB_env* raw = nullptr;
  int rc = mdb_env_create(&raw);
  if (rc != MDB_SUCCESS) return MdbStatus(rc, "mdb_env_create");
  std::unique_ptr<MDB_env, EnvCloser> env(raw);
  if ((rc = mdb_env_set_maxdbs(env.get(), 8)) != MDB_SUCCESS ||
      (rc = mdb_env_set_maxreaders(env.get(), kMaxReaders)) != MDB_SUCCESS ||
      (rc = mdb_env_set_mapsize(env.get(), options.map_size)) != MDB_SUCCESS) {
    return MdbStatus(rc, where + ": configuring the environment");
  }
  // NOTLS: read transactions are not tied to threads (FUSE workers, prefetchers and the writer
  // all use the env). NORDAHEAD: lookups are random; read-ahead only pollutes the page cache.
  unsigned int flags = MDB_NOTLS | MDB_NORDAHEAD;
  if (!options.sync_every_commit) flags |= MDB_NOSYNC;
  rc = mdb_env_open(env.get(), options.path.c_str(), flags, 0600);
  if (rc != MDB_SUCCESS) {
    Status s = MdbStatus(rc, where + ": mdb_env_open");
    log.error("{}", s.ToString());
    return s;
  }
  // Reader slots left behind by a crashed process would pin old pages forever.
  int dead = 0;
  rc = mdb_reader_check(env.get(), &dead);
  if (rc != MDB_SUCCESS) return MdbStatus(rc, where + ": mdb_reader_check");
  if (dead > 0) log.warn("{}: cleared {} stale reader slot(s)", where, dead);
  return env;
}

Result<LmdbMetaStore::Dbis> LmdbMetaStore::OpenDbis(MDB_env* env, const std::string& where) {
  Dbis dbis;
  Txn txn;
  TIERFS_RETURN_IF_ERROR(txn.Begin(env, /*read_only=*/false).WithContext(where));
  struct Named {
    const char* name;
    unsigned int* dbi;
  };
  for (Named n :
       {Named{"meta", &dbis.meta}, Named{"dirs", &dbis.dirs}, Named{"entries", &dbis.entries},
        Named{"blocks", &dbis.blocks}, Named{"values", &dbis.values}}) {
    const int rc = mdb_dbi_open(txn.get(), n.name, MDB_CREATE, n.dbi);
    if (rc != MDB_SUCCESS) {
      // A named database whose record is not a database (MDB_INCOMPATIBLE) means the file was
      // written by something else.
      return MdbStatus(rc, where + ": opening sub-database '" + n.name + "'");
    }
  }
  TIERFS_RETURN_IF_ERROR(
      CheckSchema(&txn, dbis.meta, {dbis.dirs, dbis.entries, dbis.blocks, dbis.values}, where));
  TIERFS_RETURN_IF_ERROR(txn.Commit().WithContext(where));
  return dbis;
}

LmdbMetaStore::LmdbMetaStore(const MetaStoreOptions& options, MDB_env* env, Dbis dbis,
                             size_t max_key_size)
    : options_(options), env_(env), dbis_(dbis), max_key_size_(max_key_size) {
  writer_ = std::jthread([this](std::stop_token stop) { WriterLoop(std::move(stop)); });
}

LmdbMetaStore::~LmdbMetaStore() {
  {
    MutexLock l(&mu_);
    accepting_ = false;
  }
  writer_.request_stop();
  {
    MutexLock l(&mu_);
    work_cv_.SignalAll();
  }
  // The writer drains the queue and syncs before returning.
  writer_.join();
}

// ---- reads: one short read-only transaction per call ----

Result<std::optional<DirRecord>> LmdbMetaStore::GetDir(std::string_view dir_key) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  if (!CheckDirKey(dir_key).ok()) return std::optional<DirRecord>();  // cannot be stored
  Txn txn;
  TIERFS_RETURN_IF_ERROR(txn.Begin(env_.get(), /*read_only=*/true));
  TIERFS_ASSIGN_OR_RETURN(auto v, txn.Get(dbis_.dirs, dir_key));
  if (!v.has_value()) return std::optional<DirRecord>();
  TIERFS_ASSIGN_OR_RETURN(DirRecord r, DecodeDir(*v));
  return std::optional<DirRecord>(r);
}

Result<std::optional<DirEntry>> LmdbMetaStore::GetDirEntry(std::string_view dir_key,
                                                           std::string_view name) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  if (!CheckEntryKey(dir_key, name).ok()) return std::optional<DirEntry>();
  Txn txn;
  TIERFS_RETURN_IF_ERROR(txn.Begin(env_.get(), /*read_only=*/true));
  TIERFS_ASSIGN_OR_RETURN(auto v, txn.Get(dbis_.entries, EntryKey(dir_key, name)));
  if (!v.has_value()) return std::optional<DirEntry>();
  TIERFS_ASSIGN_OR_RETURN(DirEntry e, DecodeEntry(name, *v));
  return std::optional<DirEntry>(std::move(e));
}

Status LmdbMetaStore::ListDirEntries(std::string_view dir_key, std::string_view after, size_t max,
                                     std::vector<DirEntry>* out) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  out->clear();
  if (dir_key.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("dir key contains NUL");
  }
  if (max == 0 || dir_key.empty()) return Status::OK();
  const std::string prefix = EntryPrefix(dir_key);
  const std::string start = prefix + std::string(after);
  Txn txn;
  TIERFS_RETURN_IF_ERROR(txn.Begin(env_.get(), /*read_only=*/true));
  Cursor c;
  TIERFS_RETURN_IF_ERROR(c.Open(txn.get(), dbis_.entries));
  // A start key longer than the maximum cannot be stored, so nothing equals it; but the seek
  // itself would fail. Seek to its longest storable prefix instead and skip what sorts <= start.
  std::string_view seek = start;
  if (seek.size() > max_key_size_) seek = seek.substr(0, max_key_size_);
  TIERFS_ASSIGN_OR_RETURN(bool found, c.Seek(seek));
  while (found && c.key().starts_with(prefix)) {
    // Strictly after `after`; with after == "" that is every entry (names are never empty).
    if (c.key() > start) {
      TIERFS_ASSIGN_OR_RETURN(DirEntry e, DecodeEntry(c.key().substr(prefix.size()), c.value()));
      out->push_back(std::move(e));
      if (out->size() >= max) break;
    }
    TIERFS_ASSIGN_OR_RETURN(found, c.Next());
  }
  return Status::OK();
}

Result<std::optional<BlockRecord>> LmdbMetaStore::GetBlock(const BlockKey& key) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  Txn txn;
  TIERFS_RETURN_IF_ERROR(txn.Begin(env_.get(), /*read_only=*/true));
  TIERFS_ASSIGN_OR_RETURN(auto v, txn.Get(dbis_.blocks, BlockKeyView(key)));
  if (!v.has_value()) return std::optional<BlockRecord>();
  TIERFS_ASSIGN_OR_RETURN(BlockRecord r, DecodeBlock(BlockKeyView(key), *v));
  return std::optional<BlockRecord>(r);
}

Status LmdbMetaStore::ScanBlocks(const std::function<bool(const BlockRecord&)>& fn) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  std::string resume;  // last key seen; "" before the first chunk (block keys are never empty)
  uint64_t bad = 0;
  for (;;) {
    std::vector<BlockRecord> chunk;
    bool more = false;
    {
      Txn txn;
      TIERFS_RETURN_IF_ERROR(txn.Begin(env_.get(), /*read_only=*/true));
      Cursor c;
      TIERFS_RETURN_IF_ERROR(c.Open(txn.get(), dbis_.blocks));
      TIERFS_ASSIGN_OR_RETURN(bool found, c.Seek(resume));
      if (found && !resume.empty() && c.key() == resume) {
        TIERFS_ASSIGN_OR_RETURN(found, c.Next());
      }
      while (found && chunk.size() < kScanChunk) {
        auto r = DecodeBlock(c.key(), c.value());
        if (r.ok()) {
          chunk.push_back(*r);
        } else {
          ++bad;  // skipped: the L2 rebuild must not fail on one damaged record
        }
        resume.assign(c.key());
        TIERFS_ASSIGN_OR_RETURN(found, c.Next());
      }
      more = found;
    }
    for (const BlockRecord& r : chunk) {
      if (!fn(r)) return Status::OK();
    }
    if (!more) break;
  }
  if (bad > 0) {
    Logger(Module::kMetaStore)
        .warn("meta store {}: skipped {} undecodable block record(s) in scan", ShownPath(options_),
              bad);
  }
  return Status::OK();
}

Result<std::optional<std::string>> LmdbMetaStore::GetValue(std::string_view name) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  if (!CheckValueName(name).ok()) return std::optional<std::string>();
  Txn txn;
  TIERFS_RETURN_IF_ERROR(txn.Begin(env_.get(), /*read_only=*/true));
  TIERFS_ASSIGN_OR_RETURN(auto v, txn.Get(dbis_.values, name));
  if (!v.has_value()) return std::optional<std::string>();
  TIERFS_ASSIGN_OR_RETURN(std::string_view value, DecodeValue(*v));
  return std::optional<std::string>(std::string(value));
}

Status LmdbMetaStore::ScanValues(
    std::string_view prefix, const std::function<bool(std::string_view, std::string_view)>& fn) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  if (prefix.size() > max_key_size_) return Status::OK();  // no stored name is that long
  std::string resume(prefix);
  bool first = true;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> chunk;
    bool more = false;
    {
      Txn txn;
      TIERFS_RETURN_IF_ERROR(txn.Begin(env_.get(), /*read_only=*/true));
      Cursor c;
      TIERFS_RETURN_IF_ERROR(c.Open(txn.get(), dbis_.values));
      TIERFS_ASSIGN_OR_RETURN(bool found, c.Seek(resume));
      if (found && !first && c.key() == resume) {
        TIERFS_ASSIGN_OR_RETURN(found, c.Next());
      }
      while (found && c.key().starts_with(prefix) && chunk.size() < kScanChunk) {
        TIERFS_ASSIGN_OR_RETURN(std::string_view value, DecodeValue(c.value()));
        chunk.emplace_back(std::string(c.key()), std::string(value));
        resume.assign(c.key());
        TIERFS_ASSIGN_OR_RETURN(found, c.Next());
      }
      more = found && c.key().starts_with(prefix);
    }
    first = false;
    for (const auto& [k, v] : chunk) {
      if (!fn(k, v)) return Status::OK();
    }
    if (!more) return Status::OK();
  }
}

// ---- writes: validated and encoded on the caller's thread, applied by the writer ----

Status LmdbMetaStore::ReplaceDir(std::string_view dir_key, const DirRecord& record,
                                 std::span<const DirEntry> entries) {
  TIERFS_RETURN_IF_ERROR(CheckDirKey(dir_key));
  std::vector<std::pair<std::string, std::string>> kvs;
  kvs.reserve(entries.size());
  for (const DirEntry& e : entries) {
    TIERFS_RETURN_IF_ERROR(CheckEntryKey(dir_key, e.name));
    kvs.emplace_back(EntryKey(dir_key, e.name), EncodeEntry(e));
  }
  const std::string prefix = EntryPrefix(dir_key);
  const std::string rec = EncodeDir(record);
  const size_t per_txn = std::max<size_t>(1, options_.dir_entries_per_txn);
  if (kvs.size() <= per_txn) {
    WriteOp op;
    op.records = 1 + kvs.size();
    op.grows = true;
    op.apply = [&](WriteTxn& w) -> Status {
      uint64_t deleted = 0;
      TIERFS_RETURN_IF_ERROR(w.DelPrefix(dbis_.entries, prefix, &deleted));
      TIERFS_RETURN_IF_ERROR(w.Put(dbis_.dirs, dir_key, rec));
      for (const auto& [k, v] : kvs) TIERFS_RETURN_IF_ERROR(w.Put(dbis_.entries, k, v));
      return Status::OK();
    };
    return Submit(&op);
  }
  // A large directory: chunks in key order, each replacing the old entries of its own key range
  // (after the previous chunk's last key, up to its own last key), then the tail and the record.
  std::stable_sort(kvs.begin(), kvs.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // Equal names: keep the last given (what one transaction of puts would have kept).
  std::vector<std::pair<std::string, std::string>> unique;
  unique.reserve(kvs.size());
  for (auto& kv : kvs) {
    if (!unique.empty() && unique.back().first == kv.first) {
      unique.back() = std::move(kv);
    } else {
      unique.push_back(std::move(kv));
    }
  }
  kvs = std::move(unique);
  std::string after;  // "": from the first entry of the directory
  for (size_t at = 0; at < kvs.size(); at += per_txn) {
    const size_t end = std::min(kvs.size(), at + per_txn);
    const std::string& upto = kvs[end - 1].first;
    WriteOp op;
    op.records = end - at;
    op.grows = true;
    op.apply = [&](WriteTxn& w) -> Status {
      uint64_t deleted = 0;
      TIERFS_RETURN_IF_ERROR(w.DelRange(dbis_.entries, prefix, after, upto, &deleted));
      for (size_t i = at; i < end; ++i) {
        TIERFS_RETURN_IF_ERROR(w.Put(dbis_.entries, kvs[i].first, kvs[i].second));
      }
      return Status::OK();
    };
    TIERFS_RETURN_IF_ERROR(Submit(&op));
    after = upto;
  }
  WriteOp last;
  last.records = 1;
  last.grows = true;
  last.apply = [&](WriteTxn& w) -> Status {
    uint64_t deleted = 0;
    TIERFS_RETURN_IF_ERROR(w.DelRange(dbis_.entries, prefix, after, {}, &deleted));
    return w.Put(dbis_.dirs, dir_key, rec);
  };
  return Submit(&last);
}

Status LmdbMetaStore::PutDirEntry(std::string_view dir_key, const DirEntry& entry) {
  TIERFS_RETURN_IF_ERROR(CheckEntryKey(dir_key, entry.name));
  const std::string k = EntryKey(dir_key, entry.name);
  const std::string v = EncodeEntry(entry);
  WriteOp op;
  op.records = 1;
  op.grows = true;
  op.apply = [&](WriteTxn& w) { return w.Put(dbis_.entries, k, v); };
  return Submit(&op);
}

Status LmdbMetaStore::DeleteDirEntry(std::string_view dir_key, std::string_view name) {
  if (!CheckEntryKey(dir_key, name).ok()) return Status::OK();  // cannot exist
  const std::string k = EntryKey(dir_key, name);
  WriteOp op;
  op.records = 1;
  op.apply = [&](WriteTxn& w) { return w.Del(dbis_.entries, k); };
  return Submit(&op);
}

Status LmdbMetaStore::DropDirs(std::string_view key_prefix) {
  // Dir keys never contain NUL, so such a prefix names no directory, and must not be allowed to
  // match "dir\0name-prefix" entry keys.
  if (key_prefix.find('\0') != std::string_view::npos) return Status::OK();
  if (key_prefix.size() > max_key_size_) return Status::OK();
  WriteOp op;
  op.apply = [&](WriteTxn& w) -> Status {
    // An entry key starts with key_prefix exactly when its dir key does (key_prefix has no NUL).
    uint64_t deleted = 0;
    TIERFS_RETURN_IF_ERROR(w.DelPrefix(dbis_.dirs, key_prefix, &deleted));
    TIERFS_RETURN_IF_ERROR(w.DelPrefix(dbis_.entries, key_prefix, &deleted));
    op.records = deleted;  // writer thread; read back by the writer after apply
    return Status::OK();
  };
  return Submit(&op);
}

Status LmdbMetaStore::PutBlocks(std::span<const BlockRecord> records) {
  if (records.empty()) return Status::OK();
  std::vector<std::string> values;
  values.reserve(records.size());
  for (const BlockRecord& r : records) values.push_back(EncodeBlock(r));
  WriteOp op;
  op.records = records.size();
  op.grows = true;
  op.apply = [&](WriteTxn& w) -> Status {
    for (size_t i = 0; i < records.size(); ++i) {
      TIERFS_RETURN_IF_ERROR(w.Put(dbis_.blocks, BlockKeyView(records[i].key), values[i]));
    }
    return Status::OK();
  };
  return Submit(&op);
}

Status LmdbMetaStore::EraseBlocks(std::span<const BlockKey> keys) {
  if (keys.empty()) return Status::OK();
  WriteOp op;
  op.records = keys.size();
  op.apply = [&](WriteTxn& w) -> Status {
    for (const BlockKey& k : keys) TIERFS_RETURN_IF_ERROR(w.Del(dbis_.blocks, BlockKeyView(k)));
    return Status::OK();
  };
  return Submit(&op);
}

Status LmdbMetaStore::PutValue(std::string_view name, std::string_view value) {
  TIERFS_RETURN_IF_ERROR(CheckValueName(name));
  const std::string v = EncodeValue(value);
  WriteOp op;
  op.records = 1;
  op.grows = true;
  op.apply = [&](WriteTxn& w) { return w.Put(dbis_.values, name, v); };
  return Submit(&op);
}

Status LmdbMetaStore::DeleteValue(std::string_view name) {
  if (!CheckValueName(name).ok()) return Status::OK();  // cannot exist
  WriteOp op;
  op.records = 1;
  op.apply = [&](WriteTxn& w) { return w.Del(dbis_.values, name); };
  return Submit(&op);
}

Status LmdbMetaStore::TEST_WriteSchemaVersion(uint32_t version) {
  std::string v;
  PutFixed32(&v, version);
  WriteOp op;
  op.records = 1;
  op.grows = true;
  op.apply = [&](WriteTxn& w) { return w.Put(dbis_.meta, kSchemaVersionKey, v); };
  return Submit(&op);
}

void LmdbMetaStore::TEST_PauseWriter(bool paused) {
  MutexLock l(&mu_);
  paused_ = paused;
  work_cv_.SignalAll();
}

size_t LmdbMetaStore::TEST_QueuedOps() const {
  MutexLock l(&mu_);
  return queue_.size();
}

// ---- the writer ----

Status LmdbMetaStore::Submit(WriteOp* op) {
  MutexLock l(&mu_);
  if (!accepting_) return Status::Cancelled("meta store is shutting down");
  queue_.push_back(op);
  work_cv_.Signal();
  while (!op->done) WaitDone();
  return op->status;
}

void LmdbMetaStore::WriterLoop(std::stop_token stop) {
  pthread_setname_np(pthread_self(), "tierfs-meta-w");
  auto last_sync = Clock::now();
  std::vector<WriteOp*> batch;
  for (;;) {
    bool exiting = false;
    batch.clear();
    {
      MutexLock l(&mu_);
      while ((queue_.empty() || paused_) && !stop.stop_requested()) {
        if (!unsynced_) {
          WaitWork();
          continue;
        }
        const auto due = last_sync + kSyncInterval;
        const auto now = Clock::now();
        if (now >= due) break;
        WaitWorkFor(due - now);
      }
      while (!queue_.empty() && (!paused_ || stop.stop_requested()) &&
             batch.size() < kMaxBatchOps) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
      // Submit refuses new work once stop is requested, so an empty queue then stays empty.
      exiting = queue_.empty() && stop.stop_requested();
    }
    if (!batch.empty()) {
      ApplyBatch(batch);
      {
        MutexLock l(&mu_);
        for (WriteOp* op : batch) op->done = true;
      }
      done_cv_.SignalAll();
    }
    if (unsynced_ && (exiting || Clock::now() - last_sync >= kSyncInterval)) {
      // A failed periodic sync is logged by SyncEnv; the next one retries.
      if (SyncEnv("periodic").ok()) unsynced_ = false;
      last_sync = Clock::now();
    }
    if (exiting) return;
  }
}

void LmdbMetaStore::ApplyBatch(std::span<WriteOp* const> ops) {
  batches_.fetch_add(1, std::memory_order_relaxed);
  Status s = RunTxn(ops);
  if (s.ok()) {
    uint64_t prev = max_batch_ops_.load(std::memory_order_relaxed);
    if (ops.size() > prev) max_batch_ops_.store(ops.size(), std::memory_order_relaxed);
    for (WriteOp* op : ops) op->status = Status::OK();
    return;
  }
  // Rate-limited: with a full map every batch fails until the tier evicts.
  const auto now = Clock::now();
  if (now - last_failure_log_ >= std::chrono::seconds(10)) {
    last_failure_log_ = now;
    Logger(Module::kMetaStore)
        .warn("meta store {}: write transaction of {} operation(s) failed: {}{}",
              ShownPath(options_), ops.size(), s.ToString(),
              ops.size() > 1 ? "; retrying one by one" : "");
  }
  if (ops.size() == 1) {
    ops[0]->status = s;
    return;
  }
  // One operation (or the map filling up) failed the whole transaction. Retry each alone so
  // every caller gets the status of its own operation.
  failed_batches_.fetch_add(1, std::memory_order_relaxed);
  for (WriteOp* op : ops) op->status = RunTxn(std::span<WriteOp* const>(&op, 1));
}

Status LmdbMetaStore::RunTxn(std::span<WriteOp* const> ops) {
  // Checked before the write transaction starts: this thread is the only writer, so nothing
  // changes in between.
  if (std::any_of(ops.begin(), ops.end(), [](const WriteOp* op) { return op->grows; })) {
    TIERFS_ASSIGN_OR_RETURN(bool full, OverSoftLimit());
    if (full) {
      return Status::NoSpace("meta store " + ShownPath(options_) +
                             " is full (the last 1/16 of map_size is kept for deletes)");
    }
  }
  Txn txn;
  TIERFS_RETURN_IF_ERROR(txn.Begin(env_.get(), /*read_only=*/false));
  WriteTxn w(txn.get());
  uint64_t records = 0;
  for (WriteOp* op : ops) {
    TIERFS_RETURN_IF_ERROR(op->apply(w));
    records += op->records;
  }
  TIERFS_RETURN_IF_ERROR(txn.Commit());
  commits_.fetch_add(1, std::memory_order_relaxed);
  writes_.fetch_add(records, std::memory_order_relaxed);
  if (!options_.sync_every_commit) unsynced_ = true;
  return Status::OK();
}

// Why: when LMDB's map is completely full even a delete cannot commit (copy-on-write needs new
// pages, and so does the free list), which would wedge the index for good. So writes that add
// data stop at map_size - reserve, and deletes may use the reserve to free space.
Result<bool> LmdbMetaStore::OverSoftLimit() {
  MDB_envinfo info;
  MDB_stat st;
  int rc = mdb_env_info(env_.get(), &info);
  if (rc == MDB_SUCCESS) rc = mdb_env_stat(env_.get(), &st);
  if (rc != MDB_SUCCESS) return MdbStatus(rc, "mdb_env_info");
  const uint64_t map_pages = info.me_mapsize / st.ms_psize;
  const uint64_t reserve = std::max<uint64_t>(8, map_pages / 16);
  const uint64_t soft_pages = map_pages > reserve ? map_pages - reserve : 0;
  const uint64_t high_water = static_cast<uint64_t>(info.me_last_pgno) + 1;
  if (high_water <= soft_pages) return false;  // the common case: no scan
  // Past the high-water mark: count the free pages LMDB can reuse. Free-list records (dbi 0)
  // are keyed by the freeing transaction id and hold an ID list whose first word is its length
  // (the same walk as `mdb_stat -f`). Pages freed by the last committed transaction are not
  // reusable yet (the previous snapshot still references them), so they do not count. LMDB
  // only allows a cursor on the free list in a read-only transaction.
  uint64_t free_pages = 0;
  Txn txn;
  TIERFS_RETURN_IF_ERROR(txn.Begin(env_.get(), /*read_only=*/true));
  Cursor c;
  TIERFS_RETURN_IF_ERROR(c.Open(txn.get(), 0));
  TIERFS_ASSIGN_OR_RETURN(bool found, c.Seek(""));
  while (found) {
    size_t freed_by = 0;
    if (c.key().size() == sizeof(size_t)) std::memcpy(&freed_by, c.key().data(), sizeof(size_t));
    if (freed_by >= info.me_last_txnid) break;  // keys ascend (MDB_INTEGERKEY)
    if (c.value().size() >= sizeof(size_t)) {
      size_t n;
      std::memcpy(&n, c.value().data(), sizeof(n));
      free_pages += n;
    }
    TIERFS_ASSIGN_OR_RETURN(found, c.Next());
  }
  return high_water - std::min(free_pages, high_water) > soft_pages;
}

Status LmdbMetaStore::SyncEnv(const char* why) {
  syncs_.fetch_add(1, std::memory_order_relaxed);
  Status s = MdbStatus(mdb_env_sync(env_.get(), /*force=*/1), "mdb_env_sync");
  if (!s.ok()) {
    Logger(Module::kMetaStore)
        .error("meta store {}: {} sync failed: {}", ShownPath(options_), why, s.ToString());
  }
  return s;
}

Status LmdbMetaStore::Sync() { return SyncEnv("requested"); }

MetaStoreStats LmdbMetaStore::Stats() const {
  MetaStoreStats s;
  s.reads = reads_.load(std::memory_order_relaxed);
  s.writes = writes_.load(std::memory_order_relaxed);
  s.commits = commits_.load(std::memory_order_relaxed);
  MDB_envinfo info;
  MDB_stat st;
  if (mdb_env_info(env_.get(), &info) == MDB_SUCCESS &&
      mdb_env_stat(env_.get(), &st) == MDB_SUCCESS) {
    s.map_bytes_used = (static_cast<uint64_t>(info.me_last_pgno) + 1) * st.ms_psize;
  }
  return s;
}

LmdbInternalStats LmdbMetaStore::InternalStats() const {
  LmdbInternalStats s;
  s.batches = batches_.load(std::memory_order_relaxed);
  s.failed_batches = failed_batches_.load(std::memory_order_relaxed);
  s.syncs = syncs_.load(std::memory_order_relaxed);
  s.max_batch_ops = max_batch_ops_.load(std::memory_order_relaxed);
  unsigned int flags = 0;
  s.env_nosync = mdb_env_get_flags(env_.get(), &flags) == MDB_SUCCESS && (flags & MDB_NOSYNC) != 0;
  return s;
}

}  // namespace metastore_internal

Result<std::unique_ptr<MetaStore>> NewLmdbMetaStore(const MetaStoreOptions& options) {
  auto store = metastore_internal::LmdbMetaStore::Open(options);
  if (!store.ok()) return std::move(store).status();
  return std::unique_ptr<MetaStore>(std::move(store).value());
}

}  // namespace tierfs
