#include "daemon/log_control.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>

#include "base/logging.h"
#include "base/strings.h"
#include "daemon/memory_limit.h"

namespace tierfs {

namespace {

int64_t NowUnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "2026-12-07T09:48:00Z" (UTC, seconds).
std::string Utc(int64_t unix_ns) {
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

DaemonLogControl::DaemonLogControl(std::string cache_dir, std::string version)
    : cache_dir_(std::move(cache_dir)),
      version_(std::move(version)),
      started_at_ns_(NowUnixNanos()) {}

void DaemonLogControl::SetMountHistory(int64_t mounted_at_ns, uint32_t restarts) {
  mounted_at_ns_.store(mounted_at_ns);
  restarts_.store(restarts);
}

void DaemonLogControl::SetSupervision(int supervisor_pid, uint32_t resumes) {
  supervisor_pid_.store(supervisor_pid);
  resumes_.store(resumes);
}

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
  const int64_t mounted = mounted_at_ns_.load();
  return fmt::format(
      "pid={} version={} started={} mounted={} restarts={} supervisor_pid={} resumes={} "
      "log_level={} log_format={} {}log={} cache_dir={}",
      getpid(), version_, Utc(started_at_ns_), mounted > 0 ? Utc(mounted) : "-", restarts_.load(),
      supervisor_pid_.load() > 0 ? std::to_string(supervisor_pid_.load()) : "-", resumes_.load(),
      lo.level, lo.format, memory, EscapeForLog(lo.destination, 512),
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
