#include "tiercache/prefetcher.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/strings.h"
#include "tiercache/tier.h"

namespace tierfs {

Prefetcher::Prefetcher(const PrefetcherOptions& options, TieredCache* cache, Catalog* catalog)
    : options_(options), cache_(cache), catalog_(catalog) {}

// A directory of small files read one after another (a `cat dir/*`, a loader walking its
// samples, even in shuffled order) would otherwise pay one origin round trip per file, each in
// turn. After the second small-file open in a directory, each open queues the next files of the
// listing that no host tier holds yet: the cache skips what is already being fetched, and a full
// prefetch queue drops the rest, so this never holds up a reader. Once a look found all of them
// held, the directory is warm, and opens of held files skip the look (a listing read and a block
// lookup per file and tier each) but for every kWarmDirectoryRecheck + 1-th. Whether the opened
// files were held tells the cache, a window of opens at a time, if the guesses are read
// (kProvenWindow).
void Prefetcher::OnOpen(const ObjectRef& opened) {
  if (options_.next_files <= 0 || opened.info.size > options_.next_files_max_bytes) return;
  const std::string& path = opened.key;
  const auto [dir_part, name] = SplitPath(path);
  const std::string dir(dir_part);
  // Whether the opened file was fetched ahead (or read before): how the guesses do.
  const bool held = cache_->HostHolds(opened, 0, 1);
  bool warm = false;
  std::optional<bool> proven;
  {
    MutexLock l(&next_mu_);
    auto it = next_dirs_.find(dir);
    if (it == next_dirs_.end()) {
      if (next_dirs_.size() >= kMaxNextDirs) next_dirs_.clear();  // crude, bounded
      next_dirs_[dir].opens = 1;
      return;
    }
    NextDir& d = it->second;
    if (d.opens < 2) ++d.opens;
    if (d.opens < 2 || d.ranges) return;
    warm = d.warm && d.warm_skips < kWarmDirectoryRecheck;
    if (warm) ++d.warm_skips;
    ++window_opens_;
    if (held) ++window_held_;
    if (window_opens_ == kProvenWindow) {
      proven = window_held_ * kProvenShare >= window_opens_;
      window_opens_ = window_held_ = 0;
    }
  }
  ++stats_.next_file_opens;
  if (held) ++stats_.next_file_hits;
  if (proven) {
    guesses_proven_ = *proven;
    cache_->SetGuessesProven(*proven);
  }
  if (warm && held) return;
  // The loader names what it reads next (a list job): the next files of the listing are a guess
  // that would only compete with it at the origin.
  if (options_.guided && options_.guided()) return;
  std::vector<DirEntry> next;
  Status s = catalog_->ReadDir(dir, name, static_cast<size_t>(options_.next_files), &next);
  if (!s.ok()) return;  // the open itself succeeded; this is only a hint
  const uint64_t bs = cache_->block_size();
  if (bs == 0) return;
  uint64_t queued = 0;
  for (const DirEntry& e : next) {
    if (e.type != EntryType::kFile || e.size == 0 || e.size > options_.next_files_max_bytes) {
      continue;
    }
    ObjectRef obj;
    obj.key = dir.empty() ? e.name : dir + "/" + e.name;
    obj.info.size = e.size;
    obj.info.etag = e.etag;
    obj.info.mtime_ns = e.mtime_ns;
    // Only what no host tier holds: copying L2 blocks up to L1 for files that may never be
    // read would churn L1 (a shuffled reader of a warm directory would read 16x from flash).
    if (cache_->HostHolds(obj, 0, 1)) continue;
    cache_->Prefetch(obj, 0, (e.size + bs - 1) / bs);
    ++queued;
  }
  stats_.next_file_prefetches += queued;
  MutexLock l(&next_mu_);
  auto it = next_dirs_.find(dir);
  if (it == next_dirs_.end()) return;  // cleared meanwhile
  it->second.warm = queued == 0;
  it->second.warm_skips = 0;
}

// Sequential detector: a read that starts near the end of the previous ones (the kernel issues
// readahead asynchronously, so neighbours may arrive slightly out of order) doubles the window
// up to readahead_max_bytes; any other read is a seek and resets it. A projected read
// (TieredCache::ReadsSparse) is sequential only where the previous read ended. New blocks are asked
// for in steps of at least min(a readahead run, half the window), so that once the window is full
// the cache gets whole runs (one origin request each) rather than one block per read.
//
// Random reads that keep missing across one large file (a shuffled reader of records inside
// it) would each pay a round trip at a few MiB per request, far below the origin's bandwidth:
// after random_hydrate_misses such seeks the file is hydrated behind its readers, as a
// sequential reader's readahead would (PumpHydration). Projected reads (small ones, which
// fetch only what they read) do not count: reading a few columns of a file is not a sign that
// the rest will be read. Readers whose misses of them read a third of the file (or, reading a
// page or two at a time, kDenseProjectedMisses of them), counted over all the streams open on
// the file (only misses count, so a column reader's passes over the same ranges count once
// however many handles it uses), are a dense random reader after all, and the file is hydrated:
// only the gaps between what they read are fetched.
void Prefetcher::OnRead(Stream* st, uint64_t offset, uint64_t size) {
  if (size == 0) return;
  const uint64_t bs = cache_->block_size();
  if (bs == 0) return;
  const uint64_t nblocks = (st->obj_.info.size + bs - 1) / bs;
  const bool hydrate_on = options_.random_hydrate_misses > 0 && options_.hydrate_runs > 0 &&
                          nblocks >= kHydrateMinBlocks;
  const bool projected = cache_->ReadsSparse(st->obj_, offset, size, st->Hint());
  const ReadStep step = Advance(st, offset, size, nblocks, projected);
  if ((step.from_start || step.became_ranges) &&
      st->obj_.info.size <= options_.next_files_max_bytes) {
    NoteHowRead(st->obj_, step.became_ranges);
  }
  if (step.count > 0) {
    ++stats_.readahead_requests;
    cache_->Prefetch(st->obj_, step.first, step.count);
  }
  std::shared_ptr<Hydration> h = step.hydration;
  bool pump = false;
  if (h) {
    MutexLock l(&h->mu);
    pump = h->hydrating;
  }
  // A seek that the host tiers cannot serve (asked before the read is served, so the read's own
  // fetch has not filled them yet) counts towards hydration.
  if (step.seek && hydrate_on && !pump && !cache_->HostHolds(st->obj_, offset, size)) {
    if (!h) {
      std::shared_ptr<Hydration> fresh = HydrationOf(st->obj_);
      MutexLock l(&st->mu_);
      if (!st->hydration_) st->hydration_ = std::move(fresh);
      h = st->hydration_;
    }
    pump = CountRandomMiss(st, h.get(), nblocks, projected && size < kHydrateReadBytes ? size : 0);
    if (pump) ++stats_.random_hydrations;
  }
  if (pump) PumpHydration(h.get(), st->obj_, nblocks);
}

// The stream's sequential-read detector: whether this read is a seek, and the blocks readahead
// asks for now (a count of 0: none).
Prefetcher::ReadStep Prefetcher::Advance(Stream* st, uint64_t offset, uint64_t size,
                                         uint64_t nblocks, bool projected) {
  const uint64_t bs = cache_->block_size();
  const uint64_t end_block = (offset + size - 1) / bs;  // last block this read touches
  ReadStep step;
  MutexLock l(&st->mu_);
  const uint64_t slack = 2 * bs;
  // A projected read (small, fetched alone) continues a stream only where the last one ended:
  // a column reader's ranges land within a few blocks of each other without being a scan.
  const bool sequential =
      st->reads_ == 0 ? offset == 0
      : projected     ? offset == st->next_offset_
                      : offset + slack >= st->next_offset_ && offset <= st->next_offset_ + slack;
  step.from_start = st->reads_ == 0 && offset == 0;
  ++st->reads_;
  st->next_offset_ = std::max(st->next_offset_, offset + size);
  step.hydration = st->hydration_;
  if (!sequential && !st->ranges_) {  // (the first read, too, unless at offset 0)
    st->ranges_ = true;
    step.became_ranges = true;
  }
  if (!sequential) {
    step.seek = true;
    st->window_ = 0;
    st->prefetched_until_ = end_block + 1;
  } else if (options_.readahead_max_bytes != 0 &&
             st->obj_.info.size > cache_->small_object_bytes()) {
    // (A small object needs none: its first demand miss fetches it whole.)
    // Never more than the cache keeps until the reader gets there (at least one block).
    const uint64_t max_window =
        std::max(bs, std::min(options_.readahead_max_bytes, cache_->readahead_window_bytes()));
    st->window_ = std::min(st->window_ == 0 ? 2 * bs : 2 * st->window_, max_window);
    const uint64_t want_until = std::min(nblocks, end_block + 1 + st->window_ / bs);
    const uint64_t first = std::max(st->prefetched_until_, end_block + 1);
    if (want_until > first) {
      const uint64_t run = std::max<uint64_t>(
          1, std::min<uint64_t>(cache_->readahead_run_blocks(), st->window_ / bs / 2));
      if (want_until - first >= run || want_until >= nblocks) {  // else wait for a whole step
        step.first = first;
        step.count = want_until - first;
        st->prefetched_until_ = want_until;
      }
    }
  }
  return step;
}

// Counts a random miss of `st` towards the hydration of its file; true when it starts the
// hydration. A small projected one (`small_projected`: its bytes; TieredCache::ReadsSparse, under
// kHydrateReadBytes: a column reader's range, which fetches only what it reads) starts the
// stream's count of random misses again instead: a reader of a fraction of the file is not
// hydrated into reading all of it because the kernel made a few of its reads larger. Such misses
// count, over all the file's streams, by their bytes (a 1/kHydrateShare of the file) or, for
// page-sized ones, by their number (kDenseProjectedMisses).
Prefetcher::Hydration::~Hydration() {
  if (room) room->fetch_sub(reserved);  // (no other owner left: no lock needed)
}

bool Prefetcher::TakeHydrationRoom(uint64_t size, uint64_t capacity) {
  const uint64_t room = capacity / kHydrateRoomShare;
  uint64_t taken = hydration_room_->load();
  do {
    if (size > room || taken > room - size) return false;
  } while (!hydration_room_->compare_exchange_weak(taken, taken + size));
  return true;
}

bool Prefetcher::CountRandomMiss(Stream* st, Hydration* h, uint64_t nblocks,
                                 uint64_t small_projected) {
  // (Before any lock: no lock is held across a TieredCache call.)
  const uint64_t capacity = cache_->HostCapacityBytes();
  bool in_a_row = false;
  {
    MutexLock l(&st->mu_);
    if (small_projected > 0) {
      st->random_misses_ = 0;
    } else {
      in_a_row = ++st->random_misses_ >= static_cast<uint32_t>(options_.random_hydrate_misses);
    }
  }
  MutexLock l(&h->mu);
  if (h->hydrating || h->cursor >= nblocks) return false;
  bool start = in_a_row;
  if (small_projected > 0) {
    h->projected_bytes += small_projected;
    if (small_projected <= kPageReadBytes) ++h->page_misses;
    h->gaps = kHydrateShare * h->projected_bytes >= st->obj_.info.size;
    start = h->gaps || h->page_misses >= std::max(kDenseProjectedMisses, nblocks / 4);
  }
  if (!start) return false;
  const uint64_t size = st->obj_.info.size;
  if (!TakeHydrationRoom(size, capacity)) return false;  // asked again at its next miss
  h->room = hydration_room_;
  h->reserved = size;
  h->hydrating = true;
  return true;
}

void Prefetcher::NoteHowRead(const ObjectRef& obj, bool ranges) {
  const std::string dir(SplitPath(obj.key).first);
  MutexLock l(&next_mu_);
  auto it = next_dirs_.find(dir);
  if (it != next_dirs_.end()) it->second.ranges = ranges;
}

std::shared_ptr<Prefetcher::Hydration> Prefetcher::HydrationOf(const ObjectRef& obj) {
  // Length-prefixed key, then the version: no two (key, version) pairs give one id.
  const std::string id = std::to_string(obj.key.size()) + ':' + obj.key + BlockVersion(obj.info);
  MutexLock l(&hydration_mu_);
  std::weak_ptr<Hydration>& slot = hydrations_[id];
  if (std::shared_ptr<Hydration> h = slot.lock()) return h;
  auto h = std::make_shared<Hydration>();
  slot = h;
  if (hydrations_.size() >= hydration_sweep_at_) {
    std::erase_if(hydrations_, [](const auto& kv) { return kv.second.expired(); });
    hydration_sweep_at_ = std::max(kHydrationSweepMin, 2 * hydrations_.size());
  }
  return h;
}

// The hydration cursor walks the file from its start in readahead runs (one origin request
// each; TieredCache::Prefetch skips what is held or in flight). Blocks asked for but not yet in
// a host tier are outstanding; at most hydrate_runs runs are, which fits the readahead queue
// (prefetch_threads runs never exceed the readahead budget) and leaves demand reads first in
// line at the origin. Reads of the file's streams drive it: each one moves past the blocks that
// landed and asks for new runs. Outstanding blocks are asked for again when a full queue dropped
// some, or after kHydrateStallReads reads without progress (evicted before they were seen; what
// is queued or in flight is not fetched twice, it only takes queue room once more).
void Prefetcher::PumpHydration(Hydration* h, const ObjectRef& obj, uint64_t nblocks) {
  uint64_t landed = 0, cursor = 0;
  bool redo = false;
  BlockFill fill = BlockFill::kWhole;
  {
    MutexLock l(&h->mu);
    if (!h->hydrating || h->pumping) return;
    h->pumping = true;
    landed = h->landed;
    cursor = h->cursor;
    redo = h->redo;
    if (h->gaps) fill = BlockFill::kGaps;
  }
  const uint64_t bs = cache_->block_size();
  const uint64_t size = obj.info.size;
  auto held = [&](uint64_t block) {
    return cache_->HostHolds(obj, block * bs, std::min(bs, size - block * bs));
  };
  uint64_t dropped = 0;
  // Asks for the blocks of [first, end) that no host tier holds (a block only L2 holds stays
  // there: Prefetch would read it into L1).
  auto ask = [&](uint64_t first, uint64_t end) {
    uint64_t from = first;
    for (uint64_t i = first; i <= end; ++i) {
      if (i == end || held(i)) {
        if (i > from) dropped += cache_->Prefetch(obj, from, i - from, fill);
        from = i + 1;
      }
    }
  };
  const uint64_t run = std::max<uint64_t>(1, cache_->readahead_run_blocks());
  const uint64_t limit = run * static_cast<uint64_t>(options_.hydrate_runs);
  const uint64_t landed_before = landed;
  while (landed < cursor && held(landed)) ++landed;
  uint32_t stalled = 0;
  {
    MutexLock l(&h->mu);
    stalled = landed == landed_before && landed < cursor ? h->stalled + 1 : 0;
  }
  if (landed < cursor && (redo || stalled >= kHydrateStallReads)) {
    ask(landed, cursor);  // a full queue dropped some, or they were evicted before seen
    stalled = 0;
  }
  while (cursor < nblocks) {
    if (cursor == landed && held(cursor)) {  // already there (read before, or by another)
      ++cursor;
      ++landed;
      continue;
    }
    const uint64_t n = std::min(run, nblocks - cursor);
    if (cursor - landed + n > limit) break;  // wait for earlier runs to land
    ask(cursor, cursor + n);
    cursor += n;
  }
  MutexLock l(&h->mu);
  h->landed = landed;
  h->cursor = cursor;
  h->redo = dropped > 0;
  h->stalled = stalled;
  h->pumping = false;
  if (landed >= nblocks) h->hydrating = false;  // done: the cursor at the end stops it for good
}

}  // namespace tierfs
