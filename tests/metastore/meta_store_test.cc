// Conformance tests for the MetaStore interface, run against every implementation (the in-memory
// store and the LMDB store) so both keep the same semantics.
#include "metastore/meta_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/metastore/impls.h"
#include "tests/metastore/test_util.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using testing::TempDir;

DirEntry File(std::string name, uint64_t size = 1, std::string etag = "e") {
  DirEntry e;
  e.name = std::move(name);
  e.type = EntryType::kFile;
  e.size = size;
  e.etag = std::move(etag);
  e.mtime_ns = 1700000000123456789LL;
  return e;
}

DirEntry Dir(std::string name) {
  DirEntry e;
  e.name = std::move(name);
  e.type = EntryType::kDir;
  return e;
}

BlockKey Key(uint8_t a, uint8_t b = 0) {
  BlockKey k{};
  k[0] = a;
  k[15] = b;
  return k;
}

BlockRecord Block(const BlockKey& key, uint32_t length = 4096) {
  BlockRecord r;
  r.key = key;
  r.length = length;
  r.checksum = 0x0123456789abcdefULL ^ key[0];
  r.atime_ns = -5;  // negative on purpose: signed fields must round-trip
  r.stored_ns = 1700000000000000000LL;
  r.flags = 3;
  r.group = 0xdeadbeef;
  r.expires_ns = 1700000000000000000LL + 3600;
  return r;
}

void ExpectSameEntry(const DirEntry& a, const DirEntry& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.etag, b.etag);
  EXPECT_EQ(a.mtime_ns, b.mtime_ns);
}

void ExpectSameBlock(const BlockRecord& a, const BlockRecord& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.length, b.length);
  EXPECT_EQ(a.checksum, b.checksum);
  EXPECT_EQ(a.atime_ns, b.atime_ns);
  EXPECT_EQ(a.stored_ns, b.stored_ns);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.expires_ns, b.expires_ns);
}

std::vector<std::string> Names(const std::vector<DirEntry>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.name);
  return out;
}

class MetaStoreTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto store = OpenImpl(GetParam(), dir_.path());
    ASSERT_OK(store);
    store_ = std::move(store).value();
  }

  std::vector<DirEntry> ListAll(std::string_view dir_key) {
    std::vector<DirEntry> out;
    Status s = store_->ListDirEntries(dir_key, "", 1 << 20, &out);
    EXPECT_OK(s);
    return out;
  }

  TempDir dir_;
  std::unique_ptr<MetaStore> store_;
};

TEST_P(MetaStoreTest, MissingDataIsNulloptNotError) {
  auto d = store_->GetDir("s\n/");
  ASSERT_OK(d);
  EXPECT_FALSE(d->has_value());
  auto e = store_->GetDirEntry("s\n/", "x");
  ASSERT_OK(e);
  EXPECT_FALSE(e->has_value());
  auto b = store_->GetBlock(Key(1));
  ASSERT_OK(b);
  EXPECT_FALSE(b->has_value());
  auto v = store_->GetValue("nope");
  ASSERT_OK(v);
  EXPECT_FALSE(v->has_value());
  EXPECT_TRUE(ListAll("s\n/").empty());
}

TEST_P(MetaStoreTest, DirListingRoundTrip) {
  DirRecord rec{.listed_at_ns = 1234567890123LL, .entry_count = 3};
  std::vector<DirEntry> entries = {File("b.txt", 10, "etag-b"), Dir("a"), File("c", 0, "")};
  ASSERT_OK(store_->ReplaceDir("src\n/data", rec, entries));

  auto got = store_->GetDir("src\n/data");
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->listed_at_ns, rec.listed_at_ns);
  EXPECT_EQ((*got)->entry_count, rec.entry_count);

  auto list = ListAll("src\n/data");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(Names(list), (std::vector<std::string>{"a", "b.txt", "c"}));  // byte order
  ExpectSameEntry(list[0], entries[1]);
  ExpectSameEntry(list[1], entries[0]);
  ExpectSameEntry(list[2], entries[2]);

  auto one = store_->GetDirEntry("src\n/data", "b.txt");
  ASSERT_OK(one);
  ASSERT_TRUE(one->has_value());
  ExpectSameEntry(**one, entries[0]);
}

TEST_P(MetaStoreTest, ListPagingWithAfter) {
  std::vector<DirEntry> entries;
  for (int i = 0; i < 25; ++i) {
    char name[16];
    snprintf(name, sizeof(name), "f%03d", i);
    entries.push_back(File(name, i));
  }
  ASSERT_OK(store_->ReplaceDir("d", DirRecord{1, 25}, entries));

  std::vector<std::string> all;
  std::string after;
  int pages = 0;
  for (;;) {
    std::vector<DirEntry> page;
    ASSERT_OK(store_->ListDirEntries("d", after, 10, &page));
    if (page.empty()) break;
    ASSERT_LE(page.size(), 10u);
    for (const auto& e : page) all.push_back(e.name);
    after = page.back().name;
    ++pages;
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(all.size(), 25u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_EQ(all.front(), "f000");
  EXPECT_EQ(all.back(), "f024");

  // `after` need not be an existing name; the result starts strictly after it.
  std::vector<DirEntry> page;
  ASSERT_OK(store_->ListDirEntries("d", "f0105", 2, &page));
  EXPECT_EQ(Names(page), (std::vector<std::string>{"f011", "f012"}));
  ASSERT_OK(store_->ListDirEntries("d", "f024", 10, &page));
  EXPECT_TRUE(page.empty());
  ASSERT_OK(store_->ListDirEntries("d", "", 0, &page));
  EXPECT_TRUE(page.empty());
}

TEST_P(MetaStoreTest, ListClearsOutput) {
  ASSERT_OK(store_->ReplaceDir("d", DirRecord{1, 1}, std::vector<DirEntry>{File("x")}));
  std::vector<DirEntry> out = {File("stale")};
  ASSERT_OK(store_->ListDirEntries("d", "", 10, &out));
  EXPECT_EQ(Names(out), (std::vector<std::string>{"x"}));
}

TEST_P(MetaStoreTest, ReplaceDirDropsOldEntries) {
  ASSERT_OK(store_->ReplaceDir("d", DirRecord{1, 3},
                               std::vector<DirEntry>{File("a"), File("b"), File("c")}));
  ASSERT_OK(
      store_->ReplaceDir("d", DirRecord{2, 2}, std::vector<DirEntry>{File("b", 99), File("z")}));
  auto list = ListAll("d");
  EXPECT_EQ(Names(list), (std::vector<std::string>{"b", "z"}));
  EXPECT_EQ(list[0].size, 99u);
  auto a = store_->GetDirEntry("d", "a");
  ASSERT_OK(a);
  EXPECT_FALSE(a->has_value());
  auto rec = store_->GetDir("d");
  ASSERT_OK(rec);
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->listed_at_ns, 2);

  // Replacing with an empty listing leaves the record (an empty dir) and no entries.
  ASSERT_OK(store_->ReplaceDir("d", DirRecord{3, 0}, {}));
  EXPECT_TRUE(ListAll("d").empty());
  rec = store_->GetDir("d");
  ASSERT_OK(rec);
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->entry_count, 0u);
}

TEST_P(MetaStoreTest, ReplaceDirRejectsBadNamesAndChangesNothing) {
  ASSERT_OK(store_->ReplaceDir("d", DirRecord{1, 1}, std::vector<DirEntry>{File("keep")}));
  std::string nul("x\0y", 3);
  for (const std::string& bad : {std::string(), nul, std::string("a/b")}) {
    Status s =
        store_->ReplaceDir("d", DirRecord{2, 2}, std::vector<DirEntry>{File("new"), File(bad)});
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  }
  EXPECT_EQ(Names(ListAll("d")), (std::vector<std::string>{"keep"}));
  Status s = store_->ReplaceDir(std::string("bad\0key", 7), DirRecord{}, {});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
}

TEST_P(MetaStoreTest, PutAndDeleteDirEntry) {
  ASSERT_OK(store_->ReplaceDir("d", DirRecord{1, 2}, std::vector<DirEntry>{File("a"), File("b")}));
  ASSERT_OK(store_->PutDirEntry("d", File("b", 42, "new-etag")));
  ASSERT_OK(store_->PutDirEntry("d", File("c")));
  auto list = ListAll("d");
  EXPECT_EQ(Names(list), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(list[1].size, 42u);
  EXPECT_EQ(list[1].etag, "new-etag");

  ASSERT_OK(store_->DeleteDirEntry("d", "a"));
  ASSERT_OK(store_->DeleteDirEntry("d", "never-existed"));  // not an error
  EXPECT_EQ(Names(ListAll("d")), (std::vector<std::string>{"b", "c"}));
  // The directory record is untouched by single-entry edits.
  auto rec = store_->GetDir("d");
  ASSERT_OK(rec);
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->entry_count, 2u);
}

// Entries with the origin's owner and mode (file://) keep them; entries without (S3) read back
// without, beside them in the same directory.
TEST_P(MetaStoreTest, EntryOwnerAndModeRoundTrip) {
  DirEntry f = File("secret", 7, "etag-1");
  f.owner_known = true;
  f.uid = 0;
  f.gid = 4242;
  f.mode = 0600;
  DirEntry d = Dir("private");
  d.owner_known = true;
  d.uid = 65534;
  d.gid = 65534;
  d.mode = 0700;
  ASSERT_OK(store_->ReplaceDir("o", DirRecord{1, 3}, std::vector<DirEntry>{f, d, File("plain")}));
  auto list = ListAll("o");
  ASSERT_EQ(Names(list), (std::vector<std::string>{"plain", "private", "secret"}));
  EXPECT_FALSE(list[0].owner_known);
  EXPECT_EQ(list[0].etag, "e");
  EXPECT_TRUE(list[1].owner_known);
  EXPECT_EQ(list[1].type, EntryType::kDir);
  EXPECT_EQ(list[1].uid, 65534u);
  EXPECT_EQ(list[1].gid, 65534u);
  EXPECT_EQ(list[1].mode, 0700u);
  auto e = store_->GetDirEntry("o", "secret");
  ASSERT_OK(e);
  ASSERT_TRUE(e->has_value());
  EXPECT_TRUE((*e)->owner_known);
  EXPECT_EQ((*e)->uid, 0u);
  EXPECT_EQ((*e)->gid, 4242u);
  EXPECT_EQ((*e)->mode, 0600u);
  EXPECT_EQ((*e)->size, 7u);
  EXPECT_EQ((*e)->etag, "etag-1");
  EXPECT_EQ((*e)->mtime_ns, 1700000000123456789LL);
}

TEST_P(MetaStoreTest, PrefixDirKeysDoNotMix) {
  ASSERT_OK(store_->ReplaceDir("a", DirRecord{1, 1}, std::vector<DirEntry>{File("x")}));
  ASSERT_OK(store_->ReplaceDir("ab", DirRecord{1, 1}, std::vector<DirEntry>{File("y")}));
  ASSERT_OK(store_->ReplaceDir("a/b", DirRecord{1, 1}, std::vector<DirEntry>{File("z")}));
  EXPECT_EQ(Names(ListAll("a")), (std::vector<std::string>{"x"}));
  EXPECT_EQ(Names(ListAll("ab")), (std::vector<std::string>{"y"}));
  EXPECT_EQ(Names(ListAll("a/b")), (std::vector<std::string>{"z"}));
  auto e = store_->GetDirEntry("a", "b");
  ASSERT_OK(e);
  EXPECT_FALSE(e->has_value());

  // Replacing "a" must not touch "ab" or "a/b".
  ASSERT_OK(store_->ReplaceDir("a", DirRecord{2, 0}, {}));
  EXPECT_TRUE(ListAll("a").empty());
  EXPECT_EQ(Names(ListAll("ab")), (std::vector<std::string>{"y"}));
  EXPECT_EQ(Names(ListAll("a/b")), (std::vector<std::string>{"z"}));
}

TEST_P(MetaStoreTest, UnicodeAndSpacesInNames) {
  std::vector<DirEntry> entries = {File("hello world.txt"), File("Ünïcødé—名前.bin"),
                                   File(" leading space"),  File("trailing space "),
                                   File("emoji 🚀"),         File("tab\tname"),
                                   File("\x7f\x01")};
  const std::string dir_key = "source with space\n/dïr/ü";
  ASSERT_OK(store_->ReplaceDir(dir_key, DirRecord{1, entries.size()}, entries));
  std::vector<std::string> want = Names(entries);
  std::sort(want.begin(), want.end());  // std::string compares bytes as unsigned via char_traits
  EXPECT_EQ(Names(ListAll(dir_key)), want);
  for (const auto& e : entries) {
    auto got = store_->GetDirEntry(dir_key, e.name);
    ASSERT_OK(got);
    ASSERT_TRUE(got->has_value()) << e.name;
    ExpectSameEntry(**got, e);
  }
}

TEST_P(MetaStoreTest, DropDirsByPrefix) {
  for (const char* k : {"s1\n/", "s1\n/a", "s1\n/a/b", "s2\n/", "s10\n/"}) {
    ASSERT_OK(store_->ReplaceDir(k, DirRecord{1, 1}, std::vector<DirEntry>{File("f")}));
  }
  ASSERT_OK(store_->DropDirs("s1\n"));
  for (const char* k : {"s1\n/", "s1\n/a", "s1\n/a/b"}) {
    auto d = store_->GetDir(k);
    ASSERT_OK(d);
    EXPECT_FALSE(d->has_value()) << k;
    EXPECT_TRUE(ListAll(k).empty()) << k;
  }
  for (const char* k : {"s2\n/", "s10\n/"}) {
    auto d = store_->GetDir(k);
    ASSERT_OK(d);
    EXPECT_TRUE(d->has_value()) << k;
    EXPECT_EQ(ListAll(k).size(), 1u) << k;
  }
  // An empty prefix drops every directory; blocks and values are not directories.
  ASSERT_OK(store_->PutValue("v", "1"));
  ASSERT_OK(store_->DropDirs(""));
  for (const char* k : {"s2\n/", "s10\n/"}) {
    auto d = store_->GetDir(k);
    ASSERT_OK(d);
    EXPECT_FALSE(d->has_value()) << k;
    EXPECT_TRUE(ListAll(k).empty());
  }
  auto v = store_->GetValue("v");
  ASSERT_OK(v);
  ASSERT_TRUE(v->has_value());
}

TEST_P(MetaStoreTest, DropDirsWithEntriesButNoRecord) {
  ASSERT_OK(store_->PutDirEntry("p/x", File("f")));  // entry without a ReplaceDir
  ASSERT_OK(store_->DropDirs("p/"));
  EXPECT_TRUE(ListAll("p/x").empty());
}

TEST_P(MetaStoreTest, BlocksPutGetEraseScan) {
  std::vector<BlockRecord> recs;
  for (int i = 0; i < 50; ++i) recs.push_back(Block(Key(static_cast<uint8_t>(i), 7), 100 + i));
  ASSERT_OK(store_->PutBlocks(recs));
  for (const auto& r : recs) {
    auto got = store_->GetBlock(r.key);
    ASSERT_OK(got);
    ASSERT_TRUE(got->has_value());
    ExpectSameBlock(**got, r);
  }
  // Overwrite one, erase some (including one that does not exist).
  BlockRecord changed = recs[3];
  changed.atime_ns = 999;
  changed.flags = 0;
  ASSERT_OK(store_->PutBlocks(std::span<const BlockRecord>(&changed, 1)));
  std::vector<BlockKey> gone = {recs[0].key, recs[1].key, Key(200, 200)};
  ASSERT_OK(store_->EraseBlocks(gone));

  std::map<BlockKey, BlockRecord> seen;
  ASSERT_OK(store_->ScanBlocks([&](const BlockRecord& r) {
    EXPECT_TRUE(seen.emplace(r.key, r).second) << "duplicate in scan";
    return true;
  }));
  EXPECT_EQ(seen.size(), 48u);
  EXPECT_EQ(seen.count(recs[0].key), 0u);
  EXPECT_EQ(seen.count(recs[1].key), 0u);
  ExpectSameBlock(seen.at(recs[3].key), changed);
  ExpectSameBlock(seen.at(recs[49].key), recs[49]);

  // Early stop.
  int calls = 0;
  ASSERT_OK(store_->ScanBlocks([&](const BlockRecord&) { return ++calls < 5; }));
  EXPECT_EQ(calls, 5);
}

TEST_P(MetaStoreTest, ScanBlocksCallbackMayWrite) {
  std::vector<BlockRecord> recs;
  for (int i = 0; i < 20; ++i) recs.push_back(Block(Key(static_cast<uint8_t>(i))));
  ASSERT_OK(store_->PutBlocks(recs));
  // The L2 start-up scan may erase records whose files are gone while scanning.
  int visited = 0;
  ASSERT_OK(store_->ScanBlocks([&](const BlockRecord& r) {
    ++visited;
    if (r.key[0] % 2 == 0) {
      EXPECT_OK(store_->EraseBlocks(std::span(&r.key, 1)));
    }
    return true;
  }));
  EXPECT_EQ(visited, 20);
  int left = 0;
  ASSERT_OK(store_->ScanBlocks([&](const BlockRecord& r) {
    EXPECT_EQ(r.key[0] % 2, 1);
    ++left;
    return true;
  }));
  EXPECT_EQ(left, 10);
}

TEST_P(MetaStoreTest, ValuesAndPrefixScan) {
  ASSERT_OK(store_->PutValue("policy/a", "p1"));
  ASSERT_OK(store_->PutValue("policy/a/b", "p2"));
  ASSERT_OK(store_->PutValue("policy0", "not-a-policy"));
  ASSERT_OK(store_->PutValue("pol", "short"));
  ASSERT_OK(store_->PutValue("queue/1", std::string("bin\0ary", 7)));
  ASSERT_OK(store_->PutValue("empty", ""));

  auto v = store_->GetValue("queue/1");
  ASSERT_OK(v);
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, std::string("bin\0ary", 7));
  v = store_->GetValue("empty");
  ASSERT_OK(v);
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, "");

  std::vector<std::pair<std::string, std::string>> got;
  ASSERT_OK(store_->ScanValues("policy/", [&](std::string_view k, std::string_view val) {
    got.emplace_back(k, val);
    return true;
  }));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, "policy/a");
  EXPECT_EQ(got[0].second, "p1");
  EXPECT_EQ(got[1].first, "policy/a/b");

  ASSERT_OK(store_->PutValue("policy/a", "p1-new"));
  ASSERT_OK(store_->DeleteValue("policy/a/b"));
  ASSERT_OK(store_->DeleteValue("never"));
  got.clear();
  ASSERT_OK(store_->ScanValues("policy", [&](std::string_view k, std::string_view val) {
    got.emplace_back(k, val);
    return true;
  }));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (std::pair<std::string, std::string>{"policy/a", "p1-new"}));
  EXPECT_EQ(got[1].first, "policy0");

  // Empty prefix: everything the caller stored, in byte order, then early stop.
  std::vector<std::string> names;
  ASSERT_OK(store_->ScanValues("", [&](std::string_view k, std::string_view) {
    names.emplace_back(k);
    return true;
  }));
  EXPECT_EQ(names, (std::vector<std::string>{"empty", "pol", "policy/a", "policy0", "queue/1"}));
  int calls = 0;
  ASSERT_OK(
      store_->ScanValues("", [&](std::string_view, std::string_view) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2);
}

TEST_P(MetaStoreTest, KeyLengthLimit) {
  const std::string dir_key = "d";
  // dir_key + '\0' + name == kMaxMetaKeyBytes is the longest accepted entry key.
  const std::string longest(kMaxMetaKeyBytes - dir_key.size() - 1, 'n');
  const std::string too_long = longest + "n";
  ASSERT_OK(store_->PutDirEntry(dir_key, File(longest)));
  EXPECT_EQ(store_->PutDirEntry(dir_key, File(too_long)).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store_->ReplaceDir(dir_key, DirRecord{}, std::vector<DirEntry>{File(too_long)}).code(),
            Status::Code::kInvalidArgument);
  auto got = store_->GetDirEntry(dir_key, longest);
  ASSERT_OK(got);
  EXPECT_TRUE(got->has_value());
  got = store_->GetDirEntry(dir_key, too_long);
  ASSERT_OK(got);
  EXPECT_FALSE(got->has_value());
  EXPECT_OK(store_->DeleteDirEntry(dir_key, too_long));
  // A too-long `after` still pages correctly.
  std::vector<DirEntry> page;
  ASSERT_OK(store_->ListDirEntries(dir_key, too_long, 10, &page));
  EXPECT_TRUE(page.empty());
  ASSERT_OK(store_->ListDirEntries(dir_key, std::string(600, 'a'), 10, &page));
  EXPECT_EQ(Names(page), (std::vector<std::string>{longest}));

  const std::string long_value_name(kMaxMetaKeyBytes, 'v');
  ASSERT_OK(store_->PutValue(long_value_name, "x"));
  EXPECT_EQ(store_->PutValue(long_value_name + "v", "x").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store_->PutValue("", "x").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store_->ReplaceDir("", DirRecord{}, {}).code(), Status::Code::kInvalidArgument);
  auto v = store_->GetValue(long_value_name + "v");
  ASSERT_OK(v);
  EXPECT_FALSE(v->has_value());
}

TEST_P(MetaStoreTest, LargeDirectoryReplacedBySmall) {
  std::vector<DirEntry> big;
  for (int i = 0; i < 5000; ++i) big.push_back(File("file-" + std::to_string(i), i));
  ASSERT_OK(store_->ReplaceDir("big", DirRecord{1, big.size()}, big));
  ASSERT_OK(store_->ReplaceDir("big2", DirRecord{1, 1}, std::vector<DirEntry>{File("x")}));
  EXPECT_EQ(ListAll("big").size(), 5000u);
  ASSERT_OK(store_->ReplaceDir("big", DirRecord{2, 1}, std::vector<DirEntry>{File("only")}));
  EXPECT_EQ(Names(ListAll("big")), (std::vector<std::string>{"only"}));
  EXPECT_EQ(Names(ListAll("big2")), (std::vector<std::string>{"x"}));
}

TEST_P(MetaStoreTest, ScanBlocksAcrossManyRecords) {
  // More than one scan chunk of the LMDB store (1024 records per read transaction).
  std::vector<BlockRecord> recs;
  for (int i = 0; i < 3000; ++i) {
    BlockKey k{};
    k[0] = static_cast<uint8_t>(i >> 8);
    k[1] = static_cast<uint8_t>(i);
    recs.push_back(Block(k, i));
  }
  ASSERT_OK(store_->PutBlocks(recs));
  std::map<BlockKey, uint32_t> seen;
  ASSERT_OK(store_->ScanBlocks([&](const BlockRecord& r) {
    EXPECT_TRUE(seen.emplace(r.key, r.length).second);
    return true;
  }));
  ASSERT_EQ(seen.size(), 3000u);
  for (const auto& r : recs) EXPECT_EQ(seen.at(r.key), r.length);

  std::vector<std::string> names;
  for (int i = 0; i < 2500; ++i) {
    char name[32];
    snprintf(name, sizeof(name), "q/%05d", i);
    ASSERT_OK(store_->PutValue(name, std::to_string(i)));
  }
  ASSERT_OK(store_->PutValue("r", "outside"));
  int n = 0;
  std::string last;
  ASSERT_OK(store_->ScanValues("q/", [&](std::string_view k, std::string_view v) {
    EXPECT_GT(std::string(k), last);
    last = std::string(k);
    EXPECT_EQ(std::string(v), std::to_string(n));
    ++n;
    return true;
  }));
  EXPECT_EQ(n, 2500);
}

// Readers racing ReplaceDir see the old listing or the new one, never a mix or a half. The test
// proves the race happened: the writer keeps replacing until readers have run reads that overlapped
// a ReplaceDir in flight (a read overlaps write k when write k had started before the read ended
// and had not finished when the read began), and fails if none did.
TEST_P(MetaStoreTest, ReplaceDirIsAtomicForConcurrentReaders) {
  auto listing = [](char c) {
    std::vector<DirEntry> v;
    for (int i = 0; i < 200; ++i) v.push_back(File(std::string(1, c) + std::to_string(i)));
    return v;
  };
  const std::vector<DirEntry> a = listing('a'), b = listing('b');
  ASSERT_OK(store_->ReplaceDir("d", DirRecord{0, 200}, a));
  constexpr int kReaders = 3;
  constexpr uint64_t kWantOverlaps = 20;
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, reading{0};
  std::atomic<uint64_t> writes_started{0}, writes_finished{0}, overlapped{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&] {
      reading.fetch_add(1);
      while (!stop.load()) {
        const uint64_t finished_before = writes_finished.load();
        std::vector<DirEntry> out;
        if (!store_->ListDirEntries("d", "", 1000, &out).ok() || out.size() != 200 ||
            !std::all_of(out.begin(), out.end(),
                         [&](const DirEntry& e) { return e.name[0] == out[0].name[0]; })) {
          bad.fetch_add(1);
        }
        if (writes_started.load() > finished_before) overlapped.fetch_add(1);
      }
    });
  }
  EXPECT_TRUE(testing::Eventually([&] { return reading.load() == kReaders; },
                                  std::chrono::seconds(30), std::chrono::milliseconds(1)));
  // At least 50 replacements; more until enough reads overlapped one, for at most 30 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 1; i <= 50 || (overlapped.load() < kWantOverlaps &&
                              std::chrono::steady_clock::now() < deadline);
       ++i) {
    writes_started.fetch_add(1);
    EXPECT_OK(store_->ReplaceDir("d", DirRecord{i, 200}, i % 2 ? b : a));
    writes_finished.fetch_add(1);
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GE(overlapped.load(), kWantOverlaps) << "readers seldom or never raced a ReplaceDir";
}

TEST_P(MetaStoreTest, StatsCount) {
  MetaStoreStats before = store_->Stats();
  ASSERT_OK(store_->PutBlocks(std::vector<BlockRecord>{Block(Key(1)), Block(Key(2))}));
  (void)store_->GetBlock(Key(1));
  ASSERT_OK(store_->Sync());
  MetaStoreStats after = store_->Stats();
  EXPECT_GE(after.writes, before.writes + 2);
  EXPECT_GE(after.commits, before.commits + 1);
  EXPECT_GE(after.reads, before.reads + 1);
}

INSTANTIATE_TEST_SUITE_P(AllImpls, MetaStoreTest, ::testing::ValuesIn(AllImpls()),
                         [](const ::testing::TestParamInfo<Impl>& info) {
                           return std::string(ImplName(info.param));
                         });

}  // namespace
}  // namespace tierfs
