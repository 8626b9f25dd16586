// PrefetchStore (internal/prefetch_store.h), and the layout of a job's record.
#include "tiercache/internal/prefetch_store.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/logging.h"
#include "base/strings.h"

namespace tierfs {
namespace {

constexpr std::string_view kJobPrefix = "prefetch/job/";
constexpr std::string_view kListPrefix = "prefetch/list/";

}  // namespace

namespace tiercache_internal {

Result<PrefetchStore::Stored> PrefetchStore::Scan() {
  Stored s;
  TIERFS_RETURN_IF_ERROR(meta_->ScanValues(kJobPrefix, [&](std::string_view k, std::string_view v) {
    s.jobs.emplace_back(std::string(k.substr(kJobPrefix.size())), std::string(v));
    return true;
  }));
  TIERFS_RETURN_IF_ERROR(
      meta_->ScanValues(kListPrefix, [&](std::string_view k, std::string_view v) {
        uint64_t first = 0;
        if (ParseDecimal(k.substr(kListPrefix.size()), &first)) {
          s.chunks.emplace_back(first, std::string(v));
        } else {
          s.stale_chunks.emplace_back(k);
        }
        return true;
      }));
  return s;
}

void PrefetchStore::Put(const PrefetchJobStatus& st) {
  Status s = meta_->PutValue(PrefetchJobKey(st.path), EncodePrefetchJob(st));
  if (!s.ok()) {
    Logger(Module::kTierCache).warn("prefetch job '{}': cannot persist: {}", st.path, s.ToString());
  }
}

void PrefetchStore::Forget(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    Status s = meta_->DeleteValue(PrefetchJobKey(p));
    if (!s.ok()) {
      Logger(Module::kTierCache)
          .warn("prefetch job '{}': cannot drop the finished record: {}", p, s.ToString());
    }
  }
}

void PrefetchStore::PutChunk(uint64_t first, const std::vector<std::string>& paths) {
  std::string value;
  for (const std::string& p : paths) {
    if (!value.empty()) value += '\n';
    value += p;
  }
  Status s = meta_->PutValue(ChunkKey(first), value);
  if (!s.ok()) {
    Logger(Module::kTierCache)
        .warn("prefetch list: cannot persist {} queued files: {}", paths.size(), s.ToString());
  }
}

void PrefetchStore::DeleteChunks(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    Status s = meta_->DeleteValue(k);
    if (!s.ok()) {
      Logger(Module::kTierCache)
          .warn("prefetch list: cannot drop the stored chunk '{}': {}", k, s.ToString());
    }
  }
}

std::string PrefetchStore::ChunkKey(uint64_t first) {
  return fmt::format("{}{:020}", kListPrefix, first);
}

std::vector<std::string> PrefetchStore::ChunkPaths(std::string_view value) {
  std::vector<std::string> paths;
  for (size_t pos = 0; pos <= value.size();) {
    size_t nl = value.find('\n', pos);
    if (nl == std::string_view::npos) nl = value.size();
    paths.emplace_back(value.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return paths;
}

}  // namespace tiercache_internal

std::string_view PrefetchStateName(PrefetchState s) {
  switch (s) {
    case PrefetchState::kQueued:
      return "queued";
    case PrefetchState::kRunning:
      return "running";
    case PrefetchState::kDone:
      return "done";
    case PrefetchState::kFailed:
      return "failed";
    case PrefetchState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::string FormatPrefetchStatus(const PrefetchJobStatus& s) {
  std::string out =
      fmt::format("state={} tier={} files={}/{} bytes={}/{}", PrefetchStateName(s.state), s.tier,
                  s.files_done, s.files_total, s.bytes_done, s.bytes_total);
  if (s.state == PrefetchState::kFailed && !s.error.empty()) {
    std::string e = s.error.substr(0, 200);
    std::replace(e.begin(), e.end(), ' ', '_');
    std::replace(e.begin(), e.end(), '\n', '_');
    out += " error=" + e;
  }
  return out;
}

std::string PrefetchJobKey(std::string_view path) {
  return std::string(kJobPrefix) + std::string(path);
}

// Layout 2: "2 <state 0-4> <tier> <files_done> <files_total> <bytes_done> <bytes_total>
// <finished_at_ns> <cursor_files> <cursor_bytes> <cursor length> <cursor> <error>" (the cursor,
// a path that may hold spaces, is length-prefixed; the error is the rest of the value).
std::string EncodePrefetchJob(const PrefetchJobStatus& s) {
  return fmt::format("2 {} {} {} {} {} {} {} {} {} {} {} {}", static_cast<int>(s.state), s.tier,
                     s.files_done, s.files_total, s.bytes_done, s.bytes_total, s.finished_at_ns,
                     s.cursor_files, s.cursor_bytes, s.cursor.size(), s.cursor, s.error);
}

Result<PrefetchJobStatus> DecodePrefetchJob(std::string_view path, std::string_view value) {
  // Layout 1 (before name cursors) has 8 space-separated fields before the error; layout 2 has
  // 11 before the cursor.
  const bool v1 = value.starts_with("1 ");
  if (!v1 && !value.starts_with("2 ")) {
    return Status::Corruption("prefetch job: unknown layout version");
  }
  const size_t nfields = v1 ? 8 : 11;
  std::vector<std::string_view> f;
  size_t pos = 0;
  while (f.size() < nfields) {
    size_t sp = value.find(' ', pos);
    if (sp == std::string_view::npos) return Status::Corruption("prefetch job: too few fields");
    f.push_back(value.substr(pos, sp - pos));
    pos = sp + 1;
  }
  PrefetchJobStatus s;
  s.path = std::string(path);
  uint64_t state = 0;
  if (!ParseDecimal(f[1], &state) || state > 4)
    return Status::Corruption("prefetch job: bad state");
  s.state = static_cast<PrefetchState>(state);
  s.tier = std::string(f[2]);
  if (!ParseDecimal(f[3], &s.files_done) || !ParseDecimal(f[4], &s.files_total) ||
      !ParseDecimal(f[5], &s.bytes_done) || !ParseDecimal(f[6], &s.bytes_total)) {
    return Status::Corruption("prefetch job: bad counter");
  }
  if (v1) {
    // A position cursor cannot be turned into a name: an unfinished layout-1 job starts its walk
    // again (blocks already in the target are skipped without I/O).
    uint64_t position = 0;
    if (!ParseDecimal(f[7], &position)) return Status::Corruption("prefetch job: bad counter");
    s.error = std::string(value.substr(pos));
    return s;
  }
  uint64_t finished_at = 0, cursor_len = 0;
  if (!ParseDecimal(f[7], &finished_at) || !ParseDecimal(f[8], &s.cursor_files) ||
      !ParseDecimal(f[9], &s.cursor_bytes) || !ParseDecimal(f[10], &cursor_len) ||
      finished_at > static_cast<uint64_t>(INT64_MAX)) {
    return Status::Corruption("prefetch job: bad counter");
  }
  s.finished_at_ns = static_cast<int64_t>(finished_at);
  if (cursor_len > value.size() - pos || value.size() - pos - cursor_len < 1 ||
      value[pos + cursor_len] != ' ') {
    return Status::Corruption("prefetch job: bad cursor");
  }
  s.cursor = std::string(value.substr(pos, cursor_len));
  s.error = std::string(value.substr(pos + cursor_len + 1));
  return s;
}

}  // namespace tierfs
