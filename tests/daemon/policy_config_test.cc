// daemon/config: [[policy]] tables, cache.pin_quota and cache.prefetch_job_threads.
#include <gtest/gtest.h>

#include "daemon/config.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using namespace std::chrono_literals;

std::string ErrOf(std::string_view toml) {
  DaemonOptions o;
  Status s = ApplyConfigText(toml, "t.toml", &o);
  EXPECT_FALSE(s.ok()) << toml;
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  return s.message();
}

TEST(PolicyConfig, TablesAndCacheKeys) {
  DaemonOptions o;
  Status s = ApplyConfigText(R"(
[cache]
pin_quota = "3GiB"
prefetch_job_threads = 8

[[policy]]
prefix = "datasets/imagenet/"
pin = true
ttl = "7d"
policy = "ttl"
quota = "50GiB"

[[policy]]
prefix = "/scratch/"
ttl = 30
)",
                             "t.toml", &o);
  ASSERT_OK(s);
  EXPECT_EQ(o.policies.pin_quota_bytes, 3ULL << 30);
  EXPECT_EQ(o.prefetch_jobs.threads, 8);
  ASSERT_EQ(o.policies.prefixes.size(), 2u);
  EXPECT_EQ(o.policies.prefixes[0].prefix, "datasets/imagenet/");
  EXPECT_EQ(o.policies.prefixes[0].policy.pin, true);
  EXPECT_EQ(o.policies.prefixes[0].policy.ttl, std::chrono::hours(24 * 7));
  EXPECT_EQ(o.policies.prefixes[0].policy.eviction, EvictionOrder::kTtl);
  EXPECT_EQ(o.policies.prefixes[0].quota_bytes, 50ULL << 30);
  EXPECT_EQ(o.policies.prefixes[1].quota_bytes, 0u);     // no quota
  EXPECT_EQ(o.policies.prefixes[1].prefix, "scratch/");  // leading '/' dropped
  EXPECT_EQ(o.policies.prefixes[1].policy.ttl, 30s);
  EXPECT_FALSE(o.policies.prefixes[1].policy.pin.has_value());
}

TEST(PolicyConfig, AdmissionKeys) {
  DaemonOptions o;
  EXPECT_EQ(o.cache.admission.default_policy, AdmitPolicy::kAlways);
  EXPECT_EQ(o.cache.admission.scan_percent, 10u);
  Status s = ApplyConfigText(R"(
[cache]
admit = "reuse"
admit_ghost_bytes = "2MiB"
admit_scan_percent = 0

[[policy]]
prefix = "stream/"
admit = "never"
)",
                             "t.toml", &o);
  ASSERT_OK(s);
  EXPECT_EQ(o.cache.admission.default_policy, AdmitPolicy::kReuse);
  EXPECT_EQ(o.cache.admission.ghost_bytes, 2u << 20);
  EXPECT_EQ(o.cache.admission.scan_percent, 0u);
  ASSERT_EQ(o.policies.prefixes.size(), 1u);
  EXPECT_EQ(o.policies.prefixes[0].policy.admit, AdmitPolicy::kNever);
  EXPECT_NE(ErrOf("[cache]\nadmit = \"sometimes\"\n").find("cache.admit"), std::string::npos);
  EXPECT_NE(ErrOf("[cache]\nadmit_scan_percent = 101\n").find("cache.admit_scan_percent"),
            std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\nadmit = \"lru\"\n").find("policy.admit"),
            std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\nadmit = true\n").find("policy.admit"),
            std::string::npos);
}

TEST(PolicyConfig, EveryBadKeyIsNamed) {
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\npinn = true\n").find("policy.pinn"),
            std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\npin = true\n").find("needs a prefix"), std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = 3\n").find("policy.prefix"), std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\npin = 1\n").find("policy.pin"), std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\nttl = \"soon\"\n").find("policy.ttl"),
            std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\nttl = 0\n").find("policy.ttl"), std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\npolicy = \"fifo\"\n").find("policy.policy"),
            std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\nquota = \"lots\"\n").find("policy.quota"),
            std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\nquota = 0\n").find("policy.quota"),
            std::string::npos);
  EXPECT_NE(ErrOf("[[policy]]\nprefix = \"a/\"\nquota = true\n").find("policy.quota"),
            std::string::npos);
  EXPECT_NE(ErrOf("[policy]\nprefix = \"a/\"\n").find("array of tables"), std::string::npos);
  EXPECT_NE(ErrOf("[cache]\npin_quota = 0\n").find("cache.pin_quota"), std::string::npos);
  EXPECT_NE(ErrOf("[cache]\nprefetch_job_threads = 0\n").find("cache.prefetch_job_threads"),
            std::string::npos);
}

}  // namespace
}  // namespace tierfs
