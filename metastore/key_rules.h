// Key validation shared by both MetaStore implementations, so the in-memory store refuses
// exactly what the LMDB store refuses. Internal to metastore/. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "metastore/meta_store.h"

namespace tierfs::metastore_internal {

// Non-empty, no NUL (NUL separates dir key and name in entry keys), and room for at least the
// separator in an entry key.
inline Status CheckDirKey(std::string_view dir_key) {
  if (dir_key.empty()) return Status::InvalidArgument("empty dir key");
  if (dir_key.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("dir key contains NUL");
  }
  if (dir_key.size() + 1 > kMaxMetaKeyBytes) {
    return Status::InvalidArgument("dir key longer than " + std::to_string(kMaxMetaKeyBytes - 1) +
                                   " bytes");
  }
  return Status::OK();
}

// One path component: non-empty, no '/' or NUL, and dir_key + '\0' + name within the limit.
inline Status CheckEntryKey(std::string_view dir_key, std::string_view name) {
  Status s = CheckDirKey(dir_key);
  if (!s.ok()) return s;
  if (name.empty() || name.find('\0') != std::string_view::npos ||
      name.find('/') != std::string_view::npos) {
    return Status::InvalidArgument("bad entry name (empty, NUL or '/')");
  }
  if (dir_key.size() + 1 + name.size() > kMaxMetaKeyBytes) {
    return Status::InvalidArgument("dir key + entry name longer than " +
                                   std::to_string(kMaxMetaKeyBytes - 1) + " bytes");
  }
  return Status::OK();
}

inline Status CheckValueName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("empty value name");
  if (name.size() > kMaxMetaKeyBytes) {
    return Status::InvalidArgument("value name longer than " + std::to_string(kMaxMetaKeyBytes) +
                                   " bytes");
  }
  return Status::OK();
}

}  // namespace tierfs::metastore_internal
