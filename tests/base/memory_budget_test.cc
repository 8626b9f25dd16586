#include "base/memory_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace tierfs {
namespace {

constexpr auto kPrompt = std::chrono::seconds(10);

TEST(MemoryBudgetTest, ChargesReleasesAndMovesPerConsumer) {
  MemoryBudget b(1000);
  b.Charge(MemoryUse::kBlocks, 300);
  b.Charge(MemoryUse::kListings, 50);
  EXPECT_EQ(b.used(), 350u);
  b.Move(MemoryUse::kBlocks, MemoryUse::kL1, 200);
  EXPECT_EQ(b.used(MemoryUse::kL1), 200u);
  EXPECT_EQ(b.used(MemoryUse::kBlocks), 100u);
  EXPECT_EQ(b.used(), 350u);  // a move changes no sum
  b.Move(MemoryUse::kL1, MemoryUse::kBlocks, 200);
  b.Release(MemoryUse::kBlocks, 300);
  b.Release(MemoryUse::kListings, 50);
  EXPECT_EQ(b.used(), 0u);
  EXPECT_EQ(b.peak(), 350u);
  EXPECT_EQ(MemoryUseName(MemoryUse::kL1), "l1");
  EXPECT_EQ(MemoryUseName(MemoryUse::kBlocks), "blocks");
  EXPECT_EQ(MemoryUseName(MemoryUse::kListings), "listings");
}

// A stand-in for L1: holds `held` bytes charged as kL1 and gives them back when asked.
struct FakeL1 {
  explicit FakeL1(MemoryBudget* b) : budget(b) {}
  uint64_t Give(uint64_t want) {
    ++calls;
    asked += want;
    const uint64_t n = std::min(want, held);
    held -= n;
    budget->Release(MemoryUse::kL1, n);
    return n;
  }
  MemoryBudget* budget;
  uint64_t held = 0;
  int calls = 0;
  uint64_t asked = 0;
};

TEST(MemoryBudgetTest, ChargeOverTheLimitHasTheReclaimerGiveBackTheExcessFirst) {
  MemoryBudget b(1000);
  FakeL1 l1(&b);
  b.SetReclaimer([&](uint64_t n) { return l1.Give(n); });
  b.Charge(MemoryUse::kL1, 800);
  l1.held = 800;
  b.Charge(MemoryUse::kBlocks, 100);  // fits: no reclaim
  EXPECT_EQ(l1.calls, 0);
  b.Charge(MemoryUse::kBlocks, 300);  // 1200 > 1000: L1 gives back 200
  EXPECT_EQ(l1.calls, 1);
  EXPECT_EQ(l1.asked, 200u);
  EXPECT_EQ(b.used(), 1000u);
  EXPECT_EQ(b.used(MemoryUse::kL1), 600u);
  EXPECT_EQ(b.reclaimed_bytes(), 200u);
  // What the reclaimer cannot give is charged anyway (a reader's block never fails).
  b.Charge(MemoryUse::kBlocks, 700);
  EXPECT_EQ(l1.held, 0u);
  EXPECT_EQ(b.used(), 1100u);
  EXPECT_EQ(b.used(MemoryUse::kBlocks), 1100u);
}

TEST(MemoryBudgetTest, MakeRoomReclaimsButChargesNothing) {
  MemoryBudget b(1000);
  FakeL1 l1(&b);
  b.SetReclaimer([&](uint64_t n) { return l1.Give(n); });
  b.Charge(MemoryUse::kBlocks, 500);
  b.Charge(MemoryUse::kL1, 400);
  l1.held = 400;
  EXPECT_TRUE(b.MakeRoom(100));
  EXPECT_EQ(l1.calls, 0);
  EXPECT_TRUE(b.MakeRoom(300));  // L1 gives 200
  EXPECT_EQ(l1.held, 200u);
  EXPECT_EQ(b.used(), 700u);
  EXPECT_FALSE(b.MakeRoom(900));  // L1 gives all it has, still short
  EXPECT_EQ(l1.held, 0u);
  EXPECT_EQ(b.used(), 500u);
}

TEST(MemoryBudgetTest, TheReclaimerIsNotAskedAgainFromInsideItself) {
  MemoryBudget b(100);
  int calls = 0;
  b.SetReclaimer([&](uint64_t) {
    ++calls;
    b.Charge(MemoryUse::kBlocks, 1000);  // over the limit again, from inside the reclaimer
    b.Release(MemoryUse::kBlocks, 1000);
    return uint64_t{0};
  });
  b.Charge(MemoryUse::kBlocks, 200);
  EXPECT_EQ(calls, 1);
}

TEST(MemoryBudgetTest, ClearingTheReclaimerWaitsForACallInProgress) {
  MemoryBudget b(100);
  std::promise<void> entered;
  std::promise<void> go;
  std::shared_future<void> go_f = go.get_future().share();
  std::atomic<bool> returned{false};
  b.SetReclaimer([&](uint64_t) {
    entered.set_value();
    go_f.wait();
    returned = true;
    return uint64_t{0};
  });
  std::thread charger([&] { b.Charge(MemoryUse::kBlocks, 200); });
  ASSERT_EQ(entered.get_future().wait_for(kPrompt), std::future_status::ready);
  auto cleared = std::async(std::launch::async, [&] {
    b.SetReclaimer(nullptr);
    return returned.load();
  });
  // Still inside the reclaimer: clearing it must wait.
  EXPECT_EQ(cleared.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  go.set_value();
  ASSERT_EQ(cleared.wait_for(kPrompt), std::future_status::ready);
  EXPECT_TRUE(cleared.get());
  charger.join();
  b.Charge(MemoryUse::kBlocks, 1000);  // no reclaimer any more: nothing is called
  EXPECT_EQ(b.used(), 1200u);
}

TEST(MemoryBudgetTest, TheProcessBudgetIsCreatedOnce) {
  MemoryBudget* first = SetProcessMemoryBudget(uint64_t{1} << 40);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(ProcessMemoryBudget(), first);
  EXPECT_EQ(SetProcessMemoryBudget(123), first);
  EXPECT_EQ(first->limit(), uint64_t{1} << 40);
}

}  // namespace
}  // namespace tierfs
