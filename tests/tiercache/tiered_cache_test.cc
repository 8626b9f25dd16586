// TieredCache over FakeBlobStore, a MemoryTier and a FlashTier (real files in a temp dir,
// through FaultyFlashStore) with the in-memory MetaStore.
#include "tiercache/tiered_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <type_traits>

#include "base/metrics.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/fakes/faulty_flash_store.h"
#include "tests/testing/eventually.h"
#include "tests/testing/read_into.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/single_flight.h"

namespace tierfs {
namespace {

using testing::Eventually;
using testing::FakeBlobStore;
using testing::FaultyFlashStore;
using testing::ParseStats;
using testing::Pattern;

constexpr uint64_t kBs = 4096;

class TieredCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto fs = NewPosixFlashStore(dir_.path(), false);
    ASSERT_OK(fs);
    posix_ = std::move(*fs);
    faulty_ = std::make_unique<FaultyFlashStore>(posix_.get());
    meta_ = NewMemMetaStore();
    l2_options_.capacity_bytes = 1 << 20;
    l2_options_.min_free_bytes = 0;
    options_.block_size = kBs;
    options_.prefetch_threads = 2;
  }

  // L1 + L2 (or only what `with_l1`/`with_l2` ask for).
  std::unique_ptr<TieredCache> OpenCache(bool with_l1 = true, bool with_l2 = true) {
    std::vector<std::unique_ptr<Tier>> tiers;
    if (with_l1) {
      MemoryTierOptions m;
      m.capacity_bytes = 1 << 20;
      m.shards = 2;
      tiers.push_back(NewMemoryTier(m));
    }
    if (with_l2) {
      auto l2 = NewFlashTier(l2_options_, faulty_.get(), meta_.get(), &clock_);
      EXPECT_OK(l2);
      if (!l2.ok()) return nullptr;
      tiers.push_back(std::move(*l2));
    }
    auto c = TieredCache::Open(options_, std::move(tiers), &origin_, &clock_);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  ObjectRef Put(const std::string& key, const std::string& data) {
    origin_.PutObject(key, data);
    ObjectRef o;
    o.key = key;
    o.info = *origin_.Head(key);
    origin_.ResetCounters();
    return o;
  }

  // Puts `data` as `key` and reads it whole once through a cache that is closed again: its
  // blocks are in L2 (files and index) for the next OpenCache().
  ObjectRef PutThroughCache(const std::string& key, const std::string& data) {
    const ObjectRef o = Put(key, data);
    auto c = OpenCache();
    EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
    return o;
  }

  static std::string ReadAll(TieredCache* c, const ObjectRef& o, uint64_t off, uint64_t len) {
    auto r = c->Read(o, off, len);
    EXPECT_OK(r);
    if (!r.ok()) return "<error>";
    std::string s;
    for (const auto& sl : *r) {
      if (sl.file) {  // a file slice (file_slices): read it the way a reply's splice would
        std::string part(sl.length, '\0');
        Status st = sl.file->ReadAt(sl.offset, std::as_writable_bytes(std::span(part)));
        EXPECT_OK(st);
        s += part;
        continue;
      }
      s.append(reinterpret_cast<const char*>(sl.block->data().data()) + sl.offset, sl.length);
    }
    return s;
  }

  std::string BlockFile(const ObjectRef& o, uint64_t index) {
    const std::string hex =
        BlockKeyHex(MakeBlockKey(origin_.Describe(), o.key, o.info.etag, kBs, index));
    return dir_.path() + "/blocks/" + hex.substr(0, 2) + "/" + hex;
  }

  testing::TempDir dir_;
  FakeBlobStore origin_{"fake://bucket"};
  FakeClock clock_;
  std::unique_ptr<FlashStore> posix_;
  std::unique_ptr<FaultyFlashStore> faulty_;
  std::unique_ptr<MetaStore> meta_;
  FlashTierOptions l2_options_;
  TieredCacheOptions options_;
};

TEST_F(TieredCacheTest, ReadsAtEveryBoundary) {
  auto c = OpenCache();
  const std::string data = Pattern(3 * kBs + 100);  // 3 full blocks + a 100-byte last block
  ObjectRef o = Put("obj", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, 0), "");                             // 0 bytes
  EXPECT_EQ(ReadAll(c.get(), o, 0, kBs), data.substr(0, kBs));          // exactly one block
  EXPECT_EQ(ReadAll(c.get(), o, 0, kBs + 1), data.substr(0, kBs + 1));  // one block + 1
  EXPECT_EQ(ReadAll(c.get(), o, kBs - 1, 2), data.substr(kBs - 1, 2));  // straddles
  EXPECT_EQ(ReadAll(c.get(), o, 3 * kBs, kBs), data.substr(3 * kBs));   // last short block
  EXPECT_EQ(ReadAll(c.get(), o, 3 * kBs + 50, 1000), data.substr(3 * kBs + 50));
  EXPECT_EQ(ReadAll(c.get(), o, 0, 1 << 30), data);            // whole, clipped at EOF
  EXPECT_EQ(ReadAll(c.get(), o, data.size(), 10), "");         // at EOF
  EXPECT_EQ(ReadAll(c.get(), o, data.size() + 5000, 10), "");  // past EOF
  auto slices = c->Read(o, kBs - 10, 20);
  ASSERT_OK(slices);
  ASSERT_EQ(slices->size(), 2u);
  EXPECT_EQ((*slices)[0].offset, kBs - 10);
  EXPECT_EQ((*slices)[0].length, 10u);
  EXPECT_EQ((*slices)[1].offset, 0u);
  EXPECT_EQ((*slices)[1].length, 10u);
  // Every block came from the origin once.
  EXPECT_EQ(origin_.read_calls(), 4u);
  EXPECT_EQ(origin_.bytes_read(), data.size());
}

TEST_F(TieredCacheTest, EmptyObjectAndExactMultiple) {
  auto c = OpenCache();
  ObjectRef empty = Put("empty", "");
  EXPECT_EQ(ReadAll(c.get(), empty, 0, 100), "");
  const std::string data = Pattern(2 * kBs, 3);
  ObjectRef o = Put("two", data);
  EXPECT_EQ(ReadAll(c.get(), o, kBs, kBs), data.substr(kBs));
  EXPECT_EQ(ReadAll(c.get(), o, 2 * kBs, 1), "");
  EXPECT_EQ(origin_.read_calls(), 1u);
}

TEST_F(TieredCacheTest, ReadIntoCopies) {
  auto c = OpenCache();
  const std::string data = Pattern(2 * kBs + 7);
  ObjectRef o = Put("obj", data);
  std::string buf(3 * kBs, '\0');
  auto n =
      tierfs::testing::ReadInto(*c, o, 5, {reinterpret_cast<std::byte*>(buf.data()), buf.size()});
  ASSERT_OK(n);
  EXPECT_EQ(*n, data.size() - 5);
  EXPECT_EQ(buf.substr(0, *n), data.substr(5));
}

TEST_F(TieredCacheTest, OriginFetchFillsEveryTierAndL2HitCopiesUp) {
  auto c = OpenCache();
  const std::string data = Pattern(2 * kBs);
  ObjectRef o = Put("obj", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, kBs), data.substr(0, kBs));
  auto res = c->Residency(o);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0], (std::pair<std::string, uint64_t>("l1", 1)));
  EXPECT_EQ(res[1], (std::pair<std::string, uint64_t>("l2", 1)));
  c->tiers()[0]->Erase(MakeBlockKey("fake://bucket", "obj", o.info.etag, kBs, 0));
  EXPECT_EQ(c->Residency(o)[0].second, 0u);
  EXPECT_EQ(ReadAll(c.get(), o, 0, kBs), data.substr(0, kBs));  // L2 hit
  EXPECT_EQ(c->tiers()[1]->Stats().hits, 1u);
  EXPECT_EQ(c->Residency(o)[0].second, 1u);                     // copied up into L1
  EXPECT_EQ(ReadAll(c.get(), o, 0, kBs), data.substr(0, kBs));  // L1 hit
  EXPECT_EQ(c->tiers()[1]->Stats().hits, 1u);
  EXPECT_EQ(origin_.read_calls(), 1u);
}

TEST(SingleFlightTest, ALeaseIsTheLeaderUntilCompletedOrDropped) {
  SingleFlight<int, Result<int>> sf;
  auto lease = sf.TryClaim(1, Status::Internal("dropped"));
  ASSERT_TRUE(lease.has_value());
  EXPECT_TRUE(sf.InFlight(1));
  EXPECT_FALSE(sf.TryClaim(1, Status::Internal("dropped")).has_value());  // one leader per key
  Result<int> waited = 0;
  bool merged = false;
  std::thread waiter([&] {
    waited = sf.Do(
        1, []() -> Result<int> { return 0; }, &merged);
  });
  // Lets it join; nothing observable marks that, and the test holds either way.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  lease->Complete(42);
  waiter.join();
  EXPECT_FALSE(sf.InFlight(1));
  ASSERT_OK(waited);
  EXPECT_EQ(*waited, merged ? 42 : 0);  // joined the lease, or ran fn after it
  {
    auto dropped = sf.TryClaim(2, Status::Internal("dropped"));
    ASSERT_TRUE(dropped.has_value());
  }
  EXPECT_FALSE(sf.InFlight(2));  // a dropped lease releases its key
  EXPECT_EQ(*sf.Do(2, []() -> Result<int> { return 7; }), 7);
}

TEST_F(TieredCacheTest, SingleFlightMergesConcurrentColdReads) {
  auto c = OpenCache();
  const std::string data = Pattern(kBs);
  ObjectRef o = Put("hot", data);
  origin_.SetDelay(std::chrono::milliseconds(200));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      if (ReadAll(c.get(), o, 0, kBs) == data) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 16);
  EXPECT_EQ(origin_.read_calls(), 1u);
  auto stats = ParseStats(c->StatsText());
  EXPECT_EQ(stats["origin.requests"], 1u);
  // Readers that missed L1 while the fetch ran waited on it; with a 200 ms origin, all 15 do.
  EXPECT_EQ(stats["singleflight.merged"], 15u);
}

TEST_F(TieredCacheTest, OriginFailureSurfacesAndCachesNothing) {
  auto c = OpenCache();
  const std::string data = Pattern(kBs * 2);
  ObjectRef o = Put("obj", data);
  origin_.FailNext(1, Status::Unavailable("503"));
  auto r = c->Read(o, 0, kBs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnavailable);
  EXPECT_EQ(c->Residency(o)[0].second, 0u);
  EXPECT_EQ(c->Residency(o)[1].second, 0u);
  EXPECT_EQ(ParseStats(c->StatsText())["origin.errors"], 1u);
  clock_.Advance(options_.origin_failure_ttl);                  // the failure is no longer replayed
  EXPECT_EQ(ReadAll(c.get(), o, 0, kBs), data.substr(0, kBs));  // next read succeeds
}

// The kernel answers a failed readahead FUSE READ with a synchronous READ of the page its reader
// waits on, at once: that read must get the block's error, not start a second fetch (a stalled
// origin held readers for two or three fetch budgets). Once origin_failure_ttl has passed the
// block is fetched again, and a failed readahead no reader saw is never replayed.
TEST_F(TieredCacheTest, ARetryOfAFailedBlockGetsItsErrorWithoutAnotherFetch) {
  options_.fetch_threads = 2;
  // One block per fetch: a small object's whole fetch would also fail block 1 (its reader may
  // join that failing flight instead of fetching on its own).
  options_.small_object_bytes = 0;
  auto c = OpenCache();
  const std::string data = Pattern(4 * kBs);
  ObjectRef o = Put("obj", data);
  for (const bool with_token : {false, true}) {
    SCOPED_TRACE(with_token ? "fetch pool" : "reader's thread");
    CancelToken token;
    const CancelToken* t = with_token ? &token : nullptr;
    origin_.FailNext(1000, Status::TimedOut("stalled"));
    origin_.ResetCounters();
    auto first = c->Read(o, 0, kBs, t);  // the readahead READ
    ASSERT_FALSE(first.ok());
    EXPECT_EQ(first.status().code(), Status::Code::kTimedOut);
    const uint64_t fetches = origin_.read_calls();
    EXPECT_GE(fetches, 1u);
    auto retry = c->Read(o, 0, 10, t);  // the kernel's read_folio READ (one page)
    ASSERT_FALSE(retry.ok());
    EXPECT_EQ(retry.status().code(), Status::Code::kTimedOut);
    EXPECT_EQ(origin_.read_calls(), fetches) << "the retry fetched the block again";
    // Another block is not affected.
    EXPECT_FALSE(c->Read(o, kBs, kBs, t).ok());
    EXPECT_GT(origin_.read_calls(), fetches);
    // The origin is back: after the TTL the block is fetched again.
    origin_.FailNext(0);
    clock_.Advance(options_.origin_failure_ttl);
    EXPECT_EQ(ReadAll(c.get(), o, 0, kBs), data.substr(0, kBs));
    c->Evict(o);
  }
  EXPECT_EQ(ParseStats(c->StatsText())["fetch.failures_replayed"], 2u);

  // A readahead that failed with no reader waiting is not replayed to the reader after it.
  origin_.FailNext(1000, Status::TimedOut("stalled"));
  origin_.ResetCounters();
  c->Prefetch(o, 2, 2);
  ASSERT_TRUE(Eventually([&] { return origin_.read_calls() > 0; }));
  // The run completes its leases after its origin read fails; nothing observable marks that.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  origin_.FailNext(0);
  EXPECT_EQ(ReadAll(c.get(), o, 2 * kBs, kBs), data.substr(2 * kBs, kBs));
}

TEST_F(TieredCacheTest, ZeroOriginFailureTtlFetchesEveryRead) {
  options_.origin_failure_ttl = std::chrono::nanoseconds::zero();
  auto c = OpenCache();
  ObjectRef o = Put("obj", Pattern(kBs));
  origin_.FailNext(2, Status::TimedOut("stalled"));
  EXPECT_FALSE(c->Read(o, 0, kBs).ok());
  EXPECT_FALSE(c->Read(o, 0, kBs).ok());
  EXPECT_EQ(origin_.read_calls(), 2u);
}

TEST_F(TieredCacheTest, ChangedObjectIsFailedPrecondition) {
  auto c = OpenCache();
  ObjectRef o = Put("obj", Pattern(kBs * 2));
  origin_.PutObject("obj", Pattern(kBs * 2, 9));  // new ETag
  auto r = c->Read(o, 0, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition);
  // The new version reads fine and its blocks are distinct from the old version's.
  ObjectRef o2 = o;
  o2.info = *origin_.Head("obj");
  EXPECT_EQ(ReadAll(c.get(), o2, 0, 10), Pattern(kBs * 2, 9).substr(0, 10));
  EXPECT_EQ(c->Residency(o)[0].second, 0u);
}

TEST_F(TieredCacheTest, ShortOriginBlockIsNeverServed) {
  auto c = OpenCache();
  ObjectRef o = Put("obj", Pattern(kBs + 10));
  ObjectRef lying = o;
  lying.info.size = 3 * kBs;  // the handle believes in a bigger object (same ETag)
  auto r = c->Read(lying, 0, 3 * kBs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition);
  auto mid = c->Read(lying, kBs, 10);  // block 1 is short (10 bytes instead of 4096)
  ASSERT_FALSE(mid.ok());
  EXPECT_EQ(mid.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(c->Residency(lying)[0].second, 1u);  // block 0 was fine and cached
  EXPECT_EQ(c->Residency(lying)[1].second, 1u);
}

TEST_F(TieredCacheTest, CorruptL2BlockIsRefetchedFromOrigin) {
  const std::string data = Pattern(kBs);
  ObjectRef o = Put("obj", data);
  {
    auto c = OpenCache();
    EXPECT_EQ(ReadAll(c.get(), o, 0, kBs), data);
  }
  const std::string hex = BlockKeyHex(MakeBlockKey("fake://bucket", "obj", o.info.etag, kBs, 0));
  const std::string path = dir_.path() + "/blocks/" + hex.substr(0, 2) + "/" + hex;
  ASSERT_TRUE(std::filesystem::exists(path));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1234);
    f.put(static_cast<char>(data[1234] ^ 0x01));
  }
  origin_.ResetCounters();
  auto c = OpenCache();  // fresh L1: the read goes to L2
  EXPECT_EQ(ReadAll(c.get(), o, 0, kBs), data);
  EXPECT_EQ(c->tiers()[1]->Stats().corruptions, 1u);
  EXPECT_EQ(origin_.read_calls(), 1u);
  // The refetched block was written back to L2 and is good now.
  EXPECT_EQ(c->Residency(o)[1].second, 1u);
  auto stats = ParseStats(c->StatsText());
  EXPECT_EQ(stats["l2.corruptions"], 1u);
}

TEST_F(TieredCacheTest, SmallReadsOfL2OnlyBlocksReadOneChunk) {
  options_.block_size = 128 << 10;  // four 32 KiB chunks per block
  l2_options_.capacity_bytes = 4 << 20;
  const std::string data = Pattern(3 * (128 << 10) + 1000, 9);
  const ObjectRef o = PutThroughCache("obj", data);
  auto c = OpenCache(/*with_l1=*/false);  // L2 only, from the cache left behind
  const uint64_t reads_before = faulty_->reads();
  EXPECT_EQ(ReadAll(c.get(), o, 200000, 4096), data.substr(200000, 4096));
  EXPECT_EQ(faulty_->reads(), reads_before + 1);
  auto st = ParseStats(c->StatsText());
  EXPECT_EQ(st["l2.bytes"], 4096u);  // one range, not the 128 KiB block
  EXPECT_EQ(st["origin.requests"], 0u);
  // A bad chunk: the range read drops the block and the read goes to the origin, byte-exact.
  {
    std::string hex =
        BlockKeyHex(MakeBlockKey(origin_.Describe(), "obj", o.info.etag, options_.block_size, 0));
    std::fstream f(dir_.path() + "/blocks/" + hex.substr(0, 2) + "/" + hex,
                   std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(100);
    f.put(static_cast<char>(data[100] ^ 1));
  }
  EXPECT_EQ(ReadAll(c.get(), o, 90, 20), data.substr(90, 20));
  st = ParseStats(c->StatsText());
  EXPECT_EQ(st["l2.corruptions"], 1u);
  EXPECT_EQ(st["origin.requests"], 1u);
  // Large reads still take whole blocks (and the tiers above get them).
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
}

TEST_F(TieredCacheTest, RemountServesFromL2WithZeroOriginReads) {
  const std::string data = Pattern(5 * kBs + 3);
  ObjectRef o = PutThroughCache("obj", data);
  origin_.ResetCounters();
  auto c = OpenCache();  // new L1, new FlashTier over the same directory and index
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(origin_.read_calls(), 0u);
  auto stats = ParseStats(c->StatsText());
  EXPECT_EQ(stats["origin.bytes"], 0u);
  EXPECT_EQ(stats["origin.requests"], 0u);
  EXPECT_EQ(stats["l2.hits"], 6u);
}

TEST_F(TieredCacheTest, FileSlicesServeL2HitsFromTheFileAndPromoteOnReuse) {
  options_.file_slices = true;
  options_.promote_hits = 2;
  const std::string data = Pattern(3 * kBs + 5, 4);
  const ObjectRef o = Put("obj", data);
  {
    auto c = OpenCache();
    // Origin fetches are in memory (and fill L1 and L2).
    auto r = c->Read(o, 0, data.size());
    ASSERT_OK(r);
    for (const auto& sl : *r) EXPECT_EQ(sl.file, nullptr);
  }
  auto c = OpenCache();               // fresh L1; L2 after a clean shutdown
  auto r = c->Read(o, kBs - 10, 20);  // the end of block 0 and the start of block 1
  ASSERT_OK(r);
  ASSERT_EQ(r->size(), 2u);
  for (const auto& sl : *r) {
    ASSERT_NE(sl.file, nullptr);
    EXPECT_EQ(sl.block, nullptr);
    EXPECT_EQ(sl.tier, 1);
    EXPECT_EQ(sl.file->length(), kBs);
  }
  EXPECT_EQ((*r)[0].offset, kBs - 10);
  EXPECT_EQ(ReadAll(c.get(), o, kBs - 10, 20), data.substr(kBs - 10, 20));
  // The first hit of each block stayed in L2; the second (ReadAll above) promoted it into L1.
  const BlockKey k0 = MakeBlockKey(origin_.Describe(), "obj", o.info.etag, kBs, 0);
  const BlockKey k2 = MakeBlockKey(origin_.Describe(), "obj", o.info.etag, kBs, 2);
  EXPECT_TRUE(c->tiers()[0]->Contains(k0));
  EXPECT_EQ(ReadAll(c.get(), o, 2 * kBs, 100), data.substr(2 * kBs, 100));
  EXPECT_FALSE(c->tiers()[0]->Contains(k2));
  // Reading on through the block is the same pass, not a reuse; going back is.
  EXPECT_EQ(ReadAll(c.get(), o, 2 * kBs + 200, 100), data.substr(2 * kBs + 200, 100));
  EXPECT_FALSE(c->tiers()[0]->Contains(k2));
  EXPECT_EQ(ReadAll(c.get(), o, 2 * kBs + 50, 10), data.substr(2 * kBs + 50, 10));
  EXPECT_TRUE(c->tiers()[0]->Contains(k2));
  // ReadInto copies file slices too.
  std::string all(data.size(), '\0');
  auto n = tierfs::testing::ReadInto(*c, o, 0, std::as_writable_bytes(std::span(all)));
  ASSERT_OK(n);
  EXPECT_EQ(*n, data.size());
  EXPECT_EQ(all, data);
  auto st = ParseStats(c->StatsText());
  EXPECT_EQ(st["origin.requests"], 0u);
  EXPECT_GE(st["l2.extent_reads"], 3u);
  EXPECT_EQ(st["promotions"], 3u);
}

TEST_F(TieredCacheTest, FileSlicesPromoteOnlyWhatComesBackBeforeL1TurnsOver) {
  options_.file_slices = true;
  options_.promote_hits = 2;
  options_.placement = [](std::string_view) {  // no scan detection: all of it goes to L2
    Placement pl;
    pl.admit = AdmitPolicy::kAlways;
    return pl;
  };
  const uint64_t blocks = 100;  // L1 and L2 hold 256 blocks; a quarter of L1 is 64 blocks
  const std::string data = Pattern(blocks * kBs, 9);
  const ObjectRef o = PutThroughCache("obj", data);
  auto c = OpenCache();  // fresh L1; every block in L2
  const BlockKey k0 = MakeBlockKey(origin_.Describe(), "obj", o.info.etag, kBs, 0);
  EXPECT_EQ(ReadAll(c.get(), o, 100, 10), data.substr(100, 10));
  // 80 blocks (more than a quarter of L1) read before block 0 comes back: no promotion.
  EXPECT_EQ(ReadAll(c.get(), o, kBs, 80 * kBs), data.substr(kBs, 80 * kBs));
  EXPECT_EQ(ReadAll(c.get(), o, 50, 10), data.substr(50, 10));
  EXPECT_FALSE(c->tiers()[0]->Contains(k0));
  // The same bytes again at once: that reuse is near enough, the block is promoted.
  EXPECT_EQ(ReadAll(c.get(), o, 50, 10), data.substr(50, 10));
  EXPECT_TRUE(c->tiers()[0]->Contains(k0));
  EXPECT_EQ(ParseStats(c->StatsText())["promotions"], 1u);
}

// A sequential reader's requests may arrive out of order (the kernel has several in flight): a
// block's tail served before its head is the same pass, not a reuse; reading bytes again is.
TEST_F(TieredCacheTest, FileSlicesPromoteOnBytesReadAgainNotOnReorderedRequests) {
  options_.file_slices = true;
  options_.promote_hits = 2;
  const std::string data = Pattern(3 * kBs, 6);
  const ObjectRef o = PutThroughCache("obj", data);
  auto c = OpenCache();  // fresh L1; every block in L2
  const BlockKey k1 = MakeBlockKey(origin_.Describe(), "obj", o.info.etag, kBs, 1);
  // Block 1's second half, then its first half (each read also touches a neighbour block).
  EXPECT_EQ(ReadAll(c.get(), o, kBs + kBs / 2, kBs), data.substr(kBs + kBs / 2, kBs));
  EXPECT_EQ(ReadAll(c.get(), o, kBs / 2, kBs), data.substr(kBs / 2, kBs));
  EXPECT_FALSE(c->tiers()[0]->Contains(k1));
  EXPECT_EQ(ParseStats(c->StatsText())["promotions"], 0u);
  // Bytes of block 1 read again: a reuse, promoted.
  EXPECT_EQ(ReadAll(c.get(), o, kBs + 100, 10), data.substr(kBs + 100, 10));
  EXPECT_TRUE(c->tiers()[0]->Contains(k1));
  EXPECT_EQ(ParseStats(c->StatsText())["promotions"], 1u);
}

TEST_F(TieredCacheTest, FileSlicesNeverPromoteWithZeroAndSpliceNothingUnverified) {
  options_.file_slices = true;
  options_.promote_hits = 0;
  const std::string data = Pattern(2 * kBs, 6);
  const ObjectRef o = PutThroughCache("obj", data);
  // A byte of block 1 changed on the disk between the runs.
  {
    std::fstream f(BlockFile(o, 1), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(77);
    f.put(static_cast<char>(data[kBs + 77] ^ 0x10));
  }
  origin_.ResetCounters();
  auto c = OpenCache();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  auto st = ParseStats(c->StatsText());
  EXPECT_EQ(st["l2.corruptions"], 1u);  // caught by the verification before any splice
  EXPECT_EQ(st["origin.requests"], 1u);
  EXPECT_EQ(st["promotions"], 0u);
  EXPECT_FALSE(
      c->tiers()[0]->Contains(MakeBlockKey(origin_.Describe(), "obj", o.info.etag, kBs, 0)));
}

TEST_F(TieredCacheTest, L2InsertFailureNeverFailsARead) {
  auto c = OpenCache();
  const std::string data = Pattern(2 * kBs);
  ObjectRef o = Put("obj", data);
  faulty_->FailWrites(100, Status::IOError("EIO"));
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(c->Residency(o)[0].second, 2u);  // L1 still filled
  EXPECT_EQ(c->Residency(o)[1].second, 0u);
  EXPECT_EQ(ParseStats(c->StatsText())["insert.errors"], 2u);
}

TEST_F(TieredCacheTest, NoTiersReadsStraightFromOrigin) {
  auto c = OpenCache(false, false);
  const std::string data = Pattern(kBs + 1);
  ObjectRef o = Put("obj", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(origin_.read_calls(), 4u);
  EXPECT_TRUE(c->Residency(o).empty());
}

TEST_F(TieredCacheTest, PrefetchHydratesInTheBackground) {
  auto c = OpenCache();
  const std::string data = Pattern(8 * kBs);
  ObjectRef o = Put("obj", data);
  c->Prefetch(o, 2, 100);  // clipped to blocks 2..7: one run, one origin read
  Eventually([&] { return c->Residency(o)[1].second >= 6; }, std::chrono::seconds(10),
             std::chrono::milliseconds(2));
  EXPECT_EQ(c->Residency(o)[1].second, 6u);
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(ReadAll(c.get(), o, 2 * kBs, 6 * kBs), data.substr(2 * kBs));
  EXPECT_EQ(origin_.read_calls(), 1u);
  c->Prefetch(o, 0, 8);  // only 0 and 1 are missing
  Eventually([&] { return c->Residency(o)[1].second >= 8; }, std::chrono::seconds(10),
             std::chrono::milliseconds(2));
  EXPECT_EQ(origin_.read_calls(), 2u);
  auto stats = ParseStats(c->StatsText());
  EXPECT_EQ(stats["readahead.blocks"], 8u);
  EXPECT_EQ(stats["readahead.runs"], 2u);
}

// Waits until L1 (tier 0) holds `n` blocks of `o`.
void WaitForL1(TieredCache* c, const ObjectRef& o, uint64_t n) {
  Eventually([&] { return c->Residency(o)[0].second >= n; }, std::chrono::seconds(10),
             std::chrono::milliseconds(2));
  EXPECT_EQ(c->Residency(o)[0].second, n);
}

TEST_F(TieredCacheTest, ReadaheadRunsAreBoundedByRunSizeAndBudget) {
  options_.prefetch_threads = 2;
  options_.readahead_run_bytes = 3 * kBs;
  auto c = OpenCache();
  EXPECT_EQ(c->readahead_run_blocks(), 3u);
  const std::string data = Pattern(7 * kBs + 10);  // 8 blocks, the last one short
  ObjectRef o = Put("obj", data);
  c->Prefetch(o, 0, 8);  // runs 0..2, 3..5, 6..7
  WaitForL1(c.get(), o, 8);
  EXPECT_EQ(origin_.read_calls(), 3u);  // one read per run, into its blocks' own storage
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(origin_.read_calls(), 3u);

  // Two threads in a budget of 4 blocks: runs of 2 blocks.
  options_.readahead_budget_bytes = 4 * kBs;
  auto small = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  EXPECT_EQ(small->readahead_run_blocks(), 2u);
}

TEST_F(TieredCacheTest, ReadaheadRunsInBlocksOfArenaSize) {
  // Blocks from the block arena, the last one short: 64 KiB, a size class of its own (the run's
  // full blocks adjacent, read as one piece, the short last block a piece of its own size), and
  // 68 KiB, inside the 72 KiB class (not adjacent: a piece per block). One ReadPinnedScatter.
  for (const uint64_t bs : {uint64_t{64} << 10, uint64_t{68} << 10}) {
    SCOPED_TRACE(bs);
    options_.block_size = bs;
    options_.prefetch_threads = 1;
    auto c = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
    const std::string data = Pattern(5 * bs + 123);
    ObjectRef o = Put("obj-" + std::to_string(bs), data);
    c->Prefetch(o, 1, 5);
    WaitForL1(c.get(), o, 5);
    EXPECT_EQ(origin_.read_calls(), 1u);
    EXPECT_EQ(origin_.scatter_reads(), 1u);
    EXPECT_EQ(origin_.last_scatter_pieces(), bs == (uint64_t{64} << 10) ? 2u : 5u);
    // L1 charges what the blocks hold: the short last block has storage of its own size. (L1's
    // byte count follows an insert a moment after the block is visible: waited for, not raced.)
    EXPECT_TRUE(Eventually([&] { return ParseStats(c->StatsText())["l1.used"] == 4 * bs + 123; }))
        << ParseStats(c->StatsText())["l1.used"];
    auto stats = ParseStats(c->StatsText());
    if (bs == (uint64_t{64} << 10)) {
      EXPECT_EQ(stats["blocks.mapped_bytes"], 4 * bs);
    }
    EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
    EXPECT_EQ(origin_.read_calls(), 2u);  // block 0 on demand
  }
}

TEST_F(TieredCacheTest, ReadaheadSkipsWhatL1HoldsAndCopiesL2BlocksUp) {
  auto c = OpenCache();
  const std::string data = Pattern(6 * kBs);
  ObjectRef o = Put("obj", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);  // all in L1 and L2
  EXPECT_EQ(origin_.read_calls(), 6u);
  for (uint64_t i = 2; i < 5; ++i) {
    c->tiers()[0]->Erase(MakeBlockKey("fake://bucket", "obj", o.info.etag, kBs, i));
  }
  EXPECT_EQ(c->Residency(o)[0].second, 3u);
  c->Prefetch(o, 0, 6);  // blocks 2..4 come back from L2, nothing from the origin
  WaitForL1(c.get(), o, 6);
  EXPECT_EQ(origin_.read_calls(), 6u);
  EXPECT_EQ(ParseStats(c->StatsText())["readahead.blocks"], 3u);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
}

// Reads [off, off + len) the way FUSE does: with a token, so the fetch goes to the fetch pool.
std::string ReadWithToken(TieredCache* c, const ObjectRef& o, uint64_t off, uint64_t len) {
  CancelToken token;
  auto r = c->Read(o, off, len, &token);
  if (!r.ok()) return "<" + r.status().ToString() + ">";
  std::string s;
  for (const auto& sl : *r) {
    s.append(reinterpret_cast<const char*>(sl.block->data().data()) + sl.offset, sl.length);
  }
  return s;
}

// Starts `read` (a read with a token, as FUSE's are: it counts singleflight.merged as it joins a
// flight, not when the flight ends) on a thread while the origin holds the GET of a run `c` has in
// flight, lets the GET through once the read has joined that flight, and returns the read's
// result. A read that fetched on its own instead would be held at the gate too, and the wait for
// the merge fails.
template <typename Fn>
auto WhileARunIsHeld(FakeBlobStore* origin, TieredCache* c, Fn read) {
  origin->WaitForBlockedReads(1);  // the worker's GET is on the wire
  std::invoke_result_t<Fn> got;
  std::thread reader([&] { got = read(); });
  const bool merged =
      Eventually([&] { return ParseStats(c->StatsText())["singleflight.merged"] >= 1u; });
  origin->ReleaseReads();
  reader.join();
  EXPECT_TRUE(merged) << "the read did not join the run in flight";
  return got;
}

TEST_F(TieredCacheTest, DemandReadsJoinARunInFlightAndSeeItsErrors) {
  options_.prefetch_threads = 1;
  auto c = OpenCache();
  const std::string data = Pattern(4 * kBs);
  ObjectRef o = Put("obj", data);
  origin_.HoldReads();
  c->Prefetch(o, 0, 4);
  EXPECT_EQ(
      WhileARunIsHeld(&origin_, c.get(), [&] { return ReadWithToken(c.get(), o, 2 * kBs, kBs); }),
      data.substr(2 * kBs, kBs));
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(ParseStats(c->StatsText())["singleflight.merged"], 1u);

  // The object changed under a run: the waiters get the error, nothing is cached.
  ObjectRef stale = o;
  origin_.PutObject("obj", Pattern(4 * kBs, 2));
  auto c2 = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  origin_.HoldReads();
  c2->Prefetch(stale, 0, 4);
  const bool read_ok = WhileARunIsHeld(&origin_, c2.get(), [&] {
    CancelToken token;
    return c2->Read(stale, kBs, 10, &token).ok();
  });
  EXPECT_FALSE(read_ok);
  EXPECT_EQ(c2->Residency(stale)[0].second, 0u);
}

TEST_F(TieredCacheTest, PrefetchQueueIsBoundedAndShutdownIsClean) {
  options_.prefetch_threads = 1;
  options_.readahead_budget_bytes = 4 * kBs;  // queue of 4 tasks
  auto c = OpenCache();
  ObjectRef o = Put("obj", Pattern(100 * kBs));
  origin_.SetDelay(std::chrono::milliseconds(20));
  c->Prefetch(o, 0, 100);  // one task of 4 blocks (the run fits the budget) is queued
  auto stats = ParseStats(c->StatsText());
  EXPECT_GE(stats["readahead.dropped"], 90u);
  // Destroying the cache with work queued and one fetch in flight joins promptly.
  auto start = std::chrono::steady_clock::now();
  c.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_LE(origin_.read_calls(), 5u);
}

TEST_F(TieredCacheTest, DemandReadJoinsAPrefetchInFlight) {
  options_.prefetch_threads = 1;
  auto c = OpenCache();
  const std::string data = Pattern(kBs);
  ObjectRef o = Put("obj", data);
  origin_.HoldReads();
  c->Prefetch(o, 0, 1);
  EXPECT_EQ(WhileARunIsHeld(&origin_, c.get(), [&] { return ReadWithToken(c.get(), o, 0, kBs); }),
            data);
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(ParseStats(c->StatsText())["singleflight.merged"], 1u);
}

// L1's blocks of `o` once it holds `want` of them, or after 5 s (the fetch that brought the read
// block in stores the run's later blocks after completing the read's).
uint64_t WaitL1(TieredCache* c, const ObjectRef& o, uint64_t want) {
  Eventually([&] { return c->Residency(o)[0].second >= want; }, std::chrono::seconds(5),
             std::chrono::milliseconds(2));
  return c->Residency(o)[0].second;
}

TEST_F(TieredCacheTest, SmallObjectIsFetchedWholeByItsFirstDemandMiss) {
  options_.small_object_bytes = 4 * kBs;
  auto c = OpenCache();
  const std::string data = Pattern(4 * kBs - 7);
  ObjectRef o = Put("small", data);
  EXPECT_EQ(ReadWithToken(c.get(), o, 10, 100), data.substr(10, 100));
  EXPECT_EQ(origin_.read_calls(), 1u);  // one request for all four blocks
  EXPECT_EQ(origin_.bytes_read(), data.size());
  EXPECT_EQ(WaitL1(c.get(), o, 4), 4u);
  EXPECT_EQ(ReadWithToken(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(origin_.read_calls(), 1u);
  auto stats = ParseStats(c->StatsText());
  EXPECT_EQ(stats["fetch.whole_objects"], 1u);
  EXPECT_EQ(stats["readahead.blocks"], 0u);  // a demand fetch, not readahead
  EXPECT_EQ(c->small_object_bytes(), 4 * kBs);

  // A first read in the middle claims the blocks on both sides.
  ObjectRef mid = Put("mid", Pattern(3 * kBs, 2));
  EXPECT_EQ(ReadWithToken(c.get(), mid, kBs + 5, 10), Pattern(3 * kBs, 2).substr(kBs + 5, 10));
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(WaitL1(c.get(), mid, 3), 3u);

  // Larger than small_object_bytes: only the block read.
  ObjectRef big = Put("big", Pattern(5 * kBs, 3));
  EXPECT_EQ(ReadWithToken(c.get(), big, 0, 10), Pattern(5 * kBs, 3).substr(0, 10));
  EXPECT_EQ(origin_.bytes_read(), kBs);

  // Off (0): one block per demand miss.
  options_.small_object_bytes = 0;
  auto off = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  ObjectRef o2 = Put("small2", data);
  EXPECT_EQ(ReadWithToken(off.get(), o2, 0, 10), data.substr(0, 10));
  EXPECT_EQ(origin_.bytes_read(), kBs);
}

TEST_F(TieredCacheTest, SmallObjectFetchStopsAtHeldBlocksAndServesTheirWaiters) {
  options_.small_object_bytes = 4 * kBs;
  options_.prefetch_threads = 1;
  auto c = OpenCache();
  const std::string data = Pattern(4 * kBs);
  ObjectRef o = Put("obj", data);
  ASSERT_OK(c->Hydrate(o, 2, 0, Placement{}));  // block 2 in L1 (and L2)
  origin_.ResetCounters();
  EXPECT_EQ(ReadWithToken(c.get(), o, 0, 10), data.substr(0, 10));  // blocks 0..1: one request
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(origin_.bytes_read(), 2 * kBs);
  EXPECT_EQ(ReadWithToken(c.get(), o, 3 * kBs, 10), data.substr(3 * kBs, 10));
  EXPECT_EQ(origin_.read_calls(), 2u);
  EXPECT_EQ(origin_.bytes_read(), 3 * kBs);

  // A reader of another block of the object while the whole fetch is on the wire waits for it.
  ObjectRef o2 = Put("obj2", Pattern(4 * kBs, 5));
  origin_.HoldReads();
  std::string first;
  std::thread t([&] { first = ReadWithToken(c.get(), o2, 0, 10); });
  EXPECT_EQ(
      WhileARunIsHeld(&origin_, c.get(), [&] { return ReadWithToken(c.get(), o2, 3 * kBs, kBs); }),
      Pattern(4 * kBs, 5).substr(3 * kBs));
  t.join();
  EXPECT_EQ(first, Pattern(4 * kBs, 5).substr(0, 10));
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_GE(ParseStats(c->StatsText())["singleflight.merged"], 1u);
}

TEST_F(TieredCacheTest, SmallObjectFetchFailureReachesEveryWaiterAndCachesNothing) {
  options_.small_object_bytes = 4 * kBs;
  auto c = OpenCache();
  const std::string data = Pattern(3 * kBs);
  ObjectRef o = Put("obj", data);
  origin_.FailNext(1, Status::Unavailable("503"));
  EXPECT_NE(ReadWithToken(c.get(), o, 0, 10), data.substr(0, 10));
  EXPECT_EQ(c->Residency(o)[0].second, 0u);
  EXPECT_EQ(c->Residency(o)[1].second, 0u);
  // It heals, once the failed fetch has completed every block's flight (a reader arriving before
  // joins it and gets its error) and the failure's replay time (origin_failure_ttl) has passed.
  std::string healed;
  Eventually([&] {
    clock_.Advance(options_.origin_failure_ttl);
    healed = ReadWithToken(c.get(), o, 2 * kBs, 10);
    return healed == data.substr(2 * kBs, 10);
  });
  EXPECT_EQ(healed, data.substr(2 * kBs, 10));
  EXPECT_EQ(WaitL1(c.get(), o, 3), 3u);
}

TEST_F(TieredCacheTest, EvictDropsEveryHostTier) {
  auto c = OpenCache();
  const std::string data = Pattern(3 * kBs);
  ObjectRef o = Put("obj", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(c->Residency(o)[0].second, 3u);
  c->Evict(o);
  EXPECT_EQ(c->Residency(o)[0].second, 0u);
  EXPECT_EQ(c->Residency(o)[1].second, 0u);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(origin_.read_calls(), 6u);
}

// Residency, evict and pin cost what the host tiers hold of an object, never its size: an object
// of 2^62 bytes (2^50 blocks) with three blocks cached answers at once. The blocks are read
// through the cache as a 3-block object; the same key and ETag with a size of 2^62 names the
// same blocks (block keys do not carry the size), and more at indexes far out are put straight
// into the tiers with their owner, as the cache's inserts name it.
TEST_F(TieredCacheTest, ResidencyEvictAndPinCostWhatIsCachedNotTheObjectSize) {
  auto c = OpenCache();
  const std::string data = Pattern(3 * kBs);
  ObjectRef o = Put("huge", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  ObjectRef huge = o;
  huge.info.size = uint64_t{1} << 62;
  const auto start = std::chrono::steady_clock::now();
  auto res = c->Residency(huge);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0], (std::pair<std::string, uint64_t>("l1", 3)));
  EXPECT_EQ(res[1], (std::pair<std::string, uint64_t>("l2", 3)));

  // Two more blocks far out, in L2 only: block 2^40 and the last block.
  const uint64_t last = (huge.info.size + kBs - 1) / kBs - 1;
  for (uint64_t index : {uint64_t{1} << 40, last}) {
    Placement p;
    p.owner = BlockOwner{MakeObjectId("fake://bucket", "huge", huge.info, kBs), index, false};
    auto b = Block::Allocate(kBs);
    std::memset(b->mutable_data().data(), 7, kBs);
    b->set_size(kBs);
    ASSERT_OK(c->tiers()[1]->Insert(MakeBlockKey("fake://bucket", "huge", huge.info, kBs, index),
                                    BlockRef(std::move(b)), p));
  }
  EXPECT_EQ(c->Residency(huge)[1].second, 5u);
  EXPECT_EQ(c->Residency(o)[1].second, 3u);  // the 3-block view counts only its own blocks

  const BlockKey far = MakeBlockKey("fake://bucket", "huge", huge.info, kBs, last);
  EXPECT_TRUE(c->tiers()[1]->Contains(far));
  c->Evict(huge);
  EXPECT_EQ(c->Residency(huge)[0].second, 0u);
  EXPECT_EQ(c->Residency(huge)[1].second, 0u);
  EXPECT_FALSE(c->tiers()[1]->Contains(far));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Another object of the same name and another ETag is not this one.
  ObjectRef other = huge;
  other.info.etag = "another";
  EXPECT_EQ(c->Residency(other)[1].second, 0u);
}

// Pins reach the blocks by owner too: pinned blocks stay when L2 makes room, unpinned go.
TEST_F(TieredCacheTest, PinByOwnerKeepsTheBlocksOfAHugeObject) {
  l2_options_.capacity_bytes = 4 * kBs;
  auto c = OpenCache(/*with_l1=*/false);
  const std::string data = Pattern(2 * kBs);
  ObjectRef o = Put("huge", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  ObjectRef huge = o;
  huge.info.size = uint64_t{1} << 62;
  c->SetPinned(huge, true);
  const std::string more = Pattern(4 * kBs, 2);
  ObjectRef filler = Put("filler", more);
  EXPECT_EQ(ReadAll(c.get(), filler, 0, more.size()), more);  // needs room: only filler's go
  EXPECT_EQ(c->Residency(huge)[0].second, 2u);
  c->SetPinned(huge, false);
  ObjectRef filler2 = Put("filler2", more);
  EXPECT_EQ(ReadAll(c.get(), filler2, 0, more.size()), more);
  EXPECT_EQ(c->Residency(huge)[0].second, 0u);
}

// Evict and pin stop once the request's token is cancelled (an interrupted setxattr, or the
// session ending): with a token cancelled before the walk, nothing is dropped.
TEST_F(TieredCacheTest, EvictStopsWhenTheRequestIsCancelled) {
  auto c = OpenCache();
  const std::string data = Pattern(3 * kBs);
  ObjectRef o = Put("obj", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  CancelToken token;
  token.Cancel();
  {
    CancelToken::Scope scope(&token);
    c->Evict(o);
  }
  EXPECT_EQ(c->Residency(o)[0].second, 3u);
  EXPECT_EQ(c->Residency(o)[1].second, 3u);
  c->Evict(o);
  EXPECT_EQ(c->Residency(o)[0].second, 0u);
  EXPECT_EQ(c->Residency(o)[1].second, 0u);
}

// The owner of an L2 block is kept in its index record: after a restart the blocks are still
// counted and evicted by object.
TEST_F(TieredCacheTest, OwnersSurviveARestartInL2) {
  const std::string data = Pattern(5 * kBs + 3);
  ObjectRef o = PutThroughCache("obj", data);
  auto c = OpenCache();
  EXPECT_EQ(c->Residency(o)[0].second, 0u);
  EXPECT_EQ(c->Residency(o)[1].second, 6u);
  c->Evict(o);
  EXPECT_EQ(c->Residency(o)[1].second, 0u);
  origin_.ResetCounters();
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(origin_.read_calls(), 6u);
}

// fuse/ stored a file in the kernel's page cache: L1 gives up the blocks L2 also holds, so its
// memory goes to blocks not yet read; reads then come from L2 with no origin request.
TEST_F(TieredCacheTest, HandOffDropsTheL1CopiesOfWholeBlocksL2Holds) {
  auto c = OpenCache();
  const std::string data = Pattern(2 * kBs + 10);
  ObjectRef o = Put("obj", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(c->Residency(o)[0].second, 3u);
  EXPECT_EQ(c->HandOff(o, 1, data.size()), 2u);  // block 0 is not covered whole: it stays
  EXPECT_EQ(c->Residency(o)[0].second, 1u);
  EXPECT_EQ(c->Residency(o)[1].second, 3u);
  EXPECT_EQ(c->HandOff(o, 0, 1), 0u);            // nor is it now
  EXPECT_EQ(c->HandOff(o, data.size(), 5), 0u);  // past the end
  EXPECT_EQ(ParseStats(c->StatsText())["handoffs"], 2u);
  const uint64_t fetched = origin_.read_calls();
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(origin_.read_calls(), fetched);  // from L1 and L2

  // Without a host tier below L1 nothing else would serve the bytes again: L1 keeps them.
  auto l1_only = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  EXPECT_EQ(ReadAll(l1_only.get(), o, 0, data.size()), data);
  EXPECT_EQ(l1_only->HandOff(o, 0, data.size()), 0u);
  EXPECT_EQ(l1_only->Residency(o)[0].second, 3u);
}

// Readahead of a small file (one block) with L2 hits served from files: the file goes to L2 only,
// where its first open finds it (a file slice), and L1's memory is left to what readers read. A
// file of several blocks, and a small file L2 does not take, still fill L1.
TEST_F(TieredCacheTest, ReadaheadPutsSmallFilesInL2NotL1) {
  options_.file_slices = true;
  options_.promote_hits = 0;
  l2_options_.capacity_bytes = 4 * kBs;
  auto c = OpenCache();
  const std::string small = Pattern(kBs - 100, 1);
  const std::string large = Pattern(2 * kBs, 2);
  const std::string huge = Pattern(kBs, 3);
  const ObjectRef s = Put("small", small);
  const ObjectRef l = Put("large", large);
  c->Prefetch(s, 0, 1);
  c->Prefetch(l, 0, 2);
  // Until both files are in every tier they go to (the larger one's L2 writes come after its
  // L1 inserts): an L2 insert in progress would keep the pinned blocks below from making room.
  // The small file's counter is bumped just after its L2 insert shows.
  Eventually(
      [&] {
        return c->Residency(s)[1].second >= 1 && c->Residency(l)[0].second >= 2 &&
               c->Residency(l)[1].second >= 2 &&
               ParseStats(c->StatsText())["readahead.below_l1"] >= 1;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(2));
  EXPECT_EQ(c->Residency(s)[0].second, 0u);  // not in L1
  EXPECT_EQ(c->Residency(s)[1].second, 1u);  // in L2
  EXPECT_EQ(c->Residency(l)[0].second, 2u);  // a larger file's blocks: in L1 as before
  auto st = ParseStats(c->StatsText());
  EXPECT_EQ(st["readahead.below_l1"], 1u);
  const uint64_t fetched = origin_.read_calls();
  auto r = c->Read(s, 0, small.size());
  ASSERT_OK(r);
  ASSERT_EQ(r->size(), 1u);
  EXPECT_NE((*r)[0].file, nullptr);  // from L2's file
  EXPECT_EQ(ReadAll(c.get(), s, 0, small.size()), small);
  EXPECT_EQ(origin_.read_calls(), fetched);

  // L2 full of pinned blocks declines the next one: it goes to L1, read once from the origin.
  Placement pin;
  pin.pinned = true;
  for (int i = 0; i < 4; ++i) {
    auto b = Block::Allocate(kBs);
    b->set_size(kBs);
    ASSERT_OK(c->tiers()[1]->Insert(BlockKey{{static_cast<uint8_t>(i + 1)}}, b, pin));
  }
  const ObjectRef h = Put("huge", huge);
  c->Prefetch(h, 0, 1);
  WaitForL1(c.get(), h, 1);
  EXPECT_EQ(c->Residency(h)[1].second, 0u);
  EXPECT_EQ(ReadAll(c.get(), h, 0, huge.size()), huge);
  EXPECT_EQ(origin_.read_calls(), 1u);  // since Put (which resets the counts): the prefetch
  EXPECT_EQ(ParseStats(c->StatsText())["readahead.below_l1"], 1u);
}

// OpenWholeFile: the L2 file of a one-block object, which L2 stored as exactly the object's bytes
// (no chunk trailer), for the kernel to read itself. Not while L1 holds the block (memory is the
// faster source), not for larger objects, not without file slices; never promoted into L1.
TEST_F(TieredCacheTest, OpenWholeFileHandsOutTheL2FileOfAOneBlockObject) {
  options_.file_slices = true;
  options_.promote_hits = 1;  // every other L2 hit is promoted: OpenWholeFile's must not be
  const std::string small = Pattern(kBs - 100, 6);
  const std::string whole = Pattern(kBs, 7);
  const std::string large = Pattern(kBs + 100, 8);
  const ObjectRef s = Put("small", small);
  const ObjectRef w = Put("whole", whole);
  const ObjectRef l = Put("large", large);
  auto c = OpenCache();
  for (const ObjectRef* o : {&s, &w, &l})
    ASSERT_EQ(ReadAll(c.get(), *o, 0, kBs + 100).size(), o->info.size);
  EXPECT_TRUE(c->OpenWholeFile(s).status().IsNotFound());  // L1 holds it
  EXPECT_EQ(c->HandOff(s, 0, small.size()), 1u);
  EXPECT_EQ(c->HandOff(w, 0, whole.size()), 1u);
  for (int i = 0; i < 2; ++i) {
    auto f = c->OpenWholeFile(s);
    ASSERT_OK(f);
    EXPECT_TRUE((*f)->exact());
    EXPECT_EQ((*f)->length(), small.size());
    struct stat st {};
    ASSERT_EQ(::fstat((*f)->fd(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), small.size());  // exactly the object's bytes
    std::string got(small.size(), '\0');
    ASSERT_EQ(::pread((*f)->fd(), got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
    EXPECT_EQ(got, small);
  }
  EXPECT_EQ(c->Residency(s)[0].second, 0u);  // not promoted
  auto f = c->OpenWholeFile(w);              // exactly one block is still one block
  ASSERT_OK(f);
  EXPECT_EQ((*f)->length(), kBs);
  EXPECT_TRUE(c->OpenWholeFile(l).status().IsNotFound());        // two blocks
  EXPECT_EQ(ParseStats(c->StatsText())["origin.requests"], 4u);  // a block each, none again
  // Without file slices the host tiers hand out no files.
  c.reset();
  options_.file_slices = false;
  auto plain = OpenCache();
  EXPECT_TRUE(plain->OpenWholeFile(s).status().IsNotFound());
}

TEST_F(TieredCacheTest, HandOffKeepsPinnedObjectsInL1) {
  options_.placement = [](std::string_view) {
    Placement p;
    p.pinned = true;
    return p;
  };
  auto c = OpenCache();
  const std::string data = Pattern(kBs);
  ObjectRef o = Put("obj", data);
  EXPECT_EQ(ReadAll(c.get(), o, 0, data.size()), data);
  EXPECT_EQ(c->HandOff(o, 0, data.size()), 0u);
  EXPECT_EQ(c->Residency(o)[0].second, 1u);
}

TEST_F(TieredCacheTest, StatsTextIsMachineParseable) {
  auto c = OpenCache();
  ObjectRef o = Put("obj", Pattern(kBs));
  EXPECT_EQ(ReadAll(c.get(), o, 0, kBs).size(), kBs);
  auto stats = ParseStats(c->StatsText());
  for (const char* k :
       {"l1.hits", "l1.misses", "l1.bytes", "l1.used", "l2.hits", "l2.misses", "l2.bytes",
        "l2.used", "origin.requests", "origin.bytes", "singleflight.merged"}) {
    EXPECT_TRUE(stats.count(k)) << k;
  }
  EXPECT_EQ(stats["origin.bytes"], kBs);
  EXPECT_EQ(stats["l1.used"], kBs);
  EXPECT_EQ(stats["l2.used"], kBs);
}

// Review item 1: a read reports which tier served each block, and the read as a whole is
// attributed to the slowest of them.
TEST_F(TieredCacheTest, ReadsReportTheTierThatServedThem) {
  auto c = OpenCache();
  const std::string data = Pattern(2 * kBs);
  ObjectRef o = Put("obj", data);
  auto cold = c->Read(o, 0, kBs);
  ASSERT_OK(cold);
  ASSERT_EQ(cold->size(), 1u);
  EXPECT_EQ((*cold)[0].tier, kOriginTier);
  auto warm = c->Read(o, 0, kBs);
  ASSERT_OK(warm);
  EXPECT_EQ((*warm)[0].tier, 0);  // L1
  c->tiers()[0]->Erase(MakeBlockKey("fake://bucket", "obj", o.info.etag, kBs, 0));
  auto l2 = c->Read(o, 0, kBs);
  ASSERT_OK(l2);
  EXPECT_EQ((*l2)[0].tier, 1);  // L2 (and copied up)
  // Block 0 from L1, block 1 from the origin: the read is the origin's.
  auto mixed = c->Read(o, 0, 2 * kBs);
  ASSERT_OK(mixed);
  ASSERT_EQ(mixed->size(), 2u);
  EXPECT_EQ((*mixed)[0].tier, 0);
  EXPECT_EQ((*mixed)[1].tier, kOriginTier);
  EXPECT_EQ(ServingTier(*mixed), kOriginTier);
  EXPECT_EQ(
      ServingTier({BlockSlice{nullptr, 0, 0, 0, nullptr}, BlockSlice{nullptr, 0, 0, 1, nullptr}}),
      1);
  EXPECT_EQ(ServingTier({}), kOriginTier);
}

TEST_F(TieredCacheTest, HostSpaceIsTheLargestHostTierAndNeverTheSharedOne) {
  // L1 + L2 + L3: df shows L2, whatever L3 holds.
  auto c = OpenCache();
  FakeBlobStore l3_store{"fake://l3"};
  RemoteTierOptions ro;
  ro.block_size = kBs;
  auto l3 = NewRemoteTier(ro, &l3_store, &clock_);
  ASSERT_OK(l3);
  c.reset();
  CacheTiers tiers;
  MemoryTierOptions m;
  m.capacity_bytes = 64 * kBs;
  tiers.host.push_back(NewMemoryTier(m));
  auto l2 = NewFlashTier(l2_options_, faulty_.get(), meta_.get(), &clock_);
  ASSERT_OK(l2);
  tiers.host.push_back(std::move(*l2));
  tiers.shared.push_back(std::move(*l3));
  auto opened = TieredCache::Open(options_, std::move(tiers), &origin_, &clock_);
  ASSERT_OK(opened);
  c = std::move(*opened);
  ObjectRef o = Put("obj", Pattern(3 * kBs));
  ASSERT_EQ(ReadAll(c.get(), o, 0, 3 * kBs).size(), 3 * kBs);
  HostSpaceInfo h = c->HostSpace();
  EXPECT_EQ(h.tier, "l2");
  EXPECT_EQ(h.capacity_bytes, l2_options_.capacity_bytes);
  EXPECT_EQ(h.used_bytes, 3 * kBs);
  EXPECT_EQ(c->TierName(0), "l1");
  EXPECT_EQ(c->TierName(1), "l2");
  EXPECT_EQ(c->TierName(2), "l3");
  EXPECT_EQ(c->TierName(kOriginTier), "origin");
  EXPECT_EQ(c->TierName(3), "");
  c.reset();  // before the L3 store it uploads to

  // L1 only: df shows L1; no tiers: nothing.
  c = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  EXPECT_EQ(c->HostSpace().tier, "l1");
  EXPECT_EQ(c->HostSpace().capacity_bytes, 1u << 20);
  c = OpenCache(false, false);
  EXPECT_EQ(c->HostSpace().tier, "");
  EXPECT_EQ(c->HostSpace().capacity_bytes, 0u);
}

// What the host tiers can keep of one file: the larger budget, L1's when L1 is the larger (df
// still shows L2).
TEST_F(TieredCacheTest, HostCapacityIsTheLargerHostTiersBudget) {
  for (const uint64_t l1_bytes : {64 * kBs, uint64_t{4} << 20}) {
    CacheTiers tiers;
    MemoryTierOptions m;
    m.capacity_bytes = l1_bytes;
    tiers.host.push_back(NewMemoryTier(m));
    auto l2 = NewFlashTier(l2_options_, faulty_.get(), meta_.get(), &clock_);
    ASSERT_OK(l2);
    tiers.host.push_back(std::move(*l2));
    auto c = TieredCache::Open(options_, std::move(tiers), &origin_, &clock_);
    ASSERT_OK(c);
    EXPECT_EQ((*c)->HostCapacityBytes(), std::max(l1_bytes, l2_options_.capacity_bytes));
    EXPECT_EQ((*c)->HostSpace().capacity_bytes, l2_options_.capacity_bytes);
  }
  EXPECT_EQ(OpenCache(/*with_l1=*/true, /*with_l2=*/false)->HostCapacityBytes(), 1u << 20);
  EXPECT_EQ(OpenCache(false, false)->HostCapacityBytes(), 0u);
}

// The value of the sample `series` (name{labels}) in a scrape, or -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

TEST_F(TieredCacheTest, MetricsAgreeWithStatsTextAndTimeReadsByServingTier) {
  metrics::Registry registry;
  options_.metrics = &registry;
  auto c = OpenCache();
  ObjectRef o = Put("obj", Pattern(2 * kBs));
  EXPECT_EQ(ReadAll(c.get(), o, 0, 2 * kBs).size(), 2 * kBs);  // origin
  EXPECT_EQ(ReadAll(c.get(), o, 0, kBs).size(), kBs);          // L1
  EXPECT_EQ(ReadAll(c.get(), o, 100, 10).size(), 10u);         // L1
  const std::string text = registry.Scrape();
  auto stats = ParseStats(c->StatsText());
  EXPECT_EQ(Sample(text, "tierfs_tier_hits_total{tier=\"l1\"}"), stats["l1.hits"]);
  EXPECT_EQ(Sample(text, "tierfs_tier_misses_total{tier=\"l1\"}"), stats["l1.misses"]);
  EXPECT_EQ(Sample(text, "tierfs_tier_hits_total{tier=\"l2\"}"), stats["l2.hits"]);
  EXPECT_EQ(Sample(text, "tierfs_tier_used_bytes{tier=\"l2\"}"), stats["l2.used"]);
  EXPECT_EQ(Sample(text, "tierfs_tier_capacity_bytes{tier=\"l1\"}"), stats["l1.capacity"]);
  EXPECT_EQ(Sample(text, "tierfs_tier_served_bytes_total{tier=\"origin\"}"), stats["origin.bytes"]);
  EXPECT_EQ(Sample(text, "tierfs_tier_served_bytes_total{tier=\"origin\"}"), 2 * kBs);
  EXPECT_EQ(Sample(text, "tierfs_reads_total"), 3);
  EXPECT_EQ(Sample(text, "tierfs_read_duration_seconds_count{tier=\"origin\"}"), 1);
  EXPECT_EQ(Sample(text, "tierfs_read_duration_seconds_count{tier=\"l1\"}"), 2);
  EXPECT_EQ(Sample(text, "tierfs_read_duration_seconds_count{tier=\"l2\"}"), 0);
  EXPECT_EQ(Sample(text, "tierfs_read_duration_seconds_bucket{tier=\"l1\",le=\"+Inf\"}"), 2);
  EXPECT_GT(Sample(text, "tierfs_read_duration_seconds_sum{tier=\"origin\"}"), 0);
  EXPECT_EQ(Sample(text, "tierfs_readahead_queue_blocks"), 0);
  c.reset();
  EXPECT_EQ(registry.Scrape(), "");  // the cache unregistered itself
}

// The prefetch pool keeps up to prefetch_threads small objects in flight (one request each: a
// loader's next files), but its bytes in flight stay within 16 runs however many threads it has.
TEST_F(TieredCacheTest, ReadaheadKeepsManySmallFetchesButAtMostSixteenRunsInFlight) {
  options_.prefetch_threads = 24;
  options_.readahead_run_bytes = 4 * kBs;
  options_.readahead_budget_bytes = 256 * kBs;  // room for every task below in the queue
  auto c = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  ASSERT_NE(c, nullptr);
  std::vector<ObjectRef> small, large;
  for (int i = 0; i < 24; ++i) {
    small.push_back(Put("small/" + std::to_string(i), Pattern(kBs, i)));
    large.push_back(Put("large/" + std::to_string(i), Pattern(4 * kBs, 100 + i)));
  }
  origin_.HoldReads();
  for (const ObjectRef& o : small) c->Prefetch(o, 0, 1);
  origin_.WaitForBlockedReads(24);  // all 24 at once: 24 blocks are 6 runs' worth of bytes
  origin_.ReleaseReads();
  for (const ObjectRef& o : small) WaitForL1(c.get(), o, 1);

  origin_.HoldReads();
  for (const ObjectRef& o : large) c->Prefetch(o, 0, 4);
  origin_.WaitForBlockedReads(16);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a window: no 17th run starts
  EXPECT_EQ(origin_.blocked_reads(), 16);
  origin_.ReleaseReads();
  for (const ObjectRef& o : large) WaitForL1(c.get(), o, 4);
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(ReadAll(c.get(), large[i], 0, 4 * kBs), Pattern(4 * kBs, 100 + i));
    EXPECT_EQ(ReadAll(c.get(), small[i], 0, kBs), Pattern(kBs, i));
  }
  EXPECT_EQ(origin_.read_calls(), 48u);  // every object once: all from L1 above
}

// Runs that wait for room in flight start in the order they were asked for, a large one before
// small ones asked for after it even when only they would fit: two sequential readers' runs just
// ahead of each reader must not wait behind runs asked for later.
TEST_F(TieredCacheTest, RunsWaitingForRoomStartInTheOrderTheyWereAskedFor) {
  options_.prefetch_threads = 24;
  options_.readahead_run_bytes = 4 * kBs;
  options_.readahead_budget_bytes = 256 * kBs;  // in flight: 16 runs of 4 blocks
  auto c = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  ASSERT_NE(c, nullptr);
  std::vector<ObjectRef> first, waiting;
  for (int i = 0; i < 16; ++i) {
    first.push_back(Put("first/" + std::to_string(i), Pattern(4 * kBs, i)));
  }
  for (int i = 0; i < 6; ++i) {  // 4 blocks, 1 block, 4, 1, 4, 1
    const uint64_t n = i % 2 == 0 ? 4 : 1;
    waiting.push_back(Put("waiting/" + std::to_string(i), Pattern(n * kBs, 50 + i)));
  }
  origin_.HoldReads();
  for (const ObjectRef& o : first) c->Prefetch(o, 0, 4);
  origin_.WaitForBlockedReads(16);  // 64 blocks in flight: full
  for (const ObjectRef& o : waiting) c->Prefetch(o, 0, 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a window: all six wait for room
  ASSERT_EQ(origin_.gate_arrivals().size(), 16u);
  // The reads that arrive at the origin once `n` have (and no more within 50 ms after), sorted:
  // two runs let in by one release reach the origin in either order.
  size_t seen = 16;
  auto next_arrivals = [&](size_t n) {
    Eventually([&] { return origin_.gate_arrivals().size() >= n; }, std::chrono::seconds(2),
               std::chrono::milliseconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the window: no more arrive
    const std::vector<std::string> all = origin_.gate_arrivals();
    std::vector<std::string> fresh(all.begin() + static_cast<ptrdiff_t>(seen), all.end());
    seen = all.size();
    std::sort(fresh.begin(), fresh.end());
    return fresh;
  };
  using Keys = std::vector<std::string>;
  origin_.ReleaseOneRead();  // 4 blocks free: waiting/0 (4 blocks) goes
  EXPECT_EQ(next_arrivals(17), Keys{"waiting/0"});
  origin_.ReleaseOneRead();  // 4 free: waiting/1 (1) goes; waiting/2 (4) does not fit, and
  EXPECT_EQ(next_arrivals(18), Keys{"waiting/1"});  // waiting/3 (1), which would, waits behind it
  origin_.ReleaseOneRead();                         // 3 + 4 free: waiting/2 and waiting/3
  EXPECT_EQ(next_arrivals(20), (Keys{"waiting/2", "waiting/3"}));
  origin_.ReleaseOneRead();  // waiting/4 and waiting/5
  EXPECT_EQ(next_arrivals(22), (Keys{"waiting/4", "waiting/5"}));
  origin_.ReleaseReads();
  for (int i = 0; i < 6; ++i) {
    const uint64_t n = i % 2 == 0 ? 4 : 1;
    WaitForL1(c.get(), waiting[i], n);
    EXPECT_EQ(ReadAll(c.get(), waiting[i], 0, n * kBs), Pattern(n * kBs, 50 + i));
  }
}

// While a reader waits for a fetch of its own, readahead keeps only 16 fetches in flight (of 32
// threads), so the reader's GET does not queue at the origin behind 32 of them; once the guesses
// are proven read (SetGuessesProven), readahead takes every thread.
TEST_F(TieredCacheTest, ReadaheadLeavesTheOriginToAWaitingReader) {
  options_.prefetch_threads = 32;
  options_.readahead_budget_bytes = 256 * kBs;
  auto c = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  ASSERT_NE(c, nullptr);
  std::vector<ObjectRef> small;
  for (int i = 0; i < 32; ++i) small.push_back(Put("small/" + std::to_string(i), Pattern(kBs, i)));
  const ObjectRef wanted = Put("wanted", Pattern(kBs, 99));
  origin_.HoldReads();
  std::string got;
  std::thread reader([&] { got = ReadWithToken(c.get(), wanted, 0, kBs); });
  origin_.WaitForBlockedReads(1);  // the reader's own fetch, on the fetch pool
  for (const ObjectRef& o : small) c->Prefetch(o, 0, 1);
  origin_.WaitForBlockedReads(1 + 16);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a window: no 17th fetch
  EXPECT_EQ(origin_.blocked_reads(), 1 + 16);
  c->SetGuessesProven(true);
  origin_.WaitForBlockedReads(1 + 32);  // the reader still waits: all 32 go now
  EXPECT_EQ(origin_.blocked_reads(), 1 + 32);
  origin_.ReleaseReads();
  reader.join();
  EXPECT_EQ(got, Pattern(kBs, 99));
  for (const ObjectRef& o : small) WaitForL1(c.get(), o, 1);  // the rest went once it was served
  EXPECT_EQ(origin_.read_calls(), 33u);
}

TEST_F(TieredCacheTest, OpenValidatesOptions) {
  options_.block_size = 0;
  EXPECT_FALSE(TieredCache::Open(options_, {}, &origin_, &clock_).ok());
  options_.block_size = kBs;
  EXPECT_FALSE(TieredCache::Open(options_, {}, nullptr, &clock_).ok());
  // Three host tiers: an L3 put among them by mistake.
  std::vector<std::unique_ptr<Tier>> three;
  for (int i = 0; i < 3; ++i) three.push_back(NewMemoryTier(MemoryTierOptions{}));
  auto opened = TieredCache::Open(options_, std::move(three), &origin_, &clock_);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Status::Code::kInvalidArgument) << opened.status().ToString();
}

}  // namespace
}  // namespace tierfs

namespace tierfs {
namespace {

// The real thing end to end below the FUSE layer: LMDB index + block files, closed and reopened
// (a daemon restart / remount), then read with zero origin traffic.
// Projected reads (TieredCacheOptions::sparse_read_max): 256 KiB blocks of 64 pages, each page
// (kSparseChunkBytes) a sparse entry once read.
class SparseReadTest : public TieredCacheTest {
 protected:
  static constexpr uint64_t kBlock = 256 << 10;
  void SetUp() override {
    TieredCacheTest::SetUp();
    options_.block_size = kBlock;
    options_.small_object_bytes = 0;
    options_.sparse_read_max = 64 << 10;
    l2_options_.capacity_bytes = 8 << 20;
    data_ = Pattern(4 * kBlock + 1000, 5);
    obj_ = Put("cols.parquet", data_);
  }
  std::string Want(uint64_t off, uint64_t len) const { return data_.substr(off, len); }
  std::string data_;
  ObjectRef obj_;
};

TEST_F(SparseReadTest, AProjectedReadFetchesOnlyThePagesItReadsAndKeepsThem) {
  auto c = OpenCache();
  ASSERT_TRUE(c->ReadsSparse(obj_, kBlock + 40000, 10000));
  // Block 1, bytes 40000..50000: its pages 36864..53248, one request.
  EXPECT_EQ(ReadAll(c.get(), obj_, kBlock + 40000, 10000), Want(kBlock + 40000, 10000));
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(origin_.bytes_read(), 53248u - 36864);
  auto st = ParseStats(c->StatsText());
  EXPECT_EQ(st["sparse.fetches"], 1u);
  EXPECT_EQ(st["sparse.fetch_bytes"], 53248u - 36864);
  EXPECT_FALSE(c->HostHolds(obj_, kBlock, kBlock));        // the block is not held whole
  EXPECT_TRUE(c->HostHolds(obj_, kBlock + 36864, 16384));  // its entries are
  EXPECT_FALSE(c->HostHolds(obj_, kBlock + 36864, 16385));
  // The same range and any part of what was fetched: from the entries, no request.
  EXPECT_EQ(ReadAll(c.get(), obj_, kBlock + 40000, 10000), Want(kBlock + 40000, 10000));
  EXPECT_EQ(ReadAll(c.get(), obj_, kBlock + 36864, 16384), Want(kBlock + 36864, 16384));
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(ParseStats(c->StatsText())["sparse.hits"], 2u);
  // Past the fetched pages: only the pages it lacks, from the first one missing.
  EXPECT_EQ(ReadAll(c.get(), obj_, kBlock + 40000, 20000), Want(kBlock + 40000, 20000));
  EXPECT_EQ(origin_.read_calls(), 2u);
  EXPECT_EQ(origin_.bytes_read(), (53248u - 36864) + (61440u - 53248));
  EXPECT_EQ(origin_.bytes_read_twice(obj_.key), 0u);
}

TEST_F(SparseReadTest, AReadAcrossPagesJoinsTheirEntriesWithTheMissingPart) {
  auto c = OpenCache();
  EXPECT_EQ(ReadAll(c.get(), obj_, 0, 32768), Want(0, 32768));
  EXPECT_EQ(origin_.bytes_read(), 32768u);
  // Pages 4..7 from their entries, 8..11 fetched alone.
  EXPECT_EQ(ReadAll(c.get(), obj_, 16384, 32768), Want(16384, 32768));
  EXPECT_EQ(origin_.read_calls(), 2u);
  EXPECT_EQ(origin_.bytes_read(), 32768u + 16384);
  // Both from entries now; the block's last page (a short block end) too.
  EXPECT_EQ(ReadAll(c.get(), obj_, 1000, 40000), Want(1000, 40000));
  EXPECT_EQ(origin_.read_calls(), 2u);
  EXPECT_EQ(ReadAll(c.get(), obj_, 4 * kBlock + 10, 900), Want(4 * kBlock + 10, 900));
}

// Dense completion fetches only what the entries lack: the origin sees no byte twice.
TEST_F(SparseReadTest, ThreeQuartersOfABlockReadCompleteItWithOnlyItsGaps) {
  auto c = OpenCache();
  // Pages 0..14, 16..30, 32..46: 45 of 64.
  for (uint64_t at : {0, 65536, 131072}) {
    EXPECT_EQ(ReadAll(c.get(), obj_, at + 100, 60000), Want(at + 100, 60000));
  }
  EXPECT_EQ(origin_.read_calls(), 3u);
  EXPECT_FALSE(c->HostHolds(obj_, 0, kBlock));
  const uint64_t sparse_bytes = origin_.bytes_read();
  EXPECT_EQ(sparse_bytes, 3 * 61440u);
  // Pages 48..50 would make 48 of 64: the block instead, from its three gaps (pages 15, 31 and
  // 47..63, each more than kGapJoinBytes from the next).
  EXPECT_EQ(ReadAll(c.get(), obj_, 196608 + 50, 12000), Want(196608 + 50, 12000));
  EXPECT_EQ(origin_.read_calls(), 6u);
  EXPECT_EQ(origin_.bytes_read(), kBlock);
  EXPECT_EQ(origin_.bytes_read_twice(obj_.key), 0u);
  EXPECT_TRUE(c->HostHolds(obj_, 0, kBlock));
  auto st = ParseStats(c->StatsText());
  EXPECT_EQ(st["sparse.dense"], 1u);
  EXPECT_EQ(st["sparse.gap_fills"], 1u);
  EXPECT_EQ(st["sparse.gap_requests"], 3u);
  EXPECT_EQ(st["sparse.gap_bytes"], kBlock - sparse_bytes);
  // The block's pages are not kept twice: L1 holds the block, not its 45 entries beside it.
  EXPECT_EQ(st["l1.used"], kBlock);
  // Any read of it now is a block hit, with the right bytes.
  EXPECT_EQ(ReadAll(c.get(), obj_, 0, kBlock), Want(0, kBlock));
  EXPECT_EQ(origin_.read_calls(), 6u);
}

// A read over sparse_read_max (the kernel's readahead next to a projected read) in a block that
// has sparse entries fetches only what it reads; in a block without, the whole block.
TEST_F(SparseReadTest, ALargerReadInABlockWithEntriesFetchesOnlyItsPages) {
  auto c = OpenCache();
  EXPECT_EQ(ReadAll(c.get(), obj_, kBlock + 8192, 8192), Want(kBlock + 8192, 8192));
  EXPECT_FALSE(c->ReadsSparse(obj_, kBlock + 16384, 100000));
  EXPECT_EQ(ReadAll(c.get(), obj_, kBlock + 16384, 100000), Want(kBlock + 16384, 100000));
  EXPECT_EQ(origin_.read_calls(), 2u);
  EXPECT_EQ(origin_.bytes_read(), 8192u + 102400);
  EXPECT_FALSE(c->HostHolds(obj_, kBlock, kBlock));
  EXPECT_EQ(ReadAll(c.get(), obj_, 2 * kBlock + 16384, 100000), Want(2 * kBlock + 16384, 100000));
  EXPECT_EQ(origin_.bytes_read(), 8192u + 102400 + kBlock);
  EXPECT_TRUE(c->HostHolds(obj_, 2 * kBlock, kBlock));
}

TEST_F(SparseReadTest, LargeReadsHeldBlocksAndTheOffSwitchTakeWholeBlocks) {
  {
    auto c = OpenCache();
    EXPECT_FALSE(c->ReadsSparse(obj_, 0, 65537));
    EXPECT_EQ(ReadAll(c.get(), obj_, 0, 100000), Want(0, 100000));  // over sparse_read_max
    EXPECT_EQ(origin_.bytes_read(), kBlock);
    EXPECT_EQ(ReadAll(c.get(), obj_, 70000, 1000), Want(70000, 1000));  // held: a hit
    EXPECT_EQ(origin_.read_calls(), 1u);
    EXPECT_EQ(ParseStats(c->StatsText())["sparse.fetches"], 0u);
  }
  origin_.ResetCounters();
  options_.sparse_read_max = 0;
  auto c = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  EXPECT_FALSE(c->ReadsSparse(obj_, kBlock, 100));
  EXPECT_EQ(ReadAll(c.get(), obj_, kBlock + 5, 100), Want(kBlock + 5, 100));
  EXPECT_EQ(origin_.bytes_read(), kBlock);
  // Small objects are fetched whole whatever the read.
  options_.sparse_read_max = 64 << 10;
  options_.small_object_bytes = 8 * kBlock;
  auto small = OpenCache(/*with_l1=*/true, /*with_l2=*/false);
  EXPECT_FALSE(small->ReadsSparse(obj_, kBlock, 100));
}

TEST_F(SparseReadTest, EntriesSurviveARestartInL2AndEvictDropsThem) {
  {
    auto c = OpenCache();
    EXPECT_EQ(ReadAll(c.get(), obj_, 2 * kBlock + 70000, 30000), Want(2 * kBlock + 70000, 30000));
  }
  EXPECT_EQ(origin_.read_calls(), 1u);
  auto c = OpenCache();  // a new L1; L2 from disk
  EXPECT_EQ(ReadAll(c.get(), obj_, 2 * kBlock + 70000, 30000), Want(2 * kBlock + 70000, 30000));
  EXPECT_EQ(origin_.read_calls(), 1u);
  auto st = ParseStats(c->StatsText());
  EXPECT_GE(st["l2.hits"], 1u);
  EXPECT_EQ(st["sparse.hits"], 1u);
  c->Evict(obj_);
  EXPECT_EQ(ReadAll(c.get(), obj_, 2 * kBlock + 70000, 30000), Want(2 * kBlock + 70000, 30000));
  EXPECT_EQ(origin_.read_calls(), 2u);
}

TEST_F(SparseReadTest, AChangedObjectOrAFailureServesNothingAndCachesNothing) {
  auto c = OpenCache();
  origin_.FailNext(1, Status::IOError("injected"));
  CancelToken token;
  auto r = c->Read(obj_, kBlock + 100, 1000, &token);
  ASSERT_FALSE(r.ok());
  // The kernel's retry of the same page gets the error at once (failure replay).
  r = c->Read(obj_, kBlock + 100, 1000, &token);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(ParseStats(c->StatsText())["fetch.failures_replayed"], 1u);
  // A new version at the origin: the pinned read refuses it and keeps nothing.
  origin_.PutObject(obj_.key, Pattern(data_.size(), 6));
  r = c->Read(obj_, 3 * kBlock + 100, 1000, &token);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition) << r.status().ToString();
  auto st = ParseStats(c->StatsText());
  EXPECT_EQ(st["l1.used"], 0u);
  EXPECT_EQ(st["l2.used"], 0u);
}

TEST_F(SparseReadTest, ConcurrentReadersOfOneRangeShareOneRequestOnTheFetchPool) {
  auto c = OpenCache();
  origin_.HoldReads();
  std::vector<std::string> got(4);
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back(
        [&, i] { got[i] = ReadWithToken(c.get(), obj_, 3 * kBlock + 5000, 20000); });
  }
  origin_.WaitForBlockedReads(1);
  EXPECT_TRUE(Eventually([&] { return ParseStats(c->StatsText())["singleflight.merged"] == 3u; }))
      << "the other three readers did not join the flight";
  origin_.ReleaseReads();
  for (auto& t : readers) t.join();
  for (const auto& g : got) EXPECT_EQ(g, Want(3 * kBlock + 5000, 20000));
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(ParseStats(c->StatsText())["singleflight.merged"], 3u);
}

TEST(ChunkKeyTest, NamesTheBlockTheChunkSizeTheChunkAndTheLength) {
  const BlockKey b = MakeBlockKey("file:///data", "train/shard-000.tar", "etag-1", 1048576, 3);
  EXPECT_EQ(BlockKeyHex(b), "019b3d40472838cf06cd039aa70ec488");
  EXPECT_EQ(BlockKeyHex(MakeChunkKey(b, 3, 4096)), "cff2abe2a63e4ddf5b6fcada9b4cc7de");
  EXPECT_NE(MakeChunkKey(b, 3, 4096), MakeChunkKey(b, 3, 2048));
  EXPECT_NE(MakeChunkKey(b, 3, 4096), MakeChunkKey(b, 2, 4096));
  EXPECT_NE(MakeChunkKey(b, 3, 4096), b);
  // The keys of the 32 KiB chunks of earlier caches (no chunk size in the key): chunk 3 of 4096
  // bytes was bytes 98304..102400 of the block, not 12288..16384.
  EXPECT_NE(BlockKeyHex(MakeChunkKey(b, 3, 4096)), "648d87836fd5a7f67b8711b897fe5b8d");
  EXPECT_NE(BlockKeyHex(MakeChunkKey(b, 2, 32768)), "d78918818435f8b5e9130f9544b16f31");
}

TEST(TieredCacheLmdbTest, RemountOverLmdbReadsNothingFromOrigin) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  testing::FakeBlobStore origin("fake://bucket");
  const std::string data = testing::Pattern(10 * 4096 + 17);
  origin.PutObject("obj", data);
  ObjectRef o{"obj", *origin.Head("obj")};
  auto open = [&](std::unique_ptr<MetaStore>* meta,
                  std::unique_ptr<FlashStore>* flash) -> std::unique_ptr<TieredCache> {
    MetaStoreOptions mo;
    mo.path = dir.path() + "/meta";
    mo.map_size = 64ULL << 20;
    auto m = NewLmdbMetaStore(mo);
    EXPECT_OK(m);
    if (!m.ok()) return nullptr;
    *meta = std::move(*m);
    auto f = NewPosixFlashStore(dir.path() + "/l2", true);
    EXPECT_OK(f);
    *flash = std::move(*f);
    FlashTierOptions fo;
    fo.capacity_bytes = 1 << 20;
    fo.min_free_bytes = 0;
    auto l2 = NewFlashTier(fo, flash->get(), meta->get(), SystemClock());
    EXPECT_OK(l2);
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(NewMemoryTier({}));
    tiers.push_back(std::move(*l2));
    TieredCacheOptions co;
    co.block_size = 4096;
    auto c = TieredCache::Open(co, std::move(tiers), &origin, SystemClock());
    EXPECT_OK(c);
    return std::move(*c);
  };
  {
    std::unique_ptr<MetaStore> meta;
    std::unique_ptr<FlashStore> flash;
    auto c = open(&meta, &flash);
    ASSERT_TRUE(c);
    std::string buf(data.size(), '\0');
    auto n =
        tierfs::testing::ReadInto(*c, o, 0, {reinterpret_cast<std::byte*>(buf.data()), buf.size()});
    ASSERT_OK(n);
    EXPECT_EQ(buf, data);
    c.reset();  // tiers flush before the metastore closes
  }
  origin.ResetCounters();
  std::unique_ptr<MetaStore> meta;
  std::unique_ptr<FlashStore> flash;
  auto c = open(&meta, &flash);
  ASSERT_TRUE(c);
  std::string buf(data.size(), '\0');
  auto n =
      tierfs::testing::ReadInto(*c, o, 0, {reinterpret_cast<std::byte*>(buf.data()), buf.size()});
  ASSERT_OK(n);
  EXPECT_EQ(buf, data);
  EXPECT_EQ(origin.read_calls(), 0u);
  EXPECT_NE(c->StatsText().find("origin.bytes=0 "), std::string::npos) << c->StatsText();
  c.reset();
}

}  // namespace
}  // namespace tierfs
