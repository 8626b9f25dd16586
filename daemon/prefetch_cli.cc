#include "daemon/prefetch_cli.h"

#include <fmt/format.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/units.h"
#include "daemon/mounts.h"

namespace tierfs {
namespace {

constexpr const char* kAttr = "user.tierfs.prefetch";

bool ParsePair(std::string_view v, uint64_t* a, uint64_t* b) {
  size_t slash = v.find('/');
  if (slash == std::string_view::npos) return false;
  auto r1 = std::from_chars(v.data(), v.data() + slash, *a);
  auto r2 = std::from_chars(v.data() + slash + 1, v.data() + v.size(), *b);
  return r1.ec == std::errc() && r1.ptr == v.data() + slash && r2.ec == std::errc() &&
         r2.ptr == v.data() + v.size();
}

bool GetStatus(const std::string& path, std::string* out) {
  char buf[1024];
  ssize_t n = getxattr(path.c_str(), kAttr, buf, sizeof(buf));
  if (n < 0) {
    std::fprintf(stderr, "tierfs prefetch: getxattr %s on %s: %s\n", kAttr, path.c_str(),
                 std::strerror(errno));
    return false;
  }
  out->assign(buf, static_cast<size_t>(n));
  return true;
}

bool Finished(const std::string& state) {
  return state == "done" || state == "failed" || state == "cancelled" || state == "none";
}

std::string Bar(const PrefetchProgress& p, int width) {
  const double f = p.bytes_total == 0 ? (p.state == "done" ? 1.0 : 0.0)
                                      : static_cast<double>(p.bytes_done) / p.bytes_total;
  const int full = static_cast<int>(f * width);
  std::string bar(static_cast<size_t>(full), '#');
  bar.append(static_cast<size_t>(width - full), '.');
  return fmt::format("[{}] {:5.1f}%", bar, 100.0 * f);
}

}  // namespace

bool ParsePrefetchProgress(std::string_view value, PrefetchProgress* out) {
  bool has_state = false, has_files = false, has_bytes = false;
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t sp = value.find(' ', pos);
    if (sp == std::string_view::npos) sp = value.size();
    std::string_view tok = value.substr(pos, sp - pos);
    pos = sp + 1;
    if (tok.starts_with("state=")) {
      out->state = std::string(tok.substr(6));
      has_state = !out->state.empty();
    } else if (tok.starts_with("files=")) {
      has_files = ParsePair(tok.substr(6), &out->files_done, &out->files_total);
    } else if (tok.starts_with("bytes=")) {
      has_bytes = ParsePair(tok.substr(6), &out->bytes_done, &out->bytes_total);
    }
    if (sp == value.size()) break;
  }
  return has_state && has_files && has_bytes;
}

int RunPrefetchCli(const std::vector<std::string>& paths, const PrefetchCliOptions& o) {
  if (!o.cancel && o.tier != "l1" && o.tier != "l2" && o.tier != "l3") {
    std::fprintf(stderr, "tierfs prefetch: --tier must be l1, l2 or l3 (got '%s')\n",
                 o.tier.c_str());
    return 2;
  }
  // Every path must be on a tierfs mount before anything is set: on another file system a
  // user.* attribute would be stored there (and "queued" would be a lie).
  bool refused = false;
  for (const auto& p : paths) {
    auto m = TierfsMountOf(p);
    if (!m.ok()) {
      std::fprintf(stderr, "tierfs prefetch: %s\n", m.status().message().c_str());
      refused = true;
    }
  }
  if (refused) {
    std::fprintf(stderr, "tierfs prefetch: nothing was started\n");
    return 2;
  }
  const std::string value = o.cancel ? "cancel" : o.tier;
  int rc = 0;
  std::vector<std::string> started;
  for (const auto& p : paths) {
    if (setxattr(p.c_str(), kAttr, value.data(), value.size(), 0) != 0) {
      const int err = errno;
      std::fprintf(stderr, "tierfs prefetch: %s %s: %s%s\n", o.cancel ? "cancel" : "start",
                   p.c_str(), std::strerror(err),
                   err == ENOTSUP                  ? " (not on a tierfs mount?)"
                   : err == EPERM || err == EACCES ? " (only root and the user who mounted may "
                                                     "start or cancel prefetch jobs)"
                                                   : "");
      rc = 1;
      continue;
    }
    started.push_back(p);
    if (!o.wait) std::printf("%s: %s\n", p.c_str(), o.cancel ? "cancelled" : "queued");
  }
  if (!o.wait || o.cancel) return rc;

  const bool tty = isatty(STDOUT_FILENO) != 0;
  for (const auto& p : started) {
    std::string last;
    PrefetchProgress prog;
    while (true) {
      std::string text;
      if (!GetStatus(p, &text)) {
        rc = 1;
        break;
      }
      prog = PrefetchProgress{};
      if (!ParsePrefetchProgress(text, &prog)) {
        std::fprintf(stderr, "tierfs prefetch: unexpected status of %s: %s\n", p.c_str(),
                     text.c_str());
        rc = 1;
        break;
      }
      if (tty) {
        std::printf("\r%s %s %s/%s files %llu/%llu %-9s", p.c_str(), Bar(prog, 30).c_str(),
                    FormatSize(prog.bytes_done).c_str(), FormatSize(prog.bytes_total).c_str(),
                    static_cast<unsigned long long>(prog.files_done),
                    static_cast<unsigned long long>(prog.files_total), prog.state.c_str());
        std::fflush(stdout);
      } else if (text != last) {
        std::printf("%s: %s\n", p.c_str(), text.c_str());
        std::fflush(stdout);
      }
      last = text;
      if (Finished(prog.state)) break;
      std::this_thread::sleep_for(o.poll_interval);
    }
    if (tty) std::printf("\n");
    if (prog.state != "done") {
      if (prog.state == "failed" || prog.state == "cancelled") {
        std::fprintf(stderr, "tierfs prefetch: %s: %s\n", p.c_str(), last.c_str());
      }
      rc = 1;
    }
  }
  return rc;
}

}  // namespace tierfs
