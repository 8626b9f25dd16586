#include "fuse/xattr_handlers.h"

#include <fmt/format.h>

#include "base/logging.h"
#include "fuse/filesystem.h"

namespace tierfs {
namespace {

std::string CatalogStatsText(const Catalog& catalog) {
  const CatalogStats& s = catalog.Stats();
  return fmt::format(
      "catalog.list_requests={} catalog.head_requests={} catalog.listing_hits={} "
      "catalog.listing_misses={}",
      s.list_requests.load(), s.head_requests.load(), s.listing_hits.load(),
      s.listing_misses.load());
}

// user.tierfs.stats on the root: every counter of the daemon, space-separated key=value.
class StatsHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.stats"; }
  bool AppliesTo(const XattrTarget& t) const override { return t.is_root; }
  Result<std::string> Get(const XattrTarget& t) const override {
    std::string out = t.fs->cache()->StatsText();
    if (!out.empty()) out += ' ';
    out += CatalogStatsText(*t.fs->catalog());
    out += ' ';
    out += t.fs->StatsText();
    return out;
  }
};

// user.tierfs.etag on files: the version the inode last saw.
class EtagHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.etag"; }
  bool AppliesTo(const XattrTarget& t) const override { return !t.is_dir; }
  Result<std::string> Get(const XattrTarget& t) const override { return t.object.info.etag; }
};

// user.tierfs.source on files: which tier served the last read.
class SourceHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.source"; }
  bool AppliesTo(const XattrTarget& t) const override { return !t.is_dir; }
  Result<std::string> Get(const XattrTarget& t) const override {
    return t.source.empty() ? std::string("none") : std::string(t.source);
  }
};

// user.tierfs.residency on files: "l1=3/25 l2=25/25" (blocks held / blocks of the file).
class ResidencyHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.residency"; }
  bool AppliesTo(const XattrTarget& t) const override { return !t.is_dir; }
  Result<std::string> Get(const XattrTarget& t) const override {
    TieredCache* cache = t.fs->cache();
    const uint64_t bs = cache->block_size();
    const uint64_t total = bs == 0 ? 0 : (t.object.info.size + bs - 1) / bs;
    auto held = cache->Residency(t.object);
    std::string out;
    for (const auto& tier : cache->tiers()) {
      uint64_t n = 0;
      for (const auto& [name, count] : held) {
        if (name == tier->name()) n = count;
      }
      if (!out.empty()) out += ' ';
      out += fmt::format("{}={}/{}", tier->name(), n, total);
    }
    return out;
  }
};

}  // namespace

Status XattrHandler::Set(const XattrTarget& target, std::string_view value) const {
  Logger(Module::kFuse)
      .warn("setxattr {} on '{}' refused: the attribute is read-only", name(), target.path);
  return Status::InvalidArgument(std::string(name()) + " is read-only");
}

void XattrRegistry::Register(std::unique_ptr<XattrHandler> handler) {
  by_name_[std::string(handler->name())] = handler.get();
  handlers_.push_back(std::move(handler));
}

const XattrHandler* XattrRegistry::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> XattrRegistry::List(const XattrTarget& target) const {
  std::vector<std::string> names;
  for (const auto& h : handlers_) {
    if (h->AppliesTo(target)) names.emplace_back(h->name());
  }
  return names;
}

// The one list of every user.tierfs.* name (C16).
std::unique_ptr<XattrRegistry> NewDefaultXattrRegistry() {
  auto r = std::make_unique<XattrRegistry>();
  r->Register(std::make_unique<StatsHandler>());
  r->Register(std::make_unique<EtagHandler>());
  r->Register(std::make_unique<SourceHandler>());
  r->Register(std::make_unique<ResidencyHandler>());
  return r;
}

}  // namespace tierfs
