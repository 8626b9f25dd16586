// A self-removing temporary directory for tests.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace tierfs::testing {

// A directory made with mkdtemp under $TMPDIR (or /tmp), removed recursively on destruction.
// Not thread-safe; one owner.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/tierfs-test-XXXXXX";
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
