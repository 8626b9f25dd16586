// Speed features of the S3 store over loopback HTTP: hedged GETs, the AIMD concurrency limit and
// parallel ranged reads; plus the LatencyTracker and AimdLimiter on their own.
//
// These run on loaded 2-core CI machines and under sanitizers: they assert on counters and bytes,
// and the few timing assertions have margins of seconds.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "base/mutex.h"
#include "blobclient/adaptive.h"
#include "blobclient/blob_store.h"
#include "tests/blobclient/test_util.h"
#include "tests/fakes/http_server_test.h"
#include "tests/fakes/http_test_server.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using ::tierfs::testing::AsString;
using ::tierfs::testing::HttpTestRequest;
using ::tierfs::testing::HttpTestResponse;
using ::tierfs::testing::HttpTestServer;
using ::tierfs::testing::Pattern;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(LatencyTrackerTest, NoOpinionUntilEnoughSamples) {
  blobclient::LatencyTracker t;
  for (int i = 0; i < blobclient::LatencyTracker::kMinSamples - 1; ++i) {
    t.Record(milliseconds(2), milliseconds(3), 4096);
    EXPECT_FALSE(t.ExpectedP95(4096).has_value());
  }
  t.Record(milliseconds(2), milliseconds(3), 4096);
  ASSERT_TRUE(t.ExpectedP95(4096).has_value());
  EXPECT_EQ(t.TtfbP95(), milliseconds(2));
}

TEST(LatencyTrackerTest, P95FollowsTheTailAndScalesWithSize) {
  blobclient::LatencyTracker t;
  // 90 fast answers, 10 slow ones: the p95 is the slow ones' TTFB.
  for (int i = 0; i < 100; ++i) {
    milliseconds ttfb = i % 10 == 0 ? milliseconds(50) : milliseconds(1);
    // 1 MiB bodies taking 8 ms after the first byte: 8 ms/MiB.
    t.Record(ttfb, ttfb + milliseconds(8), 1 << 20);
  }
  EXPECT_EQ(t.TtfbP95(), milliseconds(50));
  auto one = t.ExpectedP95(1 << 20);
  auto big = t.ExpectedP95(5 << 20);
  ASSERT_TRUE(one && big);
  using Ms = std::chrono::duration<double, std::milli>;
  EXPECT_NEAR(Ms(*one).count(), 58.0, 0.5);
  const double extra_ms = Ms(*big - *one).count();
  EXPECT_NEAR(extra_ms, 32.0, 0.5);
  EXPECT_FALSE(t.ExpectedP95(4096).has_value());  // no small GET seen yet: no opinion on one
  // Old samples age out of the window.
  for (int i = 0; i < blobclient::LatencyTracker::kWindow; ++i) {
    t.Record(milliseconds(1), milliseconds(2), 1 << 20);
  }
  EXPECT_EQ(t.TtfbP95(), milliseconds(1));
}

TEST(LatencyTrackerTest, ManySmallGetsDoNotMakeLargeOnesLate) {
  blobclient::LatencyTracker t;
  // Readahead runs answer after 40 ms; projected reads of 64 KiB after 1 ms, many more of them.
  for (int i = 0; i < 30; ++i) t.Record(milliseconds(40), milliseconds(80), 8 << 20);
  for (int i = 0; i < 120; ++i) t.Record(milliseconds(1), milliseconds(2), 64 << 10);
  auto large = t.ExpectedP95(8 << 20);
  auto small = t.ExpectedP95(64 << 10);
  ASSERT_TRUE(large && small);
  EXPECT_GE(*large, milliseconds(79));  // 40 ms to the first byte + 40 ms of body
  EXPECT_LT(*small, milliseconds(5));
  EXPECT_EQ(t.TtfbP95(), milliseconds(40));
}

TEST(HedgeBudgetTest, AHedgeCostsTwentyGetsAtFivePercentAndSavingsAreCapped) {
  using blobclient::HedgeBudget;
  HedgeBudget b(5);
  EXPECT_FALSE(b.TrySpend());  // a new store has nothing saved
  for (int i = 0; i < 19; ++i) b.OnGet();
  EXPECT_FALSE(b.TrySpend());
  b.OnGet();
  EXPECT_TRUE(b.TrySpend());
  EXPECT_FALSE(b.TrySpend());
  // A long quiet stretch saves at most kBurst hedges: a slow spell after it hedges at most that
  // many at once, then one per 20 GETs.
  for (int i = 0; i < 100000; ++i) b.OnGet();
  int spent = 0;
  while (b.TrySpend()) ++spent;
  EXPECT_EQ(spent, HedgeBudget::kBurst);
  HedgeBudget none(0);
  for (int i = 0; i < 1000; ++i) none.OnGet();
  EXPECT_FALSE(none.TrySpend());
  HedgeBudget all(100);
  all.OnGet();
  EXPECT_TRUE(all.TrySpend());
}

// GETs needed to earn the next hedge.
int GetsPerHedge(blobclient::HedgeBudget* b) {
  for (int i = 1; i <= 100000; ++i) {
    b->OnGet();
    if (b->TrySpend()) return i;
  }
  return -1;
}

TEST(HedgeBudgetTest, HedgesThatKeepLosingAreSentLessOftenUntilOneWins) {
  using blobclient::HedgeBudget;
  HedgeBudget b(5);
  EXPECT_EQ(GetsPerHedge(&b), 20);
  for (uint32_t i = 0; i < HedgeBudget::kLossesPerHalving - 1; ++i) b.OnHedgeSettled(false);
  EXPECT_EQ(b.halvings(), 0u);
  EXPECT_EQ(GetsPerHedge(&b), 20);
  b.OnHedgeSettled(false);  // the 8th loss in a row
  EXPECT_EQ(b.halvings(), 1u);
  EXPECT_EQ(GetsPerHedge(&b), 40);
  for (int i = 0; i < 1000; ++i) b.OnHedgeSettled(false);
  EXPECT_EQ(b.halvings(), HedgeBudget::kMaxHalvings);
  // 5% / 16: one hedge per 320 GETs (0.3%), never none: a stuck GET is still hedged.
  const int slow = GetsPerHedge(&b);
  EXPECT_GE(slow, 320);
  EXPECT_LE(slow, 323);
  b.OnHedgeSettled(true);  // a win: the full rate again
  EXPECT_EQ(b.halvings(), 0u);
  EXPECT_EQ(GetsPerHedge(&b), 20);
  // A loss after a win starts a new streak.
  b.OnHedgeSettled(false);
  EXPECT_EQ(b.halvings(), 0u);
}

TEST(AimdLimiterTest, HalvesOncePerWindowAndGrowsWhenUsed) {
  blobclient::AimdLimiter l(16, 64);
  EXPECT_EQ(l.limit(), 16);
  auto t0 = SteadyClock::now();
  l.OnCongestion(t0, milliseconds(100));
  EXPECT_EQ(l.limit(), 8);
  l.OnCongestion(t0 + milliseconds(10), milliseconds(100));  // same window: ignored
  EXPECT_EQ(l.limit(), 8);
  l.OnCongestion(t0 + milliseconds(200), milliseconds(100));
  EXPECT_EQ(l.limit(), 4);
  for (int i = 0; i < 10; ++i) l.OnCongestion(t0 + milliseconds(300 * (i + 1)), milliseconds(1));
  EXPECT_EQ(l.limit(), 1);  // never below 1
  EXPECT_EQ(l.decreases(), 4u);
  // Successes with the limit unused do not grow it.
  for (int i = 0; i < 100; ++i) l.OnSuccess();
  EXPECT_EQ(l.limit(), 1);
  // Used: +1 per `limit` successes.
  ASSERT_TRUE(l.TryAcquire());
  l.OnSuccess();
  EXPECT_EQ(l.limit(), 2);
  l.OnSuccess();
  l.OnSuccess();
  EXPECT_EQ(l.limit(), 3);
  for (int i = 0; i < 10; ++i) l.OnSuccess();
  EXPECT_EQ(l.limit(), 3);  // 1 in flight of 3: no longer the constraint, no growth
  l.Release();
}

// Until the first congestion signal the limit grows by one per success while it is used (it
// doubles per round trip); after it, by one per `limit` successes.
TEST(AimdLimiterTest, SlowStartUntilTheFirstCongestionSignal) {
  blobclient::AimdLimiter l(4, 64);
  for (int i = 0; i < 10; ++i) l.OnSuccess();
  EXPECT_EQ(l.limit(), 4);  // unused: no growth, in slow start too
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(l.TryAcquire());
  for (int i = 0; i < 4; ++i) l.OnSuccess();  // 2 in flight of 4..8: half of it in use
  EXPECT_EQ(l.limit(), 5);                    // 2 of 5 is under half: growth stops
  int held = 2;
  std::vector<int> limits;
  for (int round = 0; round < 5; ++round) {  // fill the limit, then its round trip's successes
    while (l.TryAcquire()) ++held;
    for (int i = 0; i < 100; ++i) l.OnSuccess();
    limits.push_back(l.limit());
  }
  EXPECT_EQ(limits, (std::vector<int>{11, 23, 47, 64, 64}));  // about doubles per round trip
  EXPECT_EQ(held, 64);
  EXPECT_EQ(l.limit(), 64);  // never past max
  l.OnCongestion(SteadyClock::now(), milliseconds(100));
  EXPECT_EQ(l.limit(), 32);
  for (int i = 0; i < 31; ++i) l.OnSuccess();
  EXPECT_EQ(l.limit(), 32);  // congestion avoidance: +1 per 32 successes
  l.OnSuccess();
  EXPECT_EQ(l.limit(), 33);
  for (int i = 0; i < held; ++i) l.Release();
}

TEST(AimdLimiterTest, WaitersAreBoundedByTheirDeadlineAndWokenByRelease) {
  blobclient::AimdLimiter l(1, 4);
  ASSERT_TRUE(l.TryAcquire());
  EXPECT_FALSE(l.TryAcquire());
  EXPECT_FALSE(l.Acquire(SteadyClock::now() + milliseconds(20)));
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(20));  // lets the main thread block in Acquire
    l.Release();
  });
  EXPECT_TRUE(l.Acquire(SteadyClock::now() + std::chrono::seconds(30)));
  releaser.join();
  EXPECT_EQ(l.in_flight(), 1);
  l.Release();
}

class S3AdaptiveTest : public ::tierfs::testing::HttpServerTest {
 protected:
  S3Options Options() {
    S3Options o;
    o.bucket = "bkt";
    o.endpoint = server_->base_url();
    o.credentials.anonymous = true;
    o.backoff_base = milliseconds(5);
    o.backoff_max = milliseconds(40);
    o.request_timeout = milliseconds(20000);
    return o;
  }

  std::unique_ptr<BlobStore> Open(const S3Options& o) {
    auto s = NewS3BlobStore(o, transport_.get(), &clock_);
    EXPECT_OK(s);
    return s.ok() ? std::move(*s) : nullptr;
  }

  // Reads 256 KiB of "slow" at 4096 and checks the bytes against `data`; returns how long it took.
  SteadyClock::duration ReadSlow(BlobStore* store, const std::string& data) {
    std::vector<std::byte> buf(256 * 1024);
    auto start = SteadyClock::now();
    auto n = store->Read("slow", 4096, buf, "e1");
    auto took = SteadyClock::now() - start;
    EXPECT_OK(n);
    EXPECT_EQ(n.ok() ? *n : 0, buf.size());
    EXPECT_TRUE(AsString(buf) == data.substr(4096, buf.size()));
    return took;
  }

  // A store that may hedge every GET late by `min_delay` or more (no budget), warmed up.
  std::unique_ptr<BlobStore> OpenHedgingEvery(milliseconds min_delay) {
    S3Options o = Options();
    o.hedge_min_delay = min_delay;
    o.hedge_percent = 100;
    auto store = Open(o);
    if (store) WarmUp(store.get(), "warm");
    return store;
  }

  // Enough fast GETs for the store's latency tracker to form an opinion.
  void WarmUp(BlobStore* store, const std::string& key, size_t n = 40) {
    std::vector<std::byte> buf(4096);
    for (size_t i = 0; i < n; ++i) ASSERT_OK(store->Read(key, 0, buf, ""));
  }

  // Serves `data` (ETag e1) for every key, except that the first GET of "slow" starts answering
  // with wrong bytes ('X') and stalls after `stall_after` of them: if any of them reached the
  // caller's buffer, a comparison with `data` would fail. Counts the GETs of "slow".
  HttpTestServer::ScopedHandler ServeSlowFirst(const std::string& data, std::atomic<int>* slow_gets,
                                               size_t stall_after) {
    return server_->Scoped([&data, slow_gets, stall_after](const HttpTestRequest& req) {
      if (req.path == "/bkt/slow" && (*slow_gets)++ == 0) {
        HttpTestResponse r = HttpTestServer::ServeObject(req, data, "e1");
        std::fill(r.body.begin(), r.body.end(), 'X');
        r.stall_after_bytes = stall_after;
        r.stall_for = std::chrono::seconds(20);
        return r;
      }
      return HttpTestServer::ServeObject(req, data, "e1");
    });
  }

  FakeClock clock_;
};

TEST_F(S3AdaptiveTest, SlowFirstAnswerIsHedgedAndTheHedgeWinsWithExactBytes) {
  const std::string data = Pattern(1 << 20);
  std::atomic<int> slow_gets{0};
  auto handler = ServeSlowFirst(data, &slow_gets, 1000);
  S3Options o = Options();
  o.hedge_min_delay = milliseconds(100);
  auto store = Open(o);
  WarmUp(store.get(), "warm");
  const BlobStoreStats before = store->Stats();
  EXPECT_GT(before.ttfb_p95_us, 0u);

  // The stalled original would take 20 s.
  EXPECT_LT(ReadSlow(store.get(), data), std::chrono::seconds(10));
  std::vector<std::byte> buf(256 * 1024);

  const BlobStoreStats after = store->Stats();
  EXPECT_EQ(after.hedges_issued - before.hedges_issued, 1u);
  EXPECT_EQ(after.hedges_won - before.hedges_won, 1u);
  EXPECT_EQ(after.bytes_read - before.bytes_read, buf.size());
  EXPECT_EQ(slow_gets.load(), 2);
  // Both carried the range and If-Match.
  int seen = 0;
  for (const auto& r : server_->requests()) {
    if (r.path != "/bkt/slow") continue;
    ++seen;
    EXPECT_EQ(*r.Header("range"), "bytes=4096-" + std::to_string(4096 + buf.size() - 1));
    EXPECT_EQ(*r.Header("if-match"), "\"e1\"");
  }
  EXPECT_EQ(seen, 2);

  // The store keeps working normally afterwards (the loser's connection was dropped cleanly).
  auto again = store->Read("slow", 0, buf, "e1");
  ASSERT_OK(again);
  EXPECT_TRUE(AsString(buf) == data.substr(0, buf.size()));
}

// Unhedged reads (a cache filling gaps nobody waits on, its projected reads) are never hedged:
// the late GET is waited for, and no duplicate is sent; the same GET outside the scope is hedged.
TEST_F(S3AdaptiveTest, UnhedgedReadsAreNotHedged) {
  const std::string data = Pattern(1 << 20);
  std::atomic<int> slow_gets{0};
  auto handler = server_->Scoped([&](const HttpTestRequest& req) {
    HttpTestResponse r = HttpTestServer::ServeObject(req, data, "e1");
    if (req.path == "/bkt/slow" && slow_gets++ == 0) {
      r.stall_after_bytes = 1000;  // a stuck GET: nothing more for 1 s
      r.stall_for = std::chrono::seconds(1);
    }
    return r;
  });
  auto store = OpenHedgingEvery(milliseconds(100));
  ASSERT_NE(store, nullptr);
  const BlobStoreStats before = store->Stats();
  {
    const UnhedgedReads unhedged;
    EXPECT_TRUE(UnhedgedReads::Active());
    EXPECT_GE(ReadSlow(store.get(), data), milliseconds(900));
  }
  EXPECT_FALSE(UnhedgedReads::Active());
  EXPECT_EQ(store->Stats().hedges_issued - before.hedges_issued, 0u);
  EXPECT_EQ(slow_gets.load(), 1);
}

// A GET far later than the store's p95 whose body keeps arriving (a busy link shared by parallel
// streams) is not hedged: a duplicate would share the same bandwidth and only add load. Its
// bytes come in 16 KiB pieces every 30 ms (about 480 ms for 256 KiB) against a p95 of a few ms
// and hedge_min_delay of 200 ms; the pauses stay well under the quiet time that counts as stuck.
TEST_F(S3AdaptiveTest, AGetWhoseBodyKeepsArrivingIsNotHedged) {
  const std::string data = Pattern(1 << 20);
  std::atomic<int> slow_gets{0};
  auto handler = server_->Scoped([&](const HttpTestRequest& req) {
    HttpTestResponse r = HttpTestServer::ServeObject(req, data, "e1");
    if (req.path == "/bkt/slow") {
      ++slow_gets;
      r.trickle_bytes = 16 * 1024;
      r.trickle_every = milliseconds(30);
    }
    return r;
  });
  auto store = OpenHedgingEvery(milliseconds(200));
  ASSERT_NE(store, nullptr);
  const BlobStoreStats before = store->Stats();

  // The case happened: the GET ran far past the point a stuck one is hedged.
  EXPECT_GT(ReadSlow(store.get(), data), milliseconds(300));
  const BlobStoreStats after = store->Stats();
  EXPECT_EQ(after.hedges_issued - before.hedges_issued, 0u);
  EXPECT_EQ(slow_gets.load(), 1);
}

TEST_F(S3AdaptiveTest, NoHedgeWhenRequestsAreFast) {
  const std::string data = Pattern(64 * 1024);
  auto handler = server_->Scoped(
      [&](const HttpTestRequest& req) { return HttpTestServer::ServeObject(req, data, "e"); });
  S3Options o = Options();
  o.hedge_min_delay = milliseconds(500);  // far above any loopback answer, even under TSan
  auto store = Open(o);
  std::vector<std::byte> buf(16 * 1024);
  for (int i = 0; i < 100; ++i) {
    auto n = store->Read("k", static_cast<uint64_t>(i) * 100, buf, "e");
    ASSERT_OK(n);
  }
  const BlobStoreStats st = store->Stats();
  EXPECT_EQ(st.hedges_issued, 0u);
  EXPECT_EQ(st.hedges_won, 0u);
  EXPECT_EQ(st.requests, 100u);
  EXPECT_EQ(server_->request_count(), 100u);
  EXPECT_GT(st.ttfb_p95_us, 0u);
}

TEST_F(S3AdaptiveTest, HedgingOffOrColdStoreSendsNoDuplicate) {
  const std::string data = Pattern(8192);
  std::atomic<int> gets{0};
  auto handler = server_->Scoped([&](const HttpTestRequest& req) {
    HttpTestResponse r = HttpTestServer::ServeObject(req, data, "e");
    if (gets++ == 40) {  // one slow answer after the warm-up
      r.stall_after_bytes = 10;
      r.stall_for = milliseconds(600);
    }
    return r;
  });
  S3Options o = Options();
  o.hedge = false;
  o.hedge_min_delay = milliseconds(1);
  auto store = Open(o);
  WarmUp(store.get(), "k");
  std::vector<std::byte> buf(4096);
  ASSERT_OK(store->Read("k", 0, buf, ""));
  EXPECT_EQ(store->Stats().hedges_issued, 0u);
  EXPECT_EQ(server_->request_count(), 41u);
}

TEST_F(S3AdaptiveTest, SlowDownCutsTheLimitAndSuccessGrowsItBack) {
  const std::string data = Pattern(4096);
  std::atomic<bool> throttle{true};
  auto handler = server_->Scoped([&](const HttpTestRequest& req) {
    if (throttle.load()) {
      return HttpTestResponse::Make(503, "<Error><Code>SlowDown</Code></Error>");
    }
    return HttpTestServer::ServeObject(req, data, "e");
  });
  S3Options o = Options();
  o.max_attempts = 1;
  o.hedge = false;
  auto store = Open(o);
  EXPECT_EQ(store->Stats().concurrency_limit, 64u);  // the default start: max_connections

  // ~1 s of throttled answers: the limit is cut at most once per 50 ms window.
  std::vector<std::byte> buf(1024);
  auto until = SteadyClock::now() + std::chrono::seconds(1);
  int throttled = 0;
  while (SteadyClock::now() < until) {
    auto n = store->Read("k", 0, buf, "");
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), Status::Code::kUnavailable) << n.status().ToString();
    ++throttled;
    std::this_thread::sleep_for(milliseconds(20));  // reads paced over the second
  }
  BlobStoreStats st = store->Stats();
  EXPECT_GE(st.concurrency_decreases, 2u) << throttled << " throttled reads";
  EXPECT_LE(st.concurrency_limit, 4u);
  EXPECT_GE(st.concurrency_limit, 1u);
  const uint64_t low = st.concurrency_limit;

  // Recovery: concurrent successes grow the limit again (+1 per `limit` successes).
  throttle = false;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      std::vector<std::byte> b(1024);
      for (int i = 0; i < 60; ++i) {
        if (!store->Read("k", 0, b, "").ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  st = store->Stats();
  EXPECT_GT(st.concurrency_limit, low);
  EXPECT_LE(st.concurrency_limit, 64u);
}

TEST_F(S3AdaptiveTest, LimitBoundsRequestsInFlightAndThrottledRequestsStillComplete) {
  // Every third request is throttled; the rest take a little while. Retries make every read
  // succeed, and the server never sees more requests at once than max_connections.
  const std::string data = Pattern(4096);
  std::atomic<int> in_flight{0}, peak{0}, calls{0};
  auto handler = server_->Scoped([&](const HttpTestRequest& req) {
    int now = ++in_flight;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(milliseconds(5));  // a slow answer: they overlap
    --in_flight;
    if (calls++ % 3 == 0)
      return HttpTestResponse::Make(503, "<Error><Code>SlowDown</Code></Error>");
    return HttpTestServer::ServeObject(req, data, "e");
  });
  S3Options o = Options();
  o.max_connections = 4;
  o.max_attempts = 10;
  auto store = Open(o);
  EXPECT_EQ(store->Stats().concurrency_limit, 4u);  // initial 64, clamped to the maximum
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      std::vector<std::byte> b(4096);
      for (int i = 0; i < 10; ++i) {
        auto n = store->Read("k", 0, b, "e");
        if (!n.ok() || *n != b.size() || AsString(b) != data) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(peak.load(), 4);
  EXPECT_GE(store->Stats().concurrency_decreases, 1u);
}

TEST_F(S3AdaptiveTest, LargeReadIsSplitIntoParallelRangedGets) {
  const std::string data = Pattern(40 << 20);
  std::atomic<int> in_flight{0}, peak{0};
  auto handler = server_->Scoped([&](const HttpTestRequest& req) {
    int now = ++in_flight;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    // Hold each part briefly so that parts overlap even on a slow machine.
    std::this_thread::sleep_for(milliseconds(100));
    --in_flight;
    return HttpTestServer::ServeObject(req, data, "big-etag");
  });
  S3Options o = Options();
  o.hedge = false;  // count exactly the parts
  auto store = Open(o);
  std::vector<std::byte> buf(data.size() + 12345);  // asks past the end: a short read
  auto n = store->Read("big", 0, buf, "big-etag");
  ASSERT_OK(n);
  ASSERT_EQ(*n, data.size());
  EXPECT_TRUE(AsString(std::span<const std::byte>(buf.data(), *n)) == data);

  auto reqs = server_->requests();
  ASSERT_EQ(reqs.size(), 6u);  // 5 parts of 8 MiB + one past the end (416)
  std::set<std::string> ranges;
  std::set<uint64_t> conns;
  for (const auto& r : reqs) {
    ranges.insert(*r.Header("range"));
    conns.insert(r.connection_id);
    EXPECT_EQ(*r.Header("if-match"), "\"big-etag\"");
  }
  EXPECT_EQ(ranges.count("bytes=0-8388607"), 1u);
  EXPECT_EQ(ranges.count("bytes=33554432-41943039"), 1u);
  EXPECT_GE(conns.size(), 2u);
  EXPECT_GE(peak.load(), 2);
  EXPECT_LE(peak.load(), 8);  // max_parts_in_flight
  BlobStoreStats st = store->Stats();
  EXPECT_EQ(st.parallel_reads, 1u);
  EXPECT_EQ(st.bytes_read, data.size());

  // An unaligned large read from the middle, byte-exact.
  std::vector<std::byte> mid(20 << 20);
  n = store->Read("big", 3'000'001, mid, "big-etag");
  ASSERT_OK(n);
  ASSERT_EQ(*n, mid.size());
  EXPECT_TRUE(AsString(mid) == data.substr(3'000'001, mid.size()));
}

// A read into pieces (a run of blocks not adjacent in memory): each ranged GET's body goes
// straight into its slice of the pieces, parts and pieces cut at different places, and a pinned
// read past the end stops at the pinned size.
TEST_F(S3AdaptiveTest, ScatterReadPutsEveryPartIntoItsSliceOfThePieces) {
  const std::string data = Pattern(3 << 20);
  auto handler = server_->Scoped(
      [&](const HttpTestRequest& req) { return HttpTestServer::ServeObject(req, data, "e1"); });
  S3Options o = Options();
  o.hedge = false;
  o.part_size = 1 << 20;
  auto store = Open(o);
  ObjectInfo pinned;
  pinned.size = data.size();
  pinned.etag = "e1";
  // 7 bytes, then pieces of 700 KiB: parts of 1 MiB end inside pieces, and the last piece
  // reaches 100 bytes past the end of the object.
  const size_t start = 1000;
  std::vector<std::vector<std::byte>> storage;
  size_t total = 0;
  for (size_t sz = 7; total < data.size() - start + 100; sz = 700 << 10) {
    sz = std::min(sz, data.size() - start + 100 - total);
    storage.emplace_back(sz, std::byte{0x5a});
    total += sz;
  }
  std::vector<std::span<std::byte>> pieces;
  for (auto& v : storage) pieces.emplace_back(v);
  auto n = store->ReadPinnedScatter("obj", start, ScatterBuffer(pieces), pinned);
  ASSERT_OK(n);
  ASSERT_EQ(*n, data.size() - start);
  std::string got;
  for (auto& v : storage) got += AsString(v);
  EXPECT_TRUE(got.substr(0, *n) == data.substr(start));
  EXPECT_TRUE(got.substr(*n) == std::string(100, '\x5a'));  // past the pinned end: untouched
  EXPECT_EQ(server_->requests().size(), 3u);  // the pinned range in parts of 1 MiB, no 416
  EXPECT_EQ(store->Stats().parallel_reads, 1u);

  // A changed object fails the read (the pinned ETag is sent as If-Match).
  pinned.etag = "e0";
  n = store->ReadPinnedScatter("obj", 0, ScatterBuffer(pieces), pinned);
  EXPECT_EQ(n.status().code(), Status::Code::kFailedPrecondition);
}

// A hedged scatter read: the stalled original wrote wrong bytes into the pieces before the
// duplicate won; the duplicate's bytes are what the pieces hold in the end.
TEST_F(S3AdaptiveTest, AHedgeThatWinsAScatterReadFillsEveryPiece) {
  const std::string data = Pattern(1 << 20);
  std::atomic<int> slow_gets{0};
  auto handler = ServeSlowFirst(data, &slow_gets, 3000);  // the wrong bytes span two pieces
  S3Options o = Options();
  o.hedge_min_delay = milliseconds(100);
  auto store = Open(o);
  WarmUp(store.get(), "warm");
  ObjectInfo pinned;
  pinned.size = data.size();
  pinned.etag = "e1";
  std::vector<std::byte> a(1000), b(64 << 10), c((256 << 10) - 1000 - (64 << 10));
  ScatterBuffer buf({std::span<std::byte>(a), std::span<std::byte>(b), std::span<std::byte>(c)});
  const BlobStoreStats before = store->Stats();
  auto start = SteadyClock::now();
  auto n = store->ReadPinnedScatter("slow", 4096, buf, pinned);
  EXPECT_LT(SteadyClock::now() - start, std::chrono::seconds(10));
  ASSERT_OK(n);
  EXPECT_EQ(*n, 256u << 10);
  EXPECT_EQ(store->Stats().hedges_won - before.hedges_won, 1u);
  EXPECT_TRUE(AsString(a) + AsString(b) + AsString(c) == data.substr(4096, 256 << 10));
}

TEST_F(S3AdaptiveTest, AFailingPartIsRetriedAndAPermanentFailureFailsTheRead) {
  const std::string data = Pattern(3 << 20);
  std::atomic<int> calls{0};
  std::atomic<bool> changed{false};
  auto handler = server_->Scoped([&](const HttpTestRequest& req) {
    if (changed.load()) return HttpTestServer::ServeObject(req, data, "new-etag");
    // The second part's first attempt is reset mid-body.
    HttpTestResponse r = HttpTestServer::ServeObject(req, data, "e");
    if (*req.Header("range") == "bytes=1048576-2097151" && calls++ == 0) {
      r.reset_after_bytes = 1000;
    }
    return r;
  });
  S3Options o = Options();
  o.part_size = 1 << 20;
  o.hedge = false;
  auto store = Open(o);
  std::vector<std::byte> buf(data.size());
  auto n = store->Read("obj", 0, buf, "e");
  ASSERT_OK(n);
  ASSERT_EQ(*n, data.size());
  EXPECT_TRUE(AsString(buf) == data);
  EXPECT_EQ(store->Stats().retries, 1u);
  EXPECT_EQ(server_->request_count(), 4u);

  // The object changed: every part gets 412, the read fails with FailedPrecondition, unretried.
  changed = true;
  server_->ClearRequests();
  n = store->Read("obj", 0, buf, "e");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Status::Code::kFailedPrecondition) << n.status().ToString();
  EXPECT_LE(server_->request_count(), 3u);
  EXPECT_EQ(store->Stats().retries, 1u);
}

TEST_F(S3AdaptiveTest, OptionValidation) {
  S3Options o = Options();
  o.part_size = 0;
  EXPECT_FALSE(NewS3BlobStore(o, transport_.get(), &clock_).ok());
  o = Options();
  o.max_parts_in_flight = 0;
  EXPECT_FALSE(NewS3BlobStore(o, transport_.get(), &clock_).ok());
  o = Options();
  o.initial_concurrency = 0;
  EXPECT_FALSE(NewS3BlobStore(o, transport_.get(), &clock_).ok());
  o = Options();
  o.hedge_min_delay = milliseconds(-1);
  EXPECT_FALSE(NewS3BlobStore(o, transport_.get(), &clock_).ok());
  o = Options();
  o.hedge_percent = 101;
  EXPECT_FALSE(NewS3BlobStore(o, transport_.get(), &clock_).ok());
}

}  // namespace
}  // namespace tierfs
