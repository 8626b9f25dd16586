#include "base/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <syslog.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "base/strings.h"

namespace tierfs {
namespace {

constexpr std::array<const char*, 6> kNames = {"base",      "blobclient", "metastore",
                                               "tiercache", "fuse",       "daemon"};

// Forwards to `inner` with control characters of the message escaped (EscapeForLog): whatever
// a log line quotes (object keys, listing names, server answers, Status texts holding them), it
// stays one printable line. Messages without control bytes pass unchanged.
class EscapingSink final : public spdlog::sinks::sink {
 public:
  explicit EscapingSink(spdlog::sink_ptr inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override {
    const std::string_view v(msg.payload.data(), msg.payload.size());
    bool clean = true;
    for (char ch : v) {
      const auto c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c == 0x7f) {
        clean = false;
        break;
      }
    }
    if (clean) {
      inner_->log(msg);
      return;
    }
    const std::string escaped = EscapeForLog(v, size_t{64} << 10);
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
    inner_->log(copy);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    inner_->set_formatter(std::move(f));
  }

 private:
  const spdlog::sink_ptr inner_;
};

struct Registry {
  std::mutex mu;
  std::array<std::shared_ptr<spdlog::logger>, kNames.size()> loggers;

  Registry() {
    auto sink = std::make_shared<EscapingSink>(std::make_shared<spdlog::sinks::stderr_sink_mt>());
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
  sink = std::make_shared<EscapingSink>(std::move(sink));
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
