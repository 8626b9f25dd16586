#include "base/memory_budget.h"

#include <utility>

namespace tierfs {
namespace {

// Set while this thread runs the reclaimer: what it frees must not ask it again.
thread_local bool t_reclaiming = false;

std::atomic<MemoryBudget*> g_process_budget{nullptr};

}  // namespace

std::string_view MemoryUseName(MemoryUse use) {
  switch (use) {
    case MemoryUse::kL1:
      return "l1";
    case MemoryUse::kBlocks:
      return "blocks";
    case MemoryUse::kListings:
      return "listings";
  }
  return "unknown";
}

uint64_t MemoryBudget::used(MemoryUse use) const {
  const int64_t v = by_use_[static_cast<size_t>(use)].load(std::memory_order_relaxed);
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

void MemoryBudget::Add(MemoryUse use, int64_t bytes) {
  by_use_[static_cast<size_t>(use)].fetch_add(bytes, std::memory_order_relaxed);
}

void MemoryBudget::Charge(MemoryUse use, uint64_t bytes) {
  const uint64_t now = used();
  if (now + bytes > limit_) Reclaim(now + bytes - limit_);
  Add(use, static_cast<int64_t>(bytes));
  const uint64_t after = used_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = peak_.load(std::memory_order_relaxed);
  while (after > peak && !peak_.compare_exchange_weak(peak, after, std::memory_order_relaxed)) {
  }
}

bool MemoryBudget::MakeRoom(uint64_t bytes) {
  const uint64_t now = used();
  if (now + bytes <= limit_) return true;
  Reclaim(now + bytes - limit_);
  return used() + bytes <= limit_;
}

void MemoryBudget::Release(MemoryUse use, uint64_t bytes) {
  Add(use, -static_cast<int64_t>(bytes));
  used_.fetch_sub(bytes, std::memory_order_relaxed);
}

void MemoryBudget::Move(MemoryUse from, MemoryUse to, uint64_t bytes) {
  Add(from, -static_cast<int64_t>(bytes));
  Add(to, static_cast<int64_t>(bytes));
}

void MemoryBudget::SetReclaimer(Reclaimer reclaimer) {
  WriterLock l(&reclaimer_mu_);  // waits for a call in progress
  reclaimer_ = std::move(reclaimer);
}

void MemoryBudget::Reclaim(uint64_t bytes) {
  if (t_reclaiming) return;
  ReaderLock l(&reclaimer_mu_);
  if (!reclaimer_) return;
  t_reclaiming = true;
  const uint64_t got = reclaimer_(bytes);
  t_reclaiming = false;
  reclaims_.fetch_add(1, std::memory_order_relaxed);
  reclaimed_bytes_.fetch_add(got, std::memory_order_relaxed);
}

MemoryBudget* ProcessMemoryBudget() { return g_process_budget.load(std::memory_order_acquire); }

MemoryBudget* SetProcessMemoryBudget(uint64_t limit_bytes) {
  MemoryBudget* existing = ProcessMemoryBudget();
  if (existing != nullptr) return existing;
  auto* fresh = new MemoryBudget(limit_bytes);
  if (!g_process_budget.compare_exchange_strong(existing, fresh, std::memory_order_acq_rel)) {
    delete fresh;
    return existing;
  }
  return fresh;
}

}  // namespace tierfs
