// The block arena (tiercache/internal/block_arena.h).
#include "tiercache/internal/block_arena.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <utility>

namespace tierfs::tiercache_internal {

struct BlockArena::Slab {
  std::byte* base = nullptr;
  size_t bytes = 0;
  size_t item_bytes = 0;
  uint32_t used = 0;
  // Free item indexes, the most recently freed last: resident ones, and untouched or given back.
  std::vector<uint32_t> warm, cold;
  // Per item: when it was last freed resident (BlockArena::freed_seq_), 0 while not resident free.
  std::vector<uint64_t> freed_at;
  size_t partial_at = SIZE_MAX;  // position in its class's partial list
  size_t warm_at = SIZE_MAX;     // position in its class's warm list
  size_t spare_at = SIZE_MAX;    // position in BlockArena::spare_ (no item in use, all resident)
  Class* owner = nullptr;
  size_t free_items() const { return warm.size() + cold.size(); }
};

namespace {

size_t PageBytes() {
  static const size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

// The smallest whole number of units that holds an item and wastes at most 1/8 of itself.
size_t SlabBytes(size_t item) {
  for (size_t units = 1; units <= 16; ++units) {
    const size_t s = units * BlockArena::kUnitBytes;
    if (s >= item && s % item <= s / 8) return s;
  }
  return (item + BlockArena::kUnitBytes - 1) / BlockArena::kUnitBytes * BlockArena::kUnitBytes;
}

// Faults in the first `bytes` of untouched storage with one system call instead of a fault per
// page on the first write (MADV_POPULATE_WRITE). Best effort: a kernel without it (EINVAL) is
// not asked again, and a failure leaves the pages to fault in on first write as before.
void Populate(std::byte* data, size_t bytes) {
  static std::atomic<bool> unsupported{false};
  if (bytes == 0 || unsupported.load(std::memory_order_relaxed)) return;
  const size_t page = PageBytes();
  if (::madvise(data, (bytes + page - 1) / page * page, MADV_POPULATE_WRITE) != 0 &&
      errno == EINVAL) {
    unsupported.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

BlockArena::BlockArena(uint64_t retain_bytes, std::chrono::nanoseconds decay)
    : decay_(decay), retain_bytes_(retain_bytes) {}

BlockArena::~BlockArena() {
  std::jthread decay;
  {
    MutexLock l(&mu_);
    decay.swap(decay_thread_);
  }
  if (decay.joinable()) {
    decay.request_stop();
    {
      MutexLock l(&mu_);
      decay_cv_.SignalAll();
    }
    decay.join();
  }
  MutexLock l(&mu_);
  for (auto& [p, s] : slabs_) ::munmap(s->base, s->bytes);
}

size_t BlockArena::ClassBytes(size_t capacity) {
  if (capacity < kMinBytes || capacity > kMaxBytes) return 0;
  const size_t step = std::max(PageBytes(), std::bit_floor(capacity) / 8);
  return (capacity + step - 1) / step * step;
}

BlockArena::Class& BlockArena::ClassFor(size_t item_bytes) {
  std::unique_ptr<Class>& c = classes_[item_bytes];
  if (!c) {
    c = std::make_unique<Class>();
    c->item_bytes = item_bytes;
    c->slab_bytes = SlabBytes(item_bytes);
  }
  return *c;
}

void BlockArena::Link(Slab* s, SlabList list, ListPos pos) {
  std::vector<Slab*>& v = s->owner->*list;
  s->*pos = v.size();
  v.push_back(s);
}

void BlockArena::Unlink(Slab* s, SlabList list, ListPos pos) {
  std::vector<Slab*>& v = s->owner->*list;
  v[s->*pos] = v.back();
  v[s->*pos]->*pos = s->*pos;
  v.pop_back();
  s->*pos = SIZE_MAX;
}

void BlockArena::LinkSpare(Slab* s) {
  s->spare_at = spare_.size();
  spare_.push_back(s);
}

void BlockArena::UnlinkSpare(Slab* s) {
  spare_[s->spare_at] = spare_.back();
  spare_[s->spare_at]->spare_at = s->spare_at;
  spare_.pop_back();
  s->spare_at = SIZE_MAX;
}

BlockArena::Slab* BlockArena::SpareFor(size_t item, size_t bytes) {
  // The most recently spared first; a few looked at (they are all alike but for their size).
  for (size_t i = spare_.size(), looked = 0; i-- > 0 && looked < kSpareLookups; ++looked) {
    Slab* s = spare_[i];
    if (s->bytes < bytes) continue;
    if (s->item_bytes != item) {
      // Carved again for `item`: out of its class's lists, its items no longer resident there
      // (their resident_ entries go stale: freed_at starts over), then every item of the new
      // size resident and free.
      Class* old = s->owner;
      const auto was = static_cast<uint64_t>(s->warm.size());
      Unlink(s, &Class::partial, &Slab::partial_at);
      Unlink(s, &Class::warm, &Slab::warm_at);
      old->warm_items -= was;
      resident_items_ -= was;
      stats_.free_resident_bytes -= was * s->item_bytes;
      s->warm.clear();
      s->item_bytes = item;
      s->owner = &ClassFor(item);
      const auto items = static_cast<uint32_t>(s->bytes / item);
      s->freed_at.assign(items, 0);
      Link(s, &Class::partial, &Slab::partial_at);
      for (uint32_t k = items; k-- > 0;) AddResident(s, k);  // item 0 is taken first
      ++stats_.recarved;
    }
    return s;
  }
  return nullptr;
}

BlockArena::Piece BlockArena::Take(Slab* s) {
  return TakeIndex(s, !s->warm.empty() ? s->warm.back() : s->cold.back());
}

BlockArena::Piece BlockArena::TakeIndex(Slab* s, uint32_t index, bool count) {
  // Free lists are short (at most a slab's items), and the last entry is the usual one.
  auto drop = [index](std::vector<uint32_t>& v) {
    for (size_t i = v.size(); i-- > 0;) {
      if (v[i] == index) {
        v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
      }
    }
    return false;
  };
  if (s->spare_at != SIZE_MAX) UnlinkSpare(s);
  bool fresh = false;
  if (drop(s->warm)) {
    if (s->warm.empty()) Unlink(s, &Class::warm, &Slab::warm_at);
    --s->owner->warm_items;
    --resident_items_;
    s->freed_at[index] = 0;
    stats_.free_resident_bytes -= s->item_bytes;
    if (count) ++stats_.reused;
  } else {
    (void)drop(s->cold);
    if (count) ++stats_.fresh;
    fresh = true;
  }
  if (s->used++ == 0) --empty_slabs_;
  if (s->free_items() == 0) Unlink(s, &Class::partial, &Slab::partial_at);
  stats_.live_bytes += s->item_bytes;
  return Piece{s->base + static_cast<size_t>(index) * s->item_bytes, s->item_bytes, s, fresh};
}

void BlockArena::TakeAdjacent(Slab* s, uint32_t first, size_t n, std::vector<Piece>* out) {
  for (size_t k = 0; k < n; ++k) out->push_back(TakeIndex(s, first + static_cast<uint32_t>(k)));
}

int64_t BlockArena::FindAdjacentFree(const Slab& s, size_t n, size_t* cold_in_range) {
  const size_t items = s.bytes / s.item_bytes;
  if (n == 0 || s.free_items() < n || items < n) return -1;
  // 0: in use, 1: free and resident, 2: free and given back.
  std::vector<uint8_t> state(items, 0);
  for (uint32_t i : s.warm) state[i] = 1;
  for (uint32_t i : s.cold) state[i] = 2;
  int64_t best = -1;
  size_t free_run = 0, cold = 0;
  for (size_t i = 0; i < items; ++i) {
    if (state[i] == 0) {
      free_run = cold = 0;
      continue;
    }
    ++free_run;
    cold += state[i] == 2;
    if (free_run > n) cold -= state[i - n] == 2;
    if (free_run >= n && (best < 0 || cold < *cold_in_range)) {
      best = static_cast<int64_t>(i + 1 - n);
      *cold_in_range = cold;
      if (cold == 0) break;
    }
  }
  return best;
}

std::vector<BlockArena::Piece> BlockArena::AllocateAdjacent(size_t capacity, size_t n) {
  const size_t item = ClassBytes(capacity);
  if (item == 0 || n == 0) return {};
  std::vector<Piece> pieces;
  pieces.reserve(n);
  size_t slab_bytes = 0;
  {
    MutexLock l(&mu_);
    Class& c = ClassFor(item);
    // What n single allocations would fault in: the items beyond the resident free ones. A run
    // may cost no more (a copy costs far less than a fault); the one with the fewest given-back
    // items wins.
    const size_t allowed = c.warm_items >= n ? 0 : n - static_cast<size_t>(c.warm_items);
    Slab* best = nullptr;
    int64_t best_first = -1;
    size_t best_cold = SIZE_MAX;
    for (Slab* s : c.partial) {
      size_t cold = 0;
      const int64_t first = FindAdjacentFree(*s, n, &cold);
      if (first < 0 || cold >= best_cold) continue;
      best = s;
      best_first = first;
      best_cold = cold;
      if (cold == 0) break;
    }
    if (best != nullptr && best_cold <= allowed) {
      TakeAdjacent(best, static_cast<uint32_t>(best_first), n, &pieces);
    } else if (c.warm_items > 0) {
      return {};  // singles reuse resident items: fewer faults
    } else if (Slab* spare = SpareFor(item, n * item); spare != nullptr) {
      // Before untouched storage only: taken ahead of the class's own partly resident slabs or
      // its scattered resident items, spare slabs left those unused until they were given back
      // (a cold 1 GiB read with a 1 GiB L1 peaked 300 MiB higher, bench/run.sh --only seq).
      TakeAdjacent(spare, 0, n, &pieces);
    }
    slab_bytes = std::max(c.slab_bytes, (n * item + kUnitBytes - 1) / kUnitBytes * kUnitBytes);
  }
  if (pieces.empty()) {
    std::unique_ptr<Slab> slab = MapSlab(item, slab_bytes);
    if (!slab) return {};
    MutexLock l(&mu_);
    TakeAdjacent(Adopt(std::move(slab)), 0, n, &pieces);
  }
  for (const Piece& p : pieces) {
    if (p.fresh) Populate(p.data, p.bytes);
  }
  return pieces;
}

BlockArena::Piece BlockArena::Allocate(size_t capacity) {
  const size_t item = ClassBytes(capacity);
  if (item == 0) return {};
  size_t slab_bytes = 0;
  Piece piece;
  {
    MutexLock l(&mu_);
    Class& c = ClassFor(item);
    if (!c.warm.empty()) return Take(c.warm.back());  // resident already
    // A slab of another class whose items are all free and resident, before untouched storage.
    if (Slab* spare = SpareFor(item, item); spare != nullptr) return Take(spare);
    if (!c.partial.empty()) piece = Take(c.partial.back());
    slab_bytes = c.slab_bytes;
  }
  if (piece.data == nullptr) piece = AddSlab(item, slab_bytes);
  if (piece.fresh) Populate(piece.data, capacity);
  return piece;
}

BlockArena::Piece BlockArena::AddSlab(size_t item, size_t slab_bytes) {
  std::unique_ptr<Slab> slab = MapSlab(item, slab_bytes);
  if (!slab) return {};
  MutexLock l(&mu_);
  return Take(Adopt(std::move(slab)));
}

std::unique_ptr<BlockArena::Slab> BlockArena::MapSlab(size_t item, size_t slab_bytes) {
  // Aligned to a unit: map one unit more and trim both ends.
  void* raw = ::mmap(nullptr, slab_bytes + kUnitBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  auto* const start = static_cast<std::byte*>(raw);
  const uintptr_t at = reinterpret_cast<uintptr_t>(raw);
  auto* const base = start + ((kUnitBytes - at % kUnitBytes) % kUnitBytes);
  if (base > start) ::munmap(start, static_cast<size_t>(base - start));
  auto* const end = start + slab_bytes + kUnitBytes;
  if (base + slab_bytes < end)
    ::munmap(base + slab_bytes, static_cast<size_t>(end - (base + slab_bytes)));

  auto slab = std::make_unique<Slab>();
  slab->base = base;
  slab->bytes = slab_bytes;
  slab->item_bytes = item;
  const auto items = static_cast<uint32_t>(slab_bytes / item);
  slab->cold.reserve(items);
  for (uint32_t i = items; i-- > 0;) slab->cold.push_back(i);  // item 0 is handed out first
  slab->freed_at.assign(items, 0);
  return slab;
}

BlockArena::Slab* BlockArena::Adopt(std::unique_ptr<Slab> slab) {
  Slab* s = slab.get();
  s->owner = &ClassFor(s->item_bytes);
  slabs_.emplace(s, std::move(slab));
  stats_.slab_bytes += s->bytes;
  ++stats_.slabs;
  ++empty_slabs_;
  Link(s, &Class::partial, &Slab::partial_at);
  return s;
}

std::unique_ptr<BlockArena::Slab> BlockArena::PutBack(Slab* s, uint32_t index, bool resident) {
  stats_.live_bytes -= s->item_bytes;
  --s->used;
  if (s->free_items() == 0) Link(s, &Class::partial, &Slab::partial_at);
  if (resident) {
    AddResident(s, index);
  } else {
    s->cold.push_back(index);
  }
  if (s->used != 0) return nullptr;
  if (s->cold.empty()) LinkSpare(s);  // every item free and resident: any class may take it
  // An empty slab with resident items stays: they are counted in free_resident_bytes, within
  // retain_bytes, and are what the next allocations of the class take. (With a few items per
  // slab, as 1 MiB blocks have, slabs go empty all the time; unmapping those threw away the very
  // memory the budget keeps for reuse, and the next allocations faulted it in again.)
  if (++empty_slabs_ <= kKeepEmptySlabs || !s->warm.empty()) return nullptr;
  // Too many empty slabs, and this one's pages are given back already: it goes.
  Unlink(s, &Class::partial, &Slab::partial_at);
  --empty_slabs_;
  stats_.slab_bytes -= s->bytes;
  --stats_.slabs;
  auto node = slabs_.extract(s);
  return std::move(node.mapped());
}

void BlockArena::AddResident(Slab* s, uint32_t index) {
  if (s->warm.empty()) Link(s, &Class::warm, &Slab::warm_at);
  s->warm.push_back(index);
  ++s->owner->warm_items;
  ++resident_items_;
  s->freed_at[index] = ++freed_seq_;
  resident_.push_back(Resident{s, index, freed_seq_, std::chrono::steady_clock::now()});
  if (resident_.size() > 2 * resident_items_ + 64) {  // drop the stale entries
    std::deque<Resident> live;
    for (const Resident& r : resident_) {
      if (StillResident(r)) live.push_back(r);
    }
    resident_.swap(live);
  }
  stats_.free_resident_bytes += s->item_bytes;
}

uint64_t BlockArena::FreeBudget(uint64_t releasing) const {
  const uint64_t live = stats_.live_bytes - releasing;
  return std::max(retain_bytes_, reserve_bytes_ > live ? reserve_bytes_ - live : 0);
}

uint32_t BlockArena::IndexOf(const Piece& piece) {
  return static_cast<uint32_t>(static_cast<size_t>(piece.data - piece.slab->base) /
                               piece.slab->item_bytes);
}

bool BlockArena::StillResident(const Resident& r) const {
  const auto it = slabs_.find(r.slab);
  // (A slab unmapped since, even one mapped again at the same address, never matches: release
  // sequence numbers are never reused.)
  return it != slabs_.end() && r.index < r.slab->freed_at.size() &&
         r.slab->freed_at[r.index] == r.seq;
}

void BlockArena::Release(const Piece& piece) {
  Slab* s = piece.slab;
  const uint32_t index = IndexOf(piece);
  if (decay_ > std::chrono::nanoseconds::zero()) {
    // Resident whatever the budget: the decay thread gives back what stays free too long.
    MutexLock l(&mu_);
    (void)PutBack(s, index, true);  // (never unmaps a slab it just put a resident item in)
    if (stats_.free_resident_bytes <= FreeBudget()) return;
    if (!decay_thread_.joinable()) {
      decay_thread_ = std::jthread([this](std::stop_token stop) { DecayLoop(std::move(stop)); });
    } else if (decay_idle_) {
      decay_cv_.Signal();
    }
    return;
  }
  // Over the budget, the least recently freed resident items are given back to make room for
  // this one (whatever their class: a class no longer asked for must not keep the budget from
  // the one in use); only if that is not enough does this one go back instead.
  std::vector<Piece> older;
  bool resident = false;
  {
    MutexLock l(&mu_);
    const uint64_t budget = FreeBudget(s->item_bytes);
    while (stats_.free_resident_bytes + s->item_bytes > budget && s->item_bytes <= budget &&
           !resident_.empty()) {
      TakeOldestResident(&older);
    }
    if (stats_.free_resident_bytes + s->item_bytes <= budget) {
      resident = true;
      // (PutBack never unmaps a slab it just put a resident item in.)
      (void)PutBack(s, index, true);
    }
  }
  if (!resident) older.push_back(piece);
  GiveBack(older);
}

void BlockArena::TakeOldestResident(std::vector<Piece>* out) {
  const Resident r = resident_.front();
  resident_.pop_front();
  // Taken out of the free lists (counted as in use) while its pages go back, outside the lock:
  // nobody can take it, and its slab cannot be unmapped meanwhile.
  if (StillResident(r)) out->push_back(TakeIndex(r.slab, r.index, /*count=*/false));
}

void BlockArena::GiveBack(const std::vector<Piece>& pieces) {
  if (pieces.empty()) return;
  // The pages go back to the kernel before anyone can reuse the item (the next owner's first
  // write faults in zeroed pages); adjacent items in one call, as each call costs a TLB
  // shootdown on every core the process ran on.
  std::vector<std::pair<std::byte*, size_t>> spans;
  spans.reserve(pieces.size());
  for (const Piece& p : pieces) spans.emplace_back(p.data, p.bytes);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size();) {
    std::byte* const start = spans[i].first;
    std::byte* end = start + spans[i].second;
    for (++i; i < spans.size() && spans[i].first == end; ++i) end += spans[i].second;
    (void)::madvise(start, static_cast<size_t>(end - start), MADV_DONTNEED);
  }
  std::vector<std::unique_ptr<Slab>> drop;
  {
    MutexLock l(&mu_);
    for (const Piece& p : pieces) {
      if (auto d = PutBack(p.slab, IndexOf(p), false)) drop.push_back(std::move(d));
    }
  }
  for (const auto& d : drop) ::munmap(d->base, d->bytes);
}

std::optional<std::chrono::steady_clock::time_point> BlockArena::Trim(
    std::chrono::steady_clock::time_point now) {
  std::vector<Piece> due;
  std::optional<std::chrono::steady_clock::time_point> next;
  {
    MutexLock l(&mu_);
    // (Once: the items on their way back count as live meanwhile.)
    const uint64_t budget = FreeBudget();
    while (stats_.free_resident_bytes > budget && !resident_.empty()) {
      const Resident& r = resident_.front();
      if (StillResident(r) && r.freed + decay_ > now) {
        next = r.freed + decay_;
        break;
      }
      TakeOldestResident(&due);
    }
  }
  GiveBack(due);
  return next;
}

void BlockArena::DecayLoop(std::stop_token stop) {
  (void)::pthread_setname_np(::pthread_self(), "tierfs-arena");
  while (!stop.stop_requested()) {
    const auto next = Trim(std::chrono::steady_clock::now());
    MutexLock l(&mu_);
    if (stop.stop_requested()) return;
    if (next) {
      // At most one pass per fifth of the decay time: the items freed in that time go back
      // together (adjacent ones in one call).
      const auto now = std::chrono::steady_clock::now();
      const auto at = std::max(*next, now + decay_ / 5);
      decay_cv_.WaitFor(at - now);
    } else if (stats_.free_resident_bytes <= FreeBudget()) {
      decay_idle_ = true;
      decay_cv_.Wait();
      decay_idle_ = false;
    }
  }
}

void BlockArena::SetRetain(uint64_t bytes) {
  MutexLock l(&mu_);
  retain_bytes_ = bytes;
  if (decay_idle_) decay_cv_.Signal();
}

void BlockArena::SetReserve(uint64_t bytes) {
  MutexLock l(&mu_);
  reserve_bytes_ = bytes;
  // A smaller reserve may leave free items beyond the budget: the decay thread (or the next
  // release) gives them back.
  if (decay_idle_) decay_cv_.Signal();
}

uint64_t BlockArena::Prefill(size_t capacity, size_t slab_bytes, std::stop_token stop) {
  const size_t item = ClassBytes(capacity);
  if (item == 0) return 0;
  slab_bytes = std::max(SlabBytes(item), (slab_bytes + kUnitBytes - 1) / kUnitBytes * kUnitBytes);
  const size_t page = PageBytes();
  uint64_t added = 0;
  while (!stop.stop_requested()) {
    {
      MutexLock l(&mu_);
      if (stats_.live_bytes + stats_.free_resident_bytes + slab_bytes > reserve_bytes_) break;
    }
    std::unique_ptr<Slab> slab = MapSlab(item, slab_bytes);
    if (!slab) break;
    // Populated by the kernel first (cheaper than a fault per page), then written once per page
    // from user space: under a paravirtualised guest with shadow page tables the first user
    // access to each page still exits to the hypervisor after a populate (1 GiB here: 0.15 s to
    // populate, then 1.5-1.7 s for the first user write, one byte per page, and 0.05 s to copy
    // 1 GiB into it after that), and that is the cost this takes off the readers.
    Populate(slab->base, slab->bytes);
    auto* const p = reinterpret_cast<volatile std::byte*>(slab->base);
    for (size_t o = 0; o < slab->bytes; o += page) p[o] = std::byte{0};
    MutexLock l(&mu_);
    Slab* s = Adopt(std::move(slab));
    const auto items = static_cast<uint32_t>(s->bytes / s->item_bytes);
    s->cold.clear();
    for (uint32_t i = items; i-- > 0;) AddResident(s, i);  // item 0 is taken first
    LinkSpare(s);
    added += static_cast<uint64_t>(items) * s->item_bytes;
  }
  return added;
}

BlockArena::Stats BlockArena::stats() const {
  MutexLock l(&mu_);
  return stats_;
}

}  // namespace tierfs::tiercache_internal
