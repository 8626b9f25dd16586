// LMDB-specific behaviour: persistence across reopen, schema versioning, group commit, map-full
// handling, files that are not LMDB.
#include "metastore/lmdb_meta_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/metastore/test_util.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using metastore_internal::kSchemaVersion;
using metastore_internal::LmdbMetaStore;
using testing::TempDir;

BlockKey KeyOf(uint32_t n) {
  BlockKey k{};
  for (int i = 0; i < 4; ++i) k[i] = static_cast<uint8_t>(n >> (8 * (3 - i)));
  k[15] = 0xab;
  return k;
}

BlockRecord RecordOf(uint32_t n) {
  BlockRecord r;
  r.key = KeyOf(n);
  r.length = n;
  r.checksum = 0x9e3779b97f4a7c15ULL * (n + 1);
  r.atime_ns = static_cast<int64_t>(n) * 1000;
  r.stored_ns = -static_cast<int64_t>(n);
  r.flags = n & 1;
  return r;
}

class LmdbMetaStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  MetaStoreOptions Options() const {
    MetaStoreOptions o;
    o.path = dir_.path() + "/meta";  // also checks that a missing directory is created
    o.map_size = 64ULL << 20;
    return o;
  }

  std::unique_ptr<LmdbMetaStore> MustOpen(const MetaStoreOptions& o) {
    auto s = LmdbMetaStore::Open(o);
    EXPECT_OK(s);
    return s.ok() ? std::move(s).value() : nullptr;
  }

  TempDir dir_;
};

TEST_F(LmdbMetaStoreTest, DataSurvivesCloseAndReopen) {
  {
    auto store = MustOpen(Options());
    ASSERT_NE(store, nullptr);
    DirEntry e{
        .name = "f.bin", .type = EntryType::kFile, .size = 77, .etag = "\"abc\"", .mtime_ns = 5};
    ASSERT_OK(store->ReplaceDir("src\n/x", DirRecord{42, 1}, std::span(&e, 1)));
    std::vector<BlockRecord> recs = {RecordOf(1), RecordOf(2)};
    ASSERT_OK(store->PutBlocks(recs));
    ASSERT_OK(store->PutValue("policy/x", "evict=pin"));
  }
  auto store = MustOpen(Options());
  ASSERT_NE(store, nullptr);
  auto d = store->GetDir("src\n/x");
  ASSERT_OK(d);
  ASSERT_TRUE(d->has_value());
  EXPECT_EQ((*d)->listed_at_ns, 42);
  auto e = store->GetDirEntry("src\n/x", "f.bin");
  ASSERT_OK(e);
  ASSERT_TRUE(e->has_value());
  EXPECT_EQ((*e)->size, 77u);
  EXPECT_EQ((*e)->etag, "\"abc\"");
  auto b = store->GetBlock(KeyOf(2));
  ASSERT_OK(b);
  ASSERT_TRUE(b->has_value());
  EXPECT_EQ((*b)->checksum, RecordOf(2).checksum);
  EXPECT_EQ((*b)->stored_ns, -2);
  auto v = store->GetValue("policy/x");
  ASSERT_OK(v);
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, "evict=pin");
  // The schema record lives in its own sub-database, not among the caller's values.
  int values = 0;
  ASSERT_OK(store->ScanValues("", [&](std::string_view, std::string_view) {
    ++values;
    return true;
  }));
  EXPECT_EQ(values, 1);
}

// A block's owner (the object and index it belongs to) is kept in its record, so L2 can index
// its blocks by object again after a restart; a record without one reads as owner unknown.
TEST_F(LmdbMetaStoreTest, BlockOwnerSurvivesCloseAndReopen) {
  BlockRecord owned = RecordOf(7);
  owned.group = 9;
  owned.expires_ns = 123;
  for (size_t i = 0; i < owned.owner.object.size(); ++i) owned.owner.object[i] = uint8_t(i + 1);
  owned.owner.index = (uint64_t{1} << 50) + 3;
  owned.owner.chunk = true;
  const BlockRecord plain = RecordOf(8);
  {
    auto store = MustOpen(Options());
    ASSERT_NE(store, nullptr);
    std::vector<BlockRecord> recs = {owned, plain};
    ASSERT_OK(store->PutBlocks(recs));
  }
  auto store = MustOpen(Options());
  ASSERT_NE(store, nullptr);
  auto b = store->GetBlock(KeyOf(7));
  ASSERT_OK(b);
  ASSERT_TRUE(b->has_value());
  EXPECT_EQ((*b)->owner.object, owned.owner.object);
  EXPECT_EQ((*b)->owner.index, owned.owner.index);
  EXPECT_TRUE((*b)->owner.chunk);
  EXPECT_EQ((*b)->group, 9u);
  EXPECT_EQ((*b)->expires_ns, 123);
  std::map<uint32_t, BlockOwner> seen;
  ASSERT_OK(store->ScanBlocks([&](const BlockRecord& r) {
    seen[r.length] = r.owner;
    return true;
  }));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen[7].known());
  EXPECT_EQ(seen[7].index, owned.owner.index);
  EXPECT_FALSE(seen[8].known());
}

DirEntry Named(std::string name, uint64_t size = 0) {
  DirEntry e;
  e.name = std::move(name);
  e.size = size;
  return e;
}

// Every entry of `dir_key`, through ListDirEntries pages.
std::vector<DirEntry> ListEverything(MetaStore* store, std::string_view dir_key) {
  std::vector<DirEntry> all, page;
  std::string after;
  while (true) {
    page.clear();
    Status st = store->ListDirEntries(dir_key, after, 10000, &page);
    EXPECT_OK(st);
    if (!st.ok() || page.empty()) break;
    after = page.back().name;
    for (auto& e : page) all.push_back(std::move(e));
  }
  return all;
}

TEST_F(LmdbMetaStoreTest, HugeDirectoryIsWrittenAcrossSeveralTransactions) {
  MetaStoreOptions o = Options();
  o.dir_entries_per_txn = 10'000;
  auto store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  // 200k entries, given out of order: names "f000000".."f199999", reversed.
  std::vector<DirEntry> entries;
  entries.reserve(200'000);
  for (int i = 199'999; i >= 0; --i) {
    char name[16];
    snprintf(name, sizeof(name), "f%06d", i);
    entries.push_back(Named(name, static_cast<uint64_t>(i)));
  }
  // A neighbour whose key extends this one's ("big" vs "big2") must be left alone.
  DirEntry other = Named("keep");
  ASSERT_OK(store->ReplaceDir("s\nbig2", DirRecord{7, 1}, std::span(&other, 1)));
  const uint64_t commits = store->Stats().commits;
  ASSERT_OK(store->ReplaceDir("s\nbig", DirRecord{100, entries.size()}, entries));
  // 20 chunks + the record: never one 200k-entry transaction.
  EXPECT_GE(store->Stats().commits - commits, 21u);
  auto all = ListEverything(store.get(), "s\nbig");
  ASSERT_EQ(all.size(), 200'000u);
  EXPECT_EQ(all.front().name, "f000000");
  EXPECT_EQ(all.back().name, "f199999");
  EXPECT_EQ(all[12345].size, 12345u);
  auto rec = store->GetDir("s\nbig");
  ASSERT_OK(rec);
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->listed_at_ns, 100);

  // Relisted with a different set: every third old name gone, new names between and after the
  // old ones. The result is exactly the new set, however the chunks fall.
  std::vector<DirEntry> next;
  std::set<std::string> want;
  for (int i = 0; i < 200'000; ++i) {
    char name[16];
    if (i % 3 != 0) {
      snprintf(name, sizeof(name), "f%06d", i);
      next.push_back(Named(name, 1));
      want.insert(name);
    }
    if (i % 7 == 0) {
      snprintf(name, sizeof(name), "f%06d+", i);
      next.push_back(Named(name, 2));
      want.insert(name);
    }
  }
  next.push_back(Named("zzz", 3));
  want.insert("zzz");
  ASSERT_OK(store->ReplaceDir("s\nbig", DirRecord{200, next.size()}, next));
  all = ListEverything(store.get(), "s\nbig");
  ASSERT_EQ(all.size(), want.size());
  auto it = want.begin();
  for (const DirEntry& e : all) EXPECT_EQ(e.name, *it++);
  rec = store->GetDir("s\nbig");
  ASSERT_OK(rec);
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->listed_at_ns, 200);
  // Relisted small: one transaction, the old entries all gone.
  DirEntry one = Named("only");
  ASSERT_OK(store->ReplaceDir("s\nbig", DirRecord{300, 1}, std::span(&one, 1)));
  all = ListEverything(store.get(), "s\nbig");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].name, "only");
  ASSERT_EQ(ListEverything(store.get(), "s\nbig2").size(), 1u);
}

TEST_F(LmdbMetaStoreTest, ChunkedReplaceKeepsTheLastOfDuplicateNames) {
  MetaStoreOptions o = Options();
  o.dir_entries_per_txn = 2;
  auto store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  std::vector<DirEntry> entries = {Named("b", 1), Named("a"), Named("b", 2), Named("c"),
                                   Named("d")};
  ASSERT_OK(store->ReplaceDir("s\nd", DirRecord{1, 4}, entries));
  auto all = ListEverything(store.get(), "s\nd");
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[1].name, "b");
  EXPECT_EQ(all[1].size, 2u);
}

TEST_F(LmdbMetaStoreTest, NewerSchemaVersionIsRefused) {
  {
    auto store = MustOpen(Options());
    ASSERT_NE(store, nullptr);
    ASSERT_OK(store->TEST_WriteSchemaVersion(kSchemaVersion + 1));
  }
  auto store = LmdbMetaStore::Open(Options());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Status::Code::kFailedPrecondition) << store.status().ToString();
  EXPECT_NE(store.status().message().find("newer"), std::string::npos) << store.status().ToString();
  // The public factory refuses too.
  auto pub = NewLmdbMetaStore(Options());
  EXPECT_EQ(pub.status().code(), Status::Code::kFailedPrecondition);
}

TEST_F(LmdbMetaStoreTest, OlderUnknownSchemaVersionIsRefused) {
  {
    auto store = MustOpen(Options());
    ASSERT_NE(store, nullptr);
    ASSERT_OK(store->TEST_WriteSchemaVersion(0));
  }
  auto store = LmdbMetaStore::Open(Options());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Status::Code::kCorruption) << store.status().ToString();
}

TEST_F(LmdbMetaStoreTest, CurrentSchemaVersionReopens) {
  { ASSERT_NE(MustOpen(Options()), nullptr); }
  { ASSERT_NE(MustOpen(Options()), nullptr); }
}

TEST_F(LmdbMetaStoreTest, NotAnLmdbFileIsCorruption) {
  MetaStoreOptions o = Options();
  std::filesystem::create_directories(o.path);
  {
    std::ofstream f(o.path + "/data.mdb", std::ios::binary);
    std::string junk(64 * 1024, 'x');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto store = LmdbMetaStore::Open(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Status::Code::kCorruption) << store.status().ToString();
}

TEST_F(LmdbMetaStoreTest, EmptyPathIsInvalid) {
  MetaStoreOptions o;
  auto store = LmdbMetaStore::Open(o);
  EXPECT_EQ(store.status().code(), Status::Code::kInvalidArgument);
}

TEST_F(LmdbMetaStoreTest, ConcurrentPutBlocksAreGroupCommitted) {
  auto store = MustOpen(Options());
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000;
  const MetaStoreStats before = store->Stats();
  std::atomic<int> failures{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          BlockRecord r = RecordOf(static_cast<uint32_t>(t * kPerThread + i));
          if (!store->PutBlocks(std::span(&r, 1)).ok()) failures.fetch_add(1);
        }
      });
    }
  }
  EXPECT_EQ(failures.load(), 0);
  const MetaStoreStats after = store->Stats();
  const uint64_t writes = after.writes - before.writes;
  const uint64_t commits = after.commits - before.commits;
  EXPECT_EQ(writes, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_LT(commits, writes) << "no group commit happened";
  EXPECT_GT(store->InternalStats().max_batch_ops, 1u);

  std::set<BlockKey> seen;
  ASSERT_OK(store->ScanBlocks([&](const BlockRecord& r) {
    seen.insert(r.key);
    return true;
  }));
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kPerThread));
  for (uint32_t n : {0u, 999u, 4321u, 7999u}) {
    auto b = store->GetBlock(KeyOf(n));
    ASSERT_OK(b) << n;
    ASSERT_TRUE(b->has_value()) << n;
    EXPECT_EQ((*b)->length, n);
  }
}

TEST_F(LmdbMetaStoreTest, MapFullIsNoSpaceNotACrash) {
  MetaStoreOptions o = Options();
  o.map_size = 1024 * 1024;
  auto store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  Status last;
  uint32_t next = 0;
  for (int round = 0; round < 1000 && last.ok(); ++round) {
    std::vector<BlockRecord> recs;
    for (int i = 0; i < 100; ++i) recs.push_back(RecordOf(next++));
    last = store->PutBlocks(recs);
  }
  ASSERT_FALSE(last.ok()) << "map never filled";
  EXPECT_EQ(last.code(), Status::Code::kNoSpace) << last.ToString();
  // Earlier writes are intact and readable; the store keeps working for reads.
  auto b = store->GetBlock(KeyOf(0));
  ASSERT_OK(b);
  ASSERT_TRUE(b->has_value());

  // Concurrent writers against a full map: every call returns; OK means the record landed.
  std::atomic<int> ok{0}, nospace{0}, other{0};
  std::vector<std::vector<uint32_t>> landed(4);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          uint32_t n = 1000000 + static_cast<uint32_t>(t * 1000 + i);
          BlockRecord r = RecordOf(n);
          Status s = store->PutBlocks(std::span(&r, 1));
          if (s.ok()) {
            ok.fetch_add(1);
            landed[t].push_back(n);
          } else if (s.code() == Status::Code::kNoSpace) {
            nospace.fetch_add(1);
          } else {
            other.fetch_add(1);
          }
        }
      });
    }
  }
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(nospace.load(), 0);
  for (const auto& v : landed) {
    for (uint32_t n : v) {
      auto r = store->GetBlock(KeyOf(n));
      ASSERT_OK(r) << n;
      ASSERT_TRUE(r->has_value()) << n;
    }
  }
  // Deletes still commit on a full store (they use the reserve), and freeing space makes
  // writes succeed again.
  for (uint32_t n = 0; n < next / 2; n += 20) {
    std::vector<BlockKey> victims;
    for (uint32_t i = n; i < std::min(n + 20, next / 2); ++i) victims.push_back(KeyOf(i));
    ASSERT_OK(store->EraseBlocks(victims));
  }
  BlockRecord r = RecordOf(2000000);
  EXPECT_OK(store->PutBlocks(std::span(&r, 1)));
}

TEST_F(LmdbMetaStoreTest, FailedBatchDoesNotFailItsNeighbours) {
  // Near-full map: a large PutBlocks fails with NoSpace while small erases in the same group
  // commit must still succeed (the writer retries each operation alone).
  MetaStoreOptions o = Options();
  o.map_size = 1024 * 1024;
  auto store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  uint32_t next = 0;
  Status s;
  while (s.ok() && next < 100000) {
    std::vector<BlockRecord> recs;
    for (int i = 0; i < 50; ++i) recs.push_back(RecordOf(next++));
    s = store->PutBlocks(recs);
  }
  ASSERT_EQ(s.code(), Status::Code::kNoSpace) << s.ToString();
  std::atomic<int> erase_failures{0}, big_ok{0};
  {
    std::vector<std::jthread> threads;
    threads.emplace_back([&] {
      std::vector<BlockRecord> big;
      for (uint32_t i = 0; i < 2000; ++i) big.push_back(RecordOf(500000 + i));
      for (int i = 0; i < 20; ++i) {
        if (store->PutBlocks(big).ok()) big_ok.fetch_add(1);
      }
    });
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        for (uint32_t i = 0; i < 20; ++i) {
          BlockKey k = KeyOf(static_cast<uint32_t>(t * 20) + i);
          if (!store->EraseBlocks(std::span(&k, 1)).ok()) erase_failures.fetch_add(1);
        }
      });
    }
  }
  EXPECT_EQ(big_ok.load(), 0);
  EXPECT_EQ(erase_failures.load(), 0);
  for (uint32_t n = 0; n < 60; ++n) {
    auto r = store->GetBlock(KeyOf(n));
    ASSERT_OK(r);
    EXPECT_FALSE(r->has_value()) << n;
  }
}

// Deterministic version: the writer is paused while one failing put and several erases queue
// up, so they land in one batch; the batch fails and each operation is retried alone.
TEST_F(LmdbMetaStoreTest, MixedBatchRetriesEachOperation) {
  MetaStoreOptions o = Options();
  o.map_size = 1024 * 1024;
  auto store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  uint32_t next = 0;
  Status s;
  while (s.ok() && next < 100000) {
    std::vector<BlockRecord> recs;
    for (int i = 0; i < 50; ++i) recs.push_back(RecordOf(next++));
    s = store->PutBlocks(recs);
  }
  ASSERT_EQ(s.code(), Status::Code::kNoSpace) << s.ToString();
  const auto before = store->InternalStats();
  const uint64_t commits_before = store->Stats().commits;

  store->TEST_PauseWriter(true);
  Status put_status;
  std::vector<Status> erase_status(4);
  {
    std::vector<std::jthread> threads;
    threads.emplace_back([&] {
      BlockRecord r = RecordOf(900000);
      put_status = store->PutBlocks(std::span(&r, 1));
    });
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        BlockKey k = KeyOf(static_cast<uint32_t>(t));
        erase_status[t] = store->EraseBlocks(std::span(&k, 1));
      });
    }
    // Not ASSERT: the writer must resume either way, or the threads never finish.
    EXPECT_TRUE(testing::Eventually([&] { return store->TEST_QueuedOps() >= 5; },
                                    testing::kEventuallyTimeout, std::chrono::milliseconds(1)));
    store->TEST_PauseWriter(false);
  }
  EXPECT_EQ(put_status.code(), Status::Code::kNoSpace) << put_status.ToString();
  for (const Status& e : erase_status) EXPECT_OK(e);
  const auto after = store->InternalStats();
  EXPECT_EQ(after.failed_batches, before.failed_batches + 1);
  EXPECT_EQ(store->Stats().commits, commits_before + 4);  // the four erases, one by one
  for (uint32_t n = 0; n < 4; ++n) {
    auto r = store->GetBlock(KeyOf(n));
    ASSERT_OK(r);
    EXPECT_FALSE(r->has_value()) << n;
  }
}

// With the writer paused, 16 queued writers are committed in a single transaction.
TEST_F(LmdbMetaStoreTest, QueuedWritesShareOneCommit) {
  auto store = MustOpen(Options());
  ASSERT_NE(store, nullptr);
  const uint64_t commits_before = store->Stats().commits;
  store->TEST_PauseWriter(true);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        BlockRecord r = RecordOf(static_cast<uint32_t>(t));
        EXPECT_OK(store->PutBlocks(std::span(&r, 1)));
      });
    }
    // Not ASSERT: the writer must resume either way, or the threads never finish.
    EXPECT_TRUE(testing::Eventually([&] { return store->TEST_QueuedOps() >= 16; },
                                    testing::kEventuallyTimeout, std::chrono::milliseconds(1)));
    store->TEST_PauseWriter(false);
  }
  EXPECT_EQ(store->Stats().commits, commits_before + 1);
  EXPECT_GE(store->InternalStats().max_batch_ops, 16u);
}

// sync_every_commit reaches LMDB: the environment flushes in every commit (no MDB_NOSYNC); the
// default leaves the flushes to the writer's periodic sync. (That a flushed commit survives a
// power cut is LMDB's to keep.)
TEST_F(LmdbMetaStoreTest, SyncEveryCommitMode) {
  {
    auto by_default = MustOpen(Options());
    ASSERT_NE(by_default, nullptr);
    EXPECT_TRUE(by_default->InternalStats().env_nosync);
  }
  MetaStoreOptions o = Options();
  o.sync_every_commit = true;
  auto store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->InternalStats().env_nosync);
  for (uint32_t i = 0; i < 4; ++i) {
    BlockRecord r = RecordOf(i);
    ASSERT_OK(store->PutBlocks(std::span(&r, 1)));
  }
  EXPECT_GE(store->Stats().commits, 4u);
}

TEST_F(LmdbMetaStoreTest, PeriodicSyncUnderNoSync) {
  auto store = MustOpen(Options());
  ASSERT_NE(store, nullptr);
  BlockRecord r = RecordOf(7);
  ASSERT_OK(store->PutBlocks(std::span(&r, 1)));
  testing::Eventually([&] { return store->InternalStats().syncs > 0; });
  EXPECT_GE(store->InternalStats().syncs, 1u);
}

}  // namespace
}  // namespace tierfs
