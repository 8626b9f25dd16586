// The AWS credential sources and the refreshing provider behind NewCredentialChain (internal to
// blobclient/; the public API is CredentialsProvider in blob_store.h).
//
// A CredentialSource fetches one set of credentials from one place (a file, a process, STS, the
// container endpoint, IMDS) each time Fetch() is called; it keeps no credentials itself. The
// refreshing provider (credentials_provider.cc) owns a source, holds the credentials in use and
// calls Fetch() again on its own thread before they expire (the rules are in blob_store.h).
//
// Error messages name the source and the cause ("credential_process '/usr/bin/x' exited 1: ...",
// "IMDS: no role attached", "STS AssumeRoleWithWebIdentity: AccessDenied: ..."), never a key, a
// secret, a session token or a web identity token.
//
// Thread-safety: a source's Fetch() is called by one thread at a time (the provider serializes);
// Describe() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "base/result.h"
#include "blobclient/blob_store.h"
#include "blobclient/http_transport.h"

namespace tierfs::blobclient {

struct FetchedCredentials {
  Credentials credentials;
  std::optional<int64_t> expiration_unix_ns;  // nullopt: static, never refreshed
};

class CredentialSource {
 public:
  virtual ~CredentialSource() = default;
  virtual Result<FetchedCredentials> Fetch() = 0;
  // "environment", "profile work (credential_process '/usr/bin/x')", ... Never a secret.
  virtual std::string Describe() const = 0;
};

// ---- Sources ----

std::unique_ptr<CredentialSource> NewFixedSource(Credentials credentials, std::string describe);

// Where STS is and how to reach it.
struct StsEndpoint {
  HttpEngine* engine = nullptr;
  std::string url;     // "https://sts.eu-west-1.amazonaws.com", "http://127.0.0.1:8080"
  std::string region;  // signing region of AssumeRole ("us-east-1" for the global endpoint)
  Clock* clock = nullptr;
  std::chrono::milliseconds timeout{5000};
  std::string ca_bundle;
};

// AssumeRoleWithWebIdentity (unsigned POST), the token read from `token_file` on every fetch
// (Kubernetes rotates it).
std::unique_ptr<CredentialSource> NewWebIdentitySource(StsEndpoint sts, std::string token_file,
                                                       std::string role_arn,
                                                       std::string session_name,
                                                       std::string describe);

struct AssumeRoleParams {
  std::string role_arn;
  std::string session_name;
  std::string external_id;   // optional
  int duration_seconds = 0;  // 0: STS's default (1 h)
};
// AssumeRole signed (SigV4, service sts) with what `base` fetches (fetched anew each time).
std::unique_ptr<CredentialSource> NewAssumeRoleSource(StsEndpoint sts,
                                                      std::unique_ptr<CredentialSource> base,
                                                      AssumeRoleParams params,
                                                      std::string describe);

// Runs `command` with /bin/sh -c (as the SDKs do), stdin from /dev/null, no other inherited
// descriptors, in its own process group; killed after `timeout`; stdout bounded
// (kMaxProcessOutput). Parses its JSON answer.
inline constexpr size_t kMaxProcessOutput = 64u << 10;
std::unique_ptr<CredentialSource> NewProcessSource(std::string command,
                                                   std::chrono::milliseconds timeout,
                                                   std::string describe);

struct ContainerParams {
  std::string url;              // the full URI
  std::string auth_token;       // AWS_CONTAINER_AUTHORIZATION_TOKEN
  std::string auth_token_file;  // AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (wins; re-read each time)
  std::chrono::milliseconds timeout{5000};
  std::string ca_bundle;
};
std::unique_ptr<CredentialSource> NewContainerSource(HttpEngine* engine, ContainerParams params);
// InvalidArgument unless `url` may carry container credentials: https, or http to a loopback
// address or the ECS/EKS link-local hosts (169.254.170.2, 169.254.170.23, [fd00:ec2::23]), as the
// SDKs require.
Status CheckContainerUrl(std::string_view url);

// IMDSv2: PUT /latest/api/token, GET the role name, GET its credentials.
std::unique_ptr<CredentialSource> NewImdsSource(HttpEngine* engine, std::string endpoint,
                                                std::chrono::milliseconds timeout, int attempts);

// ---- The refreshing provider ----

// Holds `first` (fetched from `source` at clock time `fetched_unix_ns`) and, when it expires,
// refreshes it on its own thread by the rules in blob_store.h.
std::shared_ptr<CredentialsProvider> NewRefreshingProvider(std::unique_ptr<CredentialSource> source,
                                                           FetchedCredentials first,
                                                           int64_t fetched_unix_ns, Clock* clock);

// When the provider refreshes credentials fetched at `fetched` that expire at `expires`:
// expires - min(5 min, (expires - fetched) / 2).
int64_t RefreshAtUnixNanos(int64_t fetched, int64_t expires);

// ---- Parsers (exposed for tests) ----

// "2024-05-01T12:00:00Z", "2024-05-01T12:00:00.123Z", "2024-05-01T14:00:00+02:00" → ns since the
// epoch; nullopt if unparsable.
std::optional<int64_t> ParseIso8601Utc(std::string_view s);

// An STS answer to `action` ("AssumeRole", "AssumeRoleWithWebIdentity"): the credentials of a
// 200 answer, or the ErrorResponse's Code and Message as an error naming the action.
Result<FetchedCredentials> ParseStsAnswer(long http_status, std::string_view body,
                                          std::string_view action);

// A JSON credentials document. `what` names the source in errors. `token_field`: "Token"
// (container, IMDS) or "SessionToken" (credential_process). `require_version`: credential_process
// needs "Version": 1.
Result<FetchedCredentials> ParseCredentialsJson(std::string_view json, std::string_view what,
                                                std::string_view token_field, bool require_version);

// An INI file of the AWS shared files: section name → key → value. Keys are lowercased; '#' and
// ';' start comments; nested (indented) sub-settings are kept as "parent.key". NotFound when the
// file does not exist.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;
Result<IniSections> ReadIniFile(const std::string& path);
IniSections ParseIni(std::string_view text);

// Whether an S3 answer means "the credentials are stale, refresh and retry once": 403 with an
// S3 error code ExpiredToken, InvalidAccessKeyId, InvalidClientTokenId, SignatureDoesNotMatch or
// TokenRefreshRequired (in the XML body or x-amz-error-code), or a bare 403 (no code, as for
// HEAD) or AccessDenied (a key rotated away moments ago, on Ceph RGW) while the credentials are
// temporary. 400 with ExpiredToken counts too.
bool IsStaleCredentialsAnswer(const HttpResponse& response, bool temporary);

}  // namespace tierfs::blobclient
