// Parsing and printing of the sizes and durations users type on the command line, in the
// config file and in xattr values.
//
//   ParseSize("512MiB") = 536870912   ParseSize("20GiB")   ParseSize("1.5GB") (SI: 1.5e9)
//   ParseSize("4096") = 4096 bytes    ParseSize("64k") = 65536 (single letters are binary)
//   Units: B, KiB MiB GiB TiB PiB EiB (or K M G T P E), KB MB GB TB PB EB; any case.
//   ParseDuration("30s"), ("10m"), ("7d"), ("250ms"), ("1h30m"); plain "45" means seconds.
//   ParseDuration("forever") = kForever.
// Arithmetic is exact (128-bit, a fraction rounded to the nearest byte or nanosecond): sizes go
// up to 18446744073709551615 bytes (2^64 - 1, "16EiB" is one too many), durations up to just
// below kForever (about 292 years). Everything else (negative, empty, unknown unit, a value
// beyond those bounds) is InvalidArgument naming the input, never a wrapped value.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace tierfs {

inline constexpr std::chrono::nanoseconds kForever = std::chrono::nanoseconds::max();

Result<uint64_t> ParseSize(std::string_view text);
Result<std::chrono::nanoseconds> ParseDuration(std::string_view text);

// 1536 → "1.5KiB"; 0 → "0B".
std::string FormatSize(uint64_t bytes);
// 90s → "1m30s"; kForever → "forever"; 250ms → "250ms".
std::string FormatDuration(std::chrono::nanoseconds d);

}  // namespace tierfs
