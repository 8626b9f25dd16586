// S3BlobStore — BlobStore over the S3 REST API (AWS S3, MinIO, Ceph RGW, s3rver), using the
// shared HttpEngine for transfers and SignV4 for authentication (internal to blobclient/; the
// public factory is NewS3BlobStore in blob_store.h). Its parts, by role:
//   s3_blob_store.cc  the operations, the retry loop of everything but Read (Perform), the
//                     adaptive limiter's feedback, the factory;
//   s3_get_run.cc     Read: the ranged GETs of one read (parts, hedges, retries per part);
//   s3_request.cc     the endpoint, addressing style, object paths, request building and SigV4;
//   s3_answers.cc     the wire formats of S3 answers and the check of a GET's answer.
//
// Retries follow the one policy of base/retry.h: jittered exponential backoff between
// options.backoff_base and options.backoff_max, at most options.max_attempts attempts, only for
// failures whose Status is retryable (transport errors, timeouts, resets, 5xx including 503
// SlowDown, 429, a body cut short; decided where the Status is made: HttpStatusToStatus,
// CheckGetAnswer). 404/403/412 and other 4xx answers are never retried. Every operation but Read
// runs in its Retry loop (Perform); each attempt is bounded by options.request_timeout, so an
// origin outage ends in Unavailable/TimedOut, never a hang.
//
// Read() goes through GetRun instead, a small event loop on the calling thread (no extra
// threads) that drives asynchronous ranged GETs on the shared engine:
//   - a large read is split into parts of options.part_size, up to max_parts_in_flight at once,
//     each streaming into its own slice of the caller's buffer and retried on its own;
//   - a GET still unanswered after max(hedge_min_delay, the tracker's p95 for its size) gets one
//     duplicate, unless bytes of its body keep arriving (slow but not stuck: a busy link or origin,
//     which a duplicate would only load more); a body quiet for max(hedge_min_delay, the p95 time
//     to first byte) counts as stuck. The original streams into the caller's slice, the
//     duplicate into a private buffer; the first successful answer wins, the other is cancelled,
//     and a winning duplicate is copied into the slice only after the original's cancellation
//     has completed, so the caller never sees interleaved bytes. Hedges are at most
//     options.hedge_percent % of GETs, less while they keep losing (HedgeBudget, adaptive.h).
//     GetRun::Run returns only when none of its requests is still in flight: nothing writes
//     into the caller's buffer after Read() returned.
// Every request of the store (reads or not) holds a slot of the AIMD limiter while in flight, and
// its outcome feeds the limiter (see adaptive.h). Every GET answer is checked against what was
// asked (s3_answers.h).
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "base/retry.h"
#include "blobclient/adaptive.h"
#include "blobclient/blob_store.h"
#include "blobclient/http_transport.h"
#include "blobclient/s3_answers.h"
#include "blobclient/s3_errors.h"
#include "blobclient/sigv4.h"

namespace tierfs::blobclient {

struct Endpoint {
  std::string scheme;  // "http" or "https"
  std::string host;    // without port
  std::string port;    // "" unless given explicitly (and not the scheme's default)
};

// "scheme://host[:port][/]": InvalidArgument naming the URL (credentials redacted) otherwise.
Result<Endpoint> ParseEndpoint(std::string_view url);

// DNS-compatible (virtual-host addressable) bucket name. Dots break TLS wildcard certificates,
// so with https they force path style.
bool DnsCompatibleBucket(std::string_view b, bool https);

class S3BlobStore final : public BlobStore {
 public:
  // REQUIRES: `options` validated (NewS3BlobStore); `engine` and `clock` outlive the store.
  S3BlobStore(const S3Options& options, Endpoint endpoint, bool virtual_host, HttpEngine* engine,
              Clock* clock);

  // One HEAD of the bucket, without retries; any answer (404, 301 and 403 included) is returned
  // as is. Region discovery reads its x-amz-bucket-region.
  Result<HttpResponse> HeadBucketOnce();

  std::string Describe() const override { return describe_; }
  Result<ObjectInfo> Head(std::string_view key) override;
  Result<size_t> Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                      std::string_view if_match_etag) override;
  Result<size_t> ReadPinned(std::string_view key, uint64_t offset, std::span<std::byte> out,
                            const ObjectInfo& pinned) override;
  // Each part's body goes straight into its slice of the pieces (the hedge's duplicate into a
  // buffer of its own, copied in if it wins, as for a contiguous read).
  Result<size_t> ReadPinnedScatter(std::string_view key, uint64_t offset, const ScatterBuffer& out,
                                   const ObjectInfo& pinned) override;
  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override;
  Status Put(std::string_view key, std::span<const std::byte> data) override;
  Status Delete(std::string_view key) override;
  BlobStoreStats Stats() const override;

 private:
  class GetRun;  // s3_get_run.cc

  struct Call {
    std::string method;
    std::string path;  // not encoded
    HeaderList query;  // not encoded
    HeaderList headers;
    std::span<const std::byte> body;
    std::string payload_sha256;  // empty: the empty payload
    const ScatterBuffer* sink = nullptr;
    uint64_t range_offset = 0;
    bool accept_416 = false;
    // Cap on a 2xx body kept in memory (http_transport.h); only LIST answers carry a real body.
    size_t max_body = kMaxSmallBody;
    std::string context;  // "GET key @off", for messages
  };

  // errors_context_ naming the key the failed request was signed with (nullptr: anonymous).
  S3ErrorContext ErrorsContext(const Credentials* used) const;
  Status CheckKey(std::string_view key) const;
  std::string ObjectPath(std::string_view key) const;
  Status Fail(Status st);
  // The credentials to sign the next request with; nullptr when anonymous.
  Result<std::shared_ptr<const Credentials>> SigningCredentials() const;
  // Whether `resp` to a request signed with temporary credentials `used` says they are stale
  // (static credentials are never refreshed: their 403 stands).
  bool StaleCredentialsAnswer(const HttpResponse& resp,
                              const std::shared_ptr<const Credentials>& used) const;
  // Whether `resp` to a request signed with `used` says the credentials are stale (expired
  // token, rotated key: blob_store.h); if so, forces one refresh. True when the request should be
  // retried once with the new credentials.
  bool RefreshAfter(const HttpResponse& resp, const std::shared_ptr<const Credentials>& used,
                    const std::string& context);
  // s3_request.cc. `creds`: nullptr for an anonymous request.
  HttpRequest BuildRequest(const Call& c, const Credentials* creds) const;
  // The limiter's verdict on one finished request: OK answers let it grow, throttling (503, 429),
  // timeouts and latency spikes cut it. `took` is curl's total time for the request.
  void Feedback(const Status& transport, long http_status, std::chrono::nanoseconds took,
                uint64_t body_bytes);
  std::chrono::nanoseconds CutWindow() const;
  // Requests beyond the store's adaptive limit wait here rather than in curl's per-host queue,
  // where their timeouts would already run; the wait itself is bounded by request_timeout.
  Result<HttpResponse> ExecuteLimited(HttpRequest req);

  // s3_get_run.cc: `out` read from `offset` of `key` in parts, each answer checked against
  // `expect`.
  Result<size_t> ReadChecked(std::string_view key, uint64_t offset, const ScatterBuffer& out,
                             const S3ReadExpect& expect);

  // Everything but Read (GetRun follows the same policy per part), in the one retry loop. OK with
  // a 2xx response (or 416 when c.accept_416).
  Result<HttpResponse> Perform(const Call& c);
  // One attempt of Perform. An answer saying the credentials are stale forces one refresh per
  // Perform, and the request is sent again at once with the new ones, outside the retry budget.
  Result<HttpResponse> PerformOnce(const Call& c, bool* refreshed);
  Result<ListPage> ParseList(const std::string& xml, const std::string& context);

  // Constant after construction.
  const S3Options options_;
  const RetryPolicy retry_{.max_attempts = options_.max_attempts,
                           .backoff_base = options_.backoff_base,
                           .backoff_max = options_.backoff_max};
  const Endpoint endpoint_;
  const bool virtual_host_;
  HttpEngine* const engine_;  // not owned
  Clock* const clock_;        // not owned
  // Signs every request; nullptr when anonymous. Shared, thread-safe.
  const std::shared_ptr<CredentialsProvider> credentials_;
  std::string host_header_;
  std::string describe_;
  S3ErrorContext errors_context_;  // for messages naming cause and fix

  std::atomic<uint64_t> requests_{0}, retries_{0}, bytes_read_{0}, bytes_written_{0}, errors_{0};
  std::atomic<uint64_t> hedges_issued_{0}, hedges_won_{0}, parallel_reads_{0};
  std::atomic<uint64_t> forced_refreshes_{0};
  std::atomic<uint64_t> throttled_{0};  // 503 SlowDown / 429 answers

  // Thread-safe themselves.
  LatencyTracker tracker_;
  AimdLimiter limiter_{options_.initial_concurrency, options_.max_connections};
  HedgeBudget hedge_budget_{options_.hedge_percent};
};

}  // namespace tierfs::blobclient
