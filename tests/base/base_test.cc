#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/coding.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/result.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/units.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs {
namespace {

using namespace std::chrono_literals;

TEST(StatusTest, OkAndCodes) {
  EXPECT_OK(Status::OK());
  Status s = Status::NotFound("key a/b");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_EQ(s.ToString(), "NotFound: key a/b");
  EXPECT_EQ(Status::OK().ToString(), "OK");
  EXPECT_EQ(s.WithContext("lookup").ToString(), "NotFound: lookup: key a/b");
}

TEST(StatusTest, FromErrnoMapsCommonCodes) {
  EXPECT_EQ(Status::FromErrno(ENOENT, "open x").code(), Status::Code::kNotFound);
  EXPECT_EQ(Status::FromErrno(ENOSPC, "write").code(), Status::Code::kNoSpace);
  EXPECT_EQ(Status::FromErrno(EACCES, "open").code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(Status::FromErrno(EIO, "read").code(), Status::Code::kIOError);
  // Out of descriptors or memory is transient and says nothing about the file.
  EXPECT_EQ(Status::FromErrno(EMFILE, "open").code(), Status::Code::kUnavailable);
  EXPECT_EQ(Status::FromErrno(ENFILE, "open").code(), Status::Code::kUnavailable);
  EXPECT_EQ(Status::FromErrno(ENOMEM, "read").code(), Status::Code::kUnavailable);
  EXPECT_NE(Status::FromErrno(ENOENT, "open x").message().find("open x"), std::string::npos);
}

TEST(StatusTest, Retryable) {
  EXPECT_TRUE(IsRetryable(Status::Unavailable("503")));
  EXPECT_TRUE(IsRetryable(Status::TimedOut("t")));
  EXPECT_FALSE(IsRetryable(Status::NotFound("404")));
  EXPECT_FALSE(IsRetryable(Status::PermissionDenied("403")));
  EXPECT_FALSE(IsRetryable(Status::FailedPrecondition("412")));
}

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  TIERFS_ASSIGN_OR_RETURN(int h, Half(x));
  TIERFS_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  TIERFS_RETURN_IF_ERROR(Half(x).status());
  return Status::OK();
}

TEST(ResultTest, ValueAndErrorPropagation) {
  Result<int> r = Quarter(8);
  ASSERT_OK(r);
  EXPECT_EQ(*r, 2);
  Result<int> bad = Quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(bad.value_or(-1), -1);
  EXPECT_OK(CheckEven(4));
  EXPECT_FALSE(CheckEven(5).ok());
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_OK(r);
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(UnitsTest, ParseSize) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseSize("20GiB"), 20ull << 30);
  EXPECT_EQ(*ParseSize("64k"), 65536u);
  EXPECT_EQ(*ParseSize("1.5GB"), 1500000000u);
  EXPECT_EQ(*ParseSize(" 2 TiB "), 2ull << 40);
  for (const char* bad : {"", "MiB", "-1", "12XB", "1e400", "ten"}) {
    Result<uint64_t> r = ParseSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    }
  }
}

TEST(UnitsTest, ParseDuration) {
  EXPECT_EQ(*ParseDuration("30s"), 30s);
  EXPECT_EQ(*ParseDuration("10m"), 10min);
  EXPECT_EQ(*ParseDuration("7d"), 7 * 24h);
  EXPECT_EQ(*ParseDuration("250ms"), 250ms);
  EXPECT_EQ(*ParseDuration("1h30m"), 90min);
  EXPECT_EQ(*ParseDuration("45"), 45s);
  EXPECT_EQ(*ParseDuration("forever"), kForever);
  for (const char* bad : {"", "s", "10x", "-5s", "5s3", "1y"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
}

TEST(UnitsTest, ParseSizeIsExactUpTo2To64) {
  EXPECT_EQ(*ParseSize("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(*ParseSize("18446744073709551615B"), UINT64_MAX);
  EXPECT_EQ(*ParseSize("9007199254740993"), 9007199254740993ull);  // 2^53 + 1: not a double
  EXPECT_EQ(*ParseSize("15EiB"), 15ull << 60);
  EXPECT_EQ(*ParseSize("1PiB"), 1ull << 50);
  EXPECT_EQ(*ParseSize("2EB"), 2'000'000'000'000'000'000ull);
  EXPECT_EQ(*ParseSize("0.5KiB"), 512u);
  EXPECT_EQ(*ParseSize("1.0000000000000000001KiB"), 1024u);  // digits past the 19th dropped
  EXPECT_EQ(*ParseSize(".5k"), 512u);
  EXPECT_EQ(*ParseSize("1.999999999999999999EiB"), 2305843009213693951ull);
  for (const char* bad : {"18446744073709551616", "16EiB", "99999999999999999999999", "19EB",
                          "1..5MiB", ".", "1.2.3", "20000PiB"}) {
    Result<uint64_t> r = ParseSize(bad);
    ASSERT_FALSE(r.ok()) << bad << " = " << *r;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

TEST(UnitsTest, ParseDurationRefusesOverflow) {
  EXPECT_EQ(*ParseDuration("1.5s"), 1500ms);
  EXPECT_EQ(*ParseDuration("0.000000001s"), 1ns);
  EXPECT_EQ(*ParseDuration("9223372036854775806ns"), std::chrono::nanoseconds(INT64_MAX - 1));
  EXPECT_EQ(*ParseDuration("106751d"), std::chrono::hours(24) * 106751);
  for (const char* bad :
       {"99999999999999d", "9223372036854775807ns", "106752d", "18446744073709551616",
        "99999999999999999999999s", "106751d106751d", "20000w"}) {
    auto r = ParseDuration(bad);
    ASSERT_FALSE(r.ok()) << bad << " = " << r->count();
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("too long"), std::string::npos) << r.status().message();
  }
}

TEST(UnitsTest, FormatRoundTrips) {
  EXPECT_EQ(FormatSize(0), "0B");
  EXPECT_EQ(FormatSize(1536), "1.5KiB");
  EXPECT_EQ(FormatSize(20ull << 30), "20GiB");
  EXPECT_EQ(FormatDuration(90s), "1m30s");
  EXPECT_EQ(FormatDuration(kForever), "forever");
  EXPECT_EQ(FormatDuration(250ms), "250ms");
  EXPECT_EQ(*ParseDuration(FormatDuration(7 * 24h + 3s)), 7 * 24h + 3s);
}

TEST(StringsTest, EscapeForLogMakesControlBytesVisible) {
  EXPECT_EQ(EscapeForLog("plain/key-1.bin"), "plain/key-1.bin");
  EXPECT_EQ(EscapeForLog("a\nb\rc\td\\e"), "a\\nb\\rc\\td\\\\e");
  EXPECT_EQ(EscapeForLog(std::string("x\0y\x1b[31m\x7f", 9)), "x\\x00y\\x1b[31m\\x7f");
  EXPECT_EQ(EscapeForLog("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 stays readable
  // A forged log line cannot start: no raw newline survives.
  EXPECT_EQ(EscapeForLog("k\n[error] fake").find('\n'), std::string::npos);
  EXPECT_EQ(EscapeForLog(std::string(10, 'a'), 4), "aaaa...(10 bytes)");
}

TEST(StringsTest, RedactUrlDropsUserinfo) {
  EXPECT_EQ(RedactUrl("http://user:s3cr3t@127.0.0.1:9000/b"), "http://***@127.0.0.1:9000/b");
  EXPECT_EQ(RedactUrl("https://tok@host"), "https://***@host");
  EXPECT_EQ(RedactUrl("http://a:b@c@host/x@y"), "http://***@host/x@y");
  EXPECT_EQ(RedactUrl("http://host:9000/path@x"), "http://host:9000/path@x");
  EXPECT_EQ(RedactUrl("https://s3.amazonaws.com"), "https://s3.amazonaws.com");
  EXPECT_EQ(RedactUrl("not a url"), "not a url");
}

TEST(StringsTest, TrimSpaceDropsAsciiWhitespaceAtBothEnds) {
  EXPECT_EQ(TrimSpace("  a b\t\r\n"), "a b");
  EXPECT_EQ(TrimSpace("\v\fx\f\v"), "x");
  EXPECT_EQ(TrimSpace("nothing"), "nothing");
  EXPECT_EQ(TrimSpace(" \t\r\n"), "");
  EXPECT_EQ(TrimSpace(""), "");
  EXPECT_EQ(TrimSpace("\xc2\xa0x"), "\xc2\xa0x");  // not ASCII: kept
  const std::string s = " key = v ";
  const std::string_view t = TrimSpace(s);
  EXPECT_EQ(t.data(), s.data() + 1);  // a view into the input
}

TEST(StringsTest, ParseDecimalTakesOnlyWholeUnsignedDecimals) {
  uint64_t v = 7;
  EXPECT_TRUE(ParseDecimal("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(ParseDecimal("1048576", &v));
  EXPECT_EQ(v, 1048576u);
  EXPECT_TRUE(ParseDecimal("18446744073709551615", &v));
  EXPECT_EQ(v, UINT64_MAX);
  EXPECT_TRUE(ParseDecimal("000012", &v));
  EXPECT_EQ(v, 12u);
  v = 7;
  for (std::string_view bad : {"", "18446744073709551616", "99999999999999999999999", "-1", "+1",
                               " 1", "1 ", "1.5", "0x10", "12a", "a12"}) {
    EXPECT_FALSE(ParseDecimal(bad, &v)) << bad;
    EXPECT_EQ(v, 7u) << bad << ": *out must stay as it was";
  }
}

TEST(StringsTest, ParentDirOfAbsolutePaths) {
  EXPECT_EQ(ParentDir("/a/b/c"), "/a/b");
  EXPECT_EQ(ParentDir("/a"), "/");
  EXPECT_EQ(ParentDir("/"), "/");
  EXPECT_EQ(ParentDir("a"), "/");
}

TEST(StringsTest, JoinPathAndSplitPathAreInverse) {
  EXPECT_EQ(JoinPath("", "c"), "c");
  EXPECT_EQ(JoinPath("a/b", "c"), "a/b/c");
  EXPECT_EQ(SplitPath("a/b/c"), std::make_pair(std::string_view("a/b"), std::string_view("c")));
  EXPECT_EQ(SplitPath("c"), std::make_pair(std::string_view(), std::string_view("c")));
  EXPECT_EQ(SplitPath(""), std::make_pair(std::string_view(), std::string_view()));
  for (std::string_view p : {"c", "a/c", "a/b/c", "d e/f.jpg"}) {
    const auto [dir, name] = SplitPath(p);
    EXPECT_EQ(JoinPath(dir, name), p);
  }
}

// The byte order every format of tierfs stores (tiercache/FORMAT.md, metastore/FORMAT.md).
TEST(CodingTest, FixedWidthIntegersAreLittleEndian) {
  std::string s;
  PutFixed32(&s, 0x01020304u);
  PutFixed64(&s, 0x0102030405060708ull);
  ASSERT_EQ(s, std::string("\x04\x03\x02\x01\x08\x07\x06\x05\x04\x03\x02\x01", 12));
  EXPECT_EQ(DecodeFixed32(s.data()), 0x01020304u);
  EXPECT_EQ(DecodeFixed64(s.data() + 4), 0x0102030405060708ull);
  std::byte b[8];
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0xff}, uint64_t{1} << 63, UINT64_MAX}) {
    EncodeFixed64(b, v);
    EXPECT_EQ(DecodeFixed64(b), v);
    EncodeFixed32(b, static_cast<uint32_t>(v));
    EXPECT_EQ(DecodeFixed32(b), static_cast<uint32_t>(v));
  }
  EncodeFixed32(b, 0x80000000u);  // the high bit of the last byte, not a sign
  EXPECT_EQ(b[3], std::byte{0x80});
}

// Whatever a message quotes, the log gets one printable line: the sink escapes control bytes.
TEST(LoggingTest, SinkEscapesControlCharacters) {
  char tmpl[] = "/tmp/tierfs-log-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::string err;
  ASSERT_TRUE(ConfigureLogging(LogOptions{"info", tmpl}, &err)) << err;
  Logger(Module::kBase).warn("key '{}' failed", "evil\n2026-01-01 [error] forged\x1b[2J");
  Logger(Module::kBase).warn("plain line");
  Logger(Module::kBase).flush();
  ASSERT_TRUE(ConfigureLogging(LogOptions{"info", "stderr"}, &err)) << err;
  std::ifstream in(tmpl);
  std::stringstream ss;
  ss << in.rdbuf();
  ::unlink(tmpl);
  const std::string text = ss.str();
  EXPECT_NE(text.find("key 'evil\\n2026-01-01 [error] forged\\x1b[2J' failed"), std::string::npos)
      << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// format "json": one object per line with time, level, thread, logger and message, escaped so a
// JSON parser reads back exactly what was logged.
TEST(LoggingTest, JsonLinesParseBack) {
  char tmpl[] = "/tmp/tierfs-log-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::string err;
  ASSERT_TRUE(ConfigureLogging(LogOptions{"info", tmpl, "json"}, &err)) << err;
  Logger(Module::kDaemon).warn("quote \" backslash \\ tab\t{}", "caf\xc3\xa9");
  Logger(Module::kFuse).info("bad utf8 \xff end");
  Logger(Module::kFuse).debug("not at info");
  ASSERT_TRUE(ConfigureLogging(LogOptions{"info", "stderr"}, &err)) << err;
  const std::string text = ReadAll(tmpl);
  ::unlink(tmpl);
  std::vector<nlohmann::json> lines;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u) << text;
  EXPECT_EQ(lines[0]["level"], "warning");
  EXPECT_EQ(lines[0]["logger"], "daemon");
  // The tab is a control character: the sink escapes the message (EscapeForLog: \t, and \\ for
  // a backslash) before JSON does its own escaping.
  EXPECT_EQ(lines[0]["message"], "quote \" backslash \\\\ tab\\tcaf\xc3\xa9");
  EXPECT_TRUE(lines[0]["thread"].is_number_unsigned());
  const std::string time = lines[0]["time"];
  EXPECT_EQ(time.size(), 27u) << time;  // 2026-11-30T14:03:08.123456Z
  EXPECT_EQ(time.back(), 'Z');
  EXPECT_EQ(lines[1]["message"], "bad utf8 \xef\xbf\xbd end");  // U+FFFD, not an exception
  EXPECT_FALSE(ConfigureLogging(LogOptions{"info", "stderr", "xml"}, &err));
}

TEST(LoggingTest, LevelChangesAtRunTimeAndFileReopens) {
  const ::tierfs::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/t.log";
  std::string err;
  ASSERT_TRUE(ConfigureLogging(LogOptions{"info", path}, &err)) << err;
  Logger(Module::kTierCache).debug("hidden");
  SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "hidden macro");
  ASSERT_OK(SetLogLevel("debug"));
  EXPECT_EQ(CurrentLogLevel(), "debug");
  EXPECT_EQ(CurrentLogOptions().level, "debug");
  // Compiled into release builds (SPDLOG_ACTIVE_LEVEL is DEBUG).
  SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "shown macro");
  EXPECT_FALSE(SetLogLevel("loud").ok());
  EXPECT_EQ(CurrentLogLevel(), "debug");
  // logrotate: the file is moved away, then SIGHUP → ReopenLogFile.
  ASSERT_EQ(::rename(path.c_str(), (path + ".1").c_str()), 0);
  Logger(Module::kTierCache).info("still to the moved file");
  ASSERT_OK(ReopenLogFile());
  Logger(Module::kTierCache).info("to the new file");
  ASSERT_OK(SetLogLevel("info"));
  ASSERT_TRUE(ConfigureLogging(LogOptions{"info", "stderr"}, &err)) << err;
  EXPECT_OK(ReopenLogFile());  // stderr: nothing to do
  const std::string old_text = ReadAll(path + ".1");
  const std::string new_text = ReadAll(path);
  EXPECT_EQ(old_text.find("hidden"), std::string::npos) << old_text;
  EXPECT_NE(old_text.find("shown macro"), std::string::npos) << old_text;
  EXPECT_NE(old_text.find("still to the moved file"), std::string::npos) << old_text;
  EXPECT_EQ(new_text.find("still"), std::string::npos) << new_text;
  EXPECT_NE(new_text.find("to the new file"), std::string::npos) << new_text;
}

TEST(ClockTest, FakeClockAdvances) {
  FakeClock c(1000);
  EXPECT_EQ(c.NowUnixNanos(), 1000);
  c.Advance(5s);
  EXPECT_EQ(c.NowUnixNanos(), 1000 + 5'000'000'000LL);
  EXPECT_EQ(c.MonotonicNanos(), 5'000'000'000LL);
  Clock* real = SystemClock();
  int64_t a = real->MonotonicNanos();
  int64_t b = real->MonotonicNanos();
  EXPECT_LE(a, b);
}

TEST(MutexTest, CondVarHandsOff) {
  Mutex mu;
  CondVar cv(&mu);
  int value = 0;
  std::thread t([&] {
    MutexLock l(&mu);
    value = 1;
    cv.SignalAll();
  });
  {
    MutexLock l(&mu);
    while (value == 0) cv.Wait();
  }
  t.join();
  EXPECT_EQ(value, 1);
}

// Whether `fd` is an open descriptor of this process.
bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFdTest, ClosesOnceAndHandsOwnershipOn) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  const int r = pipe_fds[0], w = pipe_fds[1];
  {
    UniqueFd a(r);
    UniqueFd b(std::move(a));  // a gives it up: only b closes it
    EXPECT_EQ(a.get(), -1);
    EXPECT_EQ(b.get(), r);
    UniqueFd c(w);
    c = std::move(b);  // closes w, takes r
    EXPECT_FALSE(IsOpen(w));
    EXPECT_EQ(c.get(), r);
    EXPECT_TRUE(IsOpen(r));
  }
  EXPECT_FALSE(IsOpen(r));  // closed by c alone, once

  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  {
    UniqueFd kept(pipe_fds[0]);
    EXPECT_EQ(kept.release(), pipe_fds[0]);
    EXPECT_EQ(kept.get(), -1);
    UniqueFd reset(pipe_fds[1]);
    reset.Reset();
    EXPECT_EQ(reset.get(), -1);
    EXPECT_FALSE(IsOpen(pipe_fds[1]));
  }
  EXPECT_TRUE(IsOpen(pipe_fds[0]));  // released: the caller's to close
  ::close(pipe_fds[0]);
}

}  // namespace
}  // namespace tierfs
