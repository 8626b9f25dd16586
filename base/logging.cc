#include "base/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <syslog.h>

#include <array>
#include <memory>
#include <mutex>

namespace tierfs {
namespace {

constexpr std::array<const char*, 6> kNames = {"base",      "blobclient", "metastore",
                                               "tiercache", "fuse",       "daemon"};

struct Registry {
  std::mutex mu;
  std::array<std::shared_ptr<spdlog::logger>, kNames.size()> loggers;

  Registry() {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    for (size_t i = 0; i < kNames.size(); ++i) {
      loggers[i] = std::make_shared<spdlog::logger>(kNames[i], sink);
      loggers[i]->set_level(spdlog::level::info);
      loggers[i]->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v");
    }
  }
};

Registry& Reg() {
  static Registry* r = new Registry();  // never destroyed: threads may log during teardown
  return *r;
}

}  // namespace

spdlog::logger& Logger(Module m) { return *Reg().loggers[static_cast<size_t>(m)]; }

bool ConfigureLogging(const LogOptions& options, std::string* err) {
  spdlog::level::level_enum level = spdlog::level::from_str(options.level);
  if (level == spdlog::level::off && options.level != "off") {
    if (err) *err = "unknown log level '" + options.level + "'";
    return false;
  }
  spdlog::sink_ptr sink;
  try {
    if (options.destination.empty() || options.destination == "stderr") {
      sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    } else if (options.destination == "syslog") {
      sink = std::make_shared<spdlog::sinks::syslog_sink_mt>("tierfs", LOG_PID, LOG_DAEMON, false);
    } else {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.destination);
    }
  } catch (const spdlog::spdlog_ex& e) {
    if (err) *err = std::string("cannot open log destination: ") + e.what();
    return false;
  }
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  for (auto& l : r.loggers) {
    l->sinks().clear();
    l->sinks().push_back(sink);
    l->set_level(level);
    l->flush_on(spdlog::level::warn);
  }
  return true;
}

}  // namespace tierfs
