// Prefetcher — what a reader will want next, guessed from what it reads: per-file readahead for
// sequential reads, and the next files of a directory whose small files are read one after
// another. It decides which blocks to ask for; TieredCache::Prefetch fetches them in the
// background (its bounded queue and pool, below demand reads). fuse/ calls it on every open and
// read; it knows no FUSE types.
//
// (Not the deep prefetch jobs of user.tierfs.prefetch: tiercache/prefetch_jobs.h.)
//
// Thread-safe; no external synchronization needed. Stream::mu_, Hydration::mu, next_mu_ and
// hydration_mu_ are leaves; no lock is held across a TieredCache or Catalog call.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "base/mutex.h"
#include "tiercache/catalog.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {

struct PrefetcherOptions {
  // Upper bound of the per-file readahead window; the window starts at two blocks and doubles
  // while reads stay sequential, up to this and to what the cache keeps until the reader gets
  // there (TieredCache::readahead_window_bytes: a quarter of L1). 0 disables readahead.
  // (cache.readahead_max.)
  uint64_t readahead_max_bytes = 64ULL << 20;
  // Small files read one after another: once two files of at most next_files_max_bytes were
  // opened in one directory (and the last handle there that read its file read it from its start,
  // not in ranges: Stream::Hint),
  // opened in one directory, every further open there prefetches the next `next_files` files of
  // the listing (byte order) that are that small and that no host tier holds (in a warm
  // directory only now and then: kWarmDirectoryRecheck). 0 disables it.
  // While `guided` returns true (a loader hands tierfs its exact order: a prefetch list job runs,
  // tiercache/prefetch_jobs.h), next-files prefetch steps aside. Unset: never.
  int next_files = 16;
  uint64_t next_files_max_bytes = 4ULL << 20;
  std::function<bool()> guided;
  // Dense random reads of one large file (at least kHydrateMinBlocks blocks): once a stream's
  // random (non-sequential) reads missed the host tiers this many times in a row (a projected
  // read under kHydrateReadBytes, TieredCache::ReadsSparse, starts the count again; such reads
  // hydrate the file only when its readers keep on with them: once they read a third of it, or
  // page-sized ones kDenseProjectedMisses times, counted over all the file's open streams),
  // the rest of the file is fetched in the background, in readahead runs from the start, at most
  // hydrate_runs runs not yet landed in a host tier at a time (daemon/: min(cache.prefetch_threads,
  // 8), the runs the pool fetches at once, so the readahead queue never overflows). One hydration
  // per file, however many streams read it. 0 disables it. (cache.random_hydrate_misses.)
  int random_hydrate_misses = 4;
  int hydrate_runs = 8;
};

struct PrefetcherStats {
  std::atomic<uint64_t> readahead_requests{0};    // TieredCache::Prefetch calls by readahead
  std::atomic<uint64_t> next_file_prefetches{0};  // files queued by the next-files prefetch
  // Small-file opens in directories read file after file (from the second on), and those of
  // them that found the file in a host tier already (fetched ahead, or read before).
  std::atomic<uint64_t> next_file_opens{0};
  std::atomic<uint64_t> next_file_hits{0};
  std::atomic<uint64_t> random_hydrations{0};  // files whose random misses hydrate them
};

class Prefetcher {
 public:
  // Random-read hydration of one version of a file (PrefetcherOptions::random_hydrate_misses),
  // shared by every stream that reads it while one is open: a loader's workers (or fio's jobs)
  // each open the file, and together they are one dense random reader of it.
  struct Hydration {
    Mutex mu;                                     // leaf
    uint64_t page_misses GUARDED_BY(mu) = 0;      // projected seeks of a page or two that missed
    uint64_t projected_bytes GUARDED_BY(mu) = 0;  // bytes of the small projected seeks that missed
    bool hydrating GUARDED_BY(mu) = false;
    // Started by the bytes of small projected misses (a reader of ranges): blocks with sparse
    // entries are fetched by their gaps (BlockFill::kGaps).
    bool gaps GUARDED_BY(mu) = false;
    bool pumping GUARDED_BY(mu) = false;  // one reader advances the cursor at a time
    uint64_t landed GUARDED_BY(mu) = 0;   // blocks before it are held (or were)
    uint64_t cursor GUARDED_BY(mu) = 0;   // first block not yet asked for
    bool redo GUARDED_BY(mu) = false;     // the queue dropped some: ask again
    uint32_t stalled GUARDED_BY(mu) = 0;  // pumps in a row that saw nothing land
    // The file's bytes taken from the room for hydrations (HydrationRoom) once it started;
    // given back when the last stream reading the file lets go of this state.
    std::shared_ptr<std::atomic<uint64_t>> room;
    uint64_t reserved GUARDED_BY(mu) = 0;

    Hydration() = default;
    Hydration(const Hydration&) = delete;
    Hydration& operator=(const Hydration&) = delete;
    ~Hydration();
  };

  // The readahead state of one open file (one version of one object): its sequential-read
  // detector. One per open handle; thread-safe.
  class Stream {
   public:
    explicit Stream(ObjectRef obj) : obj_(std::move(obj)) {}
    const ObjectRef& object() const { return obj_; }
    // How this handle reads its file, for TieredCache::Read after OnRead: kRanges once its first
    // read was not at offset 0 or one of its reads was a seek (not where readahead expected it).
    ReadHint Hint() EXCLUDES(mu_) {
      MutexLock l(&mu_);
      return ranges_ ? ReadHint::kRanges : ReadHint::kWhole;
    }

   private:
    friend class Prefetcher;
    const ObjectRef obj_;
    Mutex mu_;
    uint64_t reads_ GUARDED_BY(mu_) = 0;
    uint64_t next_offset_ GUARDED_BY(mu_) = 0;       // end of the furthest read so far
    uint64_t window_ GUARDED_BY(mu_) = 0;            // readahead window in bytes; 0: a seek
    uint64_t prefetched_until_ GUARDED_BY(mu_) = 0;  // first block not yet asked for
    uint32_t random_misses_ GUARDED_BY(mu_) = 0;     // random misses in a row (not projected)
    bool ranges_ GUARDED_BY(mu_) = false;            // Hint(): a range reader
    // The file's hydration state, from the stream's first seek that missed on.
    std::shared_ptr<Hydration> hydration_ GUARDED_BY(mu_);
  };

  // `cache` and `catalog` are not owned and must outlive the Prefetcher.
  Prefetcher(const PrefetcherOptions& options, TieredCache* cache, Catalog* catalog);
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // An open of `obj` (next-files prefetch of its directory).
  void OnOpen(const ObjectRef& obj) EXCLUDES(next_mu_);
  // A read of [offset, offset + size) through `stream`, before it is served; REQUIRES: size > 0
  // and offset + size <= the object's size. Asks the cache for the blocks ahead when reads are
  // sequential, and the rest of the file when random reads keep missing (random_hydrate_misses).
  void OnRead(Stream* stream, uint64_t offset, uint64_t size);

  const PrefetcherStats& Stats() const { return stats_; }
  // The last window's verdict on the next-files guesses (TieredCache::SetGuessesProven).
  bool GuessesProven() const { return guesses_proven_.load(); }

  // Files smaller than this many blocks are never hydrated on random misses.
  static constexpr uint64_t kHydrateMinBlocks = 8;
  // Nor is a file that the host tiers would not keep until its readers come back to it: the
  // files hydrating at once, this one too, take at most 1/kHydrateRoomShare of the host tier
  // that holds the most (L2, or L1 when it is larger: TieredCache::HostCapacityBytes). A random
  // reader of a file larger than that would have its blocks fetched, evicted before it reads
  // them and fetched again (2.4x the bytes for 40% of a file of 4x L2 in ranges, 38x for 2% of
  // it in 4 KiB reads); it keeps reading what it asks for instead.
  static constexpr uint64_t kHydrateRoomShare = 2;
  // Random misses of projected reads smaller than this do not count towards hydration (they
  // reset the count): a column reader's ranges (16-64 KiB), not a dense random reader's (a
  // ResNet-50 record file's 112 KiB samples, fio's 128 KiB reads), which hydration serves.
  static constexpr uint64_t kHydrateReadBytes = 96 << 10;
  // ... unless the file's readers keep on with them. What hydration costs is the bytes of the
  // file its readers would not read; what it saves is a round trip per read. Such misses of
  // ranges (larger than kPageReadBytes) hydrate the file once they have read a
  // 1/kHydrateShare of it: a reader of a quarter of the file moves about what it reads however
  // many reads it takes, one of most of it is hydrated (and fetches only the gaps between what
  // it read, OriginFetcher::FillGaps).
  static constexpr uint64_t kHydrateShare = 3;
  // Misses of reads of at most kPageReadBytes (fio's 4 KiB random reads of a large file: a round
  // trip per page, far below the origin's bandwidth) hydrate it after kDenseProjectedMisses (or
  // a quarter of the file's blocks, if more) of them. A column reader's ranges are larger: an
  // unaligned 16 KiB range is at least three pages the kernel lacks.
  static constexpr uint64_t kPageReadBytes = 8 << 10;
  static constexpr uint64_t kDenseProjectedMisses = 256;
  // Reads of a hydrating stream without a block landing after which the outstanding blocks are
  // asked for again.
  static constexpr uint32_t kHydrateStallReads = 256;
  // In a warm directory (the last look at the next files found them all held), opens of files a
  // host tier holds do not look again (a listing read and a block lookup per file and tier, on
  // every open of a warm epoch), except every kWarmDirectoryRecheck + 1-th; an open of a file
  // no host tier holds looks at once.
  static constexpr uint32_t kWarmDirectoryRecheck = 32;
  // The next-files guesses are proven read (TieredCache::SetGuessesProven: readahead then takes
  // every prefetch thread while readers wait) after a window of kProvenWindow small-file opens in
  // pattern directories of which at least 1/kProvenShare found the file held; each window decides
  // anew. A shuffled loader's cold epoch gets there once a quarter of the dataset is in, after its
  // first batches: until then its GETs wait behind 16 guesses at most, as before.
  static constexpr uint64_t kProvenWindow = 64;
  static constexpr uint64_t kProvenShare = 4;

 private:
  // What one read does to its stream (Advance).
  struct ReadStep {
    bool seek = false;  // not sequential: the window starts again
    // The read that told how the handle reads: its first, at offset 0 (from the start), or the
    // one that made it a range reader (Stream::Hint).
    bool from_start = false, became_ranges = false;
    uint64_t first = 0, count = 0;         // blocks readahead asks for now (count 0: none)
    std::shared_ptr<Hydration> hydration;  // the file's, once the stream has one
  };
  // The stream's sequential-read detector and readahead window, for a read of
  // [offset, offset + size) of a file of `nblocks` blocks.
  ReadStep Advance(Stream* st, uint64_t offset, uint64_t size, uint64_t nblocks, bool projected);
  // Counts a random miss towards the file's hydration; true when it starts it.
  // `small_projected`: the miss's bytes when it is a small projected read, else 0.
  bool CountRandomMiss(Stream* st, Hydration* h, uint64_t nblocks, uint64_t small_projected);
  // Takes `size` bytes from the room for hydrations if they fit (1/kHydrateRoomShare of
  // `capacity`, TieredCache::HostCapacityBytes); true when they did.
  bool TakeHydrationRoom(uint64_t size, uint64_t capacity);
  // Advances the hydration of `obj` (of nblocks blocks): moves past the blocks that landed, asks
  // for new runs while fewer than hydrate_runs runs are outstanding.
  void PumpHydration(Hydration* h, const ObjectRef& obj, uint64_t nblocks);
  // The hydration state of `obj`'s version that its open streams share (a new one if none is).
  std::shared_ptr<Hydration> HydrationOf(const ObjectRef& obj) EXCLUDES(hydration_mu_);
  // A handle of a small file `obj` read it from its start, or as a range reader (`ranges`).
  void NoteHowRead(const ObjectRef& obj, bool ranges) EXCLUDES(next_mu_);

  const PrefetcherOptions options_;
  TieredCache* const cache_;
  Catalog* const catalog_;
  PrefetcherStats stats_;

  // Next-files state of a directory whose small files are being opened.
  struct NextDir {
    uint32_t opens = 0;  // small-file opens seen, up to 2 (the pattern starts at the second)
    // The last look at the next files found every one held (a warm directory): opens of files
    // a host tier holds skip the look, up to kWarmDirectoryRecheck of them in a row.
    bool warm = false;
    uint32_t warm_skips = 0;
    // The last handle that told read ranges of its file (Stream::Hint): the next files are not
    // prefetched (a column reader of a directory of Parquet files reads a part of each).
    bool ranges = false;
  };
  // At most kMaxNextDirs directories.
  static constexpr size_t kMaxNextDirs = 256;
  Mutex next_mu_;  // leaf
  std::unordered_map<std::string, NextDir> next_dirs_ GUARDED_BY(next_mu_);
  uint64_t window_opens_ GUARDED_BY(next_mu_) = 0;  // opens counted in this proven window
  uint64_t window_held_ GUARDED_BY(next_mu_) = 0;   // those that found the file held
  std::atomic<bool> guesses_proven_{false};

  // Hydration states by file version (key and BlockVersion); an entry lives while a stream holds
  // it. Expired entries are swept when the map reaches hydration_sweep_at_ (then twice the
  // entries left, at least kHydrationSweepMin): bounded by the files open with random reads.
  static constexpr size_t kHydrationSweepMin = 256;
  Mutex hydration_mu_;  // leaf
  std::unordered_map<std::string, std::weak_ptr<Hydration>> hydrations_ GUARDED_BY(hydration_mu_);
  size_t hydration_sweep_at_ GUARDED_BY(hydration_mu_) = kHydrationSweepMin;
  // The sizes of the files hydrating now (Hydration::reserved); shared with each Hydration,
  // which may outlive the Prefetcher in a stream.
  const std::shared_ptr<std::atomic<uint64_t>> hydration_room_ =
      std::make_shared<std::atomic<uint64_t>>(0);
};

}  // namespace tierfs
