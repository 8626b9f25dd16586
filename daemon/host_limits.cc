#include "daemon/host_limits.h"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>

#include "base/strings.h"
#include "base/units.h"

namespace tierfs {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A limit file's value: bytes, or 0 for "max", unreadable or unparsable.
uint64_t LimitValue(const std::string& path) {
  std::string text = ReadSmallFile(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return 0;
  return v;
}

}  // namespace

uint64_t CgroupMemoryLimit(const std::string& proc_self_cgroup, const std::string& cgroup_root,
                           std::string* where) {
  uint64_t best = 0;
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "0::/PATH" (v2) or "N:memory:/PATH" (v1, controllers separated by commas).
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string dir;
    std::string file;
    if (controllers.empty()) {
      dir = cgroup_root;
      file = "memory.max";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      dir = cgroup_root + "/memory";
      file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    std::string path = line.substr(b + 1);
    while (!path.empty() && path.back() == '/') path.pop_back();
    for (;;) {
      const uint64_t v = LimitValue(dir + path + "/" + file);
      // cgroup v1 says "no limit" with a huge number (PAGE_COUNTER_MAX pages).
      if (v != 0 && v < (uint64_t{1} << 60) && (best == 0 || v < best)) {
        best = v;
        if (where != nullptr) *where = dir + path + "/" + file;
      }
      if (path.empty()) break;
      path = std::string(SplitPath(path).first);
    }
  }
  return best;
}

HostLimits ReadHostLimits(const std::string& cache_dir) {
  HostLimits h;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    h.memory_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    h.memory_what = "physical memory";
  }
  std::string where;
  const uint64_t cg =
      CgroupMemoryLimit(ReadSmallFile("/proc/self/cgroup"), "/sys/fs/cgroup", &where);
  if (cg != 0 && (h.memory_bytes == 0 || cg < h.memory_bytes)) {
    h.memory_bytes = cg;
    h.memory_what = "the cgroup memory limit (" + where + ")";
  }
  // The nearest existing directory: the cache directory may not exist yet.
  std::string dir = cache_dir.empty() ? "/" : cache_dir;
  struct statvfs vfs;
  while (::statvfs(dir.c_str(), &vfs) != 0 && dir != "/") {
    dir = std::string(ParentDir(dir));
  }
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    h.cache_fs_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    h.cache_fs_path = dir;
  }
  return h;
}

Status CheckMemorySizes(const DaemonOptions& o, const HostLimits& host) {
  if (host.memory_bytes == 0) return Status::OK();
  struct Budget {
    const char* key;
    uint64_t bytes;
    const char* hint;
  };
  const Budget budgets[] = {
      {"cache.l1_size (--l1-size)", o.l1.capacity_bytes,
       "L1 is memory: give it at most a part of that (the kernel, the page cache and the jobs "
       "need the rest)"},
      {"cache.readahead_budget", o.cache.readahead_budget_bytes,
       "it is the memory of the blocks being read ahead"},
      {"cache.prefetch_job_memory", o.prefetch_jobs.memory_budget,
       "it is the memory of the blocks prefetch jobs hold"},
  };
  for (const Budget& b : budgets) {
    if (b.bytes <= host.memory_bytes) continue;
    return Status::InvalidArgument(fmt::format("{}: {} is more than {} ({}); {}", b.key,
                                               FormatSize(b.bytes), host.memory_what,
                                               FormatSize(host.memory_bytes), b.hint));
  }
  return Status::OK();
}

std::string L2SizeWarning(uint64_t l2_bytes, const std::string& cache_dir, const HostLimits& host) {
  if (host.cache_fs_bytes == 0 || l2_bytes <= host.cache_fs_bytes) return "";
  return fmt::format(
      "cache.l2_size (--l2-size): {} is more than the whole file system of the cache directory "
      "{} ({} at {}); L2 stops short of it, where the file system keeps cache.l2_min_free free",
      FormatSize(l2_bytes), cache_dir, FormatSize(host.cache_fs_bytes), host.cache_fs_path);
}

}  // namespace tierfs
