// FakeBlobStore — an in-memory BlobStore for unit tests (conventions C7), with fault injection
// switches in the style of leveldb's ErrorEnv: fail the next N calls, add a delay, count calls.
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "blobclient/blob_store.h"

namespace tierfs::testing {

class FakeBlobStore : public BlobStore {
 public:
  explicit FakeBlobStore(std::string describe = "fake://origin") : describe_(std::move(describe)) {}

  // Adds or replaces an object; its ETag becomes a hash of the data ("etag-<n>").
  void PutObject(const std::string& key, std::string data, int64_t mtime_ns = 0);
  void RemoveObject(const std::string& key);
  // The owner, group and mode Head and List report for `key` (as a file:// store does).
  void SetOwner(const std::string& key, Ownership owner);

  // The next `n` calls of any kind fail with `status`.
  void FailNext(int n, Status status = Status::Unavailable("injected"));
  // Every call sleeps this long first (simulates a remote origin).
  void SetDelay(std::chrono::microseconds d) { delay_us_ = d.count(); }

  // A gate for Read (a stalled origin): while held, every Read blocks (after counting) until
  // ReleaseReads(). WaitForBlockedReads(n) returns once n reads wait at the gate.
  // ReleaseOneRead() lets the read that has waited longest through and keeps the gate held.
  void HoldReads() EXCLUDES(gate_mu_);
  void ReleaseReads() EXCLUDES(gate_mu_);
  void ReleaseOneRead() EXCLUDES(gate_mu_);
  void WaitForBlockedReads(int n) EXCLUDES(gate_mu_);
  int blocked_reads() const EXCLUDES(gate_mu_);
  // The keys of the reads that reached the gate, in that order (held or not).
  std::vector<std::string> gate_arrivals() const EXCLUDES(gate_mu_);

  uint64_t read_calls() const { return read_calls_; }
  uint64_t head_calls() const { return head_calls_; }
  uint64_t list_calls() const { return list_calls_; }
  uint64_t bytes_read() const { return bytes_read_; }
  // ReadPinnedScatter calls with more than one piece (each also counts as one read call).
  uint64_t scatter_reads() const { return scatter_reads_; }
  // The pieces of the latest ReadPinnedScatter call (after ScatterBuffer joined adjacent ones).
  uint64_t last_scatter_pieces() const { return last_scatter_pieces_; }
  // Bytes of `key` the reads since the last ResetCounters() returned more than once.
  uint64_t bytes_read_twice(const std::string& key) const EXCLUDES(mu_);
  void ResetCounters();

  std::string Describe() const override { return describe_; }
  Result<ObjectInfo> Head(std::string_view key) override;
  Result<size_t> Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                      std::string_view if_match_etag) override;
  // Counts the call, then the default (one Read into a buffer, copied into the pieces).
  Result<size_t> ReadPinnedScatter(std::string_view key, uint64_t offset, const ScatterBuffer& out,
                                   const ObjectInfo& pinned) override;
  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override;
  Status Put(std::string_view key, std::span<const std::byte> data) override;
  Status Delete(std::string_view key) override;
  BlobStoreStats Stats() const override;

 private:
  struct Obj {
    std::string data;
    ObjectInfo info;
  };
  Status Enter();  // delay + injected failure

  const std::string describe_;
  mutable Mutex mu_;
  std::map<std::string, Obj, std::less<>> objects_ GUARDED_BY(mu_);
  int fail_next_ GUARDED_BY(mu_) = 0;
  Status fail_status_ GUARDED_BY(mu_);
  uint64_t etag_counter_ GUARDED_BY(mu_) = 0;
  // Per key, the [offset, end) of every read that returned bytes (bytes_read_twice).
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>, std::less<>> read_ranges_
      GUARDED_BY(mu_);
  std::atomic<int64_t> delay_us_{0};
  mutable Mutex gate_mu_;
  CondVar gate_cv_{&gate_mu_};
  bool gate_held_ GUARDED_BY(gate_mu_) = false;
  int gate_blocked_ GUARDED_BY(gate_mu_) = 0;
  uint64_t gate_next_ticket_ GUARDED_BY(gate_mu_) = 0;  // of the next read to arrive
  uint64_t gate_passed_ GUARDED_BY(gate_mu_) = 0;       // held reads with a lower ticket may go
  std::vector<std::string> gate_arrivals_ GUARDED_BY(gate_mu_);
  std::atomic<uint64_t> read_calls_{0}, head_calls_{0}, list_calls_{0}, bytes_read_{0};
  std::atomic<uint64_t> scatter_reads_{0}, last_scatter_pieces_{0};
  std::atomic<uint64_t> requests_{0}, errors_{0};
};

}  // namespace tierfs::testing
