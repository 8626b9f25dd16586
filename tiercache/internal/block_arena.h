// Recycled storage for large blocks (tier.h, Block::Allocate).
//
// A fresh anonymous mapping costs a page fault per 4 KiB page on its first write and a TLB
// shootdown when it is unmapped; under a paravirtualised guest each fault exits to the
// hypervisor. Measured on this project's test host (AMD EPYC, PVM guest): the first write of a
// fresh 128 KiB mapping takes 230-590 us and its munmap about 100 us, against 8 us for the same
// write into memory already touched, so one small cold object cost the daemon more in page
// faults than in everything else it does. The arena keeps freed block storage for reuse instead,
// and faults in the storage it hands out for the first time with one MADV_POPULATE_WRITE instead
// of a fault per page (1 GiB written in 128 KiB pieces: 2.0-2.3 GB/s against 1.4-1.6 GB/s).
//
// No transparent huge pages: on that host a huge page faulted in from free memory cost more
// than 512 small ones (1 GiB: 320-780 MB/s against 1.4-2.4 GB/s; 5-8 GB/s only when the huge
// pages had been freed a moment before), since the guest hands free 2 MiB blocks back to the
// host (free page reporting) and a huge page always comes from one. A cold 1 GiB read through
// the daemon cost it 3.2-4.2 s of CPU with huge-page slabs and 2.4-2.5 s without. (The system's
// THP setting still applies: with `always` the slabs get huge pages like any memory.)
//
// Layout (the slab allocator of memcached and CacheLib, sized for blocks):
//   - A request of kMinBytes..kMaxBytes is rounded up to its size class: whole pages, eight
//     classes per doubling (at most 1/8 of a block wasted).
//   - A class's items come from slabs: anonymous mappings of a whole number of 2 MiB units,
//     aligned to 2 MiB. A slab holds as many items as fit; the slab size is the smallest number
//     of units that wastes at most 1/8 of it. An item handed out untouched (or given back) has
//     the pages of the requested size populated before it is returned.
//   - A reserve (SetReserve; the daemon's L1 budget with cache.l1_prefault, else 0) raises what
//     stays resident: free items are kept while live and free resident bytes together are within
//     it, whatever retain_bytes and the decay time say. Prefill maps and faults in that much
//     ahead of use (one write per page from user space after the populate: on a guest with
//     shadow page tables the first user access to a page exits to the hypervisor even when the
//     kernel populated it), as resident free items of one class in slabs that hold a readahead
//     run; allocations take them like any resident free item.
//   - A slab whose items are all free and resident (a "spare" slab: every block carved from it
//     freed, none given back) serves any class: an allocation of a class without a resident free
//     item takes one of the last kSpareLookups spare slabs large enough, carved again for its size
//     (all its items resident and free), before it takes untouched storage. So memory one size
//     no longer uses is reused by another without a fault (freed 8 MiB run buffers for 1 MiB
//     blocks, a prefilled reserve of block-size items for a loader's 128 KiB files), instead of
//     each class faulting in storage of its own while another's free storage waits to be given
//     back.
//   - A freed item stays resident for the next allocation of its class. Without a decay time, the
//     arena's free resident bytes stay within `retain_bytes` by giving back the pages
//     (MADV_DONTNEED) of the least recently freed resident items, of any class, to make room for
//     it: a class no longer in use (a burst of another size) cannot keep the budget from the one in
//     use (before, a freed item beyond the budget was itself given back, and a few idle 8 MiB
//     buffers kept every freed 1 MiB block from staying resident). With a decay time (the daemon's
//     arena: 5 s), the free resident bytes beyond retain_bytes are given back, least recently freed
//     first, once they have been free that long, by a thread of the arena's own (started at the
//     first item beyond the budget; at most one pass per fifth of the decay time, adjacent items in
//     one call), never by the thread that frees: no request waits on a give-back (each is a TLB
//     shootdown that interrupts the other cores: in a cold shuffled loader epoch over 128 KiB
//     files, where L1 hands each file to the kernel's page cache at open, give-backs in `open` were
//     9% of the daemon's samples), they are batched, and a burst of frees is there for the
//     allocations that follow it instead of being given back and faulted in again. The free
//     resident bytes beyond retain_bytes are items freed within the last decay time (plus a pass),
//     so never more than the blocks freed in that time, and the daemon's RSS follows the blocks it
//     holds with that lag. An allocation takes a resident free item before any other (in a slab,
//     the most recently freed), so items freed as fast as new ones are taken are reused while still
//     resident: taking the untouched items of a new slab first would let the freed ones pile up
//     past retain_bytes to be given back, and reusing those faults them in again. A slab whose
//     items are all free and given back is unmapped once more than kKeepEmptySlabs slabs are empty;
//     an empty slab with resident free items stays mapped (its resident items are within
//     retain_bytes).
//
// Thread-safe: one mutex; the system calls (mmap, madvise, munmap) run outside it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stop_token>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"

namespace tierfs::tiercache_internal {

class BlockArena {
 public:
  static constexpr size_t kUnitBytes = 2u << 20;  // slab unit and alignment (a huge page)
  static constexpr size_t kMinBytes = 64u << 10;  // Block::kMapThreshold
  static constexpr size_t kMaxBytes = 16u << 20;  // larger blocks are mappings of their own
  static constexpr size_t kKeepEmptySlabs = 2;
  static constexpr size_t kSpareLookups = 16;  // spare slabs SpareFor looks at, at most

  struct Slab;
  // One item of a slab: `bytes` (its class) of page-aligned storage at `data`.
  struct Piece {
    std::byte* data = nullptr;
    size_t bytes = 0;
    Slab* slab = nullptr;
    bool fresh = false;  // untouched or given back: not resident before this allocation
  };
  struct Stats {
    uint64_t slab_bytes = 0;           // mapped in slabs
    uint64_t live_bytes = 0;           // items handed out (class bytes)
    uint64_t free_resident_bytes = 0;  // freed items kept resident for reuse
    uint64_t slabs = 0;
    uint64_t reused = 0;    // allocations served by a resident free item
    uint64_t fresh = 0;     // allocations of never-touched or given-back storage
    uint64_t recarved = 0;  // wholly free resident slabs carved again for another class
  };

  // decay 0: free resident bytes never above retain_bytes (the least recently freed go back to
  // make room); else beyond retain_bytes for at most `decay` (see above).
  explicit BlockArena(uint64_t retain_bytes,
                      std::chrono::nanoseconds decay = std::chrono::nanoseconds::zero());
  // Stops the decay thread and unmaps every slab; every piece must have been released.
  ~BlockArena();
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;

  // The size class of a request, or 0 when the arena does not serve that size.
  static size_t ClassBytes(size_t capacity);
  // Storage of at least `capacity` bytes (ClassBytes(capacity) of them, page-aligned), contents
  // undefined; data is null when the arena does not serve the size or mmap failed.
  Piece Allocate(size_t capacity) EXCLUDES(mu_);
  // `n` pieces of ClassBytes(capacity) bytes each, adjacent in memory (piece k starts where
  // piece k - 1 ends), so that one read can fill them all and each is released on its own; or
  // none (empty) when that would fault in more pages than n separate allocations (Allocate)
  // would: adjacent free items are taken when no more of them are given back (not resident)
  // than the n allocations would take beyond the class's resident free items; without a
  // resident free item in the class, a new slab of at least n items is mapped for them; else
  // none (n allocations cost less than faults: the run is then read into them as pieces,
  // BlobStore::ReadPinnedScatter). Also none when mmap failed.
  std::vector<Piece> AllocateAdjacent(size_t capacity, size_t n) EXCLUDES(mu_);
  void Release(const Piece& piece) EXCLUDES(mu_);
  Stats stats() const EXCLUDES(mu_);
  // With a decay time: gives back the free resident items beyond retain_bytes that were freed
  // at least `decay` before `now` (least recently freed first); returns when the next one is
  // due, or nullopt when nothing is beyond retain_bytes. The decay thread calls it; tests may.
  std::optional<std::chrono::steady_clock::time_point> Trim(
      std::chrono::steady_clock::time_point now) EXCLUDES(mu_);
  // Keeps up to `bytes` of storage resident in all (live items and free ones): free items stay
  // resident while live and free bytes together are within it, whatever retain_bytes and the
  // decay time say (0, the default: retain_bytes alone applies).
  void SetReserve(uint64_t bytes) EXCLUDES(mu_);
  // Sets retain_bytes (a memory limit lowers it); free items beyond it go back as above.
  void SetRetain(uint64_t bytes) EXCLUDES(mu_);
  // Maps and faults in storage for items of ClassBytes(capacity) bytes, in slabs of at least
  // `slab_bytes`, writing each page once from this thread, and keeps it as resident free items,
  // until live and free resident bytes together reach the reserve or `stop` is requested.
  // Returns the bytes it added. Allocations take these items as they take any resident free item.
  uint64_t Prefill(size_t capacity, size_t slab_bytes, std::stop_token stop) EXCLUDES(mu_);

 private:
  struct Class {
    size_t item_bytes = 0;
    size_t slab_bytes = 0;
    std::vector<Slab*> partial;  // slabs with a free item
    std::vector<Slab*> warm;     // slabs with a resident free item: allocations take these first
    uint64_t warm_items = 0;     // resident free items in all its slabs
  };
  // Membership of a slab in one of its class's lists (O(1) removal: the slab knows its place).
  using SlabList = std::vector<Slab*> Class::*;
  using ListPos = size_t Slab::*;

  Class& ClassFor(size_t item_bytes) REQUIRES(mu_);
  void Link(Slab* s, SlabList list, ListPos pos) REQUIRES(mu_);
  void Unlink(Slab* s, SlabList list, ListPos pos) REQUIRES(mu_);
  Piece Take(Slab* s) REQUIRES(mu_);
  // spare_ membership (a slab with no item in use and every item resident).
  void LinkSpare(Slab* s) REQUIRES(mu_);
  void UnlinkSpare(Slab* s) REQUIRES(mu_);
  // A spare slab of at least `bytes` for items of `item` bytes, carved again for that size (all
  // its items free and resident) if it held another; null if none of the last kSpareLookups is.
  Slab* SpareFor(size_t item, size_t bytes) REQUIRES(mu_);
  // The index of a piece's item in its slab.
  static uint32_t IndexOf(const Piece& piece);
  // Takes item `index` of `s`, which must be free (`count`: in the reused/fresh figures).
  Piece TakeIndex(Slab* s, uint32_t index, bool count = true) REQUIRES(mu_);
  // Takes the n free items of `s` from `first` on, into `out`.
  void TakeAdjacent(Slab* s, uint32_t first, size_t n, std::vector<Piece>* out) REQUIRES(mu_);
  // The first of the `n` adjacent free items of `s` with the fewest given back (their number in
  // *cold_in_range), or -1.
  static int64_t FindAdjacentFree(const Slab& s, size_t n, size_t* cold_in_range);
  // Maps a new slab of `slab_bytes` for items of `item` bytes (null when mmap failed).
  std::unique_ptr<Slab> MapSlab(size_t item, size_t slab_bytes);
  // Adds a slab MapSlab made to its class; returns it.
  Slab* Adopt(std::unique_ptr<Slab> slab) REQUIRES(mu_);
  // Maps a new slab of `slab_bytes` for items of `item` bytes and takes its first item (data
  // null when mmap failed).
  Piece AddSlab(size_t item, size_t slab_bytes) EXCLUDES(mu_);
  // Puts item `index` back on its slab; returns the slab, unlinked, when it is now empty and
  // should be unmapped, else null.
  std::unique_ptr<Slab> PutBack(Slab* s, uint32_t index, bool resident) REQUIRES(mu_);
  // Records free item `index` of `s` as resident (freed now), on its class's warm list.
  void AddResident(Slab* s, uint32_t index) REQUIRES(mu_);
  // The free resident bytes the arena may keep: retain_bytes, or what the reserve leaves beyond
  // the live bytes (less `releasing`, an item on its way back) if that is more.
  uint64_t FreeBudget(uint64_t releasing = 0) const REQUIRES(mu_);

  // A resident free item, in the order they were freed (resident_); stale once the item is
  // taken or its slab unmapped (freed_at no longer matches `seq`).
  struct Resident {
    Slab* slab;
    uint32_t index;
    uint64_t seq;
    std::chrono::steady_clock::time_point freed;
  };
  bool StillResident(const Resident& r) const REQUIRES(mu_);
  // Pops the least recently freed entry of resident_ (not empty) and, unless stale, takes its
  // item into *out for GiveBack.
  void TakeOldestResident(std::vector<Piece>* out) REQUIRES(mu_);
  // Gives back the pages of `pieces` (taken out of the free lists, counted as in use) and puts
  // them back as given back, unmapping slabs that are then to go.
  void GiveBack(const std::vector<Piece>& pieces) EXCLUDES(mu_);
  // The decay thread: Trim whenever an item is due, until stopped.
  void DecayLoop(std::stop_token stop) EXCLUDES(mu_);

  const std::chrono::nanoseconds decay_;
  mutable Mutex mu_;
  uint64_t retain_bytes_ GUARDED_BY(mu_);
  uint64_t reserve_bytes_ GUARDED_BY(mu_) = 0;
  std::unordered_map<size_t, std::unique_ptr<Class>> classes_ GUARDED_BY(mu_);
  std::unordered_map<Slab*, std::unique_ptr<Slab>> slabs_ GUARDED_BY(mu_);
  size_t empty_slabs_ GUARDED_BY(mu_) = 0;
  // Slabs with no item in use and every item resident: what any class may take before it faults
  // in storage of its own.
  std::vector<Slab*> spare_ GUARDED_BY(mu_);
  std::deque<Resident> resident_ GUARDED_BY(mu_);  // oldest first, with stale entries
  uint64_t resident_items_ GUARDED_BY(mu_) = 0;
  uint64_t freed_seq_ GUARDED_BY(mu_) = 0;
  Stats stats_ GUARDED_BY(mu_);
  CondVar decay_cv_{&mu_};                   // an item beyond retain_bytes, or stop
  bool decay_idle_ GUARDED_BY(mu_) = false;  // waiting for an item beyond retain_bytes
  // Started by the first Release beyond retain_bytes; the destructor stops and joins it before
  // the slabs go.
  std::jthread decay_thread_ GUARDED_BY(mu_);
};

}  // namespace tierfs::tiercache_internal
