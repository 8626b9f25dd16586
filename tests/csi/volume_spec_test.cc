#include "csi/volume_spec.h"

#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace tierfs::csi {
namespace {

using Map = std::map<std::string, std::string>;

TEST(VolumeSpecTest, ParsesSourceEndpointRegionAndOptions) {
  auto spec = ParseVolume({{"source", "s3://bucket/datasets/imagenet"},
                           {"endpoint", "http://127.0.0.1:9000"},
                           {"region", "eu-west-1"},
                           {"options", "metadata-ttl=10m, l1-size=2GiB,no-sign-request"},
                           {"csi.storage.k8s.io/pod.name", "reader-0"}},
                          {}, {"control-group=2000"});
  ASSERT_OK(spec);
  EXPECT_EQ(spec->source, "s3://bucket/datasets/imagenet");
  EXPECT_EQ(spec->credentials_id, "node");
  EXPECT_TRUE(spec->credential_env.empty());
  EXPECT_EQ(spec->MountFlags(),
            (std::vector<std::string>{"--endpoint=http://127.0.0.1:9000", "--region=eu-west-1",
                                      "--control-group=2000", "--l1-size=2GiB",
                                      "--metadata-ttl=10m", "--no-sign-request"}));
}

TEST(VolumeSpecTest, RefusesUnknownOptionNamingIt) {
  auto spec =
      ParseVolume({{"source", "s3://bucket"}, {"options", "l1-size=1GiB,cache-dir=/etc"}}, {}, {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("'cache-dir' is not allowed"), std::string::npos)
      << spec.status().ToString();
  // Also through mountOptions, and flags that would read node files.
  for (const char* flag : {"config=/etc/shadow", "log-file=/tmp/x", "manifest=/etc/passwd",
                           "l1-size=1GiB --cache-dir=/x", "uid=0;rm"}) {
    auto s = ParseVolume({{"source", "s3://bucket"}}, {}, {flag});
    EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument) << flag;
  }
}

TEST(VolumeSpecTest, RefusesBadSourceAndAttributes) {
  for (const char* src : {"", "http://x/y", "s3://", "s3://A_B", "file://relative",
                          "file:///a/../etc", "file:///a//b", "s3://bucket\n/x"}) {
    auto s = ParseVolume({{"source", src}}, {}, {});
    ASSERT_FALSE(s.ok()) << src;
    EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument) << src;
    EXPECT_NE(s.status().message().find("volumeAttributes.source"), std::string::npos);
  }
  auto s = ParseVolume({{"source", "s3://bkt"}, {"bucket", "x"}}, {}, {});
  EXPECT_NE(s.status().message().find("volumeAttributes.bucket"), std::string::npos);
  s = ParseVolume({{"source", "s3://bkt"}, {"endpoint", "ftp://x"}}, {}, {});
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument);
  s = ParseVolume({{"source", "s3://bkt"}, {"options", "l1-size=1GiB,l1-size=2GiB"}}, {}, {});
  EXPECT_NE(s.status().message().find("given twice"), std::string::npos);
  s = ParseVolume({{"source", "s3://bkt"}, {"options", "metadata-ttl=soon"}}, {}, {});
  EXPECT_NE(s.status().message().find("metadata-ttl"), std::string::npos);
  EXPECT_OK(ParseVolume({{"source", "file:///srv/data/"}}, {}, {}));
}

TEST(VolumeSpecTest, SecretsBecomeEnvironmentAndAnIdentity) {
  Map secret_a = {{"access_key_id", "AKIA1"}, {"secret_access_key", "s1"}};
  Map secret_b = {{"access_key_id", "AKIA1"}, {"secret_access_key", "s2"}};
  auto a = ParseVolume({{"source", "s3://bkt"}}, secret_a, {});
  auto b = ParseVolume({{"source", "s3://bkt"}}, secret_b, {});
  auto node = ParseVolume({{"source", "s3://bkt"}}, {}, {});
  ASSERT_TRUE(a.ok() && b.ok() && node.ok());
  EXPECT_EQ(a->credential_env.at("AWS_ACCESS_KEY_ID"), "AKIA1");
  EXPECT_EQ(a->credential_env.at("AWS_SECRET_ACCESS_KEY"), "s1");
  EXPECT_FALSE(a->credential_env.contains("AWS_SESSION_TOKEN"));
  EXPECT_EQ(a->credentials_id.rfind("sha256:", 0), 0u);
  EXPECT_EQ(a->credentials_id.find("s1"), std::string::npos);
  // Different secrets, or a secret and none: different daemons. The same: the same daemon.
  EXPECT_NE(a->Key(), b->Key());
  EXPECT_NE(a->Key(), node->Key());
  EXPECT_EQ(a->Key(), ParseVolume({{"source", "s3://bkt"}}, secret_a, {})->Key());
  for (const auto& flag : a->MountFlags()) EXPECT_EQ(flag.find("s1"), std::string::npos);
}

TEST(VolumeSpecTest, RefusesIncompleteOrUnknownSecretKeys) {
  auto s = ParseVolume({{"source", "s3://bkt"}}, {{"access_key_id", "A"}}, {});
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument);
  s = ParseVolume({{"source", "s3://bkt"}},
                  {{"access_key_id", "A"}, {"secret_access_key", "S"}, {"password", "p"}}, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'password'"), std::string::npos);
  EXPECT_EQ(s.status().message().find("'p'"), std::string::npos);
}

TEST(VolumeSpecTest, KeyDependsOnEveryPart) {
  auto base = ParseVolume({{"source", "s3://bkt/p"}}, {}, {});
  ASSERT_OK(base);
  EXPECT_EQ(base->Key().size(), 32u);
  for (Map ctx : {Map{{"source", "s3://bkt/q"}}, Map{{"source", "s3://bkt/p"}, {"region", "x"}},
                  Map{{"source", "s3://bkt/p"}, {"endpoint", "http://h:1"}},
                  Map{{"source", "s3://bkt/p"}, {"options", "l1-size=1GiB"}}}) {
    auto other = ParseVolume(ctx, {}, {});
    ASSERT_OK(other);
    EXPECT_NE(other->Key(), base->Key());
  }
  // Pod information does not split daemons.
  EXPECT_EQ(
      ParseVolume({{"source", "s3://bkt/p"}, {"csi.storage.k8s.io/pod.namespace", "x"}}, {}, {})
          ->Key(),
      base->Key());
}

}  // namespace
}  // namespace tierfs::csi
