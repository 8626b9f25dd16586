// ForEachListPage / ListPageTracker: continuation-token loops end in a clear error, whatever the
// shape of the cycle, and past the page cap.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "blobclient/blob_store.h"
#include "tests/blobclient/test_util.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

// Answers each List with one object and the next token from a script: token -> next token. A
// token missing from the script ends the listing.
class ScriptedTokenStore : public testing::FakeBlobStore {
 public:
  explicit ScriptedTokenStore(std::map<std::string, std::string> next) : next_(std::move(next)) {}
  Result<ListPage> List(std::string_view prefix, std::string_view, std::string_view token,
                        int) override {
    ++calls;
    ListPage page;
    page.objects.push_back({std::string(prefix) + "k" + std::to_string(calls), ObjectInfo{}});
    if (auto it = next_.find(std::string(token)); it != next_.end()) page.next_token = it->second;
    return page;
  }
  int calls = 0;

 private:
  const std::map<std::string, std::string> next_;
};

// Every answer carries a fresh token: a listing that never ends.
class EndlessStore : public testing::FakeBlobStore {
 public:
  Result<ListPage> List(std::string_view, std::string_view, std::string_view, int) override {
    ++calls;
    ListPage page;
    page.next_token = "t" + std::to_string(calls);
    return page;
  }
  int calls = 0;
};

Status CountPages(BlobStore* store, int* pages, uint64_t max_pages = kMaxListPages) {
  return ForEachListPage(
      store, "p/", "/", 1000,
      [&](ListPage&) {
        ++*pages;
        return Status::OK();
      },
      max_pages);
}

TEST(ListPagesTest, FollowsEveryPageToTheEnd) {
  ScriptedTokenStore store({{"", "A"}, {"A", "B"}, {"B", "C"}});
  int pages = 0;
  ASSERT_OK(CountPages(&store, &pages));
  EXPECT_EQ(pages, 4);
  EXPECT_EQ(store.calls, 4);
}

TEST(ListPagesTest, ImmediatelyRepeatedTokenIsAnError) {
  ScriptedTokenStore store({{"", "A"}, {"A", "A"}});
  int pages = 0;
  Status st = CountPages(&store, &pages);
  ASSERT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("repeated a continuation token"), std::string::npos);
  EXPECT_EQ(store.calls, 2);
}

TEST(ListPagesTest, LongerCycleIsAnError) {
  // A -> B -> C -> A: the previous token never repeats, only an older one does.
  ScriptedTokenStore store({{"", "A"}, {"A", "B"}, {"B", "C"}, {"C", "A"}});
  int pages = 0;
  Status st = CountPages(&store, &pages);
  ASSERT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("listing 'p/' of fake://origin"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("after 4 page(s)"), std::string::npos) << st.ToString();
  EXPECT_EQ(store.calls, 4);
  EXPECT_FALSE(IsRetryable(st));
}

TEST(ListPagesTest, PageCapEndsAnEndlessListing) {
  EndlessStore store;
  int pages = 0;
  Status st = CountPages(&store, &pages, /*max_pages=*/50);
  ASSERT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("more than 50 pages"), std::string::npos) << st.ToString();
  EXPECT_EQ(store.calls, 50);
  EXPECT_EQ(pages, 50);
}

TEST(ListPagesTest, ExactlyMaxPagesIsFine) {
  ScriptedTokenStore store({{"", "A"}, {"A", "B"}});
  int pages = 0;
  ASSERT_OK(CountPages(&store, &pages, /*max_pages=*/3));
  EXPECT_EQ(pages, 3);
}

TEST(ListPagesTest, AnErrorFromTheCallbackStopsTheListing) {
  ScriptedTokenStore store({{"", "A"}, {"A", "B"}, {"B", "C"}});
  int pages = 0;
  Status st = ForEachListPage(&store, "", "", 1000, [&](ListPage&) {
    return ++pages == 2 ? Status::NoSpace("full") : Status::OK();
  });
  EXPECT_EQ(st.code(), Status::Code::kNoSpace);
  EXPECT_EQ(store.calls, 2);
}

TEST(ListPagesTest, ListErrorsPassThrough) {
  testing::FakeBlobStore store;
  store.FailNext(1, Status::PermissionDenied("no"));
  int pages = 0;
  EXPECT_EQ(CountPages(&store, &pages).code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(pages, 0);
}

}  // namespace
}  // namespace tierfs
