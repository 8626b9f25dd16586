#include "base/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <syslog.h>

#include <array>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "base/strings.h"

namespace tierfs {
namespace {

constexpr std::array<const char*, 6> kNames = {"base",      "blobclient", "metastore",
                                               "tiercache", "fuse",       "daemon"};
constexpr const char* kTextPattern = "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v";

// format "json": one object per line (FormatJsonLogLine).
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string line = FormatJsonLogLine(msg);
    dest.append(line.data(), line.data() + line.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

std::unique_ptr<spdlog::formatter> MakeFormatter(std::string_view format) {
  if (format == "json") return std::make_unique<JsonFormatter>();
  return std::make_unique<spdlog::pattern_formatter>(kTextPattern);
}

// The one sink every module logger writes to. Escapes the control characters of the message
// (EscapeForLog): whatever a log line quotes (object keys, listing names, server answers, Status
// texts holding them), it stays one printable line; messages without control bytes pass
// unchanged. Forwards to `inner`, which ReopenLogFile may replace while other threads log.
class SwitchSink final : public spdlog::sinks::sink {
 public:
  explicit SwitchSink(spdlog::sink_ptr inner) : inner_(std::move(inner)) {}
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
    spdlog::sink_ptr inner = Inner();
    if (clean) {
      inner->log(msg);
      return;
    }
    const std::string escaped = EscapeForLog(v, size_t{64} << 10);
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
    inner->log(copy);
  }
  void flush() override { Inner()->flush(); }
  void set_pattern(const std::string& pattern) override { Inner()->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    Inner()->set_formatter(std::move(f));
  }
  // The old sink is flushed and closed once the last message being written to it is done.
  void Replace(spdlog::sink_ptr inner) {
    spdlog::sink_ptr old;
    {
      std::lock_guard<std::mutex> l(mu_);
      old = std::move(inner_);
      inner_ = std::move(inner);
    }
    old->flush();
  }

 private:
  spdlog::sink_ptr Inner() {
    std::lock_guard<std::mutex> l(mu_);
    return inner_;
  }
  std::mutex mu_;
  spdlog::sink_ptr inner_;
};

// Opens the sink of `options` (destination and format).
spdlog::sink_ptr OpenSink(const LogOptions& options) {
  spdlog::sink_ptr sink;
  if (options.destination.empty() || options.destination == "stderr") {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else if (options.destination == "syslog") {
    sink = std::make_shared<spdlog::sinks::syslog_sink_mt>("tierfs", LOG_PID, LOG_DAEMON, false);
  } else {
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.destination);
  }
  sink->set_formatter(MakeFormatter(options.format));
  return sink;
}

struct Registry {
  std::mutex mu;
  std::array<std::shared_ptr<spdlog::logger>, kNames.size()> loggers;
  std::shared_ptr<SwitchSink> sink;
  LogOptions options;  // GUARDED_BY(mu)

  Registry() {
    options.destination = "stderr";
    sink = std::make_shared<SwitchSink>(OpenSink(options));
    for (size_t i = 0; i < kNames.size(); ++i) {
      loggers[i] = std::make_shared<spdlog::logger>(kNames[i], sink);
      loggers[i]->set_level(spdlog::level::info);
    }
  }
};

Registry& Reg() {
  static Registry* r = new Registry();  // never destroyed: threads may log during teardown
  return *r;
}

}  // namespace

spdlog::logger& Logger(Module m) { return *Reg().loggers[static_cast<size_t>(m)]; }

bool ParseLogLevel(std::string_view name, spdlog::level::level_enum* out) {
  static constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 9> kLevels = {
      {{"trace", spdlog::level::trace},
       {"debug", spdlog::level::debug},
       {"info", spdlog::level::info},
       {"warn", spdlog::level::warn},
       {"warning", spdlog::level::warn},
       {"error", spdlog::level::err},
       {"err", spdlog::level::err},
       {"critical", spdlog::level::critical},
       {"off", spdlog::level::off}}};
  for (const auto& [n, l] : kLevels) {
    if (n == name) {
      *out = l;
      return true;
    }
  }
  return false;
}

bool ConfigureLogging(const LogOptions& options, std::string* err) {
  spdlog::level::level_enum level;
  if (!ParseLogLevel(options.level, &level)) {
    if (err) *err = "unknown log level '" + options.level + "'";
    return false;
  }
  if (options.format != "text" && options.format != "json") {
    if (err) *err = "unknown log format '" + options.format + "' (text or json)";
    return false;
  }
  spdlog::sink_ptr sink;
  try {
    sink = OpenSink(options);
  } catch (const spdlog::spdlog_ex& e) {
    if (err) *err = std::string("cannot open log destination: ") + e.what();
    return false;
  }
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  r.sink->Replace(std::move(sink));
  r.options = options;
  if (r.options.destination.empty()) r.options.destination = "stderr";
  for (auto& l : r.loggers) {
    l->set_level(level);
    l->flush_on(spdlog::level::trace);  // every line: tail -f and logrotate see whole lines
  }
  return true;
}

Status SetLogLevel(std::string_view name) {
  spdlog::level::level_enum level;
  if (!ParseLogLevel(name, &level)) {
    return Status::InvalidArgument(
        fmt::format("unknown log level '{}' (trace, debug, info, warn, error, critical, off)",
                    EscapeForLog(name, 64)));
  }
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  for (auto& l : r.loggers) l->set_level(level);
  r.options.level = std::string(spdlog::level::to_string_view(level).data(),
                                spdlog::level::to_string_view(level).size());
  return Status::OK();
}

std::string CurrentLogLevel() {
  const auto sv = spdlog::level::to_string_view(Logger(Module::kDaemon).level());
  return std::string(sv.data(), sv.size());
}

LogOptions CurrentLogOptions() {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  LogOptions o = r.options;
  o.level = CurrentLogLevel();
  return o;
}

Status ReopenLogFile() {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.options.destination == "stderr" || r.options.destination == "syslog") return Status::OK();
  spdlog::sink_ptr sink;
  try {
    sink = OpenSink(r.options);
  } catch (const spdlog::spdlog_ex& e) {
    return Status::IOError(
        fmt::format("cannot reopen the log file {}: {}", r.options.destination, e.what()));
  }
  r.sink->Replace(std::move(sink));
  return Status::OK();
}

std::string FormatJsonLogLine(const spdlog::details::log_msg& msg) {
  const auto since = msg.time.time_since_epoch();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(since - secs);
  const std::time_t t = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[96];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(micros.count()));
  const auto level = spdlog::level::to_string_view(msg.level);
  nlohmann::ordered_json j;
  j["time"] = stamp;
  j["level"] = std::string(level.data(), level.size());
  j["thread"] = msg.thread_id;
  j["logger"] = std::string(msg.logger_name.data(), msg.logger_name.size());
  j["message"] = std::string(msg.payload.data(), msg.payload.size());
  // Invalid UTF-8 (an object key from outside) becomes U+FFFD rather than an exception.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace tierfs
