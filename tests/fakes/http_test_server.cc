#include "tests/fakes/http_test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tierfs::testing {
namespace {

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

std::string PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      auto hv = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
      };
      int hi = hv(s[i + 1]), lo = hv(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && s[i] == '+' ? ' ' : s[i]);
  }
  return out;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 412:
      return "Precondition Failed";
    case 416:
      return "Range Not Satisfiable";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

// CondVar::WaitFor is annotated REQUIRES(<its own private mutex pointer>), which clang cannot
// relate to the Mutex the caller holds. REQUIRES: the caller holds the CondVar's Mutex.
void WaitForWhileHeld(CondVar* cv, std::chrono::nanoseconds d) NO_THREAD_SAFETY_ANALYSIS {
  cv->WaitFor(d);
}

}  // namespace

const std::string* HttpTestRequest::Header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return &v;
  }
  return nullptr;
}

std::optional<std::string> HttpTestRequest::QueryParam(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    size_t eq = kv.find('=');
    std::string k = PercentDecode(kv.substr(0, eq), true);
    if (k == name) {
      return eq == std::string_view::npos ? std::string() : PercentDecode(kv.substr(eq + 1), true);
    }
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

std::string HttpTestRequest::DecodedPath() const { return PercentDecode(path, false); }

HttpTestResponse HttpTestResponse::Make(int status, std::string body) {
  HttpTestResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Result<std::unique_ptr<HttpTestServer>> HttpTestServer::Start(HttpTestHandler handler) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 128) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "bind/listen 127.0.0.1:0");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return std::unique_ptr<HttpTestServer>(
      new HttpTestServer(fd, ntohs(addr.sin_port), std::move(handler)));
}

HttpTestServer::HttpTestServer(int listen_fd, uint16_t port, HttpTestHandler handler)
    : listen_fd_(listen_fd), port_(port) {
  {
    MutexLock l(&mu_);
    handler_ = std::move(handler);
  }
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

HttpTestServer::~HttpTestServer() {
  std::vector<std::thread> threads;
  {
    MutexLock l(&mu_);
    stopping_ = true;
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    stop_cv_.SignalAll();
  }
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  accept_thread_.join();
  {
    MutexLock l(&mu_);
    threads.swap(conn_threads_);
  }
  for (auto& t : threads) t.join();
  ::close(listen_fd_);
}

void HttpTestServer::SetHandler(HttpTestHandler handler) {
  HttpTestHandler old;
  MutexLock l(&mu_);
  old = std::move(handler_);
  handler_ = std::move(handler);
  while (handler_calls_ > 0) idle_cv_.Wait();
}

std::vector<HttpTestRequest> HttpTestServer::requests() const {
  MutexLock l(&mu_);
  return requests_;
}

size_t HttpTestServer::request_count() const {
  MutexLock l(&mu_);
  return requests_.size();
}

uint64_t HttpTestServer::connections_accepted() const {
  MutexLock l(&mu_);
  return accepted_;
}

void HttpTestServer::ClearRequests() {
  MutexLock l(&mu_);
  requests_.clear();
}

void HttpTestServer::StallFor(std::chrono::milliseconds d) {
  auto deadline = std::chrono::steady_clock::now() + d;
  MutexLock l(&mu_);
  while (!stopping_) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    WaitForWhileHeld(&stop_cv_, deadline - now);
  }
}

void HttpTestServer::AcceptLoop() {
  while (true) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    MutexLock l(&mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    uint64_t id = ++accepted_;
    open_fds_.push_back(fd);
    conn_threads_.emplace_back([this, fd, id] { ServeConnection(fd, id); });
  }
}

void HttpTestServer::ServeConnection(int fd, uint64_t id) {
  std::string buf;
  bool reset = false;
  char chunk[16384];
  while (true) {
    // Read one request head.
    size_t head_end;
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) goto done;
      buf.append(chunk, static_cast<size_t>(n));
    }
    HttpTestRequest req;
    req.connection_id = id;
    {
      std::string_view head(buf.data(), head_end);
      size_t eol = head.find("\r\n");
      std::string_view line = head.substr(0, eol);
      size_t sp1 = line.find(' ');
      size_t sp2 = line.rfind(' ');
      if (sp1 == std::string_view::npos || sp2 <= sp1) goto done;
      req.method = std::string(line.substr(0, sp1));
      req.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
      size_t q = req.target.find('?');
      req.path = req.target.substr(0, q);
      if (q != std::string::npos) req.query = req.target.substr(q + 1);
      std::string_view rest = eol == std::string_view::npos ? "" : head.substr(eol + 2);
      while (!rest.empty()) {
        size_t e = rest.find("\r\n");
        std::string_view h = rest.substr(0, e);
        size_t colon = h.find(':');
        if (colon != std::string_view::npos) {
          req.headers.emplace_back(ToLower(Trim(h.substr(0, colon))), Trim(h.substr(colon + 1)));
        }
        if (e == std::string_view::npos) break;
        rest.remove_prefix(e + 2);
      }
    }
    buf.erase(0, head_end + 4);
    size_t body_len = 0;
    if (const std::string* cl = req.Header("content-length")) body_len = std::stoul(*cl);
    while (buf.size() < body_len) {
      ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) goto done;
      buf.append(chunk, static_cast<size_t>(n));
    }
    req.body = buf.substr(0, body_len);
    buf.erase(0, body_len);

    HttpTestHandler handler;
    {
      MutexLock l(&mu_);
      requests_.push_back(req);
      handler = handler_;
      ++handler_calls_;
    }
    HttpTestResponse resp = handler ? handler(req) : HttpTestResponse::Make(404);
    handler = nullptr;  // drop the captures before saying the call is over
    {
      MutexLock l(&mu_);
      if (--handler_calls_ == 0) idle_cv_.SignalAll();
    }

    const bool head_only = req.method == "HEAD";
    const size_t declared = resp.declared_length.value_or(resp.body.size());
    bool close_after = resp.close_connection ||
                       (!head_only && declared > resp.body.size());  // would hang the client
    if (const std::string* c = req.Header("connection"); c && ToLower(*c) == "close") {
      close_after = true;
    }
    std::string out =
        "HTTP/1.1 " + std::to_string(resp.status) + " " + Reason(resp.status) + "\r\n";
    for (const auto& [k, v] : resp.headers) out += k + ": " + v + "\r\n";
    out += "Content-Length: " + std::to_string(declared) + "\r\n";
    out += close_after ? "Connection: close\r\n" : "Connection: keep-alive\r\n";
    out += "\r\n";
    if (!SendAll(fd, out)) goto done;
    if (!head_only) {
      std::string_view body = resp.body;
      size_t cut = std::min(resp.reset_after_bytes, resp.stall_after_bytes);
      if (cut != HttpTestResponse::kNever && cut < body.size()) {
        if (!SendAll(fd, body.substr(0, cut))) goto done;
        body.remove_prefix(cut);
        if (resp.reset_after_bytes <= resp.stall_after_bytes) {
          reset = true;
          goto done;
        }
        StallFor(resp.stall_for);
      }
      while (resp.trickle_bytes > 0 && body.size() > resp.trickle_bytes) {
        if (!SendAll(fd, body.substr(0, resp.trickle_bytes))) goto done;
        body.remove_prefix(resp.trickle_bytes);
        StallFor(resp.trickle_every);
      }
      if (!SendAll(fd, body)) goto done;
    }
    if (close_after) goto done;
  }
done:
  if (reset) {
    linger lg{1, 0};  // close() now sends RST instead of FIN
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  }
  {
    MutexLock l(&mu_);
    open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
    ::close(fd);
  }
}

HttpTestResponse HttpTestServer::ServeObject(const HttpTestRequest& req, std::string_view data,
                                             std::string_view etag,
                                             std::string_view last_modified) {
  HttpTestResponse r;
  const std::string quoted = "\"" + std::string(etag) + "\"";
  if (const std::string* im = req.Header("if-match"); im && *im != quoted && *im != "*") {
    r.status = 412;
    r.body = "<Error><Code>PreconditionFailed</Code></Error>";
    return r;
  }
  r.headers = {
      {"ETag", quoted}, {"Last-Modified", std::string(last_modified)}, {"Accept-Ranges", "bytes"}};
  const std::string* range = req.Header("range");
  if (range == nullptr || !range->starts_with("bytes=")) {
    r.status = 200;
    r.body = std::string(data);
    return r;
  }
  std::string spec = range->substr(6);
  size_t dash = spec.find('-');
  uint64_t first = std::stoull(spec.substr(0, dash));
  uint64_t last = data.empty() ? 0 : data.size() - 1;
  if (dash + 1 < spec.size()) last = std::min<uint64_t>(last, std::stoull(spec.substr(dash + 1)));
  if (first >= data.size()) {
    r.status = 416;
    r.headers = {{"Content-Range", "bytes */" + std::to_string(data.size())}};
    r.body = "<Error><Code>InvalidRange</Code></Error>";
    return r;
  }
  r.status = 206;
  r.headers.emplace_back("Content-Range", "bytes " + std::to_string(first) + "-" +
                                              std::to_string(last) + "/" +
                                              std::to_string(data.size()));
  r.body = std::string(data.substr(first, last - first + 1));
  return r;
}

}  // namespace tierfs::testing
