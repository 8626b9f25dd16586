#include "csi/node_state.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs::csi {
namespace {

TEST(NodeStateTest, RoundTripsThroughTheFile) {
  testing::TempDir dir;
  NodeState state;
  DaemonRecord& d = state.daemons["k1"];
  d.key = "k1";
  d.source = "s3://b";
  d.credentials_id = "sha256:ab";
  d.flags = {"--endpoint=http://h:1"};
  d.mountpoint = "/var/lib/tierfs-csi/mnt/k1";
  d.pid = 42;
  d.start_time = 777;
  d.targets = {{"/pods/a/mount", {"vol-a", false}}, {"/pods/b/mount", {"vol-b", true}}};
  const std::string path = dir.path() + "/state.json";
  ASSERT_OK(SaveState(path, state));
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto back = LoadState(path);
  ASSERT_OK(back);
  ASSERT_EQ(back->daemons.size(), 1u);
  const DaemonRecord& r = back->daemons.at("k1");
  EXPECT_EQ(r.key, "k1");
  EXPECT_EQ(r.pid, 42);
  EXPECT_EQ(r.start_time, 777u);
  EXPECT_EQ(r.flags, d.flags);
  EXPECT_EQ(r.targets, d.targets);
  EXPECT_EQ(EncodeState(*back), EncodeState(state));
}

TEST(NodeStateTest, MissingFileIsEmptyOtherVersionsAreRefused) {
  testing::TempDir dir;
  auto empty = LoadState(dir.path() + "/none.json");
  ASSERT_OK(empty);
  EXPECT_TRUE(empty->daemons.empty());
  EXPECT_EQ(DecodeState(R"({"version": 2, "daemons": {}})").status().code(),
            Status::Code::kCorruption);
  EXPECT_EQ(DecodeState("not json").status().code(), Status::Code::kCorruption);
  EXPECT_EQ(DecodeState(R"({"version": 1, "daemons": {"k": {"pid": 1}}})").status().code(),
            Status::Code::kCorruption);
}

}  // namespace
}  // namespace tierfs::csi
