// Admission (tiercache/admission.h): the policies, the ghost list, the scan detection, and how
// TieredCache applies them to L2 over FakeBlobStore, a MemoryTier and a FlashTier.
#include "tiercache/admission.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/eventually.h"
#include "tests/testing/read_into.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using testing::FakeBlobStore;
using testing::ParseStats;
using testing::Pattern;

constexpr uint64_t kBs = 4096;

BlockKey Key(uint64_t i) { return MakeBlockKey("src", "obj", "etag", kBs, i); }

TEST(AdmitPolicyValues, ParseAndName) {
  for (AdmitPolicy p : {AdmitPolicy::kAlways, AdmitPolicy::kReuse, AdmitPolicy::kNever}) {
    auto r = ParseAdmitPolicy(AdmitPolicyName(p));
    ASSERT_OK(r);
    EXPECT_EQ(*r, p);
  }
  for (const char* bad : {"", "default", "Always", "reuse ", "sometimes"}) {
    EXPECT_EQ(ParseAdmitPolicy(bad).status().code(), Status::Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(AdmitPolicyName(AdmitPolicy::kDefault), "default");
}

TEST(Admission, ReuseProtectsOnTheSecondSightWithinTheWindow) {
  AdmissionOptions o;
  o.default_policy = AdmitPolicy::kReuse;
  o.ghost_bytes = 64 * 8;  // 64 blocks remembered
  Admission a(o, 1 << 20, kBs);
  EXPECT_EQ(a.ghost_entries(), 64u);
  const Placement none;
  // First sight: remembered, and stored as probationary (room only, never a protected block's).
  EXPECT_EQ(a.Decide(Key(1), "obj", 100, none), AdmitDecision::kProbation);
  EXPECT_EQ(a.Decide(Key(1), "obj", 100, none), AdmitDecision::kYes);  // seen again: a ghost hit
  EXPECT_EQ(a.stats().rejected, 0u);
  EXPECT_EQ(a.stats().admitted, 2u);
  EXPECT_EQ(a.stats().probation, 1u);
  EXPECT_EQ(a.stats().ghost_hits, 1u);
  // Thousands of other blocks later, block 2 has left the window: probationary again.
  EXPECT_EQ(a.Decide(Key(2), "obj", 100, none), AdmitDecision::kProbation);
  for (uint64_t i = 100; i < 5000; ++i) (void)a.Decide(Key(i), "obj", 100, none);
  EXPECT_EQ(a.Decide(Key(2), "obj", 100, none), AdmitDecision::kProbation);
  // Pinned blocks are admitted protected whatever the policy, without touching the ghost list.
  Placement pinned;
  pinned.pinned = true;
  pinned.admit = AdmitPolicy::kNever;
  EXPECT_EQ(a.Decide(Key(9999), "obj", 100, pinned), AdmitDecision::kYes);
}

TEST(Admission, NeverAndAlwaysAndTheDefault) {
  AdmissionOptions o;  // default: always
  Admission a(o, 1 << 20, kBs);
  Placement never;
  never.admit = AdmitPolicy::kNever;
  EXPECT_EQ(a.Decide(Key(1), "obj", 100, never), AdmitDecision::kNo);
  // never is never, also the second time
  EXPECT_EQ(a.Decide(Key(1), "obj", 100, never), AdmitDecision::kNo);
  EXPECT_EQ(a.Decide(Key(1), "obj", 100, Placement{}), AdmitDecision::kYes);
  EXPECT_EQ(a.stats().rejected, 2u);
  EXPECT_EQ(a.stats().admitted, 1u);
  EXPECT_EQ(a.stats().ghost_hits, 0u);
  // ghost_bytes 0: twice as many blocks as L2 holds (1 MiB / 4 KiB = 256 -> 512).
  EXPECT_EQ(a.ghost_entries(), 512u);
}

TEST(Admission, TheGhostListIsCappedWhateverTheL2Size) {
  AdmissionOptions o;
  // 1 PiB and 1 EiB of 1 MiB blocks would ask for 16 GiB and 16 TiB of fingerprints.
  for (uint64_t l2 : {uint64_t{1} << 50, uint64_t{1} << 60, UINT64_MAX}) {
    Admission a(o, l2, 1 << 20);
    EXPECT_EQ(a.ghost_entries() * sizeof(uint64_t), AdmissionOptions::kMaxGhostBytes) << l2;
  }
  o.ghost_bytes = uint64_t{1} << 40;  // refused by config; capped here all the same
  Admission explicit_size(o, 1 << 30, kBs);
  EXPECT_EQ(explicit_size.ghost_entries() * sizeof(uint64_t), AdmissionOptions::kMaxGhostBytes);
}

TEST(Admission, SequentialReadersOfLargeFilesAreScans) {
  AdmissionOptions o;
  o.scan_percent = 10;
  Admission large(o, 64 << 20, kBs);  // a large L2: the threshold is 10% of it
  EXPECT_EQ(large.scan_threshold_bytes(), (64u << 20) / 100 * 10);
  Admission a(o, 1 << 20, kBs);  // a small one: files under kScanMinBlocks are never scans
  ASSERT_EQ(a.scan_threshold_bytes(), Admission::kScanMinBlocks * kBs);
  const uint64_t big = 64 * kBs, small = 16 * kBs;
  for (uint64_t i = 0; i < Admission::kScanRunBlocks; ++i) {
    // Not known yet to be anything but a scan: probationary (reuse) from the first block.
    EXPECT_EQ(a.Effective("big", big, AdmitPolicy::kDefault), AdmitPolicy::kReuse) << i;
    a.NoteRead("big", big, i * kBs, kBs);
    a.NoteRead("small", small, i * kBs, kBs);
  }
  EXPECT_EQ(a.Effective("big", big, AdmitPolicy::kDefault), AdmitPolicy::kReuse);
  EXPECT_EQ(a.Effective("small", small, AdmitPolicy::kDefault), AdmitPolicy::kAlways);
  EXPECT_EQ(a.stats().scans, 1u);
  // An explicit policy wins over the detection.
  EXPECT_EQ(a.Effective("big", big, AdmitPolicy::kAlways), AdmitPolicy::kAlways);
  EXPECT_EQ(a.Effective("big", big, AdmitPolicy::kNever), AdmitPolicy::kNever);
  // Reads slightly out of order (concurrent kernel reads) keep the run going.
  a.NoteRead("big", big, 6 * kBs, kBs);
  a.NoteRead("big", big, 5 * kBs, kBs);
  EXPECT_EQ(a.Effective("big", big, AdmitPolicy::kDefault), AdmitPolicy::kReuse);
  // A jump far away ends the scan (a new pass, or a random reader: not known yet), and the next
  // jump tells: random readers are not scans.
  a.NoteRead("big", big, 40 * kBs, kBs);
  EXPECT_EQ(a.Effective("big", big, AdmitPolicy::kDefault), AdmitPolicy::kReuse);
  a.NoteRead("big", big, 10 * kBs, kBs);
  EXPECT_EQ(a.Effective("big", big, AdmitPolicy::kDefault), AdmitPolicy::kAlways);
  a.NoteRead("big", big, 30 * kBs, kBs);
  EXPECT_EQ(a.Effective("big", big, AdmitPolicy::kDefault), AdmitPolicy::kAlways);
  EXPECT_EQ(a.stats().scans, 1u);
  // Off with scan_percent 0; and a default of never is not turned into reuse.
  o.scan_percent = 0;
  Admission off(o, 1 << 20, kBs);
  for (uint64_t i = 0; i < 8; ++i) off.NoteRead("big", big, i * kBs, kBs);
  EXPECT_EQ(off.Effective("big", big, AdmitPolicy::kDefault), AdmitPolicy::kAlways);
  o.scan_percent = 10;
  o.default_policy = AdmitPolicy::kNever;
  Admission nev(o, 1 << 20, kBs);
  for (uint64_t i = 0; i < 8; ++i) nev.NoteRead("big", big, i * kBs, kBs);
  EXPECT_EQ(nev.Effective("big", big, AdmitPolicy::kDefault), AdmitPolicy::kNever);
}

// Within one pass a refetched block (readahead ran further ahead than the probationary room) is
// no reuse; in the next pass over the file a ghost hit protects it.
TEST(Admission, AScansGhostHitsProtectOnlyInALaterPass) {
  AdmissionOptions o;
  Admission a(o, 1 << 20, kBs);  // files of 64 blocks and more are scans
  const uint64_t big = 64 * kBs;
  for (uint64_t i = 0; i < 8; ++i) a.NoteRead("big", big, i * kBs, kBs);
  ASSERT_EQ(a.stats().scans, 1u);
  EXPECT_EQ(a.Decide(Key(5), "big", big, Placement{}), AdmitDecision::kProbation);
  EXPECT_EQ(a.Decide(Key(5), "big", big, Placement{}), AdmitDecision::kProbation);
  // The pass ends; the next starts over from the first block.
  for (uint64_t i = 0; i < 8; ++i) a.NoteRead("big", big, i * kBs, kBs);
  EXPECT_EQ(a.Decide(Key(5), "big", big, Placement{}), AdmitDecision::kYes);
  EXPECT_EQ(a.stats().ghost_hits, 1u);
  // An explicit reuse policy protects on any ghost hit.
  Placement reuse;
  reuse.admit = AdmitPolicy::kReuse;
  EXPECT_EQ(a.Decide(Key(7), "other", big, reuse), AdmitDecision::kProbation);
  EXPECT_EQ(a.Decide(Key(7), "other", big, reuse), AdmitDecision::kYes);
}

// Concurrent decisions and reads of several files (TSan covers the ghost list and the scan map).
TEST(Admission, ConcurrentUseCountsEveryDecision) {
  AdmissionOptions o;
  o.default_policy = AdmitPolicy::kReuse;
  Admission a(o, 1 << 20, kBs);
  constexpr int kThreads = 4, kOps = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&a, t] {
      const std::string key = "f" + std::to_string(t % 2);
      for (int i = 0; i < kOps; ++i) {
        a.NoteRead(key, 128 * kBs, (i % 128) * kBs, kBs);
        (void)a.Decide(Key(i % 300), key, 128 * kBs, Placement{});
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(a.stats().admitted + a.stats().rejected, uint64_t{kThreads} * kOps);
  EXPECT_GT(a.stats().ghost_hits, 0u);
}

// TieredCache with admission: L1 of one block (so that re-reads go below it), L2 of 1 MiB.
class AdmissionCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto fs = NewPosixFlashStore(dir_.path(), false);
    ASSERT_OK(fs);
    flash_ = std::move(*fs);
    meta_ = NewMemMetaStore();
    options_.block_size = kBs;
    options_.prefetch_threads = 0;  // no readahead: every block read is a demand read
    options_.fetch_threads = 0;
  }

  std::unique_ptr<TieredCache> OpenCache() {
    std::vector<std::unique_ptr<Tier>> tiers;
    MemoryTierOptions m;
    m.capacity_bytes = kBs;
    m.shards = 1;
    tiers.push_back(NewMemoryTier(m));
    FlashTierOptions f;
    f.capacity_bytes = 1 << 20;
    f.min_free_bytes = 0;
    auto l2 = NewFlashTier(f, flash_.get(), meta_.get(), &clock_);
    EXPECT_OK(l2);
    if (!l2.ok()) return nullptr;
    tiers.push_back(std::move(*l2));
    auto c = TieredCache::Open(options_, std::move(tiers), &origin_, &clock_);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  ObjectRef Put(const std::string& key, uint64_t size) {
    origin_.PutObject(key, Pattern(size));
    ObjectRef o;
    o.key = key;
    o.info = *origin_.Head(key);
    origin_.ResetCounters();
    return o;
  }

  static void ReadBlock(TieredCache* c, const ObjectRef& o, uint64_t i) {
    std::string buf(kBs, '\0');
    auto n = tierfs::testing::ReadInto(*c, o, i * kBs, std::as_writable_bytes(std::span(buf)));
    ASSERT_OK(n);
  }
  static uint64_t InL2(TieredCache* c, const ObjectRef& o) { return c->Residency(o)[1].second; }
  // Every object gets admission policy `p` (before OpenCache).
  void AdmitEverything(AdmitPolicy p) {
    options_.placement = [p](std::string_view) {
      Placement pl;
      pl.admit = p;
      return pl;
    };
  }

  testing::TempDir dir_;
  FakeBlobStore origin_{"fake://bucket"};
  FakeClock clock_;
  std::unique_ptr<FlashStore> flash_;
  std::unique_ptr<MetaStore> meta_;
  TieredCacheOptions options_;
};

TEST_F(AdmissionCacheTest, ReuseStoresAFirstSightInFreeRoomAsProbationary) {
  options_.admission.default_policy = AdmitPolicy::kReuse;
  auto c = OpenCache();
  ObjectRef o = Put("f", 2 * kBs);
  ReadBlock(c.get(), o, 0);
  ReadBlock(c.get(), o, 1);         // pushes block 0 out of the one-block L1
  EXPECT_EQ(InL2(c.get(), o), 2u);  // L2 had room: stored, as probationary
  ReadBlock(c.get(), o, 0);         // from L2
  ReadBlock(c.get(), o, 1);
  EXPECT_EQ(origin_.read_calls(), 2u);
  auto s = ParseStats(c->StatsText());
  EXPECT_EQ(s["admit.rejected"], 0u);
  EXPECT_EQ(s["admit.admitted"], 2u);
  EXPECT_EQ(s["admit.probation"], 2u);
  EXPECT_EQ(s["admit.ghost_hits"], 0u);
  EXPECT_EQ(s["l2.hits"], 2u);
}

// L2 (256 blocks) holds 200 protected blocks of `hot`; a reuse pass over 100 blocks of `scan`
// fills the 56 free, then takes only its own blocks' room: `hot` stays whole. A full L2 of
// protected blocks declines the probationary ones.
TEST_F(AdmissionCacheTest, AProbationaryBlockTakesFreeRoomButNeverAProtectedBlocks) {
  options_.placement = [](std::string_view key) {
    Placement p;
    p.admit = key == "hot" ? AdmitPolicy::kAlways : AdmitPolicy::kReuse;
    return p;
  };
  auto c = OpenCache();
  ObjectRef hot = Put("hot", 200 * kBs);
  for (uint64_t i = 0; i < 200; ++i) ReadBlock(c.get(), hot, i);
  ObjectRef scan = Put("scan", 100 * kBs);
  for (uint64_t i = 0; i < 100; ++i) ReadBlock(c.get(), scan, i);
  EXPECT_EQ(InL2(c.get(), hot), 200u);
  EXPECT_EQ(InL2(c.get(), scan), 56u);
  origin_.ResetCounters();
  for (uint64_t i = 0; i < 200; ++i) ReadBlock(c.get(), hot, i);
  EXPECT_EQ(origin_.read_calls(), 0u);  // every hot block from L2
  // The newest probationary blocks are the ones kept (the scan's last 56).
  for (uint64_t i = 44; i < 100; ++i) ReadBlock(c.get(), scan, i);
  EXPECT_EQ(origin_.read_calls(), 0u);
  c.reset();
  // Reopened from its index, the scan's blocks are still probationary: another reuse pass of 56
  // blocks takes their room, not hot's.
  auto c2 = OpenCache();
  ObjectRef scan2 = Put("scan2", 56 * kBs);
  for (uint64_t i = 0; i < 56; ++i) ReadBlock(c2.get(), scan2, i);
  EXPECT_EQ(InL2(c2.get(), hot), 200u);
  EXPECT_EQ(InL2(c2.get(), scan), 0u);
  EXPECT_EQ(InL2(c2.get(), scan2), 56u);
}

TEST_F(AdmissionCacheTest, AFullL2OfProtectedBlocksDeclinesProbationaryOnes) {
  options_.placement = [](std::string_view key) {
    Placement p;
    p.admit = key == "hot" ? AdmitPolicy::kAlways : AdmitPolicy::kReuse;
    return p;
  };
  auto c = OpenCache();
  ObjectRef hot = Put("hot", 256 * kBs);  // all of L2
  for (uint64_t i = 0; i < 256; ++i) ReadBlock(c.get(), hot, i);
  ObjectRef scan = Put("scan", 10 * kBs);
  for (uint64_t i = 0; i < 10; ++i) ReadBlock(c.get(), scan, i);
  EXPECT_EQ(InL2(c.get(), scan), 0u);
  EXPECT_EQ(InL2(c.get(), hot), 256u);
  EXPECT_EQ(ParseStats(c->StatsText())["l2.evictions"], 0u);
}

TEST_F(AdmissionCacheTest, NeverServesWithoutStoringButPinsAndDeepPrefetchAreAdmitted) {
  bool pin = false;
  options_.placement = [&pin](std::string_view key) {
    Placement p;
    p.admit = AdmitPolicy::kNever;
    p.pinned = pin && key == "pinned";
    return p;
  };
  auto c = OpenCache();
  ObjectRef o = Put("f", 4 * kBs);
  for (uint64_t i = 0; i < 4; ++i) ReadBlock(c.get(), o, i);
  for (uint64_t i = 0; i < 4; ++i) ReadBlock(c.get(), o, i);
  EXPECT_EQ(InL2(c.get(), o), 0u);
  EXPECT_EQ(origin_.read_calls(), 8u);
  // A deep prefetch into L2 (pin, prefetch jobs, prefetch_list) does not ask admission.
  for (uint64_t i = 0; i < 2; ++i) ASSERT_OK(c->Hydrate(o, i, 1, Placement{}));
  uint64_t done = 0;
  ASSERT_OK(c->HydrateRun(o, 2, 2, 1, &done));
  EXPECT_EQ(InL2(c.get(), o), 4u);
  // A pinned object's blocks are admitted even under `never`.
  pin = true;
  ObjectRef p = Put("pinned", 2 * kBs);
  ReadBlock(c.get(), p, 0);
  ReadBlock(c.get(), p, 1);
  EXPECT_EQ(InL2(c.get(), p), 2u);
  auto s = ParseStats(c->StatsText());
  EXPECT_EQ(s["admit.rejected"], 8u);
  EXPECT_EQ(s["admit.admitted"], 2u);
}

// Deep prefetch into L2 of blocks a reader already brought into L1 (admission kept them out of
// L2) copies them down instead of fetching them again.
TEST_F(AdmissionCacheTest, HydrationCopiesWhatL1HoldsIntoL2WithoutTheOrigin) {
  AdmitEverything(AdmitPolicy::kNever);
  auto c = OpenCache();
  ObjectRef o = Put("f", 4 * kBs);
  for (uint64_t i = 0; i < 4; ++i) ReadBlock(c.get(), o, i);  // L1 (one block) keeps block 3
  EXPECT_EQ(InL2(c.get(), o), 0u);
  EXPECT_EQ(origin_.bytes_read(), 4 * kBs);
  uint64_t done = 0;
  ASSERT_OK(c->HydrateRun(o, 0, 4, 1, &done));
  EXPECT_EQ(done, 4 * kBs);
  EXPECT_EQ(InL2(c.get(), o), 4u);
  EXPECT_EQ(origin_.read_calls(), 5u);  // blocks 0-2 as one run
  EXPECT_EQ(origin_.bytes_read(), 7 * kBs);
  // One block: the same.
  ObjectRef p = Put("g", 2 * kBs);
  ReadBlock(c.get(), p, 1);
  ASSERT_OK(c->Hydrate(p, 1, 1, Placement{}));
  EXPECT_EQ(InL2(c.get(), p), 1u);
  EXPECT_EQ(origin_.read_calls(), 1u);
  for (uint64_t i = 0; i < 2; ++i) ReadBlock(c.get(), p, i);  // right bytes from every tier
}

// TierHolds (deep prefetch finishes such runs on its runner): every block in the target tier
// itself, and never for an object under a TTL (expiry is HydrateRun's to find).
TEST_F(AdmissionCacheTest, TierHoldsOnlyWhatTheTargetHoldsWhole) {
  std::chrono::nanoseconds ttl = std::chrono::nanoseconds::max();
  options_.placement = [&ttl](std::string_view) {
    Placement pl;
    pl.admit = AdmitPolicy::kNever;  // reads fill L1 only
    pl.ttl = ttl;
    return pl;
  };
  auto c = OpenCache();
  ObjectRef o = Put("f", 4 * kBs);
  ReadBlock(c.get(), o, 3);
  EXPECT_TRUE(c->TierHolds(o, 3, 1, 0));
  EXPECT_FALSE(c->TierHolds(o, 3, 1, 1));  // L1 holds it, L2 does not
  EXPECT_FALSE(c->TierHolds(o, 2, 2, 0));  // block 2 nowhere
  uint64_t done = 0;
  ASSERT_OK(c->HydrateRun(o, 1, 2, 1, &done));
  EXPECT_TRUE(c->TierHolds(o, 1, 2, 1));
  EXPECT_FALSE(c->TierHolds(o, 0, 3, 1));
  ASSERT_OK(c->HydrateRun(o, 0, 4, 1, &done));
  EXPECT_TRUE(c->TierHolds(o, 0, 4, 1));
  EXPECT_FALSE(c->TierHolds(o, 0, 5, 1));  // past the end
  EXPECT_FALSE(c->TierHolds(o, 0, 0, 1));
  EXPECT_FALSE(c->TierHolds(o, 0, 4, 2));  // no such tier
  ttl = std::chrono::hours(1);
  EXPECT_FALSE(c->TierHolds(o, 0, 4, 1));
}

// A reader of a block that a deep prefetch is fetching waits for that fetch: the origin serves
// the block once (a loader reading what its PrefetchSampler hydrates a moment earlier).
TEST_F(AdmissionCacheTest, AReaderJoinsTheHydrationsFetchInsteadOfSendingItsOwn) {
  auto c = OpenCache();
  ObjectRef o = Put("f", 4 * kBs);
  origin_.HoldReads();
  uint64_t done = 0;
  Status hydrated;
  std::thread h([&] { hydrated = c->HydrateRun(o, 0, 4, 1, &done); });
  origin_.WaitForBlockedReads(1);
  std::string buf(kBs, '\0');
  Result<size_t> got = Status::Internal("not read");
  std::thread r([&] {
    got = tierfs::testing::ReadInto(*c, o, 2 * kBs, std::as_writable_bytes(std::span(buf)));
  });
  // Give the reader time to get to its fetch: one of its own would wait at the gate too (a
  // window for a fetch that must not come, so not an error when it ends).
  testing::Eventually([&] { return origin_.blocked_reads() >= 2; }, std::chrono::milliseconds(300));
  origin_.ReleaseReads();
  h.join();
  r.join();
  ASSERT_OK(hydrated);
  ASSERT_OK(got);
  EXPECT_EQ(buf, Pattern(4 * kBs).substr(2 * kBs, kBs));
  EXPECT_EQ(ParseStats(c->StatsText())["singleflight.merged"], 1u);
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(origin_.bytes_read(), 4 * kBs);
  EXPECT_EQ(InL2(c.get(), o), 4u);
}

TEST_F(AdmissionCacheTest, ASequentialPassOverALargeFileIsStoredAsProbationary) {
  auto c = OpenCache();  // default: always, scans: files of 64 blocks (> 10% of L2) or more
  ObjectRef big = Put("big", 64 * kBs);
  ObjectRef small = Put("small", 16 * kBs);
  for (uint64_t i = 0; i < 64; ++i) ReadBlock(c.get(), big, i);
  for (uint64_t i = 0; i < 16; ++i) ReadBlock(c.get(), small, i);
  // Probationary from its first block (its pattern unknown, then a scan detected on its 4th
  // block), and all of it stored: L2 has room.
  EXPECT_EQ(InL2(c.get(), big), 64u);
  EXPECT_EQ(InL2(c.get(), small), 16u);  // below the threshold: always
  auto s = ParseStats(c->StatsText());
  EXPECT_EQ(s["admit.scans"], 1u);
  EXPECT_EQ(s["admit.rejected"], 0u);
  EXPECT_EQ(s["admit.probation"], 64u);
  // A second pass is served by L2.
  for (uint64_t i = 0; i < 64; ++i) ReadBlock(c.get(), big, i);
  EXPECT_EQ(origin_.read_calls(), 64u + 16u);
}

TEST_F(AdmissionCacheTest, AnExplicitAlwaysOverridesTheScanDetection) {
  AdmitEverything(AdmitPolicy::kAlways);
  auto c = OpenCache();
  ObjectRef big = Put("big", 64 * kBs);
  for (uint64_t i = 0; i < 64; ++i) ReadBlock(c.get(), big, i);
  EXPECT_EQ(InL2(c.get(), big), 64u);
  EXPECT_EQ(ParseStats(c->StatsText())["admit.scans"], 1u);  // detected, not applied
}

}  // namespace
}  // namespace tierfs
