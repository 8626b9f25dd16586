#include "tiercache/internal/readahead_budget.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stop_token>

#include "base/memory_budget.h"

namespace tierfs {
namespace {

using tiercache_internal::ReadaheadBudget;

constexpr auto kPrompt = std::chrono::seconds(10);

TEST(ReadaheadBudgetTest, ARunWaitsForRoomInTheMemoryBudgetBesidesL1) {
  MemoryBudget memory(1000);
  ReadaheadBudget ra(10000, &memory);
  std::stop_source stop;
  // L1 holds 600 (it gives that back when the run's blocks are allocated): a run of 300 fits.
  memory.Charge(MemoryUse::kL1, 600);
  ASSERT_TRUE(ra.Acquire(300, 1, stop.get_token()));
  ra.Release(300);
  // Blocks being fetched or read hold 900: a run of 300 waits until they are freed.
  memory.Charge(MemoryUse::kBlocks, 900);
  auto run = std::async(std::launch::async, [&] { return ra.Acquire(300, 2, stop.get_token()); });
  EXPECT_EQ(run.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  memory.Release(MemoryUse::kBlocks, 500);
  ASSERT_EQ(run.wait_for(kPrompt), std::future_status::ready);  // the waiter's recheck sees room
  EXPECT_TRUE(run.get());
  ra.Release(300);
  // A run that never fits is given up when the cache stops.
  memory.Charge(MemoryUse::kBlocks, 1000);
  auto never = std::async(std::launch::async, [&] { return ra.Acquire(300, 3, stop.get_token()); });
  EXPECT_EQ(never.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  stop.request_stop();
  ra.WakeAll();
  ASSERT_EQ(never.wait_for(kPrompt), std::future_status::ready);
  EXPECT_FALSE(never.get());
}

TEST(ReadaheadBudgetTest, WithoutAMemoryBudgetOneRunAlwaysGoes) {
  ReadaheadBudget ra(100);
  std::stop_source stop;
  ASSERT_TRUE(ra.Acquire(500, 1, stop.get_token()));  // larger than the cap: nothing in flight
  ra.Release(500);
}

}  // namespace
}  // namespace tierfs
