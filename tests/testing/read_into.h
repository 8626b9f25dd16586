// ReadInto: a copying read over TieredCache::Read for tests that compare bytes. Header-only; no
// state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "base/result.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::testing {

// Fills `out` with bytes [offset, offset + out.size()) of `obj` read through `cache`; returns the
// bytes read (short at the end of the object). Errors: Read's, a file slice's read error, and
// Internal for a slice that does not fit its block or `out`.
inline Result<size_t> ReadInto(TieredCache& cache, const ObjectRef& obj, uint64_t offset,
                               std::span<std::byte> out) {
  TIERFS_ASSIGN_OR_RETURN(auto slices, cache.Read(obj, offset, out.size(), nullptr));
  size_t done = 0;
  for (const auto& s : slices) {
    const uint64_t have = s.file ? s.file->length() : s.block->size();
    if (s.length > out.size() - done || s.offset + s.length > have) {
      return Status::Internal("a slice of '" + obj.key + "' does not fit its block or buffer");
    }
    if (s.file) {
      TIERFS_RETURN_IF_ERROR(s.file->ReadAt(s.offset, out.subspan(done, s.length)));
    } else {
      std::memcpy(out.data() + done, s.block->data().data() + s.offset, s.length);
    }
    done += s.length;
  }
  return done;
}

}  // namespace tierfs::testing
