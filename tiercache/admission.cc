#include "tiercache/admission.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace tierfs {
namespace {

uint64_t Half(const BlockKey& k, size_t at) {
  uint64_t v;
  std::memcpy(&v, k.data() + at, sizeof(v));
  return v;
}

uint64_t TrackedId(std::string_view key, uint64_t size) {
  return XXH3_64bits_withSeed(key.data(), key.size(), size);
}

}  // namespace

Result<AdmitPolicy> ParseAdmitPolicy(std::string_view v) {
  if (v == "always") return AdmitPolicy::kAlways;
  if (v == "reuse") return AdmitPolicy::kReuse;
  if (v == "never") return AdmitPolicy::kNever;
  return Status::InvalidArgument(fmt::format("bad admit policy '{}' (always, reuse or never)", v));
}

std::string_view AdmitPolicyName(AdmitPolicy p) {
  switch (p) {
    case AdmitPolicy::kAlways:
      return "always";
    case AdmitPolicy::kReuse:
      return "reuse";
    case AdmitPolicy::kNever:
      return "never";
    case AdmitPolicy::kDefault:
      break;
  }
  return "default";
}

Admission::Admission(const AdmissionOptions& options, uint64_t l2_capacity, uint64_t block_size)
    : default_(options.default_policy == AdmitPolicy::kDefault ? AdmitPolicy::kAlways
                                                               : options.default_policy),
      block_size_(std::max<uint64_t>(1, block_size)),
      scan_min_bytes_(options.scan_percent == 0 || l2_capacity == 0
                          ? 0
                          : std::max<uint64_t>(kScanMinBlocks * block_size_,
                                               l2_capacity / 100 * options.scan_percent)) {
  uint64_t entries = options.ghost_bytes / sizeof(uint64_t);
  if (options.ghost_bytes == 0) entries = 2 * (l2_capacity / block_size_);
  entries = std::clamp<uint64_t>(entries, 64, AdmissionOptions::kMaxGhostBytes / sizeof(uint64_t));
  buckets_ = std::bit_floor(static_cast<size_t>(entries / kWays));
  slots_ = std::make_unique<std::atomic<uint64_t>[]>(buckets_ * kWays);
  cursor_ = std::make_unique<std::atomic<uint8_t>[]>(buckets_);
}

void Admission::NoteRead(std::string_view key, uint64_t size, uint64_t offset, uint64_t length) {
  if (scan_min_bytes_ == 0 || size < scan_min_bytes_ || length == 0) return;
  const uint64_t id = TrackedId(key, size);
  const uint64_t slack = 2 * block_size_;  // concurrent kernel reads arrive slightly out of order
  MutexLock l(&mu_);
  auto it = tracked_.find(id);
  if (it == tracked_.end()) {
    if (tracked_.size() >= kMaxTracked) tracked_.clear();
    it = tracked_.emplace(id, ScanState{}).first;
  }
  ScanState& s = it->second;
  const bool continues = s.run > 0 && offset + slack >= s.next && offset <= s.next + slack;
  if (continues) {
    s.run += length;
    s.next = std::max(s.next, offset + length);
  } else {
    if (s.scanning) {
      ++s.passes;  // a scan ended: a new pass (or another reader) starts elsewhere
    } else if (s.run > 0) {
      s.jumped = true;
    }
    s.run = length;
    s.next = offset + length;
    s.scanning = false;
  }
  if (!s.scanning && s.run >= kScanRunBlocks * block_size_) {
    s.scanning = true;
    ++stats_.scans;
  }
}

bool Admission::ScanOrUnknown(std::string_view key, uint64_t size) const {
  if (scan_min_bytes_ == 0 || size < scan_min_bytes_) return false;
  MutexLock l(&mu_);
  auto it = tracked_.find(TrackedId(key, size));
  return it == tracked_.end() || it->second.scanning || !it->second.jumped;
}

bool Admission::ScannedBefore(std::string_view key, uint64_t size) const {
  MutexLock l(&mu_);
  auto it = tracked_.find(TrackedId(key, size));
  return it != tracked_.end() && it->second.passes > 0;
}

AdmitPolicy Admission::Effective(std::string_view key, uint64_t size, AdmitPolicy set) const {
  if (set != AdmitPolicy::kDefault) return set;
  if (default_ == AdmitPolicy::kAlways && ScanOrUnknown(key, size)) return AdmitPolicy::kReuse;
  return default_;
}

bool Admission::GhostSeen(const BlockKey& block) {
  uint64_t fp = Half(block, 0);
  if (fp == 0) fp = 1;
  const size_t b = static_cast<size_t>(Half(block, 8)) & (buckets_ - 1);
  std::atomic<uint64_t>* ways = &slots_[b * kWays];
  for (size_t w = 0; w < kWays; ++w) {
    if (ways[w].load(std::memory_order_relaxed) == fp) return true;
  }
  const size_t w = cursor_[b].fetch_add(1, std::memory_order_relaxed) % kWays;
  ways[w].store(fp, std::memory_order_relaxed);
  return false;
}

AdmitDecision Admission::Decide(const BlockKey& block, std::string_view key, uint64_t size,
                                const Placement& hint) {
  AdmitDecision d = AdmitDecision::kYes;
  if (!hint.pinned) {
    switch (Effective(key, size, hint.admit)) {
      case AdmitPolicy::kNever:
        d = AdmitDecision::kNo;
        break;
      case AdmitPolicy::kReuse:
        // (GhostSeen first: it records the block either way.) Reuse set by a policy, or a scan's
        // block seen in an earlier pass.
        if (GhostSeen(block) && (hint.admit == AdmitPolicy::kReuse ||
                                 default_ == AdmitPolicy::kReuse || ScannedBefore(key, size))) {
          ++stats_.ghost_hits;
        } else {
          d = AdmitDecision::kProbation;
          ++stats_.probation;
        }
        break;
      default:
        break;
    }
  }
  ++(d == AdmitDecision::kNo ? stats_.rejected : stats_.admitted);
  return d;
}

}  // namespace tierfs
