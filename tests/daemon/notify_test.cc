// daemon/notify: the datagrams a Type=notify unit's systemd receives (READY=1 with STATUS and
// MAINPID, STOPPING=1, STATUS), read from a real AF_UNIX datagram socket named by NOTIFY_SOCKET;
// and nothing at all without NOTIFY_SOCKET.
#include "daemon/notify.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "tests/testing/temp_dir.h"

namespace tierfs {
namespace {

namespace fs = std::filesystem;

class NotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path();
    path_ = dir_ + "/notify.sock";
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    ASSERT_LT(path_.size(), sizeof(addr.sun_path));
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    ASSERT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << std::strerror(errno);
    ::setenv("NOTIFY_SOCKET", path_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("NOTIFY_SOCKET");
    if (fd_ >= 0) ::close(fd_);
  }

  // The next datagram, or "" when none arrives within `ms`.
  std::string Receive(int ms = 2000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) != 1) return "";
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

  ::tierfs::testing::TempDir tmp_;
  std::string dir_, path_;
  int fd_ = -1;
};

TEST_F(NotifyTest, ReadyCarriesStatusAndMainPid) {
  NotifyReady("serving s3://b at /mnt/x", ::getpid());
  EXPECT_EQ(Receive(),
            "READY=1\nSTATUS=serving s3://b at /mnt/x\nMAINPID=" + std::to_string(::getpid()));
  // A supervised daemon names its supervisor.
  NotifyReady("serving", 4242);
  EXPECT_EQ(Receive(), "READY=1\nSTATUS=serving\nMAINPID=4242");
}

TEST_F(NotifyTest, StatusAndStoppingInOrder) {
  NotifyStatus("starting: opening the cache");
  NotifyStopping("/mnt/x unmounted");
  EXPECT_EQ(Receive(), "STATUS=starting: opening the cache");
  EXPECT_EQ(Receive(), "STOPPING=1\nSTATUS=/mnt/x unmounted");
}

TEST_F(NotifyTest, StatusIsOneLine) {
  // A newline in a message (an error text) must not start a second assignment such as READY=1.
  NotifyStatus("mount failed: x\nREADY=1");
  EXPECT_EQ(Receive(), "STATUS=mount failed: x READY=1");
}

TEST_F(NotifyTest, NothingWithoutNotifySocket) {
  ::unsetenv("NOTIFY_SOCKET");
  NotifyStatus("starting");
  NotifyReady("serving", ::getpid());
  NotifyStopping("stopping");
  EXPECT_EQ(Receive(200), "");
}

}  // namespace
}  // namespace tierfs
