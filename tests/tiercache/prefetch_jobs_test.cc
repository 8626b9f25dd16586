// PrefetchJobs over FakeBlobStore, a MemoryTier + FlashTier and the in-memory MetaStore: jobs on
// files and directories, target tiers, cancellation, failures, the persisted record and resuming
// a job in a fresh PrefetchJobs (the daemon restart case).
#include "tiercache/prefetch_jobs.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/fakes/fake_blob_store.h"
#include "tests/fakes/faulty_flash_store.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/catalog.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using namespace std::chrono_literals;
using testing::FakeBlobStore;
using testing::Pattern;

constexpr uint64_t kBs = 4096;

class PrefetchJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto fs = NewPosixFlashStore(dir_.path(), false);
    ASSERT_TRUE(fs.ok());
    flash_ = std::move(*fs);
    meta_ = NewMemMetaStore();
    // d/: 3 files of 5, 1 and 0 blocks; d/sub/: 2 files; plus a file outside.
    origin_.PutObject("d/a.bin", Pattern(5 * kBs, 1));
    origin_.PutObject("d/b.bin", Pattern(100, 2));
    origin_.PutObject("d/empty", "");
    origin_.PutObject("d/sub/c.bin", Pattern(3 * kBs + 7, 3));
    origin_.PutObject("d/sub/e.bin", Pattern(kBs, 4));
    origin_.PutObject("other.bin", Pattern(2 * kBs, 5));
    OpenAll();
  }

  void OpenAll() {
    std::vector<std::unique_ptr<Tier>> tiers;
    MemoryTierOptions m;
    m.capacity_bytes = 1 << 20;
    m.shards = 1;
    tiers.push_back(NewMemoryTier(m));
    FlashTierOptions f;
    f.capacity_bytes = 8 << 20;
    f.min_free_bytes = 0;
    auto l2 = NewFlashTier(f, flash_.get(), meta_.get(), &clock_);
    ASSERT_TRUE(l2.ok()) << l2.status().ToString();
    tiers.push_back(std::move(*l2));
    TieredCacheOptions o;
    o.block_size = kBs;
    o.prefetch_threads = 0;
    auto c = TieredCache::Open(o, std::move(tiers), &origin_, &clock_);
    ASSERT_TRUE(c.ok());
    cache_ = std::move(*c);
    auto cat = Catalog::Open(CatalogOptions{}, &origin_, meta_.get(), &clock_);
    ASSERT_TRUE(cat.ok());
    catalog_ = std::move(*cat);
    OpenJobs();
  }

  void OpenJobs() {
    PrefetchJobsOptions o;
    o.threads = 3;
    o.blocks_per_task = 2;
    o.persist_interval = 5ms;
    auto j = PrefetchJobs::Open(o, catalog_.get(), cache_.get(), meta_.get());
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    jobs_ = std::move(*j);
  }

  ObjectRef Ref(const std::string& key) {
    ObjectRef r;
    r.key = key;
    r.info = *origin_.Head(key);
    return r;
  }

  uint64_t Held(const ObjectRef& r, std::string_view tier) {
    for (const auto& [name, n] : cache_->Residency(r)) {
      if (name == tier) return n;
    }
    return 0;
  }

  PrefetchJobStatus WaitDone(std::string_view path) {
    EXPECT_TRUE(jobs_->TEST_WaitIdle(20s));
    auto st = jobs_->Get(path);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? *st : PrefetchJobStatus{};
  }

  testing::TcTempDir dir_;
  FakeBlobStore origin_{"fake://bucket"};
  FakeClock clock_;
  std::unique_ptr<FlashStore> flash_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<TieredCache> cache_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<PrefetchJobs> jobs_;
};

TEST_F(PrefetchJobsTest, DirectoryIntoL2IsRecursiveAndSkipsL1) {
  TC_ASSERT_OK(jobs_->Start("d", "l2"));
  PrefetchJobStatus st = WaitDone("d");
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_total, 5u);
  EXPECT_EQ(st.files_done, 5u);
  const uint64_t total = 5 * kBs + 100 + 3 * kBs + 7 + kBs;
  EXPECT_EQ(st.bytes_total, total);
  EXPECT_EQ(st.bytes_done, total);
  EXPECT_EQ(FormatPrefetchStatus(st), "state=done tier=l2 files=5/5 bytes=" +
                                          std::to_string(total) + "/" + std::to_string(total));
  EXPECT_EQ(Held(Ref("d/a.bin"), "l2"), 5u);
  EXPECT_EQ(Held(Ref("d/a.bin"), "l1"), 0u);
  EXPECT_EQ(Held(Ref("d/sub/c.bin"), "l2"), 4u);
  EXPECT_EQ(Held(Ref("other.bin"), "l2"), 0u);  // outside the directory

  // Every byte is now served without the origin.
  origin_.ResetCounters();
  std::string out(3 * kBs + 7, '\0');
  auto n = cache_->ReadInto(Ref("d/sub/c.bin"), 0,
                            std::span(reinterpret_cast<std::byte*>(out.data()), out.size()));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(out, Pattern(3 * kBs + 7, 3));
  EXPECT_EQ(origin_.read_calls(), 0u);
}

TEST_F(PrefetchJobsTest, SingleFileIntoL1FillsL1AndL2) {
  TC_ASSERT_OK(jobs_->Start("other.bin", "l1"));
  PrefetchJobStatus st = WaitDone("other.bin");
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_total, 1u);
  EXPECT_EQ(Held(Ref("other.bin"), "l1"), 2u);
  EXPECT_EQ(Held(Ref("other.bin"), "l2"), 2u);
}

TEST_F(PrefetchJobsTest, BadTiersAreInvalidArgument) {
  EXPECT_EQ(jobs_->Start("d", "l4").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(jobs_->Start("d", "").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(jobs_->Start("d", "l3").code(), Status::Code::kInvalidArgument);  // no L3 here
  EXPECT_TRUE(jobs_->Get("d").status().IsNotFound());
  EXPECT_TRUE(jobs_->Cancel("d").IsNotFound());
}

TEST_F(PrefetchJobsTest, MissingPathFails) {
  TC_ASSERT_OK(jobs_->Start("nope", "l2"));
  PrefetchJobStatus st = WaitDone("nope");
  EXPECT_EQ(st.state, PrefetchState::kFailed);
  // The reason names the missing path, as a NotFound.
  EXPECT_NE(st.error.find("NotFound"), std::string::npos) << st.error;
  EXPECT_NE(st.error.find("nope"), std::string::npos) << st.error;
  EXPECT_NE(FormatPrefetchStatus(st).find("state=failed"), std::string::npos);
}

TEST_F(PrefetchJobsTest, ChangedObjectFailsTheJob) {
  // The listing is cached with the old ETag; the origin's object changed meanwhile.
  std::vector<DirEntry> warm;
  TC_ASSERT_OK(catalog_->ReadDir("d", "", 100, &warm));
  origin_.PutObject("d/a.bin", Pattern(5 * kBs, 9));
  TC_ASSERT_OK(jobs_->Start("d", "l2"));
  PrefetchJobStatus st = WaitDone("d");
  EXPECT_EQ(st.state, PrefetchState::kFailed);
  // The reason is the version change of that file (If-Match refused), not some other error.
  EXPECT_NE(st.error.find("FailedPrecondition"), std::string::npos) << st.error;
  EXPECT_NE(st.error.find("d/a.bin"), std::string::npos) << st.error;
}

TEST_F(PrefetchJobsTest, CancelStopsARunningJob) {
  origin_.SetDelay(20ms);
  TC_ASSERT_OK(jobs_->Start("d", "l2"));
  std::this_thread::sleep_for(50ms);
  TC_ASSERT_OK(jobs_->Cancel("d"));
  PrefetchJobStatus st = WaitDone("d");
  EXPECT_EQ(st.state, PrefetchState::kCancelled);
  EXPECT_LT(st.bytes_done, st.bytes_total == 0 ? 1 : st.bytes_total);
  // Restarting a finished job is allowed.
  origin_.SetDelay(0ms);
  TC_ASSERT_OK(jobs_->Start("d", "l2"));
  EXPECT_EQ(WaitDone("d").state, PrefetchState::kDone);
}

TEST_F(PrefetchJobsTest, RestartResumesFromThePersistedCursor) {
  origin_.SetDelay(15ms);
  TC_ASSERT_OK(jobs_->Start("d", "l2"));
  // Let it make some progress, then "stop the daemon".
  for (int i = 0; i < 400; ++i) {
    auto st = jobs_->Get("d");
    if (st.ok() && st->bytes_done > 0) break;
    std::this_thread::sleep_for(5ms);
  }
  jobs_.reset();
  auto stored = meta_->GetValue(PrefetchJobKey("d"));
  ASSERT_TRUE(stored.ok() && stored->has_value());
  auto rec = DecodePrefetchJob("d", **stored);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->state, PrefetchState::kRunning);
  EXPECT_EQ(rec->files_total, 5u);
  EXPECT_LT(rec->bytes_done, rec->bytes_total);

  origin_.SetDelay(0ms);
  origin_.ResetCounters();
  OpenJobs();  // resumes without being asked
  PrefetchJobStatus st = WaitDone("d");
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_done, 5u);
  EXPECT_EQ(st.bytes_done, st.bytes_total);
  // Blocks fetched before the restart are not fetched again.
  EXPECT_LE(origin_.read_calls(), 10u);
  EXPECT_EQ(Held(Ref("d/a.bin"), "l2"), 5u);
  EXPECT_EQ(Held(Ref("d/sub/e.bin"), "l2"), 1u);
}

TEST_F(PrefetchJobsTest, DirectoryOfMoreThanOneListingPage) {
  for (int i = 0; i < 1100; ++i) origin_.PutObject("big/f" + std::to_string(i), "x");
  TC_ASSERT_OK(jobs_->Start("big", "l2"));
  PrefetchJobStatus st = WaitDone("big");
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_total, 1100u);
  EXPECT_EQ(st.bytes_done, 1100u);
}

TEST(PrefetchJobRecord, RoundTripAndCorruption) {
  PrefetchJobStatus s;
  s.path = "a/b";
  s.tier = "l2";
  s.state = PrefetchState::kFailed;
  s.files_done = 3;
  s.files_total = 10;
  s.bytes_done = 12345;
  s.bytes_total = 99999;
  s.cursor = 2;
  s.error = "IOError: disk on fire";
  auto d = DecodePrefetchJob("a/b", EncodePrefetchJob(s));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->state, s.state);
  EXPECT_EQ(d->tier, "l2");
  EXPECT_EQ(d->files_done, 3u);
  EXPECT_EQ(d->files_total, 10u);
  EXPECT_EQ(d->bytes_done, 12345u);
  EXPECT_EQ(d->bytes_total, 99999u);
  EXPECT_EQ(d->cursor, 2u);
  EXPECT_EQ(d->error, s.error);
  EXPECT_EQ(FormatPrefetchStatus(*d),
            "state=failed tier=l2 files=3/10 bytes=12345/99999 error=IOError:_disk_on_fire");
  EXPECT_FALSE(DecodePrefetchJob("x", "").ok());
  EXPECT_FALSE(DecodePrefetchJob("x", "2 0 l2 0 0 0 0 0 ").ok());
  EXPECT_FALSE(DecodePrefetchJob("x", "1 9 l2 0 0 0 0 0 ").ok());
  EXPECT_FALSE(DecodePrefetchJob("x", "1 0 l2 0 0 x 0 0 ").ok());
  EXPECT_EQ(PrefetchJobKey(""), "prefetch/job/");
  EXPECT_EQ(PrefetchJobKey("a/b"), "prefetch/job/a/b");
}

}  // namespace
}  // namespace tierfs
