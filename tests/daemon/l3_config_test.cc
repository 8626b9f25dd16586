// daemon/config: the L3 keys (cache.l3*), the --l3/--l3-endpoint flags and L3 credentials.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/units.h"
#include "daemon/config.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs {
namespace {

using Env = std::map<std::string, std::string>;

GetEnvFn L3Env(Env env) {
  return [env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

DaemonOptions L3Base() {
  DaemonOptions o;
  o.source = "s3://data/train";
  o.mountpoint = "/mnt/data";
  return o;
}

TEST(L3ConfigTest, AbsentByDefault) {
  DaemonOptions o = L3Base();
  ASSERT_OK(FinishOptions(&o, L3Env({})));
  EXPECT_TRUE(o.l3.empty());
  EXPECT_TRUE(o.l3_store.bucket.empty());
  EXPECT_OK(ResolveL3Credentials(&o, L3Env({})));
  EXPECT_EQ(DescribeOptions(o).find("l3="), std::string::npos);
}

TEST(L3ConfigTest, KeysFromTheFile) {
  DaemonOptions o = L3Base();
  Status s = ApplyConfigText(R"(
[cache]
block_size = "4MiB"
l3 = "s3://regional-cache/tierfs"
l3_endpoint = "http://10.0.0.7:9000"
l3_region = "eu-west-3"
l3_ttl = "7d"
l3_max_bytes = "10TiB"
l3_write_queue = 64
l3_write_threads = 3
l3_request_timeout = "2s"
l3_max_attempts = 1
l3_access_key_id_env = "L3_KEY"
l3_secret_access_key_env = "L3_SECRET"
)",
                             "t.toml", &o);
  ASSERT_OK(s);
  ASSERT_OK(FinishOptions(&o, L3Env({{"AWS_REGION", "us-west-2"}})));
  EXPECT_EQ(o.l3_store.bucket, "regional-cache");
  EXPECT_EQ(o.l3_store.prefix, "tierfs/");
  EXPECT_EQ(o.l3_store.endpoint, "http://10.0.0.7:9000");
  EXPECT_EQ(o.l3_store.region, "eu-west-3");
  EXPECT_EQ(o.l3_store.request_timeout, std::chrono::seconds(2));
  EXPECT_EQ(o.l3_store.max_attempts, 1);
  EXPECT_EQ(o.l3_tier.ttl, std::chrono::hours(24 * 7));
  EXPECT_EQ(o.l3_gc.ttl, std::chrono::hours(24 * 7));
  EXPECT_EQ(o.l3_gc.max_bytes, 10ULL << 40);
  EXPECT_EQ(o.l3_tier.write_queue, 64u);
  EXPECT_EQ(o.l3_tier.write_threads, 3);
  EXPECT_EQ(o.l3_tier.block_size, 4ULL << 20);

  // Own credentials from the named variables; secrets never in the description.
  ASSERT_OK(ResolveL3Credentials(&o, L3Env({{"L3_KEY", "AKL3"}, {"L3_SECRET", "s3cr3t"}})));
  EXPECT_EQ(o.l3_store.credentials.access_key_id, "AKL3");
  EXPECT_EQ(o.l3_store.credentials.secret_access_key, "s3cr3t");
  const std::string d = DescribeOptions(o);
  EXPECT_NE(d.find("l3=s3://regional-cache/tierfs"), std::string::npos) << d;
  EXPECT_EQ(d.find("s3cr3t"), std::string::npos);
  EXPECT_EQ(d.find("AKL3"), std::string::npos);

  // A missing variable is named, its value never shown.
  Status miss = ResolveL3Credentials(&o, L3Env({{"L3_KEY", "AKL3"}}));
  EXPECT_FALSE(miss.ok());
  EXPECT_NE(miss.message().find("L3_SECRET"), std::string::npos) << miss.ToString();
}

TEST(L3ConfigTest, FlagsAndDefaults) {
  DaemonOptions o = L3Base();
  o.region = "ap-south-1";
  MountFlags f;
  f.l3 = "s3://l3bucket";
  f.l3_endpoint = "http://127.0.0.1:4569";
  ASSERT_OK(ApplyFlags(f, &o));
  ASSERT_OK(FinishOptions(&o, L3Env({})));
  EXPECT_EQ(o.l3_store.bucket, "l3bucket");
  EXPECT_EQ(o.l3_store.prefix, "");
  EXPECT_EQ(o.l3_store.endpoint, "http://127.0.0.1:4569");
  EXPECT_EQ(o.l3_store.region, "ap-south-1");  // the origin's region
  EXPECT_EQ(o.l3_tier.ttl, kForever);
  EXPECT_EQ(o.l3_store.max_attempts, 2);  // short, for a regional store
  EXPECT_LE(o.l3_store.request_timeout, std::chrono::seconds(5));

  o.l3_no_sign_request = true;
  ASSERT_OK(ResolveL3Credentials(&o, L3Env({})));
  EXPECT_TRUE(o.l3_store.credentials.anonymous);
}

// Credentials other than fixed or anonymous ones are left to the credential chain the daemon
// builds at mount time; FinishOptions records where the profile and the region came from.
TEST(L3ConfigTest, ChainCredentialsAreLeftToTheDaemon) {
  DaemonOptions o = L3Base();
  o.l3 = "s3://l3bucket";
  o.l3_profile = "regional";
  ASSERT_OK(FinishOptions(&o, L3Env({{"AWS_PROFILE", "envprofile"}})));
  ASSERT_OK(ResolveL3Credentials(&o, L3Env({})));
  EXPECT_TRUE(o.l3_store.credentials.access_key_id.empty());
  EXPECT_FALSE(o.l3_store.credentials.anonymous);
  EXPECT_EQ(o.profile, "envprofile");
  EXPECT_TRUE(o.profile_from_env);  // not explicit: the environment keys still come first
  EXPECT_FALSE(o.origin_region_set);

  DaemonOptions e = L3Base();
  e.profile = "work";
  ASSERT_OK(
      FinishOptions(&e, L3Env({{"AWS_PROFILE", "envprofile"}, {"AWS_REGION", "eu-north-1"}})));
  EXPECT_EQ(e.profile, "work");
  EXPECT_FALSE(e.profile_from_env);
  EXPECT_TRUE(e.origin_region_set);
  EXPECT_EQ(e.origin.region, "eu-north-1");
}

TEST(L3ConfigTest, BadValuesNameTheKey) {
  auto finish = [](const std::string& toml) {
    DaemonOptions o = L3Base();
    Status s = ApplyConfigText(toml, "t.toml", &o);
    if (!s.ok()) return s;
    return FinishOptions(&o, L3Env({}));
  };
  Status a = finish("[cache]\nl3 = \"file:///tmp/x\"\n");
  EXPECT_NE(a.message().find("cache.l3"), std::string::npos) << a.ToString();
  Status b = finish("[cache]\nl3 = \"s3://b\"\nl3_endpoint = \"10.0.0.1:9000\"\n");
  EXPECT_NE(b.message().find("cache.l3_endpoint"), std::string::npos) << b.ToString();
  Status c = finish("[cache]\nl3 = \"s3://b\"\nl3_write_queue = 0\n");
  EXPECT_NE(c.message().find("cache.l3_write_queue"), std::string::npos) << c.ToString();
  Status d = finish("[cache]\nl3 = \"s3://b\"\nl3_access_key_id_env = \"K\"\n");
  EXPECT_NE(d.message().find("l3_secret_access_key_env"), std::string::npos) << d.ToString();
  Status e = finish("[cache]\nl3_ttl = \"soon\"\n");
  EXPECT_NE(e.message().find("cache.l3_ttl"), std::string::npos) << e.ToString();
}

// FinishL3Options alone (as `tierfs l3 gc` runs it, without Validate) holds the L3 counts to
// the ranges of their keys, for an S3 and a memcached L3.
TEST(L3ConfigTest, FinishL3OptionsChecksTheRangesAlone) {
  for (const char* l3 : {"s3://b", "memcached://10.0.0.7:11211"}) {
    DaemonOptions o = L3Base();
    o.l3 = l3;
    o.l3_region = "eu-west-1";
    o.l3_tier.write_threads = 0;
    Status s = FinishL3Options(&o, L3Env({}));
    EXPECT_EQ(s.message(), "cache.l3_write_threads: must be 1..64") << l3;
  }
  DaemonOptions o = L3Base();
  o.l3 = "s3://b";
  o.l3_region = "eu-west-1";
  o.l3_store.max_attempts = 101;
  EXPECT_EQ(FinishL3Options(&o, L3Env({})).message(), "cache.l3_max_attempts: must be 1..100");
}

// ---- cache.l3 = memcached://... ----

TEST(L3ConfigTest, MemcachedPool) {
  DaemonOptions o = L3Base();
  MountFlags f;
  f.l3 = "memcached://10.0.0.7:11311,10.0.0.8";
  ASSERT_OK(ApplyFlags(f, &o));
  ASSERT_OK(FinishOptions(&o, L3Env({})));
  EXPECT_TRUE(o.l3_is_memcached);
  ASSERT_EQ(o.l3_memcached.servers.size(), 2u);
  EXPECT_EQ(o.l3_memcached.servers[0].host, "10.0.0.7");
  EXPECT_EQ(o.l3_memcached.servers[0].port, 11311);
  EXPECT_EQ(o.l3_memcached.servers[1].port, 11211);
  EXPECT_TRUE(o.l3_store.bucket.empty());  // no S3 store
  EXPECT_EQ(o.l3_tier.block_size, o.cache.block_size);
  EXPECT_EQ(o.l3_memcached.expiration, std::chrono::seconds(0));  // l3_ttl forever: LRU only
  const std::string described = DescribeOptions(o);
  EXPECT_NE(described.find("l3=memcached://10.0.0.7:11311,10.0.0.8"), std::string::npos)
      << described;
  EXPECT_EQ(described.find("l3_endpoint"), std::string::npos) << described;
  // A memcached L3 is one short get: the wait bound stays well below an S3 L3's.
  DaemonOptions s3 = L3Base();
  s3.l3 = "s3://l3bucket";
  ASSERT_OK(FinishOptions(&s3, L3Env({})));
  EXPECT_LT(NetworkWaitBound(o), NetworkWaitBound(s3));

  DaemonOptions t = L3Base();
  ASSERT_OK(ApplyConfigText("[cache]\nl3 = \"memcached://h:1\"\nl3_ttl = \"2h\"\n", "t.toml", &t));
  ASSERT_OK(FinishOptions(&t, L3Env({})));
  EXPECT_EQ(t.l3_memcached.expiration, std::chrono::seconds(7200));
}

TEST(L3ConfigTest, MemcachedRefusesAnEndpointAndBadUris) {
  DaemonOptions o = L3Base();
  MountFlags f;
  f.l3 = "memcached://10.0.0.7:11211";
  f.l3_endpoint = "http://10.0.0.7:9000";
  ASSERT_OK(ApplyFlags(f, &o));
  Status s = FinishOptions(&o, L3Env({}));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("--l3-endpoint"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("memcached"), std::string::npos) << s.ToString();

  DaemonOptions b = L3Base();
  b.l3 = "memcached://h:99999";
  Status bad = FinishOptions(&b, L3Env({}));
  EXPECT_NE(bad.message().find("cache.l3 (--l3)"), std::string::npos) << bad.ToString();
}

// ---- cache.l3_key_file ----

class L3KeyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path();
  }

  std::string Write(const std::string& name, const std::string& bytes, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }
  // Options with L3 and the key file given in the config file.
  Result<DaemonOptions> Load(const std::string& path) {
    DaemonOptions o = L3Base();
    TIERFS_RETURN_IF_ERROR(ApplyConfigText(
        "[cache]\nl3 = \"s3://regional/t\"\nl3_key_file = \"" + path + "\"\n", "t.toml", &o));
    TIERFS_RETURN_IF_ERROR(FinishOptions(&o, L3Env({})));
    TIERFS_RETURN_IF_ERROR(LoadL3Key(&o));
    return o;
  }

  ::tierfs::testing::TempDir tmp_;
  std::string dir_;
};

TEST_F(L3KeyFileTest, APrivateKeyIsLoadedAndNeverShown) {
  const std::string secret = "0123456789abcdef0123456789abcdef-SECRET";
  auto o = Load(Write("k", secret + "\n", 0600));
  ASSERT_OK(o);
  EXPECT_EQ(o->l3_tier.mac_key, secret);  // the trailing newline is not part of the key
  const std::string d = DescribeOptions(*o);
  EXPECT_NE(d.find("l3_mac=hmac-sha256"), std::string::npos) << d;
  EXPECT_EQ(d.find("SECRET"), std::string::npos) << d;
  auto r = Load(Write("r", std::string(32, 'x'), 0400));
  ASSERT_OK(r);
  EXPECT_EQ(r->l3_tier.mac_key, std::string(32, 'x'));
  // No key file: no MAC.
  DaemonOptions n = L3Base();
  n.l3 = "s3://regional/t";
  ASSERT_OK(FinishOptions(&n, L3Env({})));
  ASSERT_OK(LoadL3Key(&n));
  EXPECT_TRUE(n.l3_tier.mac_key.empty());
  EXPECT_NE(DescribeOptions(n).find("l3_mac=none"), std::string::npos);
}

TEST_F(L3KeyFileTest, UnsafeOrShortKeysAreRefusedNamingTheKey) {
  const std::string key(40, 'k');
  struct Case {
    std::string path;
    std::string why;
  };
  const Case cases[] = {
      {Write("group", key, 0640), "group or others"},
      {Write("other", key, 0604), "group or others"},
      {Write("gw", key, 0620), "group or others"},
      {Write("short", std::string(31, 's') + "\n", 0600), "at least 32"},
      {Write("empty", "", 0600), "at least 32"},
      {Write("big", std::string(5000, 'b'), 0600), "at most 4096"},
      {dir_ + "/missing", "cannot be opened"},
      {dir_, "not a regular file"},
  };
  for (const Case& c : cases) {
    auto o = Load(c.path);
    ASSERT_FALSE(o.ok()) << c.path;
    const std::string m = o.status().message();
    EXPECT_EQ(o.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(m.find("cache.l3_key_file"), std::string::npos) << m;
    EXPECT_NE(m.find(c.path), std::string::npos) << m;
    EXPECT_NE(m.find(c.why), std::string::npos) << m;
    EXPECT_EQ(m.find(key), std::string::npos) << m;
  }
  DaemonOptions o = L3Base();
  EXPECT_FALSE(ApplyConfigText("[cache]\nl3_key_file = \"\"\n", "t.toml", &o).ok());
}

}  // namespace
}  // namespace tierfs
