// Helpers shared by the tiercache tests: the shared TempDir, byte-pattern helpers and the stats
// text as a map.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

// A column reader's ranges (as bench/policy.py's): an object of `size` bytes cut into
// consecutive pieces of 16..64 KiB (unaligned), shuffled; the first ones covering at most `share`
// of it, or all of them (share 1).
inline std::vector<std::pair<uint64_t, uint64_t>> ColumnRanges(uint64_t size, double share,
                                                               uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for (uint64_t off = 0; off < size;) {
    const uint64_t n = std::min<uint64_t>(16384 + rng() % 49153, size - off);
    pieces.emplace_back(off, n);
    off += n;
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  uint64_t total = 0;
  size_t k = 0;
  while (k < pieces.size() &&
         total + pieces[k].second <= static_cast<uint64_t>(share * static_cast<double>(size))) {
    total += pieces[k++].second;
  }
  pieces.resize(k);
  return pieces;
}

}  // namespace tierfs::testing
