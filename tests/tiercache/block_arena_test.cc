// The block arena: size classes, reuse of freed storage, the bound on what it keeps, and no two
// live pieces sharing a byte under concurrent use.
#include "tiercache/internal/block_arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/eventually.h"
#include "tests/tiercache/test_util.h"

namespace tierfs::tiercache_internal {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

TEST(BlockArenaTest, SizeClassesAreWholePagesWithinAnEighthOfTheRequest) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(BlockArena::ClassBytes(BlockArena::kMinBytes - 1), 0u);
  EXPECT_EQ(BlockArena::ClassBytes(BlockArena::kMaxBytes + 1), 0u);
  EXPECT_EQ(BlockArena::ClassBytes(64 * kKiB), 64 * kKiB);
  EXPECT_EQ(BlockArena::ClassBytes(64 * kKiB + 1), 72 * kKiB);
  EXPECT_EQ(BlockArena::ClassBytes(128 * kKiB), 128 * kKiB);
  EXPECT_EQ(BlockArena::ClassBytes(1 * kMiB), 1 * kMiB);
  EXPECT_EQ(BlockArena::ClassBytes(1 * kMiB + 1), 1 * kMiB + 128 * kKiB);
  EXPECT_EQ(BlockArena::ClassBytes(BlockArena::kMaxBytes), BlockArena::kMaxBytes);
  for (size_t c = BlockArena::kMinBytes; c <= BlockArena::kMaxBytes; c += 4093) {
    const size_t k = BlockArena::ClassBytes(c);
    ASSERT_GE(k, c);
    ASSERT_EQ(k % page, 0u) << c;
    ASSERT_LE(k - c, std::max(page, c / 8)) << c;
  }
}

// Pages of [data, data + bytes) that are resident (mincore).
size_t ResidentPages(const std::byte* data, size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  if (::mincore(const_cast<std::byte*>(data), bytes, v.data()) != 0) return SIZE_MAX;
  return static_cast<size_t>(
      std::count_if(v.begin(), v.end(), [](unsigned char c) { return (c & 1) != 0; }));
}

// Storage handed out for the first time is faulted in by the arena (one MADV_POPULATE_WRITE),
// the requested bytes only, not the rest of its class or slab; a reused piece says it is not
// fresh, and one given back past the retained budget is fresh (and populated) again.
// `n` pieces of `bytes` from `arena`, each filled with `fill` (fewer when one failed).
std::vector<BlockArena::Piece> AllocateFilled(BlockArena* arena, size_t n, size_t bytes, int fill) {
  std::vector<BlockArena::Piece> pieces;
  for (size_t i = 0; i < n; ++i) {
    BlockArena::Piece p = arena->Allocate(bytes);
    if (p.data == nullptr) break;
    std::memset(p.data, fill, p.bytes);
    pieces.push_back(p);
  }
  return pieces;
}

TEST(BlockArenaTest, FreshStorageIsPopulatedUpToTheRequestedSize) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  BlockArena arena(0);  // keeps nothing resident: every release gives the pages back
  BlockArena::Piece a = arena.Allocate(100 * kKiB + 1);  // class 104 KiB
  ASSERT_NE(a.data, nullptr);
  EXPECT_TRUE(a.fresh);
  if (::madvise(a.data, page, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
    arena.Release(a);
    GTEST_SKIP() << "kernel without MADV_POPULATE_WRITE (Linux 5.14)";
  }
  const size_t want = (100 * kKiB + 1 + page - 1) / page;
  EXPECT_EQ(ResidentPages(a.data, a.bytes), want);
  // The next item of the slab is untouched until it is handed out (unless the system gives every
  // anonymous mapping huge pages: transparent_hugepage/enabled = always).
  std::string thp;
  std::getline(std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"), thp);
  if (thp.find("[always]") == std::string::npos) {
    EXPECT_EQ(ResidentPages(a.data + a.bytes, a.bytes), 0u);
  }
  arena.Release(a);
  EXPECT_EQ(ResidentPages(a.data, a.bytes), 0u);  // given back (retain 0)
  BlockArena::Piece b = arena.Allocate(a.bytes);
  EXPECT_EQ(b.data, a.data);
  EXPECT_TRUE(b.fresh);
  EXPECT_EQ(ResidentPages(b.data, b.bytes), b.bytes / page);
  arena.Release(b);

  BlockArena keep(64 * kMiB);
  BlockArena::Piece c = keep.Allocate(128 * kKiB);
  std::memset(c.data, 1, c.bytes);
  keep.Release(c);
  BlockArena::Piece d = keep.Allocate(128 * kKiB);
  EXPECT_EQ(d.data, c.data);
  EXPECT_FALSE(d.fresh);
  keep.Release(d);
}

TEST(BlockArenaTest, FreedStorageIsReusedAndPageAligned) {
  BlockArena arena(64 * kMiB);
  BlockArena::Piece a = arena.Allocate(128 * kKiB);
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(a.bytes, 128 * kKiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE)),
            0u);
  std::memset(a.data, 0x5a, a.bytes);
  BlockArena::Piece b = arena.Allocate(100 * kKiB);  // class 104 KiB, a slab of its own
  ASSERT_NE(b.data, nullptr);
  EXPECT_EQ(b.bytes, 104 * kKiB);
  arena.Release(a);
  BlockArena::Piece c = arena.Allocate(125 * kKiB);  // class 128 KiB: a's storage, still written
  EXPECT_EQ(c.data, a.data);
  EXPECT_EQ(c.data[c.bytes - 1], std::byte{0x5a});
  BlockArena::Stats s = arena.stats();
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.fresh, 2u);
  EXPECT_EQ(s.live_bytes, (128 + 104) * kKiB);
  EXPECT_EQ(s.slab_bytes, 2 * BlockArena::kUnitBytes);  // one slab per class
  EXPECT_EQ(s.slab_bytes % BlockArena::kUnitBytes, 0u);
  arena.Release(b);
  arena.Release(c);
  EXPECT_EQ(arena.stats().live_bytes, 0u);
}

TEST(BlockArenaTest, KeepsAtMostItsBudgetResidentAndGivesTheRestBack) {
  BlockArena arena(256 * kKiB);  // room for two freed 128 KiB items
  std::vector<BlockArena::Piece> pieces = AllocateFilled(&arena, 8, 128 * kKiB, 0xab);
  ASSERT_EQ(pieces.size(), 8u);
  for (const auto& p : pieces) arena.Release(p);
  EXPECT_EQ(arena.stats().free_resident_bytes, 256 * kKiB);
  const std::vector<BlockArena::Piece> released = pieces;
  // The six freed beyond the budget were given back: they come back zero-filled; the two kept
  // come back as they were left.
  int kept = 0, zero = 0;
  for (int i = 0; i < 8; ++i) {
    BlockArena::Piece p = arena.Allocate(128 * kKiB);
    ASSERT_NE(std::find_if(released.begin(), released.end(),
                           [&](const BlockArena::Piece& q) { return q.data == p.data; }),
              released.end());
    const bool all_zero =
        std::all_of(p.data, p.data + p.bytes, [](std::byte b) { return b == std::byte{0}; });
    const bool all_ab =
        std::all_of(p.data, p.data + p.bytes, [](std::byte b) { return b == std::byte{0xab}; });
    kept += all_ab;
    zero += all_zero;
    pieces[static_cast<size_t>(i)] = p;
  }
  EXPECT_EQ(kept, 2);
  EXPECT_EQ(zero, 6);
  EXPECT_EQ(arena.stats().reused, 2u);
  EXPECT_EQ(arena.stats().free_resident_bytes, 0u);
  for (const auto& p : pieces) arena.Release(p);
}

// With a decay time, what is freed beyond the budget stays resident for the allocations that
// follow (a burst of frees is reused, not given back and faulted in again) until it has been
// free that long; then it goes back, least recently freed first, down to the budget.
TEST(BlockArenaTest, WithADecayTimeFreedItemsBeyondTheBudgetStayUntilTheyAreDue) {
  BlockArena arena(256 * kKiB, std::chrono::hours(1));  // the thread never gets to it here
  std::vector<BlockArena::Piece> pieces = AllocateFilled(&arena, 8, 128 * kKiB, 0xab);
  ASSERT_EQ(pieces.size(), 8u);
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& p : pieces) arena.Release(p);
  EXPECT_EQ(arena.stats().free_resident_bytes, 8 * 128 * kKiB);
  // Not due yet: nothing goes back, and the next pass is due an hour after the first release.
  const auto next = arena.Trim(t0 + std::chrono::minutes(59));
  ASSERT_TRUE(next.has_value());
  EXPECT_GE(*next, t0 + std::chrono::hours(1));
  EXPECT_EQ(arena.stats().free_resident_bytes, 8 * 128 * kKiB);
  // All eight are reused as they were left (no fault, no zero page).
  const uint64_t fresh = arena.stats().fresh;
  for (int i = 0; i < 8; ++i) {
    pieces[static_cast<size_t>(i)] = arena.Allocate(128 * kKiB);
    const BlockArena::Piece& p = pieces[static_cast<size_t>(i)];
    EXPECT_TRUE(
        std::all_of(p.data, p.data + p.bytes, [](std::byte b) { return b == std::byte{0xab}; }));
  }
  EXPECT_EQ(arena.stats().fresh, fresh);
  EXPECT_EQ(arena.stats().free_resident_bytes, 0u);
  // Freed again, then due: the six freed first go back (their pages with them), the budget's
  // worth of the newest stays.
  for (const auto& p : pieces) arena.Release(p);
  EXPECT_FALSE(arena.Trim(std::chrono::steady_clock::now() + std::chrono::hours(2)).has_value());
  EXPECT_EQ(arena.stats().free_resident_bytes, 256 * kKiB);
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(ResidentPages(pieces[i].data, pieces[i].bytes) == 0, i < 6) << i;
  }
}

// A reserve (the daemon's L1 capacity with cache.l1_prefault) keeps the storage it covers
// resident whatever retain_bytes says, and Prefill faults that much in ahead of use, in slabs
// that hold whole readahead runs: allocations up to the reserve, adjacent runs included, take
// resident storage, and Prefill faults in nothing beyond it.
TEST(BlockArenaTest, PrefillFaultsInStorageUpToTheReserveAndAllocationsTakeIt) {
  BlockArena arena(0, std::chrono::hours(1));  // retains nothing of its own once due
  std::stop_source never;
  EXPECT_EQ(arena.Prefill(1 * kMiB, 8 * kMiB, never.get_token()), 0u);  // no reserve yet
  arena.SetReserve(16 * kMiB);
  EXPECT_EQ(arena.Prefill(1 * kMiB, 8 * kMiB, never.get_token()), 16 * kMiB);
  BlockArena::Stats s = arena.stats();
  EXPECT_EQ(s.free_resident_bytes, 16 * kMiB);
  EXPECT_EQ(s.slab_bytes, 16 * kMiB);
  EXPECT_EQ(s.fresh, 0u);
  EXPECT_EQ(arena.Prefill(1 * kMiB, 8 * kMiB, never.get_token()), 0u);  // the reserve is full

  std::vector<BlockArena::Piece> run = arena.AllocateAdjacent(1 * kMiB, 8);
  ASSERT_EQ(run.size(), 8u);
  std::vector<BlockArena::Piece> pieces = run;
  for (size_t k = 0; k < run.size(); ++k) {
    EXPECT_EQ(run[k].data, run[0].data + k * kMiB);
    EXPECT_FALSE(run[k].fresh) << k;
    EXPECT_EQ(ResidentPages(run[k].data, run[k].bytes), kMiB / ::sysconf(_SC_PAGESIZE)) << k;
  }
  for (int i = 0; i < 8; ++i) {
    pieces.push_back(arena.Allocate(1 * kMiB));
    EXPECT_FALSE(pieces.back().fresh) << i;
  }
  EXPECT_EQ(arena.stats().fresh, 0u);
  EXPECT_EQ(arena.stats().reused, 16u);
  pieces.push_back(arena.Allocate(1 * kMiB));  // beyond the reserve: fresh storage
  EXPECT_TRUE(pieces.back().fresh);

  // Freed, and long due: the reserve's worth stays resident (retain_bytes alone would keep
  // nothing), the rest goes back.
  for (const auto& p : pieces) arena.Release(p);
  EXPECT_FALSE(arena.Trim(std::chrono::steady_clock::now() + std::chrono::hours(2)).has_value());
  EXPECT_EQ(arena.stats().free_resident_bytes, 16 * kMiB);
  // A reserve taken back lets the rest go too.
  arena.SetReserve(0);
  EXPECT_FALSE(arena.Trim(std::chrono::steady_clock::now() + std::chrono::hours(2)).has_value());
  EXPECT_EQ(arena.stats().free_resident_bytes, 0u);
}

// Without a decay time the reserve bounds what a release keeps the same way, and a stop request
// ends a prefill before it maps anything more.
TEST(BlockArenaTest, TheReserveHoldsWithoutADecayTimeAndPrefillStopsWhenAsked) {
  BlockArena arena(128 * kKiB);
  arena.SetReserve(4 * kMiB);
  std::stop_source stop;
  stop.request_stop();
  EXPECT_EQ(arena.Prefill(1 * kMiB, 8 * kMiB, stop.get_token()), 0u);
  EXPECT_EQ(arena.stats().slab_bytes, 0u);
  std::vector<BlockArena::Piece> pieces = AllocateFilled(&arena, 6, 1 * kMiB, 0x3c);
  ASSERT_EQ(pieces.size(), 6u);
  for (const auto& p : pieces) arena.Release(p);
  EXPECT_EQ(arena.stats().free_resident_bytes, 4 * kMiB);
  size_t resident = 0;
  for (const auto& p : pieces) resident += ResidentPages(p.data, p.bytes) != 0;
  EXPECT_EQ(resident, 4u);
}

// The decay thread gives back what is due without anyone calling the arena, and stops with it.
TEST(BlockArenaTest, TheDecayThreadGivesBackWhatIsDueOnItsOwn) {
  BlockArena arena(128 * kKiB, std::chrono::milliseconds(20));
  std::vector<BlockArena::Piece> pieces = AllocateFilled(&arena, 6, 128 * kKiB, 0xcd);
  ASSERT_EQ(pieces.size(), 6u);
  for (const auto& p : pieces) arena.Release(p);
  tierfs::testing::Eventually([&] { return arena.stats().free_resident_bytes <= 128 * kKiB; },
                              std::chrono::seconds(20), std::chrono::milliseconds(5));
  EXPECT_EQ(arena.stats().free_resident_bytes, 128 * kKiB);
  size_t given_back = 0;
  for (const auto& p : pieces) given_back += ResidentPages(p.data, p.bytes) == 0;
  EXPECT_EQ(given_back, 5u);
}

// Adjacent items given back together go back in one call and all of their pages with them.
TEST(BlockArenaTest, DueItemsOfASlabGoBackWholeAndAreZeroWhenTakenAgain) {
  BlockArena arena(0, std::chrono::hours(1));
  std::vector<BlockArena::Piece> pieces =
      AllocateFilled(&arena, 16, 128 * kKiB, 0xef);  // one 2 MiB slab
  ASSERT_EQ(pieces.size(), 16u);
  // Freed out of address order.
  for (size_t i : {3, 0, 15, 7, 1, 2, 14, 4, 5, 6, 8, 13, 9, 12, 10, 11}) arena.Release(pieces[i]);
  EXPECT_FALSE(arena.Trim(std::chrono::steady_clock::now() + std::chrono::hours(2)).has_value());
  EXPECT_EQ(arena.stats().free_resident_bytes, 0u);
  for (const auto& p : pieces) EXPECT_EQ(ResidentPages(p.data, p.bytes), 0u);
  const BlockArena::Piece p = arena.Allocate(128 * kKiB);
  EXPECT_TRUE(std::all_of(p.data, p.data + p.bytes, [](std::byte b) { return b == std::byte{0}; }));
  arena.Release(p);
}

// An item freed while a newer slab still has untouched items is what the next allocation takes:
// storage freed as fast as it is taken stays resident and is reused, instead of piling up past
// the budget while the new slab's untouched items are faulted in.
TEST(BlockArenaTest, TakesAResidentFreeItemBeforeAnUntouchedOne) {
  BlockArena arena(64 * kMiB);
  const size_t per_slab = BlockArena::kUnitBytes / (128 * kKiB);
  std::vector<BlockArena::Piece> first;
  for (size_t i = 0; i < per_slab; ++i) first.push_back(arena.Allocate(128 * kKiB));
  BlockArena::Piece second = arena.Allocate(128 * kKiB);  // a new slab, the rest untouched
  EXPECT_EQ(arena.stats().slabs, 2u);
  for (size_t i = 0; i < per_slab; i += 2) arena.Release(first[i]);
  const std::vector<BlockArena::Piece> freed = first;
  for (size_t i = 0; i < per_slab; i += 2) {
    BlockArena::Piece p = arena.Allocate(128 * kKiB);
    EXPECT_NE(std::find_if(freed.begin(), freed.end(),
                           [&](const BlockArena::Piece& q) { return q.data == p.data; }),
              freed.end());
    first[i] = p;
  }
  BlockArena::Stats s = arena.stats();
  EXPECT_EQ(s.reused, per_slab / 2);
  EXPECT_EQ(s.fresh, per_slab + 1);
  EXPECT_EQ(s.free_resident_bytes, 0u);
  BlockArena::Piece next = arena.Allocate(128 * kKiB);  // none resident: the new slab's next
  EXPECT_EQ(next.data, second.data + next.bytes);
  for (const auto& p : first) arena.Release(p);
  arena.Release(second);
  arena.Release(next);
  EXPECT_EQ(arena.stats().live_bytes, 0u);
}

TEST(BlockArenaTest, UnmapsEmptySlabsBeyondAFew) {
  BlockArena arena(0);  // keeps nothing resident: every freed item is given back
  const size_t per_slab = BlockArena::kUnitBytes / (128 * kKiB);
  std::vector<BlockArena::Piece> pieces;
  for (size_t i = 0; i < 5 * per_slab; ++i) pieces.push_back(arena.Allocate(128 * kKiB));
  EXPECT_EQ(arena.stats().slabs, 5u);
  for (const auto& p : pieces) arena.Release(p);
  BlockArena::Stats s = arena.stats();
  EXPECT_EQ(s.slabs, BlockArena::kKeepEmptySlabs);
  EXPECT_EQ(s.slab_bytes, BlockArena::kKeepEmptySlabs * BlockArena::kUnitBytes);
  EXPECT_EQ(s.free_resident_bytes, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
}

// 1 MiB blocks come two to a slab, so freeing blocks empties slabs all the time: an empty slab
// whose items are kept resident stays, and the next allocations reuse them without a fault
// (unmapping it would give back the memory the budget keeps for exactly that).
TEST(BlockArenaTest, KeepsEmptySlabsWhoseItemsAreResident) {
  BlockArena arena(64 * kMiB);
  std::vector<BlockArena::Piece> pieces;
  for (int i = 0; i < 16; ++i) pieces.push_back(arena.Allocate(kMiB));
  ASSERT_EQ(arena.stats().slabs, 8u);
  for (const auto& p : pieces) arena.Release(p);
  BlockArena::Stats s = arena.stats();
  EXPECT_EQ(s.slabs, 8u);
  EXPECT_EQ(s.free_resident_bytes, 16 * kMiB);
  for (auto& p : pieces) p = arena.Allocate(kMiB);
  s = arena.stats();
  EXPECT_EQ(s.fresh, 16u);
  EXPECT_EQ(s.reused, 16u);
  EXPECT_EQ(s.slabs, 8u);
  for (const auto& p : pieces) arena.Release(p);
}

// Over the budget the least recently freed resident items go back, whatever their class: idle
// buffers of one size never keep the budget from the size in use. (Each 3 MiB slab keeps one
// item in use, so that no slab is wholly free for the 1 MiB class to take over.)
TEST(BlockArenaTest, GivesBackTheLeastRecentlyFreedToKeepTheNewestResident) {
  BlockArena arena(8 * kMiB);
  BlockArena::Piece a1 = arena.Allocate(3 * kMiB), a2 = arena.Allocate(3 * kMiB);  // one slab
  BlockArena::Piece b1 = arena.Allocate(3 * kMiB), b2 = arena.Allocate(3 * kMiB);  // another
  ASSERT_EQ(arena.stats().slabs, 2u);
  arena.Release(a1);
  arena.Release(b1);
  EXPECT_EQ(arena.stats().free_resident_bytes, 6 * kMiB);
  std::vector<BlockArena::Piece> small;
  for (int i = 0; i < 4; ++i) {
    small.push_back(arena.Allocate(kMiB));
    EXPECT_TRUE(small.back().fresh);
    std::memset(small.back().data, 0x77, kMiB);
  }
  for (const auto& p : small) arena.Release(p);
  BlockArena::Stats s = arena.stats();
  EXPECT_EQ(s.free_resident_bytes, 7 * kMiB);  // b1 and the four small ones
  const uint64_t fresh = s.fresh;
  for (auto& p : small) {
    p = arena.Allocate(kMiB);
    EXPECT_EQ(p.data[kMiB - 1], std::byte{0x77});  // still resident, as left
  }
  EXPECT_EQ(arena.stats().fresh, fresh);
  BlockArena::Piece again = arena.Allocate(3 * kMiB);
  EXPECT_EQ(again.data, b1.data);  // the one not given back
  EXPECT_FALSE(again.fresh);
  BlockArena::Piece other = arena.Allocate(3 * kMiB);
  EXPECT_EQ(other.data, a1.data);
  EXPECT_TRUE(other.fresh);  // given back
  for (const auto& p : small) arena.Release(p);
  for (const auto& p : {again, other, a2, b2}) arena.Release(p);
  EXPECT_LE(arena.stats().free_resident_bytes, 8 * kMiB);
  EXPECT_EQ(arena.stats().live_bytes, 0u);
  EXPECT_EQ(arena.stats().recarved, 0u);
}

// A slab whose items are all free and resident serves any class before storage is faulted in
// (re-carved for the size asked for: freed 8 MiB buffers serve 1 MiB blocks, and a run of
// them), and a slab with an item in use, or one given back, is never taken over.
TEST(BlockArenaTest, AWhollyFreeResidentSlabServesAnotherClass) {
  BlockArena arena(64 * kMiB);
  BlockArena::Piece big1 = arena.Allocate(8 * kMiB), big2 = arena.Allocate(8 * kMiB);
  std::memset(big1.data, 0x11, big1.bytes);
  std::memset(big2.data, 0x22, big2.bytes);
  arena.Release(big1);
  arena.Release(big2);
  const uint64_t fresh = arena.stats().fresh;
  std::vector<BlockArena::Piece> small;
  for (int i = 0; i < 8; ++i) small.push_back(arena.Allocate(kMiB));
  for (size_t i = 0; i < small.size(); ++i) {
    EXPECT_FALSE(small[i].fresh) << i;
    EXPECT_EQ(small[i].data, big2.data + i * kMiB) << i;  // the most recently freed slab
    EXPECT_EQ(small[i].data[0], std::byte{0x22}) << i;
  }
  std::vector<BlockArena::Piece> run = arena.AllocateAdjacent(kMiB, 8);  // big1's slab, as one
  ASSERT_EQ(run.size(), 8u);
  for (size_t i = 0; i < run.size(); ++i) {
    EXPECT_FALSE(run[i].fresh) << i;
    EXPECT_EQ(run[i].data, big1.data + i * kMiB) << i;
  }
  BlockArena::Stats s = arena.stats();
  EXPECT_EQ(s.fresh, fresh);
  EXPECT_EQ(s.recarved, 2u);
  EXPECT_EQ(s.free_resident_bytes, 0u);
  EXPECT_EQ(s.live_bytes, 16 * kMiB);
  // Freed again, one 1 MiB block kept: that slab is not wholly free, the other is.
  for (size_t i = 1; i < small.size(); ++i) arena.Release(small[i]);
  for (const auto& p : run) arena.Release(p);
  BlockArena::Piece b = arena.Allocate(2 * kMiB);  // big1's slab again
  EXPECT_FALSE(b.fresh);
  EXPECT_EQ(b.data, big1.data);
  BlockArena::Piece c = arena.Allocate(4 * kMiB);  // only the slab with small[0] is left
  EXPECT_TRUE(c.fresh);
  EXPECT_EQ(arena.stats().recarved, 3u);
  for (const auto& p : {small[0], b, c}) arena.Release(p);
  EXPECT_EQ(arena.stats().live_bytes, 0u);

  // Given back (retain 0): nothing stays resident, so nothing is taken over.
  BlockArena none(0);
  BlockArena::Piece x = none.Allocate(8 * kMiB);
  none.Release(x);
  BlockArena::Piece y = none.Allocate(kMiB);
  EXPECT_TRUE(y.fresh);
  EXPECT_EQ(none.stats().recarved, 0u);
  none.Release(y);
}

// A readahead run: n adjacent items that one read fills, each released on its own; once freed
// (resident) the same storage serves the next run without a fault.
TEST(BlockArenaTest, AdjacentPiecesAreOneSpanAndAreReusedAsOne) {
  BlockArena arena(64 * kMiB);
  std::vector<BlockArena::Piece> run = arena.AllocateAdjacent(kMiB, 8);
  ASSERT_EQ(run.size(), 8u);
  for (size_t k = 0; k < run.size(); ++k) {
    EXPECT_EQ(run[k].bytes, kMiB);
    EXPECT_EQ(run[k].data, run[0].data + k * kMiB);
    EXPECT_TRUE(run[k].fresh);
  }
  std::memset(run[0].data, 0x11, 8 * kMiB);  // one write across all of them
  BlockArena::Stats s = arena.stats();
  EXPECT_EQ(s.fresh, 8u);
  EXPECT_EQ(s.live_bytes, 8 * kMiB);
  EXPECT_EQ(s.slabs, 1u);
  EXPECT_GE(s.slab_bytes, 8 * kMiB);
  for (const auto& p : run) arena.Release(p);
  std::vector<BlockArena::Piece> again = arena.AllocateAdjacent(kMiB, 8);
  ASSERT_EQ(again.size(), 8u);
  s = arena.stats();
  EXPECT_EQ(s.reused, 8u);
  EXPECT_EQ(s.fresh, 8u);
  EXPECT_EQ(s.slabs, 1u);
  for (size_t k = 0; k < again.size(); ++k) EXPECT_EQ(again[k].data, again[0].data + k * kMiB);
  // Freed one at a time, in any order, and reused singly.
  arena.Release(again[3]);
  BlockArena::Piece one = arena.Allocate(kMiB);
  EXPECT_EQ(one.data, again[3].data);
  again[3] = one;
  for (const auto& p : again) arena.Release(p);
  EXPECT_EQ(arena.stats().live_bytes, 0u);
}

// A spare slab of another class stands in for untouched storage only: a run whose class still
// has resident free items is allocated singly from those (the spare slab taken ahead of them
// left them free until given back, and a cold 1 GiB read peaked 300 MiB higher).
TEST(BlockArenaTest, ARunTakesASpareSlabOnlyInsteadOfUntouchedStorage) {
  BlockArena arena(64 * kMiB);
  BlockArena::Piece big = arena.Allocate(8 * kMiB);
  std::vector<BlockArena::Piece> singles;
  for (int i = 0; i < 8; ++i) singles.push_back(arena.Allocate(kMiB));       // 4 slabs of 2 items
  arena.Release(big);                                                        // a spare slab
  for (size_t i = 0; i < singles.size(); i += 2) arena.Release(singles[i]);  // one per slab
  EXPECT_TRUE(arena.AllocateAdjacent(kMiB, 2).empty());                      // singles reuse those
  EXPECT_EQ(arena.stats().recarved, 0u);
  std::vector<BlockArena::Piece> taken;
  for (int i = 0; i < 4; ++i) taken.push_back(arena.Allocate(kMiB));
  EXPECT_EQ(arena.stats().free_resident_bytes, 8 * kMiB);  // only the spare slab
  // Nothing of the class resident now: the spare slab, not a new one.
  const uint64_t slabs = arena.stats().slabs;
  std::vector<BlockArena::Piece> run = arena.AllocateAdjacent(kMiB, 2);
  ASSERT_EQ(run.size(), 2u);
  EXPECT_EQ(run[0].data, big.data);
  EXPECT_FALSE(run[0].fresh);
  EXPECT_EQ(arena.stats().slabs, slabs);
  EXPECT_EQ(arena.stats().recarved, 1u);
  for (const auto& v : {run, taken}) {
    for (const auto& p : v) arena.Release(p);
  }
  for (size_t i = 1; i < singles.size(); i += 2) arena.Release(singles[i]);
  EXPECT_EQ(arena.stats().live_bytes, 0u);
}

// A run never faults in more than single allocations would: resident free items that are not
// adjacent give no run (the caller allocates singly and copies); adjacent ones do; a new slab is
// mapped only when the class has no resident free item at all.
TEST(BlockArenaTest, AdjacentPiecesNeverCostFaultsThatSinglesWouldNot) {
  BlockArena arena(64 * kMiB);
  std::vector<BlockArena::Piece> singles;
  for (int i = 0; i < 8; ++i) singles.push_back(arena.Allocate(kMiB));  // 4 slabs of 2 items
  ASSERT_EQ(arena.stats().slabs, 4u);
  for (size_t i = 0; i < singles.size(); i += 2) arena.Release(singles[i]);  // one per slab
  EXPECT_TRUE(arena.AllocateAdjacent(kMiB, 2).empty());
  EXPECT_TRUE(arena.AllocateAdjacent(kMiB, 5).empty());  // 4 resident: singles fault in 1
  EXPECT_EQ(arena.stats().slabs, 4u);
  // Two adjacent resident items of one slab are a run of 2.
  arena.Release(singles[1]);
  std::vector<BlockArena::Piece> two = arena.AllocateAdjacent(kMiB, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].data, singles[0].data);
  EXPECT_EQ(two[1].data, singles[1].data);
  EXPECT_FALSE(two[0].fresh);
  EXPECT_FALSE(two[1].fresh);
  // No resident item left once the other three are taken: a run gets a slab of its own.
  std::vector<BlockArena::Piece> more;
  for (int i = 0; i < 3; ++i) more.push_back(arena.Allocate(kMiB));
  EXPECT_EQ(arena.stats().free_resident_bytes, 0u);
  std::vector<BlockArena::Piece> run = arena.AllocateAdjacent(kMiB, 5);
  ASSERT_EQ(run.size(), 5u);
  EXPECT_EQ(arena.stats().slabs, 5u);
  for (size_t k = 0; k < run.size(); ++k) EXPECT_EQ(run[k].data, run[0].data + k * kMiB);
  for (const auto& v : {run, two, more}) {
    for (const auto& p : v) arena.Release(p);
  }
  for (size_t i = 3; i < singles.size(); i += 2) arena.Release(singles[i]);
  EXPECT_EQ(arena.stats().live_bytes, 0u);
  EXPECT_TRUE(arena.AllocateAdjacent(3 * kMiB, 0).empty());
  EXPECT_TRUE(arena.AllocateAdjacent(BlockArena::kMaxBytes + 1, 2).empty());
}

// Given-back items are taken for a run when single allocations would fault in as many: with
// nothing kept resident, a run reuses the adjacent items of an empty slab instead of a new one.
TEST(BlockArenaTest, AdjacentGivenBackItemsAreTakenWhenNothingIsResident) {
  BlockArena arena(0);
  std::vector<BlockArena::Piece> run = arena.AllocateAdjacent(kMiB, 4);
  ASSERT_EQ(run.size(), 4u);
  const std::byte* at = run[0].data;
  for (const auto& p : run) arena.Release(p);
  EXPECT_EQ(arena.stats().free_resident_bytes, 0u);
  run = arena.AllocateAdjacent(kMiB, 4);
  ASSERT_EQ(run.size(), 4u);
  EXPECT_EQ(run[0].data, at);
  EXPECT_TRUE(run[0].fresh);
  EXPECT_EQ(arena.stats().slabs, 1u);
  for (const auto& p : run) arena.Release(p);
}

TEST(BlockArenaTest, LargeClassesUseSlabsOfSeveralUnits) {
  BlockArena arena(0);                               // keeps nothing resident
  BlockArena::Piece p = arena.Allocate(700 * kKiB);  // class 704 KiB: 2 per 2 MiB would waste 31%
  ASSERT_NE(p.data, nullptr);
  EXPECT_EQ(p.bytes, 704 * kKiB);
  const uint64_t slab = arena.stats().slab_bytes;
  EXPECT_EQ(slab % BlockArena::kUnitBytes, 0u);
  EXPECT_LE(slab % p.bytes, slab / 8);
  BlockArena::Piece big = arena.Allocate(BlockArena::kMaxBytes);
  ASSERT_NE(big.data, nullptr);
  std::memset(big.data, 1, big.bytes);
  arena.Release(big);
  arena.Release(p);
  EXPECT_EQ(arena.stats().free_resident_bytes, 0u);
}

// Releases one of `held`, chosen by `rng`; false if any of its bytes is not `fill` (another
// owner wrote into it while this one held it).
bool ReleaseOneIntact(BlockArena& arena, std::mt19937& rng, std::byte fill,
                      std::vector<BlockArena::Piece>* held) {
  const size_t k = rng() % held->size();
  const BlockArena::Piece p = (*held)[k];
  const bool intact = std::all_of(p.data, p.data + p.bytes, [&](std::byte b) { return b == fill; });
  arena.Release(p);
  held->erase(held->begin() + static_cast<std::ptrdiff_t>(k));
  return intact;
}

TEST(BlockArenaTest, ConcurrentPiecesNeverShareAByte) {
  BlockArena arena(4 * kMiB);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      const size_t sizes[] = {64 * kKiB, 96 * kKiB, 128 * kKiB, 1 * kMiB};
      std::vector<BlockArena::Piece> held;
      for (int i = 0; i < 400; ++i) {
        if (held.size() < 6 && rng() % 3 != 0) {
          BlockArena::Piece p = arena.Allocate(sizes[rng() % 4]);
          if (p.data == nullptr) {
            ++failures[static_cast<size_t>(t)];
            continue;
          }
          std::memset(p.data, t + 1, p.bytes);
          held.push_back(p);
        } else if (!held.empty()) {
          if (!ReleaseOneIntact(arena, rng, static_cast<std::byte>(t + 1), &held)) {
            ++failures[static_cast<size_t>(t)];
          }
        }
      }
      for (const auto& p : held) arena.Release(p);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[static_cast<size_t>(t)], 0) << t;
  EXPECT_EQ(arena.stats().live_bytes, 0u);
  EXPECT_LE(arena.stats().free_resident_bytes, 4 * kMiB);
}

// The same with a prefilled reserve, runs of adjacent pieces and sizes that leave whole slabs
// free: slabs carved again for another class under concurrent use never hand out a byte twice.
TEST(BlockArenaTest, ConcurrentPiecesOfRecarvedSlabsNeverShareAByte) {
  BlockArena arena(2 * kMiB, std::chrono::milliseconds(50));
  arena.SetReserve(32 * kMiB);
  std::stop_source never;
  ASSERT_EQ(arena.Prefill(1 * kMiB, 4 * kMiB, never.get_token()), 32 * kMiB);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 11);
      const size_t sizes[] = {64 * kKiB, 200 * kKiB, 1 * kMiB, 3 * kMiB};
      std::vector<BlockArena::Piece> held;
      const auto fill = static_cast<std::byte>(t + 1);
      for (int i = 0; i < 600; ++i) {
        if (held.size() < 12 && rng() % 3 != 0) {
          std::vector<BlockArena::Piece> got;
          if (rng() % 4 == 0) {
            got = arena.AllocateAdjacent(sizes[rng() % 3], 2 + rng() % 3);
          } else if (BlockArena::Piece p = arena.Allocate(sizes[rng() % 4]); p.data != nullptr) {
            got.push_back(p);
          }
          for (const auto& p : got) {
            std::memset(p.data, static_cast<int>(fill), p.bytes);
            held.push_back(p);
          }
        } else if (!held.empty()) {
          if (!ReleaseOneIntact(arena, rng, fill, &held)) ++failures[static_cast<size_t>(t)];
        }
      }
      for (const auto& p : held) arena.Release(p);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[static_cast<size_t>(t)], 0) << t;
  // The decay thread counts the items it is giving back as live until their pages are back
  // (Trim): one pass may still be under way after the last release (the CI saw 3 MiB + 208 KiB).
  EXPECT_TRUE(tierfs::testing::Eventually([&] { return arena.stats().live_bytes == 0; }))
      << arena.stats().live_bytes;
  const BlockArena::Stats s = arena.stats();
  EXPECT_GT(s.recarved, 0u);
  EXPECT_LE(s.free_resident_bytes, s.slab_bytes);
}

}  // namespace
}  // namespace tierfs::tiercache_internal
