// Dataset manifests: the list of every object of a source (key, size, ETag, mtime) at one moment,
// in a compact, versioned, checksummed file (format: tiercache/FORMAT.md, "Dataset manifests").
//
// `tierfs manifest create` builds one from a listing (BuildManifest) and writes it
// (EncodeManifest); `tierfs mount --manifest` reads it (DecodeManifest) and serves exactly that
// tree through a ManifestCatalog (NewManifestCatalog): no LIST and no HEAD to the origin, every
// file pinned to the ETag of the manifest, so a changed object reads as ESTALE rather than as a
// new version. `tierfs manifest diff` compares two (DiffManifests).
//
// The functions are pure (no shared state) and thread-safe; the catalog is immutable after
// construction and thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "blobclient/blob_store.h"
#include "tiercache/catalog.h"

namespace tierfs {

inline constexpr std::string_view kManifestMagic = "TIERFSMF";  // 8 bytes
inline constexpr uint32_t kManifestVersion = 1;
// Bounds a reader enforces before allocating anything (a corrupt header must not make it
// reserve terabytes): 2^32 entries, 64 GiB of uncompressed payload, 4 KiB of source URI, keys of
// 1 KiB (S3's limit) and ETags of 1 KiB.
inline constexpr uint64_t kMaxManifestEntries = 1ull << 32;
inline constexpr uint64_t kMaxManifestPayload = 64ull << 30;
inline constexpr size_t kMaxManifestSource = 4096;
inline constexpr size_t kMaxManifestKey = 1024;
inline constexpr size_t kMaxManifestEtag = 1024;

struct ManifestEntry {
  std::string key;  // relative to the source, as the listing returned it
  ObjectInfo info;  // size, ETag (quotes stripped), mtime
};

struct Manifest {
  std::string source;                  // the source URI as given: "s3://b/prefix", "file:///data"
  int64_t created_unix_ns = 0;         // when the listing was taken (wall clock)
  std::vector<ManifestEntry> entries;  // in byte order of key, no key twice
  // Hex of the file's XXH3-128 checksum (32 characters): set by EncodeManifest and
  // DecodeManifest; the dataset version user.tierfs.manifest reports.
  std::string checksum;
};

// The file's bytes. Sets m->checksum. InvalidArgument if the entries are not in strict byte
// order of key, or a key, ETag or the source exceeds the bounds above.
Result<std::string> EncodeManifest(Manifest* m);

// Parses and verifies a manifest file's bytes. `name` (the file or URI) is named in every
// error. Corruption for a wrong magic, a truncated or over-long file, a checksum mismatch or a
// malformed payload; NotSupported for a format version this binary does not read.
Result<Manifest> DecodeManifest(std::string_view bytes, std::string_view name);

// Reads and decodes a local manifest file; errors name `path`.
Result<Manifest> ReadManifestFile(const std::string& path);
// Writes `bytes` to `path` atomically (a temporary file beside it, fsync, rename).
Status WriteManifestFile(const std::string& path, std::string_view bytes);

// Lists every object of `store` (ListObjectsV2 without delimiter, every page, through
// ForEachListPage) into a manifest of `source`. `progress`, when set, is called after each page
// with the number of objects so far.
Result<Manifest> BuildManifest(BlobStore* store, std::string source, Clock* clock,
                               const std::function<void(uint64_t)>& progress = nullptr);

struct ManifestChange {
  ManifestEntry before, after;
};
struct ManifestDiff {
  std::vector<ManifestEntry> added;     // in B, not in A
  std::vector<ManifestEntry> removed;   // in A, not in B
  std::vector<ManifestChange> changed;  // in both, with another size or ETag
  bool empty() const { return added.empty() && removed.empty() && changed.empty(); }
};
ManifestDiff DiffManifests(const Manifest& a, const Manifest& b);

struct ManifestCatalogStats {
  uint64_t files = 0;        // files served
  uint64_t directories = 0;  // directories served, the root included
  uint64_t hidden = 0;       // keys not served: unsafe names, or a file shadowed by a directory
};

// A Catalog serving exactly the tree of `m` (same path rules as the listing Catalog: a key
// "a/b/c" is directory "a", directory "b", file "c"; a key ending in '/' is a directory; a name
// that is both a file and a directory is the directory; names the listing Catalog hides are
// hidden). It never talks to the origin: Lookup, ReadDir, Snapshot and Revalidate answer from
// the manifest, metadata_ttl() is kForever, and Invalidate (a read met another version) only
// counts: the file stays pinned to the manifest's ETag, so every read of a changed object fails
// with FailedPrecondition (ESTALE). manifest_checksum() returns m.checksum.
std::unique_ptr<Catalog> NewManifestCatalog(const Manifest& m,
                                            ManifestCatalogStats* stats = nullptr);

}  // namespace tierfs
