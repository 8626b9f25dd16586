#include "base/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace tierfs::metrics {
namespace {

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue(R"(a\b"c)"
                             "\nd"),
            R"(a\\b\"c\nd)");
  EXPECT_EQ(EscapeLabelValue("plain l1"), "plain l1");
  EXPECT_EQ(EscapeHelp("a\\b\nc \"q\""), "a\\\\b\\nc \"q\"");
}

TEST(MetricsTest, FormatsValues) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(1e-05), "1e-05");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(18446744073709551615.0), "1.8446744073709552e+19");
}

TEST(MetricsTest, ValidatesNames) {
  EXPECT_TRUE(ValidMetricName("tierfs_read_duration_seconds"));
  EXPECT_TRUE(ValidMetricName("a:b_c9"));
  EXPECT_FALSE(ValidMetricName("9abc"));
  EXPECT_FALSE(ValidMetricName("a-b"));
  EXPECT_FALSE(ValidMetricName(""));
  EXPECT_TRUE(ValidLabelName("tier"));
  EXPECT_FALSE(ValidLabelName("__name"));
  EXPECT_FALSE(ValidLabelName("a:b"));
  EXPECT_FALSE(ValidLabelName("1a"));
}

TEST(MetricsTest, LatencyBucketsSpan10usTo30s) {
  const auto& b = LatencyBuckets();
  ASSERT_FALSE(b.empty());
  EXPECT_DOUBLE_EQ(b.front(), 1e-5);
  EXPECT_DOUBLE_EQ(b.back(), 30);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInclusiveBounds) {
  Histogram h({1, 2, 5});
  h.Observe(0.5);  // le=1
  h.Observe(1);    // le=1 (bounds are inclusive)
  h.Observe(1.5);  // le=2
  h.Observe(5);    // le=5
  h.Observe(7);    // +Inf only
  h.Observe(std::nan(""));
  const Histogram::Snapshot s = h.Snap();
  ASSERT_EQ(s.cumulative.size(), 4u);
  EXPECT_EQ(s.cumulative[0], 2u);
  EXPECT_EQ(s.cumulative[1], 3u);
  EXPECT_EQ(s.cumulative[2], 4u);
  EXPECT_EQ(s.cumulative[3], 6u);
  EXPECT_EQ(s.count, 6u);
  EXPECT_TRUE(std::isnan(s.sum));  // a NaN observation poisons the sum, as in Prometheus
}

TEST(MetricsTest, HistogramCleansBounds) {
  Histogram h({5, 1, 1, std::numeric_limits<double>::infinity(), 2});
  EXPECT_EQ(h.bounds(), (std::vector<double>{1, 2, 5}));
}

TEST(MetricsTest, HistogramAndCounterCountEveryObservationFromManyThreads) {
  Histogram h;
  Counter c;
  constexpr int kThreads = 8, kEach = 20000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        h.Observe(t % 2 == 0 ? 0.001 : 2.0);
        c.Add(2);
      }
    });
  }
  // Scrapes while recording: each series only grows.
  uint64_t last = 0;
  for (int i = 0; i < 50; ++i) {
    const auto s = h.Snap();
    EXPECT_GE(s.count, last);
    EXPECT_EQ(s.count, s.cumulative.back());
    last = s.count;
  }
  for (auto& t : ts) t.join();
  const auto s = h.Snap();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kEach);
  EXPECT_NEAR(s.sum, kThreads / 2 * kEach * (0.001 + 2.0), 1e-3);
  EXPECT_EQ(c.Value(), uint64_t{kThreads} * kEach * 2);
}

TEST(MetricsTest, GaugeSetsAndAdds) {
  Gauge g;
  g.Set(3);
  g.Add(-1.5);
  EXPECT_DOUBLE_EQ(g.Value(), 1.5);
}

TEST(MetricsTest, ExpositionGroupsFamiliesAndFormatsHistograms) {
  Exposition e;
  e.AddCounter("tierfs_tier_hits_total", "Block reads\nanswered.", {{"tier", "l1"}}, 3);
  e.AddGauge("tierfs_up", "", {}, 1);
  e.AddCounter("tierfs_tier_hits_total", "ignored", {{"tier", "l\"2"}}, 4);
  Histogram h({0.1, 1});
  h.Observe(0.0625);
  h.Observe(0.5);
  h.Observe(0.5);
  h.Observe(3);
  e.AddHistogram("tierfs_read_duration_seconds", "Latency.", {{"tier", "origin"}}, h.Snap());
  EXPECT_EQ(e.dropped(), 0u);
  EXPECT_EQ(e.Text(),
            "# HELP tierfs_tier_hits_total Block reads\\nanswered.\n"
            "# TYPE tierfs_tier_hits_total counter\n"
            "tierfs_tier_hits_total{tier=\"l1\"} 3\n"
            "tierfs_tier_hits_total{tier=\"l\\\"2\"} 4\n"
            "# TYPE tierfs_up gauge\n"
            "tierfs_up 1\n"
            "# HELP tierfs_read_duration_seconds Latency.\n"
            "# TYPE tierfs_read_duration_seconds histogram\n"
            "tierfs_read_duration_seconds_bucket{tier=\"origin\",le=\"0.1\"} 1\n"
            "tierfs_read_duration_seconds_bucket{tier=\"origin\",le=\"1\"} 3\n"
            "tierfs_read_duration_seconds_bucket{tier=\"origin\",le=\"+Inf\"} 4\n"
            "tierfs_read_duration_seconds_sum{tier=\"origin\"} 4.0625\n"
            "tierfs_read_duration_seconds_count{tier=\"origin\"} 4\n");
}

TEST(MetricsTest, ExpositionDropsInvalidSamples) {
  Exposition e;
  e.AddCounter("ok_total", "", {}, 2);
  e.AddCounter("bad-name", "", {}, 1);
  e.AddCounter("ok_total", "", {{"__reserved", "x"}}, 1);
  e.AddGauge("ok_total", "", {{"a", "b"}}, 1);  // a counter family already
  Histogram h({1});
  e.AddHistogram("lat_seconds", "", {{"le", "1"}}, h.Snap());  // `le` is the histogram's
  EXPECT_EQ(e.dropped(), 4u);
  EXPECT_EQ(e.Text(), "# TYPE ok_total counter\nok_total 2\n");
}

TEST(MetricsTest, RegistryRunsCollectorsUntilUnregistered) {
  Registry r;
  int calls = 0;
  auto a = r.Add([&](Exposition* e) {
    ++calls;
    e->AddCounter("a_total", "", {}, 1);
  });
  {
    auto b = r.Add([](Exposition* e) { e->AddGauge("b", "", {}, 2); });
    EXPECT_EQ(r.Scrape(), "# TYPE a_total counter\na_total 1\n# TYPE b gauge\nb 2\n");
  }
  EXPECT_EQ(r.Scrape(), "# TYPE a_total counter\na_total 1\n");
  Registry::Registration moved = std::move(a);
  EXPECT_FALSE(a.active());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(moved.active());
  moved.Reset();
  EXPECT_EQ(r.Scrape(), "");
  EXPECT_EQ(calls, 2);
}

// A Registration destroyed while another thread scrapes: the scrape either ran the collector
// completely or not at all, and never after the Registration is gone (TSan checks the rest).
TEST(MetricsTest, UnregisteringWaitsForARunningScrape) {
  Registry r;
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop.load()) (void)r.Scrape();
  });
  for (int i = 0; i < 200; ++i) {
    auto value = std::make_unique<std::atomic<uint64_t>>(i);
    auto reg = r.Add([v = value.get()](Exposition* e) { e->AddCounter("x_total", "", {}, *v); });
    reg.Reset();
    value.reset();  // a collector still running would read freed memory (ASan/TSan)
  }
  stop = true;
  scraper.join();
}

}  // namespace
}  // namespace tierfs::metrics
