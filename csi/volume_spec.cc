#include "csi/volume_spec.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <array>
#include <mutex>
#include <regex>
#include <string_view>
#include <vector>

#include "base/strings.h"

namespace tierfs::csi {
namespace {

constexpr std::string_view kPodInfoPrefix = "csi.storage.k8s.io/";

// What an option's value must look like. Values are handed to `tierfs mount` as one argument
// ("--name=value"), which checks them again; this allow-list keeps out every flag that would let a
// volume read or write node files (--config, --cache-dir, --log-file, a manifest file, ...) or
// change how the node runs the daemon.
enum class ValueKind { kSwitch, kDuration, kSize, kId, kMode, kLogLevel, kS3Url };

struct AllowedOption {
  std::string_view name;
  ValueKind kind;
};

constexpr std::array<AllowedOption, 12> kAllowed = {{
    {"block-size", ValueKind::kSize},
    {"control-group", ValueKind::kId},
    {"dir-mode", ValueKind::kMode},
    {"file-mode", ValueKind::kMode},
    {"gid", ValueKind::kId},
    {"l1-size", ValueKind::kSize},
    {"l2-size", ValueKind::kSize},
    {"log-level", ValueKind::kLogLevel},
    {"manifest", ValueKind::kS3Url},
    {"metadata-ttl", ValueKind::kDuration},
    {"no-sign-request", ValueKind::kSwitch},
    {"uid", ValueKind::kId},
}};

const AllowedOption* FindAllowed(std::string_view name) {
  for (const auto& a : kAllowed) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

// Every pattern Matches() is given. They are compiled once, by the first caller (thread-safe
// static initialisation): compiling a std::regex fills the locale's ctype cache, which libstdc++
// does without a lock, so concurrent publishes must not compile their own.
constexpr std::string_view kPatterns[] = {
    "([0-9]+(ms|s|m|h|d)?|forever)",
    "[0-9]+(\\.[0-9]+)?([KMGTkmgt]i?[Bb]?|[Bb])?",
    "[0-9]{1,10}",
    "0?[0-7]{3}",
    "trace|debug|info|warn|error|critical|off",
    "s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^,]+",
    "s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?",
    "file://(/[^/]+)+/?",
    ".*/\\.\\.?(/.*)?",
    "https?://[A-Za-z0-9.:\\[\\]-]+(/[A-Za-z0-9._~/-]*)?",
    "[a-z0-9-]{1,40}",
};

bool Matches(const std::string& s, std::string_view pattern) {
  static const std::vector<std::regex> compiled = [] {
    std::vector<std::regex> v;
    for (std::string_view p : kPatterns) v.emplace_back(std::string(p));
    return v;
  }();
  for (size_t i = 0; i < std::size(kPatterns); ++i) {
    if (kPatterns[i] == pattern) return std::regex_match(s, compiled[i]);
  }
  // Not in kPatterns: compiled here, one caller at a time.
  static std::mutex compile_mu;
  std::lock_guard<std::mutex> lock(compile_mu);
  return std::regex_match(s, std::regex(std::string(pattern)));
}

// A string with no control characters, commas or newlines (values end up as single arguments
// and as lines of the key's canonical form).
bool Printable(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

Status CheckValue(const AllowedOption& opt, const std::string& value, std::string_view where) {
  bool ok = false;
  const char* want = "";
  switch (opt.kind) {
    case ValueKind::kSwitch:
      ok = value.empty() || value == "true";
      want = "no value";
      break;
    case ValueKind::kDuration:
      ok = Matches(value, "([0-9]+(ms|s|m|h|d)?|forever)");
      want = "a duration such as 30s, 10m, 7d or forever";
      break;
    case ValueKind::kSize:
      ok = Matches(value, "[0-9]+(\\.[0-9]+)?([KMGTkmgt]i?[Bb]?|[Bb])?");
      want = "a size such as 4MiB or 200GiB";
      break;
    case ValueKind::kId:
      ok = Matches(value, "[0-9]{1,10}");
      want = "a number";
      break;
    case ValueKind::kMode:
      ok = Matches(value, "0?[0-7]{3}");
      want = "an octal mode such as 0444";
      break;
    case ValueKind::kLogLevel:
      ok = Matches(value, "trace|debug|info|warn|error|critical|off");
      want = "trace, debug, info, warn, error, critical or off";
      break;
    case ValueKind::kS3Url:
      ok = Matches(value, "s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^,]+") && Printable(value);
      want = "s3://BUCKET/KEY (manifest files on the node are not allowed)";
      break;
  }
  if (ok) return Status::OK();
  return Status::InvalidArgument(
      fmt::format("{}: option '{}' wants {}, not '{}'", where, opt.name, want, value));
}

// Adds "NAME[=VALUE]" to *options after vetting it.
Status AddOption(std::string_view item, std::string_view where,
                 std::map<std::string, std::string>* options) {
  std::string_view s = TrimSpace(item);
  if (s.empty()) return Status::OK();
  while (!s.empty() && s.front() == '-') s.remove_prefix(1);
  std::string name(s), value;
  if (size_t eq = s.find('='); eq != std::string_view::npos) {
    name = std::string(s.substr(0, eq));
    value = std::string(s.substr(eq + 1));
  }
  const AllowedOption* opt = FindAllowed(name);
  if (opt == nullptr) {
    return Status::InvalidArgument(
        fmt::format("{}: option '{}' is not allowed (allowed: {})", where, name, AllowedOptions()));
  }
  TIERFS_RETURN_IF_ERROR(CheckValue(*opt, value, where));
  if (opt->kind == ValueKind::kSwitch) value.clear();
  if (!options->emplace(name, value).second) {
    return Status::InvalidArgument(fmt::format("{}: option '{}' is given twice", where, name));
  }
  return Status::OK();
}

Status CheckSource(const std::string& source) {
  static const char* kWant =
      "volumeAttributes.source must be s3://BUCKET[/PREFIX] or file:///ABSOLUTE/PATH";
  if (source.empty()) return Status::InvalidArgument(std::string(kWant) + " (it is missing)");
  bool ok = false;
  if (source.rfind("s3://", 0) == 0) {
    ok = Matches(source, "s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?");
  } else if (source.rfind("file://", 0) == 0) {
    // An absolute, normalized path: no empty, "." or ".." components.
    ok = Matches(source, "file://(/[^/]+)+/?") && !Matches(source, ".*/\\.\\.?(/.*)?");
  }
  if (!ok || !Printable(source)) {
    return Status::InvalidArgument(fmt::format("{}, not '{}'", kWant, source));
  }
  return Status::OK();
}

Status ParseCredentials(const std::map<std::string, std::string>& secrets, VolumeSpec* spec) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kKeys = {{
      {"access_key_id", "AWS_ACCESS_KEY_ID"},
      {"secret_access_key", "AWS_SECRET_ACCESS_KEY"},
      {"session_token", "AWS_SESSION_TOKEN"},
  }};
  if (secrets.empty()) return Status::OK();
  std::string identity;
  for (const auto& [key, value] : secrets) {
    bool known = false;
    for (const auto& [name, env] : kKeys) {
      if (key == name) known = true;
    }
    if (!known) {
      return Status::InvalidArgument(fmt::format(
          "secret key '{}' is not one of access_key_id, secret_access_key, session_token", key));
    }
  }
  for (const auto& [name, env] : kKeys) {
    auto it = secrets.find(std::string(name));
    std::string value = it == secrets.end() ? "" : it->second;
    if (!Printable(value)) {
      return Status::InvalidArgument(fmt::format("secret key '{}' holds control characters", name));
    }
    if (!value.empty()) spec->credential_env[std::string(env)] = value;
    identity += value;
    identity += '\n';
  }
  if (!spec->credential_env.contains("AWS_ACCESS_KEY_ID") ||
      !spec->credential_env.contains("AWS_SECRET_ACCESS_KEY")) {
    return Status::InvalidArgument(
        "the secret needs both access_key_id and secret_access_key (session_token is optional)");
  }
  spec->credentials_id = "sha256:" + Sha256Hex(identity);
  return Status::OK();
}

}  // namespace

std::string AllowedOptions() {
  std::string s;
  for (const auto& a : kAllowed) {
    if (!s.empty()) s += ", ";
    s += a.name;
  }
  return s;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string VolumeSpec::Key() const {
  std::string canonical =
      fmt::format("tierfs-csi/1\nsource={}\nendpoint={}\nregion={}\n", source, endpoint, region);
  for (const auto& [name, value] : options) canonical += fmt::format("{}={}\n", name, value);
  canonical += "credentials=" + credentials_id + "\n";
  return Sha256Hex(canonical).substr(0, 32);
}

std::vector<std::string> VolumeSpec::MountFlags() const {
  std::vector<std::string> flags;
  if (!endpoint.empty()) flags.push_back("--endpoint=" + endpoint);
  if (!region.empty()) flags.push_back("--region=" + region);
  for (const auto& [name, value] : options) {
    flags.push_back(value.empty() ? "--" + name : "--" + name + "=" + value);
  }
  return flags;
}

Result<VolumeSpec> ParseVolume(const std::map<std::string, std::string>& volume_context,
                               const std::map<std::string, std::string>& secrets,
                               const std::vector<std::string>& mount_flags) {
  VolumeSpec spec;
  for (const auto& [key, value] : volume_context) {
    if (key.rfind(kPodInfoPrefix, 0) == 0) continue;
    if (key == "source") {
      spec.source = value;
    } else if (key == "endpoint") {
      if (!Matches(value, "https?://[A-Za-z0-9.:\\[\\]-]+(/[A-Za-z0-9._~/-]*)?")) {
        return Status::InvalidArgument(fmt::format(
            "volumeAttributes.endpoint must be an http:// or https:// URL, not '{}'", value));
      }
      spec.endpoint = value;
    } else if (key == "region") {
      if (!Matches(value, "[a-z0-9-]{1,40}")) {
        return Status::InvalidArgument(
            fmt::format("volumeAttributes.region must be a region name, not '{}'", value));
      }
      spec.region = value;
    } else if (key == "options") {
      std::string_view rest = value;
      while (!rest.empty()) {
        size_t comma = rest.find(',');
        TIERFS_RETURN_IF_ERROR(
            AddOption(rest.substr(0, comma), "volumeAttributes.options", &spec.options));
        rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
      }
    } else {
      return Status::InvalidArgument(fmt::format(
          "volumeAttributes.{} is not a tierfs attribute (source, endpoint, region, options)",
          key));
    }
  }
  TIERFS_RETURN_IF_ERROR(CheckSource(spec.source));
  for (const std::string& flag : mount_flags) {
    TIERFS_RETURN_IF_ERROR(AddOption(flag, "mountOptions", &spec.options));
  }
  TIERFS_RETURN_IF_ERROR(ParseCredentials(secrets, &spec));
  return spec;
}

}  // namespace tierfs::csi
