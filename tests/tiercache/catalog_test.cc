// Catalog over FakeBlobStore + the in-memory MetaStore, with a FakeClock for TTLs.
#include "tiercache/catalog.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/units.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/tiercache/test_util.h"

namespace tierfs {
namespace {

using testing::FakeBlobStore;

// Lists through a small page size so every listing takes several pages.
class SmallPageStore : public FakeBlobStore {
 public:
  using FakeBlobStore::FakeBlobStore;
  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override {
    return FakeBlobStore::List(prefix, delimiter, token, std::min(max_keys, 2));
  }
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

  std::unique_ptr<Catalog> Open(std::chrono::nanoseconds ttl = std::chrono::seconds(60)) {
    CatalogOptions o;
    o.metadata_ttl = ttl;
    auto c = Catalog::Open(o, &origin_, meta_.get(), &clock_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(*c);
  }

  std::vector<std::string> Names(Catalog* c, std::string_view dir) {
    std::vector<DirEntry> out;
    Status st = c->ReadDir(dir, "", 1000, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
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
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(top->type, EntryType::kFile);
  EXPECT_EQ(top->size, 5u);
  EXPECT_EQ(top->mtime_ns, 111);
  EXPECT_EQ(top->etag, origin_.Head("top.txt")->etag);
  auto clash = c->Lookup("", "clash");
  ASSERT_TRUE(clash.ok());
  EXPECT_EQ(clash->type, EntryType::kDir);  // the directory wins
}

TEST_F(CatalogTest, NestedDirectories) {
  auto c = Open();
  EXPECT_EQ(Names(c.get(), "a"), (std::vector<std::string>{"b/", "one.bin", "two.bin"}));
  EXPECT_EQ(Names(c.get(), "a/b"), (std::vector<std::string>{"c/", "deep.bin"}));
  EXPECT_EQ(Names(c.get(), "a/b/c"), (std::vector<std::string>{"deeper.bin"}));
  auto e = c->Lookup("a/b/c", "deeper.bin");
  ASSERT_TRUE(e.ok());
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
  TC_ASSERT_OK(c->ReadDir("many", "f010", 3, &out));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].name, "f011");
}

TEST_F(CatalogTest, TtlExpiryRelists) {
  auto c = Open(std::chrono::seconds(60));
  ASSERT_TRUE(c->Lookup("a", "one.bin").ok());
  const uint64_t lists = origin_.list_calls();
  clock_.Advance(std::chrono::seconds(30));
  ASSERT_TRUE(c->Lookup("a", "one.bin").ok());
  EXPECT_EQ(origin_.list_calls(), lists);  // still fresh
  origin_.PutObject("a/new.bin", "new");
  EXPECT_TRUE(c->Lookup("a", "new.bin").status().IsNotFound());  // cached negative
  clock_.Advance(std::chrono::seconds(31));
  auto e = c->Lookup("a", "new.bin");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_GT(origin_.list_calls(), lists);
  EXPECT_GT(c->Stats().listing_misses, 0u);
}

TEST_F(CatalogTest, ForeverNeverRelists) {
  auto c = Open(kForever);
  ASSERT_TRUE(c->Lookup("a", "one.bin").ok());
  const uint64_t lists = origin_.list_calls();
  clock_.Advance(std::chrono::hours(24 * 365 * 10));
  origin_.PutObject("a/new.bin", "new");
  EXPECT_TRUE(c->Lookup("a", "new.bin").status().IsNotFound());
  ASSERT_TRUE(c->Lookup("a", "one.bin").ok());
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
  ASSERT_TRUE(c->Lookup("a", "one.bin").ok());
  clock_.Advance(std::chrono::seconds(11));
  origin_.FailNext(1000, Status::Unavailable("origin down"));
  auto e = c->Lookup("a", "one.bin");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->size, 10u);
  // Never listed: nothing stale to serve, so the error surfaces.
  auto never = c->Lookup("withmark", "f");
  ASSERT_FALSE(never.ok());
  EXPECT_EQ(never.status().code(), Status::Code::kUnavailable);
  origin_.FailNext(0);
}

TEST_F(CatalogTest, RevalidateUsesFreshListingThenHeads) {
  auto c = Open(std::chrono::seconds(10));
  ASSERT_TRUE(c->Lookup("a", "one.bin").ok());
  auto e = c->Revalidate("a/one.bin");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(origin_.head_calls(), 0u);                   // fresh listing
  origin_.PutObject("a/one.bin", std::string(99, 'z'));  // changed
  clock_.Advance(std::chrono::seconds(11));
  e = c->Revalidate("a/one.bin");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(origin_.head_calls(), 1u);
  EXPECT_EQ(e->size, 99u);
  EXPECT_EQ(e->etag, origin_.Head("a/one.bin")->etag);
  origin_.ResetCounters();
  // The refreshed entry is cached (the listing itself is still stale).
  auto again = c->Revalidate("a/one.bin");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->size, 99u);
  EXPECT_EQ(origin_.head_calls(), 0u);
  origin_.RemoveObject("a/two.bin");
  EXPECT_TRUE(c->Revalidate("a/two.bin").status().IsNotFound());
  std::vector<DirEntry> out;
  TC_ASSERT_OK(meta_->ListDirEntries("fake://bucket\na", "", 10, &out));
  for (const auto& d : out) EXPECT_NE(d.name, "two.bin");
}

TEST_F(CatalogTest, RevalidateServesCachedEntryWhenOriginIsDown) {
  auto c = Open(std::chrono::seconds(10));
  ASSERT_TRUE(c->Lookup("a", "one.bin").ok());
  clock_.Advance(std::chrono::seconds(11));
  origin_.FailNext(1000, Status::Unavailable("down"));
  auto e = c->Revalidate("a/one.bin");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->size, 10u);
  origin_.FailNext(0);
}

TEST_F(CatalogTest, RevalidateOfADirectory) {
  auto c = Open();
  auto e = c->Revalidate("a/b");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
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
  EXPECT_TRUE(c->Lookup("odd", at_limit).ok());
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

}  // namespace
}  // namespace tierfs
