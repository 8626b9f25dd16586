// FaultyFlashStore — a forwarding FlashStore wrapper with fault-injection switches
// (conventions C7; leveldb ErrorEnv): fail the next N writes/reads with a given Status, pretend
// the filesystem has a given amount of free space, count calls.
//
// Wraps (does not own) a FlashStore that must outlive it. Thread-safe; no external
// synchronization needed.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "base/mutex.h"
#include "tiercache/tier.h"

namespace tierfs::testing {

class FaultyFlashStore : public FlashStore {
 public:
  explicit FaultyFlashStore(FlashStore* base) : base_(base) {}

  // The next `n` WriteFile calls fail with `status` (nothing is written).
  void FailWrites(int n, Status status = Status::NoSpace("injected ENOSPC"));
  // The next `n` ReadFile / ReadAt / OpenForRead calls fail with `status`.
  void FailReads(int n, Status status = Status::IOError("injected EIO"));
  // FreeBytes returns this instead of asking the base store (nullopt: ask the base store).
  void SetFreeBytes(std::optional<uint64_t> bytes);

  uint64_t writes() const { return writes_; }
  uint64_t reads() const { return reads_; }
  uint64_t free_bytes_calls() const { return free_calls_; }

  Status WriteFile(const std::string& rel_path, std::span<const std::byte> data,
                   std::span<const std::byte> trailer) override;
  Result<size_t> ReadFile(const std::string& rel_path, std::span<std::byte> out) override;
  Status ReadAt(const std::string& rel_path, std::span<const ReadRange> ranges) override;
  Status RemoveFile(const std::string& rel_path) override;
  // Counted and failed like a read.
  Result<int> OpenForRead(const std::string& rel_path) override;
  Status WillNeed(const std::string& rel_path) override;
  Result<uint64_t> FreeBytes() override;
  Status ListFiles(std::vector<std::string>* out) override;

 private:
  // Counts a read; the injected failure if one is due, else OK.
  Status TakeRead() EXCLUDES(mu_);

  FlashStore* const base_;
  Mutex mu_;
  int fail_writes_ GUARDED_BY(mu_) = 0;
  Status write_status_ GUARDED_BY(mu_);
  int fail_reads_ GUARDED_BY(mu_) = 0;
  Status read_status_ GUARDED_BY(mu_);
  std::optional<uint64_t> free_bytes_ GUARDED_BY(mu_);
  std::atomic<uint64_t> writes_{0}, reads_{0}, free_calls_{0};
};

}  // namespace tierfs::testing
