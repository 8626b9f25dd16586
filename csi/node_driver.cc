#include "csi/node_driver.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <utility>

namespace tierfs::csi {
namespace {

spdlog::logger& Log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::default_logger()->clone("csi");
    return l;
  }();
  return *logger;
}

bool UnderDir(const std::string& path, const std::string& dir) {
  if (dir == "/") return path.size() > 1 && path[0] == '/';
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         path[dir.size()] == '/';
}

}  // namespace

NodeDriver::NodeDriver(const NodeDriverOptions& options, NodeOps* ops, NodeState state)
    : options_(options),
      ops_(ops),
      state_file_(options.state_dir + "/state.json"),
      state_(std::move(state)) {}

Result<std::unique_ptr<NodeDriver>> NodeDriver::Open(const NodeDriverOptions& options,
                                                     NodeOps* ops) {
  if (options.state_dir.empty() || options.state_dir[0] != '/' || options.cache_root.empty() ||
      options.cache_root[0] != '/') {
    return Status::InvalidArgument("--state-dir and --cache-dir must be absolute paths");
  }
  if (!options.file_root.empty() && options.file_root[0] != '/') {
    return Status::InvalidArgument("--file-root must be an absolute path");
  }
  for (const std::string& dir : {options.state_dir, options.state_dir + "/mnt",
                                 options.state_dir + "/log", options.cache_root}) {
    TIERFS_RETURN_IF_ERROR(ops->MakeDirs(dir, 0700));
  }
  TIERFS_ASSIGN_OR_RETURN(NodeState state, LoadState(options.state_dir + "/state.json"));
  std::unique_ptr<NodeDriver> driver(new NodeDriver(options, ops, std::move(state)));
  {
    MutexLock l(&driver->mu_);
    TIERFS_RETURN_IF_ERROR(driver->Reconcile());
  }
  return driver;
}

Status NodeDriver::Reconcile() {
  std::vector<std::string> dead;
  for (auto& [key, d] : state_.daemons) {
    if (!ops_->Alive({d.pid, d.start_time}) || !ops_->IsTierfsMount(d.mountpoint)) {
      Log().warn("daemon {} (pid {}, {}) is gone: unmounting its {} targets", key, d.pid, d.source,
                 d.targets.size());
      for (const auto& [target, t] : d.targets) (void)ops_->Unmount(target);
      dead.push_back(key);
      continue;
    }
    for (auto it = d.targets.begin(); it != d.targets.end();) {
      if (ops_->IsTierfsMount(it->first)) {
        ++it;
      } else {
        Log().info("target {} of daemon {} is no longer mounted: dropped", it->first, key);
        it = d.targets.erase(it);
      }
    }
    if (d.targets.empty()) {
      dead.push_back(key);
    } else {
      Log().info("daemon {} (pid {}, {}) kept with {} targets", key, d.pid, d.source,
                 d.targets.size());
    }
  }
  for (const std::string& key : dead) StopAndErase(key, "no target left after restart");
  // Mounts of daemons the state does not know (the driver ended between starting a daemon and
  // saving its record): unmounting ends them.
  for (const std::string& mnt : ops_->TierfsMountsUnder(options_.state_dir + "/mnt")) {
    bool known = false;
    for (const auto& [key, d] : state_.daemons) known = known || d.mountpoint == mnt;
    if (!known) {
      Log().warn("unmounting {}: a tierfs mount no record names", mnt);
      (void)ops_->Unmount(mnt);
      (void)ops_->RemoveDir(mnt);
    }
  }
  return Save();
}

Status NodeDriver::Save() {
  Status s = SaveState(state_file_, state_);
  if (!s.ok()) Log().error("saving the state: {}", s.ToString());
  return s;
}

Status NodeDriver::CheckFileSource(const VolumeSpec& spec) const {
  if (spec.source.rfind("file://", 0) != 0) return Status::OK();
  std::string path = spec.source.substr(7);
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (options_.file_root.empty()) {
    return Status::InvalidArgument(
        "volumeAttributes.source: file:// sources are not enabled on this node (tierfs-csi "
        "--file-root DIR)");
  }
  if (path != options_.file_root && !UnderDir(path, options_.file_root)) {
    return Status::InvalidArgument(
        fmt::format("volumeAttributes.source: {} is not below this node's file root {}",
                    spec.source, options_.file_root));
  }
  return Status::OK();
}

void NodeDriver::StopAndErase(const std::string& key, const char* why) {
  auto it = state_.daemons.find(key);
  if (it == state_.daemons.end()) return;
  const DaemonRecord& d = it->second;
  Status s = ops_->StopDaemon(d.mountpoint, {d.pid, d.start_time});
  if (!s.ok()) Log().error("stopping daemon {} (pid {}): {}", key, d.pid, s.ToString());
  (void)ops_->RemoveDir(d.mountpoint);
  Log().info("daemon {} (pid {}, {}) stopped: {}", key, d.pid, d.source, why);
  state_.daemons.erase(it);
}

Result<DaemonRecord*> NodeDriver::EnsureDaemon(const VolumeSpec& spec) {
  const std::string key = spec.Key();
  if (auto it = state_.daemons.find(key); it != state_.daemons.end()) {
    DaemonRecord& d = it->second;
    if (ops_->Alive({d.pid, d.start_time}) && ops_->IsTierfsMount(d.mountpoint)) return &d;
    Log().warn("daemon {} (pid {}) died: starting a new one", key, d.pid);
    for (const auto& [target, t] : d.targets) (void)ops_->Unmount(target);
    StopAndErase(key, "it died");
  }
  DaemonRecord d;
  d.key = key;
  d.source = spec.source;
  d.endpoint = spec.endpoint;
  d.region = spec.region;
  d.credentials_id = spec.credentials_id;
  d.flags = spec.MountFlags();
  d.mountpoint = options_.state_dir + "/mnt/" + key;
  d.cache_dir = options_.cache_root + "/" + key;
  d.log_file = options_.state_dir + "/log/" + key + ".log";
  // A mount left over at this place (the driver ended before it saved the record) goes first.
  if (ops_->IsTierfsMount(d.mountpoint)) (void)ops_->Unmount(d.mountpoint);
  TIERFS_RETURN_IF_ERROR(ops_->MakeDirs(d.mountpoint, 0755));
  Result<ProcessId> p = ops_->StartDaemon(
      {d.source, d.mountpoint, d.cache_dir, d.log_file, d.flags, spec.credential_env});
  if (!p.ok()) {
    (void)ops_->RemoveDir(d.mountpoint);
    Log().warn("daemon for {} did not start: {}", d.source, p.status().ToString());
    return p.status();
  }
  d.pid = p->pid;
  d.start_time = p->start_time;
  Log().info("daemon {} started: pid {}, {} (credentials {}), mount {}", key, d.pid, d.source,
             d.credentials_id == "node" ? "of the node" : "of a secret", d.mountpoint);
  DaemonRecord* rec = &state_.daemons.insert_or_assign(key, std::move(d)).first->second;
  TIERFS_RETURN_IF_ERROR(Save());
  return rec;
}

Status NodeDriver::Publish(const PublishRequest& req) {
  if (req.volume_id.empty()) return Status::InvalidArgument("volume_id is missing");
  if (req.target_path.empty() || req.target_path[0] != '/') {
    return Status::InvalidArgument("target_path must be an absolute path");
  }
  TIERFS_ASSIGN_OR_RETURN(VolumeSpec spec,
                          ParseVolume(req.volume_context, req.secrets, req.mount_flags));
  TIERFS_RETURN_IF_ERROR(CheckFileSource(spec));
  const std::string key = spec.Key();
  MutexLock l(&mu_);
  for (auto& [k, d] : state_.daemons) {
    auto t = d.targets.find(req.target_path);
    if (t == d.targets.end()) continue;
    if (k != key || t->second.volume_id != req.volume_id || t->second.readonly != req.readonly) {
      return Status::FailedPrecondition(
          fmt::format("target {} already holds volume {} with other attributes or readonly flag",
                      req.target_path, t->second.volume_id));
    }
    if (ops_->Alive({d.pid, d.start_time}) && ops_->IsTierfsMount(req.target_path)) {
      return Status::OK();  // published before: nothing to do
    }
    d.targets.erase(t);  // bound before but gone (or its daemon died): publish again
    break;
  }
  TIERFS_ASSIGN_OR_RETURN(DaemonRecord * d, EnsureDaemon(spec));
  Status s = ops_->MakeDirs(req.target_path, 0750);
  if (s.ok() && ops_->IsTierfsMount(req.target_path)) s = ops_->Unmount(req.target_path);
  if (s.ok()) s = ops_->Bind(d->mountpoint, req.target_path, req.readonly);
  if (!s.ok()) {
    if (d->targets.empty()) {
      StopAndErase(key, "its first volume could not be bound");
      (void)Save();
    }
    return Status::Internal(fmt::format("binding {}: {}", req.target_path, s.ToString()));
  }
  d->targets[req.target_path] = {req.volume_id, req.readonly};
  Log().info("published volume {} at {} (daemon {}, {} targets)", req.volume_id, req.target_path,
             key, d->targets.size());
  return Save();
}

Status NodeDriver::Unpublish(const std::string& volume_id, const std::string& target_path) {
  if (volume_id.empty()) return Status::InvalidArgument("volume_id is missing");
  if (target_path.empty()) return Status::InvalidArgument("target_path is missing");
  MutexLock l(&mu_);
  for (auto& [key, d] : state_.daemons) {
    if (!d.targets.contains(target_path)) continue;
    TIERFS_RETURN_IF_ERROR(ops_->Unmount(target_path));
    (void)ops_->RemoveDir(target_path);
    d.targets.erase(target_path);
    Log().info("unpublished volume {} from {} (daemon {}, {} targets left)", volume_id, target_path,
               key, d.targets.size());
    if (d.targets.empty()) StopAndErase(key, "its last volume was unpublished");
    return Save();
  }
  // Unknown: done before, or the state was lost. A tierfs mount still there is unmounted.
  if (ops_->IsTierfsMount(target_path)) TIERFS_RETURN_IF_ERROR(ops_->Unmount(target_path));
  (void)ops_->RemoveDir(target_path);
  return Status::OK();
}

NodeState NodeDriver::TEST_State() const {
  MutexLock l(&mu_);
  return state_;
}

}  // namespace tierfs::csi
