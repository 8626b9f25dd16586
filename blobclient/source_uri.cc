// ParseSourceUri: "s3://bucket[/prefix]" and "file:///abs/path" (see blob_store.h).
#include <string>

#include "blobclient/blob_store.h"

namespace tierfs {

Result<SourceUri> ParseSourceUri(std::string_view uri) {
  auto bad = [uri](std::string_view why) {
    return Status::InvalidArgument("bad source '" + std::string(uri) + "': " + std::string(why) +
                                   " (expected s3://BUCKET[/PREFIX] or file:///ABS/PATH)");
  };
  SourceUri out;
  if (uri.starts_with("s3://")) {
    out.scheme = SourceUri::Scheme::kS3;
    std::string_view rest = uri.substr(5);
    size_t slash = rest.find('/');
    out.bucket = std::string(rest.substr(0, slash));
    if (out.bucket.empty()) return bad("no bucket");
    if (slash != std::string_view::npos) {
      std::string_view prefix = rest.substr(slash + 1);
      while (prefix.starts_with('/')) prefix.remove_prefix(1);
      out.prefix = std::string(prefix);
      // "a//b/" keeps its inner slashes (S3 keys may contain them); only normalise the ends.
      if (!out.prefix.empty() && out.prefix.back() != '/') out.prefix.push_back('/');
    }
    return out;
  }
  if (uri.starts_with("file://")) {
    out.scheme = SourceUri::Scheme::kFile;
    std::string_view path = uri.substr(7);
    if (!path.starts_with('/')) return bad("file:// needs an absolute path (file:///data)");
    std::string p(path);
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    out.path = std::move(p);
    return out;
  }
  return bad("unknown scheme");
}

}  // namespace tierfs
