// metrics — counters, gauges and fixed-bucket histograms, and their Prometheus text exposition
// (format version 0.0.4). No dependency beyond the standard library: any module records into
// these without depending on daemon/, which serves Registry::Scrape() over HTTP
// (daemon/metrics_server.h).
//
// Two ways to publish a metric:
//   - record into an object of this header (Counter, Gauge, Histogram) that the component owns,
//     and read it from a collector at scrape time;
//   - read the component's existing counters (the std::atomic Stats structs that also feed the
//     user.tierfs.stats xattr) from a collector, so the xattr and /metrics show the same numbers
//     and nothing is counted twice.
// A collector is a callback registered with Registry::Add; it appends samples to an Exposition
// when /metrics is scraped. The Registration it returns unregisters it when destroyed (waiting
// for a scrape that is running it), so a component registers with a member Registration and is
// never called after it is gone.
//
// Hot path: Counter::Add and Histogram::Observe are a few relaxed atomic adds on a per-thread
// shard (no lock, no allocation); shards are cache-line aligned so that threads recording at once
// do not share a line. A scrape sums the shards: each series is monotonic, but the buckets of a
// histogram are not one atomic snapshot (the count is derived from the buckets, so `_count` and
// `le="+Inf"` always agree).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mutex.h"

namespace tierfs::metrics {

// Shards of Counter and Histogram; a thread always records into the same one.
inline constexpr size_t kShards = 8;
// The shard of the calling thread (assigned round-robin on its first use).
size_t ThisThreadShard();

// The content type of Registry::Scrape()'s text.
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

// Latency buckets, in seconds, from 10 µs to 30 s (1-2.5-5 steps; 20 bounds).
const std::vector<double>& LatencyBuckets();

// A monotonic count. Thread-safe; lock-free.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;
  void Add(uint64_t n = 1) { shards_[ThisThreadShard()].v.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const;

 private:
  struct alignas(64) Shard {
    std::atomic<uint64_t> v{0};
  };
  Shard shards_[kShards];
};

// A value that goes up and down. Thread-safe; lock-free.
class Gauge {
 public:
  void Set(double v) { v_.store(v, std::memory_order_relaxed); }
  void Add(double d) { v_.fetch_add(d, std::memory_order_relaxed); }
  double Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

// Observations counted in fixed buckets (upper bounds, inclusive: Prometheus `le`), plus their
// sum. Thread-safe; Observe is lock-free.
class Histogram {
 public:
  // REQUIRES: `bounds` strictly increasing and finite (+Inf is implicit). Invalid bounds are
  // sorted and de-duplicated, non-finite ones dropped.
  explicit Histogram(std::vector<double> bounds = LatencyBuckets());
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double v);
  void ObserveDuration(std::chrono::nanoseconds d) {
    Observe(std::chrono::duration<double>(d).count());
  }

  struct Snapshot {
    std::vector<double> bounds;        // without +Inf
    std::vector<uint64_t> cumulative;  // bounds.size() + 1 entries, the last is +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Snap() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  const size_t stride_;  // atomics per shard: bucket counts (+Inf last), rounded to a cache line
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // kShards * stride_
  struct alignas(64) Sum {
    std::atomic<double> v{0};
  };
  Sum sums_[kShards];
};

using Labels = std::vector<std::pair<std::string, std::string>>;

// Label value escaping of the text format: backslash, double quote and newline.
std::string EscapeLabelValue(std::string_view v);
// HELP text escaping: backslash and newline.
std::string EscapeHelp(std::string_view v);
// A sample value: integers without a fraction, "+Inf", "-Inf", "NaN", else the shortest form
// that reads back as the same double.
std::string FormatValue(double v);
// [a-zA-Z_:][a-zA-Z0-9_:]* and [a-zA-Z_][a-zA-Z0-9_]* (names starting "__" are reserved).
bool ValidMetricName(std::string_view name);
bool ValidLabelName(std::string_view name);

// Samples being gathered for one scrape, grouped into families: each family's HELP and TYPE
// once, then all its samples, families in the order first seen. A sample with an invalid metric
// or label name, or of a family already seen with another type, is dropped (and counted in
// dropped()). Not thread-safe; REQUIRES: external synchronization (one per scrape).
class Exposition {
 public:
  Exposition();
  ~Exposition();
  Exposition(const Exposition&) = delete;
  Exposition& operator=(const Exposition&) = delete;

  void AddCounter(std::string_view name, std::string_view help, const Labels& labels, double value);
  void AddGauge(std::string_view name, std::string_view help, const Labels& labels, double value);
  // name_bucket{...,le="..."} (cumulative), name_sum, name_count.
  void AddHistogram(std::string_view name, std::string_view help, const Labels& labels,
                    const metrics::Histogram::Snapshot& snap);

  std::string Text() const;
  uint64_t dropped() const { return dropped_; }

 private:
  struct Family;
  Family* FamilyFor(std::string_view name, std::string_view help, std::string_view type);
  std::vector<std::unique_ptr<Family>> families_;
  uint64_t dropped_ = 0;
};

// The collectors of one process. Thread-safe; no external synchronization needed.
class Registry {
 public:
  // Called on the scraping thread with the registry's lock held: it must be quick, must not
  // call back into the Registry, and must not take a lock that is held while a Registration of
  // this registry is destroyed.
  using Collector = std::function<void(Exposition*)>;

  // Unregisters its collector when destroyed or reset (waiting for a scrape that runs it).
  class Registration {
   public:
    Registration() = default;
    ~Registration() { Reset(); }
    Registration(Registration&& o) noexcept;
    Registration& operator=(Registration&& o) noexcept;
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
    void Reset();
    bool active() const { return registry_ != nullptr; }

   private:
    friend class Registry;
    Registry* registry_ = nullptr;
    std::list<Collector>::iterator it_;
  };

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  // REQUIRES: every Registration of this registry was destroyed or reset.
  ~Registry() = default;

  [[nodiscard]] Registration Add(Collector collector) EXCLUDES(mu_);

  // Runs every collector, in registration order, and returns the text exposition.
  std::string Scrape() const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::list<Collector> collectors_ GUARDED_BY(mu_);
};

}  // namespace tierfs::metrics
