// daemon/host_limits: memory budgets above the host's memory (or its cgroup's limit) are refused
// naming the key, an L2 above its file system is warned about.
#include "daemon/host_limits.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs {
namespace {

namespace fs = std::filesystem;
using ::tierfs::testing::TempDir;

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(CgroupMemoryLimit, TheLowestLimitOnTheWayUpCounts) {
  TempDir root;
  Write(root.path() + "/memory.max", "max\n");
  Write(root.path() + "/a/memory.max", "8589934592\n");
  Write(root.path() + "/a/b/memory.max", "max\n");
  std::string where;
  EXPECT_EQ(CgroupMemoryLimit("0::/a/b\n", root.path(), &where), 8589934592u);
  EXPECT_EQ(where, root.path() + "/a/memory.max");
  // Unlimited all the way, or no such cgroup: no limit.
  EXPECT_EQ(CgroupMemoryLimit("0::/\n", root.path(), nullptr), 0u);
  EXPECT_EQ(CgroupMemoryLimit("0::/nowhere\n", root.path(), nullptr), 0u);
  // cgroup v1: the memory controller's hierarchy; its "unlimited" is a huge number.
  Write(root.path() + "/memory/job/memory.limit_in_bytes", "1073741824\n");
  Write(root.path() + "/memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(CgroupMemoryLimit("5:cpu,cpuacct:/x\n4:memory:/job\n", root.path(), nullptr),
            1073741824u);
}

TEST(HostLimits, MemoryBudgetsAboveTheMemoryAreRefusedNamingTheKey) {
  HostLimits host;
  host.memory_bytes = 24ULL << 30;
  host.memory_what = "physical memory";
  DaemonOptions o;
  o.l1.capacity_bytes = 24ULL << 30;
  EXPECT_OK(CheckMemorySizes(o, host));
  o.l1.capacity_bytes = 100ULL << 30;
  Status s = CheckMemorySizes(o, host);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("cache.l1_size (--l1-size): 100GiB is more than physical memory "
                             "(24GiB)"),
            std::string::npos)
      << s.message();
  o.l1.capacity_bytes = 1ULL << 30;
  o.cache.readahead_budget_bytes = 1ULL << 50;
  s = CheckMemorySizes(o, host);
  EXPECT_NE(s.message().find("cache.readahead_budget"), std::string::npos) << s.message();
  o.cache.readahead_budget_bytes = 256ULL << 20;
  o.prefetch_jobs.memory_budget = 1ULL << 40;
  s = CheckMemorySizes(o, host);
  EXPECT_NE(s.message().find("cache.prefetch_job_memory"), std::string::npos) << s.message();
  // Unknown memory: nothing to check against.
  EXPECT_OK(CheckMemorySizes(o, HostLimits{}));
}

TEST(HostLimits, AnL2AboveItsFileSystemIsAWarning) {
  HostLimits host;
  host.cache_fs_bytes = 100ULL << 30;
  host.cache_fs_path = "/var/cache";
  EXPECT_EQ(L2SizeWarning(100ULL << 30, "/var/cache/tierfs", host), "");
  const std::string w = L2SizeWarning(1ULL << 50, "/var/cache/tierfs", host);
  EXPECT_NE(w.find("cache.l2_size (--l2-size): 1PiB is more than the whole file system of the "
                   "cache directory /var/cache/tierfs (100GiB at /var/cache)"),
            std::string::npos)
      << w;
  EXPECT_NE(w.find("cache.l2_min_free"), std::string::npos) << w;
}

TEST(HostLimits, ReadsThisHost) {
  TempDir dir;
  const HostLimits host = ReadHostLimits(dir.path() + "/not/yet/there");
  EXPECT_GT(host.memory_bytes, 0u);
  EXPECT_GT(host.cache_fs_bytes, 0u);
  EXPECT_EQ(host.cache_fs_path, dir.path());
}

}  // namespace
}  // namespace tierfs
