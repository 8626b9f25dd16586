// daemon/memory_limit — memory.limit (--memory-limit): the one memory budget of a mount.
//
// The limit is what the daemon's resident memory may come to. Unset (0), it is a quarter of the
// host's physical memory, or three quarters of the memory.max (cgroup v2) or
// memory.limit_in_bytes (v1) of the daemon's cgroup and its parents when that is lower
// (HostLimits: a container's limit is set for the daemon; the host's memory is the jobs' too). Of
// the limit, kProcessBytes and the block storage kept for reuse (BlockPoolRetain) are the process's
// own (code, thread stacks, heap, LMDB pages); the rest is the budget the caches draw from
// (base/memory_budget.h): L1, readahead runs, prefetch jobs, blocks being fetched or held by
// readers, directory listings.
//
// FitToMemoryLimit sizes the fixed shares inside the budget: readahead (cache.readahead_budget)
// at most a quarter of it, the prefetch jobs (cache.prefetch_job_memory) at most an eighth, and
// L1 (cache.l1_size) at most what those leave; at run time L1 gives blocks back whenever another
// consumer needs room (MemoryTier is the budget's reclaimer).
//
// Thread-safe (no shared state but the process's budget, base/memory_budget.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "base/result.h"
#include "base/status.h"
#include "daemon/config.h"
#include "daemon/host_limits.h"

namespace tierfs {

// The process's own memory, outside the budget (measured: 17 MiB idle with 220 threads; thread
// stacks and FUSE request buffers grow with load).
inline constexpr uint64_t kProcessBytes = 32ULL << 20;
// Blocks of block_size the budget must hold at least: a few readers' blocks in flight.
inline constexpr uint64_t kMinBudgetBlocks = 16;

struct MemoryLimit {
  uint64_t bytes = 0;
  // Where it comes from: "memory.limit", or "a quarter of physical memory" / "three quarters
  // of the cgroup memory limit (PATH)".
  std::string from;
  // Short form for `tierfs status`: "config", "memory" or "cgroup".
  std::string source;
};

// Freed block storage kept for reuse under a limit (min(64 MiB, limit / 16)).
uint64_t BlockPoolRetain(uint64_t limit_bytes);
// The budget the caches draw from: the limit less the process's own memory.
uint64_t MemoryBudgetBytes(uint64_t limit_bytes);
// The smallest memory.limit a mount with blocks of `block_size` runs with.
uint64_t MinMemoryLimit(uint64_t block_size);

// The limit a mount uses: `o.memory_limit`, or a quarter of the host's memory, three quarters
// of its cgroup's (at least MinMemoryLimit; 2 GiB when the host's memory is unknown). A
// cache.l1_size the user set (DaemonOptions::explicit_keys) is kept under a derived limit, which
// grows to hold it (InvalidArgument naming the key when that is more than the host's memory); an
// explicit memory.limit is the hard one, and L1 is fitted into it (ApplyMemoryLimit warns).
Result<MemoryLimit> ResolveMemoryLimit(const DaemonOptions& o, const HostLimits& host);
// What L1 may hold under a limit of `limit_bytes` once readahead and the prefetch jobs have
// their shares (FitToMemoryLimit's cap).
uint64_t L1Room(uint64_t limit_bytes, const DaemonOptions& o);

// Shrinks cache.l1_size, cache.readahead_budget and cache.prefetch_job_memory to their shares of
// the budget of `limit`; returns one line per value it changed ("cache.l1_size: 1GiB -> ...").
std::vector<std::string> FitToMemoryLimit(const MemoryLimit& limit, DaemonOptions* o);

// For a mount: resolves the limit, fits the sizes to it, creates the process's budget
// (ProcessMemoryBudget) and hands it to L1, readahead and the catalog in `o`; logs what it
// changed. InvalidArgument naming memory.limit when the limit is above the host's memory, and
// ResolveMemoryLimit's errors.
Status ApplyMemoryLimit(DaemonOptions* o);

// What `tierfs config check` says about the limit: its value, where it comes from and the
// shares; ResolveMemoryLimit's errors.
Result<std::string> DescribeMemoryLimit(const DaemonOptions& o, const HostLimits& host);

// The limit of this process and where it came from (ApplyMemoryLimit); empty before.
const MemoryLimit& ProcessMemoryLimit();

// This process's resident memory (VmRSS, /proc/self/statm) and open file descriptors
// (/proc/self/fd); 0 when unreadable.
uint64_t ProcessResidentBytes();
uint64_t ProcessOpenFds();

// "memory_limit=N memory_limit_from=SOURCE memory_used=N memory_l1=N memory_blocks=N
// memory_listings=N rss=N" for user.tierfs.daemon (`tierfs status`); "" without a budget.
std::string MemoryStatusFields();

// tierfs_memory_limit_bytes, tierfs_memory_budget_limit_bytes, tierfs_memory_budget_bytes
// {consumer=l1|blocks|listings}, tierfs_memory_budget_peak_bytes and
// tierfs_memory_reclaimed_bytes_total of the process's budget (none without one).
void CollectMemoryBudgetMetrics(metrics::Exposition* e);

}  // namespace tierfs
