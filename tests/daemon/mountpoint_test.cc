// daemon/mounts CheckMountpoint: a mount point that is already one is refused
// (even with -o nonempty), a non-empty directory needs -o nonempty.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/mounts.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs {
namespace {

namespace fs = std::filesystem;
using ::tierfs::testing::TempDir;

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(CheckMountpoint, ANonEmptyDirectoryNeedsNonempty) {
  TempDir dir;
  EXPECT_OK(CheckMountpoint(dir.path(), false));
  Write(dir.path() + "/a", "x");
  Write(dir.path() + "/b", "x");
  Status s = CheckMountpoint(dir.path(), false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find(dir.path() + " is not empty (it holds '"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("and 1 more"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("-o nonempty"), std::string::npos) << s.message();
  EXPECT_OK(CheckMountpoint(dir.path(), true));
}

TEST(CheckMountpoint, AMountPointIsRefusedEvenWithNonempty) {
  auto mounts = ReadMountInfo();
  ASSERT_OK(mounts);
  const MountInfo* root = MountAt(*mounts, "/");
  ASSERT_NE(root, nullptr);
  Status s = CheckMountpoint("/", true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("MOUNTPOINT / is already a mount point (fstype " + root->fstype),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("unmount it first"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tierfs
