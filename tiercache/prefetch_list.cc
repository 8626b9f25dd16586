// The list job's queue (internal/prefetch_list.h), and the parsing of a list request.
#include "tiercache/internal/prefetch_list.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/logging.h"
#include "base/strings.h"
#include "tiercache/internal/prefetch_store.h"
#include "tiercache/prefetch_jobs.h"

namespace tierfs {
namespace tiercache_internal {

void ListQueue::Load(const std::vector<std::pair<uint64_t, std::string>>& chunks, bool active,
                     uint64_t base, uint64_t done, std::vector<std::string>* stale) {
  const uint64_t next = active ? base + done : 0;
  uint64_t end = next;
  for (const auto& [first, value] : chunks) {
    std::vector<std::string> paths = PrefetchStore::ChunkPaths(value);
    if (!active || first < base || first + paths.size() <= next) {
      stale->push_back(PrefetchStore::ChunkKey(first));
      next_pos_ = std::max(next_pos_, first + paths.size());
      continue;
    }
    for (size_t i = 0; i < paths.size(); ++i) {
      if (first + i >= next) pending_.push_back(ListItem{std::move(paths[i]), {}, std::nullopt});
    }
    chunks_.emplace_back(first, paths.size());
    end = std::max(end, first + paths.size());
  }
  next_pos_ = std::max(next_pos_, end);
}

size_t ListQueue::QueuedBy(uint32_t uid) const {
  const auto q = queued_by_uid_.find(uid);
  return q == queued_by_uid_.end() ? 0 : q->second;
}

uint64_t ListQueue::Append(std::vector<ListItem> items, std::optional<uint32_t> owner) {
  if (owner) {
    queued_by_uid_[*owner] += items.size();
    for (ListItem& i : items) i.owner = owner;
  }
  const uint64_t first = next_pos_;
  next_pos_ += items.size();
  chunks_.emplace_back(first, items.size());
  for (ListItem& i : items) pending_.push_back(std::move(i));
  return first;
}

std::optional<ListItem> ListQueue::Take() {
  if (pending_.empty()) return std::nullopt;
  ListItem item = std::move(pending_.front());
  pending_.pop_front();
  if (item.owner) {
    auto it = queued_by_uid_.find(*item.owner);
    if (it != queued_by_uid_.end() && --it->second == 0) queued_by_uid_.erase(it);
  }
  return item;
}

std::vector<std::string> ListQueue::Drop() {
  std::vector<std::string> keys;
  for (const auto& c : chunks_) keys.push_back(PrefetchStore::ChunkKey(c.first));
  chunks_.clear();
  pending_.clear();
  queued_by_uid_.clear();
  return keys;
}

std::vector<std::string> ListQueue::Passed(uint64_t next) {
  std::vector<std::string> keys;
  while (!chunks_.empty() && chunks_.front().first + chunks_.front().second <= next) {
    keys.push_back(PrefetchStore::ChunkKey(chunks_.front().first));
    chunks_.pop_front();
  }
  return keys;
}

Result<std::vector<ListItem>> LookUpListFiles(Catalog* catalog,
                                              const std::vector<std::string>& paths,
                                              uint64_t* bytes) {
  std::vector<ListItem> items;
  items.reserve(paths.size());
  for (const std::string& p : paths) {
    if (p.empty()) return Status::InvalidArgument("'/' is the mount root, a directory");
    auto e = LookUpPath(catalog, p);
    if (!e.ok()) {
      if (e.status().IsNotFound()) {
        return Status::InvalidArgument(fmt::format("'{}': no such file", EscapeForLog(p)));
      }
      return e.status().WithContext(fmt::format("'{}'", EscapeForLog(p)));
    }
    if (e->type == EntryType::kDir) {
      return Status::InvalidArgument(fmt::format("'{}' is a directory", EscapeForLog(p)));
    }
    *bytes += e->size;
    items.push_back(ListItem{p, std::move(*e), std::nullopt});
  }
  return items;
}

Result<FileItem> ResolveListItem(Catalog* catalog, ListItem item) {
  if (!item.entry) {
    auto e = LookUpPath(catalog, item.path);
    if (e.ok() && e->type != EntryType::kDir) {
      item.entry = std::move(*e);
    } else if (e.ok() || e.status().IsNotFound()) {
      Logger(Module::kTierCache)
          .warn("prefetch list: '{}' is gone or is a directory now; skipped",
                EscapeForLog(item.path));
      item.entry = DirEntry{};
    } else {
      return e.status().WithContext(fmt::format("'{}'", EscapeForLog(item.path)));
    }
  }
  FileItem out{std::move(item.path), std::move(*item.entry)};
  if (out.entry.type == EntryType::kDir) out.entry.size = 0;
  return out;
}

}  // namespace tiercache_internal

Result<PrefetchListRequest> ParsePrefetchList(std::string_view value) {
  PrefetchListRequest r;
  while (!value.empty() && (value.back() == '\0' || value.back() == '\n')) value.remove_suffix(1);
  if (value == "cancel") {
    r.cancel = true;
    return r;
  }
  if (value.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("a NUL byte in the list");
  }
  bool first = true;
  size_t line_no = 0;
  for (size_t pos = 0; pos <= value.size();) {
    size_t nl = value.find('\n', pos);
    if (nl == std::string_view::npos) nl = value.size();
    std::string_view line = value.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (first && line.starts_with("tier=")) {
      first = false;
      r.tier = std::string(line.substr(5));
      if (r.tier != "l1" && r.tier != "l2" && r.tier != "l3") {
        return Status::InvalidArgument(
            fmt::format("line 1: unknown tier '{}' (l1, l2 or l3)", EscapeForLog(r.tier)));
      }
      continue;
    }
    first = false;
    while (line.starts_with('/')) line.remove_prefix(1);
    // Components: no empty, "." or ".." (the Catalog names files by their plain key).
    for (size_t c = 0; c <= line.size();) {
      size_t sl = line.find('/', c);
      if (sl == std::string_view::npos) sl = line.size();
      const std::string_view comp = line.substr(c, sl - c);
      if ((comp.empty() && !line.empty()) || comp == "." || comp == "..") {
        return Status::InvalidArgument(
            fmt::format("line {}: bad path '{}'", line_no, EscapeForLog(line)));
      }
      c = sl + 1;
    }
    r.paths.emplace_back(line);
  }
  return r;
}

}  // namespace tierfs
