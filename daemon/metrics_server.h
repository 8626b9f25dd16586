// MetricsServer — the /metrics endpoint: a minimal HTTP/1.1 server over plain sockets that
// answers GET (and HEAD) /metrics with metrics::Registry::Scrape() in the Prometheus text format
// (version 0.0.4), and GET /healthz with the daemon's health as SetHealth() last gave it: 200
// while the mount is served, 503 before and after (a liveness probe's endpoint). No HTTP library: a
// scrape endpoint needs only this much, and the limits below (descriptors, time, bytes) are the
// ones that matter for a daemon whose descriptors also serve reads; libmicrohttpd or civetweb would
// add a dependency for the same few lines.
//
// One owned thread ("tierfs-metrics") polls the listening socket, a stop eventfd and every open
// connection (non-blocking, one request per connection, "Connection: close"). A connection that
// has not sent a whole request head within read_timeout, or has not taken its answer within
// read_timeout after it was ready, is closed: a slow or stuck client never holds up another. A
// request head longer than max_request_bytes gets 431; a method other than GET/HEAD 405, a path
// other than /metrics and /healthz 404, a malformed request 400. Beyond max_connections open
// connections, up to max_connections / 8 (at least 1) more are accepted only to be answered 503 at
// once and closed; beyond that nothing is accepted until one closes (the kernel's listen queue
// holds the rest, then refuses them). So a flood of clients holds at most max_connections * 9 / 8
// descriptors of the daemon. When accept fails for want of descriptors or memory (EMFILE,
// ENFILE, ENOBUFS, ENOMEM), the server stops accepting for 10 ms, doubling up to 1 s, and logs
// at most one line every 10 s.
//
// Thread-safe: Start/Stop/destructor from one thread; SetHealth from any thread; scrapes run on
// the server's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/metrics.h"
#include "base/result.h"

namespace tierfs {

struct MetricsServerOptions {
  // HOST:PORT to listen on: "127.0.0.1:9464", "[::1]:9464", "localhost:9464", "0.0.0.0:9464"
  // (every interface: only if the network is trusted). Port 0 picks a free port (tests).
  std::string address;
  std::chrono::milliseconds read_timeout{5000};
  size_t max_request_bytes = 8192;
  int max_connections = 64;
};

// The parts of a HOST:PORT address; InvalidArgument naming the problem otherwise. An IPv6
// literal is written in brackets ("[::1]:9464"); the host is returned without them.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
Result<HostPort> ParseHostPort(std::string_view address);

class MetricsServer {
 public:
  // Binds and listens (an error names the address and the cause, e.g. the port is taken), then
  // starts the serving thread. `registry` is not owned and must outlive the server.
  static Result<std::unique_ptr<MetricsServer>> Start(const MetricsServerOptions& options,
                                                      const metrics::Registry* registry);
  // Stop().
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Stops serving: wakes the thread, which closes every connection and the listener; joins it.
  // Idempotent.
  void Stop();

  // What GET /healthz answers from now on: 200 if `serving`, else 503, with `detail` as the
  // body ("serving s3://b at /mnt", "stopping: ..."). Until the first call: 503 "starting".
  void SetHealth(bool serving, std::string detail);

  // The port actually bound (the one asked for, or the one the kernel chose for port 0).
  uint16_t port() const;
  // "HOST:PORT" as bound, for log lines.
  const std::string& address() const;

  class Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Publishes tierfs_build_info{version} 1 and tierfs_start_time_seconds (now) in `registry`.
metrics::Registry::Registration RegisterProcessMetrics(metrics::Registry* registry,
                                                       std::string version);

}  // namespace tierfs
