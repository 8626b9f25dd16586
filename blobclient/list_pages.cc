// ListPageTracker and ForEachListPage (blob_store.h): continuation-token loops that always end.
#include <functional>
#include <string>
#include <unordered_set>
#include <utility>

#include "blobclient/blob_store.h"

namespace tierfs {
namespace {

// Two independent 64-bit hashes of a token: a false "repeated token" needs a 128-bit collision.
struct Fingerprint {
  uint64_t a = 0;
  uint64_t b = 0;
  bool operator==(const Fingerprint&) const = default;
};

Fingerprint FingerprintOf(std::string_view token) {
  Fingerprint f;
  f.a = std::hash<std::string_view>{}(token);
  uint64_t h = 14695981039346656037ULL;  // FNV-1a 64
  for (unsigned char c : token) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  f.b = h ^ token.size();
  return f;
}

struct FingerprintHash {
  size_t operator()(const Fingerprint& f) const { return static_cast<size_t>(f.a ^ (f.b << 1)); }
};

}  // namespace

struct ListPageTracker::Seen {
  std::unordered_set<Fingerprint, FingerprintHash> tokens;
};

ListPageTracker::ListPageTracker(std::string what, uint64_t max_pages)
    : what_(std::move(what)), max_pages_(max_pages), seen_(std::make_unique<Seen>()) {}

ListPageTracker::~ListPageTracker() = default;

Status ListPageTracker::Next(std::string_view next_token) {
  ++pages_;
  if (next_token.empty()) return Status::OK();
  if (pages_ >= max_pages_) {
    return Status::Corruption(what_ + ": more than " + std::to_string(max_pages_) +
                              " pages; giving up (the server keeps sending continuation tokens)");
  }
  if (!seen_->tokens.insert(FingerprintOf(next_token)).second) {
    return Status::Corruption(what_ + ": the server repeated a continuation token after " +
                              std::to_string(pages_) + " page(s) (a listing loop)");
  }
  return Status::OK();
}

Status ForEachListPage(BlobStore* store, std::string_view prefix, std::string_view delimiter,
                       int max_keys, const std::function<Status(ListPage&)>& fn,
                       uint64_t max_pages) {
  ListPageTracker tracker("listing '" + std::string(prefix) + "' of " + store->Describe(),
                          max_pages);
  std::string token;
  while (true) {
    TIERFS_ASSIGN_OR_RETURN(ListPage page, store->List(prefix, delimiter, token, max_keys));
    std::string next = std::move(page.next_token);
    TIERFS_RETURN_IF_ERROR(fn(page));
    if (next.empty()) return Status::OK();
    TIERFS_RETURN_IF_ERROR(tracker.Next(next));
    token = std::move(next);
  }
}

}  // namespace tierfs
