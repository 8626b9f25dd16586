// Building and signing the S3 store's requests (s3_store.h): the endpoint, the addressing style,
// the object paths and SigV4.
#include <cctype>

#include "base/strings.h"
#include "blobclient/s3_store.h"
#include "blobclient/sigv4.h"

namespace tierfs::blobclient {

Result<Endpoint> ParseEndpoint(std::string_view url) {
  Endpoint ep;
  size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return Status::InvalidArgument("s3 endpoint needs a scheme (http:// or https://): '" +
                                   std::string(url) + "'");
  }
  ep.scheme = std::string(url.substr(0, sep));
  for (char& c : ep.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ep.scheme != "http" && ep.scheme != "https") {
    return Status::InvalidArgument("s3 endpoint scheme must be http or https: '" + RedactUrl(url) +
                                   "'");
  }
  std::string_view rest = url.substr(sep + 3);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos && rest.substr(slash) != "/") {
    return Status::InvalidArgument("s3 endpoint must not have a path: '" + RedactUrl(url) + "'");
  }
  if (authority.empty() || authority.find('@') != std::string_view::npos) {
    return Status::InvalidArgument("s3 endpoint needs a host (and no user info): '" +
                                   RedactUrl(url) + "'");
  }
  size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    ep.host = std::string(authority.substr(0, colon));
    ep.port = std::string(authority.substr(colon + 1));
    if (ep.port.empty() || ep.port.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("s3 endpoint has a bad port: '" + RedactUrl(url) + "'");
    }
    if ((ep.scheme == "http" && ep.port == "80") || (ep.scheme == "https" && ep.port == "443")) {
      ep.port.clear();  // curl sends Host without a default port; sign the same
    }
  } else {
    ep.host = std::string(authority);
  }
  for (char& c : ep.host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ep;
}

// DNS-compatible (virtual-host addressable) bucket name. Dots break TLS wildcard certificates,
// so with https they force path style.
bool DnsCompatibleBucket(std::string_view b, bool https) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
    if (c == '.' && https) return false;
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(b.front()) || !alnum(b.back())) return false;
  if (b.find("..") != std::string_view::npos) return false;
  return true;
}

std::string S3BlobStore::ObjectPath(std::string_view key) const {
  std::string full = options_.prefix + std::string(key);
  return virtual_host_ ? "/" + full : "/" + options_.bucket + "/" + full;
}

HttpRequest S3BlobStore::BuildRequest(const Call& c, const Credentials* creds) const {
  HttpRequest r;
  r.method = c.method;
  std::string query = CanonicalQueryString(c.query);
  r.url = endpoint_.scheme + "://" + host_header_ + UriEncode(c.path, false) +
          (query.empty() ? "" : "?" + query);
  r.headers = c.headers;
  r.headers.emplace_back("Host", host_header_);
  if (creds != nullptr) {
    SigningRequest s;
    s.method = c.method;
    s.host = host_header_;
    s.path = c.path;
    s.query = c.query;
    s.headers = c.headers;
    s.payload_sha256 = c.payload_sha256;
    SignedRequest signed_req = SignV4(s, *creds, options_.region, "s3", clock_->Now());
    for (auto& h : signed_req.headers) r.headers.push_back(std::move(h));
  }
  r.body = c.body;
  r.sink = c.sink;
  r.range_offset = c.range_offset;
  r.max_body = c.max_body;
  r.connect_timeout = options_.connect_timeout;
  r.timeout = options_.request_timeout;
  r.low_speed_time = options_.low_speed_time;
  r.ca_bundle = options_.ca_bundle;
  return r;
}

}  // namespace tierfs::blobclient
