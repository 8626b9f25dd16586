// MetricsServer (metrics_server.h): one thread, poll(2) over non-blocking sockets.
//
// Connection life: kReading (collect the request head, bounded in size and time) → kWriting (the
// whole answer is built at once; written as the socket takes it) → kDraining (write side shut;
// whatever the client still sends is read and dropped until it closes, so that closing never
// resets the connection before the client has read the answer) → closed. Every state has a
// deadline of read_timeout from when it began.
#include "daemon/metrics_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stop_token>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "base/mutex.h"
#include "daemon/memory_limit.h"

namespace tierfs {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::string StatusLine(int code) {
  switch (code) {
    case 200:
      return "200 OK";
    case 400:
      return "400 Bad Request";
    case 404:
      return "404 Not Found";
    case 405:
      return "405 Method Not Allowed";
    case 431:
      return "431 Request Header Fields Too Large";
    case 503:
      return "503 Service Unavailable";
    default:
      return std::to_string(code) + " Error";
  }
}

std::string Response(int code, std::string_view content_type, std::string_view body, bool head_only,
                     std::string_view extra_headers = {}) {
  std::string r = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
      StatusLine(code), content_type, body.size(), extra_headers);
  if (!head_only) r.append(body);
  return r;
}

std::string ErrorResponse(int code, std::string_view extra_headers = {}) {
  return Response(code, "text/plain; charset=utf-8", StatusLine(code) + "\n", false, extra_headers);
}

// Where the request head ends (just past the blank line), or npos if it has not yet.
size_t HeadEnd(const std::string& in) {
  size_t crlf = in.find("\r\n\r\n");
  size_t lf = in.find("\n\n");
  if (crlf != std::string::npos && (lf == std::string::npos || crlf + 2 <= lf)) return crlf + 4;
  if (lf != std::string::npos) return lf + 2;
  return std::string::npos;
}

void CloseFd(int fd) {
  if (fd >= 0) close(fd);
}

}  // namespace

Result<HostPort> ParseHostPort(std::string_view address) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("'{}' is not HOST:PORT ({}); e.g. 127.0.0.1:9464 or [::1]:9464", address, why));
  };
  HostPort hp;
  std::string_view port;
  if (address.starts_with('[')) {
    const size_t close = address.find(']');
    if (close == std::string_view::npos) return bad("no ']' after the IPv6 address");
    hp.host = std::string(address.substr(1, close - 1));
    if (close + 1 >= address.size() || address[close + 1] != ':') return bad("no :PORT");
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return bad("no :PORT");
    hp.host = std::string(address.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) return bad("write an IPv6 address in brackets");
    port = address.substr(colon + 1);
  }
  if (hp.host.empty()) return bad("no host");
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return bad("the port is not a number");
  }
  const unsigned long p = std::stoul(std::string(port));
  if (p > 65535) return bad("the port is above 65535");
  hp.port = static_cast<uint16_t>(p);
  return hp;
}

class MetricsServer::Impl {
 public:
  Impl(const MetricsServerOptions& options, const metrics::Registry* registry, int listen_fd,
       int wake_fd, uint16_t port, std::string address)
      : options_(options),
        registry_(registry),
        listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        port_(port),
        address_(std::move(address)) {
    thread_ = std::jthread([this](std::stop_token st) { Loop(st); });
  }

  ~Impl() {
    Stop();
    CloseFd(wake_fd_);
  }

  // Joins the thread, which closes every connection it holds, then closes the listening socket:
  // connections the kernel queued but nobody accepted are reset, and new ones are refused.
  void Stop() {
    if (!thread_.joinable()) return;
    thread_.request_stop();
    const uint64_t one = 1;
    // The eventfd counter cannot overflow from one write; EAGAIN is impossible here.
    if (write(wake_fd_, &one, sizeof(one)) < 0) {
      Logger(Module::kDaemon).warn("metrics server: waking the thread: {}", std::strerror(errno));
    }
    thread_.join();
    CloseFd(listen_fd_);
    listen_fd_ = -1;
  }

  uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }

  void SetHealth(bool serving, std::string detail) EXCLUDES(health_mu_) {
    MutexLock l(&health_mu_);
    serving_ = serving;
    health_detail_ = std::move(detail);
  }

 private:
  enum class State { kReading, kWriting, kDraining };
  struct Conn {
    int fd = -1;
    State state = State::kReading;
    std::string in;
    std::string out;
    size_t out_off = 0;
    SteadyClock::time_point deadline;
  };

  // At most this many connections are served at once; up to Overflow() more are accepted only to
  // be answered 503; beyond that nothing is accepted until one closes.
  size_t Cap() const { return static_cast<size_t>(std::max(1, options_.max_connections)); }
  size_t Overflow() const { return std::max<size_t>(1, Cap() / 8); }

  void Loop(std::stop_token st) {
    pthread_setname_np(pthread_self(), "tierfs-metrics");
    std::vector<Conn> conns;
    std::vector<pollfd> fds;
    while (!st.stop_requested()) {
      auto now = SteadyClock::now();
      // Not polling the listening socket is how the server stops accepting: above the limit the
      // kernel's listen queue holds new connections (and refuses them once it is full), and
      // while accept is backing off a pending connection would wake poll at once, again and
      // again.
      const bool room = conns.size() < Cap() + Overflow();
      const bool accepting = room && now >= accept_resume_;
      fds.clear();
      fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
      fds.push_back({wake_fd_, POLLIN, 0});
      int timeout_ms = room && !accepting ? MillisUntil(accept_resume_, now) : -1;
      for (const Conn& c : conns) {
        fds.push_back({c.fd, static_cast<short>(c.state == State::kWriting ? POLLOUT : POLLIN), 0});
        const int ms = MillisUntil(c.deadline, now);
        timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
      }
      const int n = poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        Logger(Module::kDaemon).error("metrics server: poll: {}", std::strerror(errno));
        break;
      }
      if (fds[1].revents != 0 || st.stop_requested()) break;
      now = SteadyClock::now();
      // Connections first (fds[2 + i] is conns[i]); new ones are appended after.
      std::vector<Conn> keep;
      keep.reserve(conns.size());
      for (size_t i = 0; i < conns.size(); ++i) {
        Conn& c = conns[i];
        if (Serve(c, fds[2 + i].revents, now)) {
          keep.push_back(std::move(c));
        } else {
          CloseFd(c.fd);
        }
      }
      conns.swap(keep);
      if (fds[0].revents & POLLIN) Accept(&conns, now);
    }
    for (Conn& c : conns) CloseFd(c.fd);
  }

  static int MillisUntil(SteadyClock::time_point t, SteadyClock::time_point now) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(t - now).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
  }

  void Accept(std::vector<Conn>* conns, SteadyClock::time_point now) {
    while (conns->size() < Cap() + Overflow()) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        if (err == EINTR || err == ECONNABORTED) continue;
        if (err != EAGAIN && err != EWOULDBLOCK) AcceptFailed(err, now);
        return;
      }
      accept_backoff_ = std::chrono::milliseconds(0);
      Conn c;
      c.fd = fd;
      c.deadline = now + options_.read_timeout;
      if (conns->size() >= Cap()) {
        // Too many at once: told so, without waiting for its request.
        StartAnswer(&c, ErrorResponse(503), now);
      }
      conns->push_back(std::move(c));
    }
  }

  // accept(2) failed with `err`: out of descriptors (EMFILE, ENFILE: most likely taken by the
  // rest of the daemon, not by this server, which holds at most Cap() + Overflow()), out of
  // memory (ENOBUFS, ENOMEM), or something unexpected. The connection stays queued and the
  // listening socket readable, so trying again at once would spin: the server stops accepting
  // for 10 ms, doubling up to 1 s (a success starts again at 10 ms), and says so in the log at
  // most every 10 s.
  void AcceptFailed(int err, SteadyClock::time_point now) {
    using std::chrono::milliseconds;
    accept_backoff_ = std::clamp(accept_backoff_ * 2, milliseconds(10), milliseconds(1000));
    accept_resume_ = now + accept_backoff_;
    ++accept_failures_unlogged_;
    if (now < next_accept_log_) return;
    Logger(Module::kDaemon)
        .warn(
            "metrics server: accept: {}; not accepting for {} ms ({} failed accepts since the "
            "last such line; at most one line every 10 s)",
            std::strerror(err), accept_backoff_.count(), accept_failures_unlogged_);
    accept_failures_unlogged_ = 0;
    next_accept_log_ = now + std::chrono::seconds(10);
  }

  void StartAnswer(Conn* c, std::string response, SteadyClock::time_point now) {
    c->state = State::kWriting;
    c->out = std::move(response);
    c->out_off = 0;
    c->in.clear();
    c->deadline = now + options_.read_timeout;
  }

  // Progresses one connection; false when it is to be closed.
  bool Serve(Conn& c, short revents, SteadyClock::time_point now) {
    if (now >= c.deadline) return false;  // too slow: reading, taking the answer, or closing
    if (revents & POLLNVAL) return false;
    switch (c.state) {
      case State::kReading:
        if (revents & (POLLIN | POLLHUP | POLLERR)) return Read(c, now);
        return true;
      case State::kWriting:
        if (revents & (POLLHUP | POLLERR)) return false;
        if (revents & POLLOUT) return Write(c, now);
        return true;
      case State::kDraining:
        if (revents & (POLLIN | POLLHUP | POLLERR)) return Drain(c);
        return true;
    }
    return false;
  }

  bool Read(Conn& c, SteadyClock::time_point now) {
    char buf[4096];
    while (true) {
      const ssize_t r = recv(c.fd, buf, sizeof(buf), 0);
      if (r < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      if (r == 0) return false;  // closed before a whole request head
      c.in.append(buf, static_cast<size_t>(r));
      const size_t end = HeadEnd(c.in);
      if (end != std::string::npos && end <= options_.max_request_bytes) {
        StartAnswer(&c, Answer(c.in.substr(0, end)), now);
        return Write(c, now);
      }
      if (c.in.size() > options_.max_request_bytes) {
        StartAnswer(&c, ErrorResponse(431), now);
        return Write(c, now);
      }
    }
  }

  bool Write(Conn& c, SteadyClock::time_point now) {
    while (c.out_off < c.out.size()) {
      const ssize_t w =
          send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      c.out_off += static_cast<size_t>(w);
    }
    shutdown(c.fd, SHUT_WR);
    c.state = State::kDraining;
    c.out.clear();
    c.deadline =
        now + std::min<std::chrono::milliseconds>(options_.read_timeout, std::chrono::seconds(1));
    return true;
  }

  static bool Drain(Conn& c) {
    char buf[4096];
    while (true) {
      const ssize_t r = recv(c.fd, buf, sizeof(buf), 0);
      if (r < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      if (r == 0) return false;  // the client closed: done
    }
  }

  // The answer to one request head.
  std::string Answer(const std::string& head) const {
    const size_t eol = head.find('\n');
    std::string line = head.substr(0, eol);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos ||
        line.find(' ', sp2 + 1) != std::string::npos) {
      return ErrorResponse(400);
    }
    const std::string method = line.substr(0, sp1);
    const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string version = line.substr(sp2 + 1);
    if (!version.starts_with("HTTP/1.") || target.empty() || method.empty()) {
      return ErrorResponse(400);
    }
    const std::string path = target.substr(0, target.find('?'));
    if (path != "/metrics" && path != "/healthz") return ErrorResponse(404);
    const bool head_only = method == "HEAD";
    if (method != "GET" && !head_only) return ErrorResponse(405, "Allow: GET, HEAD\r\n");
    if (path == "/healthz") {
      MutexLock l(&health_mu_);
      return Response(serving_ ? 200 : 503, "text/plain; charset=utf-8", health_detail_ + "\n",
                      head_only);
    }
    return Response(200, metrics::kContentType, registry_->Scrape(), head_only);
  }

  const MetricsServerOptions options_;
  const metrics::Registry* const registry_;
  int listen_fd_;  // -1 once stopped
  const int wake_fd_;
  const uint16_t port_;
  const std::string address_;

  // State below is used only by the serving thread.
  std::chrono::milliseconds accept_backoff_{0};  // 0: the last accept succeeded
  SteadyClock::time_point accept_resume_{};      // accept nothing before this
  SteadyClock::time_point next_accept_log_{};    // log no failed accept before this
  uint64_t accept_failures_unlogged_ = 0;

  // What /healthz answers (SetHealth, from any thread).
  mutable Mutex health_mu_;
  bool serving_ GUARDED_BY(health_mu_) = false;
  std::string health_detail_ GUARDED_BY(health_mu_) = "starting";

  std::jthread thread_;  // last: started once everything above is set
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsServer::~MetricsServer() = default;
void MetricsServer::Stop() { impl_->Stop(); }
void MetricsServer::SetHealth(bool serving, std::string detail) {
  impl_->SetHealth(serving, std::move(detail));
}
uint16_t MetricsServer::port() const { return impl_->port(); }
const std::string& MetricsServer::address() const { return impl_->address(); }

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsServerOptions& options,
                                                            const metrics::Registry* registry) {
  if (registry == nullptr) return Status::InvalidArgument("metrics server: no registry");
  if (options.max_request_bytes < 64 || options.read_timeout.count() <= 0) {
    return Status::InvalidArgument("metrics server: max_request_bytes or read_timeout too small");
  }
  TIERFS_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(options.address));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(hp.port);
  const int gai = getaddrinfo(hp.host.c_str(), port_str.c_str(), &hints, &res);
  if (gai != 0) {
    return Status::InvalidArgument(fmt::format("metrics address {}: cannot resolve '{}': {}",
                                               options.address, hp.host, gai_strerror(gai)));
  }
  int fd = -1;
  int err = 0;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));  // not SO_REUSEPORT: one owner
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      err = errno;
      CloseFd(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (err == EADDRINUSE) {
      return Status::Unavailable(fmt::format(
          "cannot serve metrics on {}: the port is already in use (another tierfs mount or "
          "exporter?); choose another with --metrics-address or metrics.address",
          options.address));
    }
    return Status::FromErrno(err, fmt::format("cannot serve metrics on {}", options.address));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  uint16_t port = hp.port;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    if (ss.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    if (ss.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  }
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    const int e = errno;
    CloseFd(fd);
    return Status::FromErrno(e, "metrics server: eventfd");
  }
  const std::string bound = hp.host.find(':') != std::string::npos
                                ? fmt::format("[{}]:{}", hp.host, port)
                                : fmt::format("{}:{}", hp.host, port);
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(std::make_unique<Impl>(options, registry, fd, wake, port, bound)));
}

metrics::Registry::Registration RegisterProcessMetrics(metrics::Registry* registry,
                                                       std::string version) {
  const double start =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return registry->Add([version = std::move(version), start](metrics::Exposition* e) {
    e->AddGauge("tierfs_build_info", "The tierfs version that serves this mount (always 1).",
                {{"version", version}}, 1);
    e->AddGauge("tierfs_start_time_seconds", "When the daemon started, in seconds since the epoch.",
                {}, start);
    e->AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.", {},
                static_cast<double>(ProcessResidentBytes()));
    e->AddGauge("process_open_fds", "Number of open file descriptors.", {},
                static_cast<double>(ProcessOpenFds()));
    CollectMemoryBudgetMetrics(e);
  });
}

}  // namespace tierfs
