// ListingShare — directory listings shared by the hosts of a region .
//
// A host that lists a directory from the origin offers the listing (Publish); another host that
// needs the same directory asks first (Fetch) and takes the stored listing when it is young
// enough, so a fleet mounting one dataset costs the origin about one listing per directory per
// metadata TTL instead of one per host. The Catalog asks through this interface; the L3 tier
// implements it (Tier::listing_share(), tiercache/remote_tier.cc), storing each listing as one
// object in the L3 bucket in the L3 object framing (tiercache/FORMAT.md, "Shared listings").
//
// Everything here is best-effort: a missing, old, corrupt, foreign or unverifiable listing, and a
// store that is down or slow, only make the caller list from the origin itself. Fetch never takes
// longer than the store's (short) request timeouts; Publish never blocks on the store.
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "metastore/meta_store.h"

namespace tierfs {

// One directory's listing at one moment.
struct SharedListing {
  int64_t listed_at_ns = 0;       // when it was taken from the origin (wall clock, ns)
  std::vector<DirEntry> entries;  // in byte order of name, names unique
};

class ListingShare {
 public:
  virtual ~ListingShare() = default;

  // The stored listing of directory `dir` (catalog path: relative, "" for the root) of the source
  // `source` (BlobStore::Describe() of the origin), if one exists that verifies (format,
  // checksum, MAC when keyed, same source and directory) and was taken at or after
  // `min_listed_at_ns`. NotFound otherwise (a rejected or too-old listing is counted, not an
  // error); another error when the store failed or is being skipped (circuit breaker).
  virtual Result<SharedListing> Fetch(std::string_view source, std::string_view dir,
                                      int64_t min_listed_at_ns) = 0;

  // Offers a listing just taken from the origin; stored asynchronously (or dropped when the
  // write queue is full, the store is being skipped, or the listing is too large to share).
  virtual void Publish(std::string_view source, std::string_view dir, SharedListing listing) = 0;
};

}  // namespace tierfs
