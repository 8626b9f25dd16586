// The credential sources that talk to a service: STS (web identity, AssumeRole), the container
// endpoint (ECS, EKS Pod Identity), EC2 IMDSv2; and the parsers of their answers. See
// credentials.h.
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <pugixml.hpp>
#include <sstream>
#include <utility>

#include "base/logging.h"
#include "base/mutex.h"
#include "base/retry.h"
#include "blobclient/credentials.h"
#include "blobclient/http_transport.h"
#include "blobclient/sigv4.h"

namespace tierfs::blobclient {
namespace {

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// "http://host:port/path" → scheme, host[:port], path ("/" if none).
struct UrlParts {
  std::string scheme, hostport, host, path;
};
std::optional<UrlParts> SplitUrl(std::string_view url) {
  size_t sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0) return std::nullopt;
  UrlParts u;
  u.scheme = std::string(url.substr(0, sep));
  for (char& c : u.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view rest = url.substr(sep + 3);
  size_t slash = rest.find('/');
  u.hostport = std::string(rest.substr(0, slash));
  u.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (u.hostport.empty()) return std::nullopt;
  if (u.hostport.front() == '[') {
    size_t close = u.hostport.find(']');
    if (close == std::string::npos) return std::nullopt;
    u.host = u.hostport.substr(0, close + 1);
  } else {
    u.host = u.hostport.substr(0, u.hostport.find(':'));
  }
  return u;
}

std::string FormEncode(const HeaderList& params) {
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out += '&';
    out += UriEncode(k, true) + "=" + UriEncode(v, true);
  }
  return out;
}

Result<std::string> ReadSmallFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound(std::string(what) + ": cannot read " + path + ": " +
                            std::strerror(errno));
  }
  std::string data;
  char buf[4096];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    data.append(buf, static_cast<size_t>(in.gcount()));
    if (data.size() > (1u << 20)) {
      return Status::InvalidArgument(std::string(what) + ": " + path + " is larger than 1 MiB");
    }
  }
  while (!data.empty() && (data.back() == '\n' || data.back() == '\r' || data.back() == ' ')) {
    data.pop_back();
  }
  if (data.empty()) return Status::InvalidArgument(std::string(what) + ": " + path + " is empty");
  return data;
}

// A short, single-line, printable excerpt of a service's error text for messages.
std::string Snippet(std::string_view s, size_t max = 200) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out += (c == '\n' || c == '\r' || c == '\t')    ? ' '
           : (static_cast<unsigned char>(c) < 0x20) ? '?'
                                                    : c;
  }
  return out;
}

// A credentials service's answer as a Status, retryable exactly for the answers worth sending
// again (RetryableHttpStatus: 5xx, 429, 408).
Status HttpError(std::string_view what, long status, std::string_view detail) {
  std::string msg = std::string(what) + ": HTTP " + std::to_string(status);
  if (!detail.empty()) msg += ": " + std::string(detail);
  if (RetryableHttpStatus(status)) return Status::Unavailable(msg);
  if (status == 401 || status == 403) return Status::PermissionDenied(msg);
  if (status == 404) return Status::NotFound(msg);
  return Status::IOError(msg).WithRetryable(false);
}

// The retries of one exchange with a credentials service (a local agent or a regional
// endpoint): `attempts` in all, a short jittered backoff between them.
RetryPolicy ServiceRetries(int attempts) {
  return {.max_attempts = std::max(1, attempts),
          .backoff_base = std::chrono::milliseconds(50),
          .backoff_max = std::chrono::milliseconds(500)};
}

// One exchange with a credentials service in the one retry loop: sent again after a retryable
// transport failure or answer (HttpError's Status says which). Any other answer is returned for
// the caller to judge.
Result<HttpResponse> Exchange(HttpEngine* engine, const HttpRequest& req, int attempts,
                              std::string_view what) {
  if (engine == nullptr) return Status::Internal(std::string(what) + ": no HTTP transport");
  return Retry(ServiceRetries(attempts), [&](int) -> Result<HttpResponse> {
    Result<HttpResponse> r = engine->Execute(req);
    if (!r.ok()) return r.status().WithContext(what);
    if (r->status < 200 || r->status >= 300) {
      if (Status answer = HttpError(what, r->status, ""); answer.retryable()) return answer;
    }
    return r;
  });
}

// ---- Fixed ----

class FixedSource final : public CredentialSource {
 public:
  FixedSource(Credentials c, std::string describe)
      : creds_(std::move(c)), describe_(std::move(describe)) {}
  Result<FetchedCredentials> Fetch() override { return FetchedCredentials{creds_, std::nullopt}; }
  std::string Describe() const override { return describe_; }

 private:
  const Credentials creds_;
  const std::string describe_;
};

// ---- STS ----

Result<FetchedCredentials> CallSts(const StsEndpoint& sts, std::string_view action,
                                   HeaderList params, const Credentials* sign_with) {
  const std::string what = "STS " + std::string(action);
  auto url = SplitUrl(sts.url);
  if (!url) return Status::InvalidArgument(what + ": bad STS endpoint '" + sts.url + "'");
  params.insert(params.begin(), {{"Action", std::string(action)}, {"Version", "2011-06-15"}});
  const std::string body = FormEncode(params);
  HttpRequest req;
  req.method = "POST";
  req.url = url->scheme + "://" + url->hostport + url->path;
  req.headers.emplace_back("Content-Type", "application/x-www-form-urlencoded; charset=utf-8");
  req.headers.emplace_back("Accept", "application/xml");
  if (sign_with != nullptr) {
    SigningRequest s;
    s.method = "POST";
    s.host = url->hostport;
    s.path = url->path;
    s.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}};
    s.payload_sha256 = Sha256Hex(body);
    s.add_content_sha256_header = false;
    SignedRequest signed_req =
        SignV4(s, *sign_with, sts.region.empty() ? "us-east-1" : sts.region, "sts",
               sts.clock != nullptr ? sts.clock->Now() : std::chrono::system_clock::now());
    for (auto& h : signed_req.headers) req.headers.push_back(std::move(h));
  }
  req.body = Bytes(body);
  req.max_body = kMaxSmallBody;
  req.connect_timeout = std::min<std::chrono::milliseconds>(sts.timeout, std::chrono::seconds(3));
  req.timeout = sts.timeout;
  req.low_speed_time = sts.timeout;
  req.ca_bundle = sts.ca_bundle;
  if (sts.engine == nullptr) return Status::Internal(what + ": no HTTP transport");
  // The answer's Status is made by ParseStsAnswer (Throttling is retryable, whatever its HTTP
  // status), so the whole call is the attempt.
  return Retry(ServiceRetries(2), [&](int) -> Result<FetchedCredentials> {
    Result<HttpResponse> resp = sts.engine->Execute(req);
    if (!resp.ok()) return resp.status().WithContext(what);
    return ParseStsAnswer(resp->status, resp->body, action);
  });
}

class WebIdentitySource final : public CredentialSource {
 public:
  WebIdentitySource(StsEndpoint sts, std::string token_file, std::string role_arn,
                    std::string session_name, std::string describe)
      : sts_(std::move(sts)),
        token_file_(std::move(token_file)),
        role_arn_(std::move(role_arn)),
        session_name_(std::move(session_name)),
        describe_(std::move(describe)) {}
  Result<FetchedCredentials> Fetch() override {
    TIERFS_ASSIGN_OR_RETURN(std::string token,
                            ReadSmallFile(token_file_, "web identity token file"));
    return CallSts(
        sts_, "AssumeRoleWithWebIdentity",
        {{"RoleArn", role_arn_}, {"RoleSessionName", session_name_}, {"WebIdentityToken", token}},
        nullptr);
  }
  std::string Describe() const override { return describe_; }

 private:
  const StsEndpoint sts_;
  const std::string token_file_, role_arn_, session_name_, describe_;
};

class AssumeRoleSource final : public CredentialSource {
 public:
  AssumeRoleSource(StsEndpoint sts, std::unique_ptr<CredentialSource> base, AssumeRoleParams p,
                   std::string describe)
      : sts_(std::move(sts)),
        base_(std::move(base)),
        params_(std::move(p)),
        describe_(std::move(describe)) {}
  Result<FetchedCredentials> Fetch() override {
    Result<FetchedCredentials> base = base_->Fetch();
    if (!base.ok()) {
      return base.status().WithContext("AssumeRole " + params_.role_arn + ": source credentials");
    }
    HeaderList params = {{"RoleArn", params_.role_arn}, {"RoleSessionName", params_.session_name}};
    if (!params_.external_id.empty()) params.emplace_back("ExternalId", params_.external_id);
    if (params_.duration_seconds > 0) {
      params.emplace_back("DurationSeconds", std::to_string(params_.duration_seconds));
    }
    return CallSts(sts_, "AssumeRole", std::move(params), &base->credentials);
  }
  std::string Describe() const override { return describe_; }

 private:
  const StsEndpoint sts_;
  const std::unique_ptr<CredentialSource> base_;
  const AssumeRoleParams params_;
  const std::string describe_;
};

// ---- Container ----

class ContainerSource final : public CredentialSource {
 public:
  ContainerSource(HttpEngine* engine, ContainerParams p) : engine_(engine), p_(std::move(p)) {}
  Result<FetchedCredentials> Fetch() override {
    const std::string what = "container credentials (" + p_.url + ")";
    HttpRequest req;
    req.url = p_.url;
    req.max_body = kMaxSmallBody;
    req.connect_timeout = std::min<std::chrono::milliseconds>(p_.timeout, std::chrono::seconds(2));
    req.timeout = p_.timeout;
    req.low_speed_time = p_.timeout;
    req.ca_bundle = p_.ca_bundle;
    std::string token = p_.auth_token;
    if (!p_.auth_token_file.empty()) {
      TIERFS_ASSIGN_OR_RETURN(
          token, ReadSmallFile(p_.auth_token_file, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"));
    }
    if (token.find_first_of("\r\n") != std::string::npos) {
      return Status::InvalidArgument(what + ": the authorization token contains a line break");
    }
    if (!token.empty()) req.headers.emplace_back("Authorization", token);
    req.headers.emplace_back("Accept", "application/json");
    TIERFS_ASSIGN_OR_RETURN(HttpResponse resp, Exchange(engine_, req, 2, what));
    if (resp.status != 200) return HttpError(what, resp.status, Snippet(resp.body));
    return ParseCredentialsJson(resp.body, what, "Token", false);
  }
  std::string Describe() const override { return "container credentials (" + p_.url + ")"; }

 private:
  HttpEngine* const engine_;
  const ContainerParams p_;
};

// ---- IMDSv2 ----

class ImdsSource final : public CredentialSource {
 public:
  ImdsSource(HttpEngine* engine, std::string endpoint, std::chrono::milliseconds timeout,
             int attempts)
      : engine_(engine), endpoint_(std::move(endpoint)), timeout_(timeout), attempts_(attempts) {
    while (!endpoint_.empty() && endpoint_.back() == '/') endpoint_.pop_back();
  }

  Result<FetchedCredentials> Fetch() override {
    auto request = [&](std::string method, std::string path) {
      HttpRequest r;
      r.method = std::move(method);
      r.url = endpoint_ + path;
      r.max_body = kMaxSmallBody;
      r.connect_timeout = timeout_;
      r.timeout = timeout_;
      r.low_speed_time = timeout_;
      return r;
    };
    // The session token (IMDSv2): a PUT, so a request forwarded by an open proxy (which would
    // send GETs only) cannot get it.
    HttpRequest put = request("PUT", "/latest/api/token");
    put.headers.emplace_back("X-aws-ec2-metadata-token-ttl-seconds", "21600");
    TIERFS_ASSIGN_OR_RETURN(HttpResponse tok,
                            Exchange(engine_, put, attempts_, "IMDS " + endpoint_));
    if (tok.status != 200) {
      return HttpError("IMDS " + endpoint_ + ": PUT /latest/api/token", tok.status,
                       Snippet(tok.body));
    }
    std::string token = tok.body;
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    if (token.empty() || token.find_first_of("\r\n") != std::string::npos) {
      return Status::Corruption("IMDS " + endpoint_ + ": bad session token answer");
    }
    const std::string base = "/latest/meta-data/iam/security-credentials/";
    HttpRequest list = request("GET", base);
    list.headers.emplace_back("X-aws-ec2-metadata-token", token);
    TIERFS_ASSIGN_OR_RETURN(HttpResponse roles, Exchange(engine_, list, attempts_, "IMDS"));
    if (roles.status == 404) {
      return Status::NotFound("IMDS: no role attached (no IAM instance profile)");
    }
    if (roles.status != 200) return HttpError("IMDS: GET " + base, roles.status, "");
    std::string role = roles.body.substr(0, roles.body.find('\n'));
    while (!role.empty() && (role.back() == '\r' || role.back() == ' ')) role.pop_back();
    if (role.empty()) return Status::NotFound("IMDS: no role attached (empty role list)");
    if (role.find_first_of("/?#%") != std::string::npos) {
      return Status::Corruption("IMDS: bad role name '" + Snippet(role, 64) + "'");
    }
    {
      MutexLock l(&mu_);
      role_ = role;
    }
    HttpRequest get = request("GET", base + role);
    get.headers.emplace_back("X-aws-ec2-metadata-token", token);
    TIERFS_ASSIGN_OR_RETURN(HttpResponse creds, Exchange(engine_, get, attempts_, "IMDS"));
    if (creds.status != 200) return HttpError("IMDS: GET " + base + role, creds.status, "");
    return ParseCredentialsJson(creds.body, "IMDS (role " + role + ")", "Token", false);
  }

  std::string Describe() const override {
    MutexLock l(&mu_);
    return "EC2 instance metadata (IMDSv2 " + endpoint_ +
           (role_.empty() ? std::string(")") : ", role " + role_ + ")");
  }

 private:
  HttpEngine* const engine_;
  std::string endpoint_;  // constant after construction
  const std::chrono::milliseconds timeout_;
  const int attempts_;
  mutable Mutex mu_;
  std::string role_ GUARDED_BY(mu_);
};

}  // namespace

// ---- Parsers ----

std::optional<int64_t> ParseIso8601Utc(std::string_view s) {
  std::tm tm{};
  std::string str(s);
  const char* rest = strptime(str.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return std::nullopt;
  int64_t frac = 0;
  if (*rest == '.') {
    int64_t scale = 1'000'000'000LL;
    for (++rest; *rest >= '0' && *rest <= '9'; ++rest) {
      scale /= 10;
      frac += (*rest - '0') * scale;
    }
  }
  int64_t offset_s = 0;
  if (*rest == 'Z' || *rest == 'z') {
    ++rest;
  } else if (*rest == '+' || *rest == '-') {
    const int sign = *rest == '-' ? -1 : 1;
    int hh = 0, mm = 0;
    if (std::sscanf(rest + 1, "%2d:%2d", &hh, &mm) != 2 &&
        std::sscanf(rest + 1, "%2d%2d", &hh, &mm) != 2) {
      return std::nullopt;
    }
    offset_s = sign * (hh * 3600 + mm * 60);
    rest += std::strlen(rest);
  } else if (*rest != '\0') {
    return std::nullopt;
  }
  if (*rest != '\0') return std::nullopt;
  const time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return (static_cast<int64_t>(t) - offset_s) * 1'000'000'000LL + frac;
}

Result<FetchedCredentials> ParseStsAnswer(long http_status, std::string_view body,
                                          std::string_view action) {
  const std::string what = "STS " + std::string(action);
  pugi::xml_document doc;
  const bool parsed = static_cast<bool>(doc.load_buffer(body.data(), body.size()));
  if (http_status != 200) {
    pugi::xml_node err = doc.child("ErrorResponse").child("Error");
    if (!err) err = doc.child("Error");  // some STS-compatible servers omit the wrapper
    std::string code = err.child_value("Code");
    std::string message = err.child_value("Message");
    std::string detail =
        code.empty() ? Snippet(body) : code + (message.empty() ? "" : ": " + message);
    std::string msg =
        what + ": " +
        (detail.empty() ? "HTTP " + std::to_string(http_status) : Snippet(detail, 300));
    if (RetryableHttpStatus(http_status) || code == "Throttling" ||
        code == "IDPCommunicationError") {
      return Status::Unavailable(msg);
    }
    if (http_status == 403 || code == "AccessDenied" || code == "InvalidIdentityToken" ||
        code == "ExpiredTokenException") {
      return Status::PermissionDenied(msg);
    }
    return Status::InvalidArgument(msg);
  }
  if (!parsed) return Status::Corruption(what + ": unparsable XML answer");
  pugi::xml_node c = doc.child((std::string(action) + "Response").c_str())
                         .child((std::string(action) + "Result").c_str())
                         .child("Credentials");
  if (!c) return Status::Corruption(what + ": no Credentials in the answer");
  FetchedCredentials f;
  f.credentials.access_key_id = c.child_value("AccessKeyId");
  f.credentials.secret_access_key = c.child_value("SecretAccessKey");
  f.credentials.session_token = c.child_value("SessionToken");
  if (f.credentials.access_key_id.empty() || f.credentials.secret_access_key.empty() ||
      f.credentials.session_token.empty()) {
    return Status::Corruption(what +
                              ": the answer lacks AccessKeyId, SecretAccessKey or SessionToken");
  }
  std::optional<int64_t> exp = ParseIso8601Utc(c.child_value("Expiration"));
  if (!exp) return Status::Corruption(what + ": no valid Expiration in the answer");
  f.expiration_unix_ns = exp;
  return f;
}

Result<FetchedCredentials> ParseCredentialsJson(std::string_view json, std::string_view what,
                                                std::string_view token_field,
                                                bool require_version) {
  const std::string w(what);
  // Parsed without exceptions; the text is never echoed (it holds the secret).
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::Corruption(w + ": answer is not a JSON object");
  auto str = [&](std::string_view key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (require_version) {
    auto v = j.find("Version");
    if (v == j.end() || !v->is_number_integer() || v->get<int64_t>() != 1) {
      return Status::Corruption(w + ": JSON answer needs \"Version\": 1");
    }
  }
  if (auto code = j.find("Code"); code != j.end() && code->is_string() && *code != "Success") {
    return Status::PermissionDenied(w + ": Code " + Snippet(code->get<std::string>(), 64) +
                                    (str("Message").empty() ? "" : ": " + Snippet(str("Message"))));
  }
  FetchedCredentials f;
  f.credentials.access_key_id = str("AccessKeyId");
  f.credentials.secret_access_key = str("SecretAccessKey");
  f.credentials.session_token = str(token_field);
  if (f.credentials.access_key_id.empty() || f.credentials.secret_access_key.empty()) {
    return Status::Corruption(w + ": JSON answer lacks AccessKeyId or SecretAccessKey");
  }
  const std::string exp = str("Expiration");
  if (!exp.empty()) {
    f.expiration_unix_ns = ParseIso8601Utc(exp);
    if (!f.expiration_unix_ns) {
      return Status::Corruption(w + ": unparsable Expiration '" + Snippet(exp, 40) + "'");
    }
  } else if (!require_version) {
    // Container and IMDS credentials always expire.
    return Status::Corruption(w + ": JSON answer lacks Expiration");
  }
  return f;
}

bool IsStaleCredentialsAnswer(const HttpResponse& response, bool temporary) {
  if (response.status != 403 && response.status != 400) return false;
  std::string code;
  if (const std::string* h = response.Header("x-amz-error-code")) code = *h;
  if (code.empty() && !response.body.empty()) {
    pugi::xml_document doc;
    if (doc.load_buffer(response.body.data(), response.body.size())) {
      code = doc.child("Error").child_value("Code");
    }
  }
  if (code == "ExpiredToken" || code == "TokenRefreshRequired") return true;
  if (response.status != 403) return false;
  if (code == "InvalidAccessKeyId" || code == "InvalidClientTokenId" ||
      code == "SignatureDoesNotMatch") {
    return true;
  }
  // A key deleted moments ago: Ceph RGW answers AccessDenied (not InvalidAccessKeyId) until its
  // user cache has caught up (tests/e2e/test_rgw_rotation.sh saw both). With temporary
  // credentials one refresh and retry is cheap; a real denial fails after it.
  if (code == "AccessDenied") return temporary;
  return code.empty() && temporary;
}

Status CheckContainerUrl(std::string_view url) {
  auto u = SplitUrl(url);
  if (!u || (u->scheme != "http" && u->scheme != "https")) {
    return Status::InvalidArgument("container credentials: bad URL '" + std::string(url) + "'");
  }
  if (u->scheme == "https") return Status::OK();
  const std::string& h = u->host;
  if (h == "localhost" || h.starts_with("127.") || h == "[::1]" || h == "169.254.170.2" ||
      h == "169.254.170.23" || h == "[fd00:ec2::23]") {
    return Status::OK();
  }
  return Status::InvalidArgument("container credentials: http URL '" + std::string(url) +
                                 "' must be a loopback address or 169.254.170.2/.23 (or https)");
}

// ---- Factories ----

std::unique_ptr<CredentialSource> NewFixedSource(Credentials credentials, std::string describe) {
  return std::make_unique<FixedSource>(std::move(credentials), std::move(describe));
}

std::unique_ptr<CredentialSource> NewWebIdentitySource(StsEndpoint sts, std::string token_file,
                                                       std::string role_arn,
                                                       std::string session_name,
                                                       std::string describe) {
  return std::make_unique<WebIdentitySource>(std::move(sts), std::move(token_file),
                                             std::move(role_arn), std::move(session_name),
                                             std::move(describe));
}

std::unique_ptr<CredentialSource> NewAssumeRoleSource(StsEndpoint sts,
                                                      std::unique_ptr<CredentialSource> base,
                                                      AssumeRoleParams params,
                                                      std::string describe) {
  return std::make_unique<AssumeRoleSource>(std::move(sts), std::move(base), std::move(params),
                                            std::move(describe));
}

std::unique_ptr<CredentialSource> NewContainerSource(HttpEngine* engine, ContainerParams params) {
  return std::make_unique<ContainerSource>(engine, std::move(params));
}

std::unique_ptr<CredentialSource> NewImdsSource(HttpEngine* engine, std::string endpoint,
                                                std::chrono::milliseconds timeout, int attempts) {
  return std::make_unique<ImdsSource>(engine, std::move(endpoint), timeout, attempts);
}

}  // namespace tierfs::blobclient
