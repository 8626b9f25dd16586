#include "base/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tierfs::metrics {
namespace {

std::atomic<size_t> g_next_shard{0};

bool NameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

std::vector<double> CleanBounds(std::vector<double> b) {
  b.erase(std::remove_if(b.begin(), b.end(), [](double v) { return !std::isfinite(v); }), b.end());
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}

// The `{a="x",b="y"}` part (empty without labels); `extra` is appended last (histogram `le`).
std::string LabelText(const Labels& labels, const std::pair<std::string, std::string>* extra) {
  if (labels.empty() && extra == nullptr) return {};
  std::string s = "{";
  bool first = true;
  auto add = [&](const std::string& k, const std::string& v) {
    if (!first) s += ',';
    first = false;
    s += k;
    s += "=\"";
    s += EscapeLabelValue(v);
    s += '"';
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (extra != nullptr) add(extra->first, extra->second);
  s += '}';
  return s;
}

}  // namespace

size_t ThisThreadShard() {
  thread_local const size_t shard = g_next_shard.fetch_add(1, std::memory_order_relaxed) % kShards;
  return shard;
}

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> kBuckets = {
      0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,     0.1,     0.25,   0.5,     1,      2.5,   5,      10,    30};
  return kBuckets;
}

uint64_t Counter::Value() const {
  uint64_t v = 0;
  for (const Shard& s : shards_) v += s.v.load(std::memory_order_relaxed);
  return v;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(CleanBounds(std::move(bounds))),
      stride_((bounds_.size() + 1 + 7) / 8 * 8),
      counts_(new std::atomic<uint64_t>[kShards * stride_]) {
  for (size_t i = 0; i < kShards * stride_; ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // le: the first bound >= v; NaN and values above every bound go to +Inf.
  const size_t b = std::isnan(v)
                       ? bounds_.size()
                       : static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                             bounds_.begin());
  const size_t shard = ThisThreadShard();
  counts_[shard * stride_ + b].fetch_add(1, std::memory_order_relaxed);
  sums_[shard].v.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Snap() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.assign(bounds_.size() + 1, 0);
  for (size_t shard = 0; shard < kShards; ++shard) {
    for (size_t b = 0; b <= bounds_.size(); ++b) {
      s.cumulative[b] += counts_[shard * stride_ + b].load(std::memory_order_relaxed);
    }
    s.sum += sums_[shard].v.load(std::memory_order_relaxed);
  }
  for (size_t b = 1; b < s.cumulative.size(); ++b) s.cumulative[b] += s.cumulative[b - 1];
  s.count = s.cumulative.back();
  return s;
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) < 9.007199254740992e15) {
    return fmt::format("{}", static_cast<int64_t>(v));
  }
  return fmt::format("{}", v);  // shortest round-trip form
}

bool ValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, /*colon=*/true)) return false;
  }
  return true;
}

bool ValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, /*colon=*/false)) return false;
  }
  return true;
}

struct Exposition::Family {
  std::string name;
  std::string help;
  std::string type;
  std::string lines;
};

Exposition::Exposition() = default;
Exposition::~Exposition() = default;

Exposition::Family* Exposition::FamilyFor(std::string_view name, std::string_view help,
                                          std::string_view type) {
  if (!ValidMetricName(name)) return nullptr;
  for (auto& f : families_) {
    if (f->name == name) return f->type == type ? f.get() : nullptr;
  }
  auto f = std::make_unique<Family>();
  f->name = std::string(name);
  f->help = std::string(help);
  f->type = std::string(type);
  families_.push_back(std::move(f));
  return families_.back().get();
}

namespace {
bool ValidLabels(const Labels& labels, bool histogram) {
  for (const auto& [k, v] : labels) {
    if (!ValidLabelName(k) || (histogram && k == "le")) return false;
  }
  return true;
}
}  // namespace

void Exposition::AddCounter(std::string_view name, std::string_view help, const Labels& labels,
                            double value) {
  Family* f = ValidLabels(labels, false) ? FamilyFor(name, help, "counter") : nullptr;
  if (f == nullptr) {
    ++dropped_;
    return;
  }
  f->lines += fmt::format("{}{} {}\n", name, LabelText(labels, nullptr), FormatValue(value));
}

void Exposition::AddGauge(std::string_view name, std::string_view help, const Labels& labels,
                          double value) {
  Family* f = ValidLabels(labels, false) ? FamilyFor(name, help, "gauge") : nullptr;
  if (f == nullptr) {
    ++dropped_;
    return;
  }
  f->lines += fmt::format("{}{} {}\n", name, LabelText(labels, nullptr), FormatValue(value));
}

void Exposition::AddHistogram(std::string_view name, std::string_view help, const Labels& labels,
                              const metrics::Histogram::Snapshot& snap) {
  Family* f = ValidLabels(labels, true) && snap.cumulative.size() == snap.bounds.size() + 1
                  ? FamilyFor(name, help, "histogram")
                  : nullptr;
  if (f == nullptr) {
    ++dropped_;
    return;
  }
  std::pair<std::string, std::string> le{"le", ""};
  for (size_t i = 0; i <= snap.bounds.size(); ++i) {
    le.second = i < snap.bounds.size() ? FormatValue(snap.bounds[i]) : "+Inf";
    f->lines += fmt::format("{}_bucket{} {}\n", name, LabelText(labels, &le), snap.cumulative[i]);
  }
  const std::string l = LabelText(labels, nullptr);
  f->lines += fmt::format("{}_sum{} {}\n", name, l, FormatValue(snap.sum));
  f->lines += fmt::format("{}_count{} {}\n", name, l, snap.count);
}

std::string Exposition::Text() const {
  std::string out;
  for (const auto& f : families_) {
    if (!f->help.empty()) out += fmt::format("# HELP {} {}\n", f->name, EscapeHelp(f->help));
    out += fmt::format("# TYPE {} {}\n", f->name, f->type);
    out += f->lines;
  }
  return out;
}

Registry::Registration::Registration(Registration&& o) noexcept
    : registry_(std::exchange(o.registry_, nullptr)), it_(o.it_) {}

Registry::Registration& Registry::Registration::operator=(Registration&& o) noexcept {
  if (this != &o) {
    Reset();
    registry_ = std::exchange(o.registry_, nullptr);
    it_ = o.it_;
  }
  return *this;
}

void Registry::Registration::Reset() {
  Registry* r = std::exchange(registry_, nullptr);
  if (r == nullptr) return;
  MutexLock l(&r->mu_);
  r->collectors_.erase(it_);
}

Registry::Registration Registry::Add(Collector collector) {
  Registration reg;
  MutexLock l(&mu_);
  reg.it_ = collectors_.insert(collectors_.end(), std::move(collector));
  reg.registry_ = this;
  return reg;
}

std::string Registry::Scrape() const {
  Exposition e;
  {
    MutexLock l(&mu_);
    for (const Collector& c : collectors_) c(&e);
  }
  return e.Text();
}

}  // namespace tierfs::metrics
