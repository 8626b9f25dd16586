// The Prefetcher (readahead and next-files prefetch) over a real TieredCache (L1) and Catalog on a
// FakeBlobStore origin, with a FakeClock for the metadata TTL. What it asked for is seen in what
// L1 holds once the cache's prefetch pool has fetched it.
#include "tiercache/prefetcher.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "metastore/meta_store.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/eventually.h"
#include "tests/testing/read_into.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"

namespace tierfs {
namespace {

using testing::FakeBlobStore;
using testing::Pattern;

constexpr uint64_t kBs = 4096;
constexpr uint64_t kBigBlocks = 40;

class PrefetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    origin_.PutObject("big.bin", Pattern(kBigBlocks * kBs));
    origin_.PutObject("short.bin", Pattern(3 * kBs - 10, 2));
    origin_.PutObject("seven.bin", Pattern(7 * kBs - 10, 4));  // below kHydrateMinBlocks
    origin_.PutObject("eight.bin", Pattern(8 * kBs - 10, 5));  // just at it, short last block
    for (int i = 0; i < 40; ++i) {
      origin_.PutObject(fmt::format("many/f{:03d}", i), std::to_string(i));
    }
    origin_.PutObject("many/g000", Pattern(3 * kBs, 3));  // bigger than next_files_max_bytes
    meta_ = NewMemMetaStore();
    TieredCacheOptions co;
    co.block_size = kBs;
    co.prefetch_threads = 2;
    co.readahead_run_bytes = 4 * kBs;  // runs of 4 blocks
    co.small_object_bytes = 0;         // these tests watch readahead, which small objects skip
    std::vector<std::unique_ptr<Tier>> tiers;
    MemoryTierOptions l1;
    l1.capacity_bytes = 256 * kBs;
    l1.shards = 1;
    tiers.push_back(NewMemoryTier(l1));
    auto cache = TieredCache::Open(co, std::move(tiers), &origin_, &clock_);
    ASSERT_OK(cache);
    cache_ = std::move(*cache);
    auto catalog = Catalog::Open(CatalogOptions{}, &origin_, meta_.get(), &clock_);
    ASSERT_OK(catalog);
    catalog_ = std::move(*catalog);
    options_.readahead_max_bytes = 8 * kBs;
    options_.next_files = 4;
    options_.next_files_max_bytes = 2 * kBs;
    options_.random_hydrate_misses = 4;
    options_.hydrate_runs = 2;  // runs of 4 blocks: at most 8 blocks outstanding
  }

  std::unique_ptr<Prefetcher> Make() {
    return std::make_unique<Prefetcher>(options_, cache_.get(), catalog_.get());
  }

  ObjectRef Obj(const std::string& key) {
    ObjectRef o;
    o.key = key;
    o.info = *origin_.Head(key);
    return o;
  }

  // Blocks of `key` that L1 holds.
  uint64_t Held(const std::string& key) { return cache_->Residency(Obj(key))[0].second; }
  bool HoldsBlock(const std::string& key, uint64_t index) {
    return cache_->HostHolds(Obj(key), index * kBs, 1);
  }
  // Waits (bounded) until L1 holds `want` blocks of `key`; returns what it holds then.
  uint64_t WaitHeld(const std::string& key, uint64_t want) {
    testing::Eventually([&] { return Held(key) >= want; }, std::chrono::seconds(20),
                        std::chrono::milliseconds(2));
    return Held(key);
  }

  FakeClock clock_;
  FakeBlobStore origin_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<TieredCache> cache_;
  std::unique_ptr<Catalog> catalog_;
  PrefetcherOptions options_;
};

// With an L1 of 16 blocks, a window of 32 would fetch blocks that L1 evicts before the reader gets
// there (and that it then fetches again): the window stops at a quarter of L1.
TEST_F(PrefetcherTest, TheWindowStopsAtWhatL1Keeps) {
  TieredCacheOptions co;
  co.block_size = kBs;
  co.prefetch_threads = 2;
  co.readahead_run_bytes = 4 * kBs;
  co.small_object_bytes = 0;
  std::vector<std::unique_ptr<Tier>> tiers;
  MemoryTierOptions l1;
  l1.capacity_bytes = 16 * kBs;
  l1.shards = 1;
  tiers.push_back(NewMemoryTier(l1));
  auto cache = TieredCache::Open(co, std::move(tiers), &origin_, &clock_);
  ASSERT_OK(cache);
  EXPECT_EQ((*cache)->readahead_window_bytes(), 4 * kBs);
  options_.readahead_max_bytes = 32 * kBs;
  Prefetcher p(options_, cache->get(), catalog_.get());
  Prefetcher::Stream s(Obj("big.bin"));
  for (uint64_t off = 0; off < 2 * kBs; off += 1024) p.OnRead(&s, off, 1024);  // block 1 read
  // Blocks 1..4 (asked for in steps of 2), at most 4 ahead of the read's last block: no more.
  testing::Eventually([&] { return origin_.bytes_read() >= 4 * kBs; }, std::chrono::seconds(20),
                      std::chrono::milliseconds(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a window for a wrong fetch
  EXPECT_GE(origin_.bytes_read(), 4 * kBs);
  EXPECT_LE(origin_.bytes_read(), 5 * kBs);
}

TEST_F(PrefetcherTest, SequentialReadsGrowTheWindowAndAskInWholeSteps) {
  auto p = Make();
  Prefetcher::Stream s(Obj("big.bin"));
  p->OnRead(&s, 0, 1024);  // window 2 blocks: 1..2
  EXPECT_EQ(p->Stats().readahead_requests.load(), 1u);
  EXPECT_EQ(WaitHeld("big.bin", 2), 2u);
  EXPECT_TRUE(HoldsBlock("big.bin", 1) && HoldsBlock("big.bin", 2));
  p->OnRead(&s, 1024, 1024);  // window 4: up to block 4, a step of 2
  EXPECT_EQ(p->Stats().readahead_requests.load(), 2u);
  p->OnRead(&s, 2048, 1024);  // window 8 (the maximum): up to block 8, a step of 4
  EXPECT_EQ(p->Stats().readahead_requests.load(), 3u);
  EXPECT_EQ(WaitHeld("big.bin", 8), 8u);
  p->OnRead(&s, 3072, 1024);  // nothing new in the window
  EXPECT_EQ(p->Stats().readahead_requests.load(), 3u);
  p->OnRead(&s, kBs, 1024);  // one block more in the window: less than a step (4), wait
  EXPECT_EQ(p->Stats().readahead_requests.load(), 3u);
  p->OnRead(&s, 3 * kBs, kBs + 1024);  // reaches block 4: blocks 9..12, a whole step
  EXPECT_EQ(p->Stats().readahead_requests.load(), 4u);
  EXPECT_EQ(WaitHeld("big.bin", 12), 12u);
  EXPECT_FALSE(HoldsBlock("big.bin", 0));  // nothing read it: readahead only looks ahead
  EXPECT_FALSE(HoldsBlock("big.bin", 13));
}

TEST_F(PrefetcherTest, SeeksResetTheWindowAndAFirstReadElsewhereIsASeek) {
  auto p = Make();
  Prefetcher::Stream s(Obj("big.bin"));
  p->OnRead(&s, 20 * kBs, 1024);  // not at 0: a seek, no readahead
  EXPECT_EQ(p->Stats().readahead_requests.load(), 0u);
  p->OnRead(&s, 20 * kBs + 1024, 1024);  // sequential from there: blocks 21..22
  EXPECT_EQ(p->Stats().readahead_requests.load(), 1u);
  EXPECT_EQ(WaitHeld("big.bin", 2), 2u);
  EXPECT_TRUE(HoldsBlock("big.bin", 21) && HoldsBlock("big.bin", 22));
  p->OnRead(&s, 2 * kBs, 1024);   // back: a seek
  p->OnRead(&s, 30 * kBs, 1024);  // far ahead: a seek too
  EXPECT_EQ(p->Stats().readahead_requests.load(), 1u);
  // A second stream of the same object has its own detector.
  Prefetcher::Stream other(Obj("big.bin"));
  p->OnRead(&other, 0, 1024);
  EXPECT_EQ(p->Stats().readahead_requests.load(), 2u);
  EXPECT_EQ(WaitHeld("big.bin", 4), 4u);
}

TEST_F(PrefetcherTest, ReadaheadStopsAtTheEndOfTheObjectAndZeroTurnsItOff) {
  auto p = Make();
  Prefetcher::Stream s(Obj("short.bin"));
  p->OnRead(&s, 0, 1024);  // blocks 1..2, the last one short
  EXPECT_EQ(WaitHeld("short.bin", 2), 2u);
  p->OnRead(&s, 1024, 1024);  // the window passes the end: nothing left to ask for
  EXPECT_EQ(p->Stats().readahead_requests.load(), 1u);

  options_.readahead_max_bytes = 0;
  auto off = Make();
  Prefetcher::Stream s2(Obj("big.bin"));
  off->OnRead(&s2, 0, 1024);
  off->OnRead(&s2, 1024, 1024);
  EXPECT_EQ(off->Stats().readahead_requests.load(), 0u);
}

TEST_F(PrefetcherTest, SmallFilesOpenedInADirectoryPrefetchTheNextOnes) {
  auto p = Make();
  p->OnOpen(Obj("many/f010"));  // the first small file of a directory: no pattern yet
  p->OnOpen(Obj("short.bin"));  // another directory (the root), and too big anyway
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 0u);
  p->OnOpen(Obj("many/f020"));  // the second: the next 4 of the listing
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 4u);
  for (int i = 21; i <= 24; ++i) {
    const std::string key = fmt::format("many/f{:03d}", i);
    EXPECT_EQ(WaitHeld(key, 1), 1u) << key;
  }
  EXPECT_EQ(Held("many/f025"), 0u);  // beyond the 4
  // What a host tier holds is skipped: of f023..f026, f023 and f024 are in L1.
  p->OnOpen(Obj("many/f022"));
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 4u + 2u);
  // At the end of the listing: f039 is followed by g000, too big to be queued.
  p->OnOpen(Obj("many/f038"));
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 4u + 2u + 1u);
  EXPECT_EQ(WaitHeld("many/f039", 1), 1u);
  EXPECT_EQ(Held("many/g000"), 0u);
  // A big file neither counts nor triggers.
  auto fresh = Make();
  fresh->OnOpen(Obj("many/g000"));
  fresh->OnOpen(Obj("many/g000"));
  EXPECT_EQ(fresh->Stats().next_file_prefetches.load(), 0u);
  // 0 turns it off.
  options_.next_files = 0;
  auto off = Make();
  off->OnOpen(Obj("many/f001"));
  off->OnOpen(Obj("many/f002"));
  off->OnOpen(Obj("many/f003"));
  EXPECT_EQ(off->Stats().next_file_prefetches.load(), 0u);
  EXPECT_EQ(Held("many/f004"), 0u);
}

TEST_F(PrefetcherTest, NextFilesStepAsideWhileTheLoaderNamesWhatComesNext) {
  std::atomic<bool> guided{true};
  options_.guided = [&guided] { return guided.load(); };
  auto p = Make();
  p->OnOpen(Obj("many/f010"));
  p->OnOpen(Obj("many/f020"));  // the pattern, but a list job names the order: no guess
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 0u);
  EXPECT_EQ(Held("many/f021"), 0u);
  guided = false;  // the list job ended
  p->OnOpen(Obj("many/f030"));
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 4u);
  EXPECT_EQ(WaitHeld("many/f031", 1), 1u);
}

// Each window of kProvenWindow counted opens tells the cache whether the guesses are read: at
// least 1/kProvenShare of the opened files were held already.
TEST_F(PrefetcherTest, GuessesAreProvenWhenEnoughOpensFindTheirFileHeld) {
  options_.guided = [] { return true; };  // no guesses of its own: what is held is set here
  constexpr uint64_t kWindow = Prefetcher::kProvenWindow;
  constexpr uint64_t kEnough = kWindow / Prefetcher::kProvenShare;
  static_assert(kEnough > 1 && kEnough < 30);
  for (uint64_t i = 0; i < kEnough; ++i) {  // f000.. in L1
    const std::string key = fmt::format("many/f{:03d}", i);
    cache_->Prefetch(Obj(key), 0, 1);
    ASSERT_EQ(WaitHeld(key, 1), 1u) << key;
  }
  auto p = Make();
  auto window = [&](uint64_t held) {  // one window's opens, `held` of them of held files
    for (uint64_t i = 0; i < kWindow; ++i) {
      p->OnOpen(Obj(fmt::format("many/f{:03d}", i < held ? i : 30 + i % 10)));
    }
  };
  p->OnOpen(Obj("many/f039"));  // the directory's first open: not counted
  EXPECT_EQ(p->Stats().next_file_opens.load(), 0u);
  window(0);
  EXPECT_FALSE(p->GuessesProven());
  EXPECT_EQ(p->Stats().next_file_opens.load(), kWindow);
  EXPECT_EQ(p->Stats().next_file_hits.load(), 0u);
  window(kEnough - 1);  // not yet
  EXPECT_FALSE(p->GuessesProven());
  window(kEnough);
  EXPECT_TRUE(p->GuessesProven());
  EXPECT_EQ(p->Stats().next_file_hits.load(), 2 * kEnough - 1);
  p->OnOpen(Obj("many/f030"));  // within a window nothing changes
  EXPECT_TRUE(p->GuessesProven());
  window(0);  // the next window decides anew
  EXPECT_FALSE(p->GuessesProven());
  EXPECT_EQ(p->Stats().next_file_opens.load(), 4 * kWindow + 1);
}

TEST_F(PrefetcherTest, AWarmDirectoryIsLookedAtOnlyNowAndThen) {
  for (int i = 0; i < 40; ++i) {  // every small file of many/ in L1
    const std::string key = fmt::format("many/f{:03d}", i);
    cache_->Prefetch(Obj(key), 0, 1);
    ASSERT_EQ(WaitHeld(key, 1), 1u) << key;
  }
  auto p = Make();
  p->OnOpen(Obj("many/f000"));
  p->OnOpen(Obj("many/f001"));  // the first look: f002..f005 all held, the directory is warm
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 0u);
  // Opens of held files do not look: f011, right after f010, stays out.
  cache_->Evict(Obj("many/f011"));
  p->OnOpen(Obj("many/f010"));
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 0u);
  // An open of a file no host tier holds looks at once: f021 is queued.
  cache_->Evict(Obj("many/f020"));
  cache_->Evict(Obj("many/f021"));
  p->OnOpen(Obj("many/f020"));
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 1u);
  EXPECT_EQ(WaitHeld("many/f021", 1), 1u);
  // That look queued something, so the next open looks too (f026..f029 held: warm again).
  p->OnOpen(Obj("many/f025"));
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 1u);
  // Every kWarmDirectoryRecheck + 1-th open of a held file looks again: then f011 is queued.
  for (uint32_t i = 0; i < Prefetcher::kWarmDirectoryRecheck; ++i) {
    p->OnOpen(Obj("many/f010"));
  }
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 1u);
  EXPECT_EQ(Held("many/f011"), 0u);
  p->OnOpen(Obj("many/f010"));
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 2u);
  EXPECT_EQ(WaitHeld("many/f011", 1), 1u);
}

// Reads at blocks 30, 10, 20, 35, ...: each a seek, none held.
void RandomMisses(Prefetcher* p, Prefetcher::Stream* s, int n, uint64_t blocks) {
  for (int i = 0; i < n; ++i) {
    p->OnRead(s, ((30 + 17 * static_cast<uint64_t>(i)) % blocks) * kBs + 100, 1000);
  }
}

TEST_F(PrefetcherTest, RandomMissesHydrateTheRestOfTheFileInBoundedSteps) {
  auto p = Make();
  Prefetcher::Stream s(Obj("big.bin"));
  p->OnRead(&s, 30 * kBs, 1000);
  p->OnRead(&s, 10 * kBs, 1000);
  p->OnRead(&s, 20 * kBs, 1000);
  EXPECT_EQ(p->Stats().random_hydrations.load(), 0u);  // three misses: not yet
  EXPECT_EQ(p->Stats().readahead_requests.load(), 0u);
  EXPECT_EQ(origin_.read_calls(), 0u);
  origin_.HoldReads();
  p->OnRead(&s, 35 * kBs, 1000);  // the fourth: two runs from the start (blocks 0..7)
  EXPECT_EQ(p->Stats().random_hydrations.load(), 1u);
  origin_.WaitForBlockedReads(2);  // one origin request per run of 4 blocks
  // While nothing lands, more reads ask for nothing more: 8 blocks is the bound.
  for (uint64_t i = 0; i < 5; ++i) p->OnRead(&s, (i * 7 % 40) * kBs, 1000);
  EXPECT_EQ(origin_.read_calls(), 2u);
  origin_.ReleaseReads();
  EXPECT_EQ(WaitHeld("big.bin", 8), 8u);
  for (uint64_t b = 0; b < 8; ++b) EXPECT_TRUE(HoldsBlock("big.bin", b)) << b;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a window for a wrong fetch
  EXPECT_EQ(Held("big.bin"), 8u);                              // reads drive it: none since
  // Each read now moves the cursor past what landed and asks for 8 blocks more, to the end.
  for (uint64_t want = 16; want <= kBigBlocks; want += 8) {
    p->OnRead(&s, 3 * kBs, 1000);  // a hit, still pumps
    EXPECT_EQ(WaitHeld("big.bin", want), want);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a window for a wrong fetch
    EXPECT_EQ(Held("big.bin"), want);
  }
  const uint64_t calls = origin_.read_calls();
  EXPECT_EQ(calls, kBigBlocks / 4);  // whole runs, each block once
  // At the end it stops for good, also after more misses.
  RandomMisses(p.get(), &s, 8, kBigBlocks);
  EXPECT_EQ(origin_.read_calls(), calls);
  EXPECT_EQ(p->Stats().random_hydrations.load(), 1u);
  EXPECT_NE(cache_->StatsText().find("readahead.dropped=0"), std::string::npos)
      << cache_->StatsText();
}

// A cache of 256 KiB blocks (reads under 128 KiB are projected, TieredCache::ReadsSparse) and
// an object `name` of `blocks` blocks at the origin.
constexpr uint64_t kProjBlock = 256 << 10;
// `capacity`: its one host tier's (0: the tier's default).
std::unique_ptr<TieredCache> OpenProjectedCache(FakeBlobStore* origin, FakeClock* clock,
                                                const std::string& name, uint64_t blocks = 16,
                                                uint64_t capacity = 0) {
  TieredCacheOptions co;
  co.block_size = kProjBlock;
  co.prefetch_threads = 2;
  co.small_object_bytes = 0;
  std::vector<std::unique_ptr<Tier>> tiers;
  MemoryTierOptions l1;
  if (capacity > 0) l1.capacity_bytes = capacity;
  tiers.push_back(NewMemoryTier(l1));
  auto cache = TieredCache::Open(co, std::move(tiers), origin, clock);
  EXPECT_OK(cache);
  origin->PutObject(name, Pattern(blocks * kProjBlock, 6));
  return cache.ok() ? std::move(*cache) : nullptr;
}

TEST_F(PrefetcherTest, SmallProjectedMissesRestartTheHydrationCount) {
  constexpr uint64_t kBlock = kProjBlock;
  auto cache = OpenProjectedCache(&origin_, &clock_, "cols.bin");
  ASSERT_NE(cache, nullptr);
  ObjectRef obj = Obj("cols.bin");
  ASSERT_TRUE(cache->ReadsSparse(obj, 0, 64 << 10));
  Prefetcher p(options_, cache.get(), catalog_.get());
  Prefetcher::Stream s(obj);
  // A column reader: scattered 16-64 KiB ranges, with a larger read now and then (the kernel's
  // readahead), and ranges a block apart (not a scan for a projected read): never hydrated.
  // (The small ones read under a third of the file.)
  for (uint64_t i = 0; i < 40; ++i) {
    const uint64_t size = i % 3 == 2 ? (112 << 10) : ((16 + i % 49) << 10);
    p.OnRead(&s, ((i * 37) % 60) * (64 << 10) + 4096, size);
  }
  EXPECT_EQ(p.Stats().random_hydrations.load(), 0u);
  EXPECT_EQ(p.Stats().readahead_requests.load(), 0u);
  // Four random misses of 112 KiB samples in a row (a ResNet-50 record file): hydrated.
  ASSERT_TRUE(cache->ReadsSparse(obj, 0, 114688));  // projected, yet a dense reader's size
  for (uint64_t b : {9u, 3u, 12u, 6u}) p.OnRead(&s, b * kBlock + 8192, 114688);
  EXPECT_EQ(p.Stats().random_hydrations.load(), 1u);
}

// A handle that reads from its start reads whole (ReadHint::kWhole) until it seeks; one whose
// first read is elsewhere is a range reader from the start.
TEST_F(PrefetcherTest, AHandleIsARangeReaderOnceItSeeks) {
  auto p = Make();
  ObjectRef obj = Obj("big.bin");
  Prefetcher::Stream whole(obj);
  p->OnRead(&whole, 0, kBs);
  p->OnRead(&whole, kBs, 2 * kBs);
  EXPECT_EQ(whole.Hint(), ReadHint::kWhole);
  p->OnRead(&whole, 20 * kBs, kBs);
  EXPECT_EQ(whole.Hint(), ReadHint::kRanges);
  p->OnRead(&whole, 21 * kBs, kBs);  // sequential again: still a range reader
  EXPECT_EQ(whole.Hint(), ReadHint::kRanges);
  Prefetcher::Stream ranges(obj);
  p->OnRead(&ranges, 5 * kBs, kBs);
  EXPECT_EQ(ranges.Hint(), ReadHint::kRanges);
}

// Small files read in ranges (a column reader of a directory of Parquet files) are not guesses
// to prefetch: once a handle there told it reads ranges, the next files are not queued, until a
// handle reads its file from the start again.
TEST_F(PrefetcherTest, ARangeReaderOfSmallFilesGetsNoNextFiles) {
  auto p = Make();
  auto open_and_read = [&](int i, uint64_t offset) {
    ObjectRef o = Obj(fmt::format("many/f{:03d}", i));
    p->OnOpen(o);
    Prefetcher::Stream s(o);
    p->OnRead(&s, offset, 1);
  };
  open_and_read(10, 1);  // (f010..f039 hold two bytes)
  open_and_read(11, 1);
  open_and_read(12, 1);
  EXPECT_EQ(p->Stats().next_file_prefetches.load(), 0u);
  open_and_read(13, 0);  // read from its start: the next open looks again
  open_and_read(14, 0);
  EXPECT_GT(p->Stats().next_file_prefetches.load(), 0u);
}

// A column reader's scattered 16-64 KiB ranges count by their bytes: a quarter of a file is not
// hydrated however many reads it takes (here more than kDenseProjectedMisses); a reader that
// goes on past a third of the file is.
TEST_F(PrefetcherTest, RangesHydrateAFileOnceTheyReadAThirdOfIt) {
  auto cache = OpenProjectedCache(&origin_, &clock_, "cols.bin", 256);  // 64 MiB
  ASSERT_NE(cache, nullptr);
  ObjectRef obj = Obj("cols.bin");
  const uint64_t size = obj.info.size;
  Prefetcher p(options_, cache.get(), catalog_.get());
  Prefetcher::Stream s(obj);
  const auto pieces = testing::ColumnRanges(size, 1, 7);
  uint64_t read = 0;
  size_t k = 0;
  for (; read + pieces[k].second <= size / 4; ++k) {
    ASSERT_TRUE(cache->ReadsSparse(obj, pieces[k].first, pieces[k].second));
    p.OnRead(&s, pieces[k].first, pieces[k].second);
    read += pieces[k].second;
  }
  EXPECT_GT(k, Prefetcher::kDenseProjectedMisses);
  EXPECT_EQ(p.Stats().random_hydrations.load(), 0u);
  EXPECT_EQ(p.Stats().readahead_requests.load(), 0u);
  for (; 5 * read < 2 * size; ++k) {  // on to 40%
    p.OnRead(&s, pieces[k].first, pieces[k].second);
    read += pieces[k].second;
  }
  EXPECT_EQ(p.Stats().random_hydrations.load(), 1u);
}

TEST_F(PrefetcherTest, ADenseRandomReaderOfSmallProjectedReadsIsHydratedAfterAWhile) {
  constexpr uint64_t kBlock = kProjBlock;
  auto cache = OpenProjectedCache(&origin_, &clock_, "dense.bin");
  ASSERT_NE(cache, nullptr);
  ObjectRef obj = Obj("dense.bin");
  ASSERT_TRUE(cache->ReadsSparse(obj, 0, 4096));
  Prefetcher p(options_, cache.get(), catalog_.get());
  Prefetcher::Stream s(obj);
  // 4 KiB random reads (fio randread): each is projected and misses; not hydrated at first...
  uint64_t at = 12345;
  auto next = [&] { return (at = at * 6364136223846793005ULL + 1442695040888963407ULL) >> 40; };
  const uint64_t pages = 16 * kBlock / 4096;
  for (uint64_t i = 0; i + 1 < Prefetcher::kDenseProjectedMisses; ++i) {
    p.OnRead(&s, (next() % pages) * 4096, 4096);
  }
  EXPECT_EQ(p.Stats().random_hydrations.load(), 0u);
  // ... but the reader keeps on: after kDenseProjectedMisses of them the file is hydrated.
  p.OnRead(&s, (next() % pages) * 4096, 4096);
  EXPECT_EQ(p.Stats().random_hydrations.load(), 1u);
}

// A file the host tiers cannot keep while a random reader comes back to it is not hydrated,
// however many misses: the files hydrating at once take at most half of the host tier that holds
// the most.
TEST_F(PrefetcherTest, AFileTheHostTiersCannotKeepIsNotHydrated) {
  constexpr uint64_t kBlocks = 16;
  uint64_t at = 4242;
  auto next = [&] { return (at = at * 6364136223846793005ULL + 1442695040888963407ULL) >> 40; };
  const uint64_t pages = kBlocks * kProjBlock / 4096;
  auto misses = [&](Prefetcher* p, Prefetcher::Stream* s, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) p->OnRead(s, (next() % pages) * 4096, 4096);
  };
  {  // a tier of twice the file less one block: never
    auto cache =
        OpenProjectedCache(&origin_, &clock_, "big4k.bin", kBlocks, (2 * kBlocks - 1) * kProjBlock);
    ASSERT_NE(cache, nullptr);
    Prefetcher p(options_, cache.get(), catalog_.get());
    Prefetcher::Stream s(Obj("big4k.bin"));
    misses(&p, &s, 4 * Prefetcher::kDenseProjectedMisses);
    EXPECT_EQ(p.Stats().random_hydrations.load(), 0u);
    EXPECT_EQ(p.Stats().readahead_requests.load(), 0u);
  }
  // Twice the file: it is; a second file of that size waits until the first one's readers are
  // gone, then is hydrated at its next miss.
  auto cache =
      OpenProjectedCache(&origin_, &clock_, "big4k.bin", kBlocks, 2 * kBlocks * kProjBlock);
  ASSERT_NE(cache, nullptr);
  origin_.PutObject("other4k.bin", Pattern(kBlocks * kProjBlock, 8));
  Prefetcher p(options_, cache.get(), catalog_.get());
  auto first = std::make_unique<Prefetcher::Stream>(Obj("big4k.bin"));
  misses(&p, first.get(), Prefetcher::kDenseProjectedMisses + 32);  // (a few pages twice)
  EXPECT_EQ(p.Stats().random_hydrations.load(), 1u);
  Prefetcher::Stream second(Obj("other4k.bin"));
  misses(&p, &second, 2 * Prefetcher::kDenseProjectedMisses);
  EXPECT_EQ(p.Stats().random_hydrations.load(), 1u);
  first.reset();
  misses(&p, &second, 8);
  EXPECT_EQ(p.Stats().random_hydrations.load(), 2u);
}

// fio's 4 jobs, or a loader's workers, each open the file: their misses add up, and the file is
// hydrated once, each block fetched once, driven by the reads of any of them.
TEST_F(PrefetcherTest, StreamsOfOneFileAddUpTheirMissesAndShareOneHydration) {
  constexpr uint64_t kBlock = kProjBlock;
  auto cache = OpenProjectedCache(&origin_, &clock_, "dense.bin");
  ASSERT_NE(cache, nullptr);
  ObjectRef obj = Obj("dense.bin");
  Prefetcher p(options_, cache.get(), catalog_.get());
  std::vector<std::unique_ptr<Prefetcher::Stream>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(std::make_unique<Prefetcher::Stream>(obj));
  uint64_t at = 777;
  auto next = [&] { return (at = at * 6364136223846793005ULL + 1442695040888963407ULL) >> 40; };
  const uint64_t pages = 16 * kBlock / 4096;
  for (uint64_t i = 0; i + 1 < Prefetcher::kDenseProjectedMisses; ++i) {
    p.OnRead(streams[i % 4].get(), (next() % pages) * 4096, 4096);
  }
  EXPECT_EQ(p.Stats().random_hydrations.load(), 0u);
  EXPECT_EQ(p.Stats().readahead_requests.load(), 0u);
  auto sparse_fetches = [&] {
    const std::string text = cache->StatsText();
    const size_t k = text.find("sparse.fetches=");
    return k == std::string::npos ? ~0ULL : std::stoull(text.substr(k + 15));
  };
  origin_.ResetCounters();
  const uint64_t sparse_before = sparse_fetches();
  p.OnRead(streams[3].get(), (next() % pages) * 4096, 4096);  // the 256th over the four
  EXPECT_EQ(p.Stats().random_hydrations.load(), 1u);
  // Reads through any stream drive it to the end; no stream starts a second one.
  testing::Eventually(
      [&] {
        if (cache->HostHolds(obj, 0, 16 * kBlock)) return true;
        for (auto& s : streams) p.OnRead(s.get(), (next() % pages) * 4096, 4096);
        return false;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(1));
  ASSERT_TRUE(cache->HostHolds(obj, 0, 16 * kBlock));
  EXPECT_EQ(p.Stats().random_hydrations.load(), 1u);
  // Since: one origin request per block at most for the hydration's runs, plus the reads' own
  // projected fetches of blocks not yet landed.
  EXPECT_LE(origin_.read_calls(), 16u + (sparse_fetches() - sparse_before));
  EXPECT_EQ(p.Stats().random_hydrations.load(), 1u);
}

TEST_F(PrefetcherTest, HydrationSkipsHeldBlocksAndEndsAtAShortLastBlock) {
  auto p = Make();
  ObjectRef obj = Obj("eight.bin");
  cache_->Prefetch(obj, 0, 2);  // blocks 0 and 1 already held
  ASSERT_EQ(WaitHeld("eight.bin", 2), 2u);
  origin_.ResetCounters();
  Prefetcher::Stream s(obj);
  for (uint64_t b : {7u, 2u, 5u, 3u}) p->OnRead(&s, b * kBs + 100, 1000);  // four seeks that miss
  EXPECT_EQ(p->Stats().random_hydrations.load(), 1u);
  EXPECT_EQ(WaitHeld("eight.bin", 8), 8u);  // blocks 2..7 (two runs, capped at 8 outstanding)
  EXPECT_EQ(origin_.read_calls(), 2u);
  std::string got(8 * kBs - 10, '\0');
  auto n = tierfs::testing::ReadInto(*cache_, obj, 0, std::as_writable_bytes(std::span(got)));
  ASSERT_OK(n);
  EXPECT_EQ(got, Pattern(8 * kBs - 10, 5));
}

TEST_F(PrefetcherTest, SequentialReadersHitsSmallFilesAndZeroDoNotHydrate) {
  options_.readahead_max_bytes = 0;  // nothing held by readahead: every read below misses
  auto p = Make();
  Prefetcher::Stream seq(Obj("big.bin"));
  for (uint64_t off = 0; off < kBigBlocks * kBs; off += kBs / 2) p->OnRead(&seq, off, kBs / 2);
  Prefetcher::Stream small(Obj("seven.bin"));
  RandomMisses(p.get(), &small, 8, 7);
  EXPECT_EQ(p->Stats().random_hydrations.load(), 0u);
  EXPECT_EQ(origin_.read_calls(), 0u);
  // Random reads that hit: eight.bin fully held first (two runs: two origin requests).
  ObjectRef eight = Obj("eight.bin");
  cache_->Prefetch(eight, 0, 8);
  ASSERT_EQ(WaitHeld("eight.bin", 8), 8u);
  Prefetcher::Stream hits(eight);
  RandomMisses(p.get(), &hits, 8, 8);
  EXPECT_EQ(p->Stats().random_hydrations.load(), 0u);
  // Off.
  options_.random_hydrate_misses = 0;
  auto off = Make();
  Prefetcher::Stream r(Obj("big.bin"));
  RandomMisses(off.get(), &r, 8, kBigBlocks);
  EXPECT_EQ(off->Stats().random_hydrations.load(), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a window for a wrong fetch
  EXPECT_EQ(Held("big.bin"), 0u);
  EXPECT_EQ(Held("seven.bin"), 0u);
  EXPECT_EQ(origin_.read_calls(), 2u);
}

}  // namespace
}  // namespace tierfs
