// The pure parts of the command line: the mountpoint-s3 style flags and
// their mapping onto fuse.* keys, mountinfo parsing, the status report (text, JSON, rates) and
// `tierfs config check`.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "daemon/config.h"
#include "daemon/internal/config_table.h"
#include "daemon/mounts.h"
#include "daemon/prefetch_cli.h"
#include "daemon/status.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

GetEnvFn NoEnv() {
  return [](const char*) -> std::optional<std::string> { return std::nullopt; };
}

DaemonOptions Base() {
  DaemonOptions o;
  o.source = "s3://bucket/prefix";
  o.mountpoint = "/mnt/data";
  return o;
}

// ---- flags ----

TEST(CliFlagsTest, MountpointS3FlagsMapOntoFuseKeys) {
  DaemonOptions o = Base();
  MountFlags f;
  f.allow_other = true;
  f.uid = "1234";
  f.gid = "2345";
  f.file_mode = "0440";
  f.dir_mode = "550";
  f.log_format = "json";
  ASSERT_OK(ApplyFlags(f, &o));
  ASSERT_OK(FinishOptions(&o, NoEnv()));
  EXPECT_TRUE(o.fuse.allow_other);
  EXPECT_TRUE(o.fuse.default_permissions);  // on with allow_other, as with -o allow_other
  EXPECT_EQ(o.fs.uid, 1234u);
  EXPECT_EQ(o.fs.gid, 2345u);
  EXPECT_EQ(o.fs.file_mode, 0440u);
  EXPECT_EQ(o.fs.dir_mode, 0550u);
  EXPECT_EQ(o.log.format, "json");
  // Set by the user: they replace a file:// origin's owners and modes (FilesystemOptions).
  EXPECT_TRUE(o.fs.uid_set && o.fs.gid_set && o.fs.file_mode_set && o.fs.dir_mode_set);
}

// Unset, a file:// origin's owner, group and mode show; each flag or -o option replaces its own.
TEST(CliFlagsTest, OwnerAndModeAreSetOnlyWhenGiven) {
  DaemonOptions o = Base();
  ASSERT_OK(ApplyFlags(MountFlags{}, &o));
  ASSERT_OK(FinishOptions(&o, NoEnv()));
  EXPECT_FALSE(o.fs.uid_set || o.fs.gid_set || o.fs.file_mode_set || o.fs.dir_mode_set);
  DaemonOptions p = Base();
  MountFlags f;
  f.options = {"gid=5,dir_mode=0700"};
  ASSERT_OK(ApplyFlags(f, &p));
  ASSERT_OK(FinishOptions(&p, NoEnv()));
  EXPECT_FALSE(p.fs.uid_set);
  EXPECT_TRUE(p.fs.gid_set);
  EXPECT_FALSE(p.fs.file_mode_set);
  EXPECT_TRUE(p.fs.dir_mode_set);
}

TEST(CliFlagsTest, NamedFlagsWinOverMinusO) {
  DaemonOptions o = Base();
  MountFlags f;
  f.options = {"uid=5,file_mode=0600"};
  f.uid = "7";
  ASSERT_OK(ApplyFlags(f, &o));
  EXPECT_EQ(*o.uid, 7u);
  EXPECT_EQ(o.fs.file_mode, 0600u);
}

TEST(CliFlagsTest, BadValuesNameTheFlag) {
  struct Case {
    std::function<void(MountFlags*)> set;
    std::string flag;
  };
  const std::vector<Case> cases = {
      {[](MountFlags* f) { f->file_mode = "0999"; }, "--file-mode"},
      {[](MountFlags* f) { f->dir_mode = "rwxr-xr-x"; }, "--dir-mode"},
      {[](MountFlags* f) { f->file_mode = "4755"; }, "--file-mode"},
      {[](MountFlags* f) { f->uid = "-1"; }, "--uid"},
      {[](MountFlags* f) { f->gid = "99999999999"; }, "--gid"},
  };
  for (const auto& c : cases) {
    DaemonOptions o = Base();
    MountFlags f;
    c.set(&f);
    Status s = ApplyFlags(f, &o);
    ASSERT_FALSE(s.ok()) << c.flag;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), c.flag)) << s.message();
  }
}

// A flag sets its key exactly as the config file does: the same text through the flag and
// through the file gives the same value for every key that has a flag.
TEST(CliFlagsTest, EveryKeyFlagSetsItsKeyAsTheFileDoes) {
  int checked = 0;
  for (const config::ConfigKey& k : config::ConfigTable()) {
    if (k.flag.empty()) continue;
    std::string text, toml;
    switch (k.kind) {
      case config::Kind::kSize:
        text = "3MiB";
        toml = "\"3MiB\"";
        break;
      case config::Kind::kDuration:
        text = "90s";
        toml = "\"90s\"";
        break;
      case config::Kind::kInt:
        text = "77";
        toml = "77";
        break;
      case config::Kind::kBool:
        toml = "true";
        break;
      case config::Kind::kString:
        text = k.name.ends_with("_mode") ? "0600" : "x-" + std::string(k.name);
        toml = "\"" + text + "\"";
        break;
    }
    DaemonOptions by_flag = Base();
    MountFlags f;
    if (k.flag_on != nullptr) {
      f.*k.flag_on = true;
    } else {
      ASSERT_NE(k.flag_text, nullptr) << k.flag;
      f.*k.flag_text = text;
    }
    ASSERT_OK(ApplyFlags(f, &by_flag)) << k.flag;
    DaemonOptions by_file = Base();
    ASSERT_OK(
        ApplyConfigText(fmt::format("[{}]\n{} = {}\n", k.table, k.name, toml), "t.toml", &by_file))
        << k.FullName();
    EXPECT_EQ(config::Show(k, by_flag), config::Show(k, by_file)) << k.flag;
    EXPECT_NE(config::Show(k, by_flag), config::Show(k, Base())) << k.flag << " changed nothing";
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(CliFlagsTest, AllowRootIsALibfuseOptionAndExcludesAllowOther) {
  DaemonOptions o = Base();
  MountFlags f;
  f.allow_root = true;
  ASSERT_OK(ApplyFlags(f, &o));
  ASSERT_OK(FinishOptions(&o, NoEnv()));
  EXPECT_TRUE(o.fuse.allow_root);
  EXPECT_TRUE(o.fuse.default_permissions);

  DaemonOptions both = Base();
  f.allow_other = true;
  ASSERT_OK(ApplyFlags(f, &both));
  Status s = FinishOptions(&both, NoEnv());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "--allow-root")) << s.message();

  DaemonOptions viao = Base();
  ASSERT_OK(ApplyMountOptions("allow_root", &viao));
  EXPECT_TRUE(viao.fuse.allow_root);
  ASSERT_OK(ApplyConfigText("[fuse]\nallow_root = true\n", "t.toml", &viao));
}

TEST(CliFlagsTest, LogFormatIsCheckedAndNamed) {
  DaemonOptions o = Base();
  MountFlags f;
  f.log_format = "xml";
  ASSERT_OK(ApplyFlags(f, &o));
  Status s = FinishOptions(&o, NoEnv());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "--log-format")) << s.message();
  DaemonOptions fromfile = Base();
  ASSERT_OK(ApplyConfigText("[log]\nformat = \"json\"\n", "t.toml", &fromfile));
  EXPECT_EQ(fromfile.log.format, "json");
}

// ---- mountinfo ----

constexpr const char* kMountInfo =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "41 22 0:45 / /mnt/my\\040data rw,nosuid,nodev,relatime shared:20 - fuse.tierfs "
    "tierfs:s3://bucket/a\\040b rw,user_id=0,group_id=0\n"
    "42 22 0:46 / /mnt/plain rw,nosuid,nodev - fuse.tierfs tierfs:file:///srv/x rw\n"
    "43 22 0:47 / /mnt/other rw - fuse.sshfs host:/x rw\n"
    "garbage line\n"
    "44 22 0:48 / /mnt/tab\\011and\\134back rw master:3 propagate_from:1 - tmpfs tmpfs rw\n";

TEST(MountInfoTest, ParsesFieldsAndDecodesEscapes) {
  const auto all = ParseMountInfo(kMountInfo);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[1].id, 41u);
  EXPECT_EQ(all[1].major, 0u);
  EXPECT_EQ(all[1].minor, 45u);
  EXPECT_EQ(all[1].mountpoint, "/mnt/my data");
  EXPECT_EQ(all[1].fstype, "fuse.tierfs");
  EXPECT_EQ(all[1].source, "tierfs:s3://bucket/a b");
  EXPECT_EQ(all[4].mountpoint, "/mnt/tab\tand\\back");  // several optional fields before "-"
  EXPECT_EQ(all[4].fstype, "tmpfs");
  const auto t = TierfsMounts(all);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].mountpoint, "/mnt/my data");
  EXPECT_EQ(t[1].mountpoint, "/mnt/plain");
  EXPECT_EQ(MountSource(t[0]), "s3://bucket/a b");
}

TEST(MountInfoTest, UnescapeLeavesOtherBackslashesAlone) {
  EXPECT_EQ(UnescapeMountField("a\\040b"), "a b");
  EXPECT_EQ(UnescapeMountField("a\\012b"), "a\nb");
  EXPECT_EQ(UnescapeMountField("a\\9b"), "a\\9b");
  EXPECT_EQ(UnescapeMountField("end\\04"), "end\\04");
  EXPECT_EQ(UnescapeMountField(""), "");
}

TEST(MountInfoTest, PathOffTierfsIsRefusedWithItsFileSystem) {
  auto m = TierfsMountOf("/proc/self");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(Contains(m.status().message(), "is not on a tierfs mount")) << m.status().message();
  EXPECT_TRUE(Contains(m.status().message(), "proc")) << m.status().message();
  auto gone = TierfsMountOf("/nonexistent/path/for/tierfs/test");
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(Contains(gone.status().message(), "cannot stat")) << gone.status().message();
}

// ---- status ----

constexpr const char* kStatsA =
    "l1.hits=10 l1.misses=10 l1.bytes=1000 l1.used=50 l1.capacity=100 l2.hits=5 l2.misses=5 "
    "l2.bytes=500 l2.used=70 l2.capacity=1000 origin.requests=5 origin.bytes=300 "
    "catalog.entries=3 fuse.reads=20 fuse.read_bytes=2000";
constexpr const char* kStatsB =
    "l1.hits=30 l1.misses=10 l1.bytes=3000 l1.used=50 l1.capacity=100 l2.hits=5 l2.misses=5 "
    "l2.bytes=500 l2.used=70 l2.capacity=1000 origin.requests=5 origin.bytes=300 "
    "catalog.entries=3 fuse.reads=60 fuse.read_bytes=6000";

TEST(PrefetchCliTest, ListValuesAreWholeLinesUnderTheLimit) {
  std::vector<std::string> paths;
  for (int i = 0; i < 100; ++i) paths.push_back(fmt::format("dir/file_{:03}.bin", i));
  // "tier=l2\n" is 8 bytes, every line 17: 5 lines fit in 100 bytes.
  auto v = PrefetchListValues(paths, "l2", 100);
  ASSERT_EQ(v.size(), 20u);
  std::vector<std::string> back;
  for (const std::string& value : v) {
    EXPECT_LE(value.size(), 100u);
    ASSERT_TRUE(value.starts_with("tier=l2\n")) << value;
    ASSERT_EQ(value.back(), '\n');
    size_t pos = 8;
    while (pos < value.size()) {
      const size_t nl = value.find('\n', pos);
      back.push_back(value.substr(pos, nl - pos));
      pos = nl + 1;
    }
  }
  EXPECT_EQ(back, paths);  // every path once, in order
  // A path longer than the limit still goes, alone.
  v = PrefetchListValues({"a", std::string(200, 'x'), "b"}, "l1", 100);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0], "tier=l1\na\n");
  EXPECT_EQ(v[2], "tier=l1\nb\n");
  EXPECT_TRUE(PrefetchListValues({}, "l2").empty());
  // The default limit stays under the 64 KiB xattr limit.
  std::vector<std::string> many(20000, "some/dir/file_name.bin");
  for (const std::string& value : PrefetchListValues(many, "l3")) EXPECT_LE(value.size(), 65536u);
}

TEST(PrefetchCliTest, RateAndEta) {
  PrefetchProgress a, b;
  a.bytes_done = 0;
  a.files_done = 0;
  b.bytes_done = 10 << 20;
  b.bytes_total = 30 << 20;
  b.files_done = 100;
  b.files_total = 300;
  EXPECT_EQ(FormatPrefetchRate(a, b, std::chrono::milliseconds(100)), "");  // too early
  EXPECT_EQ(FormatPrefetchRate(a, b, std::chrono::seconds(2)), "5MiB/s 50 files/s ETA 4s");
  b.bytes_done = 0;
  b.files_done = 0;
  EXPECT_EQ(FormatPrefetchRate(a, b, std::chrono::seconds(2)), "0B/s 0 files/s ETA -");
}

// OpenMountRoot opens a mount point only while it is still the mount the table named: a mount
// point whose device differs (unmounted, now a plain directory) or that is gone gives -ESRCH, so
// neither `tierfs status` nor `tierfs log-level` reads or writes the xattrs of a plain directory.
TEST(StatusTest, OpenMountRootRefusesAPathThatIsNoLongerTheMount) {
  const ::tierfs::testing::TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string dir = tmp.path();
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  MountInfo m;
  m.mountpoint = dir;
  m.major = major(st.st_dev);
  m.minor = minor(st.st_dev);
  int err = -1;
  {
    const UniqueFd fd = OpenMountRoot(m, &err);
    ASSERT_GE(fd.get(), 0) << std::strerror(err);
    EXPECT_EQ(err, 0);
  }
  m.minor += 1;  // another device: the mount it was is gone, the path is something else now
  EXPECT_LT(OpenMountRoot(m, &err).get(), 0);
  EXPECT_EQ(err, ESRCH);
  m.minor -= 1;
  ASSERT_EQ(rmdir(dir.c_str()), 0);
  EXPECT_LT(OpenMountRoot(m, &err).get(), 0);
  EXPECT_EQ(err, ESRCH);  // the mount point itself is gone
  const MountStatus gone = ProbeMountNow(m);
  EXPECT_EQ(gone.state, "gone") << gone.error;
}

// A call that does not return in time (a FUSE request to a stopped daemon) gives nullopt at the
// deadline instead of blocking the command; one that returns gives its value.
TEST(StatusTest, CallWithDeadlineGivesUpOnACallThatDoesNotReturn) {
  EXPECT_EQ(CallWithDeadline<int>([] { return 7; }, std::chrono::seconds(10)), 7);
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  const auto start = std::chrono::steady_clock::now();
  const std::optional<int> r = CallWithDeadline<int>(
      [released] {
        released.wait();
        return 1;
      },
      std::chrono::milliseconds(100));
  EXPECT_FALSE(r.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  release->set_value();  // the abandoned call ends on its own thread
}

// A mount that does not answer is hung at each sample, with one probe outstanding however many
// samples pass (not a blocked thread per sample); once it answers it is ok again.
TEST(StatusTest, AHungMountKeepsOneProbeAcrossSamples) {
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  auto calls = std::make_shared<std::atomic<int>>(0);
  MountProber prober(std::chrono::milliseconds(100), [released, calls](const MountInfo& m) {
    ++*calls;
    released.wait();
    MountStatus st;
    st.mount = m;
    return st;
  });
  MountInfo m;
  m.mountpoint = "/mnt/stopped";
  for (int sample = 0; sample < 3; ++sample) {
    const MountStatus st = prober.Probe(m);
    EXPECT_EQ(st.state, "hung");
    EXPECT_TRUE(Contains(st.error, "no answer in 0.1 s")) << st.error;
  }
  EXPECT_EQ(calls->load(), 1);
  EXPECT_EQ(prober.outstanding(), 1u);
  release->set_value();  // the daemon continues: the blocked probe returns
  for (int i = 0; i < 200 && prober.Probe(m).state != "ok"; ++i) {
  }
  EXPECT_EQ(prober.Probe(m).state, "ok");
  EXPECT_EQ(prober.outstanding(), 0u);
  EXPECT_GE(calls->load(), 2);  // after the answer, samples probe afresh
}

TEST(StatusTest, HitRatioIsLookupsNotServedByTheOrigin) {
  const KeyValues a = ParseKeyValues(kStatsA);
  EXPECT_EQ(StatsTiers(a), (std::vector<std::string>{"l1", "l2"}));
  ASSERT_TRUE(HitRatio(a).has_value());
  EXPECT_DOUBLE_EQ(*HitRatio(a), 0.75);  // 20 lookups, 5 reached the origin
  EXPECT_FALSE(HitRatio(ParseKeyValues("fuse.reads=3")).has_value());
  EXPECT_FALSE(HitRatio(ParseKeyValues("l1.hits=0 l1.misses=0")).has_value());
}

TEST(StatusTest, RatesBetweenSnapshots) {
  const Rates r = ComputeRates(ParseKeyValues(kStatsA), ParseKeyValues(kStatsB), 2.0);
  EXPECT_DOUBLE_EQ(r.reads_per_s, 20.0);
  EXPECT_DOUBLE_EQ(r.read_bytes_per_s, 2000.0);
  ASSERT_EQ(r.bytes_per_s.size(), 3u);
  EXPECT_EQ(r.bytes_per_s[0].first, "l1");
  EXPECT_DOUBLE_EQ(r.bytes_per_s[0].second, 1000.0);
  EXPECT_EQ(r.bytes_per_s[2].first, "origin");
  EXPECT_DOUBLE_EQ(r.bytes_per_s[2].second, 0.0);
  ASSERT_TRUE(r.hit_ratio.has_value());
  EXPECT_DOUBLE_EQ(*r.hit_ratio, 1.0);  // 20 new lookups, all L1 hits
  // A restarted daemon (counters went down) gives zero rates, not huge ones.
  const Rates back = ComputeRates(ParseKeyValues(kStatsB), ParseKeyValues(kStatsA), 1.0);
  EXPECT_DOUBLE_EQ(back.reads_per_s, 0.0);
}

TEST(StatusTest, JsonHasNumbersStateAndRates) {
  MountStatus ok;
  ok.mount.mountpoint = "/mnt/a \"quoted\"";
  ok.mount.source = "tierfs:s3://b/p";
  ok.daemon = ParseKeyValues("pid=42 version=0.1.0 log_level=info log_format=text log=syslog");
  ok.stats = ParseKeyValues(kStatsB);
  MountStatus stale;
  stale.mount.mountpoint = "/mnt/b";
  stale.mount.source = "tierfs:file:///x";
  stale.state = "stale";
  stale.error = "Transport endpoint is not connected";
  std::vector<std::optional<Rates>> rates = {
      ComputeRates(ParseKeyValues(kStatsA), ParseKeyValues(kStatsB), 2.0), std::nullopt};
  const auto doc = nlohmann::json::parse(FormatStatusJson({ok, stale}, rates));
  ASSERT_EQ(doc["mounts"].size(), 2u);
  const auto& a = doc["mounts"][0];
  EXPECT_EQ(a["mountpoint"], "/mnt/a \"quoted\"");
  EXPECT_EQ(a["source"], "s3://b/p");
  EXPECT_EQ(a["state"], "ok");
  EXPECT_EQ(a["pid"], 42);
  EXPECT_EQ(a["daemon"]["log"], "syslog");
  EXPECT_EQ(a["stats"]["fuse.reads"], 60);
  EXPECT_DOUBLE_EQ(a["rates"]["reads_per_s"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(a["rates"]["bytes_per_s"]["l1"].get<double>(), 1000.0);
  const auto& b = doc["mounts"][1];
  EXPECT_EQ(b["state"], "stale");
  EXPECT_TRUE(b["pid"].is_null());
  EXPECT_FALSE(b.contains("rates"));

  const std::string text = FormatStatusText({ok, stale}, rates);
  EXPECT_TRUE(Contains(text, "pid 42")) << text;
  EXPECT_TRUE(Contains(text, "stale")) << text;
  EXPECT_TRUE(Contains(text, "reads/s")) << text;
}

// ---- config check ----

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/tierfs-cli-test-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigCheckTest, EveryKeyWithItsValueAndOrigin) {
  const std::string path = WriteTemp(
      "[cache]\nl1_size = \"2GiB\"\n\n[fuse]\nfile_mode = \"0440\"\n[[policy]]\n"
      "prefix = \"train/\"\npin = true\n");
  auto out = CheckConfigFile(path, NoEnv());
  ASSERT_OK(out);
  for (const auto& key : ConfigKeys()) {
    EXPECT_TRUE(ConfigKeyHasGetter(key)) << key << " has no getter in daemon/config_check.cc";
    EXPECT_TRUE(Contains(*out, "\n" + key + " ")) << key;
  }
  EXPECT_TRUE(Contains(*out, "\"2GiB\"  # " + path + ":2")) << *out;
  EXPECT_TRUE(Contains(*out, "\"0440\"  # " + path + ":5")) << *out;
  EXPECT_TRUE(Contains(*out, "\"10GiB\"  # default")) << *out;  // cache.l2_size
  EXPECT_TRUE(Contains(*out, "prefix = \"train/\", pin = true")) << *out;
  std::remove(path.c_str());
}

TEST(ConfigCheckTest, EnvironmentFillsUnsetRegion) {
  const std::string path = WriteTemp("[metadata]\nttl = \"5m\"\n");
  auto out = CheckConfigFile(path, [](const char* n) -> std::optional<std::string> {
    if (std::string(n) == "AWS_REGION") return "eu-west-1";
    return std::nullopt;
  });
  ASSERT_OK(out);
  EXPECT_TRUE(Contains(*out, "\"eu-west-1\"  # environment AWS_REGION")) << *out;
  std::remove(path.c_str());
}

TEST(ConfigCheckTest, BadFileGivesTheUsualError) {
  const std::string path = WriteTemp("[cache]\nl1_sise = \"1GiB\"\n");
  auto out = CheckConfigFile(path, NoEnv());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(Contains(out.status().message(), ":2: unknown key 'cache.l1_sise'"))
      << out.status().message();
  // A cross-key rule of Validate (not only the per-key parse).
  const std::string path2 = WriteTemp("[cache]\nblock_size = \"3KiB\"\n");
  auto out2 = CheckConfigFile(path2, NoEnv());
  ASSERT_FALSE(out2.ok());
  EXPECT_TRUE(Contains(out2.status().message(), "cache.block_size")) << out2.status().message();
  auto missing = CheckConfigFile("/nonexistent/tierfs.toml", NoEnv());
  EXPECT_FALSE(missing.ok());
  std::remove(path.c_str());
  std::remove(path2.c_str());
}

}  // namespace
}  // namespace tierfs
