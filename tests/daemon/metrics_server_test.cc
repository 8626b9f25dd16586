// MetricsServer over real sockets on 127.0.0.1 (port 0: the kernel picks a free one).
#include "daemon/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "tests/testing/eventually.h"
#include "tests/testing/sanitizers.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// A connected client socket, closed on destruction.
class Client {
 public:
  // Connects at once unless `connect_now` is false (then Connect() does).
  explicit Client(uint16_t port, bool connect_now = true) : port_(port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect_now) Connect();
  }
  bool Connect() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    return connected_;
  }
  ~Client() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return connected_; }
  bool Send(std::string_view s) {
    while (!s.empty()) {
      ssize_t n = send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Everything until the server closes, or `timeout` passes.
  std::string ReadAll(milliseconds timeout = milliseconds(5000)) {
    std::string out;
    const auto end = SteadyClock::now() + timeout;
    while (SteadyClock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<milliseconds>(end - SteadyClock::now());
      if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  bool closed() const { return closed_; }

 private:
  uint16_t port_;
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

std::string Get(uint16_t port, std::string_view request) {
  Client c(port);
  EXPECT_TRUE(c.connected());
  EXPECT_TRUE(c.Send(request));
  std::string r = c.ReadAll();
  EXPECT_TRUE(c.closed()) << "the server must close after one answer";
  return r;
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void StartServer(MetricsServerOptions o = {}) {
    if (o.address.empty()) o.address = "127.0.0.1:0";
    reg_ = registry_.Add([this](metrics::Exposition* e) {
      e->AddCounter("test_scrapes_total", "Scrapes \"seen\".", {{"who", "a\\b"}}, ++scrapes_);
    });
    auto s = MetricsServer::Start(o, &registry_);
    ASSERT_OK(s);
    server_ = std::move(*s);
    ASSERT_NE(server_->port(), 0);
  }
  void TearDown() override {
    server_.reset();
    reg_.Reset();
  }

  metrics::Registry registry_;
  metrics::Registry::Registration reg_;
  std::atomic<int> scrapes_{0};  // counted by the server thread's scrapes
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, GetMetricsAnswersTheTextFormat) {
  StartServer();
  const std::string r = Get(server_->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos)
      << r;
  EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos);
  const std::string body =
      "# HELP test_scrapes_total Scrapes \"seen\".\n"
      "# TYPE test_scrapes_total counter\n"
      "test_scrapes_total{who=\"a\\\\b\"} 1\n";
  EXPECT_NE(r.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
  EXPECT_TRUE(r.ends_with("\r\n\r\n" + body)) << r;
  // A query string is ignored; bare LF line ends are accepted; each scrape runs the collectors.
  const std::string r2 = Get(server_->port(), "GET /metrics?x=1 HTTP/1.0\n\n");
  EXPECT_TRUE(r2.ends_with("test_scrapes_total{who=\"a\\\\b\"} 2\n")) << r2;
}

TEST_F(MetricsServerTest, HeadHasNoBody) {
  StartServer();
  const std::string r = Get(server_->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\n")) << r;
}

TEST_F(MetricsServerTest, OtherPathsMethodsAndGarbageAreRefused) {
  StartServer();
  EXPECT_TRUE(Get(server_->port(), "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
  EXPECT_TRUE(Get(server_->port(), "GET /metricsx HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
  const std::string post = Get(server_->port(), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(post.starts_with("HTTP/1.1 405 ")) << post;
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos);
  EXPECT_TRUE(Get(server_->port(), "hello\r\n\r\n").starts_with("HTTP/1.1 400 "));
  EXPECT_TRUE(Get(server_->port(), "GET /metrics SMTP\r\n\r\n").starts_with("HTTP/1.1 400 "));
  EXPECT_EQ(scrapes_, 0);  // none of these scraped
}

TEST_F(MetricsServerTest, HealthzAnswersWhatSetHealthSaysWithoutScraping) {
  StartServer();
  const std::string starting = Get(server_->port(), "GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(starting.starts_with("HTTP/1.1 503 ")) << starting;
  EXPECT_TRUE(starting.ends_with("\r\n\r\nstarting\n")) << starting;
  server_->SetHealth(true, "serving s3://b at /mnt/b");
  const std::string serving = Get(server_->port(), "GET /healthz?probe=1 HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(serving.starts_with("HTTP/1.1 200 OK\r\n")) << serving;
  EXPECT_NE(serving.find("Content-Type: text/plain; charset=utf-8\r\n"), std::string::npos);
  EXPECT_TRUE(serving.ends_with("\r\n\r\nserving s3://b at /mnt/b\n")) << serving;
  const std::string head = Get(server_->port(), "HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n")) << head;
  server_->SetHealth(false, "stopping: the mount has ended");
  const std::string stopping = Get(server_->port(), "GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(stopping.starts_with("HTTP/1.1 503 ")) << stopping;
  EXPECT_TRUE(stopping.ends_with("stopping: the mount has ended\n")) << stopping;
  EXPECT_TRUE(Get(server_->port(), "POST /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
  EXPECT_TRUE(Get(server_->port(), "GET /healthzx HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
  EXPECT_EQ(scrapes_, 0);  // a probe does not run the collectors
}

TEST_F(MetricsServerTest, OversizedRequestGets431) {
  MetricsServerOptions o;
  o.max_request_bytes = 1024;
  StartServer(o);
  Client c(server_->port());
  ASSERT_TRUE(c.connected());
  // A head that never ends, far beyond the bound.
  std::string big = "GET /metrics HTTP/1.1\r\nX-Fill: " + std::string(4000, 'a');
  ASSERT_TRUE(c.Send(big));
  const std::string r = c.ReadAll();
  EXPECT_TRUE(r.starts_with("HTTP/1.1 431 ")) << r.substr(0, 100);
  EXPECT_TRUE(c.closed());
  EXPECT_EQ(scrapes_, 0);
}

TEST_F(MetricsServerTest, SlowClientIsDroppedAndDoesNotBlockAnother) {
  MetricsServerOptions o;
  o.read_timeout = milliseconds(300);
  StartServer(o);
  Client slow(server_->port());
  ASSERT_TRUE(slow.connected());
  ASSERT_TRUE(slow.Send("GET /metr"));  // and then nothing
  // Another client is served at once, while the slow one is still connected.
  const auto t0 = SteadyClock::now();
  const std::string r = Get(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK")) << r;
  EXPECT_LT(SteadyClock::now() - t0, milliseconds(250));
  // The slow one is closed once its read timeout passes, without an answer.
  const auto t1 = SteadyClock::now();
  EXPECT_EQ(slow.ReadAll(milliseconds(3000)), "");
  EXPECT_TRUE(slow.closed());
  EXPECT_LT(SteadyClock::now() - t1, milliseconds(2000));
}

// This process's open descriptors: the server's and the test's clients'.
size_t OpenFds() {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                           std::filesystem::directory_iterator()));
}

TEST_F(MetricsServerTest, TooManyConnectionsGet503) {
  MetricsServerOptions o;
  o.max_connections = 1;
  o.read_timeout = milliseconds(2000);
  StartServer(o);
  Client first(server_->port());
  ASSERT_TRUE(first.connected());
  ASSERT_TRUE(first.Send("GET"));  // holds the only slot, once accepted
  // Until the server has accepted `first`, a complete request may still take the slot (and get
  // its 200); from then on every other one is answered 503. (Counting the process's descriptors
  // instead is not reliable: the sanitizers' runtimes open files of their own.)
  std::string answer;
  EXPECT_TRUE(testing::Eventually(
      [&] {
        answer = Get(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n");
        return answer.starts_with("HTTP/1.1 503 ");
      },
      milliseconds(10000), milliseconds(5)))
      << answer;
}

// A flood of clients holds a bounded number of descriptors: max_connections served, and
// max_connections / 8 (at least 1) more answered 503; the rest wait in the kernel's listen
// queue until one closes.
TEST_F(MetricsServerTest, AFloodHoldsBoundedDescriptors) {
  MetricsServerOptions o;
  o.max_connections = 8;  // and 1 more answered 503
  o.read_timeout = milliseconds(3000);
  StartServer(o);
  const size_t before = OpenFds();
  constexpr size_t kClients = 40;  // below the listen queue of 64: every connect completes
  std::vector<std::unique_ptr<Client>> clients;
  for (size_t i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<Client>(server_->port()));
    ASSERT_TRUE(clients.back()->connected());
    ASSERT_TRUE(clients.back()->Send("GET /metr"));
  }
  auto held = [&] { return OpenFds() - before - kClients; };  // the server's share
  // The 8 served connections are held; the ninth slot takes the others one at a time, each
  // answered 503 and closed at once, so it is held only now and then.
  testing::Eventually([&] { return held() >= 8; }, milliseconds(10000), milliseconds(5));
  EXPECT_GE(held(), 8u);
  // And never more while they are held (the first connections time out only after 3 s).
  size_t most = 0;
  for (const auto end = SteadyClock::now() + milliseconds(300); SteadyClock::now() < end;) {
    most = std::max(most, held());
    std::this_thread::sleep_for(milliseconds(5));  // sampling a window is the point
  }
  EXPECT_LE(most, 9u);
  clients.clear();
  // Once they are gone, the server answers again: as soon as it has seen them close (until
  // then a slot may still be taken, and the answer is 503).
  std::string answer;
  const auto again = SteadyClock::now() + milliseconds(10000);
  do {
    answer = Get(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  } while (!answer.starts_with("HTTP/1.1 200 ") && SteadyClock::now() < again);
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200 ")) << answer.substr(0, answer.find('\n'));
}

// Out of descriptors, accept(2) fails with EMFILE while the connection stays queued: the server
// backs off (no busy loop: little CPU), logs one line rather than one per attempt, and serves
// the queued client once descriptors are back.
TEST_F(MetricsServerTest, OutOfDescriptorsBacksOffAndLogsOnce) {
  TIERFS_SKIP_WHEN_SANITIZER_NEEDS_DESCRIPTORS();
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  spdlog::logger& log = Logger(Module::kDaemon);
  log.sinks().push_back(sink);
  StartServer();
  Client waiting(server_->port(), /*connect_now=*/false);  // its socket, before the limit
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  // The lowest free descriptor: every new one would be at least this.
  const int lowest = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(lowest, 0);
  close(lowest);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(lowest);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  ASSERT_TRUE(waiting.Connect());  // queued: the server cannot accept it now
  ASSERT_TRUE(waiting.Send("GET /metrics HTTP/1.1\r\n\r\n"));
  rusage r0{}, r1{};
  getrusage(RUSAGE_SELF, &r0);
  std::this_thread::sleep_for(milliseconds(1000));  // the window to observe (the point)
  getrusage(RUSAGE_SELF, &r1);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  auto cpu_us = [](const rusage& r) {
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1'000'000 + r.ru_utime.tv_usec +
           r.ru_stime.tv_usec;
  };
  EXPECT_LT(cpu_us(r1) - cpu_us(r0), 100'000) << "the accept loop spins";
  const std::string answer = waiting.ReadAll(milliseconds(3000));
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200 ")) << answer.substr(0, 100);
  server_->Stop();
  log.sinks().pop_back();
  const std::string text = captured.str();
  size_t lines = 0;
  const std::string_view what = "metrics server: accept:";
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++lines;
  }
  EXPECT_GE(lines, 1u) << "accept never failed: " << text;
  EXPECT_LE(lines, 1u) << text.substr(0, 500);
}

TEST_F(MetricsServerTest, StopJoinsWithOpenConnectionsAndRefusesNewOnes) {
  MetricsServerOptions o;
  o.read_timeout = std::chrono::minutes(5);
  StartServer(o);
  const uint16_t port = server_->port();
  const size_t before = OpenFds();
  Client idle(port);
  ASSERT_TRUE(idle.connected());
  ASSERT_TRUE(idle.Send("GET /"));
  // The server holds the connection (accepted, waiting for the rest of the request).
  ASSERT_TRUE(testing::Eventually([&] { return OpenFds() >= before + 2; }, milliseconds(10000),
                                  milliseconds(5)));
  const auto t0 = SteadyClock::now();
  server_->Stop();
  EXPECT_LT(SteadyClock::now() - t0, milliseconds(1000)) << "Stop must not wait for clients";
  server_->Stop();  // idempotent
  EXPECT_EQ(idle.ReadAll(milliseconds(2000)), "");
  EXPECT_TRUE(idle.closed());
  server_.reset();
  Client late(port);
  EXPECT_FALSE(late.connected());
}

TEST_F(MetricsServerTest, TakenPortIsAClearError) {
  StartServer();
  MetricsServerOptions o;
  o.address = "127.0.0.1:" + std::to_string(server_->port());
  auto again = MetricsServer::Start(o, &registry_);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already in use"), std::string::npos)
      << again.status().ToString();
  EXPECT_NE(again.status().message().find(o.address), std::string::npos);
}

TEST_F(MetricsServerTest, BindsOnlyTheGivenAddress) {
  StartServer();
  EXPECT_EQ(server_->address(), "127.0.0.1:" + std::to_string(server_->port()));
}

TEST(ParseHostPortTest, AcceptsHostPortForms) {
  auto a = ParseHostPort("127.0.0.1:9464");
  ASSERT_OK(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9464);
  auto b = ParseHostPort("[::1]:80");
  ASSERT_OK(b);
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 80);
  auto c = ParseHostPort("localhost:0");
  ASSERT_OK(c);
  EXPECT_EQ(c->port, 0);
}

TEST(ParseHostPortTest, RefusesMalformedAddresses) {
  for (const char* bad : {"", "9464", ":9464", "host:", "host:x1", "host:65536", "host:123456",
                          "::1:9464", "[::1]9464", "[::1:9464"}) {
    auto r = ParseHostPort(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    }
  }
}

}  // namespace
}  // namespace tierfs
