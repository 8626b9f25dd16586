// ManifestCatalog (manifest.h): a Catalog over the tree of a dataset manifest, held in memory.
//
// The tree is built once: every directory gets one immutable, shared Listing (entries in byte
// order of name) in `dirs_`, keyed by its path. Lookup is a binary search in its parent's
// listing, Snapshot hands out the shared listing itself, Revalidate is a Lookup. Nothing is
// ever fetched: the catalog holds no pointer to the origin. Memory: one DirEntry per file and
// directory (about 100 bytes plus name and ETag).
#include <algorithm>
#include <unordered_map>

#include "base/logging.h"
#include "base/strings.h"
#include "base/units.h"
#include "tiercache/manifest.h"

namespace tierfs {
namespace {

// Directory path -> its entries, unsorted while building.
using Tree = std::unordered_map<std::string, std::vector<DirEntry>>;

// Whether every name of `key` (a manifest key without its trailing '/') can be served.
bool ServableKey(std::string_view key, bool marker) {
  bool ok = !key.empty() || marker;
  for (std::string_view rest = key; ok && !rest.empty();) {
    const size_t slash = rest.find('/');
    ok = CatalogNameServable(rest.substr(0, slash));
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  }
  return ok;
}

// The manifest's keys as a tree of directories; a directory is added to its parent once, when
// first seen. Counts the keys it cannot serve in st->hidden.
Tree BuildTree(const Manifest& m, ManifestCatalogStats* st) {
  Tree tree;
  tree[""];
  std::string last_dir;  // keys come sorted: most share the directory of the one before
  auto add_dirs = [&](std::string_view dir) {
    // Makes every prefix of `dir` a directory entry of its parent, top down.
    if (dir.empty() || dir == last_dir) return;
    last_dir = std::string(dir);
    for (size_t end = 0; end != std::string_view::npos;) {
      end = dir.find('/', end + 1);
      const std::string_view prefix = dir.substr(0, end);
      if (!tree.try_emplace(std::string(prefix)).second) continue;
      auto [parent, base] = SplitPath(prefix);
      DirEntry d;
      d.name = std::string(base);
      d.type = EntryType::kDir;
      tree[std::string(parent)].push_back(std::move(d));
    }
  };
  for (const ManifestEntry& e : m.entries) {
    std::string_view key = e.key;
    if (key.empty()) continue;  // not in a decoded manifest
    const bool marker = key.back() == '/';
    if (marker) key.remove_suffix(1);
    if (!ServableKey(key, marker)) {
      ++st->hidden;
      Logger(Module::kTierCache)
          .debug("manifest: key '{}' is not a servable path; hidden", EscapeForLog(e.key));
      continue;
    }
    if (marker) {
      add_dirs(key);
      continue;
    }
    auto [dir, name] = SplitPath(key);
    add_dirs(dir);
    DirEntry f;
    f.name = std::string(name);
    f.type = EntryType::kFile;
    f.size = e.info.size;
    f.etag = e.info.etag;
    f.mtime_ns = e.info.mtime_ns;
    tree[std::string(dir)].push_back(std::move(f));
  }
  return tree;
}

// One directory's entries as its listing: byte order of name; of a file and a directory of one
// name ("a" and "a/x") the directory, sorted first, wins.
std::shared_ptr<Listing> SealListing(std::vector<DirEntry> entries, int64_t listed_at_ns,
                                     ManifestCatalogStats* st) {
  std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) {
    if (a.name != b.name) return a.name < b.name;
    return a.type == EntryType::kDir && b.type != EntryType::kDir;
  });
  auto listing = std::make_shared<Listing>();
  listing->listed_at_ns = listed_at_ns;
  listing->entries.reserve(entries.size());
  for (DirEntry& e : entries) {
    if (!listing->entries.empty() && listing->entries.back().name == e.name) {
      ++st->hidden;
      continue;
    }
    if (e.type == EntryType::kFile) ++st->files;
    listing->entries.push_back(std::move(e));
  }
  ++st->directories;
  return listing;
}

// Thread-safe: immutable after construction (the stats are atomics).
class ManifestCatalog final : public Catalog {
 public:
  ManifestCatalog(const Manifest& m, ManifestCatalogStats* out) : checksum_(m.checksum) {
    ManifestCatalogStats st;
    Tree tree = BuildTree(m, &st);
    dirs_.reserve(tree.size());
    for (auto& [path, entries] : tree) {
      dirs_.emplace(path, SealListing(std::move(entries), m.created_unix_ns, &st));
    }
    if (st.hidden > 0) {
      Logger(Module::kTierCache)
          .warn(
              "manifest {}: {} keys are not served (unsafe names, or files shadowed by a "
              "directory of the same name)",
              m.checksum, st.hidden);
    }
    if (out != nullptr) *out = st;
  }

  Result<DirEntry> Lookup(std::string_view dir, std::string_view name) override {
    auto l = Find(dir);
    if (!l.ok()) return l.status();
    const auto& es = (*l)->entries;
    auto it = std::lower_bound(es.begin(), es.end(), name,
                               [](const DirEntry& e, std::string_view n) { return e.name < n; });
    if (it == es.end() || it->name != name) {
      return Status::NotFound(dir.empty() ? std::string(name)
                                          : std::string(dir) + "/" + std::string(name));
    }
    ++stats_.listing_hits;
    return *it;
  }

  Status ReadDir(std::string_view dir, std::string_view after, size_t max,
                 std::vector<DirEntry>* out) override {
    auto l = Find(dir);
    if (!l.ok()) return l.status();
    const auto& es = (*l)->entries;
    auto it = std::upper_bound(es.begin(), es.end(), after,
                               [](std::string_view n, const DirEntry& e) { return n < e.name; });
    for (; it != es.end() && max > 0; ++it, --max) out->push_back(*it);
    ++stats_.listing_hits;
    return Status::OK();
  }

  Result<std::shared_ptr<const Listing>> Snapshot(std::string_view dir) override {
    auto l = Find(dir);
    if (l.ok()) ++stats_.snapshots_shared;
    return l;
  }

  Result<DirEntry> Revalidate(std::string_view path) override {
    if (path.empty()) {
      DirEntry root;
      root.type = EntryType::kDir;
      return root;
    }
    auto [dir, name] = SplitPath(path);
    return Lookup(dir, name);
  }

  void Invalidate(std::string_view path) override {
    // The version stays pinned to the manifest: every read of a changed object keeps failing
    // with ESTALE rather than turning into a new version. (The FUSE layer already logs each
    // failed read as a warning.)
    ++stats_.invalidations;
    Logger(Module::kTierCache)
        .debug(
            "'{}' changed at the origin since the manifest {} was made: its reads fail with "
            "ESTALE",
            EscapeForLog(path), checksum_);
  }

  std::chrono::nanoseconds metadata_ttl() const override { return kForever; }
  const CatalogStats& Stats() const override { return stats_; }
  std::string manifest_checksum() const override { return checksum_; }
  void TEST_WaitForRefreshes() override {}

 private:
  Result<std::shared_ptr<const Listing>> Find(std::string_view dir) const {
    auto it = dirs_.find(std::string(dir));
    if (it == dirs_.end()) return Status::NotFound("no directory '" + std::string(dir) + "'");
    return it->second;
  }

  const std::string checksum_;
  std::unordered_map<std::string, std::shared_ptr<const Listing>> dirs_;  // immutable
  CatalogStats stats_;
};

}  // namespace

std::unique_ptr<Catalog> NewManifestCatalog(const Manifest& m, ManifestCatalogStats* stats) {
  return std::make_unique<ManifestCatalog>(m, stats);
}

}  // namespace tierfs
