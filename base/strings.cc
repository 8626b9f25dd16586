#include "base/strings.h"

#include <fmt/format.h>

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

}  // namespace tierfs
