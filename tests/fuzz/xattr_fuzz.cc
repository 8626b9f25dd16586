// Fuzz target: the value parsers of the settable user.tierfs.* xattrs (fuse/xattr_handlers.h,
// tiercache/policy.h) and the stored policy record they produce.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuse/xattr_handlers.h"
#include "tiercache/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  const std::string_view v = tierfs::TrimXattrValue(raw);
  if (v.size() > raw.size()) std::abort();
  (void)tierfs::ParsePinValue(v);
  (void)tierfs::ParseEvictionOrder(v);
  if (auto ttl = tierfs::ParseTtlValue(v); ttl.ok() && ttl->count() <= 0) std::abort();
  // The policy record stored in the metastore (read back at start-up).
  if (auto p = tierfs::DecodePolicy(raw); p.ok()) {
    auto again = tierfs::DecodePolicy(tierfs::EncodePolicy(*p));
    if (!again.ok()) std::abort();
  }
  return 0;
}
