// The S3 store's answers (internal to blobclient/): the wire formats of S3 response headers and
// bodies, and the check of one GET's answer against what was asked (CheckGetAnswer).
//
// Every GET answer is checked, because origins and proxies may ignore If-Match (s3rver does) or
// Range: the ETag against the pinned one, Content-Range start, end and total (or a 200's
// Content-Length) against the request and the pinned size, the body length against what was
// announced, and all parts of one read against each other. Another version is
// FailedPrecondition (the fuse layer's ESTALE), a malformed answer Corruption (EIO).
//
// Thread-safety: pure functions and value types; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "blobclient/http_transport.h"

namespace tierfs::blobclient {

// `s` without one pair of surrounding double quotes.
std::string StripQuotes(std::string_view s);

// "Wed, 12 Oct 2009 17:50:00 GMT" → ns since the epoch; 0 if unparsable or out of range.
int64_t ParseHttpDate(std::string_view s);

// "2009-10-12T17:50:30.000Z" → ns since the epoch; 0 if unparsable or out of range.
int64_t ParseIso8601(std::string_view s);

// The comparable form of an ETag: a weak validator's "W/" and the quotes stripped, so that
// W/"abc", "abc" and abc compare equal.
std::string_view NormalizeEtag(std::string_view e);
bool WeakEtag(std::string_view e);

// "bytes FIRST-LAST/TOTAL" (TOTAL may be "*") or "bytes */TOTAL" (a 416's).
struct ContentRange {
  bool unsatisfied = false;  // "*/TOTAL"
  uint64_t first = 0, last = 0;
  std::optional<uint64_t> total;
};
// False if malformed.
bool ParseContentRange(std::string_view v, ContentRange* out);

// What a GET's answer must agree with.
struct S3ReadExpect {
  std::string etag;              // as pinned or given for If-Match; empty: none
  std::optional<uint64_t> size;  // the pinned object size; nullopt: not pinned
  int64_t mtime_ns = 0;          // the pinned mtime; checked only when etag is empty
};

// What the first good answer of one read said about the object: every later part must agree (a
// read never assembles parts of two versions, pinned or not).
struct S3ReadSeen {
  bool any = false;
  std::string etag;  // normalized; empty if the answers carry none
  std::optional<uint64_t> total;
};

// Checks one 2xx/416 answer to the GET of [offset, offset + want) against what was asked: the
// version (ETag, or without one Last-Modified; the total size), the range (Content-Range start
// and end, or a 200 that ignored Range) and the body length. On success *got is the number of
// bytes that hold the requested range, and *seen records the first answer. Version changes are
// FailedPrecondition, malformed answers Corruption; only a body shorter than announced is
// retryable (a truncating proxy).
Status CheckGetAnswer(const HttpResponse& resp, uint64_t offset, uint64_t want,
                      const S3ReadExpect& expect, S3ReadSeen* seen, const std::string& context,
                      size_t* got);

}  // namespace tierfs::blobclient
