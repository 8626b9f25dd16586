// Version integrity of S3 reads: every GET answer is checked against what was
// asked (ETag, Content-Range start/end/total, body length), over loopback HTTP with real libcurl.
// The origin here behaves like s3rver and some proxies: it can ignore If-Match and Range, lie in
// Content-Range, send short bodies, weak or no ETags, and replace the object between requests.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

#include "base/mutex.h"
#include "blobclient/blob_store.h"
#include "tests/blobclient/test_util.h"
#include "tests/fakes/http_server_test.h"
#include "tests/fakes/http_test_server.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using ::tierfs::testing::AsString;
using ::tierfs::testing::HttpTestRequest;
using ::tierfs::testing::HttpTestResponse;
using ::tierfs::testing::HttpTestServer;
using ::tierfs::testing::Pattern;

constexpr char kDate1[] = "Wed, 12 Oct 2009 17:50:00 GMT";
constexpr char kDate2[] = "Thu, 13 Oct 2009 09:00:00 GMT";
constexpr int64_t kDate1Ns = 1'255'369'800'000'000'000LL;  // kDate1

// One object "obj" whose version the test switches. `honor_if_match` false: answers like s3rver
// (If-Match ignored); `honor_range` false: every GET is a 200 with the whole object.
class Origin {
 public:
  struct Version {
    std::string data;
    std::string etag_header;  // sent as is ("\"v1\"", "W/\"v1\""), or "" for none
    std::string last_modified = kDate1;
  };
  void Set(Version v) {
    MutexLock l(&mu_);
    v_ = std::move(v);
  }
  // After `n` more GETs, switch to `next` (an object replaced between two ranged reads).
  void SwitchAfter(int n, Version next) {
    MutexLock l(&mu_);
    switch_after_ = n;
    next_ = std::move(next);
  }
  std::atomic<bool> honor_if_match{false};
  std::atomic<bool> honor_range{true};

  HttpTestResponse Handle(const HttpTestRequest& req) {
    Version v;
    {
      MutexLock l(&mu_);
      if (switch_after_ == 0) v_ = next_;
      if (switch_after_ >= 0) --switch_after_;
      v = v_;
    }
    if (const std::string* im = req.Header("if-match");
        honor_if_match && im != nullptr && *im != v.etag_header) {
      return HttpTestResponse::Make(412, "<Error><Code>PreconditionFailed</Code></Error>");
    }
    HttpTestRequest r = req;  // If-Match handled above; ServeObject sees no precondition
    std::erase_if(r.headers, [&](const auto& h) {
      return h.first == "if-match" || (h.first == "range" && !honor_range);
    });
    HttpTestResponse resp = HttpTestServer::ServeObject(r, v.data, "unused", v.last_modified);
    std::erase_if(resp.headers, [](const auto& h) { return h.first == "ETag"; });
    if (!v.etag_header.empty()) resp.headers.emplace_back("ETag", v.etag_header);
    return resp;
  }

 private:
  Mutex mu_;
  Version v_ GUARDED_BY(mu_);
  Version next_ GUARDED_BY(mu_);
  int switch_after_ GUARDED_BY(mu_) = -1;
};

class S3IntegrityTest : public ::tierfs::testing::HttpServerTest {
 protected:
  std::unique_ptr<BlobStore> Open(uint64_t part_size = 8ull << 20, int max_attempts = 3) {
    S3Options o;
    o.bucket = "bkt";
    o.endpoint = server_->base_url();
    o.credentials.access_key_id = "AKIDTEST";
    o.credentials.secret_access_key = "secret";
    o.backoff_base = std::chrono::milliseconds(1);
    o.backoff_max = std::chrono::milliseconds(5);
    o.request_timeout = std::chrono::milliseconds(5000);
    o.max_attempts = max_attempts;
    o.part_size = part_size;
    o.max_parts_in_flight = 1;  // parts in order: "replaced between parts" is deterministic
    o.hedge = false;
    auto s = NewS3BlobStore(o, transport_.get(), &clock_);
    EXPECT_OK(s);
    return s.ok() ? std::move(*s) : nullptr;
  }

  static ObjectInfo Pin(const std::string& data, std::string etag, int64_t mtime_ns = kDate1Ns) {
    ObjectInfo i;
    i.size = data.size();
    i.etag = std::move(etag);
    i.mtime_ns = mtime_ns;
    return i;
  }

  // Reads [off, off + n) of "obj"; with `pinned` through ReadPinned, else Read(if_match).
  Result<std::string> Get(BlobStore* s, uint64_t off, size_t n, const ObjectInfo* pinned,
                          std::string_view if_match = {}) {
    std::vector<std::byte> buf(n);
    Result<size_t> got =
        pinned ? s->ReadPinned("obj", off, buf, *pinned) : s->Read("obj", off, buf, if_match);
    if (!got.ok()) return got.status();
    return AsString(std::span<const std::byte>(buf.data(), *got));
  }

  // Installs a handler; the returned guard removes it before `origin_` etc. go away.
  [[nodiscard]] HttpTestServer::ScopedHandler Serve() {
    return server_->Scoped([this](const HttpTestRequest& req) { return origin_.Handle(req); });
  }
  [[nodiscard]] HttpTestServer::ScopedHandler ServeRaw(HttpTestResponse resp) {
    return server_->Scoped([resp](const HttpTestRequest&) { return resp; });
  }

  FakeClock clock_{1'440'938'160'000'000'000LL};
  Origin origin_;
};

TEST_F(S3IntegrityTest, AnswerWithAnotherEtagIsAVersionChangeNotData) {
  const std::string v1 = Pattern(10000), v2 = std::string(10000, 'x');
  origin_.Set({v2, "\"v2\""});  // replaced at the same size; If-Match ignored (s3rver)
  auto h = Serve();
  auto store = Open();
  const ObjectInfo pin = Pin(v1, "v1");
  auto r = Get(store.get(), 100, 1000, &pin);
  ASSERT_FALSE(r.ok()) << "served bytes of another version";
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition) << r.status().ToString();
  EXPECT_EQ(server_->request_count(), 1u);  // a version change is not retried
  // The plain Read with If-Match checks the same.
  auto r2 = Get(store.get(), 100, 1000, nullptr, "v1");
  EXPECT_EQ(r2.status().code(), Status::Code::kFailedPrecondition) << r2.status().ToString();
  EXPECT_EQ(store->Stats().bytes_read, 0u);
}

TEST_F(S3IntegrityTest, IfMatchIsSentStrongAnd412IsAVersionChange) {
  const std::string v1 = Pattern(5000);
  origin_.Set({v1, "\"v1\""});
  origin_.honor_if_match = true;
  auto h = Serve();
  auto store = Open();
  ObjectInfo pin = Pin(v1, "v1");
  auto ok = Get(store.get(), 0, 5000, &pin);
  ASSERT_OK(ok);
  EXPECT_EQ(*ok, v1);
  EXPECT_EQ(*server_->requests().back().Header("if-match"), "\"v1\"");
  pin.etag = "v0";
  auto stale = Get(store.get(), 0, 5000, &pin);
  EXPECT_EQ(stale.status().code(), Status::Code::kFailedPrecondition) << stale.status().ToString();
}

TEST_F(S3IntegrityTest, ContentRangeWithAWrongStartIsRefused) {
  const std::string data = Pattern(1000);
  HttpTestResponse resp = HttpTestResponse::Make(206, data.substr(0, 100));
  resp.headers = {{"Content-Range", "bytes 0-99/1000"}, {"ETag", "\"v1\""}};
  auto h = ServeRaw(resp);
  auto store = Open();
  auto r = Get(store.get(), 500, 100, nullptr, "v1");
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
}

TEST_F(S3IntegrityTest, ContentRangeWithAnotherTotalIsAVersionChange) {
  // Same ETag, same start and length, but the object is now 2000 bytes: not the pinned version.
  const std::string data = Pattern(2000);
  origin_.Set({data, "\"v1\""});
  auto h = Serve();
  auto store = Open();
  ObjectInfo pin = Pin(data, "v1");
  pin.size = 1000;
  auto r = Get(store.get(), 0, 100, &pin);
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition) << r.status().ToString();
  // A total that does not parse is refused too.
  HttpTestResponse star = HttpTestResponse::Make(206, data.substr(0, 100));
  star.headers = {{"Content-Range", "bytes 0-99/*"}, {"ETag", "\"v1\""}};
  auto h2 = ServeRaw(star);
  pin.size = 2000;
  auto r2 = Get(store.get(), 0, 100, &pin);
  EXPECT_EQ(r2.status().code(), Status::Code::kCorruption) << r2.status().ToString();
}

TEST_F(S3IntegrityTest, ShortBodyIsRetriedThenAnErrorNeverAShortRead) {
  // Content-Range announces 1000 bytes, the body (and its Content-Length) has 400.
  const std::string data = Pattern(4000);
  HttpTestResponse resp = HttpTestResponse::Make(206, data.substr(1000, 400));
  resp.headers = {{"Content-Range", "bytes 1000-1999/4000"}, {"ETag", "\"v1\""}};
  auto h = ServeRaw(resp);
  auto store = Open(8ull << 20, /*max_attempts=*/3);
  auto r = Get(store.get(), 1000, 1000, nullptr, "v1");
  ASSERT_FALSE(r.ok()) << "a short body mid-object was returned as " << r->size() << " bytes";
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
  EXPECT_EQ(server_->request_count(), 3u);  // retried: a truncating proxy may do better next time
  const ObjectInfo pin = Pin(data, "v1");
  auto p = Get(store.get(), 1000, 1000, &pin);
  EXPECT_EQ(p.status().code(), Status::Code::kCorruption) << p.status().ToString();
}

TEST_F(S3IntegrityTest, RangeLongerThanAskedIsRefused) {
  const std::string data = Pattern(4000);
  HttpTestResponse resp = HttpTestResponse::Make(206, data.substr(0, 2000));
  resp.headers = {{"Content-Range", "bytes 0-1999/4000"}, {"ETag", "\"v1\""}};
  auto h = ServeRaw(resp);
  auto store = Open();
  auto r = Get(store.get(), 0, 1000, nullptr, "v1");
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
}

TEST_F(S3IntegrityTest, ServerIgnoringRangeGivesTheRightSliceOfThePinnedVersionOnly) {
  const std::string v1 = Pattern(50000);
  origin_.Set({v1, "\"v1\""});
  origin_.honor_range = false;
  auto h = Serve();
  auto store = Open(/*part_size=*/8192);
  const ObjectInfo pin = Pin(v1, "v1");
  auto mid = Get(store.get(), 30000, 20000, &pin);  // three parts, each a 200 of everything
  ASSERT_OK(mid);
  EXPECT_EQ(*mid, v1.substr(30000));
  auto tail = Get(store.get(), 49990, 64, &pin);
  ASSERT_OK(tail);
  EXPECT_EQ(*tail, v1.substr(49990));
  // The whole object is now another size (or another ETag): refused, not sliced.
  origin_.Set({v1 + "more", "\"v1\""});
  EXPECT_EQ(Get(store.get(), 0, 100, &pin).status().code(), Status::Code::kFailedPrecondition);
  origin_.Set({std::string(50000, 'z'), "\"v2\""});
  EXPECT_EQ(Get(store.get(), 0, 100, &pin).status().code(), Status::Code::kFailedPrecondition);
}

TEST_F(S3IntegrityTest, ObjectReplacedBetweenTwoPartsOfOneReadNeverMixes) {
  const std::string v1 = Pattern(8000), v2 = std::string(8000, 'B');
  auto h = Serve();
  auto store = Open(/*part_size=*/2000);  // 4 parts, one at a time
  for (bool pinned : {true, false}) {
    SCOPED_TRACE(pinned ? "ReadPinned" : "Read without If-Match");
    origin_.Set({v1, "\"v1\""});
    origin_.SwitchAfter(2, {v2, "\"v2\""});  // parts 1-2 see v1, parts 3-4 v2 (same size)
    const ObjectInfo pin = Pin(v1, "v1");
    auto r = Get(store.get(), 0, 8000, pinned ? &pin : nullptr);
    ASSERT_FALSE(r.ok()) << "assembled a read from two versions";
    EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition) << r.status().ToString();
  }
}

TEST_F(S3IntegrityTest, WeakEtagsCompareStrippedAndAreNotSentInIfMatch) {
  const std::string v1 = Pattern(3000);
  origin_.Set({v1, "W/\"v1\""});
  origin_.honor_if_match = true;  // a server comparing If-Match strongly would 412 a W/ value
  auto h = Serve();
  auto store = Open();
  ObjectInfo pin = Pin(v1, "W/\"v1\"");
  auto r = Get(store.get(), 10, 100, &pin);
  ASSERT_OK(r);
  EXPECT_EQ(*r, v1.substr(10, 100));
  EXPECT_FALSE(server_->requests().back().HasHeader("if-match"));
  // A strong pin matches the weak answer of the same value (from a server that does not
  // evaluate If-Match; one that does compares strongly and answers 412) ...
  origin_.honor_if_match = false;
  pin.etag = "v1";
  ASSERT_OK(Get(store.get(), 10, 100, &pin));
  // ... and a changed weak ETag is a version change.
  origin_.Set({v1, "W/\"v2\""});
  pin.etag = "W/\"v1\"";
  EXPECT_EQ(Get(store.get(), 10, 100, &pin).status().code(), Status::Code::kFailedPrecondition);
}

TEST_F(S3IntegrityTest, WithoutEtagTheVersionIsSizeAndLastModified) {
  const std::string v1 = Pattern(3000);
  origin_.Set({v1, "", kDate1});
  auto h = Serve();
  auto store = Open();
  const ObjectInfo pin = Pin(v1, "", kDate1Ns);
  auto r = Get(store.get(), 0, 3000, &pin);
  ASSERT_OK(r);
  EXPECT_EQ(*r, v1);
  EXPECT_FALSE(server_->requests().back().HasHeader("if-match"));
  // Rewritten at the same size: Last-Modified moved.
  origin_.Set({std::string(3000, 'n'), "", kDate2});
  EXPECT_EQ(Get(store.get(), 0, 3000, &pin).status().code(), Status::Code::kFailedPrecondition);
  // Rewritten at another size.
  origin_.Set({Pattern(3001), "", kDate1});
  EXPECT_EQ(Get(store.get(), 0, 100, &pin).status().code(), Status::Code::kFailedPrecondition);
}

TEST_F(S3IntegrityTest, AnswerWithoutEtagCannotConfirmAPinnedOne) {
  const std::string v1 = Pattern(3000);
  origin_.Set({v1, ""});
  auto h = Serve();
  auto store = Open();
  const ObjectInfo pin = Pin(v1, "v1");
  EXPECT_EQ(Get(store.get(), 0, 100, &pin).status().code(), Status::Code::kCorruption);
}

TEST_F(S3IntegrityTest, PinnedReadsStopAtThePinnedSizeAndA416MeansItShrank) {
  const std::string v1 = Pattern(3000);
  origin_.Set({v1.substr(0, 1000), "\"v1\""});  // same ETag (a lying store), but shorter now
  auto h = Serve();
  auto store = Open();
  const ObjectInfo pin = Pin(v1, "v1");
  EXPECT_EQ(Get(store.get(), 2000, 500, &pin).status().code(), Status::Code::kFailedPrecondition);
  server_->ClearRequests();
  auto past = Get(store.get(), 3000, 500, &pin);  // at the pinned end: no request at all
  ASSERT_OK(past);
  EXPECT_EQ(*past, "");
  EXPECT_EQ(server_->request_count(), 0u);
}

}  // namespace
}  // namespace tierfs
