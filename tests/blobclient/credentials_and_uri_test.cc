// ResolveCredentials (environment, shared credentials file, profiles) and ParseSourceUri.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "blobclient/blob_store.h"

namespace tierfs {
namespace {

namespace fs = std::filesystem;

// Saves the AWS_* / HOME variables, clears them, and restores them afterwards.
class CredentialsTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"AWS_ACCESS_KEY_ID",           "AWS_SECRET_ACCESS_KEY",
                                          "AWS_SESSION_TOKEN",           "AWS_PROFILE",
                                          "AWS_SHARED_CREDENTIALS_FILE", "HOME"};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* val = std::getenv(v);
      saved_[v] = val ? std::optional<std::string>(val) : std::nullopt;
      ::unsetenv(v);
    }
    std::string tmpl = (fs::temp_directory_path() / "tierfs-home-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    home_ = tmpl;
    ::setenv("HOME", home_.c_str(), 1);
  }
  void TearDown() override {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
    fs::remove_all(home_);
  }
  void WriteFile(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }

  std::map<std::string, std::optional<std::string>> saved_;
  std::string home_;
};

const char kIni[] =
    "# comment\n"
    "[default]\n"
    "aws_access_key_id = AKIDDEFAULT\n"
    "aws_secret_access_key=secretdefault\n"
    "\n"
    "[work]\n"
    "  aws_access_key_id =AKIDWORK  \r\n"
    "aws_secret_access_key = secretwork\n"
    "aws_session_token = tokenwork\n"
    "[broken]\n"
    "aws_access_key_id = only\n";

TEST_F(CredentialsTest, NothingConfiguredIsNotFound) {
  auto c = ResolveCredentials();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kNotFound);
  EXPECT_NE(c.status().message().find(".aws/credentials"), std::string::npos);
}

TEST_F(CredentialsTest, EnvironmentWins) {
  WriteFile(fs::path(home_) / ".aws/credentials", kIni);
  ::setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "secretenv", 1);
  ::setenv("AWS_SESSION_TOKEN", "tokenenv", 1);
  auto c = ResolveCredentials();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "AKIDENV");
  EXPECT_EQ(c->secret_access_key, "secretenv");
  EXPECT_EQ(c->session_token, "tokenenv");
  EXPECT_FALSE(c->anonymous);
}

TEST_F(CredentialsTest, HalfSetEnvironmentIsInvalid) {
  ::setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
  auto c = ResolveCredentials();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kInvalidArgument);
}

TEST_F(CredentialsTest, DefaultProfileFromHome) {
  WriteFile(fs::path(home_) / ".aws/credentials", kIni);
  auto c = ResolveCredentials();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "AKIDDEFAULT");
  EXPECT_EQ(c->secret_access_key, "secretdefault");
  EXPECT_TRUE(c->session_token.empty());
}

TEST_F(CredentialsTest, ProfileFromEnvOrArgumentAndSharedFileVariable) {
  const fs::path file = fs::path(home_) / "elsewhere/creds";
  WriteFile(file, kIni);
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", file.c_str(), 1);
  ::setenv("AWS_PROFILE", "work", 1);
  auto c = ResolveCredentials();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "AKIDWORK");
  EXPECT_EQ(c->secret_access_key, "secretwork");
  EXPECT_EQ(c->session_token, "tokenwork");
  auto d = ResolveCredentials("default");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->access_key_id, "AKIDDEFAULT");
  // An explicit profile beats the environment's keys (as `aws --profile` does).
  ::setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "secretenv", 1);
  EXPECT_EQ(ResolveCredentials("work")->access_key_id, "AKIDWORK");
}

TEST_F(CredentialsTest, MissingOrIncompleteProfile) {
  WriteFile(fs::path(home_) / ".aws/credentials", kIni);
  auto missing = ResolveCredentials("nope");
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find("[nope]"), std::string::npos);
  auto broken = ResolveCredentials("broken");
  EXPECT_EQ(broken.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(broken.status().message().find("only"), std::string::npos);  // no secrets in messages
}

TEST(ParseSourceUriTest, S3) {
  auto a = ParseSourceUri("s3://bucket");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->scheme, SourceUri::Scheme::kS3);
  EXPECT_EQ(a->bucket, "bucket");
  EXPECT_EQ(a->prefix, "");
  auto b = ParseSourceUri("s3://bucket/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefix, "");
  auto c = ParseSourceUri("s3://bucket/data/train");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bucket, "bucket");
  EXPECT_EQ(c->prefix, "data/train/");
  auto d = ParseSourceUri("s3://bucket/data/");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->prefix, "data/");
}

TEST(ParseSourceUriTest, File) {
  auto a = ParseSourceUri("file:///data/sets/");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->scheme, SourceUri::Scheme::kFile);
  EXPECT_EQ(a->path, "/data/sets");
  auto root = ParseSourceUri("file:///");
  ASSERT_TRUE(root.ok());
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
