// Helpers shared by the tiercache tests: the shared TempDir, byte-pattern helpers and the stats
// text as a map.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstddef>
#include <filesystem>
#include <map>
#include <span>
#include <sstream>
#include <string>

#include "base/status.h"
#include "tests/testing/temp_dir.h"

namespace tierfs::testing {

// Deterministic, position-dependent bytes: every offset of every object differs from its
// neighbours, so a misplaced block or slice shows up as a mismatch.
inline std::string Pattern(size_t n, uint32_t seed = 1) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = static_cast<char>(x);
  }
  return s;
}

inline std::string AsString(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

inline std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// "k1=v1 k2=v2 ..." (TieredCache::StatsText) as a map; every value must be a number.
inline std::map<std::string, uint64_t> ParseStats(const std::string& text) {
  std::map<std::string, uint64_t> m;
  std::istringstream in(text);
  std::string kv;
  while (in >> kv) {
    size_t eq = kv.find('=');
    EXPECT_NE(eq, std::string::npos) << kv;
    m[kv.substr(0, eq)] = std::stoull(kv.substr(eq + 1));
  }
  return m;
}

}  // namespace tierfs::testing
