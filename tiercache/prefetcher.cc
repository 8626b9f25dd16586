#include "tiercache/prefetcher.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace tierfs {

Prefetcher::Prefetcher(const PrefetcherOptions& options, TieredCache* cache, Catalog* catalog)
    : options_(options), cache_(cache), catalog_(catalog) {}

// A directory of small files read one after another (a `cat dir/*`, a loader walking its
// samples, even in shuffled order) would otherwise pay one origin round trip per file, each in
// turn. After the second small-file open in a directory, each open queues the next files of the
// listing that no host tier holds yet: the cache skips what is already being fetched, and a full
// prefetch queue drops the rest, so this never holds up a reader.
void Prefetcher::OnOpen(const ObjectRef& opened) {
  if (options_.next_files <= 0 || opened.info.size > options_.next_files_max_bytes) return;
  const std::string& path = opened.key;
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash);
  const std::string_view name = slash == std::string::npos
                                    ? std::string_view(path)
                                    : std::string_view(path).substr(slash + 1);
  {
    MutexLock l(&next_mu_);
    auto it = small_opens_.find(dir);
    if (it == small_opens_.end()) {
      if (small_opens_.size() >= kMaxNextDirs) small_opens_.clear();  // crude, bounded
      small_opens_.emplace(dir, 1);
      return;
    }
    if (it->second < 2) ++it->second;
    if (it->second < 2) return;
  }
  std::vector<DirEntry> next;
  Status s = catalog_->ReadDir(dir, name, static_cast<size_t>(options_.next_files), &next);
  if (!s.ok()) return;  // the open itself succeeded; this is only a hint
  const uint64_t bs = cache_->block_size();
  if (bs == 0) return;
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
    ++stats_.next_file_prefetches;
  }
}

// Sequential detector: a read that starts near the end of the previous ones (the kernel issues
// readahead asynchronously, so neighbours may arrive slightly out of order) doubles the window
// up to readahead_max_bytes; any other read is a seek and resets it. New blocks are asked for in
// steps of at least min(a readahead run, half the window), so that once the window is full the
// cache gets whole runs (one origin request each) rather than one block per read.
void Prefetcher::OnRead(Stream* st, uint64_t offset, uint64_t size) {
  if (options_.readahead_max_bytes == 0 || size == 0) return;
  const uint64_t bs = cache_->block_size();
  if (bs == 0) return;
  const uint64_t nblocks = (st->obj_.info.size + bs - 1) / bs;
  const uint64_t end_block = (offset + size - 1) / bs;  // last block this read touches
  uint64_t first = 0, count = 0;
  {
    MutexLock l(&st->mu_);
    const uint64_t slack = 2 * bs;
    const bool sequential =
        st->reads_ == 0 ? offset == 0
                        : offset + slack >= st->next_offset_ && offset <= st->next_offset_ + slack;
    ++st->reads_;
    st->next_offset_ = std::max(st->next_offset_, offset + size);
    if (!sequential) {
      st->window_ = 0;
      st->prefetched_until_ = end_block + 1;
      return;
    }
    st->window_ = st->window_ == 0 ? std::min(2 * bs, options_.readahead_max_bytes)
                                   : std::min(2 * st->window_, options_.readahead_max_bytes);
    const uint64_t want_until = std::min(nblocks, end_block + 1 + st->window_ / bs);
    first = std::max(st->prefetched_until_, end_block + 1);
    if (want_until <= first) return;
    count = want_until - first;
    const uint64_t step = std::max<uint64_t>(
        1, std::min<uint64_t>(cache_->readahead_run_blocks(), st->window_ / bs / 2));
    if (count < step && want_until < nblocks) return;  // wait for a whole step
    st->prefetched_until_ = want_until;
  }
  ++stats_.readahead_requests;
  cache_->Prefetch(st->obj_, first, count);
}

}  // namespace tierfs
