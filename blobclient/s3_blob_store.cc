// S3BlobStore — BlobStore over the S3 REST API (AWS S3, MinIO, Ceph RGW, s3rver), using the
// shared HttpEngine for transfers and SignV4 for authentication.
//
// Retries follow the one policy of base/retry.h: jittered exponential backoff between
// options.backoff_base and options.backoff_max, at most options.max_attempts attempts, only for
// failures whose Status is retryable (transport errors, timeouts, resets, 5xx including 503
// SlowDown, 429, a body cut short; decided where the Status is made: HttpStatusToStatus,
// CheckAnswer). 404/403/412 and other 4xx answers are never retried. Every operation but Read
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
//     GetRun::Run returns only when none of
//     its requests is still in flight: nothing writes into the caller's buffer after Read()
//     returned.
// Every request of the store (reads or not) holds a slot of the AIMD limiter while in flight, and
// its outcome feeds the limiter (see adaptive.h).
//
// Every GET answer is checked against what was asked (CheckAnswer), because origins and proxies
// may ignore If-Match (s3rver does) or Range: the ETag against the pinned one, Content-Range start,
// end and total (or a 200's Content-Length) against the request and the pinned size, the body
// length against what was announced, and all parts of one read against each other. Another
// version is FailedPrecondition (the fuse layer's ESTALE), a malformed answer Corruption (EIO).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>
#include <deque>
#include <pugixml.hpp>

#include "base/logging.h"
#include "base/mutex.h"
#include "base/retry.h"
#include "base/strings.h"
#include "blobclient/adaptive.h"
#include "blobclient/blob_store.h"
#include "blobclient/credentials.h"
#include "blobclient/http_transport.h"
#include "blobclient/list_xml.h"
#include "blobclient/s3_errors.h"
#include "blobclient/sigv4.h"

namespace tierfs {
namespace {

using blobclient::HeaderList;
using blobclient::HttpEngine;
using blobclient::HttpProgress;
using blobclient::HttpRequest;
using blobclient::HttpRequestId;
using blobclient::HttpResponse;
using SteadyClock = std::chrono::steady_clock;

// A completed GET slower than max(kSpikeFactor × the expected p95, kSpikeFloor) is a latency
// spike: a congestion signal for the limiter, like a 503.
constexpr int kSpikeFactor = 4;
constexpr std::chrono::milliseconds kSpikeFloor{50};
// The limiter is cut at most once per max(kMinCutWindow, p95 TTFB): one round trip's worth of
// throttled answers is one signal.
constexpr std::chrono::milliseconds kMinCutWindow{50};

struct Endpoint {
  std::string scheme;  // "http" or "https"
  std::string host;    // without port
  std::string port;    // "" unless given explicitly (and not the scheme's default)
};

Result<Endpoint> ParseEndpoint(std::string_view url) {
  Endpoint ep;
  size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return Status::InvalidArgument("s3 endpoint needs a scheme (http:// or https://): '" +
                                   std::string(url) + "'");
  }
  ep.scheme = std::string(url.substr(0, sep));
  for (char& c : ep.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ep.scheme != "http" && ep.scheme != "https") {
    return Status::InvalidArgument("s3 endpoint scheme must be http or https: '" + RedactUrl(url) +
                                   "'");
  }
  std::string_view rest = url.substr(sep + 3);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos && rest.substr(slash) != "/") {
    return Status::InvalidArgument("s3 endpoint must not have a path: '" + RedactUrl(url) + "'");
  }
  if (authority.empty() || authority.find('@') != std::string_view::npos) {
    return Status::InvalidArgument("s3 endpoint needs a host (and no user info): '" +
                                   RedactUrl(url) + "'");
  }
  size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    ep.host = std::string(authority.substr(0, colon));
    ep.port = std::string(authority.substr(colon + 1));
    if (ep.port.empty() || ep.port.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("s3 endpoint has a bad port: '" + RedactUrl(url) + "'");
    }
    if ((ep.scheme == "http" && ep.port == "80") || (ep.scheme == "https" && ep.port == "443")) {
      ep.port.clear();  // curl sends Host without a default port; sign the same
    }
  } else {
    ep.host = std::string(authority);
  }
  for (char& c : ep.host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ep;
}

// DNS-compatible (virtual-host addressable) bucket name. Dots break TLS wildcard certificates,
// so with https they force path style.
bool DnsCompatibleBucket(std::string_view b, bool https) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
    if (c == '.' && https) return false;
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(b.front()) || !alnum(b.back())) return false;
  if (b.find("..") != std::string_view::npos) return false;
  return true;
}

std::string StripQuotes(std::string_view s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return std::string(s);
}

// Seconds since the epoch → ns. False outside what int64 ns holds (years before 1678 or after
// 2261: a server's date is not trusted to be sane); the callers then answer 0, as for an
// unparsable date.
bool SecondsToNanos(time_t s, int64_t* ns) {
  constexpr int64_t kMaxSeconds = INT64_MAX / 1'000'000'000LL - 1;
  if (s > kMaxSeconds || s < -kMaxSeconds) return false;
  *ns = static_cast<int64_t>(s) * 1'000'000'000LL;
  return true;
}

// "Wed, 12 Oct 2009 17:50:00 GMT" → ns since the epoch; 0 if unparsable.
int64_t ParseHttpDate(std::string_view s) {
  std::tm tm{};
  std::string str(s);
  int64_t ns = 0;
  if (strptime(str.c_str(), "%a, %d %b %Y %H:%M:%S", &tm) == nullptr) return 0;
  return SecondsToNanos(timegm(&tm), &ns) ? ns : 0;
}

// "2009-10-12T17:50:30.000Z" → ns since the epoch; 0 if unparsable.
int64_t ParseIso8601(std::string_view s) {
  std::tm tm{};
  std::string str(s);
  const char* rest = strptime(str.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return 0;
  int64_t ns = 0;
  if (!SecondsToNanos(timegm(&tm), &ns)) return 0;
  if (*rest == '.') {
    int64_t frac = 0, scale = 1'000'000'000LL;
    for (++rest; *rest >= '0' && *rest <= '9'; ++rest) {
      scale /= 10;
      frac += (*rest - '0') * scale;
    }
    ns += frac;
  }
  return ns;
}

// The comparable form of an ETag: a weak validator's "W/" and the quotes stripped, so that
// W/"abc", "abc" and abc compare equal.
std::string_view NormalizeEtag(std::string_view e) {
  if (e.starts_with("W/") || e.starts_with("w/")) e.remove_prefix(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}
bool WeakEtag(std::string_view e) { return e.starts_with("W/") || e.starts_with("w/"); }

// "bytes FIRST-LAST/TOTAL" (TOTAL may be "*") or "bytes */TOTAL" (a 416's). False if malformed.
struct ContentRange {
  bool unsatisfied = false;  // "*/TOTAL"
  uint64_t first = 0, last = 0;
  std::optional<uint64_t> total;
};
bool ParseContentRange(std::string_view v, ContentRange* out) {
  if (!v.starts_with("bytes ")) return false;
  v.remove_prefix(6);
  const size_t slash = v.find('/');
  if (slash == std::string_view::npos) return false;
  std::string_view range = v.substr(0, slash), total = v.substr(slash + 1);
  if (total != "*") {
    uint64_t t = 0;
    if (!ParseDecimal(total, &t)) return false;
    out->total = t;
  }
  if (range == "*") {
    out->unsatisfied = true;
    return out->total.has_value();
  }
  const size_t dash = range.find('-');
  if (dash == std::string_view::npos || !ParseDecimal(range.substr(0, dash), &out->first) ||
      !ParseDecimal(range.substr(dash + 1), &out->last) || out->last < out->first) {
    return false;
  }
  return !out->total || out->last < *out->total;
}

class S3BlobStore final : public BlobStore {
 public:
  S3BlobStore(const S3Options& options, Endpoint endpoint, bool virtual_host, HttpEngine* engine,
              Clock* clock)
      : options_(options),
        endpoint_(std::move(endpoint)),
        virtual_host_(virtual_host),
        engine_(engine),
        clock_(clock),
        credentials_(options.credentials.anonymous ? nullptr
                     : options.credentials_provider
                         ? options.credentials_provider
                         : NewStaticCredentialsProvider(options.credentials, "configured keys")) {
    std::string hostport = endpoint_.host + (endpoint_.port.empty() ? "" : ":" + endpoint_.port);
    host_header_ = virtual_host_ ? options_.bucket + "." + hostport : hostport;
    describe_ = "s3://" + hostport + "/" + options_.bucket + "/" + options_.prefix;
    errors_context_.bucket = options_.bucket;
    errors_context_.prefix = options_.prefix;
    errors_context_.endpoint = endpoint_.scheme + "://" + hostport;
    errors_context_.region = options_.region;
    if (credentials_ != nullptr) errors_context_.credentials_source = credentials_->source();
    errors_context_.anonymous = options_.credentials.anonymous;
  }

  // errors_context_ naming the key the failed request was signed with (nullptr: anonymous).
  blobclient::S3ErrorContext ErrorsContext(const Credentials* used) const {
    blobclient::S3ErrorContext c = errors_context_;
    if (used != nullptr) c.access_key_id = used->access_key_id;
    return c;
  }

  // One HEAD of the bucket, without retries; any answer (404, 301 and 403 included) is returned
  // as is. Region discovery reads its x-amz-bucket-region.
  Result<HttpResponse> HeadBucketOnce() {
    Call c;
    c.method = "HEAD";
    c.path = virtual_host_ ? "/" : "/" + options_.bucket;
    TIERFS_ASSIGN_OR_RETURN(std::shared_ptr<const Credentials> creds, SigningCredentials());
    ++requests_;
    return ExecuteLimited(BuildRequest(c, creds.get()));
  }

  std::string Describe() const override { return describe_; }

  Result<ObjectInfo> Head(std::string_view key) override {
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    Call c;
    c.method = "HEAD";
    c.path = ObjectPath(key);
    c.context = "HEAD " + std::string(key);
    TIERFS_ASSIGN_OR_RETURN(HttpResponse resp, Perform(c));
    ObjectInfo info;
    const std::string* len = resp.Header("content-length");
    if (len == nullptr || !ParseDecimal(*len, &info.size)) {
      return Fail(Status::Corruption(c.context + ": no valid Content-Length"));
    }
    if (const std::string* etag = resp.Header("etag")) info.etag = StripQuotes(*etag);
    if (const std::string* lm = resp.Header("last-modified")) info.mtime_ns = ParseHttpDate(*lm);
    return info;
  }

  Result<size_t> Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                      std::string_view if_match_etag) override {
    Expect expect;
    expect.etag = std::string(if_match_etag);
    return ReadChecked(key, offset, ScatterBuffer(out), expect);
  }

  Result<size_t> ReadPinned(std::string_view key, uint64_t offset, std::span<std::byte> out,
                            const ObjectInfo& pinned) override {
    return ReadPinnedScatter(key, offset, ScatterBuffer(out), pinned);
  }

  // Each part's body goes straight into its slice of the pieces (the hedge's duplicate into a
  // buffer of its own, copied in if it wins, as for a contiguous read).
  Result<size_t> ReadPinnedScatter(std::string_view key, uint64_t offset, const ScatterBuffer& out,
                                   const ObjectInfo& pinned) override {
    Expect expect;
    expect.etag = pinned.etag;
    expect.size = pinned.size;
    expect.mtime_ns = pinned.mtime_ns;
    // Nothing past the pinned end is asked for: every part must then come back whole.
    if (offset >= pinned.size) return size_t{0};
    const size_t len = static_cast<size_t>(std::min<uint64_t>(out.size(), pinned.size - offset));
    return ReadChecked(key, offset, out.Slice(0, len), expect);
  }

 private:
  // What a GET's answer must agree with (see CheckAnswer).
  struct Expect {
    std::string etag;              // as pinned or given for If-Match; empty: none
    std::optional<uint64_t> size;  // the pinned object size; nullopt: not pinned
    int64_t mtime_ns = 0;          // the pinned mtime; checked only when etag is empty
  };

  Result<size_t> ReadChecked(std::string_view key, uint64_t offset, const ScatterBuffer& out,
                             const Expect& expect) {
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    if (out.empty()) return size_t{0};
    const uint64_t part = std::max<uint64_t>(1, options_.part_size);
    std::vector<GetPart> parts;
    parts.reserve(static_cast<size_t>((out.size() + part - 1) / part));
    for (uint64_t at = 0; at < out.size(); at += part) {
      GetPart p;
      p.offset = offset + at;
      p.out = out.Slice(static_cast<size_t>(at),
                        static_cast<size_t>(std::min<uint64_t>(part, out.size() - at)));
      parts.push_back(std::move(p));
    }
    if (parts.size() > 1) ++parallel_reads_;
    return GetRun(this, key, &parts, expect).Run();
  }

 public:
  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override {
    Call c;
    c.method = "GET";
    c.path = virtual_host_ ? "/" : "/" + options_.bucket;
    c.context = "LIST " + std::string(prefix);
    c.max_body = blobclient::kMaxListPageBody;
    c.query = {{"list-type", "2"},
               {"prefix", options_.prefix + std::string(prefix)},
               {"encoding-type", "url"},
               {"max-keys", std::to_string(std::clamp(max_keys, 1, 1000))}};
    if (!delimiter.empty()) c.query.emplace_back("delimiter", std::string(delimiter));
    if (!token.empty()) c.query.emplace_back("continuation-token", std::string(token));
    TIERFS_ASSIGN_OR_RETURN(HttpResponse resp, Perform(c));
    return ParseList(resp.body, c.context);
  }

  Status Put(std::string_view key, std::span<const std::byte> data) override {
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    Call c;
    c.method = "PUT";
    c.path = ObjectPath(key);
    c.context = "PUT " + std::string(key);
    c.body = data;
    c.payload_sha256 = blobclient::Sha256Hex(
        std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
    c.headers.emplace_back("Content-Type", "application/octet-stream");
    TIERFS_ASSIGN_OR_RETURN(HttpResponse resp, Perform(c));
    (void)resp;
    bytes_written_ += data.size();
    return Status::OK();
  }

  Status Delete(std::string_view key) override {
    TIERFS_RETURN_IF_ERROR(CheckKey(key));
    Call c;
    c.method = "DELETE";
    c.path = ObjectPath(key);
    c.context = "DELETE " + std::string(key);
    Result<HttpResponse> r = Perform(c);
    if (!r.ok() && !r.status().IsNotFound()) return r.status();
    return Status::OK();
  }

  BlobStoreStats Stats() const override {
    BlobStoreStats s;
    s.requests = requests_.load();
    s.retries = retries_.load();
    s.bytes_read = bytes_read_.load();
    s.bytes_written = bytes_written_.load();
    s.errors = errors_.load();
    s.hedges_issued = hedges_issued_.load();
    s.hedges_won = hedges_won_.load();
    s.concurrency_limit = static_cast<uint64_t>(limiter_.limit());
    s.concurrency_decreases = limiter_.decreases();
    s.throttled = throttled_.load();
    s.ttfb_p95_us = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(tracker_.TtfbP95()).count());
    s.parallel_reads = parallel_reads_.load();
    if (credentials_ != nullptr) {
      CredentialsStats cs = credentials_->Stats();
      s.credential_refreshes = cs.refreshes;
      s.credential_refresh_failures = cs.refresh_failures;
    }
    s.credential_forced_refreshes = forced_refreshes_.load();
    return s;
  }

 private:
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
    size_t max_body = blobclient::kMaxSmallBody;
    std::string context;  // "GET key @off", for messages
  };

  Status CheckKey(std::string_view key) const {
    if (key.empty()) return Status::InvalidArgument("s3: empty object key");
    return Status::OK();
  }

  std::string ObjectPath(std::string_view key) const {
    std::string full = options_.prefix + std::string(key);
    return virtual_host_ ? "/" + full : "/" + options_.bucket + "/" + full;
  }

  Status Fail(Status st) {
    if (!st.ok() && !st.IsNotFound()) ++errors_;
    return st;
  }

  // The credentials to sign the next request with; nullptr when anonymous.
  Result<std::shared_ptr<const Credentials>> SigningCredentials() const {
    if (credentials_ == nullptr) return std::shared_ptr<const Credentials>();
    return credentials_->Current();
  }

  // Whether `resp` to a request signed with temporary credentials `used` says they are stale
  // (static credentials are never refreshed: their 403 stands).
  bool StaleCredentialsAnswer(const HttpResponse& resp,
                              const std::shared_ptr<const Credentials>& used) const {
    if (credentials_ == nullptr || used == nullptr || !credentials_->temporary()) return false;
    return blobclient::IsStaleCredentialsAnswer(resp, /*temporary=*/true);
  }

  // Whether `resp` to a request signed with `used` says the credentials are stale (expired
  // token, rotated key: blob_store.h); if so, forces one refresh. True when the request should be
  // retried once with the new credentials.
  bool RefreshAfter(const HttpResponse& resp, const std::shared_ptr<const Credentials>& used,
                    const std::string& context) {
    if (!StaleCredentialsAnswer(resp, used)) return false;
    ++forced_refreshes_;
    const bool fresh = credentials_->ForceRefresh(used);
    Logger(Module::kBlobClient)
        .warn("{}: {}: HTTP {} with stale credentials from {}; {}", describe_, context, resp.status,
              credentials_->source(),
              fresh ? "retrying once with refreshed credentials" : "no newer credentials");
    return fresh;
  }

  // `creds`: nullptr for an anonymous request.
  HttpRequest BuildRequest(const Call& c, const Credentials* creds) const {
    HttpRequest r;
    r.method = c.method;
    std::string query = blobclient::CanonicalQueryString(c.query);
    r.url = endpoint_.scheme + "://" + host_header_ + blobclient::UriEncode(c.path, false) +
            (query.empty() ? "" : "?" + query);
    r.headers = c.headers;
    r.headers.emplace_back("Host", host_header_);
    if (creds != nullptr) {
      blobclient::SigningRequest s;
      s.method = c.method;
      s.host = host_header_;
      s.path = c.path;
      s.query = c.query;
      s.headers = c.headers;
      s.payload_sha256 = c.payload_sha256;
      blobclient::SignedRequest signed_req =
          blobclient::SignV4(s, *creds, options_.region, "s3", clock_->Now());
      for (auto& h : signed_req.headers) r.headers.push_back(std::move(h));
    }
    r.body = c.body;
    r.sink = c.sink;
    r.range_offset = c.range_offset;
    r.max_body = c.max_body;
    r.connect_timeout = options_.connect_timeout;
    r.timeout = options_.request_timeout;
    r.low_speed_time = options_.low_speed_time;
    r.ca_bundle = options_.ca_bundle;
    return r;
  }

  // The limiter's verdict on one finished request: OK answers let it grow, throttling (503, 429),
  // timeouts and latency spikes cut it. `took` is curl's total time for the request.
  void Feedback(const Status& transport, long http_status, std::chrono::nanoseconds took,
                uint64_t body_bytes) {
    const bool answered = transport.ok() && http_status > 0;
    if (http_status == 503 || http_status == 429) ++throttled_;
    if (transport.code() == Status::Code::kTimedOut || http_status == 503 || http_status == 429 ||
        http_status == 408) {
      limiter_.OnCongestion(SteadyClock::now(), CutWindow());
      return;
    }
    if (!answered || http_status >= 500) return;
    if (auto expected = tracker_.ExpectedP95(body_bytes)) {
      auto spike = std::max<std::chrono::nanoseconds>(kSpikeFactor * *expected, kSpikeFloor);
      if (took > spike) {
        limiter_.OnCongestion(SteadyClock::now(), CutWindow());
        return;
      }
    }
    limiter_.OnSuccess();
  }
  std::chrono::nanoseconds CutWindow() const {
    return std::max<std::chrono::nanoseconds>(kMinCutWindow, tracker_.TtfbP95());
  }

  // Requests beyond the store's adaptive limit wait here rather than in curl's per-host queue,
  // where their timeouts would already run; the wait itself is bounded by request_timeout.
  Result<HttpResponse> ExecuteLimited(HttpRequest req) {
    if (!limiter_.Acquire(SteadyClock::now() + options_.request_timeout)) {
      return Status::TimedOut("waiting for a connection slot (limit " +
                              std::to_string(limiter_.limit()) + ")");
    }
    Result<HttpResponse> r = engine_->Execute(std::move(req));
    if (r.ok()) {
      Feedback(Status::OK(), r->status, r->total, 0);
    } else {
      Feedback(r.status(), 0, {}, 0);
    }
    limiter_.Release();
    return r;
  }

  // One ranged GET of a Read: [offset, offset + out.size()) into `out`.
  struct GetPart {
    uint64_t offset = 0;
    ScatterBuffer out;  // the caller's slice; the primary's sink points here
    enum class State { kWaiting, kRunning, kDone } state = State::kWaiting;
    SteadyClock::time_point ready_at{};    // kWaiting: not before (retry backoff)
    SteadyClock::time_point started{};     // when the current primary was submitted
    int attempts = 0;                      // primaries submitted
    HttpRequestId primary = 0, hedge = 0;  // in flight, or 0
    bool hedge_tried = false;              // for the current primary
    // A duplicate's private buffer (owned by its callback as well); `hedge_span` is its sink.
    // Not zero-filled: the duplicate's body overwrites what is copied out (up to a part of 8 MiB;
    // a memset of it showed as 9% of the prefetch threads' samples in a cold sequential read).
    std::shared_ptr<std::byte[]> hedge_buf;
    std::shared_ptr<ScatterBuffer> hedge_span;
    bool copy_pending = false;  // the duplicate won; copy once the primary is gone
    // The current primary's body so far (set on the I/O thread): a primary whose bytes keep
    // coming is not hedged, however late (see GetRun::HedgeLate).
    std::shared_ptr<HttpProgress> progress;
    // What the current attempt is signed with; a stale-credentials answer forces one refresh
    // and one more attempt per part.
    std::shared_ptr<const Credentials> creds;
    bool refreshed = false;
    size_t got = 0;
    Status last;
  };
  struct Completion {
    size_t part;
    bool hedge;
    Status status;
    HttpResponse resp;
  };
  struct Inbox {
    Mutex mu;
    CondVar cv{&mu};
    std::deque<Completion> q GUARDED_BY(mu);
  };

  // If-Match carries the pinned ETag, except a weak one: If-Match compares strongly (RFC 9110
  // 13.1.1), so a server would refuse every read of a weak-ETag object with 412. Those reads rely
  // on CheckAnswer comparing the answer's ETag instead.
  HttpRequest PartRequest(std::string_view key, const GetPart& p, const Expect& expect,
                          const ScatterBuffer* sink) const {
    // p.creds is set before a part is submitted (see GetRun::StartDue).
    Call c;
    c.method = "GET";
    c.path = ObjectPath(key);
    c.headers.emplace_back("Range", "bytes=" + std::to_string(p.offset) + "-" +
                                        std::to_string(p.offset + p.out.size() - 1));
    if (!expect.etag.empty() && !WeakEtag(expect.etag)) {
      c.headers.emplace_back("If-Match", "\"" + std::string(NormalizeEtag(expect.etag)) + "\"");
    }
    c.sink = sink;
    c.range_offset = p.offset;
    return BuildRequest(c, p.creds.get());
  }

  struct Seen {
    bool any = false;
    std::string etag;  // normalized; empty if the answers carry none
    std::optional<uint64_t> total;
  };

  // The ranged GETs of one Read (retries, hedges, parallel parts), driven on the calling thread
  // by a small event loop over their completions, and the result assembled: the bytes read, short
  // only at the end of the object. Run() returns only when none of its requests is in flight any
  // more. One use; all of its state lives on the caller's stack.
  class GetRun {
   public:
    GetRun(S3BlobStore* store, std::string_view key, std::vector<GetPart>* parts,
           const Expect& expect)
        : s_(*store),
          key_(key),
          parts_(*parts),
          expect_(expect),
          context_("GET " + std::string(key) + " @" + std::to_string(parts->front().offset)),
          max_parts_(std::max(1, store->options_.max_parts_in_flight)) {}

    Result<size_t> Run() {
      while (!Finished()) {
        SteadyClock::time_point wake = SteadyClock::time_point::max();
        if (!failed_) {
          StartDue(&wake);
          if (s_.options_.hedge) HedgeLate(&wake);
        }
        // With nothing in flight no completion will come, so the wait below must not be entered
        // without a deadline: it would never wake. This is the case right after Abort() in
        // StartDue (the slot wait timed out with nothing in flight); Finished() then ends the
        // loop. Any other way here would be a bookkeeping bug: fail rather than hang.
        if (in_flight_ == 0 && wake == SteadyClock::time_point::max()) {
          Abort(Status::Internal(context_ + ": no request in flight and nothing to wait for"));
          continue;
        }
        for (Completion& c : WaitForCompletions(wake)) OnCompletion(c);
      }
      if (failed_) {
        if (exhausted_) {
          Logger(Module::kBlobClient)
              .warn("{}: giving up after {} attempt(s): {}", s_.describe_, s_.options_.max_attempts,
                    fatal_.ToString());
        }
        return s_.Fail(fatal_);
      }
      // Parts are contiguous; only the end of the object may cut them short.
      size_t total = 0;
      bool short_seen = false;
      for (const GetPart& p : parts_) {
        if (short_seen && p.got > 0) {
          return s_.Fail(
              Status::Corruption(context_ + ": the object's size changed during the read"));
        }
        total += p.got;
        short_seen |= p.got < p.out.size();
      }
      return total;
    }

   private:
    using State = GetPart::State;

    // Every part answered, or the read failed, and nothing is in flight.
    bool Finished() const {
      if (in_flight_ != 0) return false;
      return failed_ || std::all_of(parts_.begin(), parts_.end(),
                                    [](const GetPart& p) { return p.state == State::kDone; });
    }

    HttpRequestId Submit(size_t i, bool hedge, const ScatterBuffer* sink,
                         std::shared_ptr<void> keep) {
      ++s_.requests_;
      HttpRequest req = s_.PartRequest(key_, parts_[i], expect_, sink);
      if (!hedge) req.progress = parts_[i].progress;
      ++in_flight_;
      return s_.engine_->Submit(std::move(req),
                                [inbox = inbox_, i, hedge, keep](Status st, HttpResponse resp) {
                                  MutexLock l(&inbox->mu);
                                  inbox->q.push_back({i, hedge, std::move(st), std::move(resp)});
                                  inbox->cv.Signal();
                                });
    }

    // The first failure ends the read: every request still in flight is cancelled (their
    // completions are still awaited).
    void Abort(Status st) {
      if (failed_) return;
      failed_ = true;
      fatal_ = std::move(st);
      for (GetPart& p : parts_) {
        if (p.primary != 0) s_.engine_->Cancel(p.primary);
        if (p.hedge != 0) s_.engine_->Cancel(p.hedge);
      }
    }

    // Starts the parts whose turn it is, up to max_parts_in_flight running. With nothing in flight
    // it waits for a connection slot (bounded); otherwise it takes free slots only, and lets
    // completions make room. *wake: the earliest backoff still to run out.
    void StartDue(SteadyClock::time_point* wake) {
      const auto now = SteadyClock::now();
      int running =
          static_cast<int>(std::count_if(parts_.begin(), parts_.end(), [](const GetPart& p) {
            return p.state == State::kRunning;
          }));
      for (size_t i = 0; i < parts_.size() && running < max_parts_; ++i) {
        GetPart& p = parts_[i];
        if (p.state != State::kWaiting) continue;
        if (p.ready_at > now) {
          *wake = std::min(*wake, p.ready_at);
          continue;
        }
        const bool slot = in_flight_ == 0 ? s_.limiter_.Acquire(now + s_.options_.request_timeout)
                                          : s_.limiter_.TryAcquire();
        if (!slot) {
          if (in_flight_ == 0) {
            Abort(Status::TimedOut(context_ + ": waiting for a connection slot (limit " +
                                   std::to_string(s_.limiter_.limit()) + ")"));
          }
          return;
        }
        // Each attempt signs with the credentials current now (a hedge reuses them).
        Result<std::shared_ptr<const Credentials>> creds = s_.SigningCredentials();
        if (!creds.ok()) {
          s_.limiter_.Release();
          Abort(creds.status().WithContext(context_));
          return;
        }
        p.creds = std::move(*creds);
        p.state = State::kRunning;
        ++p.attempts;
        p.hedge_tried = false;
        p.started = SteadyClock::now();
        p.progress = std::make_shared<HttpProgress>();
        p.primary = Submit(i, false, &p.out, nullptr);
        s_.hedge_budget_.OnGet();
        ++running;
      }
    }

    // Sends one duplicate of each late GET (one per attempt, only with a free slot). *wake: when
    // the next running GET becomes late.
    void HedgeLate(SteadyClock::time_point* wake) {
      for (size_t i = 0; i < parts_.size() && !failed_; ++i) {
        GetPart& p = parts_[i];
        if (p.state != State::kRunning || p.primary == 0 || p.hedge_tried ||
            p.out.size() > s_.options_.hedge_max_bytes) {
          continue;
        }
        std::optional<std::chrono::nanoseconds> p95 = s_.tracker_.ExpectedP95(p.out.size());
        if (!p95.has_value()) continue;
        auto due =
            p.started + std::max<std::chrono::nanoseconds>(*p95, s_.options_.hedge_min_delay);
        if (SteadyClock::now() < due) {
          *wake = std::min(*wake, due);
          continue;
        }
        // Late but still receiving: the GET shares a busy link or origin (parallel streams,
        // a saturated client), and a duplicate would share it too, adding load without
        // winning. Only a GET with no body byte for as long as a first byte normally takes
        // is stuck; it is hedged once that is so.
        const int64_t last_ns = p.progress ? p.progress->last_byte_ns.load() : 0;
        if (last_ns != 0) {
          const auto last = SteadyClock::time_point(std::chrono::nanoseconds(last_ns));
          const auto quiet = std::max<std::chrono::nanoseconds>(s_.tracker_.TtfbP95(),
                                                                s_.options_.hedge_min_delay);
          if (SteadyClock::now() - last < quiet) {
            *wake = std::min(*wake, last + quiet);
            continue;
          }
        }
        p.hedge_tried = true;
        if (!s_.hedge_budget_.TrySpend()) continue;
        if (!s_.limiter_.TryAcquire()) continue;  // (the spent hedge is not refunded: rare)
        p.hedge_buf = std::make_shared_for_overwrite<std::byte[]>(p.out.size());
        p.hedge_span =
            std::make_shared<ScatterBuffer>(std::span<std::byte>(p.hedge_buf.get(), p.out.size()));
        ++s_.hedges_issued_;
        p.hedge =
            Submit(i, true, p.hedge_span.get(),
                   std::make_shared<
                       std::pair<std::shared_ptr<std::byte[]>, std::shared_ptr<ScatterBuffer>>>(
                       p.hedge_buf, p.hedge_span));
      }
    }

    // The completions that arrived, waiting for at least one until `wake` (max: no deadline).
    std::deque<Completion> WaitForCompletions(SteadyClock::time_point wake) {
      std::deque<Completion> done;
      MutexLock l(&inbox_->mu);
      while (inbox_->q.empty()) {
        if (wake == SteadyClock::time_point::max()) {
          inbox_->cv.Wait();
          continue;
        }
        auto left = wake - SteadyClock::now();
        if (left <= std::chrono::nanoseconds::zero()) break;
        inbox_->cv.WaitFor(left);
      }
      done.swap(inbox_->q);
      return done;
    }

    // One request's answer: the part is done (the first good answer wins, a hedge race's loser is
    // cancelled), retried after a backoff, or the read fails.
    void OnCompletion(Completion& c) {
      --in_flight_;
      GetPart& p = parts_[c.part];
      HttpRequestId& mine = c.hedge ? p.hedge : p.primary;
      HttpRequestId& other = c.hedge ? p.primary : p.hedge;
      mine = 0;
      const bool cancelled = c.status.code() == Status::Code::kCancelled;
      if (!cancelled) {
        s_.Feedback(c.status, c.status.ok() ? c.resp.status : 0, c.resp.total, c.resp.sink_bytes);
      }
      s_.limiter_.Release();
      if (p.state == State::kDone) {
        // The loser of a hedge race. If the duplicate won, the original no longer writes into
        // the caller's slice: now the duplicate's bytes can go there.
        if (!c.hedge && p.copy_pending) {
          p.out.CopyIn(
              0, std::span<const std::byte>(p.hedge_buf.get(), std::min(p.got, p.out.size())));
          p.copy_pending = false;
          p.hedge_buf.reset();
          p.hedge_span.reset();
        }
        return;
      }
      if (failed_) return;
      Status st;
      const long code = c.status.ok() ? c.resp.status : 0;
      if (!c.status.ok()) {
        st = c.status.WithContext(context_);
      } else if ((code >= 200 && code < 300) || code == 416) {
        size_t got = 0;
        st = CheckAnswer(c.resp, p, expect_, &seen_, context_, &got);
        if (st.ok()) {
          // The first good answer wins.
          if (code != 416 && c.resp.sink_bytes > 0) {
            s_.tracker_.Record(c.resp.ttfb, c.resp.total, c.resp.sink_bytes);
          }
          p.state = State::kDone;
          p.got = got;
          s_.bytes_read_ += got;
          if (c.hedge) {
            ++s_.hedges_won_;
            s_.hedge_budget_.OnHedgeSettled(true);
            if (other != 0) {
              s_.engine_->Cancel(other);
              p.copy_pending = true;
            } else {
              p.out.CopyIn(
                  0, std::span<const std::byte>(p.hedge_buf.get(), std::min(got, p.out.size())));
            }
          } else if (other != 0) {
            s_.hedge_budget_.OnHedgeSettled(false);  // the original answered first
            s_.engine_->Cancel(other);
          }
          return;
        }
      } else {
        // Refused as stale credentials while this part's duplicate (a hedge) is still in
        // flight: wait for its answer instead of failing the part; if it is refused too, that
        // answer forces the refresh and the retry.
        if (!p.refreshed && other != 0 && s_.StaleCredentialsAnswer(c.resp, p.creds)) {
          p.last = blobclient::S3ErrorToStatus(c.resp, context_, s_.ErrorsContext(p.creds.get()));
          return;
        }
        if (!p.refreshed && other == 0 && s_.RefreshAfter(c.resp, p.creds, context_)) {
          // One more attempt with the refreshed credentials, outside the retry budget.
          p.refreshed = true;
          p.creds.reset();
          --p.attempts;
          ++s_.retries_;
          p.state = State::kWaiting;
          p.ready_at = SteadyClock::now();
          return;
        }
        st = blobclient::S3ErrorToStatus(c.resp, context_, s_.ErrorsContext(p.creds.get()));
      }
      p.last = st;
      if (!st.retryable()) {
        Abort(st);
        return;
      }
      if (other != 0) return;  // the other request of this part may still answer
      const RetryStep step = NextRetryStep(s_.retry_, st, p.attempts);
      if (step.kind != RetryStep::Kind::kRetry) {
        exhausted_ = true;
        Abort(st);
        return;
      }
      ++s_.retries_;
      const std::chrono::milliseconds delay = step.delay;
      SPDLOG_LOGGER_DEBUG(&Logger(Module::kBlobClient), "{}: {}; retry {} in {} ms", s_.describe_,
                          st.ToString(), p.attempts, delay.count());
      p.state = State::kWaiting;
      p.ready_at = SteadyClock::now() + delay;
    }

    S3BlobStore& s_;
    const std::string_view key_;
    std::vector<GetPart>& parts_;
    const Expect& expect_;
    const std::string context_;
    const int max_parts_;
    const std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();  // shared with the callbacks
    int in_flight_ = 0;  // requests submitted whose completion has not been handled
    bool failed_ = false;
    Status fatal_;            // the first failure, once failed_
    bool exhausted_ = false;  // fatal_ is a retryable failure that used up the attempts
    // What the first good answer said about the object: every later part must agree (a read
    // never assembles parts of two versions, pinned or not).
    Seen seen_;
  };

  // Checks one 2xx/416 answer to part `p` against what was asked: the version (ETag, or without
  // one Last-Modified; the total size), the range (Content-Range start and end, or a 200 that
  // ignored Range) and the body length. On success *got is the number of bytes of p.out that
  // hold the requested range. Version changes are FailedPrecondition, malformed answers
  // Corruption; only a body shorter than announced is retryable (a truncating proxy).
  static Status CheckAnswer(const HttpResponse& resp, const GetPart& p, const Expect& expect,
                            Seen* seen, const std::string& context, size_t* got) {
    *got = 0;
    const long code = resp.status;
    const uint64_t want = p.out.size();
    auto changed = [&](const std::string& why) {
      return Status::FailedPrecondition(context + ": the object changed (" + why + ")");
    };
    auto bad = [&](const std::string& why) {
      return Status::Corruption(context + ": bad answer (" + why + ")");
    };
    const std::string* cr_header = resp.Header("content-range");
    if (code == 416) {
      // Nothing returned: the range starts at or past the end.
      ContentRange cr;
      std::optional<uint64_t> total;
      if (cr_header != nullptr && ParseContentRange(*cr_header, &cr)) total = cr.total;
      if (expect.size) {
        // A pinned read never asks past the pinned end: the object shrank.
        return changed("416, object now " + (total ? std::to_string(*total) : std::string("?")) +
                       " bytes, pinned " + std::to_string(*expect.size));
      }
      if (total && p.offset < *total) return bad("416 for a range inside the object");
      return Status::OK();
    }
    if (code != 200 && code != 206) return bad("HTTP " + std::to_string(code) + " to a GET");

    // The version.
    const std::string* etag_header = resp.Header("etag");
    const std::string etag = etag_header ? std::string(NormalizeEtag(*etag_header)) : "";
    if (!expect.etag.empty()) {
      if (etag_header == nullptr) return bad("no ETag, cannot confirm version " + expect.etag);
      if (etag != NormalizeEtag(expect.etag)) {
        return changed("ETag " + *etag_header + ", expected " + expect.etag);
      }
    } else if (expect.size && expect.mtime_ns != 0) {
      // No ETag to go by: the pinned Last-Modified (whole seconds in HTTP dates).
      if (const std::string* lm = resp.Header("last-modified")) {
        const int64_t t = ParseHttpDate(*lm);
        if (t != 0 && t / 1'000'000'000 != expect.mtime_ns / 1'000'000'000) {
          return changed("Last-Modified " + *lm);
        }
      }
    }

    // The range and the object's total size.
    std::optional<uint64_t> total;
    uint64_t announced = 0;  // bytes of the requested range the answer says it carries
    if (code == 206) {
      ContentRange cr;
      if (cr_header == nullptr) return bad("206 without Content-Range");
      if (!ParseContentRange(*cr_header, &cr) || cr.unsatisfied) {
        return bad("unparsable Content-Range " + *cr_header);
      }
      if (cr.first != p.offset) {
        return bad("Content-Range " + *cr_header + " for a read at " + std::to_string(p.offset));
      }
      total = cr.total;
      announced = cr.last - cr.first + 1;
    } else {
      // 200: the server ignored Range and sends the whole object; the engine skipped the bytes
      // before p.offset (HttpRequest::range_offset). Its Content-Length is the total.
      uint64_t len = 0;
      if (const std::string* cl = resp.Header("content-length"); cl && ParseDecimal(*cl, &len)) {
        total = len;
      }
      announced = total ? (p.offset < *total ? *total - p.offset : 0) : resp.sink_bytes;
    }
    if (expect.size) {
      if (!total) return bad("the answer does not state the object's size");
      if (*total != *expect.size) {
        return changed("object now " + std::to_string(*total) + " bytes, pinned " +
                       std::to_string(*expect.size));
      }
    }
    // Every answer of one read must be of one version.
    if (seen->any) {
      if (etag != seen->etag) return changed("ETag changed between parts of one read");
      if (total && seen->total && *total != *seen->total) {
        return changed("size changed between parts of one read");
      }
    }

    // The length: all that was asked for, short only at the end of the object.
    const uint64_t expected =
        total ? std::min<uint64_t>(want, *total > p.offset ? *total - p.offset : 0)
              : std::min<uint64_t>(want, announced);
    if (code == 206 && announced != expected) {
      return bad("Content-Range " + *cr_header + " for " + std::to_string(want) + " bytes at " +
                 std::to_string(p.offset));
    }
    if (resp.sink_bytes > want) return bad("more bytes than the buffer holds");  // engine bound
    if (resp.sink_bytes != expected) {
      return bad("body of " + std::to_string(resp.sink_bytes) + " bytes, expected " +
                 std::to_string(expected))
          .WithRetryable(resp.sink_bytes < expected);
    }
    if (!seen->any) {
      seen->any = true;
      seen->etag = etag;
      seen->total = total;
    }
    *got = static_cast<size_t>(expected);
    return Status::OK();
  }

  // Everything but Read (GetRun follows the same policy per part), in the one retry loop. OK with
  // a 2xx response (or 416 when c.accept_416).
  Result<HttpResponse> Perform(const Call& c) {
    bool refreshed = false;
    RetryObserver observer;
    observer.on_retry = [&](const Status& st, int attempt, std::chrono::milliseconds delay) {
      ++retries_;
      SPDLOG_LOGGER_DEBUG(&Logger(Module::kBlobClient), "{}: {}; retry {} in {} ms", describe_,
                          st.ToString(), attempt, delay.count());
    };
    observer.on_exhausted = [&](const Status& st, int attempts) {
      Logger(Module::kBlobClient)
          .warn("{}: giving up after {} attempt(s): {}", describe_, attempts, st.ToString());
    };
    Result<HttpResponse> r = Retry(
        retry_, [&](int) { return PerformOnce(c, &refreshed); }, observer);
    if (!r.ok()) return Fail(r.status());
    return r;
  }

  // One attempt of Perform. An answer saying the credentials are stale forces one refresh per
  // Perform, and the request is sent again at once with the new ones, outside the retry budget.
  Result<HttpResponse> PerformOnce(const Call& c, bool* refreshed) {
    while (true) {
      Result<std::shared_ptr<const Credentials>> creds = SigningCredentials();
      if (!creds.ok()) {
        // The provider waited (bounded) for a refresh already: not retried here.
        return creds.status().WithContext(c.context).WithRetryable(false);
      }
      ++requests_;
      Result<HttpResponse> r = ExecuteLimited(BuildRequest(c, creds->get()));
      if (!r.ok()) return r.status().WithContext(c.context);
      const long code = r->status;
      if ((code >= 200 && code < 300) || (code == 416 && c.accept_416)) return r;
      if (!*refreshed && RefreshAfter(*r, *creds, c.context)) {
        *refreshed = true;
        ++retries_;
        continue;
      }
      return blobclient::S3ErrorToStatus(*r, c.context, ErrorsContext(creds->get()));
    }
  }

  Result<ListPage> ParseList(const std::string& xml, const std::string& context) {
    Result<ListPage> page = blobclient::ParseListObjectsV2(xml, options_.prefix, context);
    if (!page.ok()) return Fail(page.status());
    return page;
  }

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
  blobclient::S3ErrorContext errors_context_;  // for messages naming cause and fix

  std::atomic<uint64_t> requests_{0}, retries_{0}, bytes_read_{0}, bytes_written_{0}, errors_{0};
  std::atomic<uint64_t> hedges_issued_{0}, hedges_won_{0}, parallel_reads_{0};
  std::atomic<uint64_t> forced_refreshes_{0};
  std::atomic<uint64_t> throttled_{0};  // 503 SlowDown / 429 answers

  // Thread-safe themselves.
  blobclient::LatencyTracker tracker_;
  blobclient::AimdLimiter limiter_{options_.initial_concurrency, options_.max_connections};
  blobclient::HedgeBudget hedge_budget_{options_.hedge_percent};
};

}  // namespace

namespace blobclient {

Result<ListPage> ParseListObjectsV2(std::string_view xml, std::string_view strip,
                                    std::string_view context) {
  const std::string ctx(context);
  pugi::xml_document doc;
  pugi::xml_parse_result pr = doc.load_buffer(xml.data(), xml.size());
  if (!pr) {
    return Status::Corruption(ctx + ": unparsable ListObjectsV2 XML: " + pr.description());
  }
  pugi::xml_node root = doc.child("ListBucketResult");
  if (!root) return Status::Corruption(ctx + ": no ListBucketResult in the answer");
  const bool url_encoded = std::string_view(root.child_value("EncodingType")) == "url";
  auto decode = [url_encoded](const char* s) {
    return url_encoded ? UriDecode(s, /*plus_is_space=*/true) : std::string(s);
  };
  ListPage page;
  for (pugi::xml_node n : root.children("Contents")) {
    std::string key = decode(n.child_value("Key"));
    if (!key.starts_with(strip) || key.size() == strip.size()) continue;
    ListEntry e;
    e.key = key.substr(strip.size());
    if (!ParseDecimal(n.child_value("Size"), &e.info.size)) {
      return Status::Corruption(ctx + ": bad <Size> for " + key);
    }
    e.info.etag = StripQuotes(n.child_value("ETag"));
    e.info.mtime_ns = ParseIso8601(n.child_value("LastModified"));
    page.objects.push_back(std::move(e));
  }
  for (pugi::xml_node n : root.children("CommonPrefixes")) {
    std::string p = decode(n.child_value("Prefix"));
    if (!p.starts_with(strip) || p.size() == strip.size()) continue;
    page.prefixes.push_back(p.substr(strip.size()));
  }
  if (std::string_view(root.child_value("IsTruncated")) == "true") {
    page.next_token = root.child_value("NextContinuationToken");
    if (page.next_token.empty()) {
      return Status::Corruption(ctx + ": truncated listing without a token");
    }
  }
  return page;
}

}  // namespace blobclient

namespace {

// The store for `options` (already validated): endpoint from the region when none is given,
// addressing style.
Result<std::unique_ptr<S3BlobStore>> MakeS3Store(const S3Options& options, HttpEngine* engine,
                                                 Clock* clock) {
  std::string endpoint_url = options.endpoint;
  if (endpoint_url.empty()) {
    if (options.region.empty()) return Status::InvalidArgument("s3: region or endpoint required");
    endpoint_url = "https://s3." + options.region + ".amazonaws.com";
  }
  TIERFS_ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(endpoint_url));
  bool virtual_host = false;
  switch (options.addressing) {
    case S3Options::Addressing::kPath:
      virtual_host = false;
      break;
    case S3Options::Addressing::kVirtualHost:
      virtual_host = true;
      break;
    case S3Options::Addressing::kAuto:
      virtual_host = (ep.host == "amazonaws.com" || ep.host.ends_with(".amazonaws.com")) &&
                     DnsCompatibleBucket(options.bucket, ep.scheme == "https");
      break;
  }
  auto store = std::make_unique<S3BlobStore>(options, std::move(ep), virtual_host, engine, clock);
  Logger(Module::kBlobClient)
      .info("s3 store {} ({}-style, region {}, {})", store->Describe(),
            virtual_host ? "virtual-host" : "path", options.region,
            options.credentials.anonymous ? std::string("anonymous")
            : options.credentials_provider
                ? "signed, credentials from " + options.credentials_provider->source()
                : std::string("signed"));
  return store;
}

}  // namespace

Result<std::unique_ptr<BlobStore>> NewS3BlobStore(const S3Options& options,
                                                  HttpTransport* transport, Clock* clock) {
  if (options.bucket.empty()) return Status::InvalidArgument("s3: bucket is required");
  if (options.bucket.find('/') != std::string::npos) {
    return Status::InvalidArgument("s3: bucket name must not contain '/': '" + options.bucket +
                                   "'");
  }
  if (!options.prefix.empty() && (options.prefix.front() == '/' || options.prefix.back() != '/')) {
    return Status::InvalidArgument("s3: prefix must not start with '/' and must end in '/': '" +
                                   options.prefix + "'");
  }
  if (options.max_attempts < 1) return Status::InvalidArgument("s3: max_attempts must be >= 1");
  if (options.max_connections < 1) {
    return Status::InvalidArgument("s3: max_connections must be >= 1");
  }
  if (options.initial_concurrency < 1) {
    return Status::InvalidArgument("s3: initial_concurrency must be >= 1");
  }
  if (options.part_size < 1 || options.max_parts_in_flight < 1) {
    return Status::InvalidArgument("s3: part_size and max_parts_in_flight must be >= 1");
  }
  if (options.hedge_min_delay.count() < 0) {
    return Status::InvalidArgument("s3: hedge_min_delay must be >= 0");
  }
  if (options.hedge_percent < 0 || options.hedge_percent > 100) {
    return Status::InvalidArgument("s3: hedge_percent must be 0..100");
  }
  if (options.backoff_base.count() < 0 || options.backoff_max < options.backoff_base) {
    return Status::InvalidArgument("s3: need 0 <= backoff_base <= backoff_max");
  }
  if (clock == nullptr) return Status::InvalidArgument("s3: clock is required");
  HttpEngine* engine = blobclient::AsEngine(transport);
  if (engine == nullptr) return Status::InvalidArgument("s3: an HttpTransport is required");
  const Credentials& cr = options.credentials;
  if (!cr.anonymous && options.credentials_provider == nullptr &&
      (cr.access_key_id.empty() || cr.secret_access_key.empty())) {
    return Status::InvalidArgument(
        "s3: no credentials (access key id and secret) and anonymous access not requested");
  }
  TIERFS_ASSIGN_OR_RETURN(std::unique_ptr<S3BlobStore> store, MakeS3Store(options, engine, clock));
  if (options.discover_region) {
    // The bucket's region from its own answer, before any real request: re-signing later would
    // mean swapping the region under requests in flight.
    Result<HttpResponse> head = store->HeadBucketOnce();
    std::string region;
    if (head.ok()) region = blobclient::OtherBucketRegion(*head, options.region);
    if (!region.empty()) {
      S3Options found = options;
      found.region = region;
      found.discover_region = false;
      Logger(Module::kBlobClient)
          .info(
              "bucket {} is in region {} (x-amz-bucket-region of HTTP {} to HeadBucket); "
              "signing for it (--region {} skips this lookup)",
              options.bucket, region, head->status, region);
      TIERFS_ASSIGN_OR_RETURN(store, MakeS3Store(found, engine, clock));
    } else if (!head.ok()) {
      Logger(Module::kBlobClient)
          .info("s3 bucket {}: region lookup failed ({}); using region {}", options.bucket,
                head.status().ToString(), options.region);
    }
  }
  return std::unique_ptr<BlobStore>(std::move(store));
}

}  // namespace tierfs
