// Catalog (catalog.h): directory listings of the source, cached in MetaStore.
//
// Keys: a directory's dir_key is Describe() + "\n" + path ("" for the root), so several sources
// share one MetaStore without colliding (tiercache/FORMAT.md). Freshness is the age of the
// directory record (listed_at_ns, wall clock) against metadata_ttl; kForever never expires.
//
// A directory is (re)listed when its record is missing or stale; concurrent refreshes of one
// directory are merged (single-flight), and the leader re-reads the record first. Before a
// directory other than the root is listed for the first time or refreshed, its parent's listing
// must show it as a directory: a path that is not a directory of the source is NotFound rather
// than an empty listing. When the origin fails and a stale listing exists, the stale listing is
// served (with a warning): availability over freshness for a read-only cache.
//
// Stale-while-revalidate: EnsureListing serves a stale record at once and queues the directory
// for the refresher thread; `queued_` holds each directory at most once (queued or running), so a
// burst of lookups of one stale directory costs one listing. The refresher runs the same
// single-flight Refresh as a synchronous miss, so the two never list one directory twice at once.
//
// Snapshots: `snapshots_` maps a directory to a weak_ptr of its last snapshot and the
// listed_at_ns it was read at; a snapshot is shared while the record is unchanged and someone
// still holds it. The catalog's own writes to a directory's entries forget its snapshot.
//
// A full metadata store (LMDB map full, NoSpace) never fails a lookup: a listing that cannot be
// stored is kept in an in-memory MetaStore (`overflow_`) and served from there, bounded by
// kMaxOverflowEntries (the oldest overflow listings are dropped first and simply listed again on
// their next use). StoreFor() picks the store that holds a directory; the next refresh that the
// metadata store accepts moves the directory back.
#include "tiercache/catalog.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "base/logging.h"
#include "base/memory.h"
#include "base/mutex.h"
#include "base/strings.h"
#include "base/thread_pool.h"
#include "base/units.h"
#include "tiercache/internal/listing_memory.h"
#include "tiercache/single_flight.h"

namespace tierfs {
namespace {

bool ValidName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// Names a POSIX directory listing cannot carry safely: longer than NAME_MAX (255 bytes, the
// kernel refuses to look them up) or holding an ASCII control character (0x01-0x1f, 0x7f: a
// newline in a name breaks every line-oriented tool, an escape sequence garbles terminals).
// They are hidden from listings, with a log line.
constexpr size_t kMaxNameBytes = 255;
bool UnsafeName(std::string_view name) {
  return name.size() > kMaxNameBytes || std::any_of(name.begin(), name.end(), [](char c) {
           return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
         });
}

// The origin's owner and mode (file://) onto a directory entry.
void SetOwner(const Ownership& owner, DirEntry* e) {
  e->owner_known = owner.known;
  e->uid = owner.uid;
  e->gid = owner.gid;
  e->mode = owner.mode & 0777;
}

// Paths are relative, without leading/trailing '/' and without empty, "." or ".." components.
bool ValidPath(std::string_view path) {
  if (path.empty()) return true;
  while (true) {
    size_t slash = path.find('/');
    if (!ValidName(path.substr(0, slash))) return false;
    if (slash == std::string_view::npos) return true;
    path.remove_prefix(slash + 1);
  }
}

// Thread-safe; no external synchronization needed.
class CatalogImpl final : public Catalog {
 public:
  CatalogImpl(const CatalogOptions& options, BlobStore* origin, MetaStore* meta, Clock* clock)
      : options_(options),
        origin_(origin),
        meta_(meta),
        clock_(clock),
        source_(origin->Describe()),
        refresher_({.name = "tierfs-catalog",
                    .number_threads = false,
                    .threads = options_.stale_while_revalidate ? 1 : 0}) {}

  ~CatalogImpl() override {
    // Queued refreshes are dropped; the one running finishes.
    refresher_.Stop(ThreadPool::kDiscard);
  }

  Result<DirEntry> Lookup(std::string_view dir, std::string_view name) override {
    if (!ValidPath(dir))
      return Status::InvalidArgument("bad directory path '" + std::string(dir) + "'");
    if (!ValidName(name)) return Status::NotFound("no entry '" + std::string(name) + "'");
    TIERFS_RETURN_IF_ERROR(EnsureListing(dir));
    const std::string dir_key = DirKey(dir);
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirEntry> e,
                            StoreFor(dir_key)->GetDirEntry(dir_key, name));
    if (!e) return Status::NotFound(JoinPath(dir, name));
    return std::move(*e);
  }

  Status ReadDir(std::string_view dir, std::string_view after, size_t max,
                 std::vector<DirEntry>* out) override {
    if (!ValidPath(dir))
      return Status::InvalidArgument("bad directory path '" + std::string(dir) + "'");
    TIERFS_RETURN_IF_ERROR(EnsureListing(dir));
    const std::string dir_key = DirKey(dir);
    return StoreFor(dir_key)->ListDirEntries(dir_key, after, max, out);
  }

  Result<std::shared_ptr<const Listing>> Snapshot(std::string_view dir) override {
    if (!ValidPath(dir))
      return Status::InvalidArgument("bad directory path '" + std::string(dir) + "'");
    TIERFS_RETURN_IF_ERROR(EnsureListing(dir));
    const std::string dir_key = DirKey(dir);
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirRecord> rec, StoreFor(dir_key)->GetDir(dir_key));
    const int64_t listed_at = rec ? rec->listed_at_ns : 0;
    {
      MutexLock l(&snap_mu_);
      auto it = snapshots_.find(dir_key);
      if (it != snapshots_.end() && it->second.listed_at_ns == listed_at) {
        if (std::shared_ptr<const Listing> s = it->second.snap.lock()) {
          ++stats_.snapshots_shared;
          return s;
        }
      }
    }
    // Read outside the lock: other directories' snapshots need not wait for this one.
    Listing built;
    built.listed_at_ns = listed_at;
    if (rec)
      built.entries.reserve(static_cast<size_t>(std::min<uint64_t>(rec->entry_count, 1u << 20)));
    std::vector<DirEntry> page;
    while (true) {
      page.clear();
      const std::string after = built.entries.empty() ? std::string() : built.entries.back().name;
      TIERFS_RETURN_IF_ERROR(
          StoreFor(dir_key)->ListDirEntries(dir_key, after, kSnapshotPage, &page));
      for (DirEntry& e : page) built.entries.push_back(std::move(e));
      if (page.size() < kSnapshotPage) break;
    }
    std::shared_ptr<Listing> snap =
        tiercache_internal::ChargedListing(std::move(built), options_.memory_budget);
    ++stats_.snapshots_built;
    MutexLock l(&snap_mu_);
    SnapSlot& slot = snapshots_[dir_key];
    if (slot.listed_at_ns == listed_at) {
      // Another caller built the same snapshot meanwhile: share theirs.
      if (std::shared_ptr<const Listing> s = slot.snap.lock()) return s;
    }
    slot.listed_at_ns = listed_at;
    slot.snap = snap;
    if (snapshots_.size() > 2 * kSnapshotSweepAt) SweepSnapshots();
    return std::shared_ptr<const Listing>(std::move(snap));
  }

  Result<DirEntry> Revalidate(std::string_view path) override {
    if (!ValidPath(path)) return Status::InvalidArgument("bad path '" + std::string(path) + "'");
    if (path.empty()) {
      DirEntry root;
      root.type = EntryType::kDir;
      return root;
    }
    auto [dir, name] = SplitPath(path);
    const std::string dir_key = DirKey(dir);
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirRecord> rec, StoreFor(dir_key)->GetDir(dir_key));
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirEntry> cached,
                            StoreFor(dir_key)->GetDirEntry(dir_key, name));
    const int64_t now = clock_->NowUnixNanos();
    // Files known to have changed, and files without an ETag (their version is only size and
    // mtime), are HEADed at every open.
    const bool must_head =
        (cached && cached->type == EntryType::kFile && cached->etag.empty()) || IsInvalidated(path);
    if (rec && Fresh(rec->listed_at_ns, now) && !must_head) {
      ++stats_.listing_hits;
      if (!cached) return Status::NotFound(std::string(path));
      return std::move(*cached);
    }
    if (cached && cached->type == EntryType::kDir) {
      // Directories have no HEAD; their truth is the parent's listing.
      return Lookup(dir, name);
    }
    if (cached && !must_head && HeadIsFresh(path, now)) return std::move(*cached);
    ++stats_.head_requests;
    Result<ObjectInfo> info = origin_->Head(path);
    if (!info.ok()) {
      if (info.status().IsNotFound()) {
        ForgetHead(path);
        ClearInvalidated(path);
        if (cached) {
          (void)StoreFor(dir_key)->DeleteDirEntry(dir_key, name);
          ForgetSnapshot(dir_key);
        }
        // It may be a directory now (only a prefix exists): the parent listing knows.
        if (rec || cached) return Status::NotFound(std::string(path));
        return Lookup(dir, name);
      }
      if (cached) {
        Logger(Module::kTierCache)
            .warn("revalidating '{}' failed ({}); serving cached metadata", path,
                  info.status().ToString());
        return std::move(*cached);
      }
      return info.status();
    }
    DirEntry e;
    e.name = std::string(name);
    e.type = EntryType::kFile;
    e.size = info->size;
    e.etag = info->etag;
    e.mtime_ns = info->mtime_ns;
    SetOwner(info->owner, &e);
    if (rec) {
      // Only cache it beside an existing listing: an entry without a listing record would
      // look like a listing to nobody and be shadowed by the next full listing anyway.
      Status st = StoreFor(dir_key)->PutDirEntry(dir_key, e);
      ForgetSnapshot(dir_key);
      if (!st.ok())
        Logger(Module::kTierCache).warn("cannot cache entry '{}': {}", path, st.ToString());
    }
    RememberHead(path, now);
    ClearInvalidated(path);
    return e;
  }

  void Invalidate(std::string_view path) override {
    if (path.empty() || !ValidPath(path)) return;
    ++stats_.invalidations;
    ForgetHead(path);
    MutexLock l(&head_mu_);
    if (invalidated_.size() >= kMaxInvalidated) invalidated_.clear();  // bounded; see catalog.h
    invalidated_.insert(std::string(path));
  }

  std::chrono::nanoseconds metadata_ttl() const override { return options_.metadata_ttl; }
  const CatalogStats& Stats() const override { return stats_; }

  void TEST_WaitForRefreshes() override EXCLUDES(queue_mu_) {
    MutexLock l(&queue_mu_);
    while (!queued_.empty()) idle_cv_.Wait();
  }

 private:
  std::string DirKey(std::string_view dir) const {
    std::string k = source_;
    k += '\n';
    k += dir;
    return k;
  }

  bool Fresh(int64_t at_ns, int64_t now_ns) const {
    if (options_.metadata_ttl == kForever) return true;
    return now_ns - at_ns < options_.metadata_ttl.count();
  }

  // Makes sure `dir` has a usable listing in MetaStore: fresh, freshly fetched, or stale when
  // the origin fails. NotFound if `dir` is not a directory of the source.
  Status EnsureListing(std::string_view dir) {
    const std::string dir_key = DirKey(dir);
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirRecord> rec, StoreFor(dir_key)->GetDir(dir_key));
    if (rec && Fresh(rec->listed_at_ns, clock_->NowUnixNanos())) {
      ++stats_.listing_hits;
      return Status::OK();
    }
    if (rec && options_.stale_while_revalidate) {
      ++stats_.stale_serves;
      ScheduleRefresh(dir);
      return Status::OK();
    }
    // Result<bool> because SingleFlight values must be copyable results, not bare Status.
    Result<bool> r = flights_.Do(std::string(dir), [&]() -> Result<bool> {
      TIERFS_RETURN_IF_ERROR(Refresh(dir, dir_key));
      return true;
    });
    return r.ok() ? Status::OK() : r.status();
  }

  // The single-flight leader's work for EnsureListing.
  Status Refresh(std::string_view dir, const std::string& dir_key) {
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirRecord> rec, StoreFor(dir_key)->GetDir(dir_key));
    if (rec && Fresh(rec->listed_at_ns, clock_->NowUnixNanos())) return Status::OK();
    if (!dir.empty()) {
      auto [parent, base] = SplitPath(dir);
      Result<DirEntry> e = Lookup(parent, base);
      if (!e.ok()) {
        if (!e.status().IsNotFound() && rec) return ServeStale(dir, e.status());
        return e.status();
      }
      if (e->type != EntryType::kDir)
        return Status::NotFound("'" + std::string(dir) + "' is a file");
    }
    std::vector<DirEntry> entries;
    DirRecord out;
    const bool shared = FromShare(dir, &entries, &out.listed_at_ns);
    if (!shared) {
      ++stats_.listing_misses;
      Status st = ListFromOrigin(dir, &entries);
      if (!st.ok()) {
        if (rec) return ServeStale(dir, st);
        return st.WithContext("listing '" + std::string(dir) + "'");
      }
      out.listed_at_ns = clock_->NowUnixNanos();
    }
    out.entry_count = entries.size();
    Status put = meta_->ReplaceDir(dir_key, out, entries);
    if (put.ok()) {
      LeaveOverflow(dir_key);
    } else if (put.code() == Status::Code::kNoSpace) {
      put = KeepInOverflow(dir, dir_key, out, entries, put);
    }
    ForgetSnapshot(dir_key);
    const bool large = entries.size() >= kReleaseMemoryAfterEntries;
    if (!shared && options_.listing_share != nullptr) {
      options_.listing_share->Publish(source_, dir,
                                      SharedListing{out.listed_at_ns, std::move(entries)});
    }
    if (large) {
      entries = {};
      ReleaseFreeMemory();  // the listing's transient copies (base/memory.h)
    }
    return put;
  }

  // The listing of `dir` from the listing share when it holds one younger than metadata_ttl
  // (listing_share.h). Names the metadata store cannot key are left out, as ListFromOrigin does.
  bool FromShare(std::string_view dir, std::vector<DirEntry>* out, int64_t* listed_at_ns) {
    if (options_.listing_share == nullptr) return false;
    const int64_t now = clock_->NowUnixNanos();
    const int64_t min_at =
        options_.metadata_ttl == kForever ? INT64_MIN : now - options_.metadata_ttl.count() + 1;
    Result<SharedListing> l = options_.listing_share->Fetch(source_, dir, min_at);
    if (!l.ok()) return false;
    const size_t key_room = kMaxMetaKeyBytes - std::min(kMaxMetaKeyBytes, DirKey(dir).size() + 1);
    std::erase_if(l->entries, [&](const DirEntry& e) { return e.name.size() > key_room; });
    *out = std::move(l->entries);
    *listed_at_ns = std::min(l->listed_at_ns, now);  // a writer's clock ahead of ours
    return true;
  }

  // ---- listings the metadata store has no room for ----

  MetaStore* StoreFor(const std::string& dir_key) EXCLUDES(overflow_mu_) {
    MutexLock l(&overflow_mu_);
    return overflow_dirs_.empty() || !overflow_dirs_.contains(dir_key) ? meta_ : overflow_.get();
  }

  // Serves the listing from memory after the metadata store refused it (`why`, NoSpace).
  Status KeepInOverflow(std::string_view dir, const std::string& dir_key, const DirRecord& rec,
                        std::span<const DirEntry> entries, const Status& why)
      EXCLUDES(overflow_mu_) {
    if (entries.size() > kMaxOverflowEntries) return why;  // too large to hold in memory either
    std::vector<std::string> dropped;
    {
      MutexLock l(&overflow_mu_);
      if (auto it = overflow_dirs_.find(dir_key); it != overflow_dirs_.end()) {
        overflow_entries_ -= it->second;
        overflow_dirs_.erase(it);
        std::erase(overflow_order_, dir_key);
      }
      while (overflow_entries_ + entries.size() > kMaxOverflowEntries && !overflow_order_.empty()) {
        dropped.push_back(overflow_order_.front());
        overflow_order_.pop_front();
        overflow_entries_ -= overflow_dirs_[dropped.back()];
        overflow_dirs_.erase(dropped.back());
      }
    }
    for (const std::string& k : dropped) {
      (void)overflow_->DropDirs(k);  // a same-prefix sibling dropped too is just listed again
      ForgetSnapshot(k);
    }
    TIERFS_RETURN_IF_ERROR(overflow_->DropDirs(dir_key));
    TIERFS_RETURN_IF_ERROR(overflow_->ReplaceDir(dir_key, rec, entries));
    {
      MutexLock l(&overflow_mu_);
      overflow_dirs_[dir_key] = entries.size();
      overflow_order_.push_back(dir_key);
      overflow_entries_ += entries.size();
    }
    ++stats_.overflow_listings;
    Logger(Module::kTierCache)
        .warn("cannot store the listing of '{}' ({}); serving it from memory", dir, why.ToString());
    return Status::OK();
  }

  void LeaveOverflow(const std::string& dir_key) EXCLUDES(overflow_mu_) {
    {
      MutexLock l(&overflow_mu_);
      auto it = overflow_dirs_.find(dir_key);
      if (it == overflow_dirs_.end()) return;
      overflow_entries_ -= it->second;
      overflow_dirs_.erase(it);
      std::erase(overflow_order_, dir_key);
    }
    (void)overflow_->DropDirs(dir_key);
  }

  // ---- background refreshes ----

  // Queues `dir` for the refresher unless it is already queued or being refreshed.
  void ScheduleRefresh(std::string_view dir) EXCLUDES(queue_mu_) {
    {
      MutexLock l(&queue_mu_);
      if (!queued_.emplace(dir).second) return;
    }
    auto refresh = [this, d = std::string(dir)] { RefreshInBackground(d); };
    if (refresher_.TrySubmit(std::move(refresh))) return;
    MutexLock l(&queue_mu_);  // stopping (or no refresher): the stale record stays
    queued_.erase(std::string(dir));
    if (queued_.empty()) idle_cv_.SignalAll();
  }

  void RefreshInBackground(const std::string& dir) EXCLUDES(queue_mu_) {
    ++stats_.background_refreshes;
    Result<bool> r = flights_.Do(dir, [&]() -> Result<bool> {
      TIERFS_RETURN_IF_ERROR(Refresh(dir, DirKey(dir)));
      return true;
    });
    if (!r.ok() && r.status().IsNotFound()) {
      // Not a directory of the source any more: drop the stale listing (and, the key being a
      // prefix, those of its subdirectories and of same-prefix siblings: they are relisted on
      // their next use), so the next lookup lists afresh and sees it gone.
      Status st = meta_->DropDirs(DirKey(dir));
      LeaveOverflow(DirKey(dir));
      ForgetSnapshot(DirKey(dir));
      if (!st.ok()) {
        Logger(Module::kTierCache).warn("cannot drop the listing of '{}': {}", dir, st.ToString());
      }
    } else if (!r.ok()) {
      Logger(Module::kTierCache)
          .warn("background refresh of '{}' failed: {}", dir, r.status().ToString());
    }
    MutexLock l(&queue_mu_);
    queued_.erase(dir);
    if (queued_.empty()) idle_cv_.SignalAll();
  }

  // ---- snapshots ----

  void ForgetSnapshot(const std::string& dir_key) EXCLUDES(snap_mu_) {
    MutexLock l(&snap_mu_);
    snapshots_.erase(dir_key);
  }

  void SweepSnapshots() REQUIRES(snap_mu_) {
    for (auto it = snapshots_.begin(); it != snapshots_.end();) {
      it = it->second.snap.expired() ? snapshots_.erase(it) : std::next(it);
    }
  }

  Status ServeStale(std::string_view dir, const Status& why) {
    Logger(Module::kTierCache)
        .warn("cannot refresh listing of '{}' ({}); serving the stale one", dir, why.ToString());
    return Status::OK();
  }

  // Every page of the listing of `dir`, converted to entries sorted by name.
  Status ListFromOrigin(std::string_view dir, std::vector<DirEntry>* out) {
    const std::string prefix = dir.empty() ? std::string() : std::string(dir) + "/";
    std::map<std::string, DirEntry, std::less<>> byname;
    std::set<std::string, std::less<>> unsafe;  // hidden names, each counted once
    auto visible = [&](std::string_view name) {
      if (!ValidName(name)) return false;
      if (UnsafeName(name)) {
        if (unsafe.size() < 1024) unsafe.emplace(name);
        return false;
      }
      return true;
    };
    auto add_dir = [&](std::string_view name, const Ownership& owner) {
      if (!visible(name)) return;
      DirEntry& e = byname[std::string(name)];  // a directory replaces a same-named file
      if (e.type == EntryType::kDir && e.owner_known && !owner.known) return;  // keep the owner
      e = DirEntry{};
      e.name = std::string(name);
      e.type = EntryType::kDir;
      SetOwner(owner, &e);
    };
    TIERFS_RETURN_IF_ERROR(ForEachListPage(origin_, prefix, "/", 1000, [&](ListPage& page) {
      ++stats_.list_requests;
      for (const auto& o : page.objects) {
        if (!std::string_view(o.key).starts_with(prefix)) continue;
        std::string_view rel = std::string_view(o.key).substr(prefix.size());
        if (rel.empty()) continue;  // the folder marker of `dir` itself
        size_t slash = rel.find('/');
        if (slash != std::string_view::npos) {
          add_dir(rel.substr(0, slash), Ownership{});  // "sub/" marker (or a key below it)
          continue;
        }
        if (!visible(rel)) continue;
        auto it = byname.find(rel);
        if (it != byname.end() && it->second.type == EntryType::kDir) continue;  // dir wins
        DirEntry e;
        e.name = std::string(rel);
        e.type = EntryType::kFile;
        e.size = o.info.size;
        e.etag = o.info.etag;
        e.mtime_ns = o.info.mtime_ns;
        SetOwner(o.info.owner, &e);
        byname[e.name] = std::move(e);
      }
      const bool owners = page.prefix_owners.size() == page.prefixes.size();
      for (size_t i = 0; i < page.prefixes.size(); ++i) {
        const std::string& p = page.prefixes[i];
        if (!std::string_view(p).starts_with(prefix)) continue;
        std::string_view rel = std::string_view(p).substr(prefix.size());
        while (!rel.empty() && rel.back() == '/') rel.remove_suffix(1);
        const size_t slash = rel.find('/');
        add_dir(rel.substr(0, slash),
                owners && slash == std::string_view::npos ? page.prefix_owners[i] : Ownership{});
      }
      return Status::OK();
    }));
    // MetaStore keys are bounded (kMaxMetaKeyBytes): an entry whose key would not fit is left
    // out (it can't be looked up) rather than failing the whole directory.
    const size_t key_room = kMaxMetaKeyBytes - std::min(kMaxMetaKeyBytes, DirKey(dir).size() + 1);
    size_t skipped = 0;
    out->reserve(byname.size());
    for (auto& [_, e] : byname) {
      if (e.name.size() > key_room) {
        ++skipped;
        continue;
      }
      out->push_back(std::move(e));
    }
    if (skipped > 0) {
      Logger(Module::kTierCache)
          .warn("listing of '{}': {} names too long for the metadata store are hidden", dir,
                skipped);
    }
    if (!unsafe.empty()) LogUnsafeNames(dir, unsafe);
    return Status::OK();
  }

  // One warning for the names ListFromOrigin hid as unsafe (at most 1024 of them kept).
  static void LogUnsafeNames(std::string_view dir,
                             const std::set<std::string, std::less<>>& unsafe) {
    // The example goes to the log without its control characters (shown as '?').
    std::string first = unsafe.begin()->substr(0, 300);
    for (char& c : first) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    Logger(Module::kTierCache)
        .warn(
            "listing of '{}': {}{} names longer than 255 bytes or with control characters "
            "are hidden (first: '{}')",
            dir, unsafe.size() >= 1024 ? "at least " : "", unsafe.size(), first);
  }

  // HEAD results of files whose parent listing is stale are trusted for metadata_ttl too; the
  // times live only in memory (a restart re-HEADs, which is correct, just slower).
  bool HeadIsFresh(std::string_view path, int64_t now) EXCLUDES(head_mu_) {
    MutexLock l(&head_mu_);
    auto it = head_times_.find(std::string(path));
    return it != head_times_.end() && Fresh(it->second, now);
  }
  void RememberHead(std::string_view path, int64_t now) EXCLUDES(head_mu_) {
    MutexLock l(&head_mu_);
    if (head_times_.size() >= kMaxHeadTimes) head_times_.clear();  // crude bound; see above
    head_times_[std::string(path)] = now;
  }
  void ForgetHead(std::string_view path) EXCLUDES(head_mu_) {
    MutexLock l(&head_mu_);
    head_times_.erase(std::string(path));
  }
  bool IsInvalidated(std::string_view path) EXCLUDES(head_mu_) {
    MutexLock l(&head_mu_);
    return !invalidated_.empty() && invalidated_.contains(std::string(path));
  }
  void ClearInvalidated(std::string_view path) EXCLUDES(head_mu_) {
    MutexLock l(&head_mu_);
    if (!invalidated_.empty()) invalidated_.erase(std::string(path));
  }

  static constexpr size_t kMaxHeadTimes = 1 << 16;
  static constexpr size_t kMaxInvalidated = 1 << 16;
  // Directory entries kept in memory when the metadata store is full (~150 bytes each).
  static constexpr size_t kMaxOverflowEntries = 1 << 18;
  static constexpr size_t kSnapshotPage = 4096;     // metastore entries read per call
  static constexpr size_t kSnapshotSweepAt = 1024;  // drop dead slots beyond 2x this many

  struct SnapSlot {
    int64_t listed_at_ns = 0;
    std::weak_ptr<const Listing> snap;
  };

  // Constant after construction.
  const CatalogOptions options_;
  BlobStore* const origin_;
  MetaStore* const meta_;
  Clock* const clock_;
  const std::string source_;

  CatalogStats stats_;
  SingleFlight<std::string, Result<bool>> flights_;

  Mutex head_mu_;
  std::unordered_map<std::string, int64_t> head_times_ GUARDED_BY(head_mu_);
  // Files Invalidate() named, until a HEAD has refreshed them.
  std::unordered_set<std::string> invalidated_ GUARDED_BY(head_mu_);

  const std::unique_ptr<MetaStore> overflow_ = NewMemMetaStore();  // thread-safe itself
  Mutex overflow_mu_;                                              // a leaf
  std::unordered_map<std::string, size_t> overflow_dirs_ GUARDED_BY(overflow_mu_);  // -> entries
  std::deque<std::string> overflow_order_ GUARDED_BY(overflow_mu_);                 // oldest first
  size_t overflow_entries_ GUARDED_BY(overflow_mu_) = 0;

  Mutex snap_mu_;  // a leaf
  std::unordered_map<std::string, SnapSlot> snapshots_ GUARDED_BY(snap_mu_);

  Mutex queue_mu_;                                                   // a leaf
  CondVar idle_cv_{&queue_mu_};                                      // queued_ became empty
  std::set<std::string, std::less<>> queued_ GUARDED_BY(queue_mu_);  // queued or running

  ThreadPool refresher_;  // last: started after every member above is initialised
};

}  // namespace

bool CatalogNameServable(std::string_view name) { return ValidName(name) && !UnsafeName(name); }

Result<std::unique_ptr<Catalog>> Catalog::Open(const CatalogOptions& options, BlobStore* origin,
                                               MetaStore* meta, Clock* clock) {
  if (origin == nullptr || meta == nullptr) {
    return Status::InvalidArgument("catalog: origin and metastore are required");
  }
  if (clock == nullptr) clock = SystemClock();
  if (options.metadata_ttl.count() < 0) {
    return Status::InvalidArgument("catalog: metadata_ttl must not be negative");
  }
  return std::unique_ptr<Catalog>(std::make_unique<CatalogImpl>(options, origin, meta, clock));
}

}  // namespace tierfs
