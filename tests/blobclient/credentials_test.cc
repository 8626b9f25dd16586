// The AWS credential chain (NewCredentialChain) and its refreshing provider, each source against a
// fake of the real service on 127.0.0.1 speaking the real wire format (C19): IMDSv2 with its token
// dance, STS AssumeRole / AssumeRoleWithWebIdentity XML, the container endpoint's JSON,
// credential_process JSON from a script; the shared files; the chain order; refresh timing with a
// FakeClock; the S3 store's forced refresh on a 403 ExpiredToken.
#include "blobclient/credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "base/clock.h"
#include "blobclient/blob_store.h"
#include "blobclient/sigv4.h"
#include "tests/blobclient/test_util.h"
#include "tests/fakes/http_test_server.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs {
namespace {

namespace fs = std::filesystem;
using testing::Eventually;
using testing::HttpTestRequest;
using testing::HttpTestResponse;
using testing::HttpTestServer;

constexpr int64_t kSec = 1'000'000'000LL;

std::string Iso(int64_t unix_ns) {
  const time_t t = static_cast<time_t>(unix_ns / kSec);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string CredsJson(const std::string& id, int64_t expires_ns, bool imds = false) {
  std::string j = "{";
  if (imds)
    j += R"("Code": "Success", "LastUpdated": "2023-11-14T22:00:00Z", "Type": "AWS-HMAC", )";
  j += R"("AccessKeyId": ")" + id + R"(", "SecretAccessKey": "secret-)" + id +
       R"(", "Token": "token-)" + id + R"(", "Expiration": ")" + Iso(expires_ns) + "\"}";
  return j;
}

std::string StsXml(const std::string& action, const std::string& id, int64_t expires_ns) {
  return "<" + action + "Response xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n  <" +
         action + "Result>\n    <Credentials>\n      <AccessKeyId>" + id +
         "</AccessKeyId>\n      <SecretAccessKey>secret-" + id +
         "</SecretAccessKey>\n      <SessionToken>token-" + id +
         "</SessionToken>\n      <Expiration>" + Iso(expires_ns) +
         "</Expiration>\n    </Credentials>\n    "
         "<AssumedRoleUser><Arn>arn:aws:sts::1:assumed-role/r/s"
         "</Arn></AssumedRoleUser>\n  </" +
         action + "Result>\n  <ResponseMetadata><RequestId>r1</RequestId></ResponseMetadata>\n</" +
         action + "Response>\n";
}

std::string StsError(const std::string& code, const std::string& message) {
  return "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n  <Error>\n    "
         "<Type>Sender</Type>\n    <Code>" +
         code + "</Code>\n    <Message>" + message +
         "</Message>\n  </Error>\n  <RequestId>r2</RequestId>\n</ErrorResponse>\n";
}

// Form body → map (the STS fake decodes what the client sent).
std::map<std::string, std::string> Form(const std::string& body) {
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at <= body.size()) {
    size_t amp = body.find('&', at);
    std::string kv = body.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) {
      out[blobclient::UriDecode(kv.substr(0, eq), true)] =
          blobclient::UriDecode(kv.substr(eq + 1), true);
    }
    if (amp == std::string::npos) break;
    at = amp + 1;
  }
  return out;
}

class CredentialChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path();
    env_["HOME"] = dir_;
    env_["AWS_EC2_METADATA_DISABLED"] = "true";
    auto t = NewHttpTransport(HttpTransportOptions{});
    ASSERT_OK(t);
    transport_ = std::move(*t);
    auto s = HttpTestServer::Start();
    ASSERT_OK(s);
    server_ = std::move(*s);
  }
  void TearDown() override { server_.reset(); }

  void Write(const fs::path& p, const std::string& text, bool exec = false) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    if (exec) ::chmod(p.c_str(), 0700);
  }

  CredentialChainOptions Options(Clock* clock = nullptr) {
    CredentialChainOptions o;
    std::map<std::string, std::string> env = env_;
    o.getenv = [env](const char* name) -> std::optional<std::string> {
      auto it = env.find(name);
      if (it == env.end()) return std::nullopt;
      return it->second;
    };
    o.transport = transport_.get();
    o.clock = clock != nullptr ? clock : &clock_;
    o.imds_timeout = std::chrono::milliseconds(500);
    o.http_timeout = std::chrono::milliseconds(3000);
    o.process_timeout = std::chrono::milliseconds(5000);
    return o;
  }

  Result<CredentialChain> Chain(const std::string& profile = "", bool explicit_profile = false) {
    CredentialChainOptions o = Options();
    o.profile = profile;
    o.profile_explicit = explicit_profile;
    return NewCredentialChain(o);
  }

  static std::shared_ptr<const Credentials> Now(const CredentialChain& c) {
    auto r = c.provider->Current();
    EXPECT_OK(r);
    return r.ok() ? *r : std::make_shared<const Credentials>();
  }

  ::tierfs::testing::TempDir tmp_;
  std::string dir_;
  std::map<std::string, std::string> env_;
  FakeClock clock_;  // 2023-11-14T22:13:20Z
  std::unique_ptr<HttpTransport> transport_;
  std::unique_ptr<HttpTestServer> server_;
};

// ---- Files ----

TEST(IniTest, ParsesTheAwsFileDialect) {
  blobclient::IniSections s = blobclient::ParseIni(
      "# comment\n; other comment\n[default]\nAWS_Access_Key_Id = AK  \r\n"
      "aws_secret_access_key=se#cret ; trailing comment\n"
      "[profile work]\nregion = eu-west-3\ns3 =\n  max_concurrent_requests = 20\n"
      "role_arn = arn:aws:iam::1:role/r\n");
  EXPECT_EQ(s["default"]["aws_access_key_id"], "AK");
  EXPECT_EQ(s["default"]["aws_secret_access_key"], "se#cret");
  EXPECT_EQ(s["profile work"]["region"], "eu-west-3");
  EXPECT_EQ(s["profile work"]["s3.max_concurrent_requests"], "20");
  EXPECT_EQ(s["profile work"]["role_arn"], "arn:aws:iam::1:role/r");
}

TEST_F(CredentialChainTest, NothingConfiguredListsWhatWasTried) {
  auto c = Chain();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kNotFound);
  const std::string& m = c.status().message();
  for (const char* s :
       {"AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "profile default", ".aws/credentials",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_EC2_METADATA_DISABLED"}) {
    EXPECT_NE(m.find(s), std::string::npos) << s << " in " << m;
  }
}

TEST_F(CredentialChainTest, EnvironmentKeysAreStatic) {
  env_["AWS_ACCESS_KEY_ID"] = "AKENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "secretenv";
  env_["AWS_SESSION_TOKEN"] = "tokenenv";
  auto c = Chain();
  ASSERT_OK(c);
  EXPECT_FALSE(c->provider->temporary());
  EXPECT_EQ(Now(*c)->access_key_id, "AKENV");
  EXPECT_EQ(Now(*c)->session_token, "tokenenv");
  EXPECT_NE(c->provider->source().find("environment"), std::string::npos);
  env_.erase("AWS_SECRET_ACCESS_KEY");
  auto half = Chain();
  EXPECT_EQ(half.status().code(), Status::Code::kInvalidArgument);
}

TEST_F(CredentialChainTest, SharedFilesProfilesAndRegion) {
  Write(fs::path(dir_) / ".aws/credentials",
        "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = sdef\n"
        "[work]\naws_access_key_id=AKWORK\naws_secret_access_key=swork\naws_session_token=twork\n"
        "[broken]\naws_access_key_id = only-the-id\n");
  Write(fs::path(dir_) / ".aws/config",
        "[default]\nregion = us-west-2\n[profile work]\nregion = eu-central-1\n"
        "[profile cfgonly]\naws_access_key_id = AKCFG\naws_secret_access_key = scfg\n");
  auto d = Chain();
  ASSERT_OK(d);
  EXPECT_EQ(Now(*d)->access_key_id, "AKDEF");
  EXPECT_EQ(d->profile_region, "us-west-2");

  env_["AWS_PROFILE"] = "work";
  auto w = Chain();
  ASSERT_OK(w);
  EXPECT_EQ(Now(*w)->access_key_id, "AKWORK");
  EXPECT_EQ(Now(*w)->session_token, "twork");
  EXPECT_EQ(w->profile_region, "eu-central-1");
  EXPECT_NE(w->provider->source().find("profile work"), std::string::npos);

  auto cfg = Chain("cfgonly", true);  // keys in the config file count too
  ASSERT_OK(cfg);
  EXPECT_EQ(Now(*cfg)->access_key_id, "AKCFG");

  // An explicit profile beats the environment keys; an implicit one does not.
  env_["AWS_ACCESS_KEY_ID"] = "AKENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "senv";
  EXPECT_EQ(Now(*Chain("work", true))->access_key_id, "AKWORK");
  EXPECT_EQ(Now(*Chain())->access_key_id, "AKENV");

  auto missing = Chain("nope", true);
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find("profile nope"), std::string::npos);
  auto broken = Chain("broken", true);
  EXPECT_EQ(broken.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(broken.status().message().find("only-the-id"), std::string::npos);  // no secrets
}

TEST_F(CredentialChainTest, FileVariablesAndNoHome) {
  Write(fs::path(dir_) / "etc/creds",
        "[default]\naws_access_key_id = AKVAR\naws_secret_access_key = s\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = dir_ + "/etc/creds";
  EXPECT_EQ(Now(*Chain())->access_key_id, "AKVAR");
  env_.erase("AWS_SHARED_CREDENTIALS_FILE");

  // systemd, boot: no HOME; the passwd entry's home directory is used.
  Write(fs::path(dir_) / "pwhome/.aws/credentials",
        "[default]\naws_access_key_id = AKPW\naws_secret_access_key = s\n");
  env_.erase("HOME");
  CredentialChainOptions o = Options();
  const std::string pwhome = dir_ + "/pwhome";
  o.passwd_home = [pwhome]() -> std::optional<std::string> { return pwhome; };
  auto c = NewCredentialChain(o);
  ASSERT_OK(c);
  EXPECT_EQ(Now(*c)->access_key_id, "AKPW");
}

// ---- credential_process ----

TEST_F(CredentialChainTest, CredentialProcessJsonWithAndWithoutExpiration) {
  const std::string script = dir_ + "/bin/creds.sh";
  Write(
      script,
      "#!/bin/sh\n[ \"$1\" = arg ] || exit 3\necho '{\"Version\": 1, \"AccessKeyId\": \"AKPROC\", "
      "\"SecretAccessKey\": \"sproc\", \"SessionToken\": \"tproc\", \"Expiration\": "
      "\"2099-01-01T00:00:00Z\"}'\n",
      true);
  const std::string plain = dir_ + "/bin/plain.sh";
  Write(plain,
        "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"AKPLAIN\", \"SecretAccessKey\": "
        "\"splain\"}'\n",
        true);
  Write(fs::path(dir_) / ".aws/config", "[default]\ncredential_process = " + script +
                                            " arg\n[profile plain]\ncredential_process = " + plain +
                                            "\n");
  auto c = Chain();
  ASSERT_OK(c);
  EXPECT_TRUE(c->provider->temporary());
  EXPECT_EQ(Now(*c)->access_key_id, "AKPROC");
  EXPECT_EQ(Now(*c)->session_token, "tproc");
  EXPECT_NE(c->provider->source().find("credential_process '" + script + "'"), std::string::npos);
  auto p = Chain("plain", true);
  ASSERT_OK(p);
  EXPECT_FALSE(p->provider->temporary());  // no Expiration: never refreshed (as the SDKs do)
  EXPECT_EQ(Now(*p)->access_key_id, "AKPLAIN");
}

TEST_F(CredentialChainTest, CredentialProcessFailuresNameTheCause) {
  const std::string fail = dir_ + "/bin/fail.sh";
  Write(fail, "#!/bin/sh\necho 'token expired, run login' >&2\nexit 1\n", true);
  const std::string slow = dir_ + "/bin/slow.sh";
  Write(slow, "#!/bin/sh\nsleep 30\n", true);
  const std::string bad = dir_ + "/bin/bad.sh";
  Write(
      bad,
      "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"AK\", \"SecretAccessKey\": \"leak\"'\n",
      true);
  const std::string big = dir_ + "/bin/big.sh";
  Write(big, "#!/bin/sh\nhead -c 1000000 /dev/zero\n", true);
  Write(fs::path(dir_) / ".aws/config", "[profile fail]\ncredential_process = " + fail +
                                            " --secret-arg\n[profile slow]\n"
                                            "credential_process = " +
                                            slow + "\n[profile bad]\ncredential_process = " + bad +
                                            "\n[profile big]\ncredential_process = " + big + "\n");
  auto f = Chain("fail", true);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("credential_process '" + fail +
                                      "' exited 1: token expired, run login"),
            std::string::npos)
      << f.status().ToString();
  EXPECT_EQ(f.status().message().find("--secret-arg"), std::string::npos);

  CredentialChainOptions o = Options();
  o.profile = "slow";
  o.profile_explicit = true;
  o.process_timeout = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  auto s = NewCredentialChain(o);
  EXPECT_EQ(s.status().code(), Status::Code::kTimedOut) << s.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));

  auto b = Chain("bad", true);
  EXPECT_EQ(b.status().code(), Status::Code::kCorruption) << b.status().ToString();
  EXPECT_EQ(b.status().message().find("leak"), std::string::npos);
  auto g = Chain("big", true);
  EXPECT_EQ(g.status().code(), Status::Code::kCorruption) << g.status().ToString();
  EXPECT_NE(g.status().message().find("larger than"), std::string::npos);
}

// ---- STS ----

TEST(StsParseTest, AnswersAndErrors) {
  auto ok = blobclient::ParseStsAnswer(200, StsXml("AssumeRole", "ASIA1", 2 * kSec), "AssumeRole");
  ASSERT_OK(ok);
  EXPECT_EQ(ok->credentials.access_key_id, "ASIA1");
  EXPECT_EQ(ok->credentials.session_token, "token-ASIA1");
  EXPECT_EQ(*ok->expiration_unix_ns, 2 * kSec);
  auto denied = blobclient::ParseStsAnswer(
      403, StsError("AccessDenied", "not authorized to perform sts:AssumeRole"),
      "AssumeRoleWithWebIdentity");
  EXPECT_EQ(denied.status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(denied.status().message(),
            "STS AssumeRoleWithWebIdentity: AccessDenied: not authorized to perform "
            "sts:AssumeRole");
  EXPECT_EQ(blobclient::ParseStsAnswer(503, "", "AssumeRole").status().code(),
            Status::Code::kUnavailable);
  EXPECT_EQ(blobclient::ParseStsAnswer(200, "<x/>", "AssumeRole").status().code(),
            Status::Code::kCorruption);
}

TEST_F(CredentialChainTest, WebIdentityFromTheEnvironment) {
  std::atomic<int> calls{0};
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    ++calls;
    auto f = Form(req.body);
    if (req.method != "POST" || f["Action"] != "AssumeRoleWithWebIdentity" ||
        req.HasHeader("authorization")) {
      return HttpTestResponse::Make(400, StsError("InvalidAction", "bad request"));
    }
    if (f["WebIdentityToken"] != "jwt-1" || f["RoleArn"] != "arn:aws:iam::123:role/train" ||
        f["RoleSessionName"] != "sess") {
      return HttpTestResponse::Make(403, StsError("AccessDenied", "wrong role or token"));
    }
    return HttpTestResponse::Make(
        200, StsXml("AssumeRoleWithWebIdentity", "ASIAWEB", clock_.NowUnixNanos() + 3600 * kSec));
  });
  Write(fs::path(dir_) / "token", "jwt-1\n");
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = dir_ + "/token";
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::123:role/train";
  env_["AWS_ROLE_SESSION_NAME"] = "sess";
  env_["AWS_ENDPOINT_URL_STS"] = server_->base_url();
  // A profile with keys is configured too: web identity comes first.
  Write(fs::path(dir_) / ".aws/credentials",
        "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = s\n");
  auto c = Chain();
  ASSERT_OK(c);
  EXPECT_TRUE(c->provider->temporary());
  EXPECT_EQ(Now(*c)->access_key_id, "ASIAWEB");
  EXPECT_EQ(c->provider->Stats().expiration_unix_ns, clock_.NowUnixNanos() + 3600 * kSec);
  EXPECT_EQ(server_->requests().back().Header("content-type")->substr(0, 33),
            "application/x-www-form-urlencoded");

  env_["AWS_ROLE_ARN"] = "arn:aws:iam::123:role/other";
  auto denied = Chain();
  ASSERT_FALSE(denied.ok());
  EXPECT_NE(denied.status().message().find(
                "STS AssumeRoleWithWebIdentity: AccessDenied: wrong role or token"),
            std::string::npos)
      << denied.status().ToString();
  EXPECT_EQ(denied.status().message().find("jwt-1"), std::string::npos);
}

// Retried is what the answer's Status calls retryable, decided where it is made: STS Throttling
// (an HTTP 400), a 429 or a 5xx once, a 400 of another kind never.
TEST_F(CredentialChainTest, ServicesRetryWhatTheirAnswersCallRetryable) {
  std::atomic<int> sts_calls{0};
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    if (req.path == "/container") {
      return HttpTestResponse::Make(400, R"({"Message": "malformed"})");
    }
    if (req.path == "/busy-container" && ++sts_calls % 2 == 1) {
      return HttpTestResponse::Make(429, R"({"Message": "slow down"})");
    }
    if (req.path == "/busy-container") {
      return HttpTestResponse::Make(200,
                                    CredsJson("ASIABUSY", clock_.NowUnixNanos() + 3600 * kSec));
    }
    if (++sts_calls == 1) {
      return HttpTestResponse::Make(400, StsError("Throttling", "Rate exceeded"));
    }
    return HttpTestResponse::Make(
        200, StsXml("AssumeRoleWithWebIdentity", "ASIAWEB", clock_.NowUnixNanos() + 3600 * kSec));
  });
  Write(fs::path(dir_) / "token", "jwt-1\n");
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = dir_ + "/token";
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::123:role/train";
  env_["AWS_ENDPOINT_URL_STS"] = server_->base_url();
  auto sts = Chain();
  ASSERT_OK(sts);
  EXPECT_EQ(Now(*sts)->access_key_id, "ASIAWEB");
  EXPECT_EQ(sts_calls.load(), 2);

  env_.erase("AWS_WEB_IDENTITY_TOKEN_FILE");
  env_.erase("AWS_ROLE_ARN");
  server_->ClearRequests();
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = server_->base_url() + "/container";
  EXPECT_FALSE(Chain().ok());
  EXPECT_EQ(server_->request_count(), 1u);

  sts_calls = 0;
  server_->ClearRequests();
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = server_->base_url() + "/busy-container";
  auto busy = Chain();
  ASSERT_OK(busy);
  EXPECT_EQ(Now(*busy)->access_key_id, "ASIABUSY");
  EXPECT_EQ(server_->request_count(), 2u);
}

TEST_F(CredentialChainTest, AssumeRoleViaSourceProfileIsSignedWithTheSourceKeys) {
  std::vector<std::string> roles;
  Mutex mu;
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    auto f = Form(req.body);
    const std::string* auth = req.Header("authorization");
    if (f["Action"] != "AssumeRole" || auth == nullptr) {
      return HttpTestResponse::Make(403, StsError("MissingAuthenticationToken", "unsigned"));
    }
    {
      MutexLock l(&mu);
      roles.push_back(f["RoleArn"] + " by " + auth->substr(0, auth->find('/')) + " ext " +
                      f["ExternalId"] + " dur " + f["DurationSeconds"]);
    }
    if (f["RoleArn"] == "arn:aws:iam::1:role/denied") {
      return HttpTestResponse::Make(403, StsError("AccessDenied", "User is not authorized"));
    }
    std::string id = f["RoleArn"] == "arn:aws:iam::1:role/outer" ? "ASIAOUTER" : "ASIAINNER";
    return HttpTestResponse::Make(200,
                                  StsXml("AssumeRole", id, clock_.NowUnixNanos() + 900 * kSec));
  });
  env_["AWS_ENDPOINT_URL"] = server_->base_url();
  Write(fs::path(dir_) / ".aws/credentials",
        "[base]\naws_access_key_id = AKBASE\naws_secret_access_key = sbase\n");
  Write(fs::path(dir_) / ".aws/config",
        "[profile inner]\nrole_arn = arn:aws:iam::1:role/inner\nsource_profile = base\n"
        "external_id = ext-7\nduration_seconds = 1800\n"
        "[profile outer]\nrole_arn = arn:aws:iam::1:role/outer\nsource_profile = inner\n"
        "[profile denied]\nrole_arn = arn:aws:iam::1:role/denied\nsource_profile = base\n"
        "[profile a]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = b\n"
        "[profile b]\nrole_arn = arn:aws:iam::1:role/b\nsource_profile = a\n"
        "[profile norole]\nrole_arn = arn:aws:iam::1:role/x\n");
  auto outer = Chain("outer", true);
  ASSERT_OK(outer);
  EXPECT_EQ(Now(*outer)->access_key_id, "ASIAOUTER");
  {
    MutexLock l(&mu);
    ASSERT_EQ(roles.size(), 2u);
    // inner is assumed with the base keys, outer with inner's temporary keys.
    EXPECT_EQ(roles[0],
              "arn:aws:iam::1:role/inner by AWS4-HMAC-SHA256 Credential=AKBASE ext ext-7 dur 1800");
    EXPECT_EQ(roles[1],
              "arn:aws:iam::1:role/outer by AWS4-HMAC-SHA256 Credential=ASIAINNER ext  dur ");
  }
  // The signed request carries the source's session token.
  EXPECT_EQ(*server_->requests().back().Header("x-amz-security-token"), "token-ASIAINNER");

  auto denied = Chain("denied", true);
  EXPECT_NE(denied.status().message().find("STS AssumeRole: AccessDenied: User is not authorized"),
            std::string::npos)
      << denied.status().ToString();
  auto cycle = Chain("a", true);
  EXPECT_EQ(cycle.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(cycle.status().message().find("cycle: a -> b -> a"), std::string::npos)
      << cycle.status().ToString();
  auto norole = Chain("norole", true);
  EXPECT_NE(norole.status().message().find("no source_profile"), std::string::npos);
}

TEST_F(CredentialChainTest, AssumeRoleSignatureVerifies) {
  // The fake recomputes the SigV4 signature from what it received, as STS does.
  std::atomic<bool> verified{false};
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    blobclient::SigningRequest s;
    s.method = req.method;
    s.host = *req.Header("host");
    s.path = "/";
    s.headers = {{"Content-Type", *req.Header("content-type")}};
    s.payload_sha256 = blobclient::Sha256Hex(req.body);
    s.add_content_sha256_header = false;
    Credentials base;
    base.access_key_id = "AKBASE";
    base.secret_access_key = "sbase";
    blobclient::SignedRequest expect =
        blobclient::SignV4(s, base, "eu-west-1", "sts", clock_.Now());
    std::string want;
    for (auto& [k, v] : expect.headers) {
      if (k == "Authorization") want = v;
    }
    if (want != *req.Header("authorization")) {
      return HttpTestResponse::Make(403, StsError("SignatureDoesNotMatch", "bad signature"));
    }
    verified = true;
    return HttpTestResponse::Make(
        200, StsXml("AssumeRole", "ASIAOK", clock_.NowUnixNanos() + 3600 * kSec));
  });
  env_["AWS_ENDPOINT_URL_STS"] = server_->base_url();
  env_["AWS_REGION"] = "eu-west-1";
  Write(fs::path(dir_) / ".aws/config",
        "[default]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\n"
        "[profile base]\naws_access_key_id = AKBASE\naws_secret_access_key = sbase\n");
  auto c = Chain();
  ASSERT_OK(c);
  EXPECT_TRUE(verified.load());
  EXPECT_EQ(Now(*c)->access_key_id, "ASIAOK");
}

// ---- Container ----

TEST_F(CredentialChainTest, ContainerEndpointWithTokenAndTokenFile) {
  std::atomic<int> calls{0};
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    const std::string* auth = req.Header("authorization");
    if (req.path != "/v2/credentials" || auth == nullptr ||
        (*auth != "tok-env" && *auth != "tok-file-1" && *auth != "tok-file-2")) {
      return HttpTestResponse::Make(401, R"({"Message": "bad token"})");
    }
    int n = ++calls;
    return HttpTestResponse::Make(200, CredsJson("ASIACT" + std::to_string(n) + "-" + *auth,
                                                 clock_.NowUnixNanos() + 6 * 3600 * kSec));
  });
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = server_->base_url() + "/v2/credentials";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "tok-env";
  auto c = Chain();
  ASSERT_OK(c);
  EXPECT_EQ(Now(*c)->access_key_id, "ASIACT1-tok-env");
  EXPECT_EQ(Now(*c)->session_token, "token-ASIACT1-tok-env");

  // The token file wins and is read again on every fetch (EKS Pod Identity rotates it).
  Write(fs::path(dir_) / "eks-token", "tok-file-1\n");
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = dir_ + "/eks-token";
  auto f = Chain();
  ASSERT_OK(f);
  auto first = Now(*f);
  EXPECT_EQ(first->access_key_id, "ASIACT2-tok-file-1");
  Write(fs::path(dir_) / "eks-token", "tok-file-2\n");
  ASSERT_TRUE(f->provider->ForceRefresh(first));
  EXPECT_EQ(Now(*f)->access_key_id, "ASIACT3-tok-file-2");

  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = dir_ + "/nothing-here";
  auto missing = Chain();
  EXPECT_NE(missing.status().message().find("nothing-here"), std::string::npos);

  env_.erase("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "wrong";
  auto denied = Chain();
  EXPECT_EQ(denied.status().code(), Status::Code::kPermissionDenied) << denied.status().ToString();
  EXPECT_NE(denied.status().message().find("container credentials"), std::string::npos);

  // Plain http only to loopback or the ECS/EKS addresses.
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://203.0.113.9/creds";
  EXPECT_EQ(Chain().status().code(), Status::Code::kInvalidArgument);
  EXPECT_OK(blobclient::CheckContainerUrl("http://169.254.170.23/v1/credentials"));
  EXPECT_OK(blobclient::CheckContainerUrl("https://creds.example.com/x"));
}

// ---- IMDSv2 ----

// A fake IMDS with the real token dance: PUT /latest/api/token with a TTL header gives a token;
// every metadata GET without a valid token is 401.
class FakeImds {
 public:
  explicit FakeImds(FakeClock* clock) : clock_(clock) {}
  HttpTestResponse Handle(const HttpTestRequest& req) {
    if (req.path == "/latest/api/token") {
      if (req.method != "PUT") return HttpTestResponse::Make(405);
      if (!req.HasHeader("x-aws-ec2-metadata-token-ttl-seconds"))
        return HttpTestResponse::Make(400);
      ++tokens;
      return HttpTestResponse::Make(200, "AQAEAtoken" + std::to_string(tokens.load()));
    }
    const std::string* tok = req.Header("x-aws-ec2-metadata-token");
    if (tok == nullptr || !tok->starts_with("AQAEAtoken")) return HttpTestResponse::Make(401);
    const std::string base = "/latest/meta-data/iam/security-credentials/";
    if (req.path == base) {
      if (role.empty()) return HttpTestResponse::Make(404);
      return HttpTestResponse::Make(200, role + "\n");
    }
    if (req.path == base + role) {
      int n = ++fetches;
      return HttpTestResponse::Make(200, CredsJson("ASIAIMDS" + std::to_string(n),
                                                   clock_->NowUnixNanos() + life_s * kSec, true));
    }
    return HttpTestResponse::Make(404);
  }
  FakeClock* clock_;
  std::string role = "gpu-node";
  int64_t life_s = 6 * 3600;
  std::atomic<int> tokens{0}, fetches{0};
};

TEST_F(CredentialChainTest, ImdsV2TokenDanceAndRole) {
  FakeImds imds(&clock_);
  auto h = server_->Scoped([&](const HttpTestRequest& req) { return imds.Handle(req); });
  env_.erase("AWS_EC2_METADATA_DISABLED");
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = server_->base_url() + "/";
  auto c = Chain();
  ASSERT_OK(c);
  EXPECT_TRUE(c->provider->temporary());
  EXPECT_EQ(Now(*c)->access_key_id, "ASIAIMDS1");
  EXPECT_NE(c->provider->source().find("role gpu-node"), std::string::npos);
  auto reqs = server_->requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].method, "PUT");
  EXPECT_EQ(*reqs[0].Header("x-aws-ec2-metadata-token-ttl-seconds"), "21600");
  EXPECT_EQ(*reqs[2].Header("x-aws-ec2-metadata-token"), "AQAEAtoken1");

  // A GET without the token is refused by the fake (what IMDSv2-only instances do).
  server_->ClearRequests();
  imds.role.clear();
  auto none = Chain();
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("IMDS: no role attached"), std::string::npos)
      << none.status().ToString();
  EXPECT_NE(none.status().message().find("tried:"), std::string::npos);

  // Disabled: never asked.
  server_->ClearRequests();
  env_["AWS_EC2_METADATA_DISABLED"] = "true";
  EXPECT_EQ(Chain().status().code(), Status::Code::kNotFound);
  EXPECT_EQ(server_->request_count(), 0u);
}

TEST_F(CredentialChainTest, NoImdsAnswerIsQuick) {
  env_.erase("AWS_EC2_METADATA_DISABLED");
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:1";  // nothing listens
  const auto t0 = std::chrono::steady_clock::now();
  auto c = Chain();
  EXPECT_EQ(c.status().code(), Status::Code::kNotFound) << c.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

// ---- Order ----

TEST_F(CredentialChainTest, AHigherSourceWins) {
  FakeImds imds(&clock_);
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    if (req.path == "/creds") {
      return HttpTestResponse::Make(200,
                                    CredsJson("ASIACONT", clock_.NowUnixNanos() + 3600 * kSec));
    }
    if (req.path == "/") {
      return HttpTestResponse::Make(
          200, StsXml("AssumeRoleWithWebIdentity", "ASIAWEB", clock_.NowUnixNanos() + 3600 * kSec));
    }
    return imds.Handle(req);
  });
  env_.erase("AWS_EC2_METADATA_DISABLED");
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = server_->base_url();
  env_["AWS_ENDPOINT_URL_STS"] = server_->base_url();
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = server_->base_url() + "/creds";
  Write(fs::path(dir_) / "token", "jwt");
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = dir_ + "/token";
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::1:role/r";
  env_["AWS_ACCESS_KEY_ID"] = "AKENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "s";
  Write(fs::path(dir_) / ".aws/credentials",
        "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = s\n");
  std::vector<std::string> order;
  for (int i = 0; i < 5; ++i) {
    auto c = Chain();
    ASSERT_OK(c) << i;
    order.push_back(Now(*c)->access_key_id);
    if (i == 0) env_.erase("AWS_ACCESS_KEY_ID"), env_.erase("AWS_SECRET_ACCESS_KEY");
    if (i == 1) env_.erase("AWS_WEB_IDENTITY_TOKEN_FILE"), env_.erase("AWS_ROLE_ARN");
    if (i == 2) fs::remove(fs::path(dir_) / ".aws/credentials");
    if (i == 3) env_.erase("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"AKENV", "ASIAWEB", "AKFILE", "ASIACONT", "ASIAIMDS1"}));
}

// ---- Refresh ----

TEST(RefreshRuleTest, HalfLifeOrFiveMinutes) {
  EXPECT_EQ(blobclient::RefreshAtUnixNanos(0, 3600 * kSec), 3300 * kSec);  // 1 h: 5 min before
  EXPECT_EQ(blobclient::RefreshAtUnixNanos(0, 240 * kSec), 120 * kSec);    // 4 min: at half
  EXPECT_EQ(blobclient::RefreshAtUnixNanos(100 * kSec, 100 * kSec), 100 * kSec);
}

TEST_F(CredentialChainTest, RefreshedAtTheRuleTimeAndKeptOnFailure) {
  FakeImds imds(&clock_);
  std::atomic<bool> broken{false};
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    if (broken.load() && req.path.find("security-credentials/gpu") != std::string::npos) {
      return HttpTestResponse::Make(500);
    }
    return imds.Handle(req);
  });
  env_.erase("AWS_EC2_METADATA_DISABLED");
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = server_->base_url();
  auto c = Chain();
  ASSERT_OK(c);
  const int64_t start = clock_.NowUnixNanos();
  const int64_t expires = start + 6 * 3600 * kSec;
  EXPECT_EQ(c->provider->Stats().expiration_unix_ns, expires);

  // Not before E - 5 min.
  clock_.Advance(std::chrono::seconds(6 * 3600 - 301));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // a window: no refresh in it
  EXPECT_EQ(imds.fetches.load(), 1);
  EXPECT_EQ(Now(*c)->access_key_id, "ASIAIMDS1");
  // Then promptly.
  clock_.Advance(std::chrono::seconds(2));
  ASSERT_TRUE(Eventually([&] { return imds.fetches.load() == 2; }));
  ASSERT_TRUE(Eventually([&] { return Now(*c)->access_key_id == "ASIAIMDS2"; }));
  EXPECT_EQ(c->provider->Stats().refreshes, 1u);

  // The next refresh fails: the old credentials stay in use while valid, retries go on.
  broken = true;
  clock_.Advance(std::chrono::seconds(6 * 3600 - 250));  // past the next refresh time
  ASSERT_TRUE(Eventually([&] { return c->provider->Stats().refresh_failures >= 1; }));
  EXPECT_EQ(Now(*c)->access_key_id, "ASIAIMDS2");
  clock_.Advance(std::chrono::seconds(5));  // a retry is due within its backoff (<= 1..4 s)
  ASSERT_TRUE(Eventually([&] { return c->provider->Stats().refresh_failures >= 2; }));
  EXPECT_EQ(Now(*c)->access_key_id, "ASIAIMDS2");

  // Once they expire and the service still fails: a bounded wait, then a clear error.
  clock_.Advance(std::chrono::seconds(400));
  auto expired = c->provider->Current();
  ASSERT_FALSE(expired.ok());
  EXPECT_EQ(expired.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(expired.status().message().find("could not be refreshed"), std::string::npos)
      << expired.status().ToString();

  // The service comes back: the next Current() gets fresh credentials.
  broken = false;
  auto back = c->provider->Current();
  ASSERT_OK(back);
  EXPECT_NE((*back)->access_key_id, "ASIAIMDS2");
}

TEST_F(CredentialChainTest, ASlowRefreshDoesNotStallSigning) {
  FakeImds imds(&clock_);
  std::atomic<bool> slow{false};
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    HttpTestResponse r = imds.Handle(req);
    if (slow.load() && req.path.find("security-credentials/gpu") != std::string::npos) {
      r.stall_after_bytes = 0;
      r.stall_for = std::chrono::milliseconds(3000);
    }
    return r;
  });
  env_.erase("AWS_EC2_METADATA_DISABLED");
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = server_->base_url();
  CredentialChainOptions o = Options();
  o.imds_timeout = std::chrono::milliseconds(5000);
  auto c = NewCredentialChain(o);
  ASSERT_OK(c);
  slow = true;
  clock_.Advance(std::chrono::seconds(6 * 3600 - 200));
  ASSERT_TRUE(Eventually([&] { return imds.fetches.load() == 2; }));  // refresh under way
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto now = c->provider->Current();
    // Far below the 3 s the refresh takes (a loaded machine may add scheduling delay).
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
    ASSERT_OK(now);
    EXPECT_EQ((*now)->access_key_id, "ASIAIMDS1");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // reads spread over the refresh
  }
  ASSERT_TRUE(Eventually([&] { return Now(*c)->access_key_id == "ASIAIMDS2"; }));
}

// ---- The S3 store: forced refresh on a stale-credentials 403 ----

TEST_F(CredentialChainTest, ExpiredToken403ForcesOneRefreshAndOneRetry) {
  FakeImds imds(&clock_);
  std::atomic<bool> always_expired{false};
  const std::string data = testing::Pattern(1000);
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    if (req.path.starts_with("/latest/")) return imds.Handle(req);
    const std::string* auth = req.Header("authorization");
    const bool old = auth != nullptr && auth->find("Credential=ASIAIMDS1/") != std::string::npos;
    if (old || always_expired.load()) {
      // What S3 answers a request signed with an expired session token.
      HttpTestResponse r = HttpTestResponse::Make(
          req.method == "HEAD" ? 403 : 400,
          req.method == "HEAD"
              ? ""
              : "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ExpiredToken</Code>"
                "<Message>The provided token has expired.</Message></Error>");
      return r;
    }
    return HttpTestServer::ServeObject(req, data, "etag1");
  });
  env_.erase("AWS_EC2_METADATA_DISABLED");
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = server_->base_url();
  auto c = Chain();
  ASSERT_OK(c);
  S3Options o;
  o.bucket = "bkt";
  o.endpoint = server_->base_url();
  o.credentials_provider = c->provider;
  o.backoff_base = std::chrono::milliseconds(5);
  o.backoff_max = std::chrono::milliseconds(20);
  o.hedge = false;
  auto store = NewS3BlobStore(o, transport_.get(), &clock_);
  ASSERT_OK(store);

  // GET: 400 ExpiredToken once, then a refresh (IMDS again) and 200.
  std::vector<std::byte> buf(100);
  auto r = (*store)->Read("k", 10, buf, "");
  ASSERT_OK(r);
  EXPECT_EQ(testing::AsString(std::span<const std::byte>(buf.data(), *r)), data.substr(10, 100));
  EXPECT_EQ(imds.fetches.load(), 2);
  EXPECT_EQ((*store)->Stats().credential_forced_refreshes, 1u);

  // HEAD: a bare 403 while the credentials are temporary counts too.
  always_expired = true;
  server_->ClearRequests();
  auto head = (*store)->Head("k");
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), Status::Code::kPermissionDenied);
  // One refresh and one retry, not a loop: HEAD, token PUT + role + creds, HEAD.
  int heads = 0;
  for (const auto& q : server_->requests()) heads += q.method == "HEAD";
  EXPECT_EQ(heads, 2);
  EXPECT_EQ(imds.fetches.load(), 3);
  always_expired = false;
  auto again = (*store)->Head("k");
  ASSERT_OK(again);
  EXPECT_EQ(again->size, 1000u);
}

// A hedged GET whose original is refused as stale while its duplicate is still in flight: the
// part waits for the duplicate (refused too), which forces the refresh and the retry. Before, the
// first refusal failed the read at once (EACCES under a live key rotation on Ceph RGW).
TEST_F(CredentialChainTest, StaleAnswerToAHedgedGetWaitsForItsDuplicate) {
  FakeImds imds(&clock_);
  std::atomic<bool> rotated{false};
  std::atomic<int> stale_answers{0};
  const std::string data = testing::Pattern(1000);
  auto h = server_->Scoped([&](const HttpTestRequest& req) {
    if (req.path.starts_with("/latest/")) return imds.Handle(req);
    const std::string* auth = req.Header("authorization");
    const bool old = auth != nullptr && auth->find("Credential=ASIAIMDS1/") != std::string::npos;
    if (old && rotated.load()) {
      // The original answers after the hedge went out, the duplicate later still.
      const int n = stale_answers++;
      std::this_thread::sleep_for(std::chrono::milliseconds(n == 0 ? 80 : 250));  // slow answers
      return HttpTestResponse::Make(
          400,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ExpiredToken</Code>"
          "<Message>The provided token has expired.</Message></Error>");
    }
    return HttpTestServer::ServeObject(req, data, "etag1");
  });
  env_.erase("AWS_EC2_METADATA_DISABLED");
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = server_->base_url();
  auto c = Chain();
  ASSERT_OK(c);
  S3Options o;
  o.bucket = "bkt";
  o.endpoint = server_->base_url();
  o.credentials_provider = c->provider;
  o.hedge = true;
  o.hedge_min_delay = std::chrono::milliseconds(20);
  auto store = NewS3BlobStore(o, transport_.get(), &clock_);
  ASSERT_OK(store);
  std::vector<std::byte> buf(100);
  // Quick answers first, so the store knows its latency and hedges the slow one.
  for (int i = 0; i < 30; ++i) ASSERT_OK((*store)->Read("k", 0, buf, ""));
  rotated = true;
  auto r = (*store)->Read("k", 10, buf, "");
  ASSERT_OK(r);
  EXPECT_EQ(testing::AsString(std::span<const std::byte>(buf.data(), *r)), data.substr(10, 100));
  EXPECT_EQ(stale_answers.load(), 2) << "the slow GET was not hedged: the case did not happen";
  EXPECT_EQ(imds.fetches.load(), 2);
  EXPECT_GE((*store)->Stats().hedges_issued, 1u);
}

TEST_F(CredentialChainTest, StaticCredentialsAreNotRefreshedOn403) {
  auto h = server_->Scoped([&](const HttpTestRequest&) {
    return HttpTestResponse::Make(
        403, "<Error><Code>InvalidAccessKeyId</Code><Message>no such key</Message></Error>");
  });
  S3Options o;
  o.bucket = "bkt";
  o.endpoint = server_->base_url();
  o.credentials.access_key_id = "AKSTATIC";
  o.credentials.secret_access_key = "s";
  auto store = NewS3BlobStore(o, transport_.get(), &clock_);
  ASSERT_OK(store);
  EXPECT_EQ((*store)->Head("k").status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(server_->request_count(), 1u);
}

}  // namespace
}  // namespace tierfs
