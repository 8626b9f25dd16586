// blobclient — talks to object stores. The one public header of the module (conventions C2).
//
// A BlobStore is bound to one bucket (S3) or one directory (file://) and an optional key prefix;
// every key passed to it or returned by it is relative to that prefix ("a/b.bin", never
// "/a/b.bin"). Implementations: the S3 API over libcurl (AWS S3, MinIO, Ceph RGW, GCS interop)
// and local/NFS directories.
//
// Thread-safe; no external synchronization needed. Calls block the calling thread while the
// shared I/O thread does the transfer. Retries (jittered exponential backoff on 5xx, 503 SlowDown,
// timeouts and resets) happen inside; a returned Unavailable/TimedOut/IOError means the retries
// were spent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/result.h"

namespace tierfs {

struct ObjectInfo {
  uint64_t size = 0;
  // As the store sends it, quotes stripped: "9b2cf535f27731c974343645a3985328"; a weak ETag keeps
  // its prefix (W/"abc"). Empty when the store sent none (blocks are then keyed by size and mtime).
  std::string etag;
  int64_t mtime_ns = 0;  // Last-Modified, ns since the Unix epoch
};

struct ListEntry {
  std::string key;  // relative to the store's prefix
  ObjectInfo info;
};

struct ListPage {
  std::vector<ListEntry> objects;     // keys in this "directory" (with delimiter) or below it
  std::vector<std::string> prefixes;  // CommonPrefixes, relative, each ending in the delimiter
  std::string next_token;             // empty when this was the last page
};

struct BlobStoreStats {
  uint64_t requests = 0;  // HTTP requests (or file ops) started, retries included
  uint64_t retries = 0;
  uint64_t bytes_read = 0;  // body bytes of successful GETs
  uint64_t bytes_written = 0;
  uint64_t errors = 0;  // calls that returned a non-OK, non-NotFound status
  // Tail-latency and load control (S3 stores; 0 elsewhere).
  uint64_t hedges_issued = 0;          // duplicate GETs sent because the first was late
  uint64_t hedges_won = 0;             // ... of which answered first (the original was cancelled)
  uint64_t concurrency_limit = 0;      // current AIMD limit on requests in flight
  uint64_t concurrency_decreases = 0;  // times the limit was halved (throttling, timeouts, spikes)
  uint64_t ttfb_p95_us = 0;            // recent p95 time to first byte of GETs; 0 until measured
  uint64_t parallel_reads = 0;         // Read calls split into parallel ranged GETs
};

class BlobStore {
 public:
  virtual ~BlobStore() = default;

  // A stable identity of this source, used in block ids and metadata keys:
  // "s3://ENDPOINT_HOST/BUCKET/PREFIX" or "file:///abs/path". Never contains credentials.
  virtual std::string Describe() const = 0;

  // Size, ETag and mtime of one object. NotFound when it does not exist.
  virtual Result<ObjectInfo> Head(std::string_view key) = 0;

  // Reads up to out.size() bytes at `offset` into `out`; returns the number read, short only at
  // the end of the object (0 at or past the end). With a non-empty `if_match_etag` the store must
  // refuse (FailedPrecondition) if the object no longer has that ETag. NotFound if it is gone.
  virtual Result<size_t> Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                              std::string_view if_match_etag) = 0;

  // Read() of one pinned version: the version an open file handle took (size, ETag, mtime).
  // Stores that can check their answers do so against all of it: the answer's ETag (weak `W/`
  // and quotes stripped) must equal pinned.etag when it is set, the object's total size
  // (Content-Range or a 200's Content-Length) must equal pinned.size, and without an ETag its
  // Last-Modified must equal pinned.mtime_ns (to the second). A different version is
  // FailedPrecondition (nothing of it is returned as data), a malformed answer Corruption.
  // The default (file://, fakes) is Read() with If-Match = pinned.etag.
  virtual Result<size_t> ReadPinned(std::string_view key, uint64_t offset, std::span<std::byte> out,
                                    const ObjectInfo& pinned) {
    return Read(key, offset, out, pinned.etag);
  }

  // One page of ListObjectsV2 under `prefix` (relative). With delimiter "/" it returns the
  // objects directly in that "directory" and its sub-directories as `prefixes`. `token` is the
  // previous page's next_token ("" for the first page). Keys come back in byte order.
  virtual Result<ListPage> List(std::string_view prefix, std::string_view delimiter,
                                std::string_view token, int max_keys = 1000) = 0;

  // Writes a whole object (used by the regional L3 tier). NotSupported on read-only sources.
  virtual Status Put(std::string_view key, std::span<const std::byte> data) = 0;

  // Deletes an object; OK if it did not exist.
  virtual Status Delete(std::string_view key) = 0;

  virtual BlobStoreStats Stats() const = 0;
};

// Following a listing's continuation tokens. A server that hands out a token it already gave in
// this listing (any cycle: A->A, A->B->A, ...) or more than `max_pages` pages would keep a
// caller looping forever; ListPageTracker turns both into Corruption naming the listing.
// Tokens are remembered as 128-bit fingerprints (16 bytes + set overhead per page), so the
// memory of the check stays small even at the page cap.
inline constexpr uint64_t kMaxListPages = 1'000'000;  // 10^9 keys at 1000 keys per page

// Not thread-safe; one per listing. REQUIRES: external synchronization.
class ListPageTracker {
 public:
  // `what` names the listing in errors ("listing 'a/b/'").
  explicit ListPageTracker(std::string what, uint64_t max_pages = kMaxListPages);
  ~ListPageTracker();
  ListPageTracker(const ListPageTracker&) = delete;
  ListPageTracker& operator=(const ListPageTracker&) = delete;

  // Call with each page's next_token before following it ("" ends the listing: OK). Corruption
  // if the token was seen before in this listing or the page cap is reached.
  Status Next(std::string_view next_token);
  uint64_t pages() const { return pages_; }

 private:
  struct Seen;
  const std::string what_;
  const uint64_t max_pages_;
  uint64_t pages_ = 0;
  std::unique_ptr<Seen> seen_;
};

// Lists every page under `prefix` (see BlobStore::List), calling fn(page) for each in order; a
// non-OK Status from fn stops the listing and is returned. Token cycles and the page cap end it
// with Corruption (ListPageTracker).
Status ForEachListPage(BlobStore* store, std::string_view prefix, std::string_view delimiter,
                       int max_keys, const std::function<Status(ListPage&)>& fn,
                       uint64_t max_pages = kMaxListPages);

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;  // never logged
  std::string session_token;      // empty unless temporary credentials
  bool anonymous = false;         // --no-sign-request: send no Authorization header
};

// Where credentials come from, in order: explicit values, the environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), then the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials) for `profile` (AWS_PROFILE, else "default").
// Called by daemon/, which decides; components never read the environment themselves (C9).
Result<Credentials> ResolveCredentials(std::string_view profile = {});

struct S3Options {
  std::string bucket;  // required
  std::string prefix;  // optional key prefix, without leading '/', ends in '/' if set
  // "https://s3.us-east-1.amazonaws.com" by default (from region); "http://127.0.0.1:4568" for
  // a local server. Scheme required.
  std::string endpoint;
  std::string region = "us-east-1";
  // The user chose no region (no flag, config key or environment variable): NewS3BlobStore asks
  // the bucket (one HEAD, no retries) and, when its x-amz-bucket-region answer (S3 sends it with
  // 200, 301 PermanentRedirect, 400 AuthorizationHeaderMalformed and 403) names another region,
  // signs for that region instead, and talks to its endpoint when `endpoint` is empty. Logged once.
  bool discover_region = false;
  enum class Addressing { kAuto, kPath, kVirtualHost };
  // kAuto: virtual-host for AWS endpoints with DNS-compatible bucket names, path otherwise.
  Addressing addressing = Addressing::kAuto;
  Credentials credentials;
  // Where the credentials came from ("environment", "profile default of ~/.aws/credentials"),
  // named in the error messages of a refused key (never the secret). Empty: not named.
  std::string credentials_source;
  std::string ca_bundle;  // empty: the system CA store; used for https endpoints only
  std::chrono::milliseconds connect_timeout{3000};
  std::chrono::milliseconds request_timeout{30000};  // whole request, per attempt
  std::chrono::milliseconds low_speed_time{10000};   // abort a body that stalls this long
  int max_attempts = 5;                              // 1 = no retries
  std::chrono::milliseconds backoff_base{50};
  std::chrono::milliseconds backoff_max{2000};
  // Upper bound of the adaptive (AIMD) limit on this store's requests in flight. The limit
  // starts at initial_concurrency (clamped to this), grows by one per `limit` successful
  // requests while it is in use, and halves on 503 SlowDown / 429, timeouts and latency spikes
  // (at most once per round trip). Requests beyond it wait, at most request_timeout.
  int max_connections = 64;  // per store
  int initial_concurrency = 16;
  // Hedged GETs: a ranged GET of at most hedge_max_bytes still unanswered after
  // max(hedge_min_delay, the store's recent p95 for that size) gets one duplicate; the first
  // successful answer wins and the other is cancelled. Needs ~20 completed GETs of history before
  // it starts; a duplicate is only sent if the concurrency limit has room.
  bool hedge = true;
  std::chrono::milliseconds hedge_min_delay{20};
  uint64_t hedge_max_bytes = 8ull << 20;
  // Reads larger than part_size are split into ranged GETs of part_size bytes, at most
  // max_parts_in_flight of them at once (all carrying If-Match), each retried on its own.
  uint64_t part_size = 8ull << 20;
  int max_parts_in_flight = 8;
};

struct FileStoreOptions {
  std::string root;  // absolute directory path; keys are paths below it
  // Resolve paths with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) when the kernel has it.
  // false: one O_NOFOLLOW openat per component, what kernels before 5.6 get (tests use it to
  // cover that path).
  bool use_openat2 = true;
};

// The HTTP I/O engine shared by every S3 store of the process: one thread ("tierfs-http")
// driving curl_multi, pooled easy handles (connection reuse). Thread-safe. Owned by daemon/ and
// passed by pointer; must outlive every store using it. Opaque outside blobclient/.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
};
struct HttpTransportOptions {
  int max_total_connections = 256;
  int max_host_connections = 64;
};
Result<std::unique_ptr<HttpTransport>> NewHttpTransport(const HttpTransportOptions& options);

// `transport` and `clock` are not owned and must outlive the store.
Result<std::unique_ptr<BlobStore>> NewS3BlobStore(const S3Options& options,
                                                  HttpTransport* transport, Clock* clock);
Result<std::unique_ptr<BlobStore>> NewFileBlobStore(const FileStoreOptions& options);

// Parses "s3://bucket/prefix" into bucket and prefix ("" or ending in '/'), "file:///abs" into
// root. InvalidArgument otherwise, naming the source.
struct SourceUri {
  enum class Scheme { kS3, kFile } scheme;
  std::string bucket;  // s3
  std::string prefix;  // s3
  std::string path;    // file
};
Result<SourceUri> ParseSourceUri(std::string_view uri);

}  // namespace tierfs
