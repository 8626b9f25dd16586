#include "daemon/log_control.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "base/logging.h"
#include "base/strings.h"
#include "daemon/memory_limit.h"

namespace tierfs {

DaemonLogControl::DaemonLogControl(std::string cache_dir, std::string version)
    : cache_dir_(std::move(cache_dir)), version_(std::move(version)) {}

std::string DaemonLogControl::LogLevel() const { return CurrentLogLevel(); }

Status DaemonLogControl::SetLogLevel(std::string_view level) {
  const std::string before = CurrentLogLevel();
  TIERFS_RETURN_IF_ERROR(tierfs::SetLogLevel(level));
  // At warn so the change is recorded whatever the new level is (unless it is off).
  Logger(Module::kDaemon)
      .warn("log level changed from {} to {} (user.tierfs.log_level)", before, CurrentLogLevel());
  return Status::OK();
}

std::string DaemonLogControl::Describe() const {
  const LogOptions lo = CurrentLogOptions();
  // Paths last and escaped: the value stays one space-separated line of key=value.
  std::string memory = MemoryStatusFields();
  if (!memory.empty()) memory += ' ';
  return fmt::format("pid={} version={} log_level={} log_format={} {}log={} cache_dir={}", getpid(),
                     version_, lo.level, lo.format, memory, EscapeForLog(lo.destination, 512),
                     EscapeForLog(cache_dir_, 512));
}

HupReopener::HupReopener() : thread_([this] { Loop(); }) {}

HupReopener::~HupReopener() {
  stop_.store(true);
  // Wakes the sigwait with a SIGHUP directed at this thread only.
  pthread_kill(thread_.native_handle(), SIGHUP);
  thread_.join();
}

void HupReopener::Loop() {
  pthread_setname_np(pthread_self(), "tierfs-sighup");
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  for (;;) {
    int sig = 0;
    const int rc = sigwait(&set, &sig);
    if (stop_.load()) return;
    if (rc != 0) continue;
    ++reopens_;
    Status s = ReopenLogFile();
    if (!s.ok()) {
      Logger(Module::kDaemon).error("SIGHUP: {}", s.ToString());
    } else {
      Logger(Module::kDaemon).info("SIGHUP: log file reopened (the mount stays)");
    }
  }
}

}  // namespace tierfs
