// Admission: which blocks read from below (L3, the origin) the host's flash tier (L2)
// keeps. L1 keeps every block it is offered whatever the policy: it is where readahead puts the
// blocks a reader is about to ask for, and a small LRU that a scan only churns; a policy decides
// what reaches flash, where one pass over a large dataset would evict every other job's hot data.
//
// Policies (AdmitPolicy, set per prefix by [[policy]] admit and per file or directory by
// user.tierfs.admit, inherited like the other policy fields; the cache default is cache.admit):
//   always  every block goes to L2 (the behaviour before admission existed);
//   reuse   a block is protected in L2 only when it is seen again within the ghost window: the
//           first fetch records its key in the ghost list and stores the block as probationary
//           (AdmitDecision::kProbation: in room L2 has free, or in place of other probationary
//           blocks, never evicting a protected one), a later fetch of the same block while the
//           key is still there (a "ghost hit") stores it protected. So a pass over data that
//           fits in L2's free room is kept whole, and one that does not churns only its own
//           blocks (2Q / segmented LRU: probationary and protected segments);
//   never   blocks are served (through L1) and not stored in L2.
// Scan resistance: a file of at least scan_percent % of L2 (and at least kScanMinBlocks blocks)
// that a reader goes through
// sequentially (a run of kScanRunBlocks adjacent blocks or more) is a scan; while it is one, its
// blocks are admitted as `reuse` when its policy is the cache default and that default is
// `always` (stored as probationary: a scan never evicts protected data, and costs nothing while
// L2 has room). So are the blocks of such a file before its readers show a pattern (its first
// blocks, and readahead's ahead of them, come before the run is long enough to tell): only a
// jump (a read that does not continue the run: a random reader) makes them `always`. Within
// one pass a ghost hit is no reuse (readahead running further ahead than the probationary room
// refetches blocks its own pass pushed out): such blocks are protected by a ghost hit only once
// a scan of the file has ended and another begun (a second epoch). An explicit policy (config
// prefix or xattr) is never overridden.
// Without L1 (l1_size 0) there is no admission: every block goes to L2, which is then the only
// place where readahead can leave blocks for the reader.
// Pinned blocks are always admitted; deep prefetch (Hydrate, HydrateRun: pin, prefetch jobs,
// prefetch_list) does not go through admission at all.
//
// The ghost list: ghost_bytes / 8 fingerprints (64 bits of the block key each) in 8-way buckets,
// replaced round-robin within a bucket, so the window is about that many distinct blocks seen
// (by default twice as many blocks as L2 holds: 256 KiB for a 16 GiB L2 of 1 MiB blocks; never
// more than AdmissionOptions::kMaxGhostBytes, so a huge L2 does not size it past the host).
// Lock-free; a lost race only forgets or repeats one fingerprint.
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "base/mutex.h"
#include "base/result.h"
#include "tiercache/tier.h"

namespace tierfs {

struct AdmissionOptions {
  // The policy of blocks whose object has none set (cache.admit). kDefault means kAlways.
  AdmitPolicy default_policy = AdmitPolicy::kAlways;
  // The most memory the ghost list takes, whatever L2's size (a window of 8M blocks: twice the
  // blocks of a 4 TiB L2 of 1 MiB blocks); cache.admit_ghost_bytes above it is refused.
  static constexpr uint64_t kMaxGhostBytes = 64ULL << 20;
  // Bytes of the ghost list (cache.admit_ghost_bytes): 8 bytes per remembered block (at least
  // 64 blocks, at most kMaxGhostBytes). 0: twice as many blocks as L2 holds, up to
  // kMaxGhostBytes.
  uint64_t ghost_bytes = 0;
  // A sequential reader of a file of at least this percentage of L2's capacity (and of at least
  // Admission::kScanMinBlocks blocks) is a scan (cache.admit_scan_percent); 0: no scan detection.
  uint32_t scan_percent = 10;
};

// "always" / "reuse" / "never". InvalidArgument otherwise.
Result<AdmitPolicy> ParseAdmitPolicy(std::string_view v);
// The value names; kDefault is "default".
std::string_view AdmitPolicyName(AdmitPolicy p);

struct AdmissionStats {
  std::atomic<uint64_t> admitted{0};    // blocks offered to L2
  std::atomic<uint64_t> rejected{0};    // blocks kept out of L2 (served through L1 only)
  std::atomic<uint64_t> probation{0};   // blocks offered as probationary (of `admitted`)
  std::atomic<uint64_t> ghost_hits{0};  // `reuse` blocks admitted because the ghost list had them
  std::atomic<uint64_t> scans{0};       // sequential passes over large files detected
};

// What L2 does with a block offered to it.
enum class AdmitDecision : uint8_t {
  kNo,         // not stored (`never`)
  kProbation,  // stored as probationary (Placement::probation): free room or probationary room
  kYes,        // stored protected
};

class Admission {
 public:
  // A sequential run this long (in blocks) makes a reader of a large file a scan.
  static constexpr uint64_t kScanRunBlocks = 4;
  // Files smaller than this many blocks are never scans (64 MiB of 1 MiB blocks): a pass over
  // them costs little, and small caches (tests, laptops) keep the plain LRU behaviour.
  static constexpr uint64_t kScanMinBlocks = 64;

  // `l2_capacity`: the byte budget of the tier admission guards (0: no scan detection).
  Admission(const AdmissionOptions& options, uint64_t l2_capacity, uint64_t block_size);

  // A demand read of [offset, offset + length) of object `key` (of `size` bytes): feeds the scan
  // detection. Cheap for files below the scan threshold (returns at once).
  void NoteRead(std::string_view key, uint64_t size, uint64_t offset, uint64_t length);

  // Whether block `block` of object `key` (of `size` bytes), about to be inserted with `hint`
  // (its object's placement), goes to L2, and how. Counts the decision.
  AdmitDecision Decide(const BlockKey& block, std::string_view key, uint64_t size,
                       const Placement& hint);

  // The policy Admit applies to blocks of the object now (scan detection included).
  AdmitPolicy Effective(std::string_view key, uint64_t size, AdmitPolicy set) const;

  const AdmissionStats& stats() const { return stats_; }
  uint64_t scan_threshold_bytes() const { return scan_min_bytes_; }
  size_t ghost_entries() const { return buckets_ * kWays; }

 private:
  static constexpr size_t kWays = 8;
  static constexpr size_t kMaxTracked = 4096;  // objects whose read pattern is followed

  struct ScanState {
    uint64_t next = 0;  // where the sequential run would continue
    uint64_t run = 0;   // bytes read in the run
    bool scanning = false;
    bool jumped = false;  // a read did not continue a run that was no scan (a random reader)
    uint32_t passes = 0;  // scans of the file that ended (a read that did not continue one)
  };

  // True if the ghost list held the block (a reuse); otherwise records it.
  bool GhostSeen(const BlockKey& block);
  // A file of at least the scan threshold that is read as a scan, or not known yet to be read
  // otherwise (no jump seen).
  bool ScanOrUnknown(std::string_view key, uint64_t size) const;
  // A scan of the file ended before (passes > 0): a ghost hit of its blocks is a reuse.
  bool ScannedBefore(std::string_view key, uint64_t size) const;

  // Constant after construction.
  const AdmitPolicy default_;
  const uint64_t block_size_;
  const uint64_t scan_min_bytes_;                   // 0: off
  size_t buckets_ = 1;                              // a power of two
  std::unique_ptr<std::atomic<uint64_t>[]> slots_;  // buckets_ * kWays fingerprints; 0: empty
  std::unique_ptr<std::atomic<uint8_t>[]> cursor_;  // per bucket: the next way to replace

  AdmissionStats stats_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, ScanState> tracked_ GUARDED_BY(mu_);
};

}  // namespace tierfs
