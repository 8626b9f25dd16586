// MemoryBudget: one byte budget for the memory a daemon's caches and buffers hold (memory.limit).
//
// Consumers charge what they hold, each under its own name (MemoryUse), so that the use of each
// is visible (metrics, `tierfs status`), and the sum is held to one limit:
//   - kBlocks: block storage (tier.h, Block::Allocate) not held by L1: blocks being fetched,
//     readahead runs, prefetch buffers, sparse chunks, blocks a reply or an open file holds.
//     Charged when the storage is allocated, released when it is freed.
//   - kL1: block storage L1 holds. L1 does not allocate: inserting a block moves its charge from
//     kBlocks to kL1 (Move), evicting it moves it back, so the sum counts each block once.
//   - kListings: directory listings held in memory (listing snapshots of open directories).
// When a charge would take the sum over the limit, the reclaimer (L1: it evicts its least
// recently used blocks) is asked to give the excess back first: L1 shrinks before anything else
// waits. What cannot wait (a reader's block) is charged anyway (Charge); what can (readahead)
// asks for room first (MakeRoom) and waits for it, or is skipped.
//
// The limit is what the consumers may hold; the daemon sets it to memory.limit less what the
// process needs besides (code, stacks, heap, freed storage kept for reuse).
//
// A process has one budget for its block storage (ProcessMemoryBudget): blocks are freed by
// whichever thread drops the last reference, also after the components that charged them are
// gone. Components are given the budget in their options (tests pass their own).
//
// Thread-safe; no external synchronization needed. The reclaimer is called without any lock of
// the budget held, on the thread that needs the room.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>

#include "base/mutex.h"

namespace tierfs {

enum class MemoryUse : uint8_t { kL1 = 0, kBlocks = 1, kListings = 2 };
inline constexpr size_t kMemoryUses = 3;
// "l1", "blocks", "listings": the consumer label of the metrics and the status.
std::string_view MemoryUseName(MemoryUse use);

class MemoryBudget {
 public:
  // Gives back up to `bytes` of what the reclaimer holds (its Release/Move calls happen inside);
  // returns the bytes it gave back.
  using Reclaimer = std::function<uint64_t(uint64_t bytes)>;

  explicit MemoryBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  uint64_t limit() const { return limit_; }
  // The sum of every consumer's charge.
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  // One consumer's charge (0 when a Move took more than was charged: a block allocated before
  // the budget existed).
  uint64_t used(MemoryUse use) const;
  // The highest sum seen.
  uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  // Times the reclaimer was asked for room, and the bytes it gave back.
  uint64_t reclaims() const { return reclaims_.load(std::memory_order_relaxed); }
  uint64_t reclaimed_bytes() const { return reclaimed_bytes_.load(std::memory_order_relaxed); }

  // Charges `bytes` to `use`, after asking the reclaimer for what would be over the limit. The
  // charge is made even when the reclaimer cannot give enough back: for memory that is taken
  // whatever the budget says (a block a reader waits for).
  void Charge(MemoryUse use, uint64_t bytes);
  // Whether `bytes` more fit within the limit, after asking the reclaimer for what would not.
  // Charges nothing: for a gate in front of allocations that Charge (readahead).
  bool MakeRoom(uint64_t bytes);
  void Release(MemoryUse use, uint64_t bytes);
  // Moves `bytes` of charge from one consumer to another (the sum is unchanged).
  void Move(MemoryUse from, MemoryUse to, uint64_t bytes);

  // Sets (or with an empty function, clears) the reclaimer. Clearing waits for a call in
  // progress to return, so the reclaimer's owner may go away after it.
  void SetReclaimer(Reclaimer reclaimer) EXCLUDES(reclaimer_mu_);

 private:
  // Asks the reclaimer for `bytes` (none on a thread already inside it).
  void Reclaim(uint64_t bytes) EXCLUDES(reclaimer_mu_);
  void Add(MemoryUse use, int64_t bytes);

  // Constant after construction.
  const uint64_t limit_;

  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> peak_{0};
  std::array<std::atomic<int64_t>, kMemoryUses> by_use_{};
  std::atomic<uint64_t> reclaims_{0};
  std::atomic<uint64_t> reclaimed_bytes_{0};

  // Held shared while the reclaimer runs, exclusively to change it.
  SharedMutex reclaimer_mu_;
  Reclaimer reclaimer_ GUARDED_BY(reclaimer_mu_);
};

// The process's budget: null until SetProcessMemoryBudget. Block storage charges it.
MemoryBudget* ProcessMemoryBudget();
// Creates the process's budget with `limit_bytes` (once: later calls return the first one).
// Never destroyed: blocks may be freed by static destructors at exit.
MemoryBudget* SetProcessMemoryBudget(uint64_t limit_bytes);

}  // namespace tierfs
