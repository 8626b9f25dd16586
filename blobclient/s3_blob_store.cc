// S3BlobStore's operations (s3_store.h): the retry loop of everything but Read, the limiter's
// feedback, and the factory.
#include <algorithm>

#include "base/logging.h"
#include "base/strings.h"
#include "blobclient/credentials.h"
#include "blobclient/list_xml.h"
#include "blobclient/s3_store.h"
#include "blobclient/sigv4.h"

namespace tierfs {
namespace blobclient {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A completed GET slower than max(kSpikeFactor × the expected p95, kSpikeFloor) is a latency
// spike: a congestion signal for the limiter, like a 503.
constexpr int kSpikeFactor = 4;
constexpr std::chrono::milliseconds kSpikeFloor{50};
// The limiter is cut at most once per max(kMinCutWindow, p95 TTFB): one round trip's worth of
// throttled answers is one signal.
constexpr std::chrono::milliseconds kMinCutWindow{50};

}  // namespace

S3BlobStore::S3BlobStore(const S3Options& options, Endpoint endpoint, bool virtual_host,
                         HttpEngine* engine, Clock* clock)
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

S3ErrorContext S3BlobStore::ErrorsContext(const Credentials* used) const {
  S3ErrorContext c = errors_context_;
  if (used != nullptr) c.access_key_id = used->access_key_id;
  return c;
}

Result<HttpResponse> S3BlobStore::HeadBucketOnce() {
  Call c;
  c.method = "HEAD";
  c.path = virtual_host_ ? "/" : "/" + options_.bucket;
  TIERFS_ASSIGN_OR_RETURN(std::shared_ptr<const Credentials> creds, SigningCredentials());
  ++requests_;
  return ExecuteLimited(BuildRequest(c, creds.get()));
}

Result<ObjectInfo> S3BlobStore::Head(std::string_view key) {
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

Result<size_t> S3BlobStore::Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                                 std::string_view if_match_etag) {
  S3ReadExpect expect;
  expect.etag = std::string(if_match_etag);
  return ReadChecked(key, offset, ScatterBuffer(out), expect);
}

Result<size_t> S3BlobStore::ReadPinned(std::string_view key, uint64_t offset,
                                       std::span<std::byte> out, const ObjectInfo& pinned) {
  return ReadPinnedScatter(key, offset, ScatterBuffer(out), pinned);
}

Result<size_t> S3BlobStore::ReadPinnedScatter(std::string_view key, uint64_t offset,
                                              const ScatterBuffer& out, const ObjectInfo& pinned) {
  S3ReadExpect expect;
  expect.etag = pinned.etag;
  expect.size = pinned.size;
  expect.mtime_ns = pinned.mtime_ns;
  // Nothing past the pinned end is asked for: every part must then come back whole.
  if (offset >= pinned.size) return size_t{0};
  const size_t len = static_cast<size_t>(std::min<uint64_t>(out.size(), pinned.size - offset));
  return ReadChecked(key, offset, out.Slice(0, len), expect);
}

Result<ListPage> S3BlobStore::List(std::string_view prefix, std::string_view delimiter,
                                   std::string_view token, int max_keys) {
  Call c;
  c.method = "GET";
  c.path = virtual_host_ ? "/" : "/" + options_.bucket;
  c.context = "LIST " + std::string(prefix);
  c.max_body = kMaxListPageBody;
  c.query = {{"list-type", "2"},
             {"prefix", options_.prefix + std::string(prefix)},
             {"encoding-type", "url"},
             {"max-keys", std::to_string(std::clamp(max_keys, 1, 1000))}};
  if (!delimiter.empty()) c.query.emplace_back("delimiter", std::string(delimiter));
  if (!token.empty()) c.query.emplace_back("continuation-token", std::string(token));
  TIERFS_ASSIGN_OR_RETURN(HttpResponse resp, Perform(c));
  return ParseList(resp.body, c.context);
}

Status S3BlobStore::Put(std::string_view key, std::span<const std::byte> data) {
  TIERFS_RETURN_IF_ERROR(CheckKey(key));
  Call c;
  c.method = "PUT";
  c.path = ObjectPath(key);
  c.context = "PUT " + std::string(key);
  c.body = data;
  c.payload_sha256 =
      Sha256Hex(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
  c.headers.emplace_back("Content-Type", "application/octet-stream");
  TIERFS_ASSIGN_OR_RETURN(HttpResponse resp, Perform(c));
  (void)resp;
  bytes_written_ += data.size();
  return Status::OK();
}

Status S3BlobStore::Delete(std::string_view key) {
  TIERFS_RETURN_IF_ERROR(CheckKey(key));
  Call c;
  c.method = "DELETE";
  c.path = ObjectPath(key);
  c.context = "DELETE " + std::string(key);
  Result<HttpResponse> r = Perform(c);
  if (!r.ok() && !r.status().IsNotFound()) return r.status();
  return Status::OK();
}

BlobStoreStats S3BlobStore::Stats() const {
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

Status S3BlobStore::CheckKey(std::string_view key) const {
  if (key.empty()) return Status::InvalidArgument("s3: empty object key");
  return Status::OK();
}

Status S3BlobStore::Fail(Status st) {
  if (!st.ok() && !st.IsNotFound()) ++errors_;
  return st;
}

Result<std::shared_ptr<const Credentials>> S3BlobStore::SigningCredentials() const {
  if (credentials_ == nullptr) return std::shared_ptr<const Credentials>();
  return credentials_->Current();
}

bool S3BlobStore::StaleCredentialsAnswer(const HttpResponse& resp,
                                         const std::shared_ptr<const Credentials>& used) const {
  if (credentials_ == nullptr || used == nullptr || !credentials_->temporary()) return false;
  return IsStaleCredentialsAnswer(resp, /*temporary=*/true);
}

bool S3BlobStore::RefreshAfter(const HttpResponse& resp,
                               const std::shared_ptr<const Credentials>& used,
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

void S3BlobStore::Feedback(const Status& transport, long http_status, std::chrono::nanoseconds took,
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

std::chrono::nanoseconds S3BlobStore::CutWindow() const {
  return std::max<std::chrono::nanoseconds>(kMinCutWindow, tracker_.TtfbP95());
}

Result<HttpResponse> S3BlobStore::ExecuteLimited(HttpRequest req) {
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

Result<HttpResponse> S3BlobStore::Perform(const Call& c) {
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

Result<HttpResponse> S3BlobStore::PerformOnce(const Call& c, bool* refreshed) {
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
    return S3ErrorToStatus(*r, c.context, ErrorsContext(creds->get()));
  }
}

Result<ListPage> S3BlobStore::ParseList(const std::string& xml, const std::string& context) {
  Result<ListPage> page = ParseListObjectsV2(xml, options_.prefix, context);
  if (!page.ok()) return Fail(page.status());
  return page;
}

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
}  // namespace blobclient

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
  blobclient::HttpEngine* engine = blobclient::AsEngine(transport);
  if (engine == nullptr) return Status::InvalidArgument("s3: an HttpTransport is required");
  const Credentials& cr = options.credentials;
  if (!cr.anonymous && options.credentials_provider == nullptr &&
      (cr.access_key_id.empty() || cr.secret_access_key.empty())) {
    return Status::InvalidArgument(
        "s3: no credentials (access key id and secret) and anonymous access not requested");
  }
  TIERFS_ASSIGN_OR_RETURN(std::unique_ptr<blobclient::S3BlobStore> store,
                          blobclient::MakeS3Store(options, engine, clock));
  if (options.discover_region) {
    // The bucket's region from its own answer, before any real request: re-signing later would
    // mean swapping the region under requests in flight.
    Result<blobclient::HttpResponse> head = store->HeadBucketOnce();
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
      TIERFS_ASSIGN_OR_RETURN(store, blobclient::MakeS3Store(found, engine, clock));
    } else if (!head.ok()) {
      Logger(Module::kBlobClient)
          .info("s3 bucket {}: region lookup failed ({}); using region {}", options.bucket,
                head.status().ToString(), options.region);
    }
  }
  return std::unique_ptr<BlobStore>(std::move(store));
}

}  // namespace tierfs
