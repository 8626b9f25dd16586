// The memory a listing snapshot holds, charged to the memory budget (MemoryUse::kListings) for as
// long as the snapshot lives.
//
// Thread-safe (no state).
#pragma once

#include <memory>
#include <utility>

#include "base/memory_budget.h"
#include "tiercache/catalog.h"

namespace tierfs::tiercache_internal {

// The heap bytes of `l`: its entry array and the names and ETags too long for a string's own
// storage.
inline uint64_t ListingBytes(const Listing& l) {
  uint64_t bytes = sizeof(Listing) + l.entries.capacity() * sizeof(DirEntry);
  const std::string empty;
  for (const DirEntry& e : l.entries) {
    if (e.name.capacity() > empty.capacity()) bytes += e.name.capacity() + 1;
    if (e.etag.capacity() > empty.capacity()) bytes += e.etag.capacity() + 1;
  }
  return bytes;
}

// `l` as a shared snapshot, its bytes charged to `budget` (if not null) until the last
// reference drops. A snapshot is immutable once shared, so its bytes are the same then.
inline std::shared_ptr<Listing> ChargedListing(Listing l, MemoryBudget* budget) {
  auto* heap = new Listing(std::move(l));
  if (budget == nullptr) return std::shared_ptr<Listing>(heap);
  budget->Charge(MemoryUse::kListings, ListingBytes(*heap));
  return std::shared_ptr<Listing>(heap, [budget](Listing* p) {
    budget->Release(MemoryUse::kListings, ListingBytes(*p));
    delete p;
  });
}

}  // namespace tierfs::tiercache_internal
