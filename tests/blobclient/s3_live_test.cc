// S3BlobStore against a real S3-compatible server, when one is named in the environment
// (otherwise skipped):
//   TIERFS_TEST_S3_ENDPOINT=http://127.0.0.1:PORT TIERFS_TEST_S3_BUCKET=NAME
//   TIERFS_TEST_S3_ACCESS_KEY=... TIERFS_TEST_S3_SECRET_KEY=... [TIERFS_TEST_S3_REGION=...]
//   [TIERFS_TEST_S3_IGNORES_IF_MATCH=1]
// e.g. scripts/s3rver.sh start DIR PORT NAME (S3RVER/S3RVER). Everything is written under a fresh
// prefix and deleted afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <set>

#include "blobclient/blob_store.h"
#include "tests/blobclient/test_util.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using ::tierfs::testing::AsBytes;
using ::tierfs::testing::AsString;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

TEST(S3LiveTest, RoundTripAgainstARealServer) {
  const std::string endpoint = Env("TIERFS_TEST_S3_ENDPOINT");
  if (endpoint.empty()) GTEST_SKIP() << "TIERFS_TEST_S3_ENDPOINT not set";
  auto transport = NewHttpTransport(HttpTransportOptions{});
  ASSERT_OK(transport);
  S3Options o;
  o.endpoint = endpoint;
  o.bucket = Env("TIERFS_TEST_S3_BUCKET");
  if (!Env("TIERFS_TEST_S3_REGION").empty()) o.region = Env("TIERFS_TEST_S3_REGION");
  o.credentials.access_key_id = Env("TIERFS_TEST_S3_ACCESS_KEY");
  o.credentials.secret_access_key = Env("TIERFS_TEST_S3_SECRET_KEY");
  o.prefix = "tierfs-live-" + std::to_string(::getpid()) + "-" +
             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "/";
  o.max_attempts = 2;
  auto s = NewS3BlobStore(o, transport->get(), SystemClock());
  ASSERT_OK(s);
  BlobStore* store = s->get();

  const std::vector<std::string> keys = {"plain.bin", "dir/a b+c=d.txt", "dir/sub/x",
                                         "\xC3\xBCnicode/f\xC3\xA9.txt", "only/sub/dirs/y"};
  const std::string body = ::tierfs::testing::Pattern(100000);
  for (const auto& k : keys) ASSERT_OK(store->Put(k, AsBytes(body))) << k;

  for (const auto& k : keys) {
    auto info = store->Head(k);
    ASSERT_OK(info) << k;
    EXPECT_EQ(info->size, body.size());
    EXPECT_FALSE(info->etag.empty());
    std::vector<std::byte> buf(1000);
    auto n = store->Read(k, 5000, buf, info->etag);
    ASSERT_OK(n) << k;
    ASSERT_EQ(*n, 1000u);
    EXPECT_EQ(AsString(buf), body.substr(5000, 1000));
  }
  std::vector<std::byte> buf(10);
  // s3rver 3.7.1 does not implement If-Match; set TIERFS_TEST_S3_IGNORES_IF_MATCH=1 for it.
  if (Env("TIERFS_TEST_S3_IGNORES_IF_MATCH").empty()) {
    EXPECT_EQ(store->Read("plain.bin", 0, buf, "0123456789abcdef0123456789abcdef").status().code(),
              Status::Code::kFailedPrecondition);
  }
  EXPECT_EQ(*store->Read("plain.bin", body.size(), buf, ""), 0u);
  EXPECT_EQ(store->Head("missing").status().code(), Status::Code::kNotFound);

  auto top = store->List("", "/", "", 1000);
  ASSERT_OK(top);
  std::set<std::string> objects, prefixes;
  for (const auto& e : top->objects) objects.insert(e.key);
  for (const auto& p : top->prefixes) prefixes.insert(p);
  EXPECT_EQ(objects, std::set<std::string>({"plain.bin"}));
  EXPECT_EQ(prefixes, std::set<std::string>({"dir/", "only/", "\xC3\xBCnicode/"}));
  std::set<std::string> all;
  std::string token;
  do {
    auto page = store->List("", "", token, 2);
    ASSERT_OK(page);
    for (const auto& e : page->objects) all.insert(e.key);
    token = page->next_token;
  } while (!token.empty());
  EXPECT_EQ(all, std::set<std::string>(keys.begin(), keys.end()));

  for (const auto& k : keys) EXPECT_OK(store->Delete(k)) << k;
  EXPECT_EQ(store->Head("plain.bin").status().code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace tierfs
