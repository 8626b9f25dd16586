#include "csi/internal/daemon_text.h"

#include <gtest/gtest.h>

namespace tierfs::csi {
namespace {

TEST(DaemonTextTest, FindsTierfsMountsAndTheirBinds) {
  const char* kMountinfo =
      "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
      "45 27 0:40 / /var/lib/tierfs-csi/mnt/k1 rw,nosuid,nodev,relatime - fuse.tierfs "
      "tierfs:s3://bkt rw,user_id=0,group_id=0,default_permissions,allow_other\n"
      "48 27 0:40 / /var/lib/kubelet/pods/a/vol\\040x/mount ro,nosuid shared:5 - fuse.tierfs "
      "tierfs:s3://bkt rw\n"
      "50 27 0:41 / /mnt/other rw - fuse.sshfs host: rw\n";
  EXPECT_EQ(ParseTierfsMountPoints(kMountinfo),
            (std::vector<std::string>{"/var/lib/tierfs-csi/mnt/k1",
                                      "/var/lib/kubelet/pods/a/vol x/mount"}));
  EXPECT_TRUE(ParseTierfsMountPoints("").empty());
}

TEST(DaemonTextTest, MapsTheDaemonsMessagesToCodes) {
  Status s = DaemonFailureStatus(
      1,
      "tierfs mount: warning: L2 is larger than the disk\n"
      "tierfs: PermissionDenied: cannot list s3://b: HTTP 403 InvalidAccessKeyId\n");
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(s.message(), "cannot list s3://b: HTTP 403 InvalidAccessKeyId");
  EXPECT_EQ(DaemonFailureStatus(1, "tierfs: NotFound: bucket x does not exist\n").code(),
            Status::Code::kNotFound);
  for (const char* code : {"Unavailable", "TimedOut", "IOError"}) {
    EXPECT_EQ(DaemonFailureStatus(1, std::string("tierfs: ") + code + ": x\n").code(),
              Status::Code::kUnavailable)
        << code;
  }
  s = DaemonFailureStatus(2, "tierfs mount: cache.l1_size (--l1-size): not a size: 'x'\n");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "cache.l1_size (--l1-size): not a size: 'x'");
  s = DaemonFailureStatus(1, "tierfs: Corruption: bad\n");
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_EQ(s.message(), "Corruption: bad");
  s = DaemonFailureStatus(137, "");
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_NE(s.message().find("status 137"), std::string::npos);
}

}  // namespace
}  // namespace tierfs::csi
