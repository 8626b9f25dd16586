// Projected reads at the cache's level: what column readers of one object cost at the origin
// (bytes per byte read, by the share of the object they read), and the whole-block fetches of a
// block with sparse entries (dense completion, readahead) taking only the gaps between them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/eventually.h"
#include "tests/testing/read_into.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using testing::ColumnRanges;
using testing::Eventually;
using testing::FakeBlobStore;
using testing::ParseStats;
using testing::Pattern;
using testing::ReadInto;

constexpr uint64_t kBlock = 1 << 20;

// The daemon's defaults: 1 MiB blocks, reads of up to 128 KiB projected; an L1 that holds it all.
class ProjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.block_size = kBlock;
    options_.prefetch_threads = 2;
    options_.small_object_bytes = 4 << 20;
    options_.sparse_read_max = 128 << 10;
  }

  std::unique_ptr<TieredCache> OpenCache() {
    std::vector<std::unique_ptr<Tier>> tiers;
    MemoryTierOptions m;
    m.capacity_bytes = 256 << 20;
    m.shards = 2;
    tiers.push_back(NewMemoryTier(m));
    auto c = TieredCache::Open(options_, std::move(tiers), &origin_, &clock_);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  ObjectRef Put(const std::string& key, const std::string& data) {
    origin_.PutObject(key, data);
    ObjectRef o{key, *origin_.Head(key)};
    origin_.ResetCounters();
    return o;
  }

  static std::string ReadAll(TieredCache* c, const ObjectRef& o, uint64_t off, uint64_t len) {
    std::string s(len, '\0');
    Result<size_t> n = ReadInto(*c, o, off, std::as_writable_bytes(std::span(s)));
    EXPECT_OK(n);
    if (!n.ok()) return "<error>";
    s.resize(*n);
    return s;
  }

  // Reads six 40,000-byte ranges 170,000 bytes apart of each of `blocks` (sparse entries of
  // 240 KiB a block, with six gaps between them); true when every byte was right.
  static bool ReadSixRanges(TieredCache* c, const ObjectRef& o, const std::string& data,
                            std::initializer_list<uint64_t> blocks) {
    for (uint64_t b : blocks) {
      for (uint64_t k = 0; k < 6; ++k) {
        const uint64_t off = b * kBlock + k * 170000 + 1000;
        if (ReadAll(c, o, off, 40000) != data.substr(off, 40000)) return false;
      }
    }
    return true;
  }

  FakeBlobStore origin_{"fake://bucket"};
  FakeClock clock_;
  TieredCacheOptions options_;
};

struct ShareCase {
  double share;
  double max_ratio;  // origin bytes per byte read
};

class ProjectionShareTest : public ProjectionTest,
                            public ::testing::WithParamInterface<ShareCase> {};

// Every range exact; the origin moves about what was read, never a byte twice but for the pages
// a range shares with one read before it and the few a joined gap fetches again.
TEST_P(ProjectionShareTest, ScatteredRangesMoveAboutWhatTheyRead) {
  const std::string data = Pattern(16 * kBlock, 9);
  const ObjectRef obj = Put("cols.parquet", data);
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  uint64_t read = 0;
  const auto ranges = ColumnRanges(data.size(), GetParam().share, 11);
  for (const auto& [off, n] : ranges) {
    ASSERT_EQ(ReadAll(c.get(), obj, off, n), data.substr(off, n)) << off << "+" << n;
    read += n;
  }
  const double ratio =
      static_cast<double>(origin_.bytes_read()) / static_cast<double>(std::max<uint64_t>(1, read));
  EXPECT_LE(ratio, GetParam().max_ratio)
      << ranges.size() << " reads of " << read << " bytes: " << c->StatsText();
  EXPECT_LE(origin_.bytes_read_twice(obj.key), origin_.bytes_read() / 20);
  // Again: all from the host tiers.
  const uint64_t calls = origin_.read_calls();
  for (const auto& [off, n] : ranges) ASSERT_EQ(ReadAll(c.get(), obj, off, n), data.substr(off, n));
  EXPECT_EQ(origin_.read_calls(), calls);
}

INSTANTIATE_TEST_SUITE_P(Shares, ProjectionShareTest,
                         ::testing::Values(ShareCase{0.25, 1.15}, ShareCase{0.5, 1.15},
                                           ShareCase{0.9, 1.15}));

// Readahead asked for gaps (the hydration of a reader of ranges) of blocks with sparse entries
// fetches only what they lack; blocks without, or with only a few pages (less than an eighth of
// the block), go whole in one request for their stretch of the run.
TEST_F(ProjectionTest, ReadaheadOfBlocksWithEntriesFetchesOnlyTheirGaps) {
  const std::string data = Pattern(8 * kBlock, 3);
  const ObjectRef obj = Put("cols.parquet", data);
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  // Blocks 2 and 3: 240 KiB in six ranges each; block 4: two pages.
  ASSERT_TRUE(ReadSixRanges(c.get(), obj, data, {2, 3}));
  ASSERT_EQ(ReadAll(c.get(), obj, 4 * kBlock + 500000, 5000),
            data.substr(4 * kBlock + 500000, 5000));
  origin_.ResetCounters();
  c->Prefetch(obj, 1, 5, BlockFill::kGaps);  // blocks 1..5
  ASSERT_TRUE(Eventually([&] { return c->HostHolds(obj, kBlock, 5 * kBlock); }));
  auto st = ParseStats(c->StatsText());
  EXPECT_EQ(st["sparse.gap_fills"], 2u);
  // Blocks 2 and 3: their gaps (6 each); block 1 alone, blocks 4 and 5 together.
  EXPECT_EQ(origin_.read_calls(), st["sparse.gap_requests"] + 2);
  EXPECT_EQ(st["sparse.gap_requests"], 12u);
  EXPECT_EQ(origin_.bytes_read(), 3 * kBlock + st["sparse.gap_bytes"]);
  EXPECT_EQ(origin_.bytes_read_twice(obj.key), 0u);  // (since the reset)
  EXPECT_EQ(ReadAll(c.get(), obj, kBlock, 5 * kBlock), data.substr(kBlock, 5 * kBlock));
  // Blocks 2 and 3 do not keep their pages twice: L1 holds the five blocks and block 4's two
  // pages (that block went whole with its run; its entries stay).
  EXPECT_EQ(ParseStats(c->StatsText())["l1.used"], 5 * kBlock + 2 * 4096);
}

// A block filled from its gaps is claimed alone: while its gaps are on their way (several at
// once), a reader of a range of the next block of the same run is not held behind them; it
// fetches its range itself (and that block's fill later takes what its entries lack).
TEST_F(ProjectionTest, ReadersOfTheNextBlockDoNotWaitForABlocksGaps) {
  const std::string data = Pattern(8 * kBlock, 5);
  const ObjectRef obj = Put("cols.parquet", data);
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(ReadSixRanges(c.get(), obj, data, {2, 3}));
  origin_.ResetCounters();
  origin_.HoldReads();
  c->Prefetch(obj, 2, 2, BlockFill::kGaps);  // one run: blocks 2 and 3
  // Block 2's six gaps, four at a time.
  ASSERT_TRUE(Eventually([&] { return origin_.blocked_reads() == 4; }));
  const uint64_t off = 3 * kBlock + 90000;  // between block 3's entries
  auto read = std::async(std::launch::async, [&] { return ReadAll(c.get(), obj, off, 30000); });
  const bool own_fetch = Eventually([&] { return origin_.blocked_reads() == 5; });
  origin_.ReleaseReads();
  EXPECT_TRUE(own_fetch) << "the read of block 3 waited for block 2's gaps";
  EXPECT_EQ(read.get(), data.substr(off, 30000));
  ASSERT_TRUE(Eventually([&] { return c->HostHolds(obj, 2 * kBlock, 2 * kBlock); }));
  EXPECT_EQ(ReadAll(c.get(), obj, 2 * kBlock, 2 * kBlock), data.substr(2 * kBlock, 2 * kBlock));
  // Nothing twice but, at most, the reader's own pages: block 3's fill may start while the
  // reader's fetch is still on its way (released together), and take that gap too.
  EXPECT_LE(origin_.bytes_read_twice(obj.key), (122880u - 86016u));  // pages 21..29 of block 3
}

// Plain readahead (a sequential reader's, a dense random reader's hydration) takes blocks with
// sparse entries whole, with their run: one request.
TEST_F(ProjectionTest, PlainReadaheadTakesBlocksWithEntriesWithTheirRun) {
  const std::string data = Pattern(8 * kBlock, 3);
  const ObjectRef obj = Put("cols.parquet", data);
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  for (uint64_t k = 0; k < 6; ++k) {
    const uint64_t off = 2 * kBlock + k * 170000 + 1000;
    ASSERT_EQ(ReadAll(c.get(), obj, off, 40000), data.substr(off, 40000));
  }
  origin_.ResetCounters();
  c->Prefetch(obj, 1, 3);
  ASSERT_TRUE(Eventually([&] { return c->HostHolds(obj, kBlock, 3 * kBlock); }));
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(ParseStats(c->StatsText())["sparse.gap_fills"], 0u);
  EXPECT_EQ(ReadAll(c.get(), obj, kBlock, 3 * kBlock), data.substr(kBlock, 3 * kBlock));
}

// A range the sparse entries hold is served from them while the block is being fetched whole
// (HostHolds says so, and fuse/ answers such a read at once: it must not wait on the network).
TEST_F(ProjectionTest, EntriesAreServedWhileTheirBlockIsFetchedWhole) {
  const std::string data = Pattern(8 * kBlock, 2);
  const ObjectRef obj = Put("cols.parquet", data);
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(ReadAll(c.get(), obj, 3 * kBlock + 5000, 40000), data.substr(3 * kBlock + 5000, 40000));
  origin_.HoldReads();
  c->Prefetch(obj, 3, 1);
  origin_.WaitForBlockedReads(1);
  EXPECT_TRUE(c->HostHolds(obj, 3 * kBlock + 8192, 16384));
  auto read = std::async(std::launch::async,
                         [&] { return ReadAll(c.get(), obj, 3 * kBlock + 8192, 16384); });
  const bool answered = read.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  origin_.ReleaseReads();
  EXPECT_TRUE(answered) << "the read waited for the block's fetch";
  EXPECT_EQ(read.get(), data.substr(3 * kBlock + 8192, 16384));
}

// Gaps around entries smaller than kGapJoinBytes are fetched as one request (fetching a few
// held pages again costs less than a round trip); however scattered the entries, a block takes
// at most kMaxGapRequests requests.
TEST_F(ProjectionTest, GapsCloseTogetherAreJoinedAndRequestsBounded) {
  const std::string data = Pattern(8 * kBlock, 4);
  const ObjectRef obj = Put("cols.parquet", data);
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  auto read = [&](uint64_t off, uint64_t n) {
    ASSERT_EQ(ReadAll(c.get(), obj, off, n), data.substr(off, n)) << off;
  };
  // Block 4: 20 KiB every 64 KiB: 16 gaps, kept apart.
  for (uint64_t p = 0; p < 256; p += 16) read(4 * kBlock + p * 4096, 20480);
  // Block 5: a page every 32 KiB: one request over all its gaps.
  for (uint64_t p = 0; p < 256; p += 8) read(5 * kBlock + p * 4096 + 10, 4000);
  // Block 6: 16 KiB every 32 KiB: 32 gaps, more than kMaxGapRequests: joined too.
  for (uint64_t p = 0; p < 256; p += 8) read(6 * kBlock + p * 4096, 16384);
  origin_.ResetCounters();
  c->Prefetch(obj, 4, 3, BlockFill::kGaps);
  ASSERT_TRUE(Eventually([&] { return c->HostHolds(obj, 4 * kBlock, 3 * kBlock); }));
  auto st = ParseStats(c->StatsText());
  EXPECT_EQ(st["sparse.gap_fills"], 3u);
  EXPECT_EQ(st["sparse.gap_requests"], 16u + 1 + 1);
  EXPECT_EQ(origin_.read_calls(), 18u);
  // Fetched again: block 5's 31 pages inside its one request, block 6's 31 entries of 16 KiB.
  EXPECT_EQ(origin_.bytes_read_twice(obj.key), 0u);  // (counted since the reset: none twice)
  EXPECT_EQ(origin_.bytes_read(), 3 * kBlock - 16 * 20480 - 4096 - 16384);
  read(4 * kBlock, 3 * kBlock);
}

// A gap the origin fails to give: the read fails and nothing is stored whole; the entries stay,
// and the next read completes the block.
TEST_F(ProjectionTest, AFailedGapStoresNothingWhole) {
  const std::string data = Pattern(8 * kBlock, 5);
  const ObjectRef obj = Put("cols.parquet", data);
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(ReadAll(c.get(), obj, 4 * kBlock + 4096, 40960), data.substr(4 * kBlock + 4096, 40960));
  origin_.FailNext(1, Status::IOError("injected"));
  c->Prefetch(obj, 4, 1, BlockFill::kGaps);
  ASSERT_TRUE(Eventually([&] { return origin_.read_calls() >= 2; }));
  EXPECT_FALSE(c->HostHolds(obj, 4 * kBlock, kBlock));
  EXPECT_TRUE(c->HostHolds(obj, 4 * kBlock + 4096, 40960));
  EXPECT_EQ(ReadAll(c.get(), obj, 4 * kBlock, kBlock), data.substr(4 * kBlock, kBlock));
  EXPECT_TRUE(c->HostHolds(obj, 4 * kBlock, kBlock));
}

// A small object (at most small_object_bytes) read from its start is fetched whole at its first
// miss; read by a range reader (ReadHint::kRanges), its small reads are projected like those of a
// large object, and a quarter of it in ranges moves about a quarter of it.
TEST_F(ProjectionTest, ASmallObjectIsProjectedOnlyForARangeReader) {
  const std::string data = Pattern(4 * kBlock, 7);
  const ObjectRef obj = Put("cols/part-0.parquet", data);
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ReadsSparse(obj, kBlock + 5000, 40000));
  EXPECT_TRUE(c->ReadsSparse(obj, kBlock + 5000, 40000, ReadHint::kRanges));
  uint64_t read = 0;
  for (const auto& [off, n] : ColumnRanges(data.size(), 0.25, 5)) {
    auto r = c->Read(obj, off, n, nullptr, ReadHint::kRanges);
    ASSERT_OK(r);
    std::string got;
    for (const auto& sl : *r) {
      got.append(reinterpret_cast<const char*>(sl.block->data().data()) + sl.offset, sl.length);
    }
    ASSERT_EQ(got, data.substr(off, n)) << off;
    read += n;
  }
  EXPECT_LE(origin_.bytes_read() * 10, read * 13);
  EXPECT_EQ(ParseStats(c->StatsText())["fetch.whole_objects"], 0u);
  // Another object of that size read from its start (a FUSE read: with a token): whole, one
  // request.
  const std::string data2 = Pattern(4 * kBlock, 8);
  const ObjectRef obj2 = Put("img/0001.npy", data2);
  CancelToken token;
  ASSERT_OK(c->Read(obj2, 0, 40000, &token));
  EXPECT_TRUE(Eventually([&] { return c->HostHolds(obj2, 0, data2.size()); }));
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(origin_.bytes_read(), data2.size());
}

// The entries of earlier caches (32 KiB chunks, no chunk size in the key) are never taken for
// pages: one that a cache from before holds for chunk 3 of block 2, 4096 bytes (bytes
// 98304..102400 of the block), is not served for page 3 (bytes 12288..16384).
TEST_F(ProjectionTest, AnEntryUnderTheEarlierKeyLayoutIsNotServed) {
  const std::string data = Pattern(8 * kBlock, 6);
  const ObjectRef obj = Put("cols.parquet", data);
  const BlockKey block = MakeBlockKey(origin_.Describe(), obj.key, obj.info, kBlock, 2);
  ASSERT_EQ(BlockKeyHex(block), "fc413536afbd486f99f90dfcf64a4a2d");  // the keys below are its
  // XXH3-128 of "tierfs-chunk", the block key, u64 3, u64 4096 (FORMAT.md before the page size).
  const std::string old_hex = "b99809791bd42c528c8116265f304ba6";
  BlockKey old{};
  for (size_t i = 0; i < old.size(); ++i) {
    old[i] = static_cast<uint8_t>(std::stoul(old_hex.substr(2 * i, 2), nullptr, 16));
  }
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  auto stale = Block::Allocate(4096);
  std::memcpy(stale->mutable_data().data(), data.data() + 2 * kBlock + 98304, 4096);
  stale->set_size(4096);
  ASSERT_OK(c->tiers()[0]->Insert(old, BlockRef(std::move(stale)), Placement{}));
  ASSERT_TRUE(c->tiers()[0]->Contains(old));
  EXPECT_EQ(ReadAll(c.get(), obj, 2 * kBlock + 12288, 4096), data.substr(2 * kBlock + 12288, 4096));
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(origin_.bytes_read(), 4096u);
}

}  // namespace
}  // namespace tierfs
