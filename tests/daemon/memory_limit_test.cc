// daemon/memory_limit: the limit a mount uses, where it comes from, and the sizes fitted into it.
#include "daemon/memory_limit.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

constexpr uint64_t kMiB = 1ULL << 20, kGiB = 1ULL << 30;

HostLimits Host(uint64_t bytes, std::string what) {
  HostLimits h;
  h.memory_bytes = bytes;
  h.memory_what = std::move(what);
  return h;
}

TEST(MemoryLimit, ComesFromTheKeyOrTheHostOrItsCgroup) {
  DaemonOptions o;
  o.memory_limit = 512 * kMiB;
  MemoryLimit m = *ResolveMemoryLimit(o, Host(16 * kGiB, "physical memory"));
  EXPECT_EQ(m.bytes, 512 * kMiB);
  EXPECT_EQ(m.source, "config");
  EXPECT_EQ(m.from, "memory.limit");
  o.memory_limit = 0;
  m = *ResolveMemoryLimit(o, Host(16 * kGiB, "physical memory"));
  EXPECT_EQ(m.bytes, 4 * kGiB);
  EXPECT_EQ(m.source, "memory");
  EXPECT_EQ(m.from, "a quarter of physical memory");
  m = *ResolveMemoryLimit(o,
                          Host(12 * kGiB, "the cgroup memory limit (/sys/fs/cgroup/x/memory.max)"));
  EXPECT_EQ(m.bytes, 9 * kGiB);
  EXPECT_EQ(m.source, "cgroup");
  EXPECT_EQ(m.from, "three quarters of the cgroup memory limit (/sys/fs/cgroup/x/memory.max)");
  // A tiny host still gets a limit the daemon runs with; an unknown one a fixed default.
  m = *ResolveMemoryLimit(o, Host(64 * kMiB, "physical memory"));
  EXPECT_EQ(m.bytes, MinMemoryLimit(o.cache.block_size));
  m = *ResolveMemoryLimit(o, HostLimits{});
  EXPECT_EQ(m.bytes, 2 * kGiB);
  EXPECT_EQ(m.source, "default");
}

TEST(MemoryLimit, FitsL1ReadaheadAndPrefetchJobsIntoTheBudget) {
  DaemonOptions o;  // l1 1 GiB, readahead 256 MiB, prefetch jobs 64 MiB
  MemoryLimit m;
  m.bytes = 512 * kMiB;
  const std::vector<std::string> changes = FitToMemoryLimit(m, &o);
  const uint64_t budget = MemoryBudgetBytes(m.bytes);
  EXPECT_EQ(budget, 512 * kMiB - kProcessBytes - BlockPoolRetain(m.bytes));
  EXPECT_EQ(o.cache.readahead_budget_bytes, budget / 4);
  EXPECT_EQ(o.prefetch_jobs.memory_budget, budget / 8);
  EXPECT_EQ(o.l1.capacity_bytes,
            budget - o.cache.readahead_budget_bytes - o.prefetch_jobs.memory_budget);
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0].rfind("cache.readahead_budget: 256MiB -> ", 0), 0u) << changes[0];
  // A limit that leaves room changes nothing; L1 0 stays off.
  DaemonOptions big;
  big.l1.capacity_bytes = 0;
  m.bytes = 64 * kGiB;
  EXPECT_TRUE(FitToMemoryLimit(m, &big).empty());
  EXPECT_EQ(big.l1.capacity_bytes, 0u);
}

TEST(MemoryLimit, ALimitTooSmallToRunWithIsRefusedNamingTheKey) {
  DaemonOptions o;
  o.source = "file:///data";
  o.mountpoint = "/mnt";
  ASSERT_OK(FinishOptions(&o, [](const char*) { return std::optional<std::string>(); }));
  o.memory_limit = 32 * kMiB;
  Status s = Validate(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("memory.limit (--memory-limit): 32MiB is too small to run with"),
            std::string::npos)
      << s.message();
  o.memory_limit = MinMemoryLimit(o.cache.block_size);
  EXPECT_OK(Validate(o));
  EXPECT_EQ(MinMemoryLimit(1 * kMiB), 52 * kMiB);  // 32 MiB + 16 blocks, and the pool's 1/16
}

TEST(MemoryLimit, DescribeSaysTheLimitItsSourceAndTheFittedSizes) {
  DaemonOptions o;
  const Result<std::string> described = DescribeMemoryLimit(o, Host(2 * kGiB, "physical memory"));
  ASSERT_OK(described);
  const std::string& text = *described;
  EXPECT_EQ(text.rfind("memory limit 512MiB (a quarter of physical memory): ", 0), 0u) << text;
  EXPECT_NE(text.find("fitted to the limit: cache.l1_size: 1GiB -> "), std::string::npos) << text;
}

// A cache.l1_size the user set is kept under a derived limit, which grows to hold it (up to the
// host's memory); a default L1 is fitted, and so is any L1 under an explicit memory.limit.
TEST(MemoryLimit, AnL1SizeTheUserSetIsKeptOrRefused) {
  const HostLimits host = Host(8 * kGiB, "physical memory");  // derived limit: 2 GiB
  DaemonOptions o;
  o.l1.capacity_bytes = 4 * kGiB;
  // Not set by the user: fitted into the derived limit.
  Result<MemoryLimit> m = ResolveMemoryLimit(o, host);
  ASSERT_OK(m);
  EXPECT_EQ(m->bytes, 2 * kGiB);
  DaemonOptions fitted = o;
  FitToMemoryLimit(*m, &fitted);
  EXPECT_LT(fitted.l1.capacity_bytes, 2 * kGiB);
  // Set by the user: the limit is raised just enough to hold it.
  o.explicit_keys.insert("cache.l1_size");
  m = ResolveMemoryLimit(o, host);
  ASSERT_OK(m);
  EXPECT_GT(m->bytes, 4 * kGiB);
  EXPECT_LE(m->bytes, 5 * kGiB);
  EXPECT_NE(m->from.find("raised to hold cache.l1_size"), std::string::npos) << m->from;
  EXPECT_GE(L1Room(m->bytes, o), o.l1.capacity_bytes);
  EXPECT_LT(L1Room(m->bytes - kMiB, o), o.l1.capacity_bytes);  // the smallest such limit
  fitted = o;
  EXPECT_TRUE(FitToMemoryLimit(*m, &fitted).empty());
  EXPECT_EQ(fitted.l1.capacity_bytes, 4 * kGiB);
  // More than the host can give: refused naming the key and the host.
  o.l1.capacity_bytes = 7 * kGiB + 900 * kMiB;
  m = ResolveMemoryLimit(o, host);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("cache.l1_size (--l1-size) 7.9GiB needs a memory limit of"),
            std::string::npos)
      << m.status().message();
  // An explicit memory.limit is the hard one: L1 is fitted into it (the mount warns).
  o.l1.capacity_bytes = 4 * kGiB;
  o.memory_limit = 2 * kGiB;
  m = ResolveMemoryLimit(o, host);
  ASSERT_OK(m);
  EXPECT_EQ(m->bytes, 2 * kGiB);
  fitted = o;
  ASSERT_EQ(FitToMemoryLimit(*m, &fitted).size(), 1u);
  EXPECT_EQ(fitted.l1.capacity_bytes, L1Room(2 * kGiB, o));
}

}  // namespace
}  // namespace tierfs
