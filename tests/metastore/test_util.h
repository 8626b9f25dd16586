// Helpers shared by the metastore tests: status assertions and a self-removing temp directory.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "base/status.h"

#define MS_ASSERT_OK(expr)                                          \
  do {                                                              \
    const ::tierfs::Status _ms_st = (expr);                         \
    ASSERT_TRUE(_ms_st.ok()) << #expr << ": " << _ms_st.ToString(); \
  } while (0)
#define MS_EXPECT_OK(expr)                                          \
  do {                                                              \
    const ::tierfs::Status _ms_st = (expr);                         \
    EXPECT_TRUE(_ms_st.ok()) << #expr << ": " << _ms_st.ToString(); \
  } while (0)

namespace tierfs::testing {

// A directory made with mkdtemp under $TMPDIR (or /tmp), removed recursively on destruction.
// Not thread-safe; one owner.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/tierfs-meta-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Empty if mkdtemp failed.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tierfs::testing
