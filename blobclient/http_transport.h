// HttpEngine — the libcurl I/O engine behind the public, opaque HttpTransport (internal to
// blobclient/; conventions C13).
//
// One owned std::jthread ("tierfs-http") drives a curl multi handle with curl_multi_poll. Callers
// hand requests over through a mutex-guarded queue and wake the thread with curl_multi_wakeup (no
// polling loop). Easy handles are pooled and reused, and the multi handle keeps a connection
// cache, so keep-alive connections are reused across requests. Completion is reported through a
// callback that runs on the I/O thread (Submit), or by blocking the caller (Execute). A submitted
// request can be cancelled (Cancel): the I/O thread removes it from the multi handle, so its sink
// receives no byte after its callback has run with Cancelled (hedged requests, conventions C13).
//
// Error translation happens here, once (C3): a transfer that fails (CURLcode) completes with a
// non-OK Status; a transfer that got an HTTP answer completes OK with the status code in the
// response, and HttpStatusToStatus() maps that code for the caller.
//
// Ownership: the engine owns its thread, the multi handle and all easy handles. Request bodies
// and response sinks belong to the caller and must stay alive until the callback has run.
// Destruction stops the thread and completes every outstanding request with Cancelled.
//
// Thread-safe; no external synchronization needed.
#pragma once

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

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, DELETE
  std::string url;             // fully encoded
  std::vector<std::pair<std::string, std::string>> headers;
  // PUT body; not owned, must outlive the request.
  std::span<const std::byte> body;
  // If non-null, a successful (2xx) body is written here instead of into HttpResponse::body; at
  // most sink.size() bytes are kept. Not owned; must outlive the request.
  std::span<std::byte>* sink = nullptr;
  // With a sink: the offset the caller asked for in a Range header. When the server ignores the
  // Range and answers 200 with the whole object, the engine skips this many bytes, so the sink
  // still receives exactly the requested range (and the transfer stops once the sink is full).
  uint64_t range_offset = 0;
  std::chrono::milliseconds connect_timeout{3000};
  std::chrono::milliseconds timeout{30000};         // whole transfer
  std::chrono::milliseconds low_speed_time{10000};  // abort when < 1 byte/s for this long
  std::string ca_bundle;                            // empty: the system store
};

struct HttpResponse {
  long status = 0;
  // Header names lowercased; values trimmed. Only the final response's headers (not 100s).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;       // without a sink, or the (bounded) error body of a non-2xx answer
  size_t sink_bytes = 0;  // bytes written into the sink
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
// rest → IOError (not retried). 416 is not an error for ranged reads; callers handle it first.
// `context` (method + key) and a snippet of the error body (S3's <Code>) go into the message.
Status HttpStatusToStatus(long http_status, std::string_view context, std::string_view body);

// Downcasts the public opaque transport; nullptr if it is not an HttpEngine.
HttpEngine* AsEngine(HttpTransport* transport);

}  // namespace tierfs::blobclient
