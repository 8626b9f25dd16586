// ResolveCredentials: the environment, then the shared credentials file (see blob_store.h).
// Only daemon/ calls this (C9); secrets are never logged, and error messages name files and
// profiles, never values.
#include <cstdlib>
#include <fstream>
#include <string>

#include "blobclient/blob_store.h"

namespace tierfs {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

// Reads [profile] of an INI credentials file. NotFound if the file or the profile is missing.
Result<Credentials> FromFile(const std::string& path, const std::string& profile) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("no credentials file " + path);
  Credentials c;
  bool in_profile = false, found = false;
  std::string line;
  while (std::getline(in, line)) {
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      in_profile = Trim(t.substr(1, t.size() - 2)) == profile;
      found = found || in_profile;
      continue;
    }
    if (!in_profile) continue;
    size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    std::string key = Trim(t.substr(0, eq));
    std::string value = Trim(t.substr(eq + 1));
    if (key == "aws_access_key_id")
      c.access_key_id = value;
    else if (key == "aws_secret_access_key")
      c.secret_access_key = value;
    else if (key == "aws_session_token")
      c.session_token = value;
  }
  if (!found) return Status::NotFound("no profile [" + profile + "] in " + path);
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return Status::InvalidArgument("profile [" + profile + "] in " + path +
                                   " lacks aws_access_key_id or aws_secret_access_key");
  }
  return c;
}

}  // namespace

Result<Credentials> ResolveCredentials(std::string_view profile) {
  // An explicitly named profile wins over the environment (as `aws --profile` does).
  if (profile.empty()) {
    std::string id = Env("AWS_ACCESS_KEY_ID");
    std::string secret = Env("AWS_SECRET_ACCESS_KEY");
    if (!id.empty() || !secret.empty()) {
      if (id.empty() || secret.empty()) {
        return Status::InvalidArgument(
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
      }
      Credentials c;
      c.access_key_id = std::move(id);
      c.secret_access_key = std::move(secret);
      c.session_token = Env("AWS_SESSION_TOKEN");
      return c;
    }
  }
  std::string name(profile);
  if (name.empty()) name = Env("AWS_PROFILE");
  if (name.empty()) name = "default";
  std::string path = Env("AWS_SHARED_CREDENTIALS_FILE");
  if (path.empty()) {
    std::string home = Env("HOME");
    if (home.empty()) {
      return Status::NotFound(
          "no AWS credentials: AWS_ACCESS_KEY_ID unset, and no HOME to find ~/.aws/credentials");
    }
    path = home + "/.aws/credentials";
  }
  Result<Credentials> c = FromFile(path, name);
  if (!c.ok() && c.status().IsNotFound()) {
    return Status::NotFound("no AWS credentials: AWS_ACCESS_KEY_ID unset and " +
                            c.status().message());
  }
  return c;
}

}  // namespace tierfs
