// daemon/config: the TOML file, the flags overlay, the environment fallback and Validate().
#include "daemon/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/strings.h"
#include "base/units.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using Env = std::map<std::string, std::string>;

GetEnvFn FakeEnv(Env env) {
  return [env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

DaemonOptions Base(std::string source = "s3://bucket/pre/fix") {
  DaemonOptions o;
  o.source = std::move(source);
  o.mountpoint = "/mnt/data";
  return o;
}

// The message of a failed status, for EXPECT_THAT-free matching.
std::string Err(const Status& s) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  return s.message();
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ConfigTest, DefaultsAreValid) {
  DaemonOptions o = Base();
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  EXPECT_EQ(o.cache_dir, "/var/cache/tierfs");
  EXPECT_EQ(o.meta.path, "/var/cache/tierfs/meta");
  EXPECT_EQ(o.origin.bucket, "bucket");
  EXPECT_EQ(o.origin.prefix, "pre/fix/");
  EXPECT_EQ(o.origin.region, "us-east-1");
  EXPECT_EQ(o.fuse.fsname, "tierfs:s3://bucket/pre/fix");
  EXPECT_EQ(o.fuse.entry_timeout, std::chrono::seconds(60));
  EXPECT_EQ(o.fs.uid, static_cast<uint32_t>(getuid()));
  EXPECT_EQ(o.fuse.max_threads, 16);
}

TEST(ConfigTest, FullValidFile) {
  DaemonOptions o = Base();
  Status s = ApplyConfigText(R"(
[cache]
dir = "/srv/cache"
block_size = "4MiB"
l1_size = "512MiB"
l2_size = "20GiB"
l2_min_free = 1073741824
prefetch_threads = 8
readahead_max = "128MiB"
readahead_run = "16MiB"

[metadata]
ttl = "forever"

[s3]
endpoint = "http://127.0.0.1:9000"
region = "eu-west-1"
addressing = "path"
connect_timeout = "2s"
request_timeout = 45
max_attempts = 3
max_connections = 32
initial_concurrency = 4
hedge = false
hedge_min_delay = "35ms"
hedge_max_size = "2MiB"
part_size = "16MiB"
max_parts_in_flight = 4

[fuse]
max_threads = 32
allow_other = false
uid = 1000
gid = 1000
options = "noatime,nodev"

[log]
level = "debug"
file = "/var/log/tierfs.log"

[metastore]
map_size = "8GiB"
sync_every_commit = true
)",
                             "tierfs.toml", &o);
  ASSERT_OK(s);
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  EXPECT_EQ(o.cache_dir, "/srv/cache");
  EXPECT_EQ(o.cache.block_size, 4u << 20);
  EXPECT_EQ(o.l1.capacity_bytes, 512u << 20);
  EXPECT_EQ(o.l2.capacity_bytes, 20ULL << 30);
  EXPECT_EQ(o.l2.min_free_bytes, 1ULL << 30);
  EXPECT_EQ(o.cache.prefetch_threads, 8);
  EXPECT_EQ(o.cache.readahead_max_bytes, 128u << 20);
  EXPECT_EQ(o.fs.prefetch.readahead_max_bytes, 128u << 20);
  EXPECT_EQ(o.cache.readahead_run_bytes, 16u << 20);
  EXPECT_EQ(o.catalog.metadata_ttl, kForever);
  EXPECT_EQ(o.fuse.attr_timeout, kForever);
  EXPECT_EQ(o.origin.endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(o.origin.region, "eu-west-1");
  EXPECT_EQ(o.origin.addressing, S3Options::Addressing::kPath);
  EXPECT_EQ(o.origin.connect_timeout, std::chrono::milliseconds(2000));
  EXPECT_EQ(o.origin.request_timeout, std::chrono::milliseconds(45000));
  EXPECT_EQ(o.origin.max_attempts, 3);
  EXPECT_EQ(o.origin.max_connections, 32);
  EXPECT_EQ(o.origin.initial_concurrency, 4);
  EXPECT_FALSE(o.origin.hedge);
  EXPECT_FALSE(o.l3_store.hedge);
  EXPECT_EQ(o.origin.hedge_min_delay, std::chrono::milliseconds(35));
  EXPECT_EQ(o.origin.hedge_max_bytes, 2u << 20);
  EXPECT_EQ(o.origin.part_size, 16u << 20);
  EXPECT_EQ(o.origin.max_parts_in_flight, 4);
  EXPECT_EQ(o.fuse.max_threads, 32);
  EXPECT_FALSE(o.fuse.allow_other);
  EXPECT_EQ(o.fs.uid, 1000u);
  EXPECT_EQ(o.fs.gid, 1000u);
  EXPECT_EQ(o.fuse.extra_options, (std::vector<std::string>{"noatime", "nodev"}));
  EXPECT_EQ(o.log.level, "debug");
  EXPECT_EQ(o.log.destination, "/var/log/tierfs.log");
  EXPECT_EQ(o.meta.map_size, 8ULL << 30);
  EXPECT_TRUE(o.meta.sync_every_commit);
  EXPECT_EQ(o.meta.path, "/srv/cache/meta");
}

// Every wait on the network has a deadline derived from the stores' timeouts.
TEST(ConfigTest, NetworkDeadlinesFollowTheStoreTimeouts) {
  DaemonOptions o = Base();
  ASSERT_OK(
      ApplyConfigText("[s3]\nrequest_timeout = \"20s\"\nconnect_timeout = \"3s\"\n"
                      "max_attempts = 2\nbackoff_max = \"1s\"\n"
                      "[cache]\nfetch_threads = 4\n[fuse]\nremote_threads = 8\n",
                      "t.toml", &o));
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  // 2 attempts x (20s slot wait + 20s request + 3s connect) + 1 backoff of 1s.
  EXPECT_EQ(o.cache.wait_timeout, std::chrono::seconds(87));
  EXPECT_EQ(o.fuse.request_timeout, std::chrono::seconds(107));
  EXPECT_EQ(o.cache.fetch_threads, 4);
  EXPECT_EQ(o.fuse.remote_threads, 8);
  EXPECT_TRUE(Contains(Err(ApplyConfigText("[cache]\nfetch_threads = 0\n", "t.toml", &o)),
                       "fetch_threads"));
  EXPECT_TRUE(Contains(Err(ApplyConfigText("[fuse]\nremote_threads = 100000\n", "t.toml", &o)),
                       "remote_threads"));
}

TEST(ConfigTest, UnknownKeyNamesKeyAndLine) {
  DaemonOptions o = Base();
  std::string m =
      Err(ApplyConfigText("[cache]\nl1_size = \"1GiB\"\nl1_sise = \"2GiB\"\n", "my.toml", &o));
  EXPECT_TRUE(Contains(m, "my.toml:3")) << m;
  EXPECT_TRUE(Contains(m, "unknown key 'cache.l1_sise'")) << m;
  EXPECT_TRUE(Contains(m, "did you mean 'cache.l1_size'")) << m;
}

TEST(ConfigTest, UnknownTableAndTopLevelKey) {
  DaemonOptions o = Base();
  std::string m = Err(ApplyConfigText("[cahce]\ndir = \"/x\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "unknown key 'cahce'")) << m;
  EXPECT_TRUE(Contains(m, "t.toml:1")) << m;
  m = Err(ApplyConfigText("l1_size = \"1GiB\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "unknown key 'l1_size'")) << m;
}

TEST(ConfigTest, WrongTypeNamesKeyAndExpectedType) {
  DaemonOptions o = Base();
  std::string m = Err(ApplyConfigText("[fuse]\nmax_threads = \"many\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "t.toml:2")) << m;
  EXPECT_TRUE(Contains(m, "'fuse.max_threads' must be an integer, not a string")) << m;
  m = Err(ApplyConfigText("[fuse]\nallow_other = 1\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "'fuse.allow_other' must be a boolean")) << m;
  m = Err(ApplyConfigText("[cache]\nl1_size = true\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "'cache.l1_size' must be a size")) << m;
  m = Err(ApplyConfigText("[metadata]\nttl = 1.5\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "'metadata.ttl' must be a duration")) << m;
  EXPECT_TRUE(Contains(m, "not a float")) << m;
  m = Err(ApplyConfigText("[cache]\nl1_size = [1, 2]\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "not an array")) << m;
}

TEST(ConfigTest, BadSizeAndDurationValues) {
  DaemonOptions o = Base();
  std::string m = Err(ApplyConfigText("[cache]\nl2_size = \"20GiBB\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'cache.l2_size'")) << m;
  EXPECT_TRUE(Contains(m, "20GiBB")) << m;
  m = Err(ApplyConfigText("[cache]\nl2_size = -5\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "negative")) << m;
  m = Err(ApplyConfigText("[metadata]\nttl = \"10 fortnights\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'metadata.ttl'")) << m;
  m = Err(ApplyConfigText("[s3]\naddressing = \"sideways\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 's3.addressing'")) << m;
  m = Err(ApplyConfigText("[fuse]\noptions = \"rw\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "read-only")) << m;
  m = Err(ApplyConfigText("[cache]\nreadahead_run = 0\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'cache.readahead_run'")) << m;
  EXPECT_TRUE(Contains(m, "must be > 0")) << m;
}

TEST(ConfigTest, IntegersAreRangeCheckedBeforeNarrowing) {
  // 2^40 would wrap to 0 in an int, -1 to 4294967295 in a uint32: each must be an error naming
  // the key, and the option must keep its value.
  const struct {
    const char* table;
    const char* key;
  } kIntKeys[] = {{"cache", "l1_shards"},
                  {"cache", "prefetch_threads"},
                  {"cache", "prefetch_next_files"},
                  {"cache", "random_hydrate_misses"},
                  {"cache", "prefetch_job_threads"},
                  {"cache", "l3_write_queue"},
                  {"cache", "l3_write_threads"},
                  {"cache", "l3_max_attempts"},
                  {"s3", "max_attempts"},
                  {"s3", "max_connections"},
                  {"s3", "initial_concurrency"},
                  {"s3", "max_parts_in_flight"},
                  {"s3", "hedge_percent"},
                  {"fuse", "max_threads"},
                  {"fuse", "uid"},
                  {"fuse", "gid"}};
  for (const auto& k : kIntKeys) {
    for (const char* v : {"1099511627776", "-1", "9223372036854775807", "-9223372036854775808"}) {
      DaemonOptions o = Base();
      const DaemonOptions before = o;
      std::string m =
          Err(ApplyConfigText(fmt::format("[{}]\n{} = {}\n", k.table, k.key, v), "t.toml", &o));
      EXPECT_TRUE(Contains(m, fmt::format("key '{}.{}'", k.table, k.key))) << m;
      EXPECT_TRUE(Contains(m, "out of range")) << m;
      EXPECT_EQ(DescribeOptions(o), DescribeOptions(before)) << k.key << "=" << v;
    }
  }
  DaemonOptions o = Base();
  ASSERT_OK(ApplyConfigText("[fuse]\nuid = 4294967295\nmax_threads = 1024\n", "t.toml", &o));
  EXPECT_EQ(*o.uid, 4294967295u);
  EXPECT_EQ(o.fuse.max_threads, 1024);
  EXPECT_TRUE(
      Contains(Err(ApplyConfigText("[fuse]\nuid = 4294967296\n", "t.toml", &o)), "key 'fuse.uid'"));
}

TEST(ConfigTest, DurationsAndSizesRefuseOverflow) {
  DaemonOptions o = Base();
  std::string m = Err(ApplyConfigText("[metadata]\nttl = \"99999999999999d\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'metadata.ttl'")) << m;
  EXPECT_TRUE(Contains(m, "too long")) << m;
  // An integer number of seconds whose nanoseconds overflow int64.
  m = Err(ApplyConfigText("[s3]\nrequest_timeout = 9223372036854775807\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 's3.request_timeout'")) << m;
  EXPECT_TRUE(Contains(m, "too long")) << m;
  m = Err(ApplyConfigText("[cache]\nl3_ttl = 9300000000\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'cache.l3_ttl'")) << m;
  ASSERT_OK(ApplyConfigText("[cache]\nl3_ttl = 9000000000\n", "t.toml", &o));
  EXPECT_EQ(o.l3_tier.ttl, std::chrono::seconds(9000000000LL));
  // Sizes: up to 2^64 - 1 exactly, one more is an error naming the key.
  ASSERT_OK(ApplyConfigText("[cache]\nl3_max_bytes = \"18446744073709551615\"\n", "t.toml", &o));
  EXPECT_EQ(o.l3_gc.max_bytes, UINT64_MAX);
  ASSERT_OK(ApplyConfigText("[cache]\nl2_size = \"9007199254740993\"\n", "t.toml", &o));
  EXPECT_EQ(o.l2.capacity_bytes, 9007199254740993ULL);  // exact: not rounded through a double
  m = Err(ApplyConfigText("[cache]\nl2_size = \"18446744073709551616\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'cache.l2_size'")) << m;
  EXPECT_TRUE(Contains(m, "too large")) << m;
  m = Err(ApplyConfigText("[cache]\nl2_size = \"16EiB\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "too large")) << m;
  // The same from a flag.
  MountFlags f;
  f.l2_size = "99999999999999999999";
  EXPECT_TRUE(Contains(Err(ApplyFlags(f, &o)), "--l2-size"));
  f = MountFlags{};
  f.metadata_ttl = "99999999999999d";
  EXPECT_TRUE(Contains(Err(ApplyFlags(f, &o)), "--metadata-ttl"));
}

TEST(ConfigTest, SyntaxErrorNamesLine) {
  DaemonOptions o = Base();
  std::string m = Err(ApplyConfigText("[cache]\nl1_size = \n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "t.toml:2")) << m;
}

TEST(ConfigTest, FlagsOverrideFileWhichOverridesEnvironment) {
  DaemonOptions o = Base();
  ASSERT_OK(ApplyConfigText(R"(
[cache]
l1_size = "1GiB"
l2_size = "8GiB"
[s3]
region = "from-file"
[metadata]
ttl = "5m"
)",
                            "t.toml", &o));
  MountFlags f;
  f.l1_size = "256MiB";
  f.endpoint = "http://127.0.0.1:4568";
  f.cache_dir = "/tmp/c";
  ASSERT_OK(ApplyFlags(f, &o));
  ASSERT_OK(FinishOptions(
      &o, FakeEnv({{"AWS_REGION", "from-env"}, {"AWS_ENDPOINT_URL", "http://env:1"}})));
  EXPECT_EQ(o.l1.capacity_bytes, 256u << 20);             // flag beats file
  EXPECT_EQ(o.l2.capacity_bytes, 8ULL << 30);             // file beats default
  EXPECT_EQ(o.origin.region, "from-file");                // file beats environment
  EXPECT_EQ(o.origin.endpoint, "http://127.0.0.1:4568");  // flag beats environment
  EXPECT_EQ(o.catalog.metadata_ttl, std::chrono::minutes(5));
  EXPECT_EQ(o.cache_dir, "/tmp/c");

  DaemonOptions e = Base();
  ASSERT_OK(FinishOptions(&e, FakeEnv({{"AWS_REGION", "from-env"},
                                       {"AWS_ENDPOINT_URL", "http://env:1"},
                                       {"AWS_PROFILE", "work"}})));
  EXPECT_EQ(e.origin.region, "from-env");
  EXPECT_EQ(e.origin.endpoint, "http://env:1");
  EXPECT_EQ(e.profile, "work");
}

TEST(ConfigTest, FlagErrorsNameTheFlag) {
  DaemonOptions o = Base();
  MountFlags f;
  f.l1_size = "lots";
  EXPECT_TRUE(Contains(Err(ApplyFlags(f, &o)), "--l1-size"));
  f = {};
  f.metadata_ttl = "soon";
  EXPECT_TRUE(Contains(Err(ApplyFlags(f, &o)), "--metadata-ttl"));
  f = {};
  f.block_size = "3000";
  ASSERT_OK(ApplyFlags(f, &o));
  EXPECT_TRUE(Contains(Err(FinishOptions(&o, FakeEnv({}))), "--block-size"));
  o = Base();
  f = {};
  f.log_level = "chatty";
  ASSERT_OK(ApplyFlags(f, &o));
  EXPECT_TRUE(Contains(Err(FinishOptions(&o, FakeEnv({}))), "--log-level"));
  o = Base();
  f = {};
  f.endpoint = "127.0.0.1:9000";
  ASSERT_OK(ApplyFlags(f, &o));
  EXPECT_TRUE(Contains(Err(FinishOptions(&o, FakeEnv({}))), "--endpoint"));
  o = Base();
  o.cache.readahead_budget_bytes = 4096;  // below one 1MiB block
  EXPECT_TRUE(Contains(Err(FinishOptions(&o, FakeEnv({}))), "cache.readahead_budget"));
  o = Base();
  o.cache.readahead_budget_bytes = 0;
  o.cache.readahead_max_bytes = 0;  // no readahead: the budget does not matter
  EXPECT_OK(FinishOptions(&o, FakeEnv({})));
}

TEST(ConfigTest, MountOptions) {
  DaemonOptions o = Base();
  MountFlags f;
  f.options = {"allow_other,uid=42", "gid=7,max_threads=4,noatime,_netdev,x-systemd.automount",
               "defaults,ro"};
  ASSERT_OK(ApplyFlags(f, &o));
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  EXPECT_TRUE(o.fuse.allow_other);
  EXPECT_EQ(o.fs.uid, 42u);
  EXPECT_EQ(o.fs.gid, 7u);
  EXPECT_EQ(o.fuse.max_threads, 4);
  EXPECT_EQ(o.fuse.extra_options, (std::vector<std::string>{"noatime"}));
  DaemonOptions b = Base();
  EXPECT_TRUE(Contains(Err(ApplyMountOptions("bogus", &b)), "'bogus'"));
  EXPECT_TRUE(Contains(Err(ApplyMountOptions("uid=abc", &b)), "-o uid"));
  EXPECT_TRUE(Contains(Err(ApplyMountOptions("rw", &b)), "read-only"));
  EXPECT_FALSE(b.allow_nonempty);
  ASSERT_OK(ApplyMountOptions("nonempty", &b));
  EXPECT_TRUE(b.allow_nonempty);
}

// fuse.control_group: a name or a gid; its members pass the kernel's write check under
// default_permissions because every inode is the group's with g+w. Bad values name the key.
TEST(ConfigTest, ControlGroupOwnsTheInodesWithGroupWrite) {
  DaemonOptions d = Base();
  ASSERT_OK(FinishOptions(&d, FakeEnv({})));
  EXPECT_FALSE(d.fs.control_gid.has_value());

  DaemonOptions n = Base();
  ASSERT_OK(
      ApplyConfigText("[fuse]\ncontrol_group = \"2000\"\nfile_mode = \"0640\"\n", "t.toml", &n));
  ASSERT_OK(FinishOptions(&n, FakeEnv({})));
  EXPECT_EQ(n.fs.control_gid, 2000u);
  EXPECT_EQ(n.fs.gid, 2000u);
  EXPECT_EQ(n.fs.file_mode, 0660u);
  EXPECT_EQ(n.fs.dir_mode, 0775u);

  DaemonOptions named = Base();
  MountFlags f;
  f.control_group = "daemon";  // gid 1 in every base passwd
  ASSERT_OK(ApplyFlags(f, &named));
  ASSERT_OK(FinishOptions(&named, FakeEnv({})));
  EXPECT_EQ(named.fs.control_gid, 1u);

  DaemonOptions missing = Base();
  missing.control_group = "no-such-group-tierfs";
  EXPECT_TRUE(Contains(Err(FinishOptions(&missing, FakeEnv({}))),
                       "fuse.control_group (--control-group): no group 'no-such-group-tierfs'"));
  DaemonOptions empty = Base();
  empty.control_group = "";
  EXPECT_TRUE(Contains(Err(FinishOptions(&empty, FakeEnv({}))), "--control-group"));
  DaemonOptions huge = Base();
  huge.control_group = "4294967295";
  EXPECT_TRUE(Contains(Err(FinishOptions(&huge, FakeEnv({}))), "--control-group"));
  DaemonOptions clash = Base();
  clash.control_group = "2000";
  clash.gid = 3000;
  EXPECT_TRUE(Contains(Err(FinishOptions(&clash, FakeEnv({}))), "fuse.gid (--gid) 3000"));
  DaemonOptions same = Base();
  same.control_group = "2000";
  same.gid = 2000;
  EXPECT_OK(FinishOptions(&same, FakeEnv({})));
}

TEST(ConfigTest, ShutdownGrace) {
  DaemonOptions d = Base();
  EXPECT_EQ(d.fuse.shutdown_grace, std::chrono::seconds(5));
  ASSERT_OK(ApplyConfigText("[fuse]\nshutdown_grace = \"20s\"\n", "t.toml", &d));
  EXPECT_EQ(d.fuse.shutdown_grace, std::chrono::seconds(20));
  DaemonOptions b = Base();
  EXPECT_TRUE(Contains(Err(ApplyConfigText("[fuse]\nshutdown_grace = \"2h\"\n", "t.toml", &b)),
                       "fuse.shutdown_grace"));
  EXPECT_TRUE(Contains(Err(ApplyConfigText("[fuse]\nshutdown_grace = \"soon\"\n", "t.toml", &b)),
                       "fuse.shutdown_grace"));
}

TEST(ConfigTest, PrivateByDefaultAndAllowOtherTurnsOnDefaultPermissions) {
  DaemonOptions d = Base();
  ASSERT_OK(FinishOptions(&d, FakeEnv({})));
  EXPECT_FALSE(d.fuse.allow_other);
  EXPECT_FALSE(d.fuse.default_permissions);
  EXPECT_EQ(d.fs.file_mode, 0644u);
  EXPECT_EQ(d.fs.dir_mode, 0755u);
  EXPECT_EQ(d.fs.control_uid, static_cast<uint32_t>(getuid()));

  DaemonOptions o = Base();
  ASSERT_OK(ApplyMountOptions("allow_other,file_mode=0640,dir_mode=750", &o));
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  EXPECT_TRUE(o.fuse.allow_other);
  EXPECT_TRUE(o.fuse.default_permissions);
  EXPECT_EQ(o.fs.file_mode, 0640u);
  EXPECT_EQ(o.fs.dir_mode, 0750u);

  // Explicitly off stays off (the operator's choice), in the file or with -o.
  DaemonOptions f = Base();
  ASSERT_OK(
      ApplyConfigText("[fuse]\nallow_other = true\ndefault_permissions = false\n"
                      "file_mode = \"0600\"\n",
                      "t.toml", &f));
  ASSERT_OK(FinishOptions(&f, FakeEnv({})));
  EXPECT_TRUE(f.fuse.allow_other);
  EXPECT_FALSE(f.fuse.default_permissions);
  EXPECT_EQ(f.fs.file_mode, 0600u);
  DaemonOptions g = Base();
  ASSERT_OK(ApplyMountOptions("allow_other,nodefault_permissions", &g));
  ASSERT_OK(FinishOptions(&g, FakeEnv({})));
  EXPECT_FALSE(g.fuse.default_permissions);
  DaemonOptions h = Base();
  ASSERT_OK(ApplyMountOptions("default_permissions", &h));
  ASSERT_OK(FinishOptions(&h, FakeEnv({})));
  EXPECT_FALSE(h.fuse.allow_other);
  EXPECT_TRUE(h.fuse.default_permissions);

  DaemonOptions b = Base();
  for (const char* bad : {"file_mode=644x", "file_mode=", "dir_mode=4755", "file_mode=99999",
                          "dir_mode=1777", "file_mode=8"}) {
    EXPECT_TRUE(Contains(Err(ApplyMountOptions(bad, &b)), "_mode")) << bad;
  }
  EXPECT_TRUE(Contains(Err(ApplyConfigText("[fuse]\nfile_mode = \"04755\"\n", "t.toml", &b)),
                       "fuse.file_mode"));
  EXPECT_TRUE(
      Contains(Err(ApplyConfigText("[fuse]\ndir_mode = 493\n", "t.toml", &b)), "fuse.dir_mode"));
}

TEST(ConfigTest, DescribeOptionsRedactsEndpointUserinfo) {
  DaemonOptions o = Base();
  o.endpoint = "http://user:TopSecret99@127.0.0.1:9000";
  o.l3 = "s3://l3bucket";
  o.l3_endpoint = "https://k:L3Secret77@10.0.0.7:9000";
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  const std::string d = DescribeOptions(o);
  EXPECT_EQ(d.find("TopSecret99"), std::string::npos) << d;
  EXPECT_EQ(d.find("L3Secret77"), std::string::npos) << d;
  EXPECT_NE(d.find("http://***@127.0.0.1:9000"), std::string::npos) << d;
  DaemonOptions bad = Base();
  bad.endpoint = "ftp://user:TopSecret99@host";
  const std::string err = Err(FinishOptions(&bad, FakeEnv({})));
  EXPECT_EQ(err.find("TopSecret99"), std::string::npos) << err;
}

TEST(ConfigTest, SourcesAndRequiredArguments) {
  DaemonOptions o = Base("file:///data/set");
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  EXPECT_EQ(o.source_uri.scheme, SourceUri::Scheme::kFile);
  EXPECT_EQ(o.file_origin.root, "/data/set");
  DaemonOptions bad = Base("ftp://x");
  EXPECT_TRUE(Contains(Err(FinishOptions(&bad, FakeEnv({}))), "SOURCE"));
  DaemonOptions nomnt = Base();
  nomnt.mountpoint.clear();
  EXPECT_TRUE(Contains(Err(FinishOptions(&nomnt, FakeEnv({}))), "MOUNTPOINT"));
}

TEST(ConfigTest, ValidateNamesKeys) {
  DaemonOptions o = Base();
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  DaemonOptions c = o;
  c.l1.capacity_bytes = 1000;
  EXPECT_TRUE(Contains(Err(Validate(c)), "cache.l1_size"));
  c = o;
  c.l1.capacity_bytes = 0;  // disabled is fine
  EXPECT_OK(Validate(c));
  c = o;
  c.cache.admission.ghost_bytes = AdmissionOptions::kMaxGhostBytes;
  EXPECT_OK(Validate(c));
  c.cache.admission.ghost_bytes = AdmissionOptions::kMaxGhostBytes + 1;
  EXPECT_TRUE(Contains(Err(Validate(c)), "cache.admit_ghost_bytes"));
  c = o;
  c.fuse.max_threads = 0;
  EXPECT_TRUE(Contains(Err(Validate(c)), "fuse.max_threads"));
  c = o;
  c.catalog.metadata_ttl = std::chrono::nanoseconds(0);
  EXPECT_TRUE(Contains(Err(Validate(c)), "metadata.ttl"));
  c = o;
  c.origin.max_attempts = 0;
  EXPECT_TRUE(Contains(Err(Validate(c)), "s3.max_attempts"));
  c = o;
  c.meta.map_size = 1024;
  EXPECT_TRUE(Contains(Err(Validate(c)), "metastore.map_size"));
  c = o;
  c.origin.initial_concurrency = 0;
  EXPECT_TRUE(Contains(Err(Validate(c)), "s3.initial_concurrency"));
  c = o;
  c.origin.part_size = 1000;
  EXPECT_TRUE(Contains(Err(Validate(c)), "s3.part_size"));
  c = o;
  c.origin.max_parts_in_flight = 0;
  EXPECT_TRUE(Contains(Err(Validate(c)), "s3.max_parts_in_flight"));
  c = o;
  c.origin.hedge_min_delay = std::chrono::milliseconds(0);
  EXPECT_TRUE(Contains(Err(Validate(c)), "s3.hedge_min_delay"));
}

// Found by config_fuzz: a timeout of centuries overflowed the nanosecond sum of the network wait
// bound (signed overflow); it is now an error that names the key.
TEST(ConfigTest, NetworkTimeoutsOfMoreThanADayNameTheKey) {
  for (const char* text :
       {"[s3]\nrequest_timeout = 9203372903\n", "[s3]\nconnect_timeout = \"25h\"\n",
        "[s3]\nbackoff_max = \"1000000h\"\n", "[cache]\nl3_request_timeout = \"48h\"\n"}) {
    DaemonOptions o = Base();
    ASSERT_OK(ApplyConfigText(text, "tierfs.toml", &o)) << text;
    const std::string key =
        std::string(text).find("l3_") != std::string::npos
            ? "cache.l3_request_timeout"
            : "s3." + std::string(text).substr(5, std::string(text).find(' ') - 5);
    EXPECT_TRUE(Contains(Err(FinishOptions(&o, FakeEnv({}))), key + ": must be at most 24h"))
        << text;
  }
  DaemonOptions o = Base();
  ASSERT_OK(ApplyConfigText("[s3]\nrequest_timeout = \"24h\"\n", "tierfs.toml", &o));
  EXPECT_OK(FinishOptions(&o, FakeEnv({})));
}

TEST(ConfigTest, ConfigFileOnDisk) {
  char path[] = "/tmp/tierfs_config_test_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream out(path);
    out << "[cache]\nl1_size = \"3GiB\"\n";
  }
  DaemonOptions o = Base();
  ASSERT_OK(ApplyConfigFile(path, &o));
  EXPECT_EQ(o.l1.capacity_bytes, 3ULL << 30);
  std::remove(path);
  EXPECT_TRUE(Contains(Err(ApplyConfigFile(path, &o)), "--config"));
}

TEST(ConfigTest, MetricsAddressFromFileAndFlag) {
  DaemonOptions o = Base();
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  EXPECT_EQ(o.metrics_address, "");  // off by default
  ASSERT_OK(ApplyConfigText("[metrics]\naddress = \"127.0.0.1:9464\"\n", "t.toml", &o));
  EXPECT_EQ(o.metrics_address, "127.0.0.1:9464");
  MountFlags f;
  f.metrics_address = "[::1]:9500";
  ASSERT_OK(ApplyFlags(f, &o));
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  EXPECT_EQ(o.metrics_address, "[::1]:9500");
  EXPECT_TRUE(Contains(DescribeOptions(o), "metrics=[::1]:9500"));
  DaemonOptions bad = Base();
  ASSERT_OK(ApplyConfigText("[metrics]\naddress = \"9464\"\n", "t.toml", &bad));
  const std::string e = Err(FinishOptions(&bad, FakeEnv({})));
  EXPECT_TRUE(Contains(e, "metrics.address (--metrics-address)")) << e;
  EXPECT_TRUE(Contains(e, "HOST:PORT")) << e;
  DaemonOptions typo = Base();
  EXPECT_FALSE(ApplyConfigText("[metrics]\nadress = \"127.0.0.1:1\"\n", "t.toml", &typo).ok());
}

TEST(ConfigTest, WholeObjectMaxSetsTheSmallObjectSizeAndNamesTheKeyWhenTooLarge) {
  DaemonOptions o = Base();
  ASSERT_OK(ApplyConfigText("[cache]\nwhole_object_max = \"8MiB\"\n", "t.toml", &o));
  EXPECT_EQ(o.cache.small_object_bytes, 8ULL << 20);
  ASSERT_OK(ApplyConfigText("[cache]\nwhole_object_max = 0\n", "t.toml", &o));
  EXPECT_EQ(o.cache.small_object_bytes, 0u);
  const std::string m =
      Err(ApplyConfigText("[cache]\nwhole_object_max = \"2GiB\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'cache.whole_object_max'")) << m;
  EXPECT_EQ(o.cache.small_object_bytes, 0u);
}

TEST(ConfigTest, StoreOnOpenMaxIsASizeOfAtMost4MiB) {
  DaemonOptions o = Base();
  EXPECT_EQ(o.fuse.store_on_open_max, 1ULL << 20);
  ASSERT_OK(ApplyConfigText("[fuse]\nstore_on_open_max = \"256KiB\"\n", "t.toml", &o));
  EXPECT_EQ(o.fuse.store_on_open_max, 256ULL << 10);
  ASSERT_OK(ApplyConfigText("[fuse]\nstore_on_open_max = 0\n", "t.toml", &o));
  EXPECT_EQ(o.fuse.store_on_open_max, 0u);
  const std::string m =
      Err(ApplyConfigText("[fuse]\nstore_on_open_max = \"8MiB\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'fuse.store_on_open_max'")) << m;
  EXPECT_TRUE(Contains(m, "at most 4MiB")) << m;
  EXPECT_EQ(o.fuse.store_on_open_max, 0u);
}

TEST(ConfigTest, PassthroughIsOffUnlessAsked) {
  DaemonOptions o = Base();
  EXPECT_FALSE(o.fuse.passthrough);
  ASSERT_OK(ApplyConfigText("[fuse]\npassthrough = true\n", "t.toml", &o));
  EXPECT_TRUE(o.fuse.passthrough);
  const std::string m = Err(ApplyConfigText("[fuse]\npassthrough = \"yes\"\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'fuse.passthrough'")) << m;
}

TEST(ConfigTest, SpliceSizedReadsAreOffUnlessAskedAndNeedAnL2ServedFromFiles) {
  DaemonOptions o = Base();
  EXPECT_FALSE(o.fuse.fit_reads_to_splice_pipe);
  ASSERT_OK(ApplyConfigText("[fuse]\nsplice_sized_reads = true\n", "t.toml", &o));
  EXPECT_TRUE(o.fuse.fit_reads_to_splice_pipe);
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  EXPECT_EQ(o.fuse.fit_reads_to_splice_pipe, o.l2.capacity_bytes != 0 && o.cache.file_slices);
  DaemonOptions off = Base();
  ASSERT_OK(ApplyConfigText("[fuse]\nsplice_sized_reads = true\n[cache]\nl2_splice = false\n",
                            "t.toml", &off));
  ASSERT_OK(FinishOptions(&off, FakeEnv({})));
  EXPECT_FALSE(off.fuse.fit_reads_to_splice_pipe);
  const std::string m = Err(ApplyConfigText("[fuse]\nsplice_sized_reads = 2\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'fuse.splice_sized_reads'")) << m;
}

TEST(ConfigTest, L1PrefaultIsOffUnlessAsked) {
  DaemonOptions o = Base();
  EXPECT_FALSE(o.l1_prefault);
  ASSERT_OK(ApplyConfigText("[cache]\nl1_prefault = true\n", "t.toml", &o));
  EXPECT_TRUE(o.l1_prefault);
  const std::string m = Err(ApplyConfigText("[cache]\nl1_prefault = 1\n", "t.toml", &o));
  EXPECT_TRUE(Contains(m, "key 'cache.l1_prefault'")) << m;
}

// A file of the source tree, by its path from the repository's root.
std::string RepoFile(const std::string& path) {
  std::string here = __FILE__;  // .../tests/daemon/config_test.cc
  std::string root = here.substr(0, here.rfind("/tests/daemon/"));
  std::ifstream in(root + "/" + path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ShippedConfig() { return RepoFile("packaging/tierfs.toml"); }

TEST(ConfigTest, ShippedDefaultConfigParses) {
  // packaging/tierfs.toml documents every key with its default: it must parse and change nothing.
  DaemonOptions o = Base();
  Status s = ApplyConfigText(ShippedConfig(), "packaging/tierfs.toml", &o);
  ASSERT_OK(s);
  ASSERT_OK(FinishOptions(&o, FakeEnv({})));
  DaemonOptions d = Base();
  ASSERT_OK(FinishOptions(&d, FakeEnv({})));
  EXPECT_EQ(DescribeOptions(o), DescribeOptions(d));
  EXPECT_EQ(o.l2.min_free_bytes, d.l2.min_free_bytes);
  EXPECT_EQ(o.cache.readahead_budget_bytes, d.cache.readahead_budget_bytes);
  EXPECT_EQ(o.prefetch_jobs.threads, d.prefetch_jobs.threads);
  EXPECT_EQ(o.prefetch_jobs.memory_budget, d.prefetch_jobs.memory_budget);
  EXPECT_EQ(o.origin.request_timeout, d.origin.request_timeout);
  EXPECT_EQ(o.origin.max_attempts, d.origin.max_attempts);
  EXPECT_EQ(o.fuse.allow_other, d.fuse.allow_other);
  EXPECT_EQ(o.meta.map_size, d.meta.map_size);
  EXPECT_EQ(o.cache.small_object_bytes, d.cache.small_object_bytes);
}

// Every key of the schema has its line in packaging/tierfs.toml (set to its default, or commented
// out where the default is computed), under its own section: a key added to config.cc without
// its documentation fails here (the hand-kept list in config.h drifted by 15 keys before).
TEST(ConfigTest, ShippedConfigDocumentsEveryKey) {
  const std::string text = ShippedConfig();
  std::map<std::string, std::set<std::string>> documented;  // section -> keys
  std::string section;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::string_view l = TrimSpace(line);
    if (l.starts_with("[") && !l.starts_with("[[")) {
      section = std::string(l.substr(1, l.find(']') - 1));
      continue;
    }
    if (l.starts_with("[[")) {
      section = std::string(l.substr(2, l.find(']') - 2));
      continue;
    }
    if (l.starts_with("#")) l = TrimSpace(l.substr(1));
    const size_t eq = l.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = TrimSpace(l.substr(0, eq));
    if (!key.empty() &&
        key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string_view::npos) {
      documented[section].insert(std::string(key));
    }
  }
  const std::vector<std::string> keys = ConfigKeys();
  ASSERT_GT(keys.size(), 50u);
  for (const std::string& k : keys) {
    const size_t dot = k.find('.');
    ASSERT_NE(dot, std::string::npos) << k;
    EXPECT_TRUE(documented[k.substr(0, dot)].contains(k.substr(dot + 1)))
        << k << " is not documented in packaging/tierfs.toml";
  }
}

// The configuration reference names every key too, as `section.key` (in its tables and lists).
TEST(ConfigTest, ConfigurationDocNamesEveryKey) {
  const std::string doc = RepoFile("docs/configuration.md");
  for (const std::string& k : ConfigKeys()) {
    EXPECT_TRUE(doc.find("`" + k + "`") != std::string::npos ||
                doc.find("`" + k + " ") != std::string::npos ||
                doc.find("`" + k + "=") != std::string::npos)
        << k << " is not named in docs/configuration.md";
  }
}

// docs/config-reference.md is generated from the key table: a key added, a default or range
// changed without regenerating it fails here.
// Validate holds integer settings that did not come through the file (-o, the code) to the
// ranges of the key table too.
TEST(ConfigTest, ValidateChecksIntegerRangesOfEveryKey) {
  DaemonOptions o = Base();
  MountFlags f;
  f.options = {"max_threads=0"};
  ASSERT_OK(ApplyFlags(f, &o));
  EXPECT_EQ(Err(FinishOptions(&o, FakeEnv({}))), "fuse.max_threads: must be 1..1024");
  DaemonOptions p = Base();
  p.fs.prefetch.next_files = 1025;
  EXPECT_EQ(Err(FinishOptions(&p, FakeEnv({}))),
            "cache.prefetch_next_files: must be 0..1024 (0 disables it)");
  DaemonOptions q = Base();
  q.cache.admission.scan_percent = 101;  // checked by no hand-written rule
  EXPECT_EQ(Err(FinishOptions(&q, FakeEnv({}))), "cache.admit_scan_percent: must be 0..100");
}

TEST(ConfigTest, ReferenceDocMatchesTheKeyTable) {
  const std::string committed = RepoFile("docs/config-reference.md");
  const std::string generated = ConfigReferenceMarkdown();
  EXPECT_TRUE(committed == generated)
      << "docs/config-reference.md differs from the key table (daemon/config_table.cc); "
         "regenerate it from the repository root with:\n"
         "  build/daemon/tierfs config reference > docs/config-reference.md";
  for (const std::string& k : ConfigKeys()) {
    EXPECT_TRUE(generated.find("| `" + k + "` |") != std::string::npos) << k;
  }
}

// The ranges the reference prints are the ones parsing enforces: each integer key takes the
// ends of its printed range and refuses one beyond either.
TEST(ConfigTest, IntegerRangesOfTheReferenceAreEnforced) {
  const std::string ref = ConfigReferenceMarkdown();
  int checked = 0;
  for (const std::string& k : ConfigKeys()) {
    const size_t row = ref.find("| `" + k + "` | integer | ");
    if (row == std::string::npos) continue;
    // | `KEY` | integer | `DEFAULT` | MIN..MAX | FLAG | DOC |
    const std::string line = ref.substr(row, ref.find('\n', row) - row);
    std::vector<std::string> cells;
    for (size_t at = 0; at != std::string::npos;) {
      const size_t next = line.find(" | ", at);
      cells.push_back(line.substr(at, next == std::string::npos ? next : next - at));
      at = next == std::string::npos ? next : next + 3;
    }
    ASSERT_GE(cells.size(), 4u) << line;
    const std::string range = cells[3];
    const size_t dots = range.find("..");
    ASSERT_NE(dots, std::string::npos) << k << ": " << range;
    const int64_t lo = std::stoll(range.substr(0, dots));
    const int64_t hi = std::stoll(range.substr(dots + 2));
    const std::string table = k.substr(0, k.find('.'));
    const std::string name = k.substr(k.find('.') + 1);
    auto apply = [&](int64_t v) {
      DaemonOptions o = Base();
      return ApplyConfigText(fmt::format("[{}]\n{} = {}\n", table, name, v), "t.toml", &o);
    };
    EXPECT_OK(apply(lo)) << k << " = " << lo;
    EXPECT_OK(apply(hi)) << k << " = " << hi;
    Status below = apply(lo - 1);
    EXPECT_FALSE(below.ok()) << k << " = " << lo - 1;
    EXPECT_NE(below.message().find(fmt::format("is out of range (must be {}..{})", lo, hi)),
              std::string::npos)
        << below.message();
    EXPECT_FALSE(apply(hi + 1).ok()) << k << " = " << hi + 1;
    ++checked;
  }
  EXPECT_GE(checked, 20);  // every integer key
}

}  // namespace
}  // namespace tierfs
