// HttpTestServer — a real HTTP/1.1 server on 127.0.0.1 inside the test process (conventions
// C19, after cvmfs's MockHTTPServer), for testing libcurl code end to end over loopback TCP.
//
// It listens on an ephemeral port, accepts on its own thread and serves each connection on its
// own thread with keep-alive. Every request is recorded (method, raw target, headers, body,
// connection id) so tests can assert on what the client really sent. A handler decides the
// answer; HttpTestResponse has switches for faults: a wrong Content-Length, a reset after N body
// bytes, a stall after N body bytes. ServeObject() answers GET/HEAD for one object with Range and
// If-Match support, like S3.
//
// Ownership: the server owns its sockets and threads; destruction closes every connection (ending
// stalls early) and joins all threads.
//
// Thread-safe; no external synchronization needed. The handler runs on connection threads,
// concurrently; it must be thread-safe itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"

namespace tierfs::testing {

struct HttpTestRequest {
  std::string method;
  std::string target;  // as sent, still encoded: "/bucket/a%20b?list-type=2"
  std::string path;    // target before '?', still encoded
  std::string query;   // target after '?', still encoded
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string body;
  uint64_t connection_id = 0;  // 1, 2, ... in accept order

  // The first header named `lower_name`, or nullptr.
  const std::string* Header(std::string_view lower_name) const;
  bool HasHeader(std::string_view lower_name) const { return Header(lower_name) != nullptr; }
  // The decoded value of query parameter `name`; nullopt if absent.
  std::optional<std::string> QueryParam(std::string_view name) const;
  // The path with %XX decoded.
  std::string DecodedPath() const;
};

struct HttpTestResponse {
  static constexpr size_t kNever = std::numeric_limits<size_t>::max();

  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // Content-Length is added
  std::string body;  // for HEAD, only its size is sent (as Content-Length)

  // Faults.
  std::optional<size_t> declared_length;   // Content-Length to announce instead of body.size()
  size_t reset_after_bytes = kNever;       // send this many body bytes, then reset (RST)
  size_t stall_after_bytes = kNever;       // send this many body bytes, then stall ...
  std::chrono::milliseconds stall_for{0};  // ... this long (server shutdown ends it early)
  bool close_connection = false;           // close after this response (no keep-alive)
  // With trickle_bytes > 0, the body (what a stall left of it) goes out trickle_bytes at a time,
  // pausing trickle_every after each piece but the last.
  size_t trickle_bytes = 0;
  std::chrono::milliseconds trickle_every{0};

  static HttpTestResponse Make(int status, std::string body = {});
};

using HttpTestHandler = std::function<HttpTestResponse(const HttpTestRequest&)>;

class HttpTestServer {
 public:
  // Binds 127.0.0.1 on an ephemeral port and starts serving with `handler` (404 for everything
  // if empty).
  static Result<std::unique_ptr<HttpTestServer>> Start(HttpTestHandler handler = {});
  ~HttpTestServer();
  HttpTestServer(const HttpTestServer&) = delete;
  HttpTestServer& operator=(const HttpTestServer&) = delete;

  uint16_t port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Replaces the handler and returns once no call of the old one is still running (handler
  // calls are short: stalls happen after the handler returns).
  void SetHandler(HttpTestHandler handler) EXCLUDES(mu_);

  // Installs `handler` for the life of the returned object; its destructor puts back the 404
  // handler and waits for running calls. Declare it after the locals the handler captures by
  // reference: the server threads then never touch them once they are gone (TSan sees socket
  // traffic as no ordering at all, so without this a late call races the next stack frame).
  class ScopedHandler {
   public:
    ScopedHandler(HttpTestServer* server, HttpTestHandler handler) : server_(server) {
      server_->SetHandler(std::move(handler));
    }
    ~ScopedHandler() { server_->SetHandler({}); }
    ScopedHandler(const ScopedHandler&) = delete;
    ScopedHandler& operator=(const ScopedHandler&) = delete;

   private:
    HttpTestServer* const server_;
  };
  [[nodiscard]] ScopedHandler Scoped(HttpTestHandler handler) { return {this, std::move(handler)}; }

  std::vector<HttpTestRequest> requests() const EXCLUDES(mu_);
  size_t request_count() const EXCLUDES(mu_);
  uint64_t connections_accepted() const EXCLUDES(mu_);
  void ClearRequests() EXCLUDES(mu_);

  // Answers a GET or HEAD of one object the way S3 does: If-Match against "etag" (412 on
  // mismatch), Range "bytes=a-b" / "bytes=a-" (206 + Content-Range; 416 past the end), ETag
  // (quoted), Last-Modified, Accept-Ranges.
  static HttpTestResponse ServeObject(
      const HttpTestRequest& req, std::string_view data, std::string_view etag,
      std::string_view last_modified = "Wed, 12 Oct 2009 17:50:00 GMT");

 private:
  HttpTestServer(int listen_fd, uint16_t port, HttpTestHandler handler);
  void AcceptLoop();
  void ServeConnection(int fd, uint64_t id);
  // Sleeps up to `d`, returning early when the server stops.
  void StallFor(std::chrono::milliseconds d) EXCLUDES(mu_);

  // Constant after construction.
  const int listen_fd_;
  const uint16_t port_;

  mutable Mutex mu_;
  CondVar stop_cv_{&mu_};
  CondVar idle_cv_{&mu_};  // signalled when handler_calls_ drops to 0
  // State below is protected by mu_.
  HttpTestHandler handler_ GUARDED_BY(mu_);
  std::vector<HttpTestRequest> requests_ GUARDED_BY(mu_);
  std::vector<int> open_fds_ GUARDED_BY(mu_);
  std::vector<std::thread> conn_threads_ GUARDED_BY(mu_);
  uint64_t accepted_ GUARDED_BY(mu_) = 0;
  int handler_calls_ GUARDED_BY(mu_) = 0;  // handler invocations running now
  bool stopping_ GUARDED_BY(mu_) = false;

  std::thread accept_thread_;  // last: started after everything above
};

}  // namespace tierfs::testing
