#include "daemon/prefetch_cli.h"

#include <fmt/format.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "base/units.h"
#include "daemon/mounts.h"

namespace tierfs {
namespace {

constexpr const char* kAttr = "user.tierfs.prefetch";
constexpr const char* kListAttr = "user.tierfs.prefetch_list";

bool ParsePair(std::string_view v, uint64_t* a, uint64_t* b) {
  size_t slash = v.find('/');
  if (slash == std::string_view::npos) return false;
  auto r1 = std::from_chars(v.data(), v.data() + slash, *a);
  auto r2 = std::from_chars(v.data() + slash + 1, v.data() + v.size(), *b);
  return r1.ec == std::errc() && r1.ptr == v.data() + slash && r2.ec == std::errc() &&
         r2.ptr == v.data() + v.size();
}

bool GetStatus(const std::string& path, const char* attr, std::string* out) {
  char buf[1024];
  ssize_t n = getxattr(path.c_str(), attr, buf, sizeof(buf));
  if (n < 0) {
    std::fprintf(stderr, "tierfs prefetch: getxattr %s on %s: %s\n", attr, path.c_str(),
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

const char* SetErrorHint(int err) {
  return err == ENOTSUP                  ? " (not on a tierfs mount?)"
         : err == EPERM || err == EACCES ? " (only root and the user who mounted may start or "
                                           "cancel prefetch jobs, and members of the mount's "
                                           "control group, tierfs mount --control-group)"
         : err == ENOSPC ? " (this user has as many prefetch jobs, or files in the list job, "
                           "queued as one user may; wait for them or cancel one)"
                         : "";
}

// Polls `attr` of `path` until its job finished; false if it did not end "done".
bool WaitForJob(const std::string& path, const char* attr, const std::string& label,
                const PrefetchCliOptions& o) {
  const bool tty = isatty(STDOUT_FILENO) != 0;
  std::string last;
  PrefetchProgress prog, first;
  bool have_first = false;
  const auto t0 = std::chrono::steady_clock::now();
  bool ok = true;
  while (true) {
    std::string text;
    if (!GetStatus(path, attr, &text)) {
      ok = false;
      break;
    }
    prog = PrefetchProgress{};
    if (!ParsePrefetchProgress(text, &prog)) {
      std::fprintf(stderr, "tierfs prefetch: unexpected status of %s: %s\n", label.c_str(),
                   text.c_str());
      ok = false;
      break;
    }
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    if (!have_first) {
      first = prog;
      have_first = true;
    }
    if (tty) {
      std::printf("\r%s %s %s/%s files %llu/%llu %s %-9s", label.c_str(), Bar(prog, 30).c_str(),
                  FormatSize(prog.bytes_done).c_str(), FormatSize(prog.bytes_total).c_str(),
                  static_cast<unsigned long long>(prog.files_done),
                  static_cast<unsigned long long>(prog.files_total),
                  FormatPrefetchRate(first, prog, elapsed).c_str(), prog.state.c_str());
      std::fflush(stdout);
    } else if (text != last) {
      std::printf("%s: %s\n", label.c_str(), text.c_str());
      std::fflush(stdout);
    }
    last = text;
    if (Finished(prog.state)) break;
    std::this_thread::sleep_for(o.poll_interval);
  }
  if (tty) std::printf("\n");
  if (ok && have_first) {
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    const double secs = std::chrono::duration<double>(elapsed).count();
    std::printf(
        "%s: %s, %llu files, %s in %.1fs (%.1f MB/s, %.0f files/s)\n", label.c_str(),
        prog.state.c_str(), static_cast<unsigned long long>(prog.files_done),
        FormatSize(prog.bytes_done - std::min(prog.bytes_done, first.bytes_done)).c_str(), secs,
        secs > 0 ? (prog.bytes_done - std::min(prog.bytes_done, first.bytes_done)) / secs / 1e6
                 : 0.0,
        secs > 0 ? (prog.files_done - std::min(prog.files_done, first.files_done)) / secs : 0.0);
  }
  if (ok && prog.state != "done") {
    if (prog.state == "failed" || prog.state == "cancelled") {
      std::fprintf(stderr, "tierfs prefetch: %s: %s\n", label.c_str(), last.c_str());
    }
    ok = false;
  }
  return ok;
}

// Reads the list (a file, or stdin for "-"): one path per line, empty lines skipped.
bool ReadList(const std::string& file, std::vector<std::string>* out) {
  std::FILE* f = file == "-" ? stdin : std::fopen(file.c_str(), "r");
  if (f == nullptr) {
    std::fprintf(stderr, "tierfs prefetch: --from-file %s: %s\n", file.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::string line;
  int c;
  while ((c = std::fgetc(f)) != EOF) {
    if (c == '\n') {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) out->push_back(std::move(line));
      line.clear();
    } else {
      line.push_back(static_cast<char>(c));
    }
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (!line.empty()) out->push_back(std::move(line));
  const bool err = std::ferror(f) != 0;
  if (f != stdin) std::fclose(f);
  if (err) {
    std::fprintf(stderr, "tierfs prefetch: --from-file %s: read error\n", file.c_str());
    return false;
  }
  return true;
}

// The paths of a list as paths relative to the one tierfs mount they are on (`*mountpoint_out`,
// from the first path); false, the reason printed, when one cannot be resolved or is elsewhere.
bool ListOnOneMount(const std::vector<std::string>& lines, std::string* mountpoint_out,
                    std::vector<std::string>* rel) {
  // Canonical parent directories (symlinks resolved once per directory, not once per file).
  std::map<std::string, std::string> canon_dirs;
  std::string& mountpoint = *mountpoint_out;
  rel->reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::filesystem::path abs = std::filesystem::absolute(lines[i]).lexically_normal();
    const std::string dir = abs.parent_path().string();
    auto it = canon_dirs.find(dir);
    if (it == canon_dirs.end()) {
      std::error_code ec;
      std::string c = std::filesystem::canonical(dir, ec).string();
      if (ec) {
        std::fprintf(stderr, "tierfs prefetch: line %zu: %s: %s\n", i + 1, dir.c_str(),
                     ec.message().c_str());
        return false;
      }
      if (mountpoint.empty()) {
        auto m = TierfsMountOf(c);
        if (!m.ok()) {
          std::fprintf(stderr, "tierfs prefetch: line %zu: %s\nnothing was started\n", i + 1,
                       m.status().message().c_str());
          return false;
        }
        mountpoint = std::filesystem::canonical(m->mountpoint, ec).string();
        if (ec) mountpoint = m->mountpoint;
      }
      it = canon_dirs.emplace(dir, std::move(c)).first;
    }
    const std::string& c = it->second;
    std::string r;
    if (c == mountpoint) {
      r = abs.filename().string();
    } else if (c.starts_with(mountpoint + "/") || mountpoint == "/") {
      r = c.substr(mountpoint == "/" ? 1 : mountpoint.size() + 1) + "/" + abs.filename().string();
    } else {
      std::fprintf(stderr,
                   "tierfs prefetch: line %zu: %s is not on the tierfs mount %s (one mount per "
                   "list)\nnothing was started\n",
                   i + 1, lines[i].c_str(), mountpoint.c_str());
      return false;
    }
    rel->push_back(std::move(r));
  }
  return true;
}

// The list job: every path must be a file on one tierfs mount; handed over in bulk.
int RunFromFile(const PrefetchCliOptions& o) {
  std::vector<std::string> lines;
  if (!ReadList(o.from_file, &lines)) return 2;
  if (lines.empty()) {
    std::fprintf(stderr, "tierfs prefetch: --from-file %s: no path in it\n", o.from_file.c_str());
    return 2;
  }
  std::string mountpoint;
  std::vector<std::string> rel;
  if (!ListOnOneMount(lines, &mountpoint, &rel)) return 2;
  if (o.cancel) {
    if (setxattr(mountpoint.c_str(), kListAttr, "cancel", 6, 0) != 0) {
      const int err = errno;
      std::fprintf(stderr, "tierfs prefetch: cancel the list of %s: %s%s\n", mountpoint.c_str(),
                   std::strerror(err), SetErrorHint(err));
      return 1;
    }
    std::printf("%s: list cancelled\n", mountpoint.c_str());
    return 0;
  }
  const std::vector<std::string> values = PrefetchListValues(rel, o.tier);
  size_t sent = 0;
  for (const std::string& v : values) {
    const size_t n = static_cast<size_t>(std::count(v.begin(), v.end(), '\n'));
    if (setxattr(mountpoint.c_str(), kListAttr, v.data(), v.size(), 0) != 0) {
      const int err = errno;
      std::fprintf(stderr, "tierfs prefetch: queue files %zu-%zu of the list on %s: %s%s\n",
                   sent + 1, sent + n - 1, mountpoint.c_str(), std::strerror(err),
                   err == EINVAL ? " (a path that is not a file on the mount, or a --tier other "
                                   "than that of the running list job; the daemon log names it)"
                                 : SetErrorHint(err));
      if (sent > 0) std::fprintf(stderr, "tierfs prefetch: the first %zu files are queued\n", sent);
      return 1;
    }
    sent += n - 1;  // minus the tier line
  }
  if (!o.wait) {
    std::printf("%s: %zu files queued\n", mountpoint.c_str(), sent);
    return 0;
  }
  return WaitForJob(mountpoint, kListAttr, mountpoint + " (list)", o) ? 0 : 1;
}

}  // namespace

std::vector<std::string> PrefetchListValues(const std::vector<std::string>& rel_paths,
                                            std::string_view tier, size_t max_bytes) {
  std::vector<std::string> out;
  const std::string head = fmt::format("tier={}\n", tier);
  std::string cur = head;
  for (const std::string& p : rel_paths) {
    if (cur.size() > head.size() && cur.size() + p.size() + 1 > max_bytes) {
      out.push_back(std::move(cur));
      cur = head;
    }
    cur += p;
    cur += '\n';
  }
  if (cur.size() > head.size()) out.push_back(std::move(cur));
  return out;
}

std::string FormatPrefetchRate(const PrefetchProgress& start, const PrefetchProgress& now,
                               std::chrono::nanoseconds elapsed) {
  const double secs = std::chrono::duration<double>(elapsed).count();
  if (secs < 0.5 || now.bytes_done < start.bytes_done || now.files_done < start.files_done) {
    return "";
  }
  const double bps = (now.bytes_done - start.bytes_done) / secs;
  const double fps = (now.files_done - start.files_done) / secs;
  std::string eta = "-";
  if (bps > 0 && now.bytes_total >= now.bytes_done) {
    eta = FormatDuration(
        std::chrono::seconds(static_cast<int64_t>((now.bytes_total - now.bytes_done) / bps + 0.5)));
  }
  return fmt::format("{}/s {:.0f} files/s ETA {}", FormatSize(static_cast<uint64_t>(bps)), fps,
                     eta);
}

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
  if (!o.from_file.empty()) {
    if (!paths.empty()) {
      std::fprintf(stderr, "tierfs prefetch: give either PATH arguments or --from-file\n");
      return 2;
    }
    return RunFromFile(o);
  }
  if (paths.empty()) {
    std::fprintf(stderr, "tierfs prefetch: no PATH given (or --from-file LIST)\n");
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
                   p.c_str(), std::strerror(err), SetErrorHint(err));
      rc = 1;
      continue;
    }
    started.push_back(p);
    if (!o.wait) std::printf("%s: %s\n", p.c_str(), o.cancel ? "cancelled" : "queued");
  }
  if (!o.wait || o.cancel) return rc;
  for (const auto& p : started) {
    if (!WaitForJob(p, kAttr, p, o)) rc = 1;
  }
  return rc;
}

}  // namespace tierfs
