#include "fuse/xattr_handlers.h"

#include <fmt/format.h>
#include <unistd.h>

#include <functional>

#include "base/cancel.h"
#include "base/logging.h"
#include "base/strings.h"
#include "base/units.h"
#include "fuse/filesystem.h"
#include "tiercache/policy.h"
#include "tiercache/prefetch_jobs.h"

namespace tierfs {
namespace {

std::string CatalogStatsText(const Catalog& catalog) {
  const CatalogStats& s = catalog.Stats();
  return fmt::format(
      "catalog.list_requests={} catalog.head_requests={} catalog.listing_hits={} "
      "catalog.listing_misses={} catalog.invalidations={} catalog.stale_serves={} "
      "catalog.background_refreshes={} catalog.snapshots_built={} catalog.snapshots_shared={} "
      "catalog.overflow_listings={}",
      s.list_requests.load(), s.head_requests.load(), s.listing_hits.load(),
      s.listing_misses.load(), s.invalidations.load(), s.stale_serves.load(),
      s.background_refreshes.load(), s.snapshots_built.load(), s.snapshots_shared.load(),
      s.overflow_listings.load());
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
    std::string out;
    for (const auto& [tier, held] : cache->Residency(t.object)) {  // every tier, fast→slow
      if (!out.empty()) out += ' ';
      out += fmt::format("{}={}/{}", tier, held, total);
    }
    return out;
  }
};

// user.tierfs.prefetch on files and directories: start/cancel a deep prefetch job, read its state.
class PrefetchHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.prefetch"; }
  bool AppliesTo(const XattrTarget&) const override { return true; }
  bool GroupSettable() const override { return true; }
  Result<std::string> Get(const XattrTarget& t) const override {
    PrefetchJobs* jobs = t.fs->prefetch_jobs();
    if (jobs != nullptr) {
      auto st = jobs->Get(t.path);
      if (st.ok()) return FormatPrefetchStatus(*st);
      if (!st.status().IsNotFound()) return st.status();
    }
    return std::string("state=none tier=- files=0/0 bytes=0/0");
  }
  Status Set(const XattrTarget& t, std::string_view raw) const override {
    const std::string_view v = TrimXattrValue(raw);
    PrefetchJobs* jobs = t.fs->prefetch_jobs();
    Status s;
    if (jobs == nullptr) {
      s = Status::InvalidArgument("prefetch is not enabled in this daemon");
    } else if (v == "cancel") {
      s = jobs->Cancel(t.path);
      if (s.IsNotFound()) s = Status::InvalidArgument(s.message());
    } else if (v == "l1" || v == "l2" || v == "l3") {
      s = t.job_owner ? jobs->StartAs(*t.job_owner, t.path, v) : jobs->Start(t.path, v);
    } else {
      s = Status::InvalidArgument(fmt::format("bad value '{}' (l1, l2, l3 or cancel)", v));
    }
    if (!s.ok()) {
      Logger(Module::kFuse)
          .warn("setxattr {}='{}' on '{}' refused: {}", name(), EscapeForLog(v),
                EscapeForLog(t.path), s.ToString());
    }
    return s;
  }
};

// Cancelled once the request's token (CancelToken::Current(): a FUSE interrupt, or the session
// ending) is cancelled: walks over files and blocks stop there. Its deadline does not end them
// (it bounds waits on the network).
Status Interrupted() {
  const CancelToken* token = CancelToken::Current();
  if (token != nullptr && token->cancelled()) return Status::Cancelled("interrupted");
  return Status::OK();
}

// Calls fn(path, entry) for every file below `dir` (depth-first over the Catalog's listings).
// Stops with Cancelled when the request is interrupted.
Status ForEachFile(Filesystem* fs, const std::string& dir,
                   const std::function<void(const std::string&, const DirEntry&)>& fn) {
  std::string after;
  while (true) {
    std::vector<DirEntry> page;
    TIERFS_RETURN_IF_ERROR(fs->catalog()->ReadDir(dir, after, 1024, &page));
    for (const auto& e : page) {
      TIERFS_RETURN_IF_ERROR(Interrupted());
      std::string p = dir.empty() ? e.name : dir + "/" + e.name;
      if (e.type == EntryType::kDir) {
        TIERFS_RETURN_IF_ERROR(ForEachFile(fs, p, fn));
      } else {
        fn(p, e);
      }
    }
    if (page.size() < 1024) return Status::OK();
    after = page.back().name;
  }
}

ObjectRef RefOf(const std::string& path, const DirEntry& e) {
  ObjectRef obj;
  obj.key = path;
  obj.info.size = e.size;
  obj.info.etag = e.etag;
  obj.info.mtime_ns = e.mtime_ns;
  return obj;
}

// Files of the target: itself, or everything below a directory. Cancelled when the request was
// interrupted (fn's own walk over the blocks stops there too: TieredCache::Evict, SetPinned).
Status ForEachTargetFile(const XattrTarget& t, const std::function<void(const ObjectRef&)>& fn) {
  if (!t.is_dir) {
    fn(t.object);
    return Interrupted();
  }
  TIERFS_RETURN_IF_ERROR(
      ForEachFile(t.fs, std::string(t.path),
                  [&](const std::string& p, const DirEntry& e) { fn(RefOf(p, e)); }));
  return Interrupted();
}

Status Refused(std::string_view name, const XattrTarget& t, std::string_view v, Status s) {
  Logger(Module::kFuse)
      .warn("setxattr {}='{}' on '{}' refused: {}", name, EscapeForLog(v), EscapeForLog(t.path),
            s.ToString());
  return s;
}

// user.tierfs.prefetch_list on the root: append files, in order, to the mount's list job (bulk
// prefetch: a loader's order); "cancel" drops it. Get: its state, like user.tierfs.prefetch.
class PrefetchListHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.prefetch_list"; }
  bool AppliesTo(const XattrTarget& t) const override { return t.is_root; }
  bool GroupSettable() const override { return true; }
  Result<std::string> Get(const XattrTarget& t) const override {
    PrefetchJobs* jobs = t.fs->prefetch_jobs();
    if (jobs != nullptr) {
      auto st = jobs->Get(kPrefetchListJob);
      if (st.ok()) return FormatPrefetchStatus(*st);
      if (!st.status().IsNotFound()) return st.status();
    }
    return std::string("state=none tier=- files=0/0 bytes=0/0");
  }
  Status Set(const XattrTarget& t, std::string_view raw) const override {
    PrefetchJobs* jobs = t.fs->prefetch_jobs();
    if (!t.is_root) {
      return Refused(
          name(), t, raw.substr(0, 200),
          Status::InvalidArgument("set it on the mount root (paths are relative to it)"));
    }
    if (jobs == nullptr) {
      return Refused(name(), t, raw, Status::InvalidArgument("prefetch is not enabled"));
    }
    auto req = ParsePrefetchList(raw);
    if (!req.ok()) return Refused(name(), t, raw, req.status());
    if (req->cancel) {
      Status s = jobs->Cancel(kPrefetchListJob);
      return s.IsNotFound() ? Status::OK() : s;  // nothing queued: nothing to drop
    }
    Status s = t.job_owner ? jobs->AppendListAs(*t.job_owner, req->tier, req->paths)
                           : jobs->AppendList(req->tier, req->paths);
    if (!s.ok()) return Refused(name(), t, raw.substr(0, 200), s);
    return Status::OK();
  }
};

// user.tierfs.pin / ttl / policy / admit on files and directories: set a policy field at the path
// (inherited below it); get the effective value.
class PolicyFieldHandler : public XattrHandler {
 public:
  bool AppliesTo(const XattrTarget&) const override { return true; }
  Result<std::string> Get(const XattrTarget& t) const override {
    PolicyResolver* r = t.fs->policies();
    return Format(r ? r->Resolve(t.path) : EffectivePolicy{});
  }
  Status Set(const XattrTarget& t, std::string_view raw) const override {
    const std::string_view v = TrimXattrValue(raw);
    PolicyResolver* r = t.fs->policies();
    if (r == nullptr) {
      return Refused(name(), t, v, Status::InvalidArgument("policies are not enabled"));
    }
    Policy update;
    Status s = Parse(v, &update);
    if (!s.ok()) return Refused(name(), t, v, s);
    s = Apply(t, r, update);
    if (!s.ok()) return Refused(name(), t, v, s);
    Logger(Module::kFuse).info("{}={} set on '{}'", name(), EscapeForLog(v), EscapeForLog(t.path));
    return Status::OK();
  }

 protected:
  virtual std::string Format(const EffectivePolicy& p) const = 0;
  virtual Status Parse(std::string_view v, Policy* update) const = 0;
  virtual Status Apply(const XattrTarget& t, PolicyResolver* r, const Policy& update) const {
    return r->Set(t.path, update);
  }
};

class PinHandler final : public PolicyFieldHandler {
 public:
  std::string_view name() const override { return "user.tierfs.pin"; }

 protected:
  std::string Format(const EffectivePolicy& p) const override { return p.pin ? "1" : "0"; }
  Status Parse(std::string_view v, Policy* u) const override {
    TIERFS_ASSIGN_OR_RETURN(bool pin, ParsePinValue(v));
    u->pin = pin;
    return Status::OK();
  }
  // Measures the tree (for the pin quota), stores the pin, then pins or unpins the blocks the
  // host tiers hold now, each file by its effective policy (a deeper pin stays in force).
  Status Apply(const XattrTarget& t, PolicyResolver* r, const Policy& u) const override {
    uint64_t bytes = 0;
    if (*u.pin) {
      TIERFS_RETURN_IF_ERROR(
          ForEachTargetFile(t, [&](const ObjectRef& o) { bytes += o.info.size; }));
    }
    TIERFS_RETURN_IF_ERROR(r->Set(t.path, u, bytes));
    return ForEachTargetFile(
        t, [&](const ObjectRef& o) { t.fs->cache()->SetPinned(o, r->Resolve(o.key).pin); });
  }
};

class TtlHandler final : public PolicyFieldHandler {
 public:
  std::string_view name() const override { return "user.tierfs.ttl"; }

 protected:
  std::string Format(const EffectivePolicy& p) const override { return FormatDuration(p.ttl); }
  Status Parse(std::string_view v, Policy* u) const override {
    TIERFS_ASSIGN_OR_RETURN(u->ttl, ParseTtlValue(v));
    return Status::OK();
  }
};

class EvictionPolicyHandler final : public PolicyFieldHandler {
 public:
  std::string_view name() const override { return "user.tierfs.policy"; }

 protected:
  std::string Format(const EffectivePolicy& p) const override {
    return std::string(EvictionOrderName(p.eviction));
  }
  Status Parse(std::string_view v, Policy* u) const override {
    TIERFS_ASSIGN_OR_RETURN(u->eviction, ParseEvictionOrder(v));
    return Status::OK();
  }
};

// user.tierfs.admit: L2 admission (tiercache/admission.h); "default" when no policy sets it.
class AdmitHandler final : public PolicyFieldHandler {
 public:
  std::string_view name() const override { return "user.tierfs.admit"; }

 protected:
  std::string Format(const EffectivePolicy& p) const override {
    return std::string(AdmitPolicyName(p.admit));
  }
  Status Parse(std::string_view v, Policy* u) const override {
    TIERFS_ASSIGN_OR_RETURN(u->admit, ParseAdmitPolicy(v));
    return Status::OK();
  }
};

// user.tierfs.evict on files and directories, set-only: "1" drops the blocks from L1/L2 now.
class EvictHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.evict"; }
  bool AppliesTo(const XattrTarget&) const override { return true; }
  bool Listed() const override { return false; }
  Result<std::string> Get(const XattrTarget&) const override {
    return Status::NotFound("user.tierfs.evict is set-only");
  }
  Status Set(const XattrTarget& t, std::string_view raw) const override {
    const std::string_view v = TrimXattrValue(raw);
    if (v != "1") {
      Logger(Module::kFuse)
          .warn("setxattr {}='{}' on '{}' refused: the value must be 1", name(), EscapeForLog(v),
                EscapeForLog(t.path));
      return Status::InvalidArgument(fmt::format("bad value '{}' for {} (1)", v, name()));
    }
    uint64_t files = 0;
    Status s = ForEachTargetFile(t, [&](const ObjectRef& o) {
      t.fs->cache()->Evict(o);
      ++files;
    });
    if (!s.ok()) {
      Logger(Module::kFuse).warn("evict of '{}': {}", EscapeForLog(t.path), s.ToString());
      return s;
    }
    Logger(Module::kFuse)
        .info("evicted '{}' ({} files) from the host tiers", EscapeForLog(t.path), files);
    return Status::OK();
  }
};

// user.tierfs.log_level on the root: the daemon's log level, settable at run time.
class LogLevelHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.log_level"; }
  bool AppliesTo(const XattrTarget& t) const override { return t.is_root; }
  Result<std::string> Get(const XattrTarget& t) const override {
    DaemonControl* c = t.fs->daemon_control();
    return c ? c->LogLevel() : CurrentLogLevel();
  }
  Status Set(const XattrTarget& t, std::string_view raw) const override {
    const std::string_view v = TrimXattrValue(raw);
    spdlog::level::level_enum level;
    if (!ParseLogLevel(v, &level)) {
      Logger(Module::kFuse)
          .warn("setxattr {}='{}' refused: not a log level", name(), EscapeForLog(v, 64));
      return Status::InvalidArgument(
          fmt::format("bad value '{}' for {} (trace, debug, info, warn, error, critical, off)",
                      EscapeForLog(v, 64), name()));
    }
    DaemonControl* c = t.fs->daemon_control();
    if (c == nullptr) return Status::NotSupported("no daemon control attached");
    return c->SetLogLevel(v);
  }
};

// user.tierfs.daemon on the root: who serves the mount (for `tierfs status`).
class DaemonHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.daemon"; }
  bool AppliesTo(const XattrTarget& t) const override { return t.is_root; }
  Result<std::string> Get(const XattrTarget& t) const override {
    DaemonControl* c = t.fs->daemon_control();
    return c ? c->Describe() : fmt::format("pid={}", getpid());
  }
};

// user.tierfs.manifest on the root of a mount serving a dataset manifest (--manifest): the
// manifest's checksum, the dataset version a training log records. Absent (ENODATA, not
// listed) on a mount of live listings.
class ManifestHandler final : public XattrHandler {
 public:
  std::string_view name() const override { return "user.tierfs.manifest"; }
  bool AppliesTo(const XattrTarget& t) const override {
    return t.is_root && !t.fs->catalog()->manifest_checksum().empty();
  }
  Result<std::string> Get(const XattrTarget& t) const override {
    return t.fs->catalog()->manifest_checksum();
  }
};

}  // namespace

std::string_view TrimXattrValue(std::string_view value) {
  if (!value.empty() && (value.back() == '\0' || value.back() == '\n')) value.remove_suffix(1);
  return value;
}

Status XattrHandler::Set(const XattrTarget& target, std::string_view value) const {
  Logger(Module::kFuse)
      .warn("setxattr {} on '{}' refused: the attribute is read-only", name(),
            EscapeForLog(target.path));
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
    if (h->Listed() && h->AppliesTo(target)) names.emplace_back(h->name());
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
  r->Register(std::make_unique<PrefetchHandler>());
  r->Register(std::make_unique<PrefetchListHandler>());
  r->Register(std::make_unique<PinHandler>());
  r->Register(std::make_unique<TtlHandler>());
  r->Register(std::make_unique<EvictionPolicyHandler>());
  r->Register(std::make_unique<AdmitHandler>());
  r->Register(std::make_unique<EvictHandler>());
  r->Register(std::make_unique<LogLevelHandler>());
  r->Register(std::make_unique<DaemonHandler>());
  r->Register(std::make_unique<ManifestHandler>());
  return r;
}

}  // namespace tierfs
