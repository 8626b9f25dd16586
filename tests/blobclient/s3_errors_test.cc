// S3 error answers → messages naming cause and fix (blobclient/s3_errors.h), region discovery from
// x-amz-bucket-region, the User-Agent and the CA bundle, end to end over loopback HTTP against a
// fake S3 endpoint (HttpTestServer) with real libcurl underneath.
#include "blobclient/s3_errors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/version.h"
#include "blobclient/blob_store.h"
#include "blobclient/credentials.h"
#include "blobclient/http_transport.h"
#include "tests/blobclient/test_util.h"
#include "tests/fakes/http_server_test.h"
#include "tests/fakes/http_test_server.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using blobclient::ExplainS3Error;
using blobclient::HttpResponse;
using blobclient::ParseS3ErrorAnswer;
using blobclient::S3ErrorContext;
using ::tierfs::testing::HttpTestRequest;
using ::tierfs::testing::HttpTestResponse;
using ::tierfs::testing::HttpTestServer;

constexpr char kSecret[] = "wJalrXUtnFEMI-secret-never-printed";
constexpr char kEmptyList[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>bkt</Name><Prefix></Prefix>"
    "<KeyCount>0</KeyCount><MaxKeys>1</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>";

std::string ErrorXml(std::string_view code, std::string_view message) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + std::string(code) +
         "</Code><Message>" + std::string(message) + "</Message><RequestId>R1</RequestId></Error>";
}

// The region in the credential scope of a SigV4 Authorization header ("" if none).
std::string SignedRegion(const HttpTestRequest& r) {
  const std::string* auth = r.Header("authorization");
  if (auth == nullptr) return {};
  // Credential=AKID/20150830/REGION/s3/aws4_request
  size_t p = auth->find("Credential=");
  if (p == std::string::npos) return {};
  std::string scope = auth->substr(p + 11, auth->find(',', p) - p - 11);
  size_t a = scope.find('/');
  size_t b = scope.find('/', a + 1);
  size_t c = scope.find('/', b + 1);
  return scope.substr(b + 1, c - b - 1);
}

S3ErrorContext Ctx() {
  S3ErrorContext c;
  c.bucket = "bkt";
  c.prefix = "data/";
  c.endpoint = "https://s3.us-east-1.amazonaws.com";
  c.region = "us-east-1";
  c.access_key_id = "AKIDEXAMPLE";
  c.credentials_source = "environment";
  return c;
}

TEST(S3ErrorsTest, ParsesCodeMessageAndRegion) {
  auto a = ParseS3ErrorAnswer(400, ErrorXml("AuthorizationHeaderMalformed", "wrong region"), "");
  EXPECT_EQ(a.http_status, 400);
  EXPECT_EQ(a.code, "AuthorizationHeaderMalformed");
  EXPECT_EQ(a.message, "wrong region");
  EXPECT_EQ(a.bucket_region, "");
  a = ParseS3ErrorAnswer(
      400, "<Error><Code>AuthorizationHeaderMalformed</Code><Region>eu-west-1</Region></Error>",
      "");
  EXPECT_EQ(a.bucket_region, "eu-west-1");
  a = ParseS3ErrorAnswer(301, "", "ap-south-1");  // HEAD: no body, the header only
  EXPECT_EQ(a.bucket_region, "ap-south-1");
  // A cut body still yields its code; an implausible region is dropped.
  a = ParseS3ErrorAnswer(403, "<Error><Code>AccessDenied</Code><Message>Acc", "EU WEST\n1");
  EXPECT_EQ(a.code, "AccessDenied");
  EXPECT_EQ(a.bucket_region, "");
}

TEST(S3ErrorsTest, WrongRegionNamesTheRegionAndTheFlag) {
  auto why = ExplainS3Error(ParseS3ErrorAnswer(301, "", "eu-central-1"), "LIST", Ctx());
  EXPECT_EQ(why,
            "bucket bkt is in region eu-central-1, but requests were signed for region us-east-1; "
            "set --region eu-central-1 (or s3.region, AWS_REGION)");
  why = ExplainS3Error(
      ParseS3ErrorAnswer(400, ErrorXml("AuthorizationHeaderMalformed", "x"), "eu-central-1"), "GET",
      Ctx());
  EXPECT_NE(why.find("set --region eu-central-1"), std::string::npos) << why;
  // 301 without a region: the endpoint and both fixes are named.
  why = ExplainS3Error(ParseS3ErrorAnswer(301, ErrorXml("PermanentRedirect", "x"), ""), "LIST",
                       Ctx());
  EXPECT_NE(why.find("not served at endpoint https://s3.us-east-1.amazonaws.com"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("--region"), std::string::npos) << why;
  EXPECT_NE(why.find("--endpoint-url"), std::string::npos) << why;
}

TEST(S3ErrorsTest, AccessDeniedNamesTheIamActions) {
  auto why = ExplainS3Error(ParseS3ErrorAnswer(403, ErrorXml("AccessDenied", "Access Denied"), ""),
                            "LIST", Ctx());
  EXPECT_NE(why.find("s3:ListBucket on arn:aws:s3:::bkt and s3:GetObject on "
                     "arn:aws:s3:::bkt/data/*"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("key id AKIDEXAMPLE (from environment)"), std::string::npos) << why;
  why = ExplainS3Error(ParseS3ErrorAnswer(403, ErrorXml("AccessDenied", ""), ""), "PUT", Ctx());
  EXPECT_NE(why.find("s3:PutObject on arn:aws:s3:::bkt/data/*"), std::string::npos) << why;
  // A HEAD's 403 has no body: the actions and the other possible cause.
  why = ExplainS3Error(ParseS3ErrorAnswer(403, "", ""), "HEAD", Ctx());
  EXPECT_NE(why.find("s3:ListBucket"), std::string::npos) << why;
  EXPECT_NE(why.find("or the key id or its secret is wrong"), std::string::npos) << why;
  S3ErrorContext anon = Ctx();
  anon.anonymous = true;
  why = ExplainS3Error(ParseS3ErrorAnswer(403, ErrorXml("AccessDenied", ""), ""), "GET", anon);
  EXPECT_NE(why.find("anonymous access"), std::string::npos) << why;
}

TEST(S3ErrorsTest, CredentialErrorsNameTheKeyAndItsSource) {
  auto ctx = Ctx();
  auto why =
      ExplainS3Error(ParseS3ErrorAnswer(403, ErrorXml("InvalidAccessKeyId", "x"), ""), "LIST", ctx);
  EXPECT_NE(why.find("key id AKIDEXAMPLE (from environment) is not known to endpoint"),
            std::string::npos)
      << why;
  why = ExplainS3Error(ParseS3ErrorAnswer(403, ErrorXml("SignatureDoesNotMatch", "x"), ""), "GET",
                       ctx);
  EXPECT_NE(why.find("the secret access key of key id AKIDEXAMPLE (from environment) is wrong"),
            std::string::npos)
      << why;
  why = ExplainS3Error(ParseS3ErrorAnswer(400, ErrorXml("ExpiredToken", "x"), ""), "GET", ctx);
  EXPECT_NE(why.find("the session token of key id AKIDEXAMPLE (from environment) has expired"),
            std::string::npos)
      << why;
  why = ExplainS3Error(ParseS3ErrorAnswer(403, ErrorXml("RequestTimeTooSkewed", "x"), ""), "GET",
                       ctx);
  EXPECT_NE(why.find("clock"), std::string::npos) << why;
}

TEST(S3ErrorsTest, UnknownBucketAndOrdinaryAnswers) {
  auto why =
      ExplainS3Error(ParseS3ErrorAnswer(404, ErrorXml("NoSuchBucket", "x"), ""), "LIST", Ctx());
  EXPECT_EQ(why,
            "bucket bkt does not exist (endpoint https://s3.us-east-1.amazonaws.com); check the "
            "bucket name of the source");
  // Nothing to add to a missing key, a throttle or a changed object.
  EXPECT_EQ(ExplainS3Error(ParseS3ErrorAnswer(404, ErrorXml("NoSuchKey", "x"), ""), "GET", Ctx()),
            "");
  EXPECT_EQ(ExplainS3Error(ParseS3ErrorAnswer(503, ErrorXml("SlowDown", "x"), ""), "GET", Ctx()),
            "");
  EXPECT_EQ(ExplainS3Error(ParseS3ErrorAnswer(412, "", ""), "GET", Ctx()), "");
}

TEST(S3ErrorsTest, AccessDeniedForcesARefreshOnlyForTemporaryCredentials) {
  // Ceph RGW answers a key deleted moments ago with AccessDenied (test_rgw_rotation.sh).
  HttpResponse r;
  r.status = 403;
  r.body = ErrorXml("AccessDenied", "x");
  EXPECT_TRUE(blobclient::IsStaleCredentialsAnswer(r, /*temporary=*/true));
  EXPECT_FALSE(blobclient::IsStaleCredentialsAnswer(r, /*temporary=*/false));
  r.body = ErrorXml("NoSuchBucket", "x");
  EXPECT_FALSE(blobclient::IsStaleCredentialsAnswer(r, /*temporary=*/true));
}

TEST(S3ErrorsTest, StatusCodeStaysAndOnlyTheMessageGrows) {
  HttpResponse r;
  r.status = 403;
  r.body = ErrorXml("SignatureDoesNotMatch", "x");
  Status st = blobclient::S3ErrorToStatus(r, "LIST data/", Ctx());
  EXPECT_EQ(st.code(), Status::Code::kPermissionDenied);
  EXPECT_TRUE(st.message().starts_with("LIST data/: HTTP 403 SignatureDoesNotMatch: the secret"))
      << st.message();
  r.status = 404;
  r.body = ErrorXml("NoSuchKey", "x");
  st = blobclient::S3ErrorToStatus(r, "GET a", Ctx());
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_EQ(st.message(), "GET a: HTTP 404 NoSuchKey");
}

// ---- end to end through NewS3BlobStore and the HTTP engine

class S3ErrorsStoreTest : public ::tierfs::testing::HttpServerTest {
 protected:
  S3Options Options() {
    S3Options o;
    o.bucket = "bkt";
    o.endpoint = server_->base_url();
    o.credentials.access_key_id = "AKIDTEST";
    o.credentials.secret_access_key = kSecret;
    o.credentials_provider =
        NewStaticCredentialsProvider(o.credentials, "profile ci of /etc/creds");
    o.backoff_base = std::chrono::milliseconds(5);
    o.backoff_max = std::chrono::milliseconds(20);
    o.request_timeout = std::chrono::milliseconds(5000);
    return o;
  }

  // A bucket in `region`: requests signed for another region get `wrong_status` (301
  // PermanentRedirect or 400 AuthorizationHeaderMalformed) with x-amz-bucket-region when
  // `send_region`, as S3 answers them; requests signed for it get an empty listing.
  testing::HttpTestHandler RegionalBucket(std::string region, int wrong_status, bool send_region) {
    return [=](const HttpTestRequest& r) {
      if (SignedRegion(r) != region) {
        HttpTestResponse resp = HttpTestResponse::Make(
            wrong_status, wrong_status == 301
                              ? ErrorXml("PermanentRedirect", "use the endpoint")
                              : ErrorXml("AuthorizationHeaderMalformed", "the region is wrong"));
        if (send_region) resp.headers.emplace_back("x-amz-bucket-region", region);
        return resp;
      }
      HttpTestResponse resp = HttpTestResponse::Make(200, r.method == "HEAD" ? "" : kEmptyList);
      resp.headers.emplace_back("x-amz-bucket-region", region);
      return resp;
    };
  }

  FakeClock clock_{1'440'938'160'000'000'000LL};  // 2015-08-30T12:36:00Z
};

TEST_F(S3ErrorsStoreTest, RegionDiscoveredFrom301AndUsedForSigning) {
  auto scoped = server_->Scoped(RegionalBucket("eu-west-2", 301, true));
  S3Options o = Options();
  o.discover_region = true;  // no region given by the user
  auto store = NewS3BlobStore(o, transport_.get(), &clock_);
  ASSERT_OK(store);
  auto page = (*store)->List("", "/", "", 1);
  ASSERT_OK(page);
  auto reqs = server_->requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "HEAD");  // HeadBucket, signed for the default region
  EXPECT_EQ(reqs[0].path, "/bkt");
  EXPECT_EQ(SignedRegion(reqs[0]), "us-east-1");
  EXPECT_EQ(reqs[1].method, "GET");  // the listing, re-signed for the bucket's region
  EXPECT_EQ(SignedRegion(reqs[1]), "eu-west-2");
}

TEST_F(S3ErrorsStoreTest, RegionDiscoveredFrom400AuthorizationHeaderMalformed) {
  auto scoped = server_->Scoped(RegionalBucket("ap-southeast-2", 400, true));
  S3Options o = Options();
  o.discover_region = true;
  auto store = NewS3BlobStore(o, transport_.get(), &clock_);
  ASSERT_OK(store);
  auto page = (*store)->List("", "/", "", 1);
  ASSERT_OK(page);
  EXPECT_EQ(SignedRegion(server_->requests().back()), "ap-southeast-2");
}

TEST_F(S3ErrorsStoreTest, RegionSetByTheUserIsNotOverriddenAndTheErrorSaysWhichToSet) {
  auto scoped = server_->Scoped(RegionalBucket("eu-west-2", 301, true));
  S3Options o = Options();  // discover_region = false: the user gave us-east-1
  auto store = NewS3BlobStore(o, transport_.get(), &clock_);
  ASSERT_OK(store);
  auto page = (*store)->List("", "/", "", 1);
  ASSERT_FALSE(page.ok());
  EXPECT_NE(page.status().message().find(
                "bucket bkt is in region eu-west-2, but requests were signed for region us-east-1; "
                "set --region eu-west-2"),
            std::string::npos)
      << page.status().ToString();
  ASSERT_EQ(server_->request_count(), 1u);  // no HeadBucket, and a 301 is not retried
}

TEST_F(S3ErrorsStoreTest, RedirectWithoutRegionIsAClearError) {
  auto scoped = server_->Scoped(RegionalBucket("eu-west-2", 301, false));
  S3Options o = Options();
  o.discover_region = true;
  auto store = NewS3BlobStore(o, transport_.get(), &clock_);
  ASSERT_OK(store);
  auto page = (*store)->List("", "/", "", 1);
  ASSERT_FALSE(page.ok());
  const std::string& m = page.status().message();
  EXPECT_NE(m.find("HTTP 301 PermanentRedirect: bucket bkt is not served at endpoint " +
                   server_->base_url() + " (region us-east-1)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("set --region"), std::string::npos) << m;
  for (const auto& r : server_->requests()) EXPECT_EQ(SignedRegion(r), "us-east-1");
}

TEST_F(S3ErrorsStoreTest, RefusedKeysNameKeyIdAndSourceNeverTheSecret) {
  for (const char* code : {"SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied"}) {
    auto scoped = server_->Scoped([code](const HttpTestRequest&) {
      return HttpTestResponse::Make(403, ErrorXml(code, "no"));
    });
    auto store = NewS3BlobStore(Options(), transport_.get(), &clock_);
    ASSERT_OK(store);
    auto page = (*store)->List("", "/", "", 1);
    ASSERT_FALSE(page.ok());
    EXPECT_EQ(page.status().code(), Status::Code::kPermissionDenied);
    const std::string& m = page.status().message();
    EXPECT_NE(m.find(code), std::string::npos) << m;
    EXPECT_NE(m.find("key id AKIDTEST (from profile ci of /etc/creds)"), std::string::npos) << m;
    EXPECT_EQ(m.find(kSecret), std::string::npos) << m;
  }
}

TEST_F(S3ErrorsStoreTest, NoSuchBucketNamesBucketAndEndpoint) {
  auto scoped = server_->Scoped([](const HttpTestRequest&) {
    return HttpTestResponse::Make(404, ErrorXml("NoSuchBucket", "The specified bucket does not"));
  });
  auto store = NewS3BlobStore(Options(), transport_.get(), &clock_);
  ASSERT_OK(store);
  auto page = (*store)->List("", "/", "", 1);
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), Status::Code::kNotFound);
  EXPECT_NE(page.status().message().find("bucket bkt does not exist (endpoint " +
                                         server_->base_url() + ")"),
            std::string::npos)
      << page.status().ToString();
}

TEST_F(S3ErrorsStoreTest, ReadErrorsAreExplainedToo) {
  auto scoped = server_->Scoped([](const HttpTestRequest&) {
    return HttpTestResponse::Make(400, ErrorXml("ExpiredToken", "The provided token has expired."));
  });
  auto store = NewS3BlobStore(Options(), transport_.get(), &clock_);
  ASSERT_OK(store);
  std::vector<std::byte> buf(10);
  auto got = (*store)->Read("a.bin", 0, buf, "");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("the session token of key id AKIDTEST"), std::string::npos)
      << got.status().ToString();
}

TEST_F(S3ErrorsStoreTest, EveryRequestCarriesTheUserAgent) {
  auto scoped = server_->Scoped([](const HttpTestRequest& r) {
    if (r.method == "HEAD") {
      HttpTestResponse resp = HttpTestResponse::Make(200, "12345");
      resp.headers.emplace_back("ETag", "\"e\"");
      return resp;
    }
    if (r.query.find("list-type") != std::string::npos)
      return HttpTestResponse::Make(200, kEmptyList);
    return HttpTestServer::ServeObject(r, "0123456789", "e");
  });
  S3Options o = Options();
  o.discover_region = true;
  auto store = NewS3BlobStore(o, transport_.get(), &clock_);
  ASSERT_OK(store);
  ASSERT_OK((*store)->Head("k"));
  ASSERT_OK((*store)->List("", "/", "", 1));
  std::vector<std::byte> buf(4);
  ASSERT_OK((*store)->Read("k", 2, buf, ""));
  const std::string want = "tierfs/" + std::string(Version());
  EXPECT_EQ(blobclient::UserAgent(), want);
  EXPECT_FALSE(Version().empty());
  auto reqs = server_->requests();
  ASSERT_EQ(reqs.size(), 4u);  // HeadBucket, HEAD, LIST, GET
  for (const auto& r : reqs) {
    ASSERT_NE(r.Header("user-agent"), nullptr) << r.method << " " << r.target;
    EXPECT_EQ(*r.Header("user-agent"), want);
  }
}

TEST_F(S3ErrorsStoreTest, CaBundleDoesNotBreakPlainHttp) {
  // AWS_CA_BUNDLE set for the host, pointing at a file that does not exist: plain http works.
  auto scoped = server_->Scoped(
      [](const HttpTestRequest&) { return HttpTestResponse::Make(200, kEmptyList); });
  S3Options o = Options();
  o.ca_bundle = "/nonexistent/tierfs-test-ca.pem";
  auto store = NewS3BlobStore(o, transport_.get(), &clock_);
  ASSERT_OK(store);
  auto page = (*store)->List("", "/", "", 1);
  EXPECT_OK(page);
}

}  // namespace
}  // namespace tierfs
