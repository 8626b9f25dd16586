#include "tests/fakes/fake_blob_store.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace tierfs::testing {

void FakeBlobStore::PutObject(const std::string& key, std::string data, int64_t mtime_ns) {
  MutexLock l(&mu_);
  Obj o;
  o.info.size = data.size();
  o.info.etag = "etag-" + std::to_string(++etag_counter_);
  o.info.mtime_ns = mtime_ns;
  o.data = std::move(data);
  objects_[key] = std::move(o);
}

void FakeBlobStore::SetOwner(const std::string& key, Ownership owner) {
  MutexLock l(&mu_);
  if (auto it = objects_.find(key); it != objects_.end()) it->second.info.owner = owner;
}

void FakeBlobStore::RemoveObject(const std::string& key) {
  MutexLock l(&mu_);
  objects_.erase(key);
}

void FakeBlobStore::FailNext(int n, Status status) {
  MutexLock l(&mu_);
  fail_next_ = n;
  fail_status_ = std::move(status);
}

void FakeBlobStore::ResetCounters() {
  read_calls_ = head_calls_ = list_calls_ = bytes_read_ = scatter_reads_ = last_scatter_pieces_ = 0;
  requests_ = errors_ = 0;
  MutexLock l(&mu_);
  read_ranges_.clear();
}

uint64_t FakeBlobStore::bytes_read_twice(const std::string& key) const {
  MutexLock l(&mu_);
  auto it = read_ranges_.find(key);
  if (it == read_ranges_.end()) return 0;
  std::vector<std::pair<uint64_t, uint64_t>> r = it->second;
  std::sort(r.begin(), r.end());
  uint64_t twice = 0, reach = 0;  // reach: the end of the bytes read so far
  for (const auto& [b, e] : r) {
    if (b < reach) twice += std::min(e, reach) - b;
    reach = std::max(reach, e);
  }
  return twice;
}

Status FakeBlobStore::Enter() {
  ++requests_;
  if (int64_t d = delay_us_.load(); d > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(d));  // the injected delay
  }
  MutexLock l(&mu_);
  if (fail_next_ > 0) {
    --fail_next_;
    ++errors_;
    return fail_status_;
  }
  return Status::OK();
}

Result<ObjectInfo> FakeBlobStore::Head(std::string_view key) {
  ++head_calls_;
  TIERFS_RETURN_IF_ERROR(Enter());
  MutexLock l(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Status::NotFound(std::string(key));
  return it->second.info;
}

void FakeBlobStore::HoldReads() {
  MutexLock l(&gate_mu_);
  gate_held_ = true;
  gate_passed_ = gate_next_ticket_;  // the reads from now on wait, in the order they arrive
}

void FakeBlobStore::ReleaseReads() {
  MutexLock l(&gate_mu_);
  gate_held_ = false;
  gate_cv_.SignalAll();
}

void FakeBlobStore::ReleaseOneRead() {
  MutexLock l(&gate_mu_);
  ++gate_passed_;
  gate_cv_.SignalAll();
}

std::vector<std::string> FakeBlobStore::gate_arrivals() const {
  MutexLock l(&gate_mu_);
  return gate_arrivals_;
}

void FakeBlobStore::WaitForBlockedReads(int n) {
  MutexLock l(&gate_mu_);
  while (gate_blocked_ < n) gate_cv_.Wait();
}

int FakeBlobStore::blocked_reads() const {
  MutexLock l(&gate_mu_);
  return gate_blocked_;
}

Result<size_t> FakeBlobStore::Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                                   std::string_view if_match_etag) {
  ++read_calls_;
  {
    MutexLock l(&gate_mu_);
    gate_arrivals_.emplace_back(key);
    const uint64_t ticket = gate_next_ticket_++;
    if (gate_held_) {
      ++gate_blocked_;
      gate_cv_.SignalAll();  // WaitForBlockedReads
      while (gate_held_ && ticket >= gate_passed_) gate_cv_.Wait();
      --gate_blocked_;
    }
  }
  TIERFS_RETURN_IF_ERROR(Enter());
  MutexLock l(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Status::NotFound(std::string(key));
  const Obj& o = it->second;
  if (!if_match_etag.empty() && if_match_etag != o.info.etag) {
    return Status::FailedPrecondition("etag changed: " + std::string(key));
  }
  if (offset >= o.data.size()) return size_t{0};
  size_t n = std::min<uint64_t>(out.size(), o.data.size() - offset);
  std::memcpy(out.data(), o.data.data() + offset, n);
  bytes_read_ += n;
  read_ranges_[std::string(key)].emplace_back(offset, offset + n);
  return n;
}

Result<size_t> FakeBlobStore::ReadPinnedScatter(std::string_view key, uint64_t offset,
                                                const ScatterBuffer& out,
                                                const ObjectInfo& pinned) {
  if (out.pieces().size() > 1) ++scatter_reads_;
  last_scatter_pieces_ = out.pieces().size();
  return BlobStore::ReadPinnedScatter(key, offset, out, pinned);
}

Result<ListPage> FakeBlobStore::List(std::string_view prefix, std::string_view delimiter,
                                     std::string_view token, int max_keys) {
  ++list_calls_;
  TIERFS_RETURN_IF_ERROR(Enter());
  MutexLock l(&mu_);
  ListPage page;
  // The continuation token is the last item returned (a key or a common prefix); a page resumes
  // after it, skipping every key below a returned prefix.
  std::string last_emitted;
  int n = 0;
  const bool token_is_prefix = !token.empty() && !delimiter.empty() && token.ends_with(delimiter);
  // Start after the token (a seek, so a page of a wide listing does not walk the pages before it).
  auto start = objects_.lower_bound(prefix);
  if (!token.empty() && std::string_view(token) > prefix) start = objects_.upper_bound(token);
  for (auto it = start; it != objects_.end(); ++it) {
    const std::string& k = it->first;
    if (k.compare(0, prefix.size(), prefix) != 0) break;
    if (!token.empty() && (k <= token || (token_is_prefix && k.starts_with(token)))) continue;
    std::string item = k;
    bool is_prefix = false;
    if (!delimiter.empty()) {
      size_t pos = k.find(delimiter, prefix.size());
      if (pos != std::string::npos) {
        item = k.substr(0, pos + delimiter.size());
        is_prefix = true;
        if (item == last_emitted) continue;
      }
    }
    if (n == max_keys) {
      page.next_token = last_emitted;
      break;
    }
    if (is_prefix) {
      page.prefixes.push_back(item);
    } else {
      page.objects.push_back({k, it->second.info});
    }
    last_emitted = item;
    ++n;
  }
  return page;
}

Status FakeBlobStore::Put(std::string_view key, std::span<const std::byte> data) {
  TIERFS_RETURN_IF_ERROR(Enter());
  PutObject(std::string(key), std::string(reinterpret_cast<const char*>(data.data()), data.size()));
  return Status::OK();
}

Status FakeBlobStore::Delete(std::string_view key) {
  TIERFS_RETURN_IF_ERROR(Enter());
  RemoveObject(std::string(key));
  return Status::OK();
}

BlobStoreStats FakeBlobStore::Stats() const {
  BlobStoreStats s;
  s.requests = requests_;
  s.bytes_read = bytes_read_;
  s.errors = errors_;
  return s;
}

}  // namespace tierfs::testing
