#include "blobclient/s3_answers.h"

#include <ctime>
#include <pugixml.hpp>

#include "base/strings.h"
#include "blobclient/list_xml.h"
#include "blobclient/sigv4.h"

namespace tierfs::blobclient {
namespace {

// Seconds since the epoch → ns. False outside what int64 ns holds (years before 1678 or after
// 2261: a server's date is not trusted to be sane); the callers then answer 0, as for an
// unparsable date.
bool SecondsToNanos(time_t s, int64_t* ns) {
  constexpr int64_t kMaxSeconds = INT64_MAX / 1'000'000'000LL - 1;
  if (s > kMaxSeconds || s < -kMaxSeconds) return false;
  *ns = static_cast<int64_t>(s) * 1'000'000'000LL;
  return true;
}

}  // namespace

std::string StripQuotes(std::string_view s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return std::string(s);
}

int64_t ParseHttpDate(std::string_view s) {
  std::tm tm{};
  std::string str(s);
  int64_t ns = 0;
  if (strptime(str.c_str(), "%a, %d %b %Y %H:%M:%S", &tm) == nullptr) return 0;
  return SecondsToNanos(timegm(&tm), &ns) ? ns : 0;
}

int64_t ParseIso8601(std::string_view s) {
  std::tm tm{};
  std::string str(s);
  const char* rest = strptime(str.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return 0;
  int64_t ns = 0;
  if (!SecondsToNanos(timegm(&tm), &ns)) return 0;
  if (*rest == '.') {
    int64_t frac = 0, scale = 1'000'000'000LL;
    for (++rest; *rest >= '0' && *rest <= '9'; ++rest) {
      scale /= 10;
      frac += (*rest - '0') * scale;
    }
    ns += frac;
  }
  return ns;
}

std::string_view NormalizeEtag(std::string_view e) {
  if (e.starts_with("W/") || e.starts_with("w/")) e.remove_prefix(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}
bool WeakEtag(std::string_view e) { return e.starts_with("W/") || e.starts_with("w/"); }

bool ParseContentRange(std::string_view v, ContentRange* out) {
  if (!v.starts_with("bytes ")) return false;
  v.remove_prefix(6);
  const size_t slash = v.find('/');
  if (slash == std::string_view::npos) return false;
  std::string_view range = v.substr(0, slash), total = v.substr(slash + 1);
  if (total != "*") {
    uint64_t t = 0;
    if (!ParseDecimal(total, &t)) return false;
    out->total = t;
  }
  if (range == "*") {
    out->unsatisfied = true;
    return out->total.has_value();
  }
  const size_t dash = range.find('-');
  if (dash == std::string_view::npos || !ParseDecimal(range.substr(0, dash), &out->first) ||
      !ParseDecimal(range.substr(dash + 1), &out->last) || out->last < out->first) {
    return false;
  }
  return !out->total || out->last < *out->total;
}

namespace {

Status Changed(const std::string& context, const std::string& why) {
  return Status::FailedPrecondition(context + ": the object changed (" + why + ")");
}

Status Bad(const std::string& context, const std::string& why) {
  return Status::Corruption(context + ": bad answer (" + why + ")");
}

// A 416: nothing returned, the range starts at or past the end.
Status Check416(const HttpResponse& resp, uint64_t offset, const S3ReadExpect& expect,
                const std::string& context) {
  ContentRange cr;
  std::optional<uint64_t> total;
  const std::string* cr_header = resp.Header("content-range");
  if (cr_header != nullptr && ParseContentRange(*cr_header, &cr)) total = cr.total;
  if (expect.size) {
    // A pinned read never asks past the pinned end: the object shrank.
    return Changed(context, "416, object now " +
                                (total ? std::to_string(*total) : std::string("?")) +
                                " bytes, pinned " + std::to_string(*expect.size));
  }
  if (total && offset < *total) return Bad(context, "416 for a range inside the object");
  return Status::OK();
}

// The version of the answer: its ETag against the expected one, or without one to go by the
// pinned Last-Modified. *etag: the answer's ETag, normalized ("" if none).
Status CheckVersion(const HttpResponse& resp, const S3ReadExpect& expect,
                    const std::string& context, std::string* etag) {
  const std::string* etag_header = resp.Header("etag");
  *etag = etag_header ? std::string(NormalizeEtag(*etag_header)) : "";
  if (!expect.etag.empty()) {
    if (etag_header == nullptr) {
      return Bad(context, "no ETag, cannot confirm version " + expect.etag);
    }
    if (*etag != NormalizeEtag(expect.etag)) {
      return Changed(context, "ETag " + *etag_header + ", expected " + expect.etag);
    }
  } else if (expect.size && expect.mtime_ns != 0) {
    // Whole seconds in HTTP dates.
    if (const std::string* lm = resp.Header("last-modified")) {
      const int64_t t = ParseHttpDate(*lm);
      if (t != 0 && t / 1'000'000'000 != expect.mtime_ns / 1'000'000'000) {
        return Changed(context, "Last-Modified " + *lm);
      }
    }
  }
  return Status::OK();
}

// What a 200 or 206 says of the object's total size (*total, if it says) and of the bytes of the
// range asked from `offset` it carries (*announced).
Status AnswerExtent(const HttpResponse& resp, uint64_t offset, const std::string& context,
                    std::optional<uint64_t>* total, uint64_t* announced) {
  if (resp.status == 206) {
    const std::string* cr_header = resp.Header("content-range");
    ContentRange cr;
    if (cr_header == nullptr) return Bad(context, "206 without Content-Range");
    if (!ParseContentRange(*cr_header, &cr) || cr.unsatisfied) {
      return Bad(context, "unparsable Content-Range " + *cr_header);
    }
    if (cr.first != offset) {
      return Bad(context,
                 "Content-Range " + *cr_header + " for a read at " + std::to_string(offset));
    }
    *total = cr.total;
    *announced = cr.last - cr.first + 1;
    return Status::OK();
  }
  // 200: the server ignored Range and sends the whole object; the engine skipped the bytes
  // before offset (HttpRequest::range_offset). Its Content-Length is the total.
  uint64_t len = 0;
  if (const std::string* cl = resp.Header("content-length"); cl && ParseDecimal(*cl, &len)) {
    *total = len;
  }
  *announced = *total ? (offset < **total ? **total - offset : 0) : resp.sink_bytes;
  return Status::OK();
}

}  // namespace

Status CheckGetAnswer(const HttpResponse& resp, uint64_t offset, uint64_t want,
                      const S3ReadExpect& expect, S3ReadSeen* seen, const std::string& context,
                      size_t* got) {
  *got = 0;
  const long code = resp.status;
  if (code == 416) return Check416(resp, offset, expect, context);
  if (code != 200 && code != 206) return Bad(context, "HTTP " + std::to_string(code) + " to a GET");
  std::string etag;
  TIERFS_RETURN_IF_ERROR(CheckVersion(resp, expect, context, &etag));
  std::optional<uint64_t> total;
  uint64_t announced = 0;
  TIERFS_RETURN_IF_ERROR(AnswerExtent(resp, offset, context, &total, &announced));
  if (expect.size) {
    if (!total) return Bad(context, "the answer does not state the object's size");
    if (*total != *expect.size) {
      return Changed(context, "object now " + std::to_string(*total) + " bytes, pinned " +
                                  std::to_string(*expect.size));
    }
  }
  // Every answer of one read must be of one version.
  if (seen->any) {
    if (etag != seen->etag) return Changed(context, "ETag changed between parts of one read");
    if (total && seen->total && *total != *seen->total) {
      return Changed(context, "size changed between parts of one read");
    }
  }

  // The length: all that was asked for, short only at the end of the object.
  const uint64_t expected = total ? std::min<uint64_t>(want, *total > offset ? *total - offset : 0)
                                  : std::min<uint64_t>(want, announced);
  if (code == 206 && announced != expected) {
    return Bad(context, "Content-Range " + *resp.Header("content-range") + " for " +
                            std::to_string(want) + " bytes at " + std::to_string(offset));
  }
  if (resp.sink_bytes > want)
    return Bad(context, "more bytes than the buffer holds");  // engine bound
  if (resp.sink_bytes != expected) {
    return Bad(context, "body of " + std::to_string(resp.sink_bytes) + " bytes, expected " +
                            std::to_string(expected))
        .WithRetryable(resp.sink_bytes < expected);
  }
  if (!seen->any) {
    seen->any = true;
    seen->etag = etag;
    seen->total = total;
  }
  *got = static_cast<size_t>(expected);
  return Status::OK();
}

Result<ListPage> ParseListObjectsV2(std::string_view xml, std::string_view strip,
                                    std::string_view context) {
  const std::string ctx(context);
  pugi::xml_document doc;
  pugi::xml_parse_result pr = doc.load_buffer(xml.data(), xml.size());
  if (!pr) {
    return Status::Corruption(ctx + ": unparsable ListObjectsV2 XML: " + pr.description());
  }
  pugi::xml_node root = doc.child("ListBucketResult");
  if (!root) return Status::Corruption(ctx + ": no ListBucketResult in the answer");
  const bool url_encoded = std::string_view(root.child_value("EncodingType")) == "url";
  auto decode = [url_encoded](const char* s) {
    return url_encoded ? UriDecode(s, /*plus_is_space=*/true) : std::string(s);
  };
  ListPage page;
  for (pugi::xml_node n : root.children("Contents")) {
    std::string key = decode(n.child_value("Key"));
    if (!key.starts_with(strip) || key.size() == strip.size()) continue;
    ListEntry e;
    e.key = key.substr(strip.size());
    if (!ParseDecimal(n.child_value("Size"), &e.info.size)) {
      return Status::Corruption(ctx + ": bad <Size> for " + key);
    }
    e.info.etag = StripQuotes(n.child_value("ETag"));
    e.info.mtime_ns = ParseIso8601(n.child_value("LastModified"));
    page.objects.push_back(std::move(e));
  }
  for (pugi::xml_node n : root.children("CommonPrefixes")) {
    std::string p = decode(n.child_value("Prefix"));
    if (!p.starts_with(strip) || p.size() == strip.size()) continue;
    page.prefixes.push_back(p.substr(strip.size()));
  }
  if (std::string_view(root.child_value("IsTruncated")) == "true") {
    page.next_token = root.child_value("NextContinuationToken");
    if (page.next_token.empty()) {
      return Status::Corruption(ctx + ": truncated listing without a token");
    }
  }
  return page;
}

}  // namespace tierfs::blobclient
