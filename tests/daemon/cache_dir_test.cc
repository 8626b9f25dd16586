// daemon/cache_dir: the cache directory is created private, a foreign or group/other-writable one
// is refused, and a second holder of the lock is refused with the first one's PID.
#include "daemon/cache_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace tierfs {
namespace {

namespace fs = std::filesystem;

class CacheDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tierfs-cachedir-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    base_ = tmpl;
  }
  void TearDown() override { fs::remove_all(base_); }

  static unsigned Mode(const std::string& p) {
    struct stat st;
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }

  std::string base_;
};

TEST_F(CacheDirTest, CreatesPrivateDirectoriesAndALockFileHoldingThePid) {
  const std::string dir = base_ + "/a/b/cache";
  auto lock = PrepareCacheDir(dir);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  EXPECT_EQ(Mode(base_ + "/a"), 0700u);
  EXPECT_EQ(Mode(dir), 0700u);
  EXPECT_EQ(Mode(dir + "/lock"), 0600u);
  std::ifstream in(dir + "/lock");
  std::string pid;
  in >> pid;
  EXPECT_EQ(pid, std::to_string(::getpid()));
}

TEST_F(CacheDirTest, SecondHolderIsRefusedWithTheFirstPidUntilReleased) {
  const std::string dir = base_ + "/cache";
  auto first = PrepareCacheDir(dir);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // flock locks belong to the open file description: a second open in this process conflicts
  // exactly as a second daemon does.
  auto second = PrepareCacheDir(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Status::Code::kUnavailable);
  const std::string msg = second.status().message();
  EXPECT_NE(msg.find("pid " + std::to_string(::getpid())), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
  first->reset();
  auto third = PrepareCacheDir(dir);
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

TEST_F(CacheDirTest, GroupOrOtherWritableIsRefusedAndReadableIsNarrowed) {
  const std::string dir = base_ + "/cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  for (unsigned bad : {0777u, 0770u, 0702u, 01777u}) {
    ASSERT_EQ(::chmod(dir.c_str(), bad), 0);
    auto r = PrepareCacheDir(dir);
    ASSERT_FALSE(r.ok()) << std::oct << bad;
    EXPECT_EQ(r.status().code(), Status::Code::kPermissionDenied);
    std::ostringstream mode;
    mode << "mode " << std::oct << std::setw(4) << std::setfill('0') << bad;
    EXPECT_NE(r.status().message().find(mode.str()), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(dir), std::string::npos);
    EXPECT_FALSE(fs::exists(dir + "/lock"));  // refused before anything was created in it
  }
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  auto ok = PrepareCacheDir(dir);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(Mode(dir), 0700u);
}

TEST_F(CacheDirTest, ForeignOwnerIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  const std::string dir = base_ + "/cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  auto r = PrepareCacheDir(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(r.status().message().find("owned by uid 65534"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(fs::exists(dir + "/lock"));
}

TEST_F(CacheDirTest, NotADirectoryOrRelativeIsRefused) {
  std::ofstream(base_ + "/file") << "x";
  EXPECT_FALSE(PrepareCacheDir(base_ + "/file").ok());
  EXPECT_EQ(PrepareCacheDir("relative/cache").status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace tierfs
