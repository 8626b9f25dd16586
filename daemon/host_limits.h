// daemon/host_limits — what the host can give the caches: memory for L1 (physical memory, or the
// cgroup's memory limit when lower) and room for L2 (the size of the cache directory's file
// system). `tierfs mount` refuses an L1 above the memory and warns about an L2 above the file
// system (its free-space floor keeps the file system from filling); `tierfs config check`
// reports both. The other memory budgets (readahead, prefetch jobs) are held to the memory too.
//
// Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "daemon/config.h"

namespace tierfs {

struct HostLimits {
  uint64_t memory_bytes = 0;    // 0: unknown (no check)
  std::string memory_what;      // "physical memory" / "the cgroup memory limit (PATH)"
  uint64_t cache_fs_bytes = 0;  // 0: unknown (no check)
  std::string cache_fs_path;    // the directory statvfs(2) was asked about
};

// The lowest memory.max (cgroup v2) or memory.limit_in_bytes (v1) on the way from the cgroup of
// `proc_self_cgroup` (the text of /proc/self/cgroup) up to `cgroup_root`'s top; 0 when there is
// none (unlimited, or no memory controller).
uint64_t CgroupMemoryLimit(const std::string& proc_self_cgroup, const std::string& cgroup_root,
                           std::string* where);

// Physical memory and the cgroup limit of this process, and the size of the file system that
// holds `cache_dir` (or its nearest existing parent).
HostLimits ReadHostLimits(const std::string& cache_dir);

// InvalidArgument naming the key when a memory budget (cache.l1_size, cache.readahead_budget,
// cache.prefetch_job_memory) is above the host's memory.
Status CheckMemorySizes(const DaemonOptions& o, const HostLimits& host);

// A warning naming cache.l2_size when `l2_bytes` is above the cache file system's size; "" when
// it fits (or the size is unknown).
std::string L2SizeWarning(uint64_t l2_bytes, const std::string& cache_dir, const HostLimits& host);

}  // namespace tierfs
