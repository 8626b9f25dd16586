// The block arena (tiercache/internal/block_arena.h).
#include "tiercache/internal/block_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <utility>

namespace tierfs::tiercache_internal {

struct BlockArena::Slab {
  std::byte* base = nullptr;
  size_t bytes = 0;
  size_t item_bytes = 0;
  uint32_t used = 0;
  // Free item indexes, the most recently freed last: resident ones, and untouched or given back.
  std::vector<uint32_t> warm, cold;
  size_t partial_at = SIZE_MAX;  // position in its class's partial list
  size_t warm_at = SIZE_MAX;     // position in its class's warm list
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

BlockArena::BlockArena(uint64_t retain_bytes) : retain_bytes_(retain_bytes) {}

BlockArena::~BlockArena() {
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

BlockArena::Piece BlockArena::Take(Slab* s) {
  uint32_t index = 0;
  bool fresh = false;
  if (!s->warm.empty()) {
    index = s->warm.back();
    s->warm.pop_back();
    if (s->warm.empty()) Unlink(s, &Class::warm, &Slab::warm_at);
    stats_.free_resident_bytes -= s->item_bytes;
    ++stats_.reused;
  } else {
    index = s->cold.back();
    s->cold.pop_back();
    ++stats_.fresh;
    fresh = true;
  }
  if (s->used++ == 0) --empty_slabs_;
  if (s->free_items() == 0) Unlink(s, &Class::partial, &Slab::partial_at);
  stats_.live_bytes += s->item_bytes;
  return Piece{s->base + static_cast<size_t>(index) * s->item_bytes, s->item_bytes, s, fresh};
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
    if (!c.partial.empty()) piece = Take(c.partial.back());
    slab_bytes = c.slab_bytes;
  }
  if (piece.data == nullptr) piece = AddSlab(item, slab_bytes);
  if (piece.fresh) Populate(piece.data, capacity);
  return piece;
}

BlockArena::Piece BlockArena::AddSlab(size_t item, size_t slab_bytes) {
  // Aligned to a unit: map one unit more and trim both ends.
  void* raw = ::mmap(nullptr, slab_bytes + kUnitBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return {};
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

  MutexLock l(&mu_);
  Slab* s = slab.get();
  s->owner = &ClassFor(item);
  slabs_.emplace(s, std::move(slab));
  stats_.slab_bytes += slab_bytes;
  ++stats_.slabs;
  ++empty_slabs_;
  Link(s, &Class::partial, &Slab::partial_at);
  return Take(s);
}

std::unique_ptr<BlockArena::Slab> BlockArena::PutBack(Slab* s, uint32_t index, bool resident) {
  stats_.live_bytes -= s->item_bytes;
  --s->used;
  if (s->free_items() == 0) Link(s, &Class::partial, &Slab::partial_at);
  if (resident) {
    if (s->warm.empty()) Link(s, &Class::warm, &Slab::warm_at);
    s->warm.push_back(index);
    stats_.free_resident_bytes += s->item_bytes;
  } else {
    s->cold.push_back(index);
  }
  if (s->used != 0) return nullptr;
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

void BlockArena::Release(const Piece& piece) {
  Slab* s = piece.slab;
  const auto index =
      static_cast<uint32_t>(static_cast<size_t>(piece.data - s->base) / s->item_bytes);
  std::unique_ptr<Slab> drop;
  {
    MutexLock l(&mu_);
    if (stats_.free_resident_bytes + s->item_bytes <= retain_bytes_) {
      drop = PutBack(s, index, true);
      if (!drop) return;
    }
  }
  if (!drop) {
    // Over the retained budget: the pages go back to the kernel before anyone can reuse the
    // item (the next owner's first write faults in zeroed pages).
    (void)::madvise(piece.data, piece.bytes, MADV_DONTNEED);
    MutexLock l(&mu_);
    drop = PutBack(s, index, false);
  }
  if (drop) ::munmap(drop->base, drop->bytes);
}

BlockArena::Stats BlockArena::stats() const {
  MutexLock l(&mu_);
  return stats_;
}

}  // namespace tierfs::tiercache_internal
