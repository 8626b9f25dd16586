#include "daemon/memory_limit.h"

#include <dirent.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "base/logging.h"
#include "base/memory_budget.h"
#include "base/units.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace {

constexpr uint64_t kPoolRetainMax = 64ULL << 20;
constexpr uint64_t kUnknownHostLimit = 2ULL << 30;

MemoryLimit& ProcessLimit() {
  static MemoryLimit limit;
  return limit;
}

// Lowers *value to `cap`, noting it in *changes.
void Cap(const char* key, uint64_t cap, uint64_t* value, std::vector<std::string>* changes) {
  if (*value <= cap) return;
  changes->push_back(fmt::format("{}: {} -> {}", key, FormatSize(*value), FormatSize(cap)));
  *value = cap;
}

}  // namespace

uint64_t BlockPoolRetain(uint64_t limit_bytes) {
  return std::min(kPoolRetainMax, limit_bytes / 16);
}

uint64_t MemoryBudgetBytes(uint64_t limit_bytes) {
  const uint64_t own = kProcessBytes + BlockPoolRetain(limit_bytes);
  return limit_bytes > own ? limit_bytes - own : 0;
}

uint64_t MinMemoryLimit(uint64_t block_size) {
  // The smallest limit whose budget holds kMinBudgetBlocks blocks (the retained pool grows with
  // the limit: solve limit - kProcessBytes - limit/16 >= blocks).
  const uint64_t need = kProcessBytes + kMinBudgetBlocks * block_size;
  const uint64_t mib = 1ULL << 20;
  return ((need * 16 + 14) / 15 + mib - 1) / mib * mib;
}

uint64_t L1Room(uint64_t limit_bytes, const DaemonOptions& o) {
  const uint64_t budget = MemoryBudgetBytes(limit_bytes);
  const uint64_t block = std::max<uint64_t>(1, o.cache.block_size);
  const uint64_t readahead = std::min(o.cache.readahead_budget_bytes, std::max(block, budget / 4));
  const uint64_t jobs = std::min(o.prefetch_jobs.memory_budget, std::max(block, budget / 8));
  // At least one block per shard's minimum, so L1 stays on: the budget takes the rest back.
  return std::max(block * MemoryTierOptions::kMinBlocksPerShard,
                  budget > readahead + jobs ? budget - readahead - jobs : 0);
}

namespace {

MemoryLimit DerivedMemoryLimit(const DaemonOptions& o, const HostLimits& host) {
  MemoryLimit m;
  const uint64_t floor = MinMemoryLimit(o.cache.block_size);
  if (host.memory_bytes == 0) {
    m.bytes = std::max(floor, kUnknownHostLimit);
    m.from = "the default for a host of unknown memory";
    m.source = "default";
    return m;
  }
  // A cgroup's limit was set for what runs in it (a container: the daemon); the host's memory is
  // shared with the jobs.
  const bool cgroup = host.memory_what.starts_with("the cgroup");
  m.bytes = std::max(floor, cgroup ? host.memory_bytes / 4 * 3 : host.memory_bytes / 4);
  m.from = (cgroup ? "three quarters of " : "a quarter of ") + host.memory_what;
  m.source = cgroup ? "cgroup" : "memory";
  return m;
}

// The smallest whole number of MiB, at least `from`, that as a limit lets L1 hold `l1` bytes.
uint64_t LimitHoldingL1(uint64_t from, uint64_t l1, const DaemonOptions& o) {
  constexpr uint64_t kMiB = 1ULL << 20;
  auto holds = [&](uint64_t mib) { return L1Room(mib * kMiB, o) >= l1; };
  uint64_t lo = from / kMiB, hi = std::max<uint64_t>(1, lo);  // !holds(lo) unless lo holds
  if (holds(lo)) return std::max(from, lo * kMiB);
  while (!holds(hi)) hi *= 2;  // L1Room grows with the limit: ends
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (holds(mid) ? hi : lo) = mid;
  }
  return hi * kMiB;
}

}  // namespace

Result<MemoryLimit> ResolveMemoryLimit(const DaemonOptions& o, const HostLimits& host) {
  const bool l1_set = o.l1.capacity_bytes != 0 && o.explicit_keys.contains("cache.l1_size");
  // An explicit limit is the hard one (a container's): an L1 set above what it leaves is
  // fitted, with a warning (ApplyMemoryLimit).
  if (o.memory_limit != 0) {
    return MemoryLimit{o.memory_limit, "memory.limit", "config"};
  }
  MemoryLimit m = DerivedMemoryLimit(o, host);
  if (l1_set && L1Room(m.bytes, o) < o.l1.capacity_bytes) {
    const uint64_t need = LimitHoldingL1(m.bytes, o.l1.capacity_bytes, o);
    if (host.memory_bytes != 0 && need > host.memory_bytes) {
      return Status::InvalidArgument(
          fmt::format("cache.l1_size (--l1-size) {} needs a memory limit of {}, more than {} ({})",
                      FormatSize(o.l1.capacity_bytes), FormatSize(need), host.memory_what,
                      FormatSize(host.memory_bytes)));
    }
    m.bytes = need;
    m.from += ", raised to hold cache.l1_size";
  }
  return m;
}

std::vector<std::string> FitToMemoryLimit(const MemoryLimit& limit, DaemonOptions* o) {
  std::vector<std::string> changes;
  const uint64_t budget = MemoryBudgetBytes(limit.bytes);
  const uint64_t block = std::max<uint64_t>(1, o->cache.block_size);
  Cap("cache.readahead_budget", std::max(block, budget / 4), &o->cache.readahead_budget_bytes,
      &changes);
  Cap("cache.prefetch_job_memory", std::max(block, budget / 8), &o->prefetch_jobs.memory_budget,
      &changes);
  if (o->l1.capacity_bytes != 0)
    Cap("cache.l1_size", L1Room(limit.bytes, *o), &o->l1.capacity_bytes, &changes);
  return changes;
}

Status ApplyMemoryLimit(DaemonOptions* o) {
  const HostLimits host = ReadHostLimits(o->cache_dir);
  // Sizes this host cannot hold are refused as configured, before anything is fitted to the
  // limit (fitting would hide them).
  TIERFS_RETURN_IF_ERROR(CheckMemorySizes(*o, host));
  TIERFS_ASSIGN_OR_RETURN(const MemoryLimit limit, ResolveMemoryLimit(*o, host));
  if (host.memory_bytes != 0 && limit.bytes > host.memory_bytes) {
    return Status::InvalidArgument(
        fmt::format("memory.limit (--memory-limit): {} is more than {} ({})",
                    FormatSize(limit.bytes), host.memory_what, FormatSize(host.memory_bytes)));
  }
  const uint64_t l1_asked = o->l1.capacity_bytes;
  const std::vector<std::string> changes = FitToMemoryLimit(limit, o);
  if (o->l1.capacity_bytes < l1_asked && o->explicit_keys.contains("cache.l1_size")) {
    Logger(Module::kDaemon)
        .warn(
            "cache.l1_size (--l1-size) {} does not fit memory.limit (--memory-limit) {}: L1 "
            "holds {}; raise memory.limit to {} for all of it",
            FormatSize(l1_asked), FormatSize(limit.bytes), FormatSize(o->l1.capacity_bytes),
            FormatSize(LimitHoldingL1(limit.bytes, l1_asked, *o)));
  }
  MemoryBudget* budget = SetProcessMemoryBudget(MemoryBudgetBytes(limit.bytes));
  Block::LimitPool(BlockPoolRetain(limit.bytes));
  o->l1.memory_budget = budget;
  o->cache.memory_budget = budget;
  o->catalog.memory_budget = budget;
  ProcessLimit() = limit;
  Logger(Module::kDaemon)
      .info("memory limit {} ({}): {} for the caches{}{}", FormatSize(limit.bytes), limit.from,
            FormatSize(budget->limit()), changes.empty() ? "" : "; fitted ",
            fmt::join(changes, ", "));
  return Status::OK();
}

Result<std::string> DescribeMemoryLimit(const DaemonOptions& o, const HostLimits& host) {
  TIERFS_ASSIGN_OR_RETURN(const MemoryLimit limit, ResolveMemoryLimit(o, host));
  DaemonOptions fitted = o;
  const std::vector<std::string> changes = FitToMemoryLimit(limit, &fitted);
  std::string out = fmt::format(
      "memory limit {} ({}): {} for the caches, L1 {}, readahead {}, "
      "prefetch jobs {}\n",
      FormatSize(limit.bytes), limit.from, FormatSize(MemoryBudgetBytes(limit.bytes)),
      FormatSize(fitted.l1.capacity_bytes), FormatSize(fitted.cache.readahead_budget_bytes),
      FormatSize(fitted.prefetch_jobs.memory_budget));
  for (const std::string& c : changes) out += fmt::format("  fitted to the limit: {}\n", c);
  return out;
}

const MemoryLimit& ProcessMemoryLimit() { return ProcessLimit(); }

uint64_t ProcessResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "re");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  const long page = ::sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? resident * static_cast<uint64_t>(page) : 0;
}

uint64_t ProcessOpenFds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  uint64_t n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n > 0 ? n - 1 : 0;  // not the directory's own descriptor
}

void CollectMemoryBudgetMetrics(metrics::Exposition* e) {
  const MemoryBudget* b = ProcessMemoryBudget();
  if (b == nullptr) return;
  e->AddGauge("tierfs_memory_limit_bytes",
              "memory.limit: what the daemon's resident memory may come to.",
              {{"source", ProcessLimit().source}}, static_cast<double>(ProcessLimit().bytes));
  e->AddGauge("tierfs_memory_budget_limit_bytes",
              "The part of memory.limit the caches draw from (the rest is the process's own).", {},
              static_cast<double>(b->limit()));
  for (const MemoryUse use : {MemoryUse::kL1, MemoryUse::kBlocks, MemoryUse::kListings}) {
    e->AddGauge("tierfs_memory_budget_bytes", "Bytes of the memory budget each consumer holds.",
                {{"consumer", std::string(MemoryUseName(use))}}, static_cast<double>(b->used(use)));
  }
  e->AddGauge("tierfs_memory_budget_peak_bytes", "The highest use of the memory budget.", {},
              static_cast<double>(b->peak()));
  e->AddCounter("tierfs_memory_reclaimed_bytes_total",
                "Bytes L1 gave back because another consumer of the budget needed room.", {},
                static_cast<double>(b->reclaimed_bytes()));
}

std::string MemoryStatusFields() {
  const MemoryBudget* b = ProcessMemoryBudget();
  if (b == nullptr) return std::string();
  return fmt::format(
      "memory_limit={} memory_limit_from={} memory_budget={} memory_used={} memory_l1={} "
      "memory_blocks={} memory_listings={} rss={}",
      ProcessLimit().bytes, ProcessLimit().source, b->limit(), b->used(), b->used(MemoryUse::kL1),
      b->used(MemoryUse::kBlocks), b->used(MemoryUse::kListings), ProcessResidentBytes());
}

}  // namespace tierfs
