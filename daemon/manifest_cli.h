// `tierfs manifest create` and `tierfs manifest diff` (dataset manifests, tiercache/manifest.h),
// and what a manifest mount needs before it serves: fetching a manifest stored as an object and
// checking that it describes the mounted source.
//
// Thread-safety: plain functions; no shared state.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"
#include "blobclient/blob_store.h"
#include "daemon/config.h"
#include "tiercache/manifest.h"

namespace tierfs {

// Lists every object of `store` (the origin `source`) and writes the manifest to `out_path`;
// prints a summary (objects, bytes, file size, checksum, time) to stdout. Exit code: 0 written,
// 1 the listing or the write failed (message on stderr, no file left behind).
int RunManifestCreate(BlobStore* store, const std::string& source, const std::string& out_path);

// `tierfs manifest create`: the origin `source` opened as a mount would open it (config file
// `config_path` ("": none), `flags`, environment, credential chain), then RunManifestCreate over
// it. Exit code as RunManifestCreate's, and 2 for bad settings.
int RunManifestCreateCli(const std::string& source, const std::string& out,
                         const std::string& config_path, const MountFlags& flags);

// Compares two manifest files: one line per difference on stdout ("+ KEY SIZE ETAG" added,
// "- KEY SIZE ETAG" removed, "~ KEY SIZE ETAG -> SIZE ETAG" changed; keys escaped as in the
// log), then a summary line unless `quiet` (then nothing is printed). Exit code as diff(1):
// 0 the same objects, 1 different, 2 trouble (a file unreadable or not a valid manifest).
int RunManifestDiff(const std::string& a, const std::string& b, bool quiet);

// Reads the whole object `key` of `store` (Read until a short answer: no HEAD) and decodes it
// as a manifest; errors name `name` (the s3:// URI).
Result<Manifest> FetchManifest(BlobStore* store, std::string_view key, std::string_view name);

// OK when `m` was made from `source` (compared as parsed URIs: bucket and prefix, or path);
// InvalidArgument naming both and `manifest_name` otherwise.
Status CheckManifestSource(const Manifest& m, std::string_view source,
                           std::string_view manifest_name);

}  // namespace tierfs
