#include "base/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

namespace tierfs {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

// Splits "12.5MiB" into 12.5 and "MiB". Returns false when no number leads.
bool SplitNumber(std::string_view s, double* number, std::string_view* unit) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + i, *number);
  if (ec != std::errc() || ptr != s.data() + i) return false;
  *unit = Trim(s.substr(i));
  return true;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  std::string_view s = Trim(text);
  double n = 0;
  std::string_view unit;
  if (s.empty() || !SplitNumber(s, &n, &unit)) {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a size (examples: 4096, 64KiB, 512MiB, 20GiB)");
  }
  static const std::pair<std::string_view, double> kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1024.0},
      {"kib", 1024.0},
      {"kb", 1e3},
      {"m", 1048576.0},
      {"mib", 1048576.0},
      {"mb", 1e6},
      {"g", 1073741824.0},
      {"gib", 1073741824.0},
      {"gb", 1e9},
      {"t", 1099511627776.0},
      {"tib", 1099511627776.0},
      {"tb", 1e12},
  };
  for (const auto& [name, mult] : kUnits) {
    if (EqualsIgnoreCase(unit, name)) {
      double bytes = n * mult;
      if (!std::isfinite(bytes) || bytes >= 1.8e19) {
        return Status::InvalidArgument("size '" + std::string(text) + "' is too large");
      }
      return static_cast<uint64_t>(std::llround(bytes));
    }
  }
  return Status::InvalidArgument("'" + std::string(text) + "' has an unknown size unit '" +
                                 std::string(unit) + "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB)");
}

Result<std::chrono::nanoseconds> ParseDuration(std::string_view text) {
  std::string_view s = Trim(text);
  if (EqualsIgnoreCase(s, "forever") || EqualsIgnoreCase(s, "inf")) return kForever;
  if (s.empty()) return Status::InvalidArgument("empty duration");
  const auto bad = [&] {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a duration (examples: 30s, 10m, 7d, 1h30m, forever)");
  };
  double total_ns = 0;
  bool plain = true;
  while (!s.empty()) {
    double n = 0;
    std::string_view rest;
    if (!SplitNumber(s, &n, &rest)) return bad();
    size_t ulen = 0;
    while (ulen < rest.size() && std::isalpha(static_cast<unsigned char>(rest[ulen]))) ++ulen;
    std::string_view unit = rest.substr(0, ulen);
    double mult;
    if (unit.empty()) {
      if (!plain || ulen != rest.size()) return bad();
      mult = 1e9;  // a bare number is seconds
    } else if (unit == "ns") {
      mult = 1;
    } else if (unit == "us") {
      mult = 1e3;
    } else if (unit == "ms") {
      mult = 1e6;
    } else if (unit == "s") {
      mult = 1e9;
    } else if (unit == "m") {
      mult = 60e9;
    } else if (unit == "h") {
      mult = 3600e9;
    } else if (unit == "d") {
      mult = 86400e9;
    } else if (unit == "w") {
      mult = 7 * 86400e9;
    } else {
      return bad();
    }
    plain = false;
    total_ns += n * mult;
    s = Trim(rest.substr(ulen));
  }
  if (!std::isfinite(total_ns) || total_ns >= 9.2e18) {
    return Status::InvalidArgument("duration '" + std::string(text) + "' is too long");
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(total_ns));
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0 || v == std::floor(v)) {
    snprintf(buf, sizeof buf, "%.0f%s", v, kUnits[u]);
  } else {
    snprintf(buf, sizeof buf, "%.1f%s", v, kUnits[u]);
  }
  return buf;
}

std::string FormatDuration(std::chrono::nanoseconds d) {
  if (d == kForever) return "forever";
  int64_t ns = d.count();
  if (ns < 1'000'000'000) {
    if (ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + "ms";
    return std::to_string(ns) + "ns";
  }
  int64_t s = ns / 1'000'000'000;
  std::string out;
  const std::pair<int64_t, const char*> parts[] = {{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}};
  for (const auto& [len, name] : parts) {
    if (s >= len) {
      out += std::to_string(s / len) + name;
      s %= len;
    }
  }
  return out;
}

}  // namespace tierfs
