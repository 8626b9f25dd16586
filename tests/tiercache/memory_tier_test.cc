#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace {

BlockKey Key(int i) { return MakeBlockKey("src", "obj", "e", 1024, static_cast<uint64_t>(i)); }

BlockRef MakeBlock(size_t n, char fill = 'x') {
  auto b = Block::Allocate(n);
  std::memset(b->mutable_data().data(), fill, n);
  b->set_size(n);
  return b;
}

// One shard so LRU order is global and easy to reason about.
std::unique_ptr<Tier> OneShard(uint64_t capacity) {
  MemoryTierOptions o;
  o.capacity_bytes = capacity;
  o.shards = 1;
  return NewMemoryTier(o);
}

TEST(MemoryTierTest, MissThenHit) {
  auto t = OneShard(4096);
  EXPECT_TRUE(t->Read(Key(1)).status().IsNotFound());
  ASSERT_OK(t->Insert(Key(1), MakeBlock(100, 'a'), {}));
  auto r = t->Read(Key(1));
  ASSERT_OK(r);
  EXPECT_EQ((*r)->size(), 100u);
  EXPECT_EQ((*r)->data()[0], std::byte{'a'});
  EXPECT_TRUE(t->Contains(Key(1)));
  EXPECT_EQ(t->Stats().hits, 1u);
  EXPECT_EQ(t->Stats().misses, 1u);
  EXPECT_EQ(t->Stats().bytes_used, 100u);
  EXPECT_EQ(t->Stats().bytes_read, 100u);
}

TEST(MemoryTierTest, EvictsLeastRecentlyUsedWithinBudget) {
  auto t = OneShard(300);
  ASSERT_OK(t->Insert(Key(1), MakeBlock(100), {}));
  ASSERT_OK(t->Insert(Key(2), MakeBlock(100), {}));
  ASSERT_OK(t->Insert(Key(3), MakeBlock(100), {}));
  ASSERT_OK(t->Read(Key(1)));  // 1 becomes most recent; 2 is now the LRU
  ASSERT_OK(t->Insert(Key(4), MakeBlock(100), {}));
  EXPECT_TRUE(t->Contains(Key(1)));
  EXPECT_FALSE(t->Contains(Key(2)));
  EXPECT_TRUE(t->Contains(Key(3)));
  EXPECT_TRUE(t->Contains(Key(4)));
  EXPECT_EQ(t->Stats().bytes_used, 300u);
  EXPECT_EQ(t->Stats().evictions, 1u);
}

TEST(MemoryTierTest, BudgetIsNeverExceeded) {
  auto t = OneShard(1000);
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(t->Insert(Key(i), MakeBlock(37 + i % 50), {}));
    ASSERT_LE(t->Stats().bytes_used, 1000u);
  }
}

// A block of `n` bytes whose storage is charged to `budget` as a fetched block is (Block::Allocate
// charges the process's budget, which these tests leave alone).
BlockRef ChargedBlock(MemoryBudget* budget, size_t n) {
  budget->Charge(MemoryUse::kBlocks, n);
  return MakeBlock(n);
}

std::unique_ptr<Tier> BudgetedShard(uint64_t capacity, MemoryBudget* budget) {
  MemoryTierOptions o;
  o.capacity_bytes = capacity;
  o.shards = 1;
  o.memory_budget = budget;
  return NewMemoryTier(o);
}

TEST(MemoryTierTest, HeldBlocksAreChargedAsL1AndGivenBackOnEvictionAndErase) {
  MemoryBudget budget(1 << 20);
  {
    auto t = BudgetedShard(300, &budget);
    ASSERT_OK(t->Insert(Key(1), ChargedBlock(&budget, 100), {}));
    ASSERT_OK(t->Insert(Key(2), ChargedBlock(&budget, 100), {}));
    EXPECT_EQ(budget.used(MemoryUse::kL1), 200u);
    EXPECT_EQ(budget.used(MemoryUse::kBlocks), 0u);
    ASSERT_OK(t->Insert(Key(2), MakeBlock(100), {}));  // already held: no second charge
    EXPECT_EQ(budget.used(MemoryUse::kL1), 200u);
    ASSERT_OK(t->Insert(Key(3), ChargedBlock(&budget, 200), {}));  // evicts 1
    EXPECT_EQ(budget.used(MemoryUse::kL1), 300u);
    EXPECT_EQ(budget.used(MemoryUse::kBlocks), 100u);  // block 1: its storage until freed
    t->Erase(Key(2));
    EXPECT_EQ(budget.used(MemoryUse::kL1), 200u);
  }
  // The tier's blocks go back to kBlocks with it.
  EXPECT_EQ(budget.used(MemoryUse::kL1), 0u);
  EXPECT_EQ(budget.used(MemoryUse::kBlocks), 400u);
}

TEST(MemoryTierTest, ShrinksFirstWhenAnotherConsumerNeedsRoom) {
  MemoryBudget budget(1000);
  auto t = BudgetedShard(10000, &budget);  // L1 alone would hold 10x the budget
  for (int i = 0; i < 8; ++i) ASSERT_OK(t->Insert(Key(i), ChargedBlock(&budget, 100), {}));
  ASSERT_OK(t->Read(Key(0)));  // 0 becomes the most recent; 1 is the least
  EXPECT_EQ(budget.used(MemoryUse::kL1), 800u);
  // Readahead's blocks need 500: L1 gives back its 3 least recently used blocks (300).
  // (The evicted blocks' storage stays charged here: freeing it releases it, which these
  // blocks, charged by hand, do not.)
  budget.Charge(MemoryUse::kBlocks, 500);
  EXPECT_EQ(budget.used(MemoryUse::kL1), 500u);
  EXPECT_FALSE(t->Contains(Key(1)));
  EXPECT_FALSE(t->Contains(Key(2)));
  EXPECT_FALSE(t->Contains(Key(3)));
  EXPECT_TRUE(t->Contains(Key(0)));
  EXPECT_TRUE(t->Contains(Key(7)));
  EXPECT_EQ(t->Stats().bytes_used, 500u);
  EXPECT_EQ(t->Stats().evictions, 3u);
  EXPECT_EQ(budget.reclaimed_bytes(), 300u);
}

TEST(MemoryTierTest, PinnedBlocksAreNotGivenBack) {
  MemoryBudget budget(300);
  auto t = BudgetedShard(10000, &budget);
  Placement pin;
  pin.pinned = true;
  ASSERT_OK(t->Insert(Key(1), ChargedBlock(&budget, 100), pin));
  ASSERT_OK(t->Insert(Key(2), ChargedBlock(&budget, 100), {}));
  budget.Charge(MemoryUse::kBlocks, 300);
  EXPECT_TRUE(t->Contains(Key(1)));
  EXPECT_FALSE(t->Contains(Key(2)));
  EXPECT_EQ(budget.used(MemoryUse::kL1), 100u);
}

TEST(MemoryTierTest, AShardedTierShrinksAcrossShards) {
  MemoryBudget budget(64 * 1024);
  MemoryTierOptions o;
  o.capacity_bytes = 1 << 20;
  o.shards = 8;
  o.memory_budget = &budget;
  auto t = NewMemoryTier(o);
  for (int i = 0; i < 64; ++i) ASSERT_OK(t->Insert(Key(i), ChargedBlock(&budget, 1024), {}));
  budget.Charge(MemoryUse::kBlocks, 32 * 1024);  // half of the budget: 32 blocks go
  EXPECT_LE(budget.used(MemoryUse::kL1), 32u * 1024);
  EXPECT_GE(budget.used(MemoryUse::kL1), 31u * 1024);
  int held = 0;
  for (int i = 0; i < 64; ++i) held += t->Contains(Key(i)) ? 1 : 0;
  EXPECT_EQ(static_cast<uint64_t>(held) * 1024, t->Stats().bytes_used.load());
}

TEST(MemoryTierTest, DeclinesBlockLargerThanShardBudget) {
  MemoryTierOptions o;
  o.capacity_bytes = 4000;
  o.shards = 4;  // 1000 per shard
  auto t = NewMemoryTier(o);
  ASSERT_OK(t->Insert(Key(1), MakeBlock(1000), {}));
  Status s = t->Insert(Key(2), MakeBlock(1001), {});
  EXPECT_EQ(s.code(), Status::Code::kNoSpace);
  EXPECT_FALSE(t->Contains(Key(2)));
  EXPECT_TRUE(t->Contains(Key(1)));
}

// A small L1 gets fewer shards, so that each holds a few blocks: with the 16 asked for, 8 MiB of
// 1 MiB blocks made 512 KiB shards, and the tier declined every block.
TEST(MemoryTierTest, ASmallTierHasShardsThatHoldBlocks) {
  constexpr uint64_t kBlock = 1 << 20;
  MemoryTierOptions o;
  o.capacity_bytes = 8 * kBlock;
  o.shards = 16;
  o.block_bytes = kBlock;
  EXPECT_EQ(MemoryTierShards(o), 2);
  auto t = NewMemoryTier(o);
  for (int i = 0; i < 6; ++i) ASSERT_OK(t->Insert(Key(i), MakeBlock(kBlock), {}));
  EXPECT_EQ(t->Stats().capacity, 8 * kBlock);
  EXPECT_GE(t->Stats().bytes_used, 4 * kBlock);  // whatever the hash, two shards of 4 blocks
  // Large tiers keep the shards asked for; tiny ones get one; unknown block size: as asked.
  o.capacity_bytes = 1ULL << 30;
  EXPECT_EQ(MemoryTierShards(o), 16);
  o.capacity_bytes = kBlock;
  EXPECT_EQ(MemoryTierShards(o), 1);
  o.block_bytes = 0;
  EXPECT_EQ(MemoryTierShards(o), 16);
}

TEST(MemoryTierTest, PinnedBlocksAreNeverEvictedButCount) {
  auto t = OneShard(300);
  ASSERT_OK(t->Insert(Key(1), MakeBlock(100), Placement{.pinned = true}));
  ASSERT_OK(t->Insert(Key(2), MakeBlock(100), Placement{.pinned = true}));
  ASSERT_OK(t->Insert(Key(3), MakeBlock(100), {}));
  ASSERT_OK(t->Insert(Key(4), MakeBlock(100), {}));  // evicts 3, never 1 or 2
  EXPECT_TRUE(t->Contains(Key(1)));
  EXPECT_TRUE(t->Contains(Key(2)));
  EXPECT_FALSE(t->Contains(Key(3)));
  EXPECT_TRUE(t->Contains(Key(4)));
  EXPECT_EQ(t->Stats().bytes_used, 300u);
  // 150 can't fit beside 200 pinned bytes: declined, and nothing was evicted for it.
  EXPECT_EQ(t->Insert(Key(5), MakeBlock(150), {}).code(), Status::Code::kNoSpace);
  EXPECT_TRUE(t->Contains(Key(4)));
  ASSERT_OK(t->Insert(Key(6), MakeBlock(100, 'z'), Placement{.pinned = true}));  // evicts 4
  EXPECT_FALSE(t->Contains(Key(4)));
  EXPECT_EQ(t->Insert(Key(7), MakeBlock(1), {}).code(), Status::Code::kNoSpace);  // all pinned
  t->Erase(Key(1));  // explicit erase removes even pinned blocks
  EXPECT_FALSE(t->Contains(Key(1)));
  EXPECT_EQ(t->Stats().bytes_used, 200u);
}

TEST(MemoryTierTest, ReaderRefsOutliveEviction) {
  auto t = OneShard(100);
  ASSERT_OK(t->Insert(Key(1), MakeBlock(100, 'q'), {}));
  BlockRef held = *t->Read(Key(1));
  ASSERT_OK(t->Insert(Key(2), MakeBlock(100), {}));  // evicts 1
  EXPECT_FALSE(t->Contains(Key(1)));
  ASSERT_EQ(held->size(), 100u);
  EXPECT_EQ(held->data()[99], std::byte{'q'});
  EXPECT_EQ(t->Stats().bytes_used, 100u);  // the held block no longer counts
}

TEST(MemoryTierTest, ReinsertIsIdempotent) {
  auto t = OneShard(1000);
  ASSERT_OK(t->Insert(Key(1), MakeBlock(100), {}));
  ASSERT_OK(t->Insert(Key(1), MakeBlock(100), {}));
  EXPECT_EQ(t->Stats().bytes_used, 100u);
  EXPECT_EQ(t->Stats().inserts, 1u);
}

TEST(MemoryTierTest, ConcurrentUseKeepsAccountsStraight) {
  MemoryTierOptions o;
  o.capacity_bytes = 64 * 1024;
  o.shards = 4;
  auto t = NewMemoryTier(o);
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < 2000; ++i) {
        int k = (i * 7 + th) % 300;
        if (i % 3 == 0) {
          (void)t->Insert(Key(k), MakeBlock(512 + k), {});
        } else if (i % 17 == 0) {
          t->Erase(Key(k));
        } else {
          auto r = t->Read(Key(k));
          if (r.ok()) {
            ASSERT_EQ((*r)->size(), static_cast<size_t>(512 + k));
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(t->Stats().bytes_used, 64u * 1024);
  uint64_t sum = 0;
  for (int k = 0; k < 300; ++k) {
    if (t->Contains(Key(k))) sum += 512 + k;
  }
  EXPECT_EQ(sum, t->Stats().bytes_used.load());
}

TEST(MemoryTierTest, AQuotaGroupEvictsItsOwnBlocksFirst) {
  auto t = OneShard(1000);
  const Placement q{.quota_group = 5, .quota_bytes = 300};
  ASSERT_OK(t->Insert(Key(1), MakeBlock(100), {}));  // the oldest block, no group
  for (int i = 10; i < 16; ++i) ASSERT_OK(t->Insert(Key(i), MakeBlock(100), q));
  // The group never holds more than its 300 bytes, and it made room from its own blocks.
  int held = 0;
  for (int i = 10; i < 16; ++i) held += t->Contains(Key(i)) ? 1 : 0;
  EXPECT_EQ(held, 3);
  EXPECT_TRUE(t->Contains(Key(13)) && t->Contains(Key(14)) && t->Contains(Key(15)));
  EXPECT_TRUE(t->Contains(Key(1)));
  EXPECT_EQ(t->Stats().bytes_used, 400u);
  // A block bigger than the quota share still fits on its own (the share is at least a block).
  ASSERT_OK(t->Insert(Key(20), MakeBlock(500), q));
  EXPECT_TRUE(t->Contains(Key(20)));
  EXPECT_FALSE(t->Contains(Key(15)));
}

TEST(MemoryTierTest, TtlPolicyEvictsInStoredOrderAndExpiredFirst) {
  auto t = OneShard(300);
  Placement ttl{.ttl = std::chrono::seconds(10), .stored_ns = 1'000'000'000, .ttl_order = true};
  ASSERT_OK(t->Insert(Key(1), MakeBlock(100), ttl));
  ASSERT_OK(t->Insert(Key(2), MakeBlock(100), Placement{.stored_ns = 1'000'000'000}));
  ASSERT_OK(t->Insert(Key(3), MakeBlock(100), Placement{.stored_ns = 1'000'000'000}));
  ASSERT_OK(t->Read(Key(1)));  // does not refresh a ttl-ordered block
  ASSERT_OK(t->Insert(Key(4), MakeBlock(100), Placement{.stored_ns = 2'000'000'000}));
  EXPECT_FALSE(t->Contains(Key(1)));
  EXPECT_TRUE(t->Contains(Key(2)));
  // An expired block goes before the least recently used one, whatever its policy.
  Placement short_ttl{.ttl = std::chrono::seconds(1), .stored_ns = 3'000'000'000};
  ASSERT_OK(t->Insert(Key(5), MakeBlock(100), short_ttl));  // evicts LRU 2
  ASSERT_OK(t->Read(Key(3)));
  ASSERT_OK(t->Read(Key(4)));
  ASSERT_OK(t->Read(Key(5)));  // the most recently used, but expired by the next insert
  ASSERT_OK(t->Insert(Key(6), MakeBlock(100), Placement{.stored_ns = 5'000'000'000}));
  EXPECT_FALSE(t->Contains(Key(5)));
  EXPECT_TRUE(t->Contains(Key(3)));
  EXPECT_TRUE(t->Contains(Key(4)));
}

}  // namespace
}  // namespace tierfs
