#include "csi/node_driver.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs::csi {
namespace {

// NodeOps in memory: daemons are PIDs with a mount, binds are mounts. Not thread-safe (the
// driver serializes its calls).
class FakeNodeOps : public NodeOps {
 public:
  Result<ProcessId> StartDaemon(const DaemonLaunch& launch) override {
    launches.push_back(launch);
    if (!fail_start.ok()) return fail_start;
    ProcessId p{next_pid++, 1000};
    alive.insert(p.pid);
    mounts.insert(launch.mountpoint);
    return p;
  }
  Status StopDaemon(const std::string& mountpoint, const ProcessId& p) override {
    mounts.erase(mountpoint);
    alive.erase(p.pid);
    stopped.push_back(p.pid);
    return Status::OK();
  }
  bool Alive(const ProcessId& p) override { return alive.contains(p.pid); }
  Status Bind(const std::string& from, const std::string& target, bool read_only) override {
    if (!fail_bind.ok()) return fail_bind;
    if (read_only) read_only_binds.insert(target);
    if (!mounts.contains(from)) return Status::Internal("bind of a path that is no mount");
    mounts.insert(target);
    return Status::OK();
  }
  Status Unmount(const std::string& path) override {
    mounts.erase(path);
    return Status::OK();
  }
  bool IsTierfsMount(const std::string& path) override { return mounts.contains(path); }
  std::vector<std::string> TierfsMountsUnder(const std::string& dir) override {
    std::vector<std::string> out;
    for (const auto& m : mounts) {
      if (m.rfind(dir + "/", 0) == 0) out.push_back(m);
    }
    return out;
  }
  Status MakeDirs(const std::string& path, uint32_t) override {
    dirs.insert(path);
    return Status::OK();
  }
  Status RemoveDir(const std::string& path) override {
    dirs.erase(path);
    return Status::OK();
  }

  int64_t next_pid = 100;
  std::set<int64_t> alive;
  std::set<std::string> mounts, dirs, read_only_binds;
  std::vector<DaemonLaunch> launches;
  std::vector<int64_t> stopped;
  Status fail_start, fail_bind;
};

class NodeDriverTest : public ::testing::Test {
 protected:
  NodeDriverTest() {
    options_.state_dir = dir_.path() + "/state";
    options_.cache_root = dir_.path() + "/cache";
    std::filesystem::create_directories(options_.state_dir);
  }

  std::unique_ptr<NodeDriver> Open() {
    auto d = NodeDriver::Open(options_, &ops_);
    EXPECT_OK(d);
    return d.ok() ? std::move(*d) : nullptr;
  }

  static PublishRequest Req(std::string volume, std::string target, std::string source = "s3://bkt",
                            std::map<std::string, std::string> secrets = {}) {
    PublishRequest r;
    r.volume_id = std::move(volume);
    r.target_path = std::move(target);
    r.volume_context = {{"source", std::move(source)}, {"endpoint", "http://127.0.0.1:9"}};
    r.secrets = std::move(secrets);
    return r;
  }

  testing::TempDir dir_;
  NodeDriverOptions options_;
  FakeNodeOps ops_;
};

TEST_F(NodeDriverTest, TwoPodsShareOneDaemonUntilTheLastLeaves) {
  auto driver = Open();
  ASSERT_OK(driver->Publish(Req("v1", "/pods/a")));
  ASSERT_OK(driver->Publish(Req("v2", "/pods/b")));
  EXPECT_EQ(ops_.launches.size(), 1u);
  EXPECT_TRUE(ops_.IsTierfsMount("/pods/a") && ops_.IsTierfsMount("/pods/b"));
  const DaemonLaunch& l = ops_.launches[0];
  EXPECT_EQ(l.cache_dir.rfind(options_.cache_root + "/", 0), 0u);
  EXPECT_EQ(l.mountpoint.rfind(options_.state_dir + "/mnt/", 0), 0u);

  ASSERT_OK(driver->Unpublish("v1", "/pods/a"));
  EXPECT_FALSE(ops_.IsTierfsMount("/pods/a"));
  EXPECT_TRUE(ops_.IsTierfsMount("/pods/b"));
  EXPECT_TRUE(ops_.stopped.empty());
  ASSERT_OK(driver->Unpublish("v2", "/pods/b"));
  EXPECT_EQ(ops_.stopped, std::vector<int64_t>{100});
  EXPECT_TRUE(ops_.mounts.empty());
  EXPECT_TRUE(driver->TEST_State().daemons.empty());
}

TEST_F(NodeDriverTest, PublishAndUnpublishAreIdempotent) {
  auto driver = Open();
  ASSERT_OK(driver->Publish(Req("v1", "/pods/a")));
  ASSERT_OK(driver->Publish(Req("v1", "/pods/a")));
  EXPECT_EQ(ops_.launches.size(), 1u);
  EXPECT_EQ(driver->TEST_State().daemons.begin()->second.targets.size(), 1u);
  // Another volume at a target that holds one, or the same one with another readonly flag:
  // refused (ALREADY_EXISTS over gRPC).
  Status s = driver->Publish(Req("v9", "/pods/a", "s3://other"));
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  PublishRequest ro = Req("v1", "/pods/a");
  ro.readonly = true;
  EXPECT_EQ(driver->Publish(ro).code(), Status::Code::kFailedPrecondition);
  ro.target_path = "/pods/r";
  ASSERT_OK(driver->Publish(ro));
  EXPECT_EQ(ops_.read_only_binds, std::set<std::string>{"/pods/r"});
  ASSERT_OK(driver->Unpublish("v1", "/pods/r"));
  ASSERT_OK(driver->Unpublish("v1", "/pods/a"));
  ASSERT_OK(driver->Unpublish("v1", "/pods/a"));
  ASSERT_OK(driver->Unpublish("v7", "/pods/never"));
  EXPECT_EQ(ops_.stopped.size(), 1u);
}

TEST_F(NodeDriverTest, DistinctCredentialsGetDistinctDaemons) {
  auto driver = Open();
  std::map<std::string, std::string> a = {{"access_key_id", "K"}, {"secret_access_key", "A"}};
  std::map<std::string, std::string> b = {{"access_key_id", "K"}, {"secret_access_key", "B"}};
  ASSERT_OK(driver->Publish(Req("v1", "/pods/a", "s3://bkt", a)));
  ASSERT_OK(driver->Publish(Req("v2", "/pods/b", "s3://bkt", b)));
  ASSERT_OK(driver->Publish(Req("v3", "/pods/c", "s3://bkt")));
  ASSERT_OK(driver->Publish(Req("v4", "/pods/d", "s3://bkt", a)));
  ASSERT_EQ(ops_.launches.size(), 3u);
  EXPECT_EQ(ops_.launches[0].env.at("AWS_SECRET_ACCESS_KEY"), "A");
  EXPECT_EQ(ops_.launches[1].env.at("AWS_SECRET_ACCESS_KEY"), "B");
  EXPECT_TRUE(ops_.launches[2].env.empty());
  std::set<std::string> caches;
  for (const auto& l : ops_.launches) caches.insert(l.cache_dir);
  EXPECT_EQ(caches.size(), 3u);
  // No secret reaches the state file.
  std::ifstream in(options_.state_dir + "/state.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("sha256:"), std::string::npos);
  EXPECT_EQ(text.find("\"A\""), std::string::npos);
  EXPECT_EQ(text.find("\"B\""), std::string::npos);
}

TEST_F(NodeDriverTest, FailedStartLeavesNothing) {
  auto driver = Open();
  ops_.fail_start = Status::PermissionDenied("HTTP 403 InvalidAccessKeyId");
  Status s = driver->Publish(Req("v1", "/pods/a"));
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied);
  EXPECT_NE(s.message().find("InvalidAccessKeyId"), std::string::npos);
  EXPECT_TRUE(ops_.mounts.empty());
  EXPECT_TRUE(driver->TEST_State().daemons.empty());
  // A failed bind of the first target stops the daemon it started.
  ops_.fail_start = Status::OK();
  ops_.fail_bind = Status::Internal("mount: EPERM");
  EXPECT_EQ(driver->Publish(Req("v1", "/pods/a")).code(), Status::Code::kInternal);
  EXPECT_EQ(ops_.stopped.size(), 1u);
  EXPECT_TRUE(ops_.mounts.empty());
  EXPECT_TRUE(driver->TEST_State().daemons.empty());
}

TEST_F(NodeDriverTest, BadRequestsAreInvalidArgument) {
  auto driver = Open();
  EXPECT_EQ(driver->Publish(Req("", "/pods/a")).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(driver->Publish(Req("v", "relative")).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(driver->Publish(Req("v", "/pods/a", "gs://b")).code(), Status::Code::kInvalidArgument);
  // file:// only below the node's file root.
  Status s = driver->Publish(Req("v", "/pods/a", "file:///etc"));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("--file-root"), std::string::npos);
  EXPECT_TRUE(ops_.launches.empty());
}

TEST_F(NodeDriverTest, FileSourcesBelowTheFileRoot) {
  options_.file_root = "/srv/data";
  auto driver = Open();
  EXPECT_EQ(driver->Publish(Req("v", "/pods/a", "file:///srv/database")).code(),
            Status::Code::kInvalidArgument);
  EXPECT_OK(driver->Publish(Req("v", "/pods/a", "file:///srv/data/imagenet")));
}

TEST_F(NodeDriverTest, RestartKeepsLiveDaemonsAndDropsWhatIsGone) {
  {
    auto driver = Open();
    ASSERT_OK(driver->Publish(Req("v1", "/pods/a")));
    ASSERT_OK(driver->Publish(Req("v2", "/pods/b")));
    ASSERT_OK(driver->Publish(Req("v3", "/pods/c", "s3://other")));
    ASSERT_OK(driver->Publish(Req("v4", "/pods/d", "s3://third")));
  }
  // While the driver is down: pod b's mount vanished, the daemon of s3://other died, and a
  // daemon mount nobody recorded appeared.
  ops_.mounts.erase("/pods/b");
  ops_.alive.erase(101);
  ops_.mounts.insert(options_.state_dir + "/mnt/orphan");
  auto driver = Open();
  NodeState st = driver->TEST_State();
  ASSERT_EQ(st.daemons.size(), 2u);
  for (const auto& [key, d] : st.daemons) {
    if (d.source == "s3://bkt") {
      EXPECT_EQ(d.targets.size(), 1u);
      EXPECT_TRUE(d.targets.contains("/pods/a"));
    } else {
      EXPECT_EQ(d.source, "s3://third");
    }
  }
  EXPECT_FALSE(ops_.IsTierfsMount("/pods/c"));
  EXPECT_FALSE(ops_.IsTierfsMount(options_.state_dir + "/mnt/orphan"));
  // Publishing the same volume again after the restart reuses the running daemon.
  ASSERT_OK(driver->Publish(Req("v2", "/pods/b")));
  EXPECT_EQ(ops_.launches.size(), 3u);
  // A daemon that died since is replaced at the next publish.
  ops_.alive.erase(102);
  ASSERT_OK(driver->Publish(Req("v5", "/pods/e", "s3://third")));
  EXPECT_EQ(ops_.launches.size(), 4u);
  EXPECT_FALSE(ops_.IsTierfsMount("/pods/d"));  // the dead daemon's pod mount went with it
}

TEST_F(NodeDriverTest, LastTargetGoneWhileDownStopsTheDaemonAtStart) {
  {
    auto driver = Open();
    ASSERT_OK(driver->Publish(Req("v1", "/pods/a")));
  }
  ops_.mounts.erase("/pods/a");
  auto driver = Open();
  EXPECT_TRUE(driver->TEST_State().daemons.empty());
  EXPECT_EQ(ops_.stopped, std::vector<int64_t>{100});
}

TEST_F(NodeDriverTest, ConcurrentPublishesKeepTheCountsRight) {
  auto driver = Open();
  constexpr int kThreads = 8, kRounds = 10;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string target = "/pods/t" + std::to_string(t);
      const std::string source = t % 2 ? "s3://odd" : "s3://even";
      for (int i = 0; i < kRounds; ++i) {
        EXPECT_OK(driver->Publish(Req("v" + std::to_string(t), target, source)));
        EXPECT_OK(driver->Unpublish("v" + std::to_string(t), target));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(driver->TEST_State().daemons.empty());
  EXPECT_TRUE(ops_.mounts.empty());
  EXPECT_TRUE(ops_.alive.empty());
  EXPECT_EQ(ops_.launches.size(), ops_.stopped.size());
}

}  // namespace
}  // namespace tierfs::csi
