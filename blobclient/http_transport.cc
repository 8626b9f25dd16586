#include "blobclient/http_transport.h"

#include <curl/curl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "base/logging.h"
#include "base/mutex.h"
#include "base/strings.h"
#include "base/units.h"
#include "base/version.h"

namespace tierfs::blobclient {

const std::string& UserAgent() {
  static const std::string ua = "tierfs/" + std::string(Version());
  return ua;
}

namespace {

// One request in flight: owned by the engine from Submit() until its callback has run.
struct Transfer {
  HttpRequestId id = 0;
  HttpRequest req;
  HttpCallback done;
  HttpResponse resp;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  size_t upload_pos = 0;
  uint64_t skip = 0;     // bytes of a 200 answer still to drop before the sink
  bool decided = false;  // the write target of the current response is chosen
  bool to_sink = false;
  bool stopped_sink_full = false;  // we ended the transfer because the sink was full: success
  long code = 0;                   // HTTP status of the response being written
  size_t header_bytes = 0;         // all header lines received so far (1xx answers included)
  std::string refused;             // why we ended the transfer at a cap: the request fails
  char errbuf[CURL_ERROR_SIZE] = {0};
};

// Returning anything but `len` from a curl write/header callback ends the transfer with
// CURLE_WRITE_ERROR; Finish() tells our own stops (sink full, error body cut, a cap) apart.
size_t WriteCallback(char* data, size_t size, size_t nmemb, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t len = size * nmemb;
  if (!t->decided) {
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->code);
    t->decided = true;
    t->to_sink = t->req.sink != nullptr && t->code >= 200 && t->code < 300;
    // A 200 to a ranged request carries the whole object: skip to the requested offset.
    t->skip = (t->to_sink && t->code == 200) ? t->req.range_offset : 0;
    uint64_t announced = 0;
    const std::string* cl = t->resp.Header("content-length");
    if (t->to_sink && t->code != 200 && cl != nullptr && ParseDecimal(*cl, &announced) &&
        announced > t->req.sink->size()) {
      t->refused = "answer of " + std::to_string(announced) + " bytes for a range of " +
                   std::to_string(t->req.sink->size());
      return 0;
    }
  }
  if (!t->to_sink) {
    std::string& body = t->resp.body;
    if (t->req.sink == nullptr && t->code >= 200 && t->code < 300) {
      if (len > t->req.max_body - body.size()) {
        t->refused = "response body over the " + FormatSize(t->req.max_body) + " cap";
        return 0;
      }
      body.append(data, len);
      return len;
    }
    // An error body is for messages only: keep its start, read no further.
    const size_t room = kMaxErrorBody - body.size();
    body.append(data, std::min(len, room));
    if (len > room) {
      t->resp.error_body_cut = true;
      return 0;
    }
    return len;
  }
  const ScatterBuffer& sink = *t->req.sink;
  size_t off = 0;
  if (t->skip > 0) {
    off = static_cast<size_t>(std::min<uint64_t>(t->skip, len));
    t->skip -= off;
  }
  const size_t room = sink.size() - t->resp.sink_bytes;
  const size_t take = std::min(room, len - off);
  if (off + take < len && t->code != 200) {
    // A 206 longer than the range asked for: refuse it rather than keep a cut answer.
    t->refused =
        "answer longer than the requested range of " + std::to_string(sink.size()) + " bytes";
    return 0;
  }
  if (take > 0) {
    sink.CopyIn(t->resp.sink_bytes,
                std::span<const std::byte>(reinterpret_cast<const std::byte*>(data) + off, take));
    t->resp.sink_bytes += take;
    if (HttpProgress* pr = t->req.progress.get()) {
      pr->last_byte_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count(),
                             std::memory_order_relaxed);
    }
  }
  if (off + take < len) {
    // More bytes than asked for (a 200 with the whole object): we have our range, stop here.
    t->stopped_sink_full = true;
    return 0;
  }
  return len;
}

size_t HeaderCallback(char* data, size_t size, size_t nmemb, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t len = size * nmemb;
  t->header_bytes += len;
  if (t->header_bytes > kMaxHeaderBytes) {
    t->refused = "response headers over the " + FormatSize(kMaxHeaderBytes) + " cap";
    return 0;
  }
  std::string_view line(data, len);
  if (line.starts_with("HTTP/")) {
    // A new response (after a 100 Continue, say): forget the previous one's headers.
    t->resp.headers.clear();
    t->decided = false;
    return len;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return len;
  std::string name(TrimSpace(line.substr(0, colon)));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  t->resp.headers.emplace_back(std::move(name), std::string(TrimSpace(line.substr(colon + 1))));
  return len;
}

size_t ReadCallback(char* buffer, size_t size, size_t nitems, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t room = size * nitems;
  const size_t left = t->req.body.size() - t->upload_pos;
  const size_t n = std::min(room, left);
  std::memcpy(buffer, t->req.body.data() + t->upload_pos, n);
  t->upload_pos += n;
  return n;
}

Status CurlCodeToStatus(CURLcode rc, const Transfer& t) {
  std::string msg = t.req.method + " " + t.req.url + ": " +
                    (t.errbuf[0] != '\0' ? std::string(t.errbuf) : curl_easy_strerror(rc));
  switch (rc) {
    case CURLE_OK:
      return Status::OK();
    case CURLE_OPERATION_TIMEDOUT:
      return Status::TimedOut(msg);
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY:
      return Status::Unavailable(msg);
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
      return Status::PermissionDenied(msg);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return Status::InvalidArgument(msg);
    case CURLE_ABORTED_BY_CALLBACK:
      return Status::Cancelled(msg);
    case CURLE_OUT_OF_MEMORY:
      return Status::Internal(msg);
    default:
      return Status::IOError(msg);
  }
}

// curl's receive buffer. After each full buffer curl polls the socket for more, so its 16 KiB
// default costs a recv and a poll per 16 KiB of body; 128 KiB is one of each for a 128 KiB object
// (and stays below the daemon's malloc mmap threshold, so a handle's buffer comes from the heap).
constexpr long kReceiveBufferBytes = 128 * 1024;

class CurlEngine final : public HttpEngine {
 public:
  // Takes ownership of `epoll_fd` and `wake_fd` (an eventfd), made by NewCurlEngine.
  CurlEngine(const HttpTransportOptions& options, int epoll_fd, int wake_fd)
      : options_(options), epoll_fd_(epoll_fd), wake_fd_(wake_fd) {
    multi_ = curl_multi_init();
    curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                      static_cast<long>(options.max_total_connections));
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS,
                      static_cast<long>(options.max_host_connections));
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS,
                      static_cast<long>(options.max_total_connections));
    // The socket interface: epoll tells curl which socket is ready (curl_multi_perform would
    // instead poll() every running transfer's socket on each call: 27 poll calls per 128 KiB
    // object in the cold loader benchmark).
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &CurlEngine::OnSocket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &CurlEngine::OnTimer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);  // a fresh epoll set: cannot fail
    thread_ = std::jthread([this](std::stop_token st) { Run(st); });
  }

  ~CurlEngine() override {
    {
      MutexLock l(&mu_);
      stopping_ = true;
    }
    Wake();
    thread_.request_stop();
    thread_.join();
    for (CURL* h : idle_) curl_easy_cleanup(h);
    curl_multi_cleanup(multi_);
    ::close(wake_fd_);
    ::close(epoll_fd_);
  }

  HttpRequestId Submit(HttpRequest request, HttpCallback done) override {
    auto t = std::make_unique<Transfer>();
    const HttpRequestId id = next_id_.fetch_add(1) + 1;
    t->id = id;
    t->req = std::move(request);
    t->done = std::move(done);
    {
      MutexLock l(&mu_);
      if (!stopping_) {
        queue_.push_back(std::move(t));
      }
    }
    if (t != nullptr) {  // not queued: the engine is shutting down
      t->done(Status::Cancelled("http transport is shutting down"), HttpResponse{});
      return id;
    }
    Wake();
    return id;
  }

  void Cancel(HttpRequestId id) override {
    {
      MutexLock l(&mu_);
      if (stopping_) return;  // shutdown cancels everything anyway
      cancels_.push_back(id);
    }
    Wake();
  }

  size_t TEST_HandlesCreated() const override { return handles_created_.load(); }

 private:
  // Wakes the I/O thread (thread-safe): one eventfd write, read back by Run.
  void Wake() {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  // CURLMOPT_SOCKETFUNCTION (I/O thread): what curl wants to wait for on socket `s`.
  static int OnSocket(CURL* /*easy*/, curl_socket_t s, int what, void* self, void* /*socketp*/) {
    auto* e = static_cast<CurlEngine*>(self);
    if (what == CURL_POLL_REMOVE) {
      ::epoll_ctl(e->epoll_fd_, EPOLL_CTL_DEL, s, nullptr);  // ENOENT/EBADF: already gone
      return 0;
    }
    epoll_event ev{};
    ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
    ev.data.fd = s;
    // A socket curl closed without a REMOVE left epoll by itself, and its number may come back.
    if (::epoll_ctl(e->epoll_fd_, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT) {
      ::epoll_ctl(e->epoll_fd_, EPOLL_CTL_ADD, s, &ev);
    }
    return 0;
  }

  // CURLMOPT_TIMERFUNCTION (I/O thread): curl's next timeout, -1 for none.
  static int OnTimer(CURLM* /*multi*/, long timeout_ms, void* self) {
    auto* e = static_cast<CurlEngine*>(self);
    e->timer_due_ = timeout_ms < 0
                        ? std::chrono::steady_clock::time_point::max()
                        : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    return 0;
  }

  void Run(std::stop_token st) {
    pthread_setname_np(pthread_self(), "tierfs-http");
    std::deque<std::unique_ptr<Transfer>> incoming;
    std::vector<HttpRequestId> cancels;
    epoll_event events[64];
    while (true) {
      {
        MutexLock l(&mu_);
        if (stopping_ || st.stop_requested()) break;
        incoming.swap(queue_);
        cancels.swap(cancels_);
      }
      while (!incoming.empty()) {
        Start(std::move(incoming.front()));  // curl sets a timer of 0 to start it
        incoming.pop_front();
      }
      // After the starts: a request cancelled right after Submit is found in active_ here.
      for (HttpRequestId id : cancels) CancelActive(id);
      cancels.clear();
      // Sleeps until a socket is ready, curl's timer is due, or Submit()/Cancel()/~CurlEngine()
      // call Wake(). The 1 s cap is only a safety net, not a polling interval.
      int wait_ms = 1000;
      if (timer_due_ != std::chrono::steady_clock::time_point::max()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(
            timer_due_ - std::chrono::steady_clock::now());
        wait_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1000));
      }
      const int n = ::epoll_wait(epoll_fd_, events, 64, wait_ms);
      int running = 0;
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd == wake_fd_) {
          uint64_t count = 0;
          (void)!::read(wake_fd_, &count, sizeof(count));
          continue;
        }
        const uint32_t ev = events[i].events;
        const int mask = ((ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) ? CURL_CSELECT_IN : 0) |
                         ((ev & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                         ((ev & EPOLLERR) ? CURL_CSELECT_ERR : 0);
        curl_multi_socket_action(multi_, events[i].data.fd, mask, &running);
      }
      if (std::chrono::steady_clock::now() >= timer_due_) {
        timer_due_ = std::chrono::steady_clock::time_point::max();  // curl sets the next one
        curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
      }
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
        if (msg->msg == CURLMSG_DONE) Finish(msg->easy_handle, msg->data.result);
      }
    }
    // Shutdown: fail everything still in flight or queued.
    for (auto& [easy, t] : active_) {
      curl_multi_remove_handle(multi_, easy);
      Complete(std::move(t), Status::Cancelled("http transport is shutting down"));
    }
    active_.clear();
    by_id_.clear();
    {
      MutexLock l(&mu_);
      incoming.swap(queue_);
      cancels_.clear();
    }
    for (auto& t : incoming) {
      t->done(Status::Cancelled("http transport is shutting down"), HttpResponse{});
    }
  }

  CURL* AcquireHandle() {
    if (!idle_.empty()) {
      CURL* h = idle_.back();
      idle_.pop_back();
      curl_easy_reset(h);  // keeps the connection cache of the multi handle
      return h;
    }
    ++handles_created_;
    return curl_easy_init();
  }

  void ReleaseHandle(CURL* h) {
    if (idle_.size() < static_cast<size_t>(std::max(1, options_.max_total_connections))) {
      idle_.push_back(h);
    } else {
      curl_easy_cleanup(h);
    }
  }

  void Start(std::unique_ptr<Transfer> t) {
    CURL* h = AcquireHandle();
    if (h == nullptr) {
      t->done(Status::Internal("curl_easy_init failed"), HttpResponse{});
      return;
    }
    t->easy = h;
    const HttpRequest& r = t->req;
    curl_easy_setopt(h, CURLOPT_URL, r.url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &WriteCallback);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &HeaderCallback);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    // Keys may contain "." and ".." segments; send the path exactly as signed.
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, kReceiveBufferBytes);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(r.connect_timeout.count()));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(r.timeout.count()));
    // LOW_SPEED_TIME has 1 s granularity: round up, at least 1 s.
    long low_speed_s = static_cast<long>((r.low_speed_time.count() + 999) / 1000);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, std::max(1L, low_speed_s));
    // The CA bundle matters only for TLS: a bundle set for the host (AWS_CA_BUNDLE) that is
    // missing or unreadable must not fail plain-http requests.
    if (!r.ca_bundle.empty() && r.url.starts_with("https://")) {
      curl_easy_setopt(h, CURLOPT_CAINFO, r.ca_bundle.c_str());
    }
    curl_easy_setopt(h, CURLOPT_USERAGENT, UserAgent().c_str());

    if (r.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (r.method == "PUT") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, &ReadCallback);
      curl_easy_setopt(h, CURLOPT_READDATA, t.get());
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    } else if (r.method == "POST") {
      // A small form body (STS), sent from the request's buffer.
      static const char kEmpty[] = "";
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      curl_easy_setopt(h, CURLOPT_POSTFIELDS,
                       r.body.empty() ? kEmpty : reinterpret_cast<const char*>(r.body.data()));
    } else if (r.method != "GET") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    for (const auto& [k, v] : r.headers) {
      std::string line = v.empty() ? k + ";" : k + ": " + v;
      t->header_list = curl_slist_append(t->header_list, line.c_str());
    }
    // No "Expect: 100-continue" round trip on PUT; no Accept header noise.
    t->header_list = curl_slist_append(t->header_list, "Expect:");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, t->header_list);

    CURLMcode mc = curl_multi_add_handle(multi_, h);
    if (mc != CURLM_OK) {
      Status st =
          Status::Internal(std::string("curl_multi_add_handle: ") + curl_multi_strerror(mc));
      Complete(std::move(t), st);
      return;
    }
    by_id_.emplace(t->id, h);
    active_.emplace(h, std::move(t));
  }

  void CancelActive(HttpRequestId id) {
    auto idit = by_id_.find(id);
    if (idit == by_id_.end()) return;  // already completed
    CURL* easy = idit->second;
    by_id_.erase(idit);
    auto it = active_.find(easy);
    if (it == active_.end()) return;
    std::unique_ptr<Transfer> t = std::move(it->second);
    active_.erase(it);
    curl_multi_remove_handle(multi_, easy);
    // The connection was mid-response: curl closes it rather than reuse it.
    Status st = Status::Cancelled(t->req.method + " " + t->req.url + ": cancelled");
    Complete(std::move(t), std::move(st));
  }

  void Finish(CURL* easy, CURLcode rc) {
    auto it = active_.find(easy);
    if (it == active_.end()) return;
    std::unique_ptr<Transfer> t = std::move(it->second);
    active_.erase(it);
    by_id_.erase(t->id);
    curl_multi_remove_handle(multi_, easy);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &t->resp.status);
    curl_off_t ttfb_us = 0, total_us = 0;
    curl_easy_getinfo(easy, CURLINFO_STARTTRANSFER_TIME_T, &ttfb_us);
    curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME_T, &total_us);
    t->resp.ttfb = std::chrono::microseconds(ttfb_us);
    t->resp.total = std::chrono::microseconds(total_us);
    Status st;
    if (rc == CURLE_WRITE_ERROR && !t->refused.empty()) {
      // Not retryable: the same server would send the same oversized answer again.
      st = Status::Corruption(t->req.method + " " + t->req.url + ": " + t->refused);
    } else if (rc == CURLE_WRITE_ERROR && (t->stopped_sink_full || t->resp.error_body_cut)) {
      st = Status::OK();
    } else {
      st = CurlCodeToStatus(rc, *t);
    }
    Complete(std::move(t), std::move(st));
  }

  // Releases the handle back to the pool and runs the callback.
  void Complete(std::unique_ptr<Transfer> t, Status st) {
    if (t->easy != nullptr) {
      ReleaseHandle(t->easy);
      t->easy = nullptr;
    }
    if (t->header_list != nullptr) {
      curl_slist_free_all(t->header_list);
      t->header_list = nullptr;
    }
    HttpCallback done = std::move(t->done);
    HttpResponse resp = std::move(t->resp);
    t.reset();
    done(std::move(st), std::move(resp));
  }

  // Constant after construction.
  const HttpTransportOptions options_;
  CURLM* multi_ = nullptr;  // I/O thread only
  const int epoll_fd_;      // the sockets curl waits on, and wake_fd_
  const int wake_fd_;       // eventfd: Wake() is thread-safe

  // State below is used only by the I/O thread.
  std::chrono::steady_clock::time_point timer_due_ = std::chrono::steady_clock::time_point::max();
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> active_;
  std::unordered_map<HttpRequestId, CURL*> by_id_;  // the requests in active_, by id
  std::vector<CURL*> idle_;
  std::atomic<size_t> handles_created_{0};
  std::atomic<HttpRequestId> next_id_{0};

  // State below is protected by mu_.
  Mutex mu_;
  std::deque<std::unique_ptr<Transfer>> queue_ GUARDED_BY(mu_);
  std::vector<HttpRequestId> cancels_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;

  std::jthread thread_;  // last: started after every member above is initialised
};

}  // namespace

const std::string* HttpResponse::Header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return &v;
  }
  return nullptr;
}

Result<HttpResponse> HttpEngine::Execute(HttpRequest request) {
  struct Waiter {
    Mutex mu;
    CondVar cv{&mu};
    bool done GUARDED_BY(mu) = false;
    Status status GUARDED_BY(mu);
    HttpResponse response GUARDED_BY(mu);
  };
  auto w = std::make_shared<Waiter>();
  Submit(std::move(request), [w](Status st, HttpResponse resp) {
    MutexLock l(&w->mu);
    w->status = std::move(st);
    w->response = std::move(resp);
    w->done = true;
    w->cv.Signal();
  });
  MutexLock l(&w->mu);
  while (!w->done) w->cv.Wait();
  if (!w->status.ok()) return w->status;
  return std::move(w->response);
}

bool RetryableHttpStatus(long http_status) {
  return http_status >= 500 || http_status == 429 || http_status == 408;
}

Status HttpStatusToStatus(long http_status, std::string_view context, std::string_view body) {
  if (http_status >= 200 && http_status < 300) return Status::OK();
  std::string msg = std::string(context) + ": HTTP " + std::to_string(http_status);
  // S3 error bodies carry <Code>SlowDown</Code> etc.; include the code, never the whole body.
  if (size_t b = body.find("<Code>"); b != std::string_view::npos) {
    size_t e = body.find("</Code>", b);
    if (e != std::string_view::npos && e - b < 128) {
      msg += " ";
      msg += EscapeForLog(body.substr(b + 6, e - b - 6));  // untrusted bytes
    }
  }
  switch (http_status) {
    case 404:
      return Status::NotFound(msg);
    case 412:
      return Status::FailedPrecondition(msg);
    case 401:
    case 403:
      return Status::PermissionDenied(msg);
    default:
      break;
  }
  // The answers worth sending again (the one rule) are the retryable codes: the server timed
  // the request out, or it is throttled or failing.
  if (RetryableHttpStatus(http_status)) {
    return http_status == 408 ? Status::TimedOut(msg) : Status::Unavailable(msg);
  }
  // An exchange that completed without an HTTP status (not an HTTP server), a 400, a 409, ...:
  // the same request gets the same answer, so the Status says it is not worth another try.
  if (http_status == 0) return Status::Unavailable(msg + " (no response)").WithRetryable(false);
  return Status::IOError(msg).WithRetryable(false);
}

HttpEngine* AsEngine(HttpTransport* transport) { return dynamic_cast<HttpEngine*>(transport); }

Result<std::unique_ptr<HttpTransport>> NewCurlEngine(const HttpTransportOptions& options) {
  if (options.max_total_connections < 1 || options.max_host_connections < 1) {
    return Status::InvalidArgument("http transport: connection limits must be >= 1");
  }
  static std::once_flag once;
  static CURLcode init_rc = CURLE_OK;
  std::call_once(once, [] { init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (init_rc != CURLE_OK) {
    return Status::Internal(std::string("curl_global_init: ") + curl_easy_strerror(init_rc));
  }
  // The descriptors the engine waits with: out of descriptors is an error here, not an engine
  // that cannot wait.
  const int epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return Status::FromErrno(errno, "http transport: epoll_create1");
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    const int err = errno;
    ::close(epoll_fd);
    return Status::FromErrno(err, "http transport: eventfd");
  }
  return std::unique_ptr<HttpTransport>(std::make_unique<CurlEngine>(options, epoll_fd, wake_fd));
}

}  // namespace tierfs::blobclient

namespace tierfs {
// The public factory lives in namespace tierfs (blob_store.h).
Result<std::unique_ptr<HttpTransport>> NewHttpTransport(const HttpTransportOptions& options) {
  return blobclient::NewCurlEngine(options);
}
}  // namespace tierfs
