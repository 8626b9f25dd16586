#include "blobclient/sigv4.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <map>
#include <span>

#include "blobclient/hmac.h"

namespace tierfs::blobclient {
namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr char kHexUpper[] = "0123456789ABCDEF";

std::string ToHex(const unsigned char* p, size_t n) {
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kHex[p[i] >> 4]);
    out.push_back(kHex[p[i] & 0xf]);
  }
  return out;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  const HmacSha256Digest mac =
      tierfs::HmacSha256(std::as_bytes(std::span(key)), {std::as_bytes(std::span(data))});
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}

// The signing key of (secret, date, region, service): four HMACs, the same for every request of
// a day, so each thread keeps the last one it derived (a daemon signs with one secret, one region
// and one service per store). A new secret or a new day derives it again.
const std::string& SigningKey(const std::string& secret, std::string_view date,
                              std::string_view region, std::string_view service) {
  struct Memo {
    std::string secret, date, region, service, key;
  };
  thread_local Memo m;
  if (m.key.empty() || m.secret != secret || m.date != date || m.region != region ||
      m.service != service) {
    std::string k = HmacSha256("AWS4" + secret, date);
    k = HmacSha256(k, region);
    k = HmacSha256(k, service);
    m.key = HmacSha256(k, "aws4_request");
    m.secret = secret;
    m.date = date;
    m.region = region;
    m.service = service;
  }
  return m.key;
}

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Trims leading/trailing whitespace and collapses inner runs of spaces to one (SigV4 rule).
std::string TrimAndCollapse(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  bool in_space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      in_space = true;
      continue;
    }
    if (in_space && !out.empty()) out.push_back(' ');
    in_space = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string UriEncode(std::string_view s, bool encode_slash) {
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    if (IsUnreserved(c) || (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHexUpper[c >> 4]);
      out.push_back(kHexUpper[c & 0xf]);
    }
  }
  return out;
}

std::string UriDecode(std::string_view s, bool plus_is_space) {
  auto hexval = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%' && i + 2 < s.size()) {
      int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    if (c == '+' && plus_is_space) {
      out.push_back(' ');
      continue;
    }
    out.push_back(c);
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  // Fetched once: EVP_sha256() makes EVP_Digest look SHA-256 up in the provider tables on every
  // call, a third of the cost of hashing a canonical request.
  static EVP_MD* const kSha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, kSha256 ? kSha256 : EVP_sha256(), nullptr);
  return ToHex(md, len);
}

std::string CanonicalQueryString(const HeaderList& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, true), UriEncode(v, true));
  std::sort(enc.begin(), enc.end());  // byte order of the encoded names, then values
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out.push_back('&');
    out += k;
    out.push_back('=');
    out += v;
  }
  return out;
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

SignedRequest SignV4(const SigningRequest& request, const Credentials& credentials,
                     std::string_view region, std::string_view service,
                     std::chrono::system_clock::time_point now) {
  const std::string amz_date = AmzDate(now);
  const std::string date = amz_date.substr(0, 8);
  const std::string payload_hash =
      request.payload_sha256.empty() ? Sha256Hex("") : request.payload_sha256;

  SignedRequest out;
  out.headers.emplace_back("x-amz-date", amz_date);
  if (request.add_content_sha256_header) {
    out.headers.emplace_back("x-amz-content-sha256", payload_hash);
  }
  if (!credentials.session_token.empty()) {
    out.headers.emplace_back("x-amz-security-token", credentials.session_token);
  }

  // Canonical headers: lowercase names, trimmed values, sorted by name; repeated names joined by
  // ',' in the order given.
  std::map<std::string, std::string> canon;
  auto add = [&canon](std::string_view name, std::string_view value) {
    std::string n = ToLower(name);
    std::string v = TrimAndCollapse(value);
    auto [it, inserted] = canon.emplace(n, v);
    if (!inserted) it->second += "," + v;
  };
  add("host", request.host);
  for (const auto& [k, v] : request.headers) add(k, v);
  for (const auto& [k, v] : out.headers) add(k, v);

  std::string canonical_headers, signed_headers;
  for (const auto& [k, v] : canon) {
    canonical_headers += k + ":" + v + "\n";
    if (!signed_headers.empty()) signed_headers.push_back(';');
    signed_headers += k;
  }

  std::string path = request.path.empty() ? "/" : request.path;
  out.canonical_request = request.method + "\n" + UriEncode(path, false) + "\n" +
                          CanonicalQueryString(request.query) + "\n" + canonical_headers + "\n" +
                          signed_headers + "\n" + payload_hash;

  const std::string scope =
      date + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  out.string_to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Sha256Hex(out.canonical_request);

  std::string sig = HmacSha256(SigningKey(credentials.secret_access_key, date, region, service),
                               out.string_to_sign);
  out.signature = ToHex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());

  out.headers.emplace_back(
      "Authorization", "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                           ", SignedHeaders=" + signed_headers + ", Signature=" + out.signature);
  return out;
}

}  // namespace tierfs::blobclient
