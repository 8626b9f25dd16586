// PrefetchJobs over FakeBlobStore, a MemoryTier + FlashTier and the in-memory MetaStore: jobs on
// files and directories, target tiers, cancellation, failures, the persisted record and resuming
// a job in a fresh PrefetchJobs (the daemon restart case).
#include "tiercache/prefetch_jobs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/fakes/fake_blob_store.h"
#include "tests/fakes/faulty_flash_store.h"
#include "tests/testing/eventually.h"
#include "tests/testing/read_into.h"
#include "tests/testing/status_matchers.h"
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
    ASSERT_OK(fs);
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
    ASSERT_OK(l2);
    tiers.push_back(std::move(*l2));
    TieredCacheOptions o;
    o.block_size = kBs;
    o.prefetch_threads = 0;
    auto c = TieredCache::Open(o, std::move(tiers), &origin_, &clock_);
    ASSERT_OK(c);
    cache_ = std::move(*c);
    auto cat = Catalog::Open(CatalogOptions{}, &origin_, meta_.get(), &clock_);
    ASSERT_OK(cat);
    catalog_ = std::move(*cat);
    OpenJobs();
  }

  void OpenJobs(size_t keep_finished = 1024) {
    PrefetchJobsOptions o;
    o.threads = 3;
    o.blocks_per_task = 2;
    o.persist_interval = 5ms;
    o.keep_finished = keep_finished;
    OpenJobsWith(o);
  }

  void OpenJobsWith(const PrefetchJobsOptions& o) {
    jobs_.reset();
    auto j = PrefetchJobs::Open(o, catalog_.get(), cache_.get(), meta_.get(), &clock_);
    ASSERT_OK(j);
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
    EXPECT_OK(st);
    return st.ok() ? *st : PrefetchJobStatus{};
  }

  testing::TempDir dir_;
  FakeBlobStore origin_{"fake://bucket"};
  FakeClock clock_;
  std::unique_ptr<FlashStore> flash_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<TieredCache> cache_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<PrefetchJobs> jobs_;
};

TEST_F(PrefetchJobsTest, DirectoryIntoL2IsRecursiveAndSkipsL1) {
  ASSERT_OK(jobs_->Start("d", "l2"));
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
  auto n =
      tierfs::testing::ReadInto(*cache_, Ref("d/sub/c.bin"), 0,
                                std::span(reinterpret_cast<std::byte*>(out.data()), out.size()));
  ASSERT_OK(n);
  EXPECT_EQ(out, Pattern(3 * kBs + 7, 3));
  EXPECT_EQ(origin_.read_calls(), 0u);
}

// A file is fetched in runs of blocks_per_task blocks, one GET each; a tail shorter than half a
// run joins the run before it instead of costing a round trip of its own.
TEST_F(PrefetchJobsTest, AShortTailJoinsTheRunBeforeIt) {
  origin_.PutObject("t/five", Pattern(5 * kBs, 6));      // 5: one run of 5
  origin_.PutObject("t/six", Pattern(6 * kBs, 7));       // 4 + 2
  origin_.PutObject("t/nine", Pattern(8 * kBs + 9, 8));  // 4 + 5 (the 9th block is 9 bytes)
  PrefetchJobsOptions o;
  o.threads = 3;
  o.blocks_per_task = 4;
  o.persist_interval = 5ms;
  OpenJobsWith(o);
  origin_.ResetCounters();
  ASSERT_OK(jobs_->Start("t", "l2"));
  EXPECT_EQ(WaitDone("t").state, PrefetchState::kDone);
  EXPECT_EQ(origin_.read_calls(), 5u);
  EXPECT_EQ(Held(Ref("t/five"), "l2"), 5u);
  EXPECT_EQ(Held(Ref("t/six"), "l2"), 6u);
  EXPECT_EQ(Held(Ref("t/nine"), "l2"), 9u);
}

// A file of more tasks than the runner plans up front is handed out as a span the workers cut
// their tasks from (planning costs the same for any file size): every block is fetched once, one
// GET per task, and the job completes.
TEST_F(PrefetchJobsTest, ALargeFileIsCutIntoTasksAsTheyRun) {
  constexpr uint64_t kBlocks = 1100;  // > 1024 tasks of 1 block
  origin_.PutObject("big.bin", Pattern(kBlocks * kBs - 5, 11));
  PrefetchJobsOptions o;
  o.threads = 3;
  o.blocks_per_task = 1;
  o.persist_interval = 5ms;
  OpenJobsWith(o);
  origin_.ResetCounters();
  ASSERT_OK(jobs_->Start("big.bin", "l2"));
  PrefetchJobStatus st = WaitDone("big.bin");
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_done, 1u);
  EXPECT_EQ(st.bytes_done, kBlocks * kBs - 5);
  EXPECT_EQ(origin_.read_calls(), kBlocks);
  EXPECT_EQ(Held(Ref("big.bin"), "l2"), kBlocks);
}

TEST_F(PrefetchJobsTest, SingleFileIntoL1FillsL1AndL2) {
  ASSERT_OK(jobs_->Start("other.bin", "l1"));
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
  ASSERT_OK(jobs_->Start("nope", "l2"));
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
  ASSERT_OK(catalog_->ReadDir("d", "", 100, &warm));
  origin_.PutObject("d/a.bin", Pattern(5 * kBs, 9));
  ASSERT_OK(jobs_->Start("d", "l2"));
  PrefetchJobStatus st = WaitDone("d");
  EXPECT_EQ(st.state, PrefetchState::kFailed);
  // The reason is the version change of that file (If-Match refused), not some other error.
  EXPECT_NE(st.error.find("FailedPrecondition"), std::string::npos) << st.error;
  EXPECT_NE(st.error.find("d/a.bin"), std::string::npos) << st.error;
}

TEST_F(PrefetchJobsTest, CancelStopsARunningJob) {
  origin_.SetDelay(20ms);
  ASSERT_OK(jobs_->Start("d", "l2"));
  ASSERT_TRUE(testing::Eventually([&] {
    auto st = jobs_->Get("d");
    return st.ok() && st->bytes_done > 0;
  }));  // running
  ASSERT_OK(jobs_->Cancel("d"));
  PrefetchJobStatus st = WaitDone("d");
  EXPECT_EQ(st.state, PrefetchState::kCancelled);
  EXPECT_LT(st.bytes_done, st.bytes_total == 0 ? 1 : st.bytes_total);
  // Restarting a finished job is allowed.
  origin_.SetDelay(0ms);
  ASSERT_OK(jobs_->Start("d", "l2"));
  EXPECT_EQ(WaitDone("d").state, PrefetchState::kDone);
}

TEST_F(PrefetchJobsTest, RestartResumesFromThePersistedCursor) {
  origin_.SetDelay(15ms);
  ASSERT_OK(jobs_->Start("d", "l2"));
  // Let it make some progress, then "stop the daemon".
  testing::Eventually(
      [&] {
        auto st = jobs_->Get("d");
        return st.ok() && st->bytes_done > 0;
      },
      2000ms, 5ms);
  jobs_.reset();
  auto stored = meta_->GetValue(PrefetchJobKey("d"));
  ASSERT_OK(stored);
  ASSERT_TRUE(stored->has_value());
  auto rec = DecodePrefetchJob("d", **stored);
  ASSERT_OK(rec);
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
  ASSERT_OK(jobs_->Start("big", "l2"));
  PrefetchJobStatus st = WaitDone("big");
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_total, 1100u);
  EXPECT_EQ(st.bytes_done, 1100u);
}

// A stored record of a job on "d" that stopped while running, with its cursor at `cursor`.
void StoreRunningJob(MetaStore* meta, const std::string& cursor, uint64_t cursor_files) {
  // Layout 2, state running (1), tier l2; see metastore/FORMAT.md.
  const std::string n = std::to_string(cursor_files);
  const std::string v = "2 1 l2 " + n + " " + n + " 0 0 0 " + n + " 0 " +
                        std::to_string(cursor.size()) + " " + cursor + " ";
  ASSERT_OK(DecodePrefetchJob("d", v));
  ASSERT_OK(meta->PutValue(PrefetchJobKey("d"), v));
}

TEST_F(PrefetchJobsTest, ResumeAfterTheListingChangedNeitherSkipsNorRepeats) {
  // Stopped after "d/b.bin" (2 files done: a.bin, b.bin). Meanwhile a file appears before the
  // cursor and one after it: a position cursor would now skip a file; a name cursor does not.
  jobs_.reset();
  StoreRunningJob(meta_.get(), "d/b.bin", 2);
  origin_.PutObject("d/0new.bin", Pattern(kBs, 6));
  origin_.PutObject("d/c2.bin", Pattern(2 * kBs, 7));
  OpenJobs();
  PrefetchJobStatus st = WaitDone("d");
  ASSERT_EQ(st.state, PrefetchState::kDone) << st.error;
  // After the cursor: c2.bin, empty, sub/c.bin, sub/e.bin.
  EXPECT_EQ(st.files_done, 2u + 4u);
  EXPECT_EQ(st.files_total, 2u + 4u);
  EXPECT_EQ(Held(Ref("d/c2.bin"), "l2"), 2u);
  EXPECT_EQ(Held(Ref("d/sub/c.bin"), "l2"), 4u);
  EXPECT_EQ(Held(Ref("d/sub/e.bin"), "l2"), 1u);
  // Before the cursor: not this job's work any more (done before the stop, or new there).
  EXPECT_EQ(Held(Ref("d/0new.bin"), "l2"), 0u);
  EXPECT_EQ(Held(Ref("d/a.bin"), "l2"), 0u);
  EXPECT_EQ(st.cursor, "d/sub/e.bin");
}

TEST_F(PrefetchJobsTest, ResumeFromACursorInAVanishedDirectory) {
  jobs_.reset();
  StoreRunningJob(meta_.get(), "d/aaa/x.bin", 1);  // "d/aaa" no longer exists
  OpenJobs();
  PrefetchJobStatus st = WaitDone("d");
  ASSERT_EQ(st.state, PrefetchState::kDone) << st.error;
  // Everything after "aaa" in d: b.bin, empty, sub/c.bin, sub/e.bin; a.bin < aaa is not.
  EXPECT_EQ(st.files_done, 1u + 4u);
  EXPECT_EQ(Held(Ref("d/b.bin"), "l2"), 1u);
  EXPECT_EQ(Held(Ref("d/sub/e.bin"), "l2"), 1u);
  EXPECT_EQ(Held(Ref("d/a.bin"), "l2"), 0u);
}

TEST_F(PrefetchJobsTest, SmallBatchesWalkTheWholeTree) {
  for (int i = 0; i < 300; ++i) origin_.PutObject("big/f" + std::to_string(1000 + i), "xy");
  origin_.PutObject("big/sub/deep", "z");
  jobs_.reset();
  PrefetchJobsOptions o;
  o.threads = 2;
  o.batch_files = 7;  // ~43 batches, never more than 7 files held
  o.persist_interval = 5ms;
  auto j = PrefetchJobs::Open(o, catalog_.get(), cache_.get(), meta_.get(), &clock_);
  ASSERT_OK(j);
  jobs_ = std::move(*j);
  ASSERT_OK(jobs_->Start("big", "l2"));
  PrefetchJobStatus st = WaitDone("big");
  EXPECT_EQ(st.state, PrefetchState::kDone) << st.error;
  EXPECT_EQ(st.files_total, 301u);
  EXPECT_EQ(st.files_done, 301u);
  EXPECT_EQ(st.bytes_done, 601u);
  EXPECT_EQ(st.cursor, "big/sub/deep");
}

// A batch ends when its last task does, not on the progress timer: with an hour between
// progress writes, a job of many small batches (run twice: the second finds every file held, so
// its batches drain while the runner is still writing its progress) ends at once.
TEST_F(PrefetchJobsTest, BatchesEndWhenTheyDrainNotOnTheProgressTimer) {
  for (int i = 0; i < 100; ++i) origin_.PutObject("many/f" + std::to_string(1000 + i), "xy");
  PrefetchJobsOptions o;
  o.threads = 3;
  o.batch_files = 4;  // 25 batches
  o.persist_interval = 1h;
  OpenJobsWith(o);
  for (int run = 0; run < 2; ++run) {
    ASSERT_OK(jobs_->Start("many", "l2"));
    PrefetchJobStatus st = WaitDone("many");  // within 20 s
    EXPECT_EQ(st.state, PrefetchState::kDone) << "run " << run << ": " << st.error;
    EXPECT_EQ(st.files_done, 100u) << "run " << run;
  }
}

TEST_F(PrefetchJobsTest, FinishedJobsExpire) {
  ASSERT_OK(jobs_->Start("other.bin", "l2"));
  EXPECT_EQ(WaitDone("other.bin").state, PrefetchState::kDone);
  EXPECT_GT(WaitDone("other.bin").finished_at_ns, 0);
  clock_.Advance(std::chrono::hours(23));
  OpenJobs();  // a restart within the day keeps it
  EXPECT_OK(jobs_->Get("other.bin"));
  clock_.Advance(std::chrono::hours(2));
  // Another job finishing sweeps the expired one, from memory and from the metastore.
  ASSERT_OK(jobs_->Start("d/b.bin", "l2"));
  EXPECT_EQ(WaitDone("d/b.bin").state, PrefetchState::kDone);
  EXPECT_TRUE(jobs_->Get("other.bin").status().IsNotFound());
  auto v = meta_->GetValue(PrefetchJobKey("other.bin"));
  ASSERT_OK(v);
  EXPECT_FALSE(v->has_value());
  // At start-up too.
  clock_.Advance(std::chrono::hours(25));
  OpenJobs();
  EXPECT_TRUE(jobs_->Get("d/b.bin").status().IsNotFound());
  v = meta_->GetValue(PrefetchJobKey("d/b.bin"));
  ASSERT_OK(v);
  EXPECT_FALSE(v->has_value());
}

TEST_F(PrefetchJobsTest, OnlyKeepFinishedJobsAreKept) {
  OpenJobs(/*keep_finished=*/1);
  ASSERT_OK(jobs_->Start("other.bin", "l2"));
  EXPECT_EQ(WaitDone("other.bin").state, PrefetchState::kDone);
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_OK(jobs_->Start("d/b.bin", "l2"));
  EXPECT_EQ(WaitDone("d/b.bin").state, PrefetchState::kDone);
  EXPECT_TRUE(jobs_->Get("other.bin").status().IsNotFound());  // the older one
  EXPECT_OK(jobs_->Get("d/b.bin"));
}

TEST_F(PrefetchJobsTest, LayoutOneRecordsStillLoad) {
  jobs_.reset();
  // A running job stored by the previous layout (position cursor 2): restarted from the start.
  ASSERT_OK(meta_->PutValue(PrefetchJobKey("d"), "1 1 l2 2 5 100 200 2 "));
  // A finished one: kept (for a day from now).
  ASSERT_OK(meta_->PutValue(PrefetchJobKey("other.bin"), "1 3 l2 0 1 0 8192 0 IOError: x"));
  OpenJobs();
  PrefetchJobStatus st = WaitDone("d");
  EXPECT_EQ(st.state, PrefetchState::kDone) << st.error;
  EXPECT_EQ(st.files_done, 5u);
  EXPECT_EQ(Held(Ref("d/a.bin"), "l2"), 5u);
  auto old = jobs_->Get("other.bin");
  ASSERT_OK(old);
  EXPECT_EQ(old->state, PrefetchState::kFailed);
  EXPECT_EQ(old->error, "IOError: x");
  EXPECT_GT(old->finished_at_ns, 0);
}

size_t StoredListChunks(MetaStore* meta) {
  size_t n = 0;
  EXPECT_OK(meta->ScanValues("prefetch/list/", [&](std::string_view, std::string_view) {
    ++n;
    return true;
  }));
  return n;
}

TEST_F(PrefetchJobsTest, ListAppendsInOrderAndFinishes) {
  EXPECT_FALSE(jobs_->ListJobActive());
  origin_.HoldReads();  // the job cannot end before the second set appends to it
  ASSERT_OK(jobs_->AppendList("l2", {"d/sub/c.bin", "other.bin"}));
  origin_.WaitForBlockedReads(1);
  EXPECT_TRUE(jobs_->ListJobActive());
  ASSERT_OK(jobs_->Start("d/sub", "l2"));  // a directory job is not a list job
  ASSERT_OK(jobs_->AppendList("l2", {"d/b.bin", "d/empty"}));
  origin_.ReleaseReads();
  PrefetchJobStatus st = WaitDone(kPrefetchListJob);
  EXPECT_FALSE(jobs_->ListJobActive());
  WaitDone("d/sub");
  EXPECT_FALSE(jobs_->ListJobActive());
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_done, 4u);
  EXPECT_EQ(st.files_total, 4u);
  const uint64_t total = 3 * kBs + 7 + 2 * kBs + 100;
  EXPECT_EQ(st.bytes_total, total);
  EXPECT_EQ(st.bytes_done, total);
  EXPECT_EQ(Held(Ref("d/sub/c.bin"), "l2"), 4u);
  EXPECT_EQ(Held(Ref("other.bin"), "l2"), 2u);
  EXPECT_EQ(Held(Ref("d/a.bin"), "l2"), 0u);     // not listed
  EXPECT_EQ(StoredListChunks(meta_.get()), 0u);  // a finished list leaves no chunk behind
  // A set after the end starts a fresh list job.
  ASSERT_OK(jobs_->AppendList("l1", {"d/a.bin"}));
  st = WaitDone(kPrefetchListJob);
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.tier, "l1");
  EXPECT_EQ(st.files_total, 1u);
  EXPECT_EQ(Held(Ref("d/a.bin"), "l1"), 5u);
  // The directory job of the root is a different job.
  EXPECT_TRUE(jobs_->Get("").status().IsNotFound());
}

TEST_F(PrefetchJobsTest, ListRefusesABadPathWithoutQueueingAnything) {
  Status s = jobs_->AppendList("l2", {"other.bin", "d/nope.bin"});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("d/nope.bin"), std::string::npos) << s.ToString();
  s = jobs_->AppendList("l2", {"other.bin", "d/sub"});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("is a directory"), std::string::npos) << s.ToString();
  EXPECT_EQ(jobs_->AppendList("l2", {""}).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(jobs_->AppendList("l3", {"other.bin"}).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(jobs_->Get(kPrefetchListJob).status().IsNotFound());
  EXPECT_EQ(StoredListChunks(meta_.get()), 0u);
  // While a list job runs into l2, a set into another tier is refused.
  origin_.SetDelay(20ms);
  ASSERT_OK(jobs_->AppendList("l2", {"d/a.bin"}));
  EXPECT_EQ(jobs_->AppendList("l1", {"other.bin"}).code(), Status::Code::kInvalidArgument);
  origin_.SetDelay(0ms);
  EXPECT_EQ(WaitDone(kPrefetchListJob).files_total, 1u);
}

TEST_F(PrefetchJobsTest, ListCancelDropsTheQueue) {
  origin_.SetDelay(20ms);
  ASSERT_OK(jobs_->AppendList("l2", {"d/a.bin", "d/sub/c.bin", "other.bin"}));
  EXPECT_EQ(StoredListChunks(meta_.get()), 1u);
  ASSERT_OK(jobs_->Cancel(kPrefetchListJob));
  PrefetchJobStatus st = WaitDone(kPrefetchListJob);
  EXPECT_EQ(st.state, PrefetchState::kCancelled);
  EXPECT_LT(st.files_done, 3u);
  EXPECT_EQ(StoredListChunks(meta_.get()), 0u);
  origin_.SetDelay(0ms);
  ASSERT_OK(jobs_->AppendList("l2", {"other.bin"}));
  st = WaitDone(kPrefetchListJob);
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_total, 1u);
}

TEST_F(PrefetchJobsTest, ListResumesAfterRestartFromItsPosition) {
  origin_.SetDelay(15ms);
  ASSERT_OK(jobs_->AppendList("l2", {"d/a.bin", "d/b.bin"}));
  ASSERT_OK(jobs_->AppendList("l2", {"d/sub/c.bin", "d/sub/e.bin", "other.bin"}));
  testing::Eventually(
      [&] {
        auto st = jobs_->Get(kPrefetchListJob);
        return st.ok() && st->bytes_done > 0;
      },
      2000ms, 5ms);
  jobs_.reset();
  auto stored = meta_->GetValue(PrefetchJobKey(kPrefetchListJob));
  ASSERT_OK(stored);
  ASSERT_TRUE(stored->has_value());
  auto rec = DecodePrefetchJob(kPrefetchListJob, **stored);
  ASSERT_OK(rec);
  EXPECT_EQ(rec->state, PrefetchState::kRunning);
  EXPECT_LT(rec->cursor_files, 5u);
  EXPECT_GE(StoredListChunks(meta_.get()), 1u);

  origin_.SetDelay(0ms);
  origin_.ResetCounters();
  OpenJobs();
  PrefetchJobStatus st = WaitDone(kPrefetchListJob);
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_done, 5u);
  EXPECT_EQ(st.files_total, 5u);
  EXPECT_EQ(Held(Ref("d/a.bin"), "l2"), 5u);
  EXPECT_EQ(Held(Ref("other.bin"), "l2"), 2u);
  EXPECT_LE(origin_.read_calls(), 11u);  // what was fetched before is not fetched again
  EXPECT_EQ(StoredListChunks(meta_.get()), 0u);
}

// The engine: many single-block files in flight at once, bounded by threads, the memory
// budget and the origin's limit; cut to slots_while_demand while demand reads use the network.
class PrefetchEngineTest : public PrefetchJobsTest {
 protected:
  void SetUp() override {
    PrefetchJobsTest::SetUp();
    for (int i = 0; i < 40; ++i) origin_.PutObject(fmt::format("many/f{:02}", i), Pattern(100, i));
    for (int i = 0; i < 40; ++i) origin_.PutObject(fmt::format("more/g{:02}", i), Pattern(100, i));
  }
  void TearDown() override {
    origin_.ReleaseReads();
    jobs_.reset();
  }
  PrefetchJobsOptions Options() {
    PrefetchJobsOptions o;
    o.threads = 8;
    o.persist_interval = 5ms;
    return o;
  }
  // Jobs with slots_while_demand = 1 and demand_quiet = 1 s, right after a demand read that
  // went to the origin: demand is active for demand_quiet.
  void OpenWithDemandActive() {
    PrefetchJobsOptions o = Options();
    o.slots_while_demand = 1;
    o.demand_quiet = 1s;
    OpenJobsWith(o);
    clock_.Advance(10s);
    std::string out(100, '\0');
    ASSERT_OK(
        tierfs::testing::ReadInto(*cache_, Ref("other.bin"), 0,
                                  std::span(reinterpret_cast<std::byte*>(out.data()), out.size())));
  }
  // Reads blocked at the gate, after the workers had time to start more than allowed.
  int SettledBlocked(int n) {
    origin_.WaitForBlockedReads(n);
    std::this_thread::sleep_for(30ms);  // the window
    return origin_.blocked_reads();
  }
};

TEST_F(PrefetchEngineTest, SmallFilesAreFetchedManyAtOnce) {
  OpenJobsWith(Options());
  origin_.HoldReads();
  ASSERT_OK(jobs_->Start("many", "l2"));
  EXPECT_EQ(SettledBlocked(8), 8);  // one GET per file, `threads` of them at once
  origin_.ReleaseReads();
  PrefetchJobStatus st = WaitDone("many");
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_done, 40u);
}

// One user (StartAs) may have max_jobs_per_user jobs queued or running; the next is NoSpace
// (ENOSPC) until one finishes. Another user, and Start (root, the mounting user), are not held up
// by it; restarting a path already queued or running is OK and costs nothing.
TEST_F(PrefetchEngineTest, JobsPerUserAreCapped) {
  PrefetchJobsOptions o = Options();
  o.max_jobs_per_user = 2;
  OpenJobsWith(o);
  origin_.HoldReads();
  ASSERT_OK(jobs_->StartAs(1000, "many", "l2"));
  ASSERT_OK(jobs_->StartAs(1000, "more", "l2"));
  ASSERT_OK(jobs_->StartAs(1000, "many", "l2"));  // already running: OK, not a third job
  Status s = jobs_->StartAs(1000, "d", "l2");
  EXPECT_EQ(s.code(), Status::Code::kNoSpace) << s.ToString();
  EXPECT_NE(s.message().find("uid 1000 already has 2 prefetch jobs"), std::string::npos)
      << s.ToString();
  EXPECT_TRUE(jobs_->Get("d").status().IsNotFound());  // nothing queued for the refused one
  ASSERT_OK(jobs_->StartAs(1001, "d", "l2"));          // another user
  ASSERT_OK(jobs_->Start("other.bin", "l2"));          // root / the mounting user
  origin_.ReleaseReads();
  ASSERT_TRUE(jobs_->TEST_WaitIdle(20s));
  EXPECT_EQ(jobs_->Get("many")->state, PrefetchState::kDone);
  // Finished jobs no longer count.
  ASSERT_OK(jobs_->StartAs(1000, "d/sub", "l2"));
  EXPECT_EQ(WaitDone("d/sub").state, PrefetchState::kDone);
}

// One user (AppendListAs) may have max_list_files_per_user files queued in the list job; an
// append past it is refused whole. Other users and AppendList (root, the mounting user) are not
// held up; dropping the list (cancel) frees the count. The one runner is busy with a job whose
// reads are held: the list job stays queued, its files untaken.
TEST_F(PrefetchEngineTest, ListFilesPerUserAreCapped) {
  PrefetchJobsOptions o = Options();
  o.max_list_files_per_user = 3;
  o.max_running_jobs = 1;
  OpenJobsWith(o);
  origin_.HoldReads();
  ASSERT_OK(jobs_->Start("more", "l2"));
  origin_.WaitForBlockedReads(1);
  ASSERT_OK(jobs_->AppendListAs(1000, "l2", {"many/f00", "many/f01"}));
  Status s = jobs_->AppendListAs(1000, "l2", {"many/f02", "many/f03"});
  EXPECT_EQ(s.code(), Status::Code::kNoSpace) << s.ToString();
  EXPECT_NE(s.message().find("uid 1000 already has 2 files queued"), std::string::npos)
      << s.ToString();
  ASSERT_OK(jobs_->AppendListAs(1000, "l2", {"many/f02"}));  // exactly at the cap
  ASSERT_OK(jobs_->AppendListAs(1001, "l2", {"many/f10", "many/f11", "many/f12"}));
  ASSERT_OK(jobs_->AppendList("l2", {"many/f13", "many/f14", "many/f15", "many/f16"}));
  EXPECT_EQ(jobs_->Get(kPrefetchListJob)->state, PrefetchState::kQueued);
  EXPECT_EQ(jobs_->Get(kPrefetchListJob)->files_total, 10u);  // the refused append queued nothing
  ASSERT_OK(jobs_->Cancel(kPrefetchListJob));
  ASSERT_OK(jobs_->AppendListAs(1000, "l2", {"many/f03", "many/f04", "many/f05"}));
}

TEST_F(PrefetchEngineTest, MemoryBudgetAndOriginLimitBoundTheBlocksInFlight) {
  PrefetchJobsOptions o = Options();
  o.memory_budget = 300;  // the files of many/ are 100 bytes: three at once
  OpenJobsWith(o);
  origin_.HoldReads();
  ASSERT_OK(jobs_->Start("many", "l2"));
  EXPECT_EQ(SettledBlocked(3), 3);
  origin_.ReleaseReads();
  EXPECT_EQ(WaitDone("many").state, PrefetchState::kDone);

  o = Options();
  o.origin_limit = [] { return uint64_t{5}; };
  OpenJobsWith(o);
  origin_.HoldReads();
  ASSERT_OK(jobs_->Start("more", "l2"));
  EXPECT_EQ(SettledBlocked(5), 5);
  origin_.ReleaseReads();
  EXPECT_EQ(WaitDone("more").state, PrefetchState::kDone);
}

TEST_F(PrefetchEngineTest, PrefetchYieldsToDemandReads) {
  ASSERT_NO_FATAL_FAILURE(OpenWithDemandActive());
  EXPECT_EQ(cache_->Stats().demand_remote_in_flight.load(), 0);
  origin_.HoldReads();
  ASSERT_OK(jobs_->Start("many", "l2"));
  EXPECT_EQ(SettledBlocked(1), 1);  // only the slot demand leaves
  clock_.Advance(2s);               // demand went quiet: the job takes every slot
  EXPECT_EQ(SettledBlocked(8), 8);
  origin_.ReleaseReads();
  EXPECT_EQ(WaitDone("many").state, PrefetchState::kDone);
}

TEST_F(PrefetchEngineTest, TheListJobDoesNotYieldToDemandReads) {
  // A loader's list (PrefetchSampler): its demand misses are the loader catching up with the
  // list, so the list job keeps its slots while they fetch.
  ASSERT_NO_FATAL_FAILURE(OpenWithDemandActive());
  origin_.HoldReads();
  std::vector<std::string> files;
  for (int i = 0; i < 40; ++i) files.push_back(fmt::format("many/f{:02}", i));
  ASSERT_OK(jobs_->AppendList("l2", files));
  EXPECT_EQ(SettledBlocked(8), 8);  // every slot, demand or not
  origin_.ReleaseReads();
  EXPECT_TRUE(jobs_->TEST_WaitIdle(20s));
}

TEST_F(PrefetchEngineTest, RunningJobsShareTheWorkers) {
  PrefetchJobsOptions o = Options();
  o.threads = 4;
  o.max_running_jobs = 2;
  OpenJobsWith(o);
  origin_.HoldReads();
  ASSERT_OK(jobs_->Start("many", "l2"));
  ASSERT_OK(jobs_->Start("more", "l2"));
  ASSERT_OK(jobs_->Start("d", "l2"));  // a third waits for one of them
  EXPECT_EQ(SettledBlocked(4), 4);
  // Both running jobs got workers (round-robin), the third is still queued.
  EXPECT_EQ(jobs_->Get("many")->state, PrefetchState::kRunning);
  EXPECT_EQ(jobs_->Get("more")->state, PrefetchState::kRunning);
  EXPECT_EQ(jobs_->Get("d")->state, PrefetchState::kQueued);
  origin_.ReleaseReads();
  EXPECT_TRUE(jobs_->TEST_WaitIdle(20s));
  for (const char* p : {"many", "more", "d"}) {
    EXPECT_EQ(jobs_->Get(p)->state, PrefetchState::kDone) << p;
  }
}

// Files the target holds already finish on the job's runner, not through a worker: a loader's
// warm epoch under PrefetchSampler sends only such files, and a wake-up per file cost more than
// the check. Here they finish while every worker is stuck in another job's GET.
TEST_F(PrefetchEngineTest, HeldFilesFinishWithoutAWorker) {
  PrefetchJobsOptions o = Options();
  o.threads = 2;
  o.max_running_jobs = 2;
  OpenJobsWith(o);
  ASSERT_OK(jobs_->Start("more", "l2"));
  ASSERT_EQ(WaitDone("more").state, PrefetchState::kDone);
  origin_.HoldReads();
  ASSERT_OK(jobs_->Start("many", "l2"));
  EXPECT_EQ(SettledBlocked(2), 2);  // both workers wait at the origin
  std::vector<std::string> files;
  for (int i = 39; i >= 0; --i) files.push_back(fmt::format("more/g{:02}", i));
  ASSERT_OK(jobs_->AppendList("l2", files));
  PrefetchJobStatus st;
  testing::Eventually([&] {
    st = *jobs_->Get(kPrefetchListJob);
    return st.state == PrefetchState::kDone;
  });
  EXPECT_EQ(st.state, PrefetchState::kDone);
  EXPECT_EQ(st.files_done, 40u);
  EXPECT_EQ(st.bytes_done, 4000u);
  EXPECT_EQ(jobs_->Get("many")->state, PrefetchState::kRunning);
  origin_.ReleaseReads();
  EXPECT_EQ(WaitDone("many").state, PrefetchState::kDone);
}

TEST(PrefetchListValue, Parse) {
  auto r = ParsePrefetchList("tier=l3\n/a/b.bin\r\n\nc d.bin\n");
  ASSERT_OK(r);
  EXPECT_FALSE(r->cancel);
  EXPECT_EQ(r->tier, "l3");
  EXPECT_EQ(r->paths, (std::vector<std::string>{"a/b.bin", "c d.bin"}));
  r = ParsePrefetchList("x");
  ASSERT_OK(r);
  EXPECT_EQ(r->tier, "l2");
  EXPECT_EQ(r->paths, (std::vector<std::string>{"x"}));
  r = ParsePrefetchList("cancel\n");
  ASSERT_OK(r);
  EXPECT_TRUE(r->cancel);
  r = ParsePrefetchList("");
  ASSERT_OK(r);
  EXPECT_TRUE(r->paths.empty());
  // "tier=" only counts on the first line; later it is a file name.
  r = ParsePrefetchList("a\ntier=l1");
  ASSERT_OK(r);
  EXPECT_EQ(r->paths, (std::vector<std::string>{"a", "tier=l1"}));
  EXPECT_FALSE(ParsePrefetchList("tier=l4\na").ok());
  EXPECT_FALSE(ParsePrefetchList("a/../b").ok());
  EXPECT_FALSE(ParsePrefetchList("./a").ok());
  EXPECT_FALSE(ParsePrefetchList("a//b").ok());
  EXPECT_FALSE(ParsePrefetchList(std::string_view("a\0b", 3)).ok());
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
  s.cursor = "a/b/dir with space/f 2";
  s.cursor_files = 2;
  s.cursor_bytes = 4096;
  s.finished_at_ns = 1234567890123;
  s.error = "IOError: disk on fire";
  auto d = DecodePrefetchJob("a/b", EncodePrefetchJob(s));
  ASSERT_OK(d);
  EXPECT_EQ(d->state, s.state);
  EXPECT_EQ(d->tier, "l2");
  EXPECT_EQ(d->files_done, 3u);
  EXPECT_EQ(d->files_total, 10u);
  EXPECT_EQ(d->bytes_done, 12345u);
  EXPECT_EQ(d->bytes_total, 99999u);
  EXPECT_EQ(d->cursor, s.cursor);
  EXPECT_EQ(d->cursor_files, 2u);
  EXPECT_EQ(d->cursor_bytes, 4096u);
  EXPECT_EQ(d->finished_at_ns, s.finished_at_ns);
  EXPECT_EQ(d->error, s.error);
  EXPECT_EQ(FormatPrefetchStatus(*d),
            "state=failed tier=l2 files=3/10 bytes=12345/99999 error=IOError:_disk_on_fire");
  s.cursor.clear();
  s.error.clear();
  d = DecodePrefetchJob("a/b", EncodePrefetchJob(s));
  ASSERT_OK(d);
  EXPECT_EQ(d->cursor, "");
  EXPECT_EQ(d->error, "");
  EXPECT_FALSE(DecodePrefetchJob("x", "").ok());
  EXPECT_FALSE(DecodePrefetchJob("x", "3 0 l2 0 0 0 0 0 ").ok());            // unknown layout
  EXPECT_FALSE(DecodePrefetchJob("x", "1 9 l2 0 0 0 0 0 ").ok());            // bad state
  EXPECT_FALSE(DecodePrefetchJob("x", "1 0 l2 0 0 x 0 0 ").ok());            // bad counter
  EXPECT_FALSE(DecodePrefetchJob("x", "2 0 l2 0 0 0 0 0 0 0 ").ok());        // too few fields
  EXPECT_FALSE(DecodePrefetchJob("x", "2 0 l2 0 0 0 0 0 0 0 99 ab ").ok());  // cursor too long
  // Layout 1 (position cursor) still reads; its cursor is dropped.
  auto v1 = DecodePrefetchJob("x", "1 2 l2 3 3 10 10 3 ");
  ASSERT_OK(v1);
  EXPECT_EQ(v1->state, PrefetchState::kDone);
  EXPECT_EQ(v1->files_done, 3u);
  EXPECT_EQ(v1->cursor, "");
  EXPECT_EQ(PrefetchJobKey(""), "prefetch/job/");
  EXPECT_EQ(PrefetchJobKey("a/b"), "prefetch/job/a/b");
}

}  // namespace
}  // namespace tierfs
