// ParseSourceUri. (The credential chain is tested in credentials_test.cc.)
#include <gtest/gtest.h>

#include <string>

#include "blobclient/blob_store.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

TEST(ParseSourceUriTest, S3) {
  auto a = ParseSourceUri("s3://bucket");
  ASSERT_OK(a);
  EXPECT_EQ(a->scheme, SourceUri::Scheme::kS3);
  EXPECT_EQ(a->bucket, "bucket");
  EXPECT_EQ(a->prefix, "");
  auto b = ParseSourceUri("s3://bucket/");
  ASSERT_OK(b);
  EXPECT_EQ(b->prefix, "");
  auto c = ParseSourceUri("s3://bucket/data/train");
  ASSERT_OK(c);
  EXPECT_EQ(c->bucket, "bucket");
  EXPECT_EQ(c->prefix, "data/train/");
  auto d = ParseSourceUri("s3://bucket/data/");
  ASSERT_OK(d);
  EXPECT_EQ(d->prefix, "data/");
}

TEST(ParseSourceUriTest, File) {
  auto a = ParseSourceUri("file:///data/sets/");
  ASSERT_OK(a);
  EXPECT_EQ(a->scheme, SourceUri::Scheme::kFile);
  EXPECT_EQ(a->path, "/data/sets");
  auto root = ParseSourceUri("file:///");
  ASSERT_OK(root);
  EXPECT_EQ(root->path, "/");
}

TEST(ParseSourceUriTest, BadInputsNameTheInput) {
  for (const char* bad :
       {"", "bucket/x", "http://x/y", "s3://", "s3:///prefix", "file://rel/x", "S3:/b"}) {
    auto r = ParseSourceUri(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace tierfs
