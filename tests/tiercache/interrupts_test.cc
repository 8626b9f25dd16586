// Interrupts and isolation of TieredCache: the fetch pool, cancellable and bounded
// waits. The origin is a FakeBlobStore whose reads block at a gate until released (a stalled
// origin), so every wait here is on a real blocked fetch, never on a sleep.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/cancel.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/single_flight.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using testing::FakeBlobStore;
using testing::ParseStats;
using testing::Pattern;

constexpr uint64_t kBs = 4096;
// How long "promptly" may take on a loaded 2-core CI machine; the blocked fetch never ends by
// itself, so a wait that does not observe its token fails this bound.
constexpr auto kPrompt = std::chrono::seconds(10);

class InterruptsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.block_size = kBs;
    options_.prefetch_threads = 0;  // only demand reads touch the origin
    options_.fetch_threads = 2;
  }
  void TearDown() override { origin_.ReleaseReads(); }  // never leave a fetch thread blocked

  // The cache lives in the fixture: destroyed after TearDown() opened the gate (its destructor
  // joins the fetch threads).
  TieredCache* OpenCache() {
    std::vector<std::unique_ptr<Tier>> tiers;
    MemoryTierOptions m;
    m.capacity_bytes = 1 << 20;
    m.shards = 2;
    tiers.push_back(NewMemoryTier(m));
    auto c = TieredCache::Open(options_, std::move(tiers), &origin_, &clock_);
    EXPECT_OK(c);
    if (c.ok()) cache_ = std::move(*c);
    return cache_.get();
  }

  ObjectRef Put(const std::string& key, const std::string& data) {
    origin_.PutObject(key, data);
    ObjectRef o;
    o.key = key;
    o.info = *origin_.Head(key);
    return o;
  }

  // Reads [0, size) of `o` with `token`, as text, or the error.
  static Result<std::string> ReadText(TieredCache* c, const ObjectRef& o,
                                      const CancelToken* token) {
    TIERFS_ASSIGN_OR_RETURN(auto slices, c->Read(o, 0, o.info.size, token));
    std::string s;
    for (const auto& sl : slices) {
      s.append(reinterpret_cast<const char*>(sl.block->data().data()) + sl.offset, sl.length);
    }
    return s;
  }

  FakeBlobStore origin_{"fake://bucket"};
  FakeClock clock_;
  TieredCacheOptions options_;
  std::unique_ptr<TieredCache> cache_;
};

// (a) Every fetch thread is blocked on the origin and more readers wait behind them: a read of
// a cached block still returns at once, and HostHolds tells the two apart.
TEST_F(InterruptsTest, CachedReadReturnsWhileEveryFetchThreadIsBlocked) {
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  const std::string warm = Pattern(2 * kBs, 1);
  ObjectRef cached = Put("cached", warm);
  ASSERT_EQ(*ReadText(c, cached, nullptr), warm);

  std::vector<ObjectRef> cold;
  for (int i = 0; i < 4; ++i) cold.push_back(Put("cold" + std::to_string(i), Pattern(kBs, 10 + i)));
  origin_.HoldReads();
  std::vector<std::unique_ptr<CancelToken>> tokens;
  std::vector<std::future<Result<std::string>>> readers;
  for (const ObjectRef& o : cold) {
    tokens.push_back(std::make_unique<CancelToken>());
    const CancelToken* t = tokens.back().get();
    readers.push_back(std::async(std::launch::async, [c, o, t] { return ReadText(c, o, t); }));
  }
  origin_.WaitForBlockedReads(options_.fetch_threads);  // both fetch threads stuck

  CancelToken mine;
  auto warm_read = std::async(std::launch::async, [&] { return ReadText(c, cached, &mine); });
  ASSERT_EQ(warm_read.wait_for(kPrompt), std::future_status::ready);
  auto got = warm_read.get();
  ASSERT_OK(got);
  EXPECT_EQ(*got, warm);
  EXPECT_TRUE(c->HostHolds(cached, 0, cached.info.size));
  EXPECT_FALSE(c->HostHolds(cold[0], 0, kBs));

  // The cold readers are still waiting (the gate is closed) and end when interrupted.
  for (auto& r : readers)
    EXPECT_EQ(r.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  for (auto& t : tokens) t->Cancel();
  for (auto& r : readers) {
    ASSERT_EQ(r.wait_for(kPrompt), std::future_status::ready);
    EXPECT_EQ(r.get().status().code(), Status::Code::kCancelled);
  }
  EXPECT_EQ(ParseStats(c->StatsText())["waits.cancelled"], 4u);
}

// (b) A cancelled waiter returns Cancelled while the fetch it waits for is blocked; the fetch
// goes on for the reader still waiting and fills the cache.
TEST_F(InterruptsTest, CancelledWaiterReturnsPromptlyAndTheFetchGoesOn) {
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  const std::string data = Pattern(kBs, 3);
  ObjectRef o = Put("obj", data);
  origin_.ResetCounters();
  origin_.HoldReads();
  CancelToken stays, leaves;
  auto first = std::async(std::launch::async, [&] { return ReadText(c, o, &stays); });
  origin_.WaitForBlockedReads(1);
  auto second = std::async(std::launch::async, [&] { return ReadText(c, o, &leaves); });
  leaves.Cancel();
  ASSERT_EQ(second.wait_for(kPrompt), std::future_status::ready);
  EXPECT_EQ(second.get().status().code(), Status::Code::kCancelled);
  EXPECT_EQ(first.wait_for(std::chrono::seconds(0)), std::future_status::timeout);

  origin_.ReleaseReads();
  ASSERT_EQ(first.wait_for(kPrompt), std::future_status::ready);
  auto r = first.get();
  ASSERT_OK(r);
  EXPECT_EQ(*r, data);
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_TRUE(c->HostHolds(o, 0, kBs));
  EXPECT_EQ(*ReadText(c, o, nullptr), data);  // from L1
  EXPECT_EQ(origin_.read_calls(), 1u);
}

// A fetch still queued when its only reader gave up is dropped, not run.
TEST_F(InterruptsTest, QueuedFetchWithoutReadersIsAbandoned) {
  options_.fetch_threads = 1;
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  ObjectRef a = Put("a", Pattern(kBs, 4));
  ObjectRef b = Put("b", Pattern(kBs, 5));
  origin_.ResetCounters();
  origin_.HoldReads();
  CancelToken ta, tb;
  auto ra = std::async(std::launch::async, [&] { return ReadText(c, a, &ta); });
  origin_.WaitForBlockedReads(1);  // the only fetch thread is busy with "a"
  auto rb = std::async(std::launch::async, [&] { return ReadText(c, b, &tb); });
  tb.Cancel();
  ASSERT_EQ(rb.wait_for(kPrompt), std::future_status::ready);
  EXPECT_EQ(rb.get().status().code(), Status::Code::kCancelled);
  origin_.ReleaseReads();
  ASSERT_EQ(ra.wait_for(kPrompt), std::future_status::ready);
  EXPECT_OK(ra.get());
  // The fetch thread takes b's job next and drops it; give it a bounded time to get there.
  testing::Eventually([&] { return ParseStats(c->StatsText())["fetch.abandoned"] > 0; },
                      std::chrono::duration_cast<std::chrono::milliseconds>(kPrompt),
                      std::chrono::milliseconds(1));
  EXPECT_EQ(ParseStats(c->StatsText())["fetch.abandoned"], 1u);
  EXPECT_EQ(origin_.read_calls(), 1u);  // b was never fetched
  EXPECT_FALSE(c->HostHolds(b, 0, kBs));
}

// (c) A stalled origin: a reader gives up after wait_timeout (TimedOut → EIO), or at its
// token's deadline, whichever is first; a reader without a token that waits on another's
// fetch is bounded by wait_timeout too.
TEST_F(InterruptsTest, BlockedOriginEndsInTimedOutWithinTheDeadline) {
  options_.wait_timeout = std::chrono::milliseconds(200);
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  ObjectRef o = Put("slow", Pattern(kBs, 6));
  origin_.HoldReads();
  const auto start = std::chrono::steady_clock::now();
  CancelToken token;
  auto r = ReadText(c, o, &token);
  EXPECT_EQ(r.status().code(), Status::Code::kTimedOut) << r.status().ToString();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(200));
  EXPECT_LT(took, kPrompt);

  // No token: the leader fetches on its own thread (blocked at the gate); a follower gives up.
  ObjectRef p = Put("slow2", Pattern(kBs, 7));
  auto leader = std::async(std::launch::async, [&] { return ReadText(c, p, nullptr); });
  origin_.WaitForBlockedReads(2);  // "slow" still holds one fetch thread, the leader the other
  auto follower = ReadText(c, p, nullptr);
  EXPECT_EQ(follower.status().code(), Status::Code::kTimedOut) << follower.status().ToString();
  origin_.ReleaseReads();
  ASSERT_EQ(leader.wait_for(kPrompt), std::future_status::ready);
  EXPECT_OK(leader.get());
  EXPECT_GE(ParseStats(c->StatsText())["waits.timed_out"], 2u);
}

TEST_F(InterruptsTest, TokenDeadlineEndsTheWait) {
  auto c = OpenCache();  // wait_timeout: the 5 minute default
  ASSERT_NE(c, nullptr);
  ObjectRef o = Put("slow", Pattern(kBs, 8));
  origin_.HoldReads();
  CancelToken token(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  auto r = ReadText(c, o, &token);
  EXPECT_EQ(r.status().code(), Status::Code::kTimedOut) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, kPrompt);
}

TEST_F(InterruptsTest, FullFetchQueueFailsAtOnce) {
  options_.fetch_threads = 1;
  options_.fetch_queue_limit = 1;
  auto c = OpenCache();
  ASSERT_NE(c, nullptr);
  ObjectRef a = Put("a", Pattern(kBs, 1));
  ObjectRef b = Put("b", Pattern(kBs, 2));
  ObjectRef d = Put("d", Pattern(kBs, 3));
  origin_.HoldReads();
  CancelToken ta;
  auto ra = std::async(std::launch::async, [&] { return ReadText(c, a, &ta); });
  origin_.WaitForBlockedReads(1);  // the only fetch thread is busy with "a"
  // b's reader gives up at its deadline; its job stays queued (the thread is busy): the queue is
  // full, and d is refused at once.
  CancelToken tb(std::chrono::milliseconds(50));
  EXPECT_EQ(ReadText(c, b, &tb).status().code(), Status::Code::kTimedOut);
  CancelToken td;
  auto rd = ReadText(c, d, &td);
  EXPECT_EQ(rd.status().code(), Status::Code::kUnavailable) << rd.status().ToString();
  ta.Cancel();
  EXPECT_EQ(ra.get().status().code(), Status::Code::kCancelled);
}

TEST(SingleFlightCancelTest, CancelledFollowerLeavesAndTheLeaderPublishes) {
  SingleFlight<int, Result<int>> sf;
  auto j = sf.Join(1, Status::Internal("dropped"));
  ASSERT_TRUE(j.lease.has_value());
  CancelToken t;
  auto follower = std::async(std::launch::async, [&] {
    auto f = sf.Join(1, Status::Internal("dropped"));
    EXPECT_FALSE(f.lease.has_value());
    return SingleFlight<int, Result<int>>::Wait(f.call, &t, CancelToken::TimePoint::max());
  });
  t.Cancel();
  ASSERT_EQ(follower.wait_for(kPrompt), std::future_status::ready);
  EXPECT_EQ(follower.get().status().code(), Status::Code::kCancelled);
  // The leader itself still waits (counted): not abandoned.
  EXPECT_FALSE(sf.AbandonIfUnwaited(*j.lease, Status::Cancelled("x")));
  j.lease->Complete(5);
  auto mine = SingleFlight<int, Result<int>>::Wait(j.call, nullptr, CancelToken::TimePoint::max());
  ASSERT_OK(mine);
  EXPECT_EQ(*mine, 5);
  EXPECT_FALSE(sf.InFlight(1));
}

TEST(SingleFlightCancelTest, UnwaitedLeaseIsAbandonedAndReleasesTheKey) {
  SingleFlight<int, Result<int>> sf;
  auto lease = sf.TryClaim(1, Status::Internal("dropped"));
  ASSERT_TRUE(lease.has_value());
  EXPECT_TRUE(sf.AbandonIfUnwaited(*lease, Status::Cancelled("nobody waits")));
  EXPECT_FALSE(sf.InFlight(1));
  EXPECT_EQ(*sf.Do(1, []() -> Result<int> { return 3; }), 3);
}

}  // namespace
}  // namespace tierfs
