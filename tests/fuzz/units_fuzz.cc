// Fuzz target: the size and duration parsers (base/units.h) used by the config file, the flags
// and the xattr values, with their exactness promises checked.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "base/units.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto s = tierfs::ParseSize(text); s.ok()) (void)tierfs::FormatSize(*s);
  if (auto d = tierfs::ParseDuration(text); d.ok()) {
    if (d->count() < 0) std::abort();  // never a wrapped, negative duration
    (void)tierfs::FormatDuration(*d);
  }
  // Exactness: every uint64 parses back to itself, every finite duration in ns too.
  if (size >= 8) {
    uint64_t v;
    std::memcpy(&v, data, 8);
    auto s = tierfs::ParseSize(std::to_string(v));
    if (!s.ok() || *s != v) std::abort();
    const uint64_t ns = v >> 1;  // 0 .. INT64_MAX
    auto d = tierfs::ParseDuration(std::to_string(ns) + "ns");
    if (ns < static_cast<uint64_t>(INT64_MAX)) {
      if (!d.ok() || static_cast<uint64_t>(d->count()) != ns) std::abort();
    } else if (d.ok()) {
      std::abort();  // INT64_MAX ns is kForever's, never a finite duration
    }
  }
  return 0;
}
