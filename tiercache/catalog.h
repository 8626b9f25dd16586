// Catalog — the directory tree of a source, cached in MetaStore.
//
// Object stores have no directories: a key "a/b/c" appears as directory "a", directory "b", file
// "c"; a key ending in "/" (a folder marker) is a directory. The Catalog lists one "directory" at
// a time (ListObjectsV2 with delimiter "/", every page), stores the whole listing in MetaStore
// (so it survives restarts) and answers lookups and readdir from it until `metadata_ttl` passes.
// A name missing from a fresh listing is a negative entry. When a name is both an object and a
// prefix ("a" and "a/x"), the directory wins and the object is hidden.
//
// Stale-while-revalidate: a listing (or a file's metadata, which comes from its directory's
// listing) older than `metadata_ttl` is still served at once, and one background refresh of that
// directory is queued (one per directory however many callers see it stale). Only a directory
// with no listing at all is listed on the caller's thread. Refreshes run one at a time on the
// catalog's own thread ("tierfs-catalog"), joined by the destructor. Lookup and ReadDir (names,
// and the attributes getattr shows) follow this rule; Revalidate, which pins the version an open
// reads, still checks a stale entry with a HEAD.
//
// Open directory handles share listing snapshots (Snapshot()): every caller asking for the same
// directory while its listing is unchanged gets the same immutable object, so N open handles of
// a 100k-entry directory hold one copy.
//
// Paths are relative to the source, without leading or trailing '/': "" is the root, "a/b" a
// directory or file below it.
//
// Thread-safe; no external synchronization needed. Concurrent refreshes of one directory are
// merged (single-flight).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/memory_budget.h"
#include "base/result.h"
#include "blobclient/blob_store.h"
#include "metastore/meta_store.h"
#include "tiercache/listing_share.h"

namespace tierfs {

struct CatalogOptions {
  // How long a listing or object's metadata is trusted. kForever for immutable datasets.
  std::chrono::nanoseconds metadata_ttl = std::chrono::seconds(60);
  // Serve stale listings while a background refresh runs (see above). false: a stale listing is
  // refreshed on the caller's thread (only tests want that).
  bool stale_while_revalidate = true;
  // Listings shared with the other hosts of the region (listing_share.h; the L3 tier), or
  // nullptr. Set: a directory to be (re)listed is first asked of the share, and taken from it
  // when it was listed less than metadata_ttl ago (keeping that listing time, so it expires for
  // every host at once); a listing taken from the origin is offered to it. Not owned; must
  // outlive the catalog.
  ListingShare* listing_share = nullptr;
  // The memory budget (memory.limit) listing snapshots are charged to while they live
  // (MemoryUse::kListings), or null. Not owned; must outlive the catalog and its snapshots.
  MemoryBudget* memory_budget = nullptr;
};

struct CatalogStats {
  std::atomic<uint64_t> list_requests{0};  // ListObjectsV2 pages fetched
  std::atomic<uint64_t> head_requests{0};
  std::atomic<uint64_t> listing_hits{0};          // directory answered from the cache
  std::atomic<uint64_t> listing_misses{0};        // directory (re)listed from the origin
  std::atomic<uint64_t> stale_serves{0};          // stale listing served while a refresh is due
  std::atomic<uint64_t> background_refreshes{0};  // refreshes run on the catalog thread
  std::atomic<uint64_t> snapshots_built{0};       // listing snapshots read from the metastore
  std::atomic<uint64_t> snapshots_shared{0};      // Snapshot() answered with an existing one
  std::atomic<uint64_t> invalidations{0};         // files marked changed by Invalidate()
  std::atomic<uint64_t> overflow_listings{0};     // listings served from memory: meta store full
};

// The whole listing of one directory at one moment, immutable and shared (Catalog::Snapshot).
struct Listing {
  std::vector<DirEntry> entries;  // in byte order of name
  int64_t listed_at_ns = 0;       // DirRecord::listed_at_ns of the listing it was read from
};

class Catalog {
 public:
  // `origin`, `meta` and `clock` are not owned and must outlive the catalog.
  static Result<std::unique_ptr<Catalog>> Open(const CatalogOptions& options, BlobStore* origin,
                                               MetaStore* meta, Clock* clock);
  virtual ~Catalog() = default;

  // The entry `name` in directory `dir`. NotFound if there is none (negative entry).
  virtual Result<DirEntry> Lookup(std::string_view dir, std::string_view name) = 0;

  // Up to `max` entries of `dir` with name > `after`, in byte order. NotFound if `dir` is not a
  // directory. Lists the directory from the origin first when its listing is missing or stale.
  virtual Status ReadDir(std::string_view dir, std::string_view after, size_t max,
                         std::vector<DirEntry>* out) = 0;

  // The whole listing of `dir` as one shared, immutable snapshot (see the file comment). NotFound
  // if `dir` is not a directory. Same freshness rules as ReadDir.
  virtual Result<std::shared_ptr<const Listing>> Snapshot(std::string_view dir) = 0;

  // Fresh metadata of the file at `path` for an open(): from the cache when younger than
  // metadata_ttl, else a HEAD (updating the cached entry). NotFound if it is gone. This is the
  // version an open pins, so it is not served stale (open-to-close consistency): one HEAD, never
  // a listing, on the caller's thread. A file without an ETag, or one Invalidate() named, is
  // always HEADed (whatever metadata_ttl says), and the answer replaces the cached entry.
  virtual Result<DirEntry> Revalidate(std::string_view path) = 0;

  // The file at `path` is known to have changed (a read saw another version: 412, or an answer
  // whose ETag, size or Last-Modified differs from the pinned one). Its cached entry is no longer
  // trusted: the next Revalidate (open) HEADs it, even with metadata_ttl = forever. The mark is
  // kept in memory (bounded); after a restart the next mismatching read marks it again.
  virtual void Invalidate(std::string_view path) = 0;

  virtual std::chrono::nanoseconds metadata_ttl() const = 0;
  virtual const CatalogStats& Stats() const = 0;

  // The checksum (hex) of the dataset manifest this catalog serves (tiercache/manifest.h), ""
  // when it serves live listings of the origin (user.tierfs.manifest).
  virtual std::string manifest_checksum() const { return std::string(); }

  // Tests: returns once no background refresh is queued or running.
  virtual void TEST_WaitForRefreshes() = 0;
};

// Whether a catalog serves an entry called `name` (one path component): not empty, ".", ".." or
// holding '/' or NUL, at most 255 bytes and without ASCII control characters. Every Catalog
// implementation hides the others.
bool CatalogNameServable(std::string_view name);

}  // namespace tierfs
