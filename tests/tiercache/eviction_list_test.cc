// tiercache/internal/eviction_list.h: the eviction rules L1 and L2 share.
#include "tiercache/internal/eviction_list.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tiercache/tier.h"

namespace tierfs {
namespace {

using List = tiercache_internal::EvictionList<int>;

BlockKey Key(int i) { return MakeBlockKey("src", "obj", "e", 1024, static_cast<uint64_t>(i)); }

List::Meta M(uint64_t charge, uint32_t group = 0, int64_t expires = List::kNoExpiry,
             bool ttl_order = false, bool pinned = false) {
  List::Meta m;
  m.charge = charge;
  m.group = group;
  m.expires_ns = expires;
  m.ttl_order = ttl_order;
  m.pinned = pinned;
  return m;
}

// Evicts and returns the payloads in eviction order.
std::vector<int> EvictOrder(List* l, uint64_t need, uint32_t group = 0, uint64_t group_need = 0,
                            int64_t now = 0) {
  std::vector<int> out;
  l->Evict(need, group, group_need, now, [&](List::Node&& n) { out.push_back(n.payload); });
  return out;
}

TEST(EvictionListTest, LeastRecentlyUsedFirstAndTouchRefreshes) {
  List l;
  for (int i = 1; i <= 4; ++i) l.Add(Key(i), M(10), i);
  l.Touch(Key(1));
  EXPECT_EQ(EvictOrder(&l, 25), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(l.used(), 10u);
  EXPECT_TRUE(l.Contains(Key(1)));
}

// Blocks are indexed by owner: HeldOf counts an object's whole blocks and lists every key held
// for it (sparse entries too), whatever leaves the list (Remove, Evict, from the head, the
// middle or the end of the owner's chain). Blocks of unknown owner are not indexed.
TEST(EvictionListTest, HeldOfFollowsTheBlocksOfEachOwner) {
  const ObjectId a = MakeBlockKey("src", "a", "e", 1024, 0);
  const ObjectId b = MakeBlockKey("src", "b", "e", 1024, 0);
  auto owned = [](const ObjectId& o, uint64_t index, bool chunk = false) {
    List::Meta m = M(10);
    m.owner = BlockOwner{o, index, chunk};
    return m;
  };
  auto keys_of = [](const List& l, const ObjectId& o) {
    std::vector<BlockKey> k;
    l.HeldOf(o, &k);
    std::sort(k.begin(), k.end());
    return k;
  };
  auto sorted = [](std::vector<BlockKey> k) {
    std::sort(k.begin(), k.end());
    return k;
  };
  List l;
  l.Add(Key(1), owned(a, 1), 1);
  l.Add(Key(2), owned(b, 0), 2);
  l.Add(Key(3), owned(a, 1ULL << 60), 3);
  l.Add(Key(4), owned(a, 1, /*chunk=*/true), 4);
  l.Add(Key(5), M(10), 5);  // unknown owner
  l.Add(Key(6), owned(a, 7), 6);
  EXPECT_EQ(l.HeldOf(a, nullptr), 3u);  // 3 blocks, and 1 sparse entry among the keys
  EXPECT_EQ(keys_of(l, a), sorted({Key(1), Key(3), Key(4), Key(6)}));
  EXPECT_EQ(l.HeldOf(b, nullptr), 1u);
  EXPECT_EQ(l.HeldOf(MakeBlockKey("src", "c", "e", 1024, 0), nullptr), 0u);
  ASSERT_TRUE(l.Remove(Key(3)));  // the middle of a's chain
  EXPECT_EQ(keys_of(l, a), sorted({Key(1), Key(4), Key(6)}));
  ASSERT_TRUE(l.Remove(Key(6)));  // its head (the most recent insert)
  ASSERT_TRUE(l.Remove(Key(1)));  // its end
  EXPECT_EQ(l.HeldOf(a, nullptr), 0u);
  EXPECT_EQ(keys_of(l, a), std::vector<BlockKey>{Key(4)});
  EXPECT_EQ(EvictOrder(&l, 20), (std::vector<int>{2, 4}));  // LRU: b's block, a's entry
  EXPECT_TRUE(keys_of(l, a).empty());
  EXPECT_TRUE(keys_of(l, b).empty());
  l.Add(Key(3), owned(a, 2), 3);  // an owner comes back after its chain emptied
  EXPECT_EQ(keys_of(l, a), std::vector<BlockKey>{Key(3)});
  EXPECT_EQ(l.size(), 2u);
}

TEST(EvictionListTest, PinnedBlocksNeverGoAndCanFreeSaysSo) {
  List l;
  l.Add(Key(1), M(10, 0, List::kNoExpiry, false, /*pinned=*/true), 1);
  l.Add(Key(2), M(10), 2);
  EXPECT_TRUE(l.CanFree(10));
  EXPECT_FALSE(l.CanFree(11));
  EXPECT_EQ(EvictOrder(&l, 20), (std::vector<int>{2}));  // frees what it can
  EXPECT_EQ(l.pinned(), 10u);
  EXPECT_TRUE(l.SetPinned(Key(1), false));
  EXPECT_FALSE(l.SetPinned(Key(1), false));
  EXPECT_EQ(EvictOrder(&l, 10), (std::vector<int>{1}));
  EXPECT_EQ(l.used(), 0u);
  EXPECT_EQ(l.pinned(), 0u);
}

TEST(EvictionListTest, TtlOrderedBlocksAreNotRefreshedByReads) {
  List l;
  l.Add(Key(1), M(10, 0, 1000, /*ttl_order=*/true), 1);
  l.Add(Key(2), M(10), 2);
  l.Add(Key(3), M(10), 3);
  l.Touch(Key(1));  // no effect: 1 keeps its insert position
  l.Touch(Key(2));
  EXPECT_EQ(EvictOrder(&l, 20, 0, 0, /*now=*/0), (std::vector<int>{1, 3}));
}

TEST(EvictionListTest, ExpiredBlocksGoFirstSoonestFirst) {
  List l;
  l.Add(Key(1), M(10), 1);           // LRU, never expires
  l.Add(Key(2), M(10, 0, 500), 2);   // expired at 500
  l.Add(Key(3), M(10, 0, 300), 3);   // expired at 300
  l.Add(Key(4), M(10, 0, 5000), 4);  // live at now = 1000
  EXPECT_EQ(EvictOrder(&l, 30, 0, 0, /*now=*/1000), (std::vector<int>{3, 2, 1}));
  EXPECT_TRUE(l.Contains(Key(4)));
}

TEST(EvictionListTest, AGroupOverItsQuotaGivesUpItsOwnBlocks) {
  List l;
  l.Add(Key(1), M(10), 1);  // older than the group's blocks
  l.Add(Key(2), M(10, 7), 2);
  l.Add(Key(3), M(10, 7), 3);
  l.Add(Key(4), M(10, 9), 4);
  l.Touch(Key(2));  // group 7: 3 is its LRU now
  EXPECT_EQ(l.group_used(7), 20u);
  EXPECT_FALSE(l.CanFree(0, 7, 21));
  EXPECT_FALSE(l.CanFree(0, 0, 5));  // a group need without a group
  // Room for 10 bytes overall, 10 of them from group 7: its LRU block goes, not the tier's.
  ASSERT_TRUE(l.CanFree(10, 7, 10));
  EXPECT_EQ(EvictOrder(&l, 10, 7, 10), (std::vector<int>{3}));
  EXPECT_TRUE(l.Contains(Key(1)));
  EXPECT_EQ(l.group_used(7), 10u);
  // A group need beyond the overall need still comes from the group.
  EXPECT_EQ(EvictOrder(&l, 0, 7, 10), (std::vector<int>{2}));
  EXPECT_EQ(l.group_used(7), 0u);
  EXPECT_EQ(l.group_used(9), 10u);
  // Pinned group members don't go.
  l.Add(Key(5), M(10, 9, List::kNoExpiry, false, /*pinned=*/true), 5);
  EXPECT_FALSE(l.CanFree(0, 9, 20));
  EXPECT_TRUE(l.CanFree(0, 9, 10));
}

TEST(EvictionListTest, ExpiredBlocksOfOtherGroupsDoNotCountForAGroupNeed) {
  List l;
  l.Add(Key(1), M(10, 0, 100), 1);  // expired, no group
  l.Add(Key(2), M(10, 7), 2);
  l.Add(Key(3), M(10, 7, 100), 3);  // expired, group 7
  EXPECT_EQ(EvictOrder(&l, 0, 7, 10, /*now=*/1000), (std::vector<int>{3}));
  EXPECT_TRUE(l.Contains(Key(1)));
}

TEST(EvictionListTest, RemoveKeepsEveryAccountStraight) {
  List l;
  l.Add(Key(1), M(10, 7, 100, false, true), 1);
  l.Add(Key(2), M(5, 7), 2);
  auto n = l.Remove(Key(1));
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->payload, 1);
  EXPECT_FALSE(l.Remove(Key(1)).has_value());
  EXPECT_EQ(l.used(), 5u);
  EXPECT_EQ(l.pinned(), 0u);
  EXPECT_EQ(l.group_used(7), 5u);
  // The removed block's expiry entry is gone: nothing expired is left to evict first.
  EXPECT_EQ(EvictOrder(&l, 5, 0, 0, 1000), (std::vector<int>{2}));
  EXPECT_EQ(l.size(), 0u);
}

}  // namespace
}  // namespace tierfs
