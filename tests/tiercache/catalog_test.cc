// Catalog over FakeBlobStore + the in-memory MetaStore, with a FakeClock for TTLs.
#include "tiercache/catalog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "base/mutex.h"
#include "base/units.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/fakes/forwarding_meta_store.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"

namespace tierfs {
namespace {

using testing::FakeBlobStore;

// Lists through a small page size so every listing takes several pages. With the gate closed,
// List calls wait until it opens (a blocked origin, without sleeping).
class SmallPageStore : public FakeBlobStore {
 public:
  using FakeBlobStore::FakeBlobStore;
  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override {
    {
      MutexLock l(&gate_mu_);
      ++waiting_;
      gate_cv_.SignalAll();
      while (closed_) Wait();
      --waiting_;
    }
    return FakeBlobStore::List(prefix, delimiter, token, std::min(max_keys, 2));
  }
  void CloseGate() {
    MutexLock l(&gate_mu_);
    closed_ = true;
  }
  void OpenGate() {
    MutexLock l(&gate_mu_);
    closed_ = false;
    gate_cv_.SignalAll();
  }
  // Returns once `n` List calls are waiting at the gate.
  void WaitForWaiters(int n) {
    MutexLock l(&gate_mu_);
    while (waiting_ < n) Wait();
  }
  int waiting() {
    MutexLock l(&gate_mu_);
    return waiting_;
  }

 private:
  void Wait() NO_THREAD_SAFETY_ANALYSIS { gate_cv_.Wait(); }
  Mutex gate_mu_;
  CondVar gate_cv_{&gate_mu_};
  bool closed_ GUARDED_BY(gate_mu_) = false;
  int waiting_ GUARDED_BY(gate_mu_) = 0;
};

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    meta_ = NewMemMetaStore();
    origin_.PutObject("top.txt", "hello", 111);
    origin_.PutObject("a/one.bin", std::string(10, 'x'), 222);
    origin_.PutObject("a/two.bin", std::string(20, 'y'));
    origin_.PutObject("a/b/deep.bin", "deep");
    origin_.PutObject("a/b/c/deeper.bin", "deeper");
    origin_.PutObject("marked/", "");    // folder marker of an otherwise empty dir
    origin_.PutObject("withmark/", "");  // folder marker + content
    origin_.PutObject("withmark/f", "f");
    origin_.PutObject("clash", "i am a file");  // "clash" is also a directory
    origin_.PutObject("clash/inner", "x");
    origin_.ResetCounters();
  }

  std::unique_ptr<Catalog> Open(std::chrono::nanoseconds ttl = std::chrono::seconds(60),
                                bool stale_while_revalidate = true) {
    CatalogOptions o;
    o.metadata_ttl = ttl;
    o.stale_while_revalidate = stale_while_revalidate;
    auto c = Catalog::Open(o, &origin_, meta_.get(), &clock_);
    EXPECT_OK(c);
    return std::move(*c);
  }

  std::vector<std::string> Names(Catalog* c, std::string_view dir) {
    std::vector<DirEntry> out;
    Status st = c->ReadDir(dir, "", 1000, &out);
    EXPECT_OK(st);
    std::vector<std::string> names;
    for (const auto& e : out) names.push_back(e.name + (e.type == EntryType::kDir ? "/" : ""));
    return names;
  }

  SmallPageStore origin_{"fake://bucket"};
  FakeClock clock_;
  std::unique_ptr<MetaStore> meta_;
};

TEST_F(CatalogTest, RootListingWithDirsFilesMarkersAndCollisions) {
  auto c = Open();
  EXPECT_EQ(Names(c.get(), ""),
            (std::vector<std::string>{"a/", "clash/", "marked/", "top.txt", "withmark/"}));
  auto top = c->Lookup("", "top.txt");
  ASSERT_OK(top);
  EXPECT_EQ(top->type, EntryType::kFile);
  EXPECT_EQ(top->size, 5u);
  EXPECT_EQ(top->mtime_ns, 111);
  EXPECT_EQ(top->etag, origin_.Head("top.txt")->etag);
  auto clash = c->Lookup("", "clash");
  ASSERT_OK(clash);
  EXPECT_EQ(clash->type, EntryType::kDir);  // the directory wins
}

TEST_F(CatalogTest, NestedDirectories) {
  auto c = Open();
  EXPECT_EQ(Names(c.get(), "a"), (std::vector<std::string>{"b/", "one.bin", "two.bin"}));
  EXPECT_EQ(Names(c.get(), "a/b"), (std::vector<std::string>{"c/", "deep.bin"}));
  EXPECT_EQ(Names(c.get(), "a/b/c"), (std::vector<std::string>{"deeper.bin"}));
  auto e = c->Lookup("a/b/c", "deeper.bin");
  ASSERT_OK(e);
  EXPECT_EQ(e->size, 6u);
  EXPECT_EQ(c->Lookup("a", "one.bin")->mtime_ns, 222);
}

TEST_F(CatalogTest, FolderMarkersAreNotEntries) {
  auto c = Open();
  EXPECT_TRUE(Names(c.get(), "marked").empty());  // exists, empty
  EXPECT_EQ(Names(c.get(), "withmark"), (std::vector<std::string>{"f"}));
  EXPECT_EQ(c->Lookup("", "marked")->type, EntryType::kDir);
}

TEST_F(CatalogTest, NegativeLookupsAndMissingDirectories) {
  auto c = Open();
  EXPECT_TRUE(c->Lookup("", "nope").status().IsNotFound());
  EXPECT_TRUE(c->Lookup("a", "nope").status().IsNotFound());
  const uint64_t lists = origin_.list_calls();
  EXPECT_TRUE(c->Lookup("a", "nope").status().IsNotFound());  // negative entry: no relist
  EXPECT_EQ(origin_.list_calls(), lists);
  EXPECT_TRUE(c->Lookup("nodir", "x").status().IsNotFound());
  std::vector<DirEntry> out;
  EXPECT_TRUE(c->ReadDir("nodir", "", 10, &out).IsNotFound());
  EXPECT_TRUE(c->ReadDir("top.txt", "", 10, &out).IsNotFound());  // a file, not a directory
  EXPECT_TRUE(c->Lookup("a/nodir/deeper", "x").status().IsNotFound());
  EXPECT_TRUE(c->Lookup("", "..").status().IsNotFound());
  EXPECT_EQ(c->Lookup("/a", "x").status().code(), Status::Code::kInvalidArgument);
}

TEST_F(CatalogTest, PaginationCollectsEveryPage) {
  for (int i = 0; i < 25; ++i) {
    char name[32];
    snprintf(name, sizeof(name), "many/f%03d", i);
    origin_.PutObject(name, "x");
  }
  origin_.PutObject("many/sub/x", "x");
  origin_.ResetCounters();
  auto c = Open();
  auto names = Names(c.get(), "many");
  ASSERT_EQ(names.size(), 26u);
  EXPECT_EQ(names.front(), "f000");
  EXPECT_EQ(names[24], "f024");
  EXPECT_EQ(names.back(), "sub/");
  EXPECT_GE(c->Stats().list_requests, 13u);  // pages of 2
  // ReadDir pages through the cached listing too.
  std::vector<DirEntry> out;
  ASSERT_OK(c->ReadDir("many", "f010", 3, &out));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].name, "f011");
}

TEST_F(CatalogTest, TtlExpiryRelists) {
  auto c = Open(std::chrono::seconds(60));
  ASSERT_OK(c->Lookup("a", "one.bin"));
  const uint64_t lists = origin_.list_calls();
  clock_.Advance(std::chrono::seconds(30));
  ASSERT_OK(c->Lookup("a", "one.bin"));
  EXPECT_EQ(origin_.list_calls(), lists);  // still fresh
  origin_.PutObject("a/new.bin", "new");
  EXPECT_TRUE(c->Lookup("a", "new.bin").status().IsNotFound());  // cached negative
  clock_.Advance(std::chrono::seconds(31));
  // Stale: served at once (still the old negative entry) while a refresh runs in the background.
  // The gate holds that refresh in List, so it cannot land before the lookup reads the entry.
  origin_.CloseGate();
  EXPECT_TRUE(c->Lookup("a", "new.bin").status().IsNotFound());
  EXPECT_GE(c->Stats().stale_serves, 1u);
  origin_.OpenGate();
  c->TEST_WaitForRefreshes();
  auto e = c->Lookup("a", "new.bin");
  ASSERT_OK(e);
  EXPECT_GT(origin_.list_calls(), lists);
  EXPECT_GT(c->Stats().listing_misses, 0u);
  EXPECT_GE(c->Stats().background_refreshes, 1u);
}

TEST_F(CatalogTest, TtlExpiryRelistsSynchronouslyWithoutStaleWhileRevalidate) {
  auto c = Open(std::chrono::seconds(60), /*stale_while_revalidate=*/false);
  ASSERT_OK(c->Lookup("a", "one.bin"));
  origin_.PutObject("a/new.bin", "new");
  clock_.Advance(std::chrono::seconds(61));
  auto e = c->Lookup("a", "new.bin");
  ASSERT_OK(e);
  EXPECT_EQ(c->Stats().stale_serves, 0u);
  EXPECT_EQ(c->Stats().background_refreshes, 0u);
}

TEST_F(CatalogTest, ForeverNeverRelists) {
  auto c = Open(kForever);
  ASSERT_OK(c->Lookup("a", "one.bin"));
  const uint64_t lists = origin_.list_calls();
  clock_.Advance(std::chrono::hours(24 * 365 * 10));
  origin_.PutObject("a/new.bin", "new");
  EXPECT_TRUE(c->Lookup("a", "new.bin").status().IsNotFound());
  ASSERT_OK(c->Lookup("a", "one.bin"));
  EXPECT_EQ(origin_.list_calls(), lists);
}

TEST_F(CatalogTest, ListingSurvivesACatalogRestart) {
  {
    auto c = Open(kForever);
    EXPECT_EQ(Names(c.get(), "a").size(), 3u);
  }
  origin_.ResetCounters();
  auto c = Open(kForever);
  EXPECT_EQ(Names(c.get(), "a").size(), 3u);
  EXPECT_EQ(origin_.list_calls(), 0u);
}

TEST_F(CatalogTest, StaleListingServedWhenOriginIsDown) {
  auto c = Open(std::chrono::seconds(10));
  ASSERT_OK(c->Lookup("a", "one.bin"));
  clock_.Advance(std::chrono::seconds(11));
  origin_.FailNext(1000, Status::Unavailable("origin down"));
  auto e = c->Lookup("a", "one.bin");
  ASSERT_OK(e);
  EXPECT_EQ(e->size, 10u);
  // Never listed: nothing stale to serve, so the error surfaces.
  auto never = c->Lookup("withmark", "f");
  ASSERT_FALSE(never.ok());
  EXPECT_EQ(never.status().code(), Status::Code::kUnavailable);
  origin_.FailNext(0);
}

TEST_F(CatalogTest, RevalidateUsesFreshListingThenHeads) {
  auto c = Open(std::chrono::seconds(10));
  ASSERT_OK(c->Lookup("a", "one.bin"));
  auto e = c->Revalidate("a/one.bin");
  ASSERT_OK(e);
  EXPECT_EQ(origin_.head_calls(), 0u);                   // fresh listing
  origin_.PutObject("a/one.bin", std::string(99, 'z'));  // changed
  clock_.Advance(std::chrono::seconds(11));
  e = c->Revalidate("a/one.bin");
  ASSERT_OK(e);
  EXPECT_EQ(origin_.head_calls(), 1u);
  EXPECT_EQ(e->size, 99u);
  EXPECT_EQ(e->etag, origin_.Head("a/one.bin")->etag);
  origin_.ResetCounters();
  // The refreshed entry is cached (the listing itself is still stale).
  auto again = c->Revalidate("a/one.bin");
  ASSERT_OK(again);
  EXPECT_EQ(again->size, 99u);
  EXPECT_EQ(origin_.head_calls(), 0u);
  origin_.RemoveObject("a/two.bin");
  EXPECT_TRUE(c->Revalidate("a/two.bin").status().IsNotFound());
  std::vector<DirEntry> out;
  ASSERT_OK(meta_->ListDirEntries("fake://bucket\na", "", 10, &out));
  for (const auto& d : out) EXPECT_NE(d.name, "two.bin");
}

TEST_F(CatalogTest, StaleLookupsNeverWaitForTheirRefresh) {
  auto c = Open(std::chrono::seconds(10));
  ASSERT_OK(c->Lookup("a", "one.bin"));
  origin_.PutObject("a/new.bin", "new");
  clock_.Advance(std::chrono::seconds(11));
  const uint64_t misses = c->Stats().listing_misses;
  origin_.CloseGate();
  // The first stale lookup queues the refresh; the refresher then blocks in the origin.
  ASSERT_OK(c->Lookup("a", "one.bin"));
  origin_.WaitForWaiters(1);
  // Lookups and readdir of the stale directory answer at once meanwhile; an open's revalidation
  // is one HEAD, not a wait for the listing.
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(c->Lookup("a", "one.bin"));
    EXPECT_TRUE(c->Lookup("a", "new.bin").status().IsNotFound());  // the stale answer
  }
  std::vector<DirEntry> out;
  ASSERT_OK(c->ReadDir("a", "", 100, &out));
  EXPECT_EQ(out.size(), 3u);
  auto rev = c->Revalidate("a/two.bin");
  ASSERT_OK(rev);
  EXPECT_EQ(origin_.waiting(), 1);  // one refresh in the origin, however many stale lookups
  EXPECT_GE(c->Stats().stale_serves, 203u);
  origin_.OpenGate();
  c->TEST_WaitForRefreshes();
  auto e = c->Lookup("a", "new.bin");
  ASSERT_OK(e);
  // One listing of "a" (and one of the root, stale as well, which "a"'s refresh consulted).
  EXPECT_EQ(c->Stats().listing_misses - misses, 2u);
  EXPECT_EQ(c->Stats().background_refreshes, 2u);
}

TEST_F(CatalogTest, MissingListingIsFetchedSynchronously) {
  auto c = Open(std::chrono::seconds(10));
  auto e = c->Lookup("a/b", "deep.bin");  // never listed: the caller waits for the listing
  ASSERT_OK(e);
  EXPECT_EQ(c->Stats().stale_serves, 0u);
  EXPECT_EQ(c->Stats().background_refreshes, 0u);
}

TEST_F(CatalogTest, SnapshotsAreChargedToTheMemoryBudgetWhileTheyLive) {
  MemoryBudget budget(1 << 30);
  CatalogOptions o;
  o.memory_budget = &budget;
  auto c = Catalog::Open(o, &origin_, meta_.get(), &clock_);
  ASSERT_OK(c);
  auto s1 = (*c)->Snapshot("a");
  ASSERT_OK(s1);
  const uint64_t one = budget.used(MemoryUse::kListings);
  EXPECT_GE(one, 3 * sizeof(DirEntry));
  auto s2 = (*c)->Snapshot("a");  // shared: charged once
  EXPECT_EQ(budget.used(MemoryUse::kListings), one);
  s1->reset();
  EXPECT_EQ(budget.used(MemoryUse::kListings), one);
  s2->reset();
  EXPECT_EQ(budget.used(MemoryUse::kListings), 0u);
  EXPECT_EQ(budget.used(), 0u);
}

TEST_F(CatalogTest, SnapshotsAreSharedUntilTheListingChanges) {
  auto c = Open(std::chrono::seconds(10));
  auto s1 = c->Snapshot("a");
  ASSERT_OK(s1);
  auto s2 = c->Snapshot("a");
  ASSERT_OK(s2);
  EXPECT_EQ(s1->get(), s2->get());  // one copy
  ASSERT_EQ((*s1)->entries.size(), 3u);
  EXPECT_EQ((*s1)->entries[0].name, "b");
  EXPECT_EQ((*s1)->entries[2].name, "two.bin");
  EXPECT_EQ(c->Stats().snapshots_built, 1u);
  EXPECT_EQ(c->Stats().snapshots_shared, 1u);
  EXPECT_TRUE(c->Snapshot("top.txt").status().IsNotFound());
  // A relisted directory gets a new snapshot; holders of the old one keep theirs intact.
  origin_.PutObject("a/new.bin", "new");
  clock_.Advance(std::chrono::seconds(11));
  ASSERT_OK(c->Lookup("a", "one.bin"));
  c->TEST_WaitForRefreshes();
  auto s3 = c->Snapshot("a");
  ASSERT_OK(s3);
  EXPECT_NE(s3->get(), s1->get());
  EXPECT_EQ((*s3)->entries.size(), 4u);
  EXPECT_EQ((*s1)->entries.size(), 3u);
  // Dropped by every holder: the next caller builds a new one.
  s1->reset();
  s2->reset();
  s3->reset();
  auto s4 = c->Snapshot("a");
  ASSERT_OK(s4);
  EXPECT_EQ(c->Stats().snapshots_built, 3u);
}

TEST_F(CatalogTest, RevalidateServesCachedEntryWhenOriginIsDown) {
  auto c = Open(std::chrono::seconds(10));
  ASSERT_OK(c->Lookup("a", "one.bin"));
  clock_.Advance(std::chrono::seconds(11));
  origin_.FailNext(1000, Status::Unavailable("down"));
  auto e = c->Revalidate("a/one.bin");
  ASSERT_OK(e);
  EXPECT_EQ(e->size, 10u);
  origin_.FailNext(0);
}

TEST_F(CatalogTest, RevalidateOfADirectory) {
  auto c = Open();
  auto e = c->Revalidate("a/b");
  ASSERT_OK(e);
  EXPECT_EQ(e->type, EntryType::kDir);
  EXPECT_TRUE(c->Revalidate("a/zzz").status().IsNotFound());
}

TEST_F(CatalogTest, OverlongNamesAreHiddenNotFatal) {
  origin_.PutObject("long/" + std::string(600, 'n'), "x");
  origin_.PutObject("long/short", "x");
  auto c = Open();
  EXPECT_EQ(Names(c.get(), "long"), (std::vector<std::string>{"short"}));
  EXPECT_TRUE(c->Lookup("long", std::string(600, 'n')).status().IsNotFound());
}

TEST_F(CatalogTest, NamesOver255BytesOrWithControlCharactersAreHidden) {
  const std::string at_limit(255, 'a'), over(256, 'b');
  origin_.PutObject("odd/" + at_limit, "x");
  origin_.PutObject("odd/" + over, "x");
  origin_.PutObject("odd/" + over + "/below", "x");  // a directory with an over-long name
  origin_.PutObject("odd/new\nline", "x");
  origin_.PutObject("odd/esc\x1b[31mred", "x");
  origin_.PutObject("odd/del\x7f", "x");
  origin_.PutObject("odd/tab\tdir/f", "x");      // a directory with a control character
  origin_.PutObject("odd/caf\xc3\xa9 ok", "x");  // UTF-8 and spaces are fine
  auto c = Open();
  EXPECT_EQ(Names(c.get(), "odd"), (std::vector<std::string>{at_limit, "caf\xc3\xa9 ok"}));
  for (const std::string& hidden : {over, std::string("new\nline"), std::string("esc\x1b[31mred"),
                                    std::string("del\x7f"), std::string("tab\tdir")}) {
    EXPECT_TRUE(c->Lookup("odd", hidden).status().IsNotFound()) << hidden;
  }
  EXPECT_OK(c->Lookup("odd", at_limit));
}

TEST_F(CatalogTest, ConcurrentLookupsListOnce) {
  origin_.SetDelay(std::chrono::milliseconds(100));
  auto c = Open();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (c->Lookup("", "top.txt").ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(origin_.list_calls(), 3u);  // one listing of 5 root entries = 3 pages of 2
}

// Lists "loop/" with tokens A -> B -> C -> A (a cycle longer than one step).
class CyclicTokenStore : public FakeBlobStore {
 public:
  using FakeBlobStore::FakeBlobStore;
  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override {
    if (prefix != "loop/") return FakeBlobStore::List(prefix, delimiter, token, max_keys);
    ++loop_calls;
    ListPage page;
    const std::string name = "f" + std::to_string(loop_calls);
    page.objects.push_back({"loop/" + name, ObjectInfo{1, "e", 0, {}}});
    page.next_token = token.empty() ? "A" : token == "A" ? "B" : token == "B" ? "C" : "A";
    return page;
  }
  std::atomic<int> loop_calls{0};
};

TEST(CatalogLoopTest, CyclicContinuationTokensEndInAClearError) {
  CyclicTokenStore origin("fake://loop");
  origin.PutObject("loop/", "");
  auto meta = NewMemMetaStore();
  FakeClock clock;
  auto c = Catalog::Open(CatalogOptions{}, &origin, meta.get(), &clock);
  ASSERT_OK(c);
  auto e = (*c)->Lookup("loop", "f1");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Status::Code::kCorruption) << e.status().ToString();
  EXPECT_NE(e.status().message().find("repeated a continuation token"), std::string::npos)
      << e.status().ToString();
  EXPECT_EQ(origin.loop_calls, 4);  // "", A, B, C -> A again: stop
  // Nothing half-listed was stored.
  auto rec = meta->GetDir("fake://loop\nloop");
  ASSERT_OK(rec);
  EXPECT_FALSE(rec->has_value());
}

// A MetaStore whose listing writes fail with NoSpace while `full` is set (LMDB's MDB_MAP_FULL),
// forwarding everything else to an in-memory store.
class FullMetaStore : public testing::ForwardingMetaStore {
 public:
  std::atomic<bool> full{true};
  Status ReplaceDir(std::string_view k, const DirRecord& r, std::span<const DirEntry> e) override {
    if (full) return Status::NoSpace("MDB_MAP_FULL (raise meta map_size)");
    return ForwardingMetaStore::ReplaceDir(k, r, e);
  }
  Status PutDirEntry(std::string_view k, const DirEntry& e) override {
    if (full) return Status::NoSpace("MDB_MAP_FULL");
    return ForwardingMetaStore::PutDirEntry(k, e);
  }
};

TEST_F(CatalogTest, AFullMetaStoreServesListingsFromMemory) {
  auto full = std::make_unique<FullMetaStore>();
  FullMetaStore* store = full.get();
  meta_ = std::move(full);
  auto c = Open();
  // Nothing can be stored, yet every directory lists and every name looks up.
  EXPECT_EQ(Names(c.get(), "a"), (std::vector<std::string>{"b/", "one.bin", "two.bin"}));
  EXPECT_EQ(Names(c.get(), "a/b/c"), (std::vector<std::string>{"deeper.bin"}));
  auto e = c->Lookup("a/b/c", "deeper.bin");
  ASSERT_OK(e);
  EXPECT_EQ(e->size, 6u);
  auto snap = c->Snapshot("a");
  ASSERT_OK(snap);
  EXPECT_EQ((*snap)->entries.size(), 3u);
  EXPECT_GE(c->Stats().overflow_listings.load(), 4u);  // "", "a", "a/b", "a/b/c"
  // Served from memory while fresh: no relisting.
  const uint64_t lists = c->Stats().list_requests.load();
  EXPECT_OK(c->Lookup("a", "one.bin"));
  EXPECT_EQ(c->Stats().list_requests.load(), lists);
  // Once the store has room again, the next refresh stores the listing there.
  store->full = false;
  clock_.Advance(std::chrono::seconds(120));
  c->TEST_WaitForRefreshes();
  EXPECT_OK(c->Lookup("a", "one.bin"));
  c->TEST_WaitForRefreshes();
  auto rec = store->GetDir(std::string(origin_.Describe()) + "\na");
  ASSERT_OK(rec);
  EXPECT_TRUE(rec->has_value());
  EXPECT_EQ(Names(c.get(), "a"), (std::vector<std::string>{"b/", "one.bin", "two.bin"}));
}

}  // namespace
}  // namespace tierfs
