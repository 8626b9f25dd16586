// LmdbMetaStore — the MetaStore on LMDB. Internal to metastore/ (other modules use
// NewLmdbMetaStore() from meta_store.h); the metastore tests include it for the TEST_ hooks.
//
// Layout: one LMDB environment (data.mdb + lock.mdb in options.path) with five named
// sub-databases, "meta", "dirs", "entries", "blocks" and "values"; key and value encodings are
// specified byte by byte in metastore/FORMAT.md.
//
// Reads run on the calling thread in short read-only transactions (MDB_NOTLS, so any thread may
// read; a transaction never outlives the call, and scans read in chunks so no transaction is
// held while a callback runs).
//
// Writes go through one writer thread, "tierfs-meta-w", owned by the store: a write call
// validates its arguments, enqueues an operation and blocks until the operation's transaction
// committed (or failed). The writer applies every queued operation in one write transaction
// (group commit), so N threads writing concurrently cost about one commit instead of N. If a
// batch fails, each of its operations is retried alone, in order, so one failing operation
// (e.g. NoSpace) reports its own error and the others still commit. With MDB_NOSYNC (the
// default) the writer also calls mdb_env_sync about once a second.
//
// Ownership: the store owns the environment and the writer thread; the destructor finishes the
// queued writes, stops and joins the writer, syncs, and closes the environment.
// REQUIRES: one store per path per process (an LMDB rule: the lock file is per process).
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "metastore/meta_store.h"

// From lmdb.h, which stays out of this header.
struct MDB_env;
struct MDB_txn;

namespace tierfs {
namespace metastore_internal {

// Schema of the data written by this binary (FORMAT.md, "Schema version").
inline constexpr uint32_t kSchemaVersion = 1;

// Writes performed by one write operation inside a write transaction. Defined in the .cc.
class WriteTxn;

// Extra counters for tests and the periodic summary; MetaStoreStats holds the public ones.
struct LmdbInternalStats {
  uint64_t batches = 0;         // write transactions attempted for groups of operations
  uint64_t failed_batches = 0;  // batches that failed and were retried operation by operation
  uint64_t syncs = 0;           // mdb_env_sync calls (periodic + Sync())
  uint64_t max_batch_ops = 0;   // largest number of operations committed in one transaction
  // The environment was opened with MDB_NOSYNC (commits not flushed; the writer syncs
  // periodically): not with MetaStoreOptions::sync_every_commit, where every commit flushes.
  bool env_nosync = false;
};

class LmdbMetaStore final : public MetaStore {
 public:
  // Opens or creates the environment, checks the schema version and starts the writer.
  // Corruption: not an LMDB environment, damaged, or a newer schema. NoSpace/IOError/
  // PermissionDenied: the directory or files could not be created or mapped.
  static Result<std::unique_ptr<LmdbMetaStore>> Open(const MetaStoreOptions& options);

  ~LmdbMetaStore() override;
  LmdbMetaStore(const LmdbMetaStore&) = delete;
  LmdbMetaStore& operator=(const LmdbMetaStore&) = delete;

  Result<std::optional<DirRecord>> GetDir(std::string_view dir_key) override;
  Result<std::optional<DirEntry>> GetDirEntry(std::string_view dir_key,
                                              std::string_view name) override;
  Status ListDirEntries(std::string_view dir_key, std::string_view after, size_t max,
                        std::vector<DirEntry>* out) override;
  Status ReplaceDir(std::string_view dir_key, const DirRecord& record,
                    std::span<const DirEntry> entries) override;
  Status PutDirEntry(std::string_view dir_key, const DirEntry& entry) override;
  Status DeleteDirEntry(std::string_view dir_key, std::string_view name) override;
  Status DropDirs(std::string_view key_prefix) override;

  Result<std::optional<BlockRecord>> GetBlock(const BlockKey& key) override;
  Status PutBlocks(std::span<const BlockRecord> records) override;
  Status EraseBlocks(std::span<const BlockKey> keys) override;
  Status ScanBlocks(const std::function<bool(const BlockRecord&)>& fn) override;

  Result<std::optional<std::string>> GetValue(std::string_view name) override;
  Status PutValue(std::string_view name, std::string_view value) override;
  Status DeleteValue(std::string_view name) override;
  Status ScanValues(std::string_view prefix,
                    const std::function<bool(std::string_view, std::string_view)>& fn) override;

  Status Sync() override;
  MetaStoreStats Stats() const override;

  LmdbInternalStats InternalStats() const;

  // Test hooks. Overwrites the schema version record (to simulate a store written by a newer
  // binary). Goes through the writer like any write.
  Status TEST_WriteSchemaVersion(uint32_t version);
  // While paused the writer takes no new batch, so operations queue up (to build a known batch).
  void TEST_PauseWriter(bool paused) EXCLUDES(mu_);
  size_t TEST_QueuedOps() const EXCLUDES(mu_);

 private:
  struct EnvCloser {
    void operator()(MDB_env* env) const;
  };
  struct Dbis {
    unsigned int meta = 0, dirs = 0, entries = 0, blocks = 0, values = 0;
  };
  // One queued write. Lives on the stack of the calling thread until `done`.
  struct WriteOp {
    std::function<Status(WriteTxn&)> apply;
    uint64_t records = 0;  // for Stats().writes
    bool grows = false;    // adds data (refused past the soft limit; deletes are not)
    Status status;         // set by the writer before done
    bool done = false;     // GUARDED_BY(mu_) (annotations cannot name a member of a peer)
  };

  LmdbMetaStore(const MetaStoreOptions& options, MDB_env* env, Dbis dbis, size_t max_key_size);

  // The steps of Open: the environment at options.path, then its sub-databases with the schema
  // version checked (or written, in an empty store). `where` names the store in messages.
  static Result<std::unique_ptr<MDB_env, EnvCloser>> OpenEnv(const MetaStoreOptions& options,
                                                             const std::string& where);
  static Result<Dbis> OpenDbis(MDB_env* env, const std::string& where);

  // Enqueues `op` and blocks until the writer has committed or failed it.
  // Cancelled if the store is shutting down.
  Status Submit(WriteOp* op) EXCLUDES(mu_);

  void WriterLoop(std::stop_token stop) EXCLUDES(mu_);
  // Applies ops in one transaction; on failure retries each alone. Sets every op's status.
  void ApplyBatch(std::span<WriteOp* const> ops);
  // Runs ops in one write transaction and commits. Status of the transaction as a whole.
  Status RunTxn(std::span<WriteOp* const> ops);
  // True when data-adding writes must be refused to keep the reserve free for deletes.
  Result<bool> OverSoftLimit();
  Status SyncEnv(const char* why);

  // CondVar's waits carry no capability annotation (base/mutex.h); these state the contract, mu_
  // held, so that clang's analysis checks the callers.
  void WaitDone() REQUIRES(mu_) { done_cv_.Wait(); }
  void WaitWork() REQUIRES(mu_) { work_cv_.Wait(); }
  void WaitWorkFor(std::chrono::nanoseconds d) REQUIRES(mu_) { work_cv_.WaitFor(d); }

  // Constant after construction.
  const MetaStoreOptions options_;
  const std::unique_ptr<MDB_env, EnvCloser> env_;
  const Dbis dbis_;
  const size_t max_key_size_;

  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> commits_{0};
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> failed_batches_{0};
  std::atomic<uint64_t> syncs_{0};
  std::atomic<uint64_t> max_batch_ops_{0};
  // Writer thread only: set after a commit under MDB_NOSYNC, cleared by a periodic sync; and
  // when a failed batch was last logged.
  bool unsynced_ = false;
  std::chrono::steady_clock::time_point last_failure_log_{};

  // Lock order: mu_ is a leaf; never held across LMDB calls.
  mutable Mutex mu_;
  CondVar work_cv_{&mu_};  // writer waits: queue non-empty or stop
  CondVar done_cv_{&mu_};  // callers wait: their op is done
  // State below is protected by mu_.
  std::deque<WriteOp*> queue_ GUARDED_BY(mu_);
  bool accepting_ GUARDED_BY(mu_) = true;
  bool paused_ GUARDED_BY(mu_) = false;  // TEST_PauseWriter

  // Last member: started after everything above is initialised, joined first on destruction.
  std::jthread writer_;
};

}  // namespace metastore_internal
}  // namespace tierfs
