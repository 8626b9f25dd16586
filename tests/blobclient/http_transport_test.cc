// HttpEngine (libcurl) against the loopback HttpTestServer: bodies, sinks, ranges, faults,
// connection reuse, shutdown.
#include "blobclient/http_transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <optional>
#include <vector>

#include "tests/blobclient/test_util.h"
#include "tests/fakes/http_server_test.h"
#include "tests/fakes/http_test_server.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace tierfs::blobclient {
namespace {

using ::tierfs::testing::HttpTestRequest;
using ::tierfs::testing::HttpTestResponse;
using ::tierfs::testing::HttpTestServer;
using Clock = std::chrono::steady_clock;

class HttpTransportTest : public ::tierfs::testing::HttpServerTest {
 protected:
  void SetUp() override {
    ::tierfs::testing::HttpServerTest::SetUp();
    if (HasFatalFailure()) return;
    engine_ = AsEngine(transport_.get());
    ASSERT_NE(engine_, nullptr);
  }

  HttpRequest Get(std::string path) {
    HttpRequest r;
    r.url = server_->base_url() + path;
    r.timeout = std::chrono::milliseconds(5000);
    return r;
  }

  HttpEngine* engine_ = nullptr;
};

TEST_F(HttpTransportTest, GetIntoStringAndHeaders) {
  server_->SetHandler([](const HttpTestRequest& req) {
    HttpTestResponse r = HttpTestResponse::Make(200, "hello " + req.path);
    r.headers.emplace_back("X-Thing", "  v1 ");
    return r;
  });
  HttpRequest req = Get("/a");
  req.headers.emplace_back("X-Custom", "yes");
  auto r = engine_->Execute(req);
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello /a");
  ASSERT_NE(r->Header("x-thing"), nullptr);
  EXPECT_EQ(*r->Header("x-thing"), "v1");
  auto reqs = server_->requests();
  ASSERT_EQ(reqs.size(), 1u);
  ASSERT_NE(reqs[0].Header("x-custom"), nullptr);
  EXPECT_EQ(*reqs[0].Header("x-custom"), "yes");
  EXPECT_FALSE(reqs[0].HasHeader("expect"));
}

TEST_F(HttpTransportTest, RangedGetStreamsIntoSink) {
  const std::string data = ::tierfs::testing::Pattern(100000);
  auto handler = server_->Scoped(
      [&](const HttpTestRequest& req) { return HttpTestServer::ServeObject(req, data, "e1"); });
  std::vector<std::byte> buf(1000);
  ScatterBuffer sink{std::span<std::byte>(buf)};
  HttpRequest req = Get("/obj");
  req.headers.emplace_back("Range", "bytes=5000-5999");
  req.sink = &sink;
  req.range_offset = 5000;
  auto r = engine_->Execute(req);
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 206);
  EXPECT_EQ(r->sink_bytes, 1000u);
  EXPECT_TRUE(r->body.empty());
  EXPECT_EQ(::tierfs::testing::AsString(buf), data.substr(5000, 1000));
}

TEST_F(HttpTransportTest, A200ToARangedGetYieldsOnlyTheRange) {
  const std::string data = ::tierfs::testing::Pattern(300000);
  auto handler =
      server_->Scoped([&](const HttpTestRequest&) { return HttpTestResponse::Make(200, data); });
  std::vector<std::byte> buf(777);
  ScatterBuffer sink{std::span<std::byte>(buf)};
  HttpRequest req = Get("/obj");
  req.headers.emplace_back("Range", "bytes=123456-124232");
  req.sink = &sink;
  req.range_offset = 123456;
  auto r = engine_->Execute(req);
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->sink_bytes, 777u);
  EXPECT_EQ(::tierfs::testing::AsString(buf), data.substr(123456, 777));
}

// A sink in pieces (a run of blocks not adjacent in memory) receives the body in order across
// them: a 206, and a 200 to a ranged request (skipped to the range, cut at the sink's end).
TEST_F(HttpTransportTest, ScatteredSinkReceivesTheBodyInOrderAcrossItsPieces) {
  const std::string data = ::tierfs::testing::Pattern(300000);
  std::atomic<bool> ignore_range{false};
  auto handler = server_->Scoped([&](const HttpTestRequest& req) {
    return ignore_range ? HttpTestResponse::Make(200, data)
                        : HttpTestServer::ServeObject(req, data, "e1");
  });
  for (bool ignore : {false, true}) {
    SCOPED_TRACE(ignore);
    ignore_range = ignore;
    // Sizes that do not line up with curl's buffers: 1 byte, a page, an odd size, the rest.
    std::vector<std::byte> a(1), b(4096), c(70001), d(100000 - 1 - 4096 - 70001);
    ScatterBuffer sink({std::span<std::byte>(a), std::span<std::byte>(b), std::span<std::byte>(c),
                        std::span<std::byte>(d)});
    HttpRequest req = Get("/obj");
    req.headers.emplace_back("Range", "bytes=150000-249999");
    req.sink = &sink;
    req.range_offset = 150000;
    auto r = engine_->Execute(req);
    ASSERT_OK(r);
    EXPECT_EQ(r->status, ignore ? 200 : 206);
    EXPECT_EQ(r->sink_bytes, 100000u);
    std::string got = ::tierfs::testing::AsString(a) + ::tierfs::testing::AsString(b) +
                      ::tierfs::testing::AsString(c) + ::tierfs::testing::AsString(d);
    EXPECT_TRUE(got == data.substr(150000, 100000));
  }
}

TEST_F(HttpTransportTest, ErrorBodyDoesNotGoIntoTheSink) {
  server_->SetHandler([](const HttpTestRequest&) {
    return HttpTestResponse::Make(404, "<Error><Code>NoSuchKey</Code></Error>");
  });
  std::vector<std::byte> buf(8, std::byte{0x55});
  ScatterBuffer sink{std::span<std::byte>(buf)};
  HttpRequest req = Get("/missing");
  req.sink = &sink;
  auto r = engine_->Execute(req);
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->sink_bytes, 0u);
  EXPECT_EQ(buf[0], std::byte{0x55});
  Status st = HttpStatusToStatus(r->status, "GET missing", r->body);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find("NoSuchKey"), std::string::npos);
}

TEST_F(HttpTransportTest, BodyOverMaxBodyFailsAndBodyAtTheCapIsKept) {
  auto handler = server_->Scoped([](const HttpTestRequest& req) {
    return HttpTestResponse::Make(200, std::string(req.path == "/big" ? 4097 : 4096, 'x'));
  });
  HttpRequest at = Get("/exact");
  at.max_body = 4096;
  auto ok = engine_->Execute(at);
  ASSERT_OK(ok);
  EXPECT_EQ(ok->body.size(), 4096u);

  HttpRequest over = Get("/big");
  over.max_body = 4096;
  auto r = engine_->Execute(over);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
  EXPECT_NE(r.status().message().find("response body over the 4KiB cap"), std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(IsRetryable(r.status()));
}

TEST_F(HttpTransportTest, DefaultCapRefusesAListingPageOver16MiB) {
  const std::string huge(kMaxListPageBody + 1, 'x');
  auto handler =
      server_->Scoped([&](const HttpTestRequest&) { return HttpTestResponse::Make(200, huge); });
  auto r = engine_->Execute(Get("/list"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
  EXPECT_NE(r.status().message().find("16MiB cap"), std::string::npos) << r.status().ToString();
}

TEST_F(HttpTransportTest, ErrorBodyIsCutAtItsCapAndTheAnswerStillCounts) {
  std::string body = "<Error><Code>SlowDown</Code></Error>" + std::string(4u << 20, ' ');
  auto handler =
      server_->Scoped([&](const HttpTestRequest&) { return HttpTestResponse::Make(503, body); });
  auto r = engine_->Execute(Get("/err"));
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_TRUE(r->error_body_cut);
  EXPECT_EQ(r->body.size(), kMaxErrorBody);
  Status st = HttpStatusToStatus(r->status, "GET err", r->body);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("SlowDown"), std::string::npos);
  // The same cap with a sink: the error body does not go into the sink either.
  std::vector<std::byte> buf(8, std::byte{0x55});
  ScatterBuffer sink{std::span<std::byte>(buf)};
  HttpRequest req = Get("/err");
  req.sink = &sink;
  auto r2 = engine_->Execute(req);
  ASSERT_OK(r2);
  EXPECT_EQ(r2->status, 503);
  EXPECT_EQ(r2->body.size(), kMaxErrorBody);
  EXPECT_EQ(r2->sink_bytes, 0u);
  EXPECT_EQ(buf[0], std::byte{0x55});
}

TEST_F(HttpTransportTest, HeaderBlockOverItsCapFails) {
  auto handler = server_->Scoped([](const HttpTestRequest& req) {
    HttpTestResponse r = HttpTestResponse::Make(200, "ok");
    // ~100 KiB of headers for /many, ~10 KiB for /some.
    const int n = req.path == "/many" ? 2000 : 200;
    for (int i = 0; i < n; ++i) {
      r.headers.emplace_back("X-Filler-" + std::to_string(i), std::string(40, 'h'));
    }
    return r;
  });
  auto some = engine_->Execute(Get("/some"));
  ASSERT_OK(some);
  EXPECT_EQ(some->body, "ok");
  auto r = engine_->Execute(Get("/many"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
  EXPECT_NE(r.status().message().find("response headers over the 64KiB cap"), std::string::npos)
      << r.status().ToString();
}

TEST_F(HttpTransportTest, A206LongerThanTheSinkIsRefusedNotCut) {
  // A server that answers 206 with more bytes than the range asked for: nothing of it is kept.
  const std::string data = ::tierfs::testing::Pattern(5000);
  auto handler = server_->Scoped([&](const HttpTestRequest&) {
    HttpTestResponse r = HttpTestResponse::Make(206, data.substr(100, 2000));
    r.headers.emplace_back("Content-Range", "bytes 100-2099/5000");
    return r;
  });
  std::vector<std::byte> buf(1000, std::byte{0x55});
  ScatterBuffer sink{std::span<std::byte>(buf)};
  HttpRequest req = Get("/obj");
  req.headers.emplace_back("Range", "bytes=100-1099");
  req.sink = &sink;
  req.range_offset = 100;
  auto r = engine_->Execute(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
  EXPECT_NE(r.status().message().find("answer of 2000 bytes for a range of 1000"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(buf[0], std::byte{0x55});
  EXPECT_EQ(buf[999], std::byte{0x55});
}

TEST(HttpTransportCreateTest, OutOfDescriptorsIsAnErrorNotAnEngineThatCannotWait) {
  // The engine waits on an epoll set and an eventfd; with no descriptor left, creating one must
  // fail with a Status (the daemon says so at start-up) rather than give an engine whose I/O
  // thread has nothing to sleep on.
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  int highest = 2;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) highest = std::max(highest, std::atoi(e->d_name));
    ::closedir(d);
  }
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(highest) + 1;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;  // every number below the limit taken
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  const int open_errno = errno;
  Result<std::unique_ptr<HttpTransport>> t = NewHttpTransport(HttpTransportOptions{});
  for (int fd : filler) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_EQ(open_errno, EMFILE);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("http transport"), std::string::npos)
      << t.status().ToString();
  // With descriptors back, an engine is made as usual.
  EXPECT_OK(NewHttpTransport(HttpTransportOptions{}));
}

TEST(HttpStatusToStatusTest, Table) {
  EXPECT_OK(HttpStatusToStatus(200, "", ""));
  EXPECT_OK(HttpStatusToStatus(206, "", ""));
  EXPECT_EQ(HttpStatusToStatus(404, "", "").code(), Status::Code::kNotFound);
  EXPECT_EQ(HttpStatusToStatus(412, "", "").code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(HttpStatusToStatus(403, "", "").code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(HttpStatusToStatus(401, "", "").code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(HttpStatusToStatus(429, "", "").code(), Status::Code::kUnavailable);
  EXPECT_EQ(HttpStatusToStatus(500, "", "").code(), Status::Code::kUnavailable);
  EXPECT_EQ(HttpStatusToStatus(503, "", "<Error><Code>SlowDown</Code></Error>").code(),
            Status::Code::kUnavailable);
  EXPECT_EQ(HttpStatusToStatus(400, "", "").code(), Status::Code::kIOError);
}

// One rule for answers: an HTTP answer is retried exactly when HttpStatusToStatus says the server
// may answer otherwise next time (Unavailable, TimedOut); a 400 or 409 is an IOError, not retried.
TEST(HttpStatusToStatusTest, RetryableAnswersAreExactlyTheUnavailableAndTimedOutOnes) {
  for (long s = 100; s < 600; ++s) {
    if (s >= 200 && s < 300) continue;
    const Status st = HttpStatusToStatus(s, "", "");
    const bool may_change =
        st.code() == Status::Code::kUnavailable || st.code() == Status::Code::kTimedOut;
    EXPECT_EQ(RetryableHttpStatus(s), may_change) << s << ": " << st.ToString();
    EXPECT_EQ(st.retryable(), may_change) << s << ": " << st.ToString();
  }
  EXPECT_TRUE(RetryableHttpStatus(503));
  EXPECT_TRUE(RetryableHttpStatus(429));
  EXPECT_TRUE(RetryableHttpStatus(408));
  EXPECT_FALSE(RetryableHttpStatus(400));
  EXPECT_FALSE(RetryableHttpStatus(409));
}

TEST_F(HttpTransportTest, ConnectionRefusedIsUnavailable) {
  // A port that was just free: bind, note, close.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  HttpRequest req;
  req.url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/x";
  auto r = engine_->Execute(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnavailable) << r.status().ToString();
}

TEST_F(HttpTransportTest, StalledBodyTimesOut) {
  server_->SetHandler([](const HttpTestRequest&) {
    HttpTestResponse r = HttpTestResponse::Make(200, std::string(10000, 'x'));
    r.stall_after_bytes = 100;
    r.stall_for = std::chrono::milliseconds(10000);
    return r;
  });
  HttpRequest req = Get("/slow");
  req.timeout = std::chrono::milliseconds(400);
  auto start = Clock::now();
  auto r = engine_->Execute(req);
  auto took = Clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kTimedOut) << r.status().ToString();
  EXPECT_LT(took, std::chrono::seconds(3));
}

TEST_F(HttpTransportTest, LowSpeedLimitAbortsAStall) {
  // curl averages the speed over a window of a few seconds, so stall before the first body byte
  // to keep the test short.
  server_->SetHandler([](const HttpTestRequest&) {
    HttpTestResponse r = HttpTestResponse::Make(200, std::string(10000, 'x'));
    r.stall_after_bytes = 0;
    r.stall_for = std::chrono::milliseconds(10000);
    return r;
  });
  HttpRequest req = Get("/slow");
  req.low_speed_time = std::chrono::milliseconds(1000);
  auto start = Clock::now();
  auto r = engine_->Execute(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kTimedOut) << r.status().ToString();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
}

TEST_F(HttpTransportTest, ResetMidBodyIsUnavailable) {
  server_->SetHandler([](const HttpTestRequest&) {
    HttpTestResponse r = HttpTestResponse::Make(200, std::string(100000, 'x'));
    r.reset_after_bytes = 5000;
    return r;
  });
  auto r = engine_->Execute(Get("/reset"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnavailable) << r.status().ToString();
  EXPECT_TRUE(IsRetryable(r.status()));
}

TEST_F(HttpTransportTest, ShortBodyForContentLengthIsUnavailable) {
  server_->SetHandler([](const HttpTestRequest&) {
    HttpTestResponse r = HttpTestResponse::Make(200, std::string(500, 'x'));
    r.declared_length = 1000;
    return r;
  });
  auto r = engine_->Execute(Get("/short"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnavailable) << r.status().ToString();
}

TEST_F(HttpTransportTest, CaBundleEnvironmentDoesNotBreakPlainHttp) {
  // These machines set AWS_CA_BUNDLE/CURL_CA_BUNDLE/SSL_CERT_FILE; libcurl must not care for
  // http://, even when they point at files that do not exist.
  struct Saved {
    const char* name;
    std::optional<std::string> value;
  };
  std::vector<Saved> saved;
  for (const char* v : {"AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"}) {
    const char* cur = std::getenv(v);
    saved.push_back({v, cur ? std::optional<std::string>(cur) : std::nullopt});
    ::setenv(v, "/nonexistent/tierfs-ca.pem", 1);
  }
  server_->SetHandler([](const HttpTestRequest&) { return HttpTestResponse::Make(200, "ok"); });
  HttpRequest req = Get("/ca");
  auto r = engine_->Execute(req);
  req.ca_bundle = "/nonexistent/explicit-ca.pem";  // only used for https
  auto r2 = engine_->Execute(req);
  for (const auto& s : saved) {
    if (s.value)
      ::setenv(s.name, s.value->c_str(), 1);
    else
      ::unsetenv(s.name);
  }
  ASSERT_OK(r);
  EXPECT_EQ(r->body, "ok");
  ASSERT_OK(r2);
  EXPECT_EQ(r2->body, "ok");
}

TEST_F(HttpTransportTest, ConnectionsAndHandlesAreReused) {
  server_->SetHandler([](const HttpTestRequest&) { return HttpTestResponse::Make(200, "ok"); });
  for (int i = 0; i < 20; ++i) {
    auto r = engine_->Execute(Get("/k" + std::to_string(i)));
    ASSERT_OK(r);
    ASSERT_EQ(r->body, "ok");
  }
  EXPECT_EQ(server_->request_count(), 20u);
  EXPECT_EQ(server_->connections_accepted(), 1u);
  EXPECT_EQ(engine_->TEST_HandlesCreated(), 1u);
}

TEST_F(HttpTransportTest, PutSendsTheBody) {
  server_->SetHandler([](const HttpTestRequest& req) {
    return HttpTestResponse::Make(200, std::to_string(req.body.size()));
  });
  const std::string payload = ::tierfs::testing::Pattern(70000);
  HttpRequest req = Get("/put");
  req.method = "PUT";
  req.body = ::tierfs::testing::AsBytes(payload);
  auto r = engine_->Execute(req);
  ASSERT_OK(r);
  EXPECT_EQ(r->body, "70000");
  auto reqs = server_->requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "PUT");
  EXPECT_EQ(reqs[0].body, payload);
}

TEST_F(HttpTransportTest, HeadAndDelete) {
  server_->SetHandler([](const HttpTestRequest& req) {
    if (req.method == "DELETE") return HttpTestResponse::Make(204);
    return HttpTestServer::ServeObject(req, "0123456789", "e");
  });
  HttpRequest head = Get("/o");
  head.method = "HEAD";
  auto r = engine_->Execute(head);
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
  ASSERT_NE(r->Header("content-length"), nullptr);
  EXPECT_EQ(*r->Header("content-length"), "10");
  HttpRequest del = Get("/o");
  del.method = "DELETE";
  auto d = engine_->Execute(del);
  ASSERT_OK(d);
  EXPECT_EQ(d->status, 204);
  // Both went over the same connection (HEAD's body-less answer must not confuse keep-alive).
  EXPECT_EQ(server_->connections_accepted(), 1u);
}

TEST_F(HttpTransportTest, CallbacksRunForConcurrentSubmits) {
  server_->SetHandler(
      [](const HttpTestRequest& req) { return HttpTestResponse::Make(200, req.path); });
  constexpr int kN = 50;
  std::vector<std::promise<std::string>> promises(kN);
  for (int i = 0; i < kN; ++i) {
    engine_->Submit(Get("/p" + std::to_string(i)), [&promises, i](Status st, HttpResponse resp) {
      promises[i].set_value(st.ok() ? resp.body : st.ToString());
    });
  }
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(promises[i].get_future().get(), "/p" + std::to_string(i));
  }
}

TEST_F(HttpTransportTest, DestructionCancelsOutstandingRequests) {
  server_->SetHandler([](const HttpTestRequest&) {
    HttpTestResponse r = HttpTestResponse::Make(200, std::string(1000, 'x'));
    r.stall_after_bytes = 10;
    r.stall_for = std::chrono::milliseconds(20000);
    return r;
  });
  std::promise<Status> done;
  HttpRequest req = Get("/stall");
  req.timeout = std::chrono::milliseconds(60000);
  engine_->Submit(req, [&done](Status st, HttpResponse) { done.set_value(st); });
  // Let the request reach the server before tearing down.
  testing::Eventually([&] { return server_->request_count() > 0; }, std::chrono::seconds(5),
                      std::chrono::milliseconds(5));
  ASSERT_EQ(server_->request_count(), 1u);
  auto start = Clock::now();
  transport_.reset();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(1)), std::future_status::ready);
  EXPECT_EQ(f.get().code(), Status::Code::kCancelled);
}

TEST_F(HttpTransportTest, CancelEndsAStalledRequestAndStopsItsSink) {
  server_->SetHandler([](const HttpTestRequest& req) {
    if (req.path == "/fast") return HttpTestResponse::Make(200, "quick");
    HttpTestResponse r = HttpTestResponse::Make(200, std::string(100000, 'x'));
    r.stall_after_bytes = 100;
    r.stall_for = std::chrono::milliseconds(20000);
    return r;
  });
  std::vector<std::byte> buf(100000);
  ScatterBuffer sink{std::span<std::byte>(buf)};
  HttpRequest req = Get("/stall");
  req.sink = &sink;
  req.timeout = std::chrono::milliseconds(60000);
  std::promise<std::pair<Status, size_t>> done;
  HttpRequestId id = engine_->Submit(req, [&done](Status st, HttpResponse resp) {
    done.set_value({st, resp.sink_bytes});
  });
  EXPECT_NE(id, 0u);
  testing::Eventually([&] { return server_->request_count() > 0; }, std::chrono::seconds(5),
                      std::chrono::milliseconds(5));
  auto start = Clock::now();
  engine_->Cancel(id);
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  auto [st, sink_bytes] = f.get();
  EXPECT_EQ(st.code(), Status::Code::kCancelled) << st.ToString();
  EXPECT_LE(sink_bytes, 100u);
  // Cancelling again, or an unknown id, is a no-op; the engine keeps working.
  engine_->Cancel(id);
  engine_->Cancel(987654321);
  auto r = engine_->Execute(Get("/fast"));
  ASSERT_OK(r);
  EXPECT_EQ(r->body, "quick");
  EXPECT_GT(r->total.count(), 0);
  EXPECT_LE(r->ttfb, r->total);
}

TEST_F(HttpTransportTest, CancelAfterCompletionIsANoOp) {
  server_->SetHandler([](const HttpTestRequest&) { return HttpTestResponse::Make(200, "ok"); });
  std::promise<Status> done;
  HttpRequestId id =
      engine_->Submit(Get("/"), [&done](Status st, HttpResponse) { done.set_value(st); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_OK(f.get());
  engine_->Cancel(id);  // the callback must not run a second time (the promise would throw)
  EXPECT_OK(engine_->Execute(Get("/")));
}

bool ThreadNamed(const std::string& wanted) {
  bool found = false;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return false;
  while (dirent* e = ::readdir(d)) {
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (comm && std::getline(comm, name) && name == wanted) found = true;
  }
  ::closedir(d);
  return found;
}

TEST_F(HttpTransportTest, IoThreadIsNamed) {
  // The thread names itself when it starts; one round trip guarantees it has.
  server_->SetHandler([](const HttpTestRequest&) { return HttpTestResponse::Make(200, "ok"); });
  ASSERT_OK(engine_->Execute(Get("/")));
  EXPECT_TRUE(ThreadNamed("tierfs-http"));
}

}  // namespace
}  // namespace tierfs::blobclient
