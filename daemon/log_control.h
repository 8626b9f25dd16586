// daemon/log_control — the daemon's side of the run-time log controls.
//
//   DaemonLogControl: the DaemonControl the Filesystem's root xattrs call (user.tierfs.log_level
//   sets the level of every logger, user.tierfs.daemon describes the daemon for `tierfs status`).
//   HupReopener: a thread that takes SIGHUP and reopens the log file (logrotate's postrotate), so
//   SIGHUP never ends the mount. SIGHUP must be blocked in every thread (SetSignalsBlocked in
//   mount_cli.cc) before it starts; the thread takes it with sigwait.
//
// Thread-safe.
#pragma once

#include <pthread.h>

#include <atomic>
#include <string>
#include <thread>

#include "fuse/filesystem.h"

namespace tierfs {

class DaemonLogControl final : public DaemonControl {
 public:
  // `cache_dir` is shown by Describe(); the version is the build's.
  DaemonLogControl(std::string cache_dir, std::string version);
  std::string LogLevel() const override;
  Status SetLogLevel(std::string_view level) override;
  std::string Describe() const override;

  // The mount's history, shown by Describe() (mounted=, restarts=; started= is this daemon's
  // start): set once the mount is served (FuseServer::history).
  void SetMountHistory(int64_t mounted_at_ns, uint32_t restarts);
  // A supervised daemon (daemon/supervisor.h): its supervisor's pid and the mount's crash resumes,
  // shown by Describe() (supervisor_pid=, resumes=; "-" and 0 without a supervisor).
  void SetSupervision(int supervisor_pid, uint32_t resumes);

 private:
  const std::string cache_dir_;
  const std::string version_;
  const int64_t started_at_ns_;
  std::atomic<int64_t> mounted_at_ns_{0};
  std::atomic<uint32_t> restarts_{0};
  std::atomic<int> supervisor_pid_{0};
  std::atomic<uint32_t> resumes_{0};
};

class HupReopener {
 public:
  HupReopener();
  // Stops and joins the thread.
  ~HupReopener();
  HupReopener(const HupReopener&) = delete;
  HupReopener& operator=(const HupReopener&) = delete;

  // SIGHUPs handled so far (tests, logs).
  uint64_t reopens() const { return reopens_.load(); }

 private:
  void Loop();
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> reopens_{0};
  std::thread thread_;
};

}  // namespace tierfs
