// NewCredentialChain: the AWS SDKs' default credential chain, and the shared config/credentials
// file parsing (see blob_store.h and credentials.h). Only daemon/ calls it (C9): the environment
// comes in through options.getenv. Secrets are never logged, and messages name files, profiles,
// variables and services, never values.
#include "blobclient/credentials.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/logging.h"
#include "base/strings.h"
#include "blobclient/blob_store.h"

namespace tierfs {
namespace blobclient {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

IniSections ParseIni(std::string_view text) {
  IniSections out;
  std::map<std::string, std::string>* section = nullptr;
  std::string parent;  // the key of a "key =" line with an empty value (nested sub-settings)
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    const std::string_view t = TrimSpace(line);  // views `line`, alive for this iteration
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = &out[std::string(TrimSpace(t.substr(1, t.size() - 2)))];
      parent.clear();
      continue;
    }
    if (section == nullptr) continue;
    size_t eq = t.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string key = Lower(std::string(TrimSpace(t.substr(0, eq))));
    std::string_view v = TrimSpace(t.substr(eq + 1));
    // An inline comment needs whitespace before it (values may contain '#').
    for (size_t i = 1; i < v.size(); ++i) {
      if ((v[i] == '#' || v[i] == ';') && (v[i - 1] == ' ' || v[i - 1] == '\t')) {
        v = TrimSpace(v.substr(0, i));
        break;
      }
    }
    const std::string value(v);
    if (indented && !parent.empty()) {
      (*section)[parent + "." + key] = value;
      continue;
    }
    parent = value.empty() ? key : std::string();
    (*section)[key] = value;
  }
  return out;
}

Result<IniSections> ReadIniFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::NotFound("no file " + path);
    return Status::PermissionDenied("cannot read " + path + ": " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseIni(ss.str());
}

namespace {

using Section = std::map<std::string, std::string>;

// A source of fixed keys, described as `describe`.
std::unique_ptr<CredentialSource> Keys(std::string id, std::string secret, std::string token,
                                       std::string describe) {
  Credentials c;
  c.access_key_id = std::move(id);
  c.secret_access_key = std::move(secret);
  c.session_token = std::move(token);
  return NewFixedSource(std::move(c), std::move(describe));
}

std::string Get(const Section& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() ? std::string() : it->second;
}

class ChainBuilder {
 public:
  explicit ChainBuilder(const CredentialChainOptions& o) : o_(o), engine_(AsEngine(o.transport)) {}

  Result<CredentialChain> Build() {
    profile_ = o_.profile;
    if (profile_.empty()) profile_ = Env("AWS_PROFILE");
    if (profile_.empty()) profile_ = "default";
    TIERFS_RETURN_IF_ERROR(LoadFiles());
    CredentialChain chain;
    if (auto it = Profile(profile_); it) chain.profile_region = Get(*it, "region");
    region_ = o_.region;
    if (region_.empty()) region_ = Env("AWS_REGION");
    if (region_.empty()) region_ = Env("AWS_DEFAULT_REGION");
    if (region_.empty()) region_ = chain.profile_region;

    std::unique_ptr<CredentialSource> source;
    TIERFS_ASSIGN_OR_RETURN(source, Select());
    const int64_t fetched = o_.clock->NowUnixNanos();
    Result<FetchedCredentials> first = source->Fetch();
    if (!first.ok()) {
      if (imds_selected_) {
        return Status::NotFound("no AWS credentials found; tried: " + Tried() +
                                ", EC2 instance metadata: " + first.status().message());
      }
      return first.status().WithContext("credentials from " + source->Describe());
    }
    if (first->expiration_unix_ns && *first->expiration_unix_ns <= fetched) {
      return Status::Unavailable("credentials from " + source->Describe() +
                                 " expired already when fetched (clock skew?)");
    }
    const bool temporary = first->expiration_unix_ns.has_value();
    if (temporary) {
      chain.provider =
          NewRefreshingProvider(std::move(source), std::move(*first), fetched, o_.clock);
    } else {
      std::string describe = source->Describe();
      chain.provider = NewStaticCredentialsProvider(std::move(first->credentials), describe);
    }
    return chain;
  }

 private:
  std::string Env(const char* name) const {
    auto v = o_.getenv(name);
    return v ? *v : std::string();
  }

  std::string Tried() const {
    std::string s;
    for (const std::string& t : tried_) s += (s.empty() ? "" : ", ") + t;
    return s;
  }

  Result<std::string> Home() const {
    std::string home = Env("HOME");
    if (!home.empty()) return home;
    if (o_.passwd_home) {
      if (auto h = o_.passwd_home(); h && !h->empty()) return *h;
      return Status::NotFound("HOME unset and no home directory in the passwd entry");
    }
    struct passwd pw, *res = nullptr;
    std::vector<char> buf(16384);
    if (getpwuid_r(geteuid(), &pw, buf.data(), buf.size(), &res) == 0 && res != nullptr &&
        res->pw_dir != nullptr && res->pw_dir[0] != '\0') {
      return std::string(res->pw_dir);
    }
    return Status::NotFound("HOME unset and no passwd entry for uid " + std::to_string(geteuid()));
  }

  Status LoadFiles() {
    auto load = [&](const char* var, const char* leaf, std::string* path,
                    IniSections* out) -> Status {
      *path = Env(var);
      if (path->empty()) {
        Result<std::string> home = Home();
        if (!home.ok()) {
          *path = std::string("~/.aws/") + leaf + " (" + home.status().message() + ")";
          return Status::OK();
        }
        *path = *home + "/.aws/" + leaf;
      }
      Result<IniSections> f = ReadIniFile(*path);
      if (f.ok()) {
        *out = std::move(*f);
      } else if (!f.status().IsNotFound()) {
        return f.status();
      }
      return Status::OK();
    };
    TIERFS_RETURN_IF_ERROR(load("AWS_CONFIG_FILE", "config", &config_path_, &config_));
    return load("AWS_SHARED_CREDENTIALS_FILE", "credentials", &credentials_path_, &credentials_);
  }

  // The merged settings of profile `name`: the config file's [profile NAME] (or [default]), then
  // the credentials file's [NAME] on top. nullopt if neither has it.
  std::optional<Section> Profile(const std::string& name) const {
    std::optional<Section> out;
    auto c = config_.find(name == "default" ? "default" : "profile " + name);
    if (c == config_.end() && name == "default") c = config_.find("profile default");
    if (c != config_.end()) out = c->second;
    if (auto k = credentials_.find(name); k != credentials_.end()) {
      if (!out) out.emplace();
      for (const auto& [key, v] : k->second) (*out)[key] = v;
    }
    return out;
  }

  StsEndpoint Sts() const {
    StsEndpoint sts;
    sts.engine = engine_;
    sts.clock = o_.clock;
    sts.timeout = o_.http_timeout;
    sts.ca_bundle = o_.ca_bundle;
    sts.region = region_.empty() ? "us-east-1" : region_;
    sts.url = Env("AWS_ENDPOINT_URL_STS");
    if (sts.url.empty()) sts.url = Env("AWS_ENDPOINT_URL");
    if (sts.url.empty()) {
      sts.url = region_.empty() ? "https://sts.amazonaws.com"
                                : "https://sts." + region_ + ".amazonaws.com";
    }
    return sts;
  }

  std::string SessionName(const std::string& configured) const {
    if (!configured.empty()) return configured;
    return "tierfs-" + std::to_string(o_.clock->NowUnixNanos() / 1'000'000'000LL);
  }

  Result<std::unique_ptr<CredentialSource>> Select() {
    // 1. The environment (skipped for an explicitly named profile, as `aws --profile` does).
    if (!o_.profile_explicit) {
      std::string id = Env("AWS_ACCESS_KEY_ID"), secret = Env("AWS_SECRET_ACCESS_KEY");
      if (!id.empty() || !secret.empty()) {
        if (id.empty() || secret.empty()) {
          return Status::InvalidArgument(
              "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
        }
        return Keys(std::move(id), std::move(secret), Env("AWS_SESSION_TOKEN"),
                    "environment (AWS_ACCESS_KEY_ID)");
      }
      tried_.push_back("environment (AWS_ACCESS_KEY_ID unset)");

      // 2. Web identity (EKS IRSA).
      std::string token_file = Env("AWS_WEB_IDENTITY_TOKEN_FILE");
      std::string role = Env("AWS_ROLE_ARN");
      if (!token_file.empty() || !role.empty()) {
        if (token_file.empty() || role.empty()) {
          return Status::InvalidArgument(
              "AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN must be set together");
        }
        StsEndpoint sts = Sts();
        std::string describe = "web identity (AWS_ROLE_ARN " + role + ", STS " + sts.url + ")";
        return NewWebIdentitySource(std::move(sts), std::move(token_file), role,
                                    SessionName(Env("AWS_ROLE_SESSION_NAME")), describe);
      }
      tried_.push_back("web identity (AWS_WEB_IDENTITY_TOKEN_FILE unset)");
    }

    // 3. The shared files.
    if (Profile(profile_)) {
      std::vector<std::string> path;
      return ForProfile(profile_, &path);
    }
    const std::string missing =
        "profile " + profile_ + " (not in " + config_path_ + " nor " + credentials_path_ + ")";
    if (o_.profile_explicit) return Status::NotFound("no AWS credentials: " + missing);
    tried_.push_back(missing);

    // 4. Container credentials (ECS, EKS Pod Identity).
    std::string full = Env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    std::string relative = Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    if (!full.empty() || !relative.empty()) return Container();
    tried_.push_back("container (AWS_CONTAINER_CREDENTIALS_FULL_URI/_RELATIVE_URI unset)");

    // 5. EC2 instance metadata.
    if (Lower(Env("AWS_EC2_METADATA_DISABLED")) == "true") {
      tried_.push_back("EC2 instance metadata (AWS_EC2_METADATA_DISABLED=true)");
      return Status::NotFound("no AWS credentials found; tried: " + Tried());
    }
    imds_selected_ = true;
    return Imds();
  }

  Result<std::unique_ptr<CredentialSource>> Container() {
    ContainerParams p;
    std::string relative = Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    p.url = relative.empty() ? Env("AWS_CONTAINER_CREDENTIALS_FULL_URI")
                             : "http://169.254.170.2" + relative;
    TIERFS_RETURN_IF_ERROR(CheckContainerUrl(p.url));
    p.auth_token = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    p.auth_token_file = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    p.timeout = o_.http_timeout;
    p.ca_bundle = o_.ca_bundle;
    return NewContainerSource(engine_, std::move(p));
  }

  std::unique_ptr<CredentialSource> Imds() const {
    std::string ep = Env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (ep.empty()) {
      ep = Lower(Env("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE")) == "ipv6"
               ? "http://[fd00:ec2::254]"
               : "http://169.254.169.254";
    }
    return NewImdsSource(engine_, ep, o_.imds_timeout, o_.imds_attempts);
  }

  // The source of profile `name`; `path` holds the profiles followed so far (cycles).
  Result<std::unique_ptr<CredentialSource>> ForProfile(const std::string& name,
                                                       std::vector<std::string>* path) {
    std::optional<Section> s = Profile(name);
    const std::string where = "profile " + name;
    if (!s) {
      return Status::NotFound("no " + where + " in " + config_path_ + " or " + credentials_path_ +
                              " (source_profile of " + path->back() + ")");
    }
    for (const std::string& p : *path) {
      if (p == name) {
        std::string chain;
        for (const std::string& q : *path) chain += q + " -> ";
        return Status::InvalidArgument("source_profile cycle: " + chain + name);
      }
    }
    path->push_back(name);
    if (!Get(*s, "role_arn").empty()) return AssumeRoleProfile(name, *s, path);
    if (!Get(*s, "aws_access_key_id").empty() || !Get(*s, "aws_secret_access_key").empty()) {
      return StaticKeys(where, *s);
    }
    if (std::string process = Get(*s, "credential_process"); !process.empty()) {
      std::string program = process.substr(0, process.find_first_of(" \t"));
      return NewProcessSource(process, o_.process_timeout,
                              where + " (credential_process '" + program + "')");
    }
    if (!Get(*s, "sso_session").empty() || !Get(*s, "sso_start_url").empty()) {
      return Status::NotSupported(where +
                                  ": SSO profiles are not supported; use "
                                  "credential_process = aws configure export-credentials "
                                  "--profile " +
                                  name + " --format process");
    }
    return Status::NotFound(where +
                            " has no credentials (no aws_access_key_id, role_arn or "
                            "credential_process)");
  }

  // The static keys of a profile (`where` names it in messages).
  Result<std::unique_ptr<CredentialSource>> StaticKeys(const std::string& where,
                                                       const Section& s) const {
    const std::string id = Get(s, "aws_access_key_id");
    const std::string secret = Get(s, "aws_secret_access_key");
    if (id.empty() || secret.empty()) {
      return Status::InvalidArgument(where +
                                     " sets only one of aws_access_key_id and "
                                     "aws_secret_access_key");
    }
    return Keys(id, secret, Get(s, "aws_session_token"), where + " (static keys)");
  }

  // A profile with role_arn: the role assumed with the credentials of its source_profile or
  // credential_source, or with its web identity token.
  Result<std::unique_ptr<CredentialSource>> AssumeRoleProfile(const std::string& name,
                                                              const Section& s,
                                                              std::vector<std::string>* path) {
    const std::string where = "profile " + name;
    const std::string role = Get(s, "role_arn");
    if (!Get(s, "mfa_serial").empty()) {
      return Status::NotSupported(where +
                                  ": mfa_serial needs an interactive MFA prompt; use "
                                  "credential_process or temporary keys instead");
    }
    const std::string source_profile = Get(s, "source_profile");
    const std::string credential_source = Get(s, "credential_source");
    const std::string token_file = Get(s, "web_identity_token_file");
    std::unique_ptr<CredentialSource> base;
    std::string via;
    if (!source_profile.empty()) {
      const bool own_keys =
          !Get(s, "aws_access_key_id").empty() || !Get(s, "aws_secret_access_key").empty();
      if (source_profile == name && own_keys) {
        TIERFS_ASSIGN_OR_RETURN(base, StaticKeys(where, s));  // a profile that is its own source
      } else {
        TIERFS_ASSIGN_OR_RETURN(base, ForProfile(source_profile, path));
      }
      via = "source_profile " + source_profile;
    } else if (!credential_source.empty()) {
      TIERFS_ASSIGN_OR_RETURN(base, NamedSource(where, credential_source));
      via = "credential_source " + credential_source;
    } else if (!token_file.empty()) {
      StsEndpoint sts = Sts();
      std::string describe = where + " (web_identity_token_file, role_arn " + role + ")";
      return NewWebIdentitySource(std::move(sts), token_file, role,
                                  SessionName(Get(s, "role_session_name")), describe);
    } else {
      return Status::InvalidArgument(where +
                                     " has role_arn but no source_profile, "
                                     "credential_source or web_identity_token_file");
    }
    AssumeRoleParams p;
    p.role_arn = role;
    p.session_name = SessionName(Get(s, "role_session_name"));
    p.external_id = Get(s, "external_id");
    if (std::string d = Get(s, "duration_seconds"); !d.empty()) {
      char* end = nullptr;
      long v = std::strtol(d.c_str(), &end, 10);
      if (end == d.c_str() || *end != '\0' || v < 900 || v > 43200) {
        return Status::InvalidArgument(where + ": duration_seconds must be 900..43200, not '" + d +
                                       "'");
      }
      p.duration_seconds = static_cast<int>(v);
    }
    StsEndpoint sts = Sts();
    std::string describe = where + " (role_arn " + role + " via " + via + ")";
    return NewAssumeRoleSource(std::move(sts), std::move(base), std::move(p), describe);
  }

  // The source a profile's credential_source names.
  Result<std::unique_ptr<CredentialSource>> NamedSource(const std::string& where,
                                                        const std::string& credential_source) {
    if (credential_source == "Environment") {
      std::string eid = Env("AWS_ACCESS_KEY_ID"), esecret = Env("AWS_SECRET_ACCESS_KEY");
      if (eid.empty() || esecret.empty()) {
        return Status::NotFound(where +
                                ": credential_source Environment but "
                                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY unset");
      }
      return Keys(std::move(eid), std::move(esecret), Env("AWS_SESSION_TOKEN"), "environment");
    }
    if (credential_source == "Ec2InstanceMetadata") return Imds();
    if (credential_source == "EcsContainer") return Container();
    return Status::InvalidArgument(where + ": unknown credential_source '" + credential_source +
                                   "' (Environment, Ec2InstanceMetadata, EcsContainer)");
  }

  const CredentialChainOptions& o_;
  HttpEngine* const engine_;
  std::string profile_, region_;
  std::string config_path_, credentials_path_;
  IniSections config_, credentials_;
  std::vector<std::string> tried_;
  bool imds_selected_ = false;
};

}  // namespace
}  // namespace blobclient

Result<CredentialChain> NewCredentialChain(const CredentialChainOptions& options) {
  if (!options.getenv) return Status::InvalidArgument("credentials: getenv is required");
  if (options.clock == nullptr) return Status::InvalidArgument("credentials: clock is required");
  blobclient::ChainBuilder b(options);
  TIERFS_ASSIGN_OR_RETURN(CredentialChain chain, b.Build());
  Logger(Module::kBlobClient)
      .info("credentials from {}{}", chain.provider->source(),
            chain.provider->temporary() ? " (temporary, refreshed before they expire)" : "");
  return chain;
}

}  // namespace tierfs
