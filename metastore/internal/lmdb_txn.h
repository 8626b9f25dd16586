// metastore/internal/lmdb_txn — the LMDB primitives of LmdbMetaStore: MDB_* return codes as
// Status (the one translation point), and RAII read/write transactions and cursors. Only the
// metastore module includes it.
//
// Thread-safety: a Txn, WriteTxn or Cursor belongs to the thread that uses it (MDB_NOTLS lets
// read transactions move between threads, never two at once).
#pragma once

#include <lmdb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tierfs::metastore_internal {

// ---- MDB_* → Status, the one translation point (C3) ----

inline Status MdbStatus(int rc, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += mdb_strerror(rc);
  switch (rc) {
    case MDB_SUCCESS:
      return Status::OK();
    case MDB_NOTFOUND:
      return Status::NotFound(msg);
    case MDB_MAP_FULL:
      return Status::NoSpace(msg + " (raise meta map_size)");
    case MDB_TXN_FULL:
      return Status::NoSpace(msg);
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
    case MDB_BAD_DBI:
      return Status::Corruption(msg);
    case MDB_BAD_VALSIZE:
      return Status::InvalidArgument(msg);
    case MDB_READERS_FULL:
    case MDB_MAP_RESIZED:
      return Status::Unavailable(msg);
    default:
      // Positive codes are errno values from the OS.
      if (rc > 0) return Status::FromErrno(rc, what);
      return Status::Internal(msg);
  }
}

inline MDB_val Val(std::string_view s) { return MDB_val{s.size(), const_cast<char*>(s.data())}; }
inline std::string_view View(const MDB_val& v) {
  return std::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
}

// ---- RAII wrappers ----

// A transaction, aborted on destruction unless committed.
class Txn {
 public:
  Txn() = default;
  ~Txn() {
    if (txn_ != nullptr) mdb_txn_abort(txn_);
  }
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;

  Status Begin(MDB_env* env, bool read_only) {
    int rc = mdb_txn_begin(env, nullptr, read_only ? MDB_RDONLY : 0, &txn_);
    if (rc != MDB_SUCCESS) {
      txn_ = nullptr;
      return MdbStatus(rc, read_only ? "mdb_txn_begin(read)" : "mdb_txn_begin(write)");
    }
    return Status::OK();
  }
  Status Commit() {
    // mdb_txn_commit frees the transaction whether or not it succeeds.
    int rc = mdb_txn_commit(txn_);
    txn_ = nullptr;
    return MdbStatus(rc, "mdb_txn_commit");
  }
  MDB_txn* get() const { return txn_; }

  // The value of `key`, nullopt if absent. The view lives until the transaction ends.
  Result<std::optional<std::string_view>> Get(MDB_dbi dbi, std::string_view key) {
    MDB_val k = Val(key), v;
    int rc = mdb_get(txn_, dbi, &k, &v);
    if (rc == MDB_NOTFOUND) return std::optional<std::string_view>();
    if (rc != MDB_SUCCESS) return MdbStatus(rc, "mdb_get");
    return std::optional<std::string_view>(View(v));
  }

 private:
  MDB_txn* txn_ = nullptr;
};

// A cursor; must be destroyed before its transaction ends (declare it after the Txn).
class Cursor {
 public:
  Cursor() = default;
  ~Cursor() {
    if (cursor_ != nullptr) mdb_cursor_close(cursor_);
  }
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;

  Status Open(MDB_txn* txn, MDB_dbi dbi) {
    int rc = mdb_cursor_open(txn, dbi, &cursor_);
    if (rc != MDB_SUCCESS) {
      cursor_ = nullptr;
      return MdbStatus(rc, "mdb_cursor_open");
    }
    return Status::OK();
  }
  // Positions at the first key >= `key` ("" = the first key). false at the end.
  Result<bool> Seek(std::string_view key) {
    if (key.empty()) return Step(MDB_FIRST);
    k_ = Val(key);
    return Step(MDB_SET_RANGE);
  }
  Result<bool> Next() { return Step(MDB_NEXT); }
  Status DeleteCurrent() {
    int rc = mdb_cursor_del(cursor_, 0);
    return MdbStatus(rc, "mdb_cursor_del");
  }
  std::string_view key() const { return View(k_); }
  std::string_view value() const { return View(v_); }

 private:
  Result<bool> Step(MDB_cursor_op op) {
    int rc = mdb_cursor_get(cursor_, &k_, &v_, op);
    if (rc == MDB_NOTFOUND) return false;
    if (rc != MDB_SUCCESS) return MdbStatus(rc, "mdb_cursor_get");
    return true;
  }

  MDB_cursor* cursor_ = nullptr;
  MDB_val k_{0, nullptr};
  MDB_val v_{0, nullptr};
};

// The writes one operation may do inside the writer's transaction.
class WriteTxn {
 public:
  explicit WriteTxn(MDB_txn* txn) : txn_(txn) {}

  Status Put(MDB_dbi dbi, std::string_view key, std::string_view value) {
    MDB_val k = Val(key), v = Val(value);
    return MdbStatus(mdb_put(txn_, dbi, &k, &v, 0), "mdb_put");
  }
  // Absent keys are not an error.
  Status Del(MDB_dbi dbi, std::string_view key) {
    MDB_val k = Val(key);
    int rc = mdb_del(txn_, dbi, &k, nullptr);
    if (rc == MDB_NOTFOUND) return Status::OK();
    return MdbStatus(rc, "mdb_del");
  }
  // Deletes every key starting with `prefix` ("" = all). Returns the count in *deleted.
  Status DelPrefix(MDB_dbi dbi, std::string_view prefix, uint64_t* deleted) {
    Cursor c;
    TIERFS_RETURN_IF_ERROR(c.Open(txn_, dbi));
    for (;;) {
      // Re-seek after each delete rather than trusting the cursor position after
      // mdb_cursor_del at page boundaries; O(log n) each, and keys are few per directory.
      TIERFS_ASSIGN_OR_RETURN(bool found, c.Seek(prefix));
      if (!found || !c.key().starts_with(prefix)) return Status::OK();
      TIERFS_RETURN_IF_ERROR(c.DeleteCurrent());
      ++*deleted;
    }
  }
  // Deletes the keys starting with `prefix` that are > `after` ("": from the first) and <=
  // `upto` ("": to the last). Returns the count in *deleted.
  Status DelRange(MDB_dbi dbi, std::string_view prefix, std::string_view after,
                  std::string_view upto, uint64_t* deleted) {
    Cursor c;
    TIERFS_RETURN_IF_ERROR(c.Open(txn_, dbi));
    // Keys of one prefix never contain a NUL after it (entry names have none), so the first key
    // greater than `after` is the first key >= after + '\0'.
    std::string from(after.empty() ? prefix : after);
    if (!after.empty()) from.push_back('\0');
    for (;;) {
      TIERFS_ASSIGN_OR_RETURN(bool found, c.Seek(from));
      if (!found || !c.key().starts_with(prefix)) return Status::OK();
      if (!upto.empty() && c.key() > upto) return Status::OK();
      TIERFS_RETURN_IF_ERROR(c.DeleteCurrent());
      ++*deleted;
    }
  }

 private:
  MDB_txn* const txn_;
};

}  // namespace tierfs::metastore_internal
