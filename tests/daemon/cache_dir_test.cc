// daemon/cache_dir: the cache directory is created private, a foreign or group/other-writable one
// is refused, and a second holder of the lock is refused with the first one's PID. The way to it
// is walked without following a symlink another user could have planted, and what is opened
// under it afterwards goes through the directory held open (anchored_path), not its name.
#include "daemon/cache_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs {
namespace {

namespace fs = std::filesystem;

class CacheDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    base_ = tmp_.path();
  }

  static unsigned Mode(const std::string& p) {
    struct stat st;
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }

  ::tierfs::testing::TempDir tmp_;
  std::string base_;
};

TEST_F(CacheDirTest, CreatesPrivateDirectoriesAndALockFileHoldingThePid) {
  const std::string dir = base_ + "/a/b/cache";
  auto lock = PrepareCacheDir(dir);
  ASSERT_OK(lock);
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
  ASSERT_OK(first);
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
  EXPECT_OK(third);
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
  ASSERT_OK(ok);
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

// A directory planted by another user (the victim: what a symlink points the root daemon at).
class HostileCacheDirTest : public CacheDirTest {
 protected:
  void SetUp() override {
    CacheDirTest::SetUp();
    victim_ = base_ + "/victim";
    ASSERT_EQ(::mkdir(victim_.c_str(), 0755), 0);
    std::ofstream(victim_ + "/precious") << "data";
  }
  // The victim exactly as it was: mode, contents, no lock, meta or blocks.
  void ExpectVictimUntouched() {
    EXPECT_EQ(Mode(victim_), 0755u);
    EXPECT_FALSE(fs::exists(victim_ + "/lock"));
    EXPECT_FALSE(fs::exists(victim_ + "/meta"));
    EXPECT_FALSE(fs::exists(victim_ + "/blocks"));
    std::ifstream in(victim_ + "/precious");
    std::string text;
    in >> text;
    EXPECT_EQ(text, "data");
  }
  std::string victim_;
};

TEST_F(HostileCacheDirTest, SymlinkInADirectoryOthersMayWriteWithoutStickyBitIsRefused) {
  const std::string open_dir = base_ + "/x";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(::symlink(victim_.c_str(), (open_dir + "/cache").c_str()), 0);
  auto r = PrepareCacheDir(open_dir + "/cache");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kPermissionDenied);
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find(open_dir + " has mode 0777"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sticky"), std::string::npos) << msg;
  ExpectVictimUntouched();
  // The same without a symlink: the directory could be swapped after the check.
  ASSERT_EQ(::unlink((open_dir + "/cache").c_str()), 0);
  EXPECT_EQ(PrepareCacheDir(open_dir + "/cache").status().code(), Status::Code::kPermissionDenied);
  EXPECT_FALSE(fs::exists(open_dir + "/cache"));
}

TEST_F(HostileCacheDirTest, AnotherUsersSymlinkInAStickyDirectoryIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to lchown";
  const std::string sticky = base_ + "/tmp";
  ASSERT_EQ(::mkdir(sticky.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
  const std::string link = sticky + "/cache";
  ASSERT_EQ(::symlink(victim_.c_str(), link.c_str()), 0);
  ASSERT_EQ(::lchown(link.c_str(), 65534, 65534), 0);
  auto r = PrepareCacheDir(link);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(r.status().message().find("symlink owned by uid 65534"), std::string::npos)
      << r.status().message();
  ExpectVictimUntouched();
  // Our own directory in the sticky one is fine (nobody else can rename it).
  auto ok = PrepareCacheDir(sticky + "/mine");
  EXPECT_OK(ok);
}

TEST_F(HostileCacheDirTest, AParentOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  const std::string theirs = base_ + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  auto r = PrepareCacheDir(theirs + "/cache");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kPermissionDenied);
  EXPECT_NE(r.status().message().find(theirs + " is owned by uid 65534"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(fs::exists(theirs + "/cache"));
}

TEST_F(CacheDirTest, OwnSymlinksAreFollowedAndTheLockLandsInTheTarget) {
  const std::string real = base_ + "/real";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink("real", (base_ + "/rel").c_str()), 0);
  ASSERT_EQ(::symlink(real.c_str(), (base_ + "/abs").c_str()), 0);
  for (const char* name : {"/rel", "/abs"}) {
    auto lock = PrepareCacheDir(base_ + name);
    ASSERT_OK(lock) << name;
    EXPECT_TRUE(fs::is_regular_file(real + "/lock"));
  }
  ASSERT_EQ(::symlink("loop", (base_ + "/loop").c_str()), 0);
  EXPECT_EQ(PrepareCacheDir(base_ + "/loop").status().code(), Status::Code::kInvalidArgument);
}

TEST_F(CacheDirTest, TheAnchoredPathKeepsNamingTheVerifiedDirectoryAfterASwap) {
  const std::string dir = base_ + "/cache";
  const std::string victim = base_ + "/victim";
  ASSERT_EQ(::mkdir(victim.c_str(), 0755), 0);
  auto lock = PrepareCacheDir(dir);
  ASSERT_OK(lock);
  // The name is swapped for a symlink once the directory was checked.
  ASSERT_EQ(::rename(dir.c_str(), (base_ + "/moved").c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), dir.c_str()), 0);
  const std::string anchored = (*lock)->anchored_path();
  ASSERT_EQ(::mkdir((anchored + "/meta").c_str(), 0700), 0);
  std::ofstream(anchored + "/meta/data.mdb") << "x";
  EXPECT_TRUE(fs::exists(base_ + "/moved/meta/data.mdb"));
  EXPECT_FALSE(fs::exists(victim + "/meta"));
  EXPECT_EQ(Mode(victim), 0755u);
}

TEST_F(CacheDirTest, ALockThatIsASymlinkIsNotFollowed) {
  const std::string dir = base_ + "/cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  const std::string target = base_ + "/target";
  std::ofstream(target) << "keep";
  ASSERT_EQ(::symlink(target.c_str(), (dir + "/lock").c_str()), 0);
  EXPECT_FALSE(PrepareCacheDir(dir).ok());
  std::ifstream in(target);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "keep");
}

}  // namespace
}  // namespace tierfs
