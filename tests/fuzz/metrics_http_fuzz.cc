// Fuzz target: the metrics server's request handling (daemon/metrics_server.h) end to end. A
// server on 127.0.0.1 (started once) gets each input as one client's bytes, then the end of the
// client's stream. Checked: the server always closes the connection (within 8 s), and its answer
// is empty when no whole request head arrived, else one HTTP/1.1 answer with a status the
// server documents. An input holding the end of a head ("\r\n\r\n" or "\n\n") within the first
// 8 KiB, or longer than 8 KiB, must be answered.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "base/metrics.h"
#include "daemon/metrics_server.h"

namespace {

constexpr size_t kMaxHead = 8192;

[[noreturn]] void Die(const char* why, std::string_view answer) {
  std::fprintf(stderr, "metrics_http_fuzz: %s; answer: %.*s\n", why,
               static_cast<int>(std::min<size_t>(answer.size(), 200)), answer.data());
  std::abort();
}

uint16_t ServerPort() {
  static tierfs::metrics::Registry registry;
  static tierfs::metrics::Registry::Registration reg =
      tierfs::RegisterProcessMetrics(&registry, "fuzz");
  static std::unique_ptr<tierfs::MetricsServer> server = [] {
    tierfs::MetricsServerOptions o;
    o.address = "127.0.0.1:0";
    o.max_request_bytes = kMaxHead;
    auto s = tierfs::MetricsServer::Start(o, &registry);
    if (!s.ok()) Die(s.status().ToString().c_str(), "");
    return std::move(*s);
  }();
  return server->port();
}

// Sends `in`, shuts the write side, and returns everything the server sends until it closes.
std::string Exchange(uint16_t port, std::string_view in) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket failed", "");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("connect failed", "");
  std::string out;
  bool shut = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while (true) {
    if (in.empty() && !shut) {
      shutdown(fd, SHUT_WR);
      shut = true;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (in.empty() ? 0 : POLLOUT)), 0};
    if (std::chrono::steady_clock::now() > deadline) Die("the server did not close in 8 s", out);
    if (poll(&p, 1, 1000) <= 0) continue;
    if (p.revents & POLLIN || (p.revents & (POLLHUP | POLLERR))) {
      char buf[4096];
      const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
      if (n > 0) out.append(buf, static_cast<size_t>(n));
    }
    if (!in.empty() && (p.revents & POLLOUT)) {
      const ssize_t n = send(fd, in.data(), in.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) in.remove_prefix(static_cast<size_t>(n));
      if (n < 0 && errno != EAGAIN && errno != EINTR) in = {};  // closed by the server
    }
  }
  close(fd);
  return out;
}

// Where the request head ends (just past its blank line), as the server finds it.
size_t HeadEnd(std::string_view in) {
  const size_t crlf = in.find("\r\n\r\n");
  const size_t lf = in.find("\n\n");
  if (crlf != std::string_view::npos && (lf == std::string_view::npos || crlf + 2 <= lf)) {
    return crlf + 4;
  }
  return lf == std::string_view::npos ? lf : lf + 2;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::string answer = Exchange(ServerPort(), in);
  const size_t end = HeadEnd(in);
  const bool must_answer = (end != std::string_view::npos && end <= kMaxHead) || size > kMaxHead;
  if (answer.empty()) {
    if (must_answer) Die("no answer to a whole request head", answer);
    return 0;
  }
  if (!must_answer) Die("an answer before a whole request head", answer);
  static constexpr std::string_view kStatuses[] = {"200 ", "400 ", "404 ", "405 ", "431 "};
  bool known = false;
  for (std::string_view s : kStatuses)
    known = known || answer.starts_with(std::string("HTTP/1.1 ") + std::string(s));
  // /healthz answers 503 while the mount does not serve (here: never set serving).
  const std::string_view first_line = in.substr(0, in.find('\n'));
  known = known || (answer.starts_with("HTTP/1.1 503 ") &&
                    first_line.find(" /healthz") != std::string_view::npos);
  if (!known) Die("an unknown status line", answer);
  if (answer.find("\r\n\r\n") == std::string::npos) Die("an answer without a whole head", answer);
  return 0;
}
