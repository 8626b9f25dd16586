// Returning freed heap memory to the OS.
//
// glibc's malloc keeps freed memory in its heaps for reuse; after a burst of short-lived
// allocations (the entries of a 200,000-name listing being fetched, sorted and stored, or a
// directory handle's snapshot) it stays in the process's resident set although nothing uses it,
// when longer-lived allocations made meanwhile sit above it. ReleaseFreeMemory hands the whole
// free pages back (malloc_trim(0): madvise(MADV_DONTNEED) on free pages inside the heaps). It
// costs a walk over the free lists, so callers use it after freeing something large, not per
// request.
//
// Thread-safe.
#pragma once

#include <cstddef>

namespace tierfs {

// Asks the allocator to return free pages to the OS. A no-op where the allocator has no such
// call.
void ReleaseFreeMemory();

// The number of entries from which a listing is large enough that freeing it is followed by
// ReleaseFreeMemory() (about 1 MiB of entries and more).
inline constexpr size_t kReleaseMemoryAfterEntries = 8192;

}  // namespace tierfs
