#include "base/strings.h"

#include <fmt/format.h>

#include <charconv>

namespace tierfs {

std::string EscapeForLog(std::string_view s, size_t max_bytes) {
  const std::string_view shown = s.substr(0, max_bytes);
  std::string out;
  out.reserve(shown.size() + 16);
  for (char ch : shown) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += ch;
        }
    }
  }
  if (shown.size() < s.size()) out += fmt::format("...({} bytes)", s.size());
  return out;
}

std::string RedactUrl(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const size_t host_start = scheme + 3;
  // The authority ends at the first '/', '?' or '#'; a userinfo is what precedes its last '@'.
  const size_t end = url.find_first_of("/?#", host_start);
  const std::string_view authority = url.substr(
      host_start, end == std::string_view::npos ? std::string_view::npos : end - host_start);
  const size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  std::string out(url.substr(0, host_start));
  out += "***";
  out += url.substr(host_start + at);
  return out;
}

std::string_view TrimSpace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

bool ParseDecimal(std::string_view s, uint64_t* out) {
  uint64_t v = 0;
  // from_chars takes no sign for an unsigned type, and says out_of_range past 2^64 - 1.
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) return false;
  *out = v;
  return true;
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string p;
  p.reserve(dir.size() + 1 + name.size());
  p.append(dir).append("/").append(name);
  return p;
}

std::pair<std::string_view, std::string_view> SplitPath(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return {std::string_view(), path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

std::string_view ParentDir(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == 0 || slash == std::string_view::npos) return "/";
  return path.substr(0, slash);
}

}  // namespace tierfs
