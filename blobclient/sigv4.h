// AWS Signature Version 4 for the S3 API (internal to blobclient/).
//
// SignV4() is a pure function: it takes a description of the request, the credentials, the
// region/service and the signing time, and returns the headers to add to the request
// (Authorization, x-amz-date, x-amz-content-sha256, x-amz-security-token). It does no I/O and
// reads no clock or environment, so it is tested against AWS's published vectors (conventions
// C19). The canonical request and string to sign are returned too, for tests and debugging.
//
// URI encoding follows the S3 rules: every byte except the unreserved A-Za-z0-9-._~ is
// percent-encoded (uppercase hex), '/' is kept in paths, and the path is encoded exactly once
// (S3 does not double-encode). The same UriEncode() builds the URL that goes on the wire, so the
// signed path and the sent path cannot differ.
//
// Thread-safety: pure functions; safe from any thread. (SignV4 keeps the last signing key each
// thread derived, a memo of four HMACs that changes no result.)
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "blobclient/blob_store.h"

namespace tierfs::blobclient {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct SigningRequest {
  std::string method = "GET";
  std::string
      host;  // the Host header exactly as sent ("bucket.s3.amazonaws.com", "127.0.0.1:9000")
  // The path, NOT encoded ("/bucket/a b+c.txt"); the signer encodes it once.
  std::string path = "/";
  // Query parameters, NOT encoded, in any order; the signer encodes and sorts them.
  HeaderList query;
  // Further headers to sign (Range, If-Match, Content-Type...). Host and x-amz-* added here are
  // not needed: the signer adds host, x-amz-date and (if set) x-amz-content-sha256 itself.
  HeaderList headers;
  // Hex SHA-256 of the payload; empty means the empty payload. "UNSIGNED-PAYLOAD" is allowed.
  std::string payload_sha256;
  // S3 requires (and signs) x-amz-content-sha256; the generic AWS test suite does not use it.
  bool add_content_sha256_header = true;
};

struct SignedRequest {
  HeaderList headers;             // to add to the request: Authorization, x-amz-date, ...
  std::string canonical_request;  // for tests/debugging; never logged (no secrets in it, though)
  std::string string_to_sign;
  std::string signature;  // hex
};

// Signs `request`. `now` is the signing time (from Clock::Now() in production, fixed in tests).
// REQUIRES: !credentials.anonymous and a non-empty access key / secret.
SignedRequest SignV4(const SigningRequest& request, const Credentials& credentials,
                     std::string_view region, std::string_view service,
                     std::chrono::system_clock::time_point now);

// Percent-encodes `s` per SigV4: unreserved bytes stay, everything else becomes %XX (uppercase).
// With encode_slash=false, '/' stays too (object key paths).
std::string UriEncode(std::string_view s, bool encode_slash);

// Decodes %XX escapes (and '+' as a space when plus_is_space, as S3's encoding-type=url
// listings do). Malformed escapes are kept literally.
std::string UriDecode(std::string_view s, bool plus_is_space);

// Lowercase hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

// The canonical query string of `query` (encoded, sorted by name then value, '&'-joined). The
// same string is used on the wire.
std::string CanonicalQueryString(const HeaderList& query);

// "20150830T123600Z".
std::string AmzDate(std::chrono::system_clock::time_point t);

}  // namespace tierfs::blobclient
