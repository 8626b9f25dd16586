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
#include "tiercache/catalog.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "base/logging.h"
#include "base/mutex.h"
#include "base/units.h"
#include "tiercache/single_flight.h"

namespace tierfs {
namespace {

// Splits "a/b/c" into ("a/b", "c"); "c" into ("", "c").
std::pair<std::string_view, std::string_view> SplitPath(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return {std::string_view(), path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

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
        source_(origin->Describe()) {}

  Result<DirEntry> Lookup(std::string_view dir, std::string_view name) override {
    if (!ValidPath(dir))
      return Status::InvalidArgument("bad directory path '" + std::string(dir) + "'");
    if (!ValidName(name)) return Status::NotFound("no entry '" + std::string(name) + "'");
    TIERFS_RETURN_IF_ERROR(EnsureListing(dir));
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirEntry> e, meta_->GetDirEntry(DirKey(dir), name));
    if (!e) return Status::NotFound(Join(dir, name));
    return std::move(*e);
  }

  Status ReadDir(std::string_view dir, std::string_view after, size_t max,
                 std::vector<DirEntry>* out) override {
    if (!ValidPath(dir))
      return Status::InvalidArgument("bad directory path '" + std::string(dir) + "'");
    TIERFS_RETURN_IF_ERROR(EnsureListing(dir));
    return meta_->ListDirEntries(DirKey(dir), after, max, out);
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
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirRecord> rec, meta_->GetDir(dir_key));
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirEntry> cached, meta_->GetDirEntry(dir_key, name));
    const int64_t now = clock_->NowUnixNanos();
    if (rec && Fresh(rec->listed_at_ns, now)) {
      ++stats_.listing_hits;
      if (!cached) return Status::NotFound(std::string(path));
      return std::move(*cached);
    }
    if (cached && cached->type == EntryType::kDir) {
      // Directories have no HEAD; their truth is the parent's listing.
      return Lookup(dir, name);
    }
    if (cached && HeadIsFresh(path, now)) return std::move(*cached);
    ++stats_.head_requests;
    Result<ObjectInfo> info = origin_->Head(path);
    if (!info.ok()) {
      if (info.status().IsNotFound()) {
        ForgetHead(path);
        if (cached) (void)meta_->DeleteDirEntry(dir_key, name);
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
    if (rec) {
      // Only cache it beside an existing listing: an entry without a listing record would
      // look like a listing to nobody and be shadowed by the next full listing anyway.
      Status st = meta_->PutDirEntry(dir_key, e);
      if (!st.ok())
        Logger(Module::kTierCache).warn("cannot cache entry '{}': {}", path, st.ToString());
    }
    RememberHead(path, now);
    return e;
  }

  std::chrono::nanoseconds metadata_ttl() const override { return options_.metadata_ttl; }
  const CatalogStats& Stats() const override { return stats_; }

 private:
  std::string DirKey(std::string_view dir) const {
    std::string k = source_;
    k += '\n';
    k += dir;
    return k;
  }

  static std::string Join(std::string_view dir, std::string_view name) {
    if (dir.empty()) return std::string(name);
    std::string s(dir);
    s += '/';
    s += name;
    return s;
  }

  bool Fresh(int64_t at_ns, int64_t now_ns) const {
    if (options_.metadata_ttl == kForever) return true;
    return now_ns - at_ns < options_.metadata_ttl.count();
  }

  // Makes sure `dir` has a usable listing in MetaStore: fresh, freshly fetched, or stale when
  // the origin fails. NotFound if `dir` is not a directory of the source.
  Status EnsureListing(std::string_view dir) {
    const std::string dir_key = DirKey(dir);
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirRecord> rec, meta_->GetDir(dir_key));
    if (rec && Fresh(rec->listed_at_ns, clock_->NowUnixNanos())) {
      ++stats_.listing_hits;
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
    TIERFS_ASSIGN_OR_RETURN(std::optional<DirRecord> rec, meta_->GetDir(dir_key));
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
    ++stats_.listing_misses;
    std::vector<DirEntry> entries;
    Status st = ListFromOrigin(dir, &entries);
    if (!st.ok()) {
      if (rec) return ServeStale(dir, st);
      return st.WithContext("listing '" + std::string(dir) + "'");
    }
    DirRecord out;
    out.listed_at_ns = clock_->NowUnixNanos();
    out.entry_count = entries.size();
    return meta_->ReplaceDir(dir_key, out, entries);
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
    auto add_dir = [&](std::string_view name) {
      if (!visible(name)) return;
      DirEntry& e = byname[std::string(name)];  // a directory replaces a same-named file
      e = DirEntry{};
      e.name = std::string(name);
      e.type = EntryType::kDir;
    };
    std::string token;
    do {
      ++stats_.list_requests;
      TIERFS_ASSIGN_OR_RETURN(ListPage page, origin_->List(prefix, "/", token));
      for (const auto& o : page.objects) {
        if (!std::string_view(o.key).starts_with(prefix)) continue;
        std::string_view rel = std::string_view(o.key).substr(prefix.size());
        if (rel.empty()) continue;  // the folder marker of `dir` itself
        size_t slash = rel.find('/');
        if (slash != std::string_view::npos) {
          add_dir(rel.substr(0, slash));  // "sub/" marker (or a key below it)
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
        byname[e.name] = std::move(e);
      }
      for (const auto& p : page.prefixes) {
        if (!std::string_view(p).starts_with(prefix)) continue;
        std::string_view rel = std::string_view(p).substr(prefix.size());
        while (!rel.empty() && rel.back() == '/') rel.remove_suffix(1);
        add_dir(rel.substr(0, rel.find('/')));
      }
      if (!page.next_token.empty() && page.next_token == token) {
        return Status::Internal("listing of '" + prefix + "' did not advance");
      }
      token = std::move(page.next_token);
    } while (!token.empty());
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
    if (!unsafe.empty()) {
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
    return Status::OK();
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

  static constexpr size_t kMaxHeadTimes = 1 << 16;

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
};

}  // namespace

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
