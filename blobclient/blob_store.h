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
namespace metrics {
class Exposition;
}

class HttpTransport;

// The owner, group and permission bits of a file or directory, for stores that have them
// (file://; S3 objects have none: `known` false).
struct Ownership {
  bool known = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t mode = 0;  // permission bits only (0777; no setuid, setgid or sticky bit)
};

struct ObjectInfo {
  uint64_t size = 0;
  // As the store sends it, quotes stripped: "9b2cf535f27731c974343645a3985328"; a weak ETag keeps
  // its prefix (W/"abc"). Empty when the store sent none (blocks are then keyed by size and mtime).
  std::string etag;
  int64_t mtime_ns = 0;  // Last-Modified, ns since the Unix epoch
  Ownership owner;       // file:// only
};

// A byte buffer in pieces, read and written as the concatenation of its pieces in order: the
// storage of a run of blocks, each block's own, filled by one ranged read
// (BlobStore::ReadPinnedScatter) without a copy. Does not own the bytes. Cheap to copy (one
// vector of spans).
class ScatterBuffer {
 public:
  ScatterBuffer() = default;
  explicit ScatterBuffer(std::span<std::byte> one);
  // Empty pieces are dropped; a piece that starts where the one before it ends is joined to it.
  explicit ScatterBuffer(std::vector<std::span<std::byte>> pieces);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const std::vector<std::span<std::byte>>& pieces() const { return pieces_; }
  // Bytes [offset, offset + len) of the concatenation. REQUIRES: offset + len <= size().
  ScatterBuffer Slice(size_t offset, size_t len) const;
  // Copies `data` to bytes [offset, offset + data.size()). REQUIRES: that is within size().
  void CopyIn(size_t offset, std::span<const std::byte> data) const;

 private:
  std::vector<std::span<std::byte>> pieces_;
  size_t size_ = 0;
};

struct ListEntry {
  std::string key;  // relative to the store's prefix
  ObjectInfo info;
};

struct ListPage {
  std::vector<ListEntry> objects;     // keys in this "directory" (with delimiter) or below it
  std::vector<std::string> prefixes;  // CommonPrefixes, relative, each ending in the delimiter
  // The owner of each prefix's directory, in the order of `prefixes`, from stores that have
  // directories (file:// with delimiter "/"); empty otherwise.
  std::vector<Ownership> prefix_owners;
  std::string next_token;  // empty when this was the last page
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
  // Credentials (S3 stores signing with a provider; see CredentialsProvider).
  uint64_t credential_refreshes = 0;
  uint64_t credential_refresh_failures = 0;
  uint64_t credential_forced_refreshes = 0;  // requests answered 403 that forced a refresh
  uint64_t throttled = 0;                    // answers 503 SlowDown or 429 (each attempt)
};

// Appends the tierfs_store_* metrics of `s` (docs/operations.md, "Metrics") with the label
// store=`store`
// ("origin", "l3").
void CollectStoreMetrics(const BlobStoreStats& s, std::string_view store, metrics::Exposition* e);

// Marks the reads this thread makes while it lives as reads a store does not hedge
// (S3StoreOptions::hedge: a duplicate GET buys latency with bytes): background work that no
// reader waits on (a cache filling the gaps of blocks it already partly holds), and reads made to
// move fewer bytes (a cache's projected reads, where what the duplicate costs is the point).
// Nests; thread-compatible (each thread its own).
class UnhedgedReads {
 public:
  UnhedgedReads() : was_(active_) { active_ = true; }
  ~UnhedgedReads() { active_ = was_; }
  UnhedgedReads(const UnhedgedReads&) = delete;
  UnhedgedReads& operator=(const UnhedgedReads&) = delete;
  // Whether the calling thread is inside one.
  static bool Active() { return active_; }

 private:
  static thread_local bool active_;
  const bool was_;
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

  // ReadPinned() into `out` in pieces: bytes [offset, offset + out.size()) land in out's pieces in
  // order, short only at the end of the object, with the same checks. S3 stores write each
  // answer's body straight into the pieces (one ranged GET per part, as for ReadPinned); the
  // default reads into one buffer of its own and copies the bytes out.
  virtual Result<size_t> ReadPinnedScatter(std::string_view key, uint64_t offset,
                                           const ScatterBuffer& out, const ObjectInfo& pinned);

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

// ---- Credentials providers ----
//
// A CredentialsProvider hands the S3 store the credentials to sign each request with. Static
// credentials (explicit keys, AWS_ACCESS_KEY_ID..., keys in the shared files, a
// credential_process answer without Expiration) never change. Temporary credentials (with an
// Expiration: web identity, AssumeRole, container, IMDS, credential_process with Expiration)
// are refreshed in the background. The exact rules (CONTRACT; tests and the RGW rotation test
// rely on them):
//   - credentials fetched at time F that expire at E are refreshed at E - min(5 min, (E-F)/2);
//   - a failed refresh is retried with backoff (1 s, 2 s, 4 s ... 60 s, but never later than
//     half the time left before E, and at least 1 s apart) and the old credentials stay in use
//     while they are valid; the error is logged and counted;
//   - Current() never waits for a refresh in progress unless the current credentials are already
//     expired; then it wakes the refresher and waits for one refresh attempt, at most
//     kCredentialsWaitBound, and fails with Unavailable naming the source if that did not help;
//   - ForceRefresh(seen) (the S3 store calls it once per request answered 403 with ExpiredToken,
//     InvalidAccessKeyId, InvalidClientTokenId, SignatureDoesNotMatch, TokenRefreshRequired, or
//     a bare 403 while the credentials are temporary) returns at once if `seen` was already
//     replaced, else runs one refresh (joining one in progress) and waits for it, bounded by
//     kCredentialsWaitBound; true when newer credentials are available (the store then retries
//     the request once), false for static credentials or a failed refresh.
// Thread-safe; shared by every store that signs with it.
inline constexpr std::chrono::seconds kCredentialsWaitBound{10};

struct CredentialsStats {
  uint64_t refreshes = 0;          // successful refreshes (the first fetch not counted)
  uint64_t refresh_failures = 0;   // failed refresh attempts
  uint64_t forced_refreshes = 0;   // ForceRefresh calls that started or joined a refresh
  int64_t expiration_unix_ns = 0;  // of the credentials in use; 0: they do not expire
};

class CredentialsProvider {
 public:
  virtual ~CredentialsProvider() = default;
  // The credentials to sign with now (see the rules above).
  virtual Result<std::shared_ptr<const Credentials>> Current() = 0;
  // See the rules above. `seen`: the credentials the failed request was signed with.
  virtual bool ForceRefresh(const std::shared_ptr<const Credentials>& seen) = 0;
  // True for credentials that expire and are refreshed.
  virtual bool temporary() const = 0;
  // Where the credentials come from, for logs: "environment", "profile work (credential_process)",
  // "EC2 instance metadata (role r)"... Never a secret.
  virtual std::string source() const = 0;
  virtual CredentialsStats Stats() const = 0;
};

// A provider that always returns `credentials` (never refreshed).
std::shared_ptr<CredentialsProvider> NewStaticCredentialsProvider(Credentials credentials,
                                                                  std::string source);

// The AWS SDKs' default chain. Components never read the environment themselves (C9): daemon/
// passes `getenv`.
using CredentialsGetEnv = std::function<std::optional<std::string>(const char*)>;
struct CredentialChainOptions {
  CredentialsGetEnv getenv;  // required
  // The profile for the shared files; empty: AWS_PROFILE, else "default". When
  // `profile_explicit` (s3.profile / --profile), the environment keys are skipped, as
  // `aws --profile` does.
  std::string profile;
  bool profile_explicit = false;
  // Region for STS (regional endpoint https://sts.REGION.amazonaws.com); empty: AWS_REGION,
  // AWS_DEFAULT_REGION, the profile's region, else the global endpoint.
  std::string region;
  // For the web identity, STS, container and IMDS requests. Not owned; must outlive the chain.
  HttpTransport* transport = nullptr;
  Clock* clock = nullptr;  // required; wall time for expirations
  // The home directory when HOME is unset (systemd, boot); unset: the passwd entry of the
  // effective uid.
  std::function<std::optional<std::string>()> passwd_home;
  // IMDS (tests shorten them). The SDKs use 1 s and 1-2 attempts so a non-EC2 host is not
  // delayed.
  std::chrono::milliseconds imds_timeout{1000};
  int imds_attempts = 2;
  std::chrono::milliseconds http_timeout{5000};      // STS and container requests
  std::chrono::milliseconds process_timeout{60000};  // credential_process
  std::string ca_bundle;                             // for https STS/container endpoints
};

struct CredentialChain {
  std::shared_ptr<CredentialsProvider> provider;
  // The `region` of the profile in the config file, when it names one (the daemon uses it when
  // no region is configured); empty otherwise.
  std::string profile_region;
};

// Resolves the chain in the SDKs' order: environment -> web identity (AWS_WEB_IDENTITY_TOKEN_FILE
// + AWS_ROLE_ARN) -> shared config/credentials files (the profile: role_arn + source_profile /
// credential_source / web_identity_token_file, static keys, credential_process) -> container
// credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI / _RELATIVE_URI) -> EC2 IMDSv2. The first
// source that is configured is used; a configured source that fails ends the chain with its
// error (naming the source and the cause, never a secret). NotFound listing what was tried when
// no source is configured. Background refresh starts for temporary credentials.
Result<CredentialChain> NewCredentialChain(const CredentialChainOptions& options);

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
  // What requests are signed with: `credentials_provider` when set (shared, refreshed), else the
  // fixed `credentials` (or none when credentials.anonymous).
  Credentials credentials;
  std::shared_ptr<CredentialsProvider> credentials_provider;
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
  // 64: a fresh mount starts at the full default parallelism. Starting at 16 and doubling per
  // round trip cost a cold loader's first batch the two round trips to 64 (0.43-0.71 s against
  // 0.22-0.41 s, six pairs;
  // bench/results/2026-12-06-origin-concurrency-start.md); the first push-back still halves it.
  int initial_concurrency = 64;
  // Hedged GETs: a ranged GET of at most hedge_max_bytes still unanswered after
  // max(hedge_min_delay, the store's recent p95 for that size) gets one duplicate, unless its body
  // is still arriving (a byte within max(hedge_min_delay, the recent p95 time to first byte): it
  // is slow, not stuck, and a duplicate would only share its bandwidth); the first
  // successful answer wins and the other is cancelled. Needs ~20 completed GETs of history before
  // it starts; a duplicate is only sent if the concurrency limit has room, and at most
  // hedge_percent % of GETs are hedged (blobclient::HedgeBudget, bursts of up to 10).
  bool hedge = true;
  int hedge_percent = 5;
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
