// HttpEngine — the libcurl I/O engine behind the public, opaque HttpTransport (internal to
// blobclient/; conventions C13).
//
// One owned std::jthread ("tierfs-http") drives a curl multi handle through its socket interface
// (curl_multi_socket_action): curl names the sockets it waits on, the thread waits on them with
// epoll and tells curl which one is ready, so no transfer's socket is polled when nothing arrived
// for it. Callers hand requests over through a mutex-guarded queue and wake the thread through an
// eventfd (no polling loop). Easy handles are pooled and reused, and the multi handle keeps a
// connection cache, so keep-alive connections are reused across requests. Completion is reported
// through a callback that runs on the I/O thread (Submit), or by blocking the caller (Execute). A
// submitted request can be cancelled (Cancel): the I/O thread removes it from the multi handle, so
// its sink receives no byte after its callback has run with Cancelled (hedged requests, conventions
// C13).
//
// Error translation happens here, once (C3): a transfer that fails (CURLcode) completes with a
// non-OK Status; a transfer that got an HTTP answer completes OK with the status code in the
// response, and HttpStatusToStatus() maps that code for the caller.
//
// Ownership: the engine owns its thread, the multi handle and all easy handles. Request bodies
// and response sinks belong to the caller and must stay alive until the callback has run.
// Destruction stops the thread and completes every outstanding request with Cancelled.
//
// Bounded buffering: nothing an answer sends is kept without a limit. A body without a sink is
// kept up to HttpRequest::max_body (LIST pages: kMaxListPageBody); a longer one ends the transfer
// and the request fails with Corruption (not retryable: the same answer would come again). An
// error (non-2xx) body is kept up to kMaxErrorBody; the rest is not read (the connection is
// closed) and the request completes with its HTTP status as usual. The header block of an answer
// (all header lines, 1xx answers included) may be at most kMaxHeaderBytes, else Corruption. A
// sink never receives more than its size: a 206 answer longer than the sink is refused
// (Corruption) instead of being cut; only a 200 to a ranged request (a server that ignores Range)
// is cut at the sink's end, by design.
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "blobclient/blob_store.h"

namespace tierfs::blobclient {

// Caps on what an answer may make the engine buffer (see the file comment).
inline constexpr size_t kMaxListPageBody = 16u << 20;  // one ListObjectsV2 page (1000 keys)
inline constexpr size_t kMaxSmallBody = 64u << 10;     // HEAD/PUT/DELETE answers, no real body
inline constexpr size_t kMaxErrorBody = 64u << 10;     // kept of a non-2xx body, for messages
inline constexpr size_t kMaxHeaderBytes = 64u << 10;   // all header lines of one transfer

// When a response body last moved, updated on the I/O thread as bytes reach the sink and read
// by the caller while the request is in flight (hedging tells a stalled GET from a slow one).
struct HttpProgress {
  std::atomic<int64_t> last_byte_ns{0};  // steady_clock nanoseconds of the latest byte; 0: none
};

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, DELETE, POST
  std::string url;             // fully encoded
  std::vector<std::pair<std::string, std::string>> headers;
  // PUT or POST body; not owned, must outlive the request.
  std::span<const std::byte> body;
  // If non-null, a successful (2xx) body is written here (its pieces in order) instead of into
  // HttpResponse::body; at most sink->size() bytes are kept. Not owned, nor are the bytes its
  // pieces point to; both must outlive the request.
  const ScatterBuffer* sink = nullptr;
  // With a sink, if non-null: updated as the body reaches the sink (HttpProgress).
  std::shared_ptr<HttpProgress> progress;
  // With a sink: the offset the caller asked for in a Range header. When the server ignores the
  // Range and answers 200 with the whole object, the engine skips this many bytes, so the sink
  // still receives exactly the requested range (and the transfer stops once the sink is full).
  uint64_t range_offset = 0;
  // Without a sink: the largest 2xx body kept in HttpResponse::body; a longer one fails the
  // request with Corruption.
  size_t max_body = kMaxListPageBody;
  std::chrono::milliseconds connect_timeout{3000};
  std::chrono::milliseconds timeout{30000};         // whole transfer
  std::chrono::milliseconds low_speed_time{10000};  // abort when < 1 byte/s for this long
  std::string ca_bundle;                            // empty: the system store
};

struct HttpResponse {
  long status = 0;
  // Header names lowercased; values trimmed. Only the final response's headers (not 100s).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // without a sink (<= max_body), or a non-2xx body (<= kMaxErrorBody)
  bool error_body_cut = false;  // a non-2xx body was longer than kMaxErrorBody and was cut
  size_t sink_bytes = 0;        // bytes written into the sink
  // From curl, for this attempt only (not the time queued before the I/O thread picked it up):
  // until the first response byte (connect and TLS included), and until the end.
  std::chrono::microseconds ttfb{0};
  std::chrono::microseconds total{0};
  // Returns the first header named `lower_name`, or nullptr.
  const std::string* Header(std::string_view lower_name) const;
};

// Runs on the I/O thread: keep it short. It must not call Execute() (that would wait for the
// thread it runs on) nor destroy the engine.
using HttpCallback = std::function<void(Status, HttpResponse)>;

// Identifies a submitted request for Cancel(); never 0, never reused by an engine.
using HttpRequestId = uint64_t;

class HttpEngine : public HttpTransport {
 public:
  // Queues `request`; `done` runs exactly once, on the I/O thread (or inline with Cancelled when
  // the engine is shutting down). Returns an id for Cancel().
  virtual HttpRequestId Submit(HttpRequest request, HttpCallback done) = 0;

  // Asks the I/O thread to abandon request `id`. If it has not completed yet, it is removed from
  // curl (its connection is closed, not reused), writes no more into its sink, and its callback
  // runs with Cancelled. A no-op for a request that already completed (its callback ran or is
  // about to run with its real outcome). Asynchronous: returns before the callback has run.
  virtual void Cancel(HttpRequestId id) = 0;

  // Blocking wrapper: submits and waits for completion. OK with the response when the exchange
  // completed (whatever the HTTP status); Unavailable/TimedOut/IOError/Cancelled otherwise.
  Result<HttpResponse> Execute(HttpRequest request);

  // Number of easy handles created so far (tests: handles are reused, not created per request).
  virtual size_t TEST_HandlesCreated() const = 0;
};

// Maps an HTTP status code to a Status (C3): 2xx → OK; 404 → NotFound; 412 → FailedPrecondition;
// 401/403 → PermissionDenied; 429, 5xx (503 SlowDown) → Unavailable; 408 → TimedOut; 400 and the
// rest → IOError. The Status is retryable() exactly when RetryableHttpStatus says so (an IOError
// from an answer is not, unlike one from the transport). 416 is not an error for ranged reads;
// callers handle it first. `context` (method + key) and a snippet of the error body (S3's <Code>)
// go into the message.
Status HttpStatusToStatus(long http_status, std::string_view context, std::string_view body);

// Whether the same request may get another answer than this one if sent again: 5xx, 429
// (throttled), 408 (the server timed the request out); exactly the answers HttpStatusToStatus
// maps to Unavailable or TimedOut. The one rule for an HTTP answer, applied where its Status is
// made (HttpStatusToStatus, the credential services' answers); retry loops ask the Status
// (base/retry.h). A transport failure's Status is made by the engine from curl's code: resets
// and timeouts are Unavailable/TimedOut, retryable.
bool RetryableHttpStatus(long http_status);

// "tierfs/VERSION": the User-Agent of every request the engine sends.
const std::string& UserAgent();

// Downcasts the public opaque transport; nullptr if it is not an HttpEngine.
HttpEngine* AsEngine(HttpTransport* transport);

}  // namespace tierfs::blobclient
