#include "base/units.h"

#include <cctype>
#include <cmath>
#include <utility>

#include "base/strings.h"

namespace tierfs {
namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

// An exact decimal number as typed: "12.5" is whole 12, frac 5, frac_digits 1. Digits past the
// 19th after the point are dropped (they are below a nanosecond or a byte for every unit here).
struct Decimal {
  uint64_t whole = 0;
  uint64_t frac = 0;
  int frac_digits = 0;
};

// Splits "12.5MiB" into 12.5 and "MiB". Returns false when no number leads, the number has two
// points, or its whole part does not fit in 64 bits (*too_large is set then).
bool SplitNumber(std::string_view s, Decimal* number, std::string_view* unit, bool* too_large) {
  size_t i = 0, digits = 0;
  bool point = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      if (point) return false;
      point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    ++digits;
    const auto d = static_cast<uint64_t>(c - '0');
    if (!point) {
      if (number->whole > (UINT64_MAX - d) / 10) {
        *too_large = true;
        return false;
      }
      number->whole = number->whole * 10 + d;
    } else if (number->frac_digits < 19) {
      number->frac = number->frac * 10 + d;
      ++number->frac_digits;
    }
  }
  if (digits == 0) return false;
  *unit = TrimSpace(s.substr(i));
  return true;
}

// number * mult, rounded to the nearest integer, exactly (128-bit).
unsigned __int128 Scale(const Decimal& n, uint64_t mult) {
  unsigned __int128 pow10 = 1;
  for (int i = 0; i < n.frac_digits; ++i) pow10 *= 10;
  const unsigned __int128 frac_part =
      (static_cast<unsigned __int128>(n.frac) * mult + pow10 / 2) / pow10;
  return static_cast<unsigned __int128>(n.whole) * mult + frac_part;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  std::string_view s = TrimSpace(text);
  Decimal n;
  std::string_view unit;
  bool too_large = false;
  if (s.empty() || !SplitNumber(s, &n, &unit, &too_large)) {
    if (too_large) {
      return Status::InvalidArgument("size '" + std::string(text) +
                                     "' is too large (the most is 18446744073709551615 bytes)");
    }
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a size (examples: 4096, 64KiB, 512MiB, 20GiB)");
  }
  static const std::pair<std::string_view, uint64_t> kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1ULL << 10},
      {"kib", 1ULL << 10},
      {"kb", 1'000},
      {"m", 1ULL << 20},
      {"mib", 1ULL << 20},
      {"mb", 1'000'000},
      {"g", 1ULL << 30},
      {"gib", 1ULL << 30},
      {"gb", 1'000'000'000},
      {"t", 1ULL << 40},
      {"tib", 1ULL << 40},
      {"tb", 1'000'000'000'000},
      {"p", 1ULL << 50},
      {"pib", 1ULL << 50},
      {"pb", 1'000'000'000'000'000},
      {"e", 1ULL << 60},
      {"eib", 1ULL << 60},
      {"eb", 1'000'000'000'000'000'000},
  };
  for (const auto& [name, mult] : kUnits) {
    if (EqualsIgnoreCase(unit, name)) {
      const unsigned __int128 bytes = Scale(n, mult);
      if (bytes > UINT64_MAX) {
        return Status::InvalidArgument("size '" + std::string(text) +
                                       "' is too large (the most is 18446744073709551615 bytes)");
      }
      return static_cast<uint64_t>(bytes);
    }
  }
  return Status::InvalidArgument("'" + std::string(text) + "' has an unknown size unit '" +
                                 std::string(unit) +
                                 "' (use B, KiB, MiB, GiB, TiB, PiB, EiB, KB, MB, GB, TB, PB, EB)");
}

Result<std::chrono::nanoseconds> ParseDuration(std::string_view text) {
  std::string_view s = TrimSpace(text);
  if (EqualsIgnoreCase(s, "forever") || EqualsIgnoreCase(s, "inf")) return kForever;
  if (s.empty()) return Status::InvalidArgument("empty duration");
  const auto bad = [&] {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a duration (examples: 30s, 10m, 7d, 1h30m, forever)");
  };
  const auto too_long = [&] {
    return Status::InvalidArgument("duration '" + std::string(text) +
                                   "' is too long (the most is about 292 years; or \"forever\")");
  };
  // kForever (INT64_MAX ns) is reserved for "forever": a finite duration stays below it.
  constexpr auto kLimit = static_cast<unsigned __int128>(INT64_MAX);
  unsigned __int128 total_ns = 0;
  bool plain = true;
  while (!s.empty()) {
    Decimal n;
    std::string_view rest;
    bool too_large = false;
    if (!SplitNumber(s, &n, &rest, &too_large)) return too_large ? too_long() : bad();
    size_t ulen = 0;
    while (ulen < rest.size() && std::isalpha(static_cast<unsigned char>(rest[ulen]))) ++ulen;
    std::string_view unit = rest.substr(0, ulen);
    uint64_t mult;
    if (unit.empty()) {
      if (!plain || ulen != rest.size()) return bad();
      mult = 1'000'000'000;  // a bare number is seconds
    } else if (unit == "ns") {
      mult = 1;
    } else if (unit == "us") {
      mult = 1'000;
    } else if (unit == "ms") {
      mult = 1'000'000;
    } else if (unit == "s") {
      mult = 1'000'000'000;
    } else if (unit == "m") {
      mult = 60'000'000'000;
    } else if (unit == "h") {
      mult = 3'600'000'000'000;
    } else if (unit == "d") {
      mult = 86'400'000'000'000;
    } else if (unit == "w") {
      mult = 7 * 86'400'000'000'000;
    } else {
      return bad();
    }
    plain = false;
    total_ns += Scale(n, mult);  // each term < 2^64 * 2^50: no 128-bit overflow
    if (total_ns >= kLimit) return too_long();
    s = TrimSpace(rest.substr(ulen));
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(total_ns));
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
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
