// OriginReader: reads of the origin for the cache, always of the version an ObjectRef pins
// (BlobStore::ReadPinnedScatter checks each answer against it: ETag, size, range, length), into
// storage the caller gets back as blocks. Counts every request, byte and error in the cache's
// CacheStats (origin.*). Fewer bytes than the size implies, or an answer of another version, means
// the object changed (FailedPrecondition) and nothing is returned; a store claiming more bytes
// than its buffer is an error (Internal), never copied. Knows nothing of tiers or single-flight:
// callers decide what to fetch and where the blocks go.
//
// Thread-safe; no external synchronization needed (no state of its own beyond the atomic
// counters). `origin` and `stats` are not owned and outlive this object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "blobclient/blob_store.h"
#include "tiercache/tier.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::tiercache_internal {

class OriginReader {
 public:
  OriginReader(BlobStore* origin, uint64_t block_size, CacheStats* stats)
      : origin_(origin), block_size_(block_size), stats_(stats) {}
  OriginReader(const OriginReader&) = delete;
  OriginReader& operator=(const OriginReader&) = delete;

  // Block `index` of `obj`, `expected` bytes long (one request, more only if the origin
  // returns short reads).
  Result<BlockRef> FetchBlock(const ObjectRef& obj, uint64_t index, uint64_t expected);

  // Blocks [first, first + n) of `obj` with one origin read (more only if the origin returns
  // short reads), checked like FetchBlock; each block has storage of its own (adjacent in memory
  // when the block arena has it), written in place. REQUIRES: n >= 1, first + n <= the object's
  // blocks.
  Result<std::vector<BlockRef>> FetchRun(const ObjectRef& obj, uint64_t first, uint64_t n);

  // Fills `out` with the bytes of `obj` at `offset` from the origin, pinned to its version (one
  // request, more only if the origin returns short reads), counted in the origin stats. Fewer
  // bytes than asked for means the object changed: FailedPrecondition (`what` names the part in
  // the log).
  Status ReadExact(const ObjectRef& obj, uint64_t offset, std::span<std::byte> out,
                   const std::string& what);
  // The same into storage in pieces (a run of blocks that are not adjacent in memory).
  Status ReadExact(const ObjectRef& obj, uint64_t offset, const ScatterBuffer& out,
                   const std::string& what);

 private:
  uint64_t ExpectedLength(const ObjectRef& obj, uint64_t index) const;
  // A BlobStore claimed more bytes than the buffer it was given: a bug below us, never copied.
  Status Overrun(const ObjectRef& obj, size_t n, size_t room);

  // Constant after construction.
  BlobStore* const origin_;
  const uint64_t block_size_;
  CacheStats* const stats_;
};

}  // namespace tierfs::tiercache_internal
