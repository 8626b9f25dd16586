// tierfs-csi: the Kubernetes CSI node plug-in of tierfs. Serves the CSI Identity and Node services
// on a unix socket and runs one `tierfs mount` daemon per distinct volume on the node.
//   tierfs-csi --endpoint unix:///csi/csi.sock --node-id NODE [--state-dir DIR] [--cache-dir DIR]
//              [--tierfs PATH] [--file-root DIR]
#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <thread>

#include "base/fd.h"
#include "base/strings.h"
#include "base/version.h"
#include "csi/csi_server.h"
#include "csi/node_driver.h"

namespace {

// Creates `dir` and holds an exclusive flock on DIR/lock (naming this PID) in *lock.
tierfs::Status LockStateDir(const std::string& dir, tierfs::csi::NodeOps* ops,
                            tierfs::UniqueFd* lock) {
  if (dir.empty() || dir[0] != '/') {
    return tierfs::Status::InvalidArgument("--state-dir must be an absolute path");
  }
  TIERFS_RETURN_IF_ERROR(ops->MakeDirs(dir, 0700));
  const std::string path = dir + "/lock";
  tierfs::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) return tierfs::Status::FromErrno(errno, "opening " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    (void)!::pread(fd.get(), buf, sizeof(buf) - 1, 0);
    return tierfs::Status::Unavailable(fmt::format(
        "another tierfs-csi (pid {}) uses the state directory {}", tierfs::TrimSpace(buf), dir));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), pid.data(), pid.size(), 0) < 0) {
    return tierfs::Status::FromErrno(errno, "writing " + path);
  }
  *lock = std::move(fd);
  return tierfs::Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tierfs::csi;
  CLI::App app{
      "tierfs-csi: the CSI node plug-in of tierfs. Publishes read-only tierfs volumes into pods: "
      "one tierfs daemon per distinct source, endpoint, region, options and credentials on the "
      "node, shared by every pod that mounts it. See docs/kubernetes.md."};
  CsiServerOptions server_options;
  NodeDriverOptions driver_options;
  SystemNodeOpsOptions ops_options;
  app.add_option("--endpoint", server_options.endpoint, "CSI socket, unix:///ABSOLUTE/PATH")
      ->required();
  app.add_option("--node-id", server_options.node_id, "This node's name (NodeGetInfo)")->required();
  app.add_option("--state-dir", driver_options.state_dir,
                 "State file, daemons' mount points and logs")
      ->capture_default_str();
  app.add_option("--cache-dir", driver_options.cache_root,
                 "Root of the daemons' cache directories (one per volume key)")
      ->capture_default_str();
  app.add_option("--tierfs", ops_options.tierfs_binary, "The tierfs binary")->capture_default_str();
  app.add_option("--file-root", driver_options.file_root,
                 "Allow file:// sources at or below this directory (default: none allowed)");
  app.add_option("--start-timeout", ops_options.start_timeout_seconds,
                 "Seconds a daemon may take to report its mount ready")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  app.set_version_flag("--version", std::string(tierfs::Version()));
  CLI11_PARSE(app, argc, argv);

  // One line per event on stderr (the container's log); the daemons log to STATE_DIR/log/.
  spdlog::set_default_logger(spdlog::stderr_color_mt("tierfs-csi"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  // SIGTERM/SIGINT end the server; the daemons keep serving their pods (a restarted driver finds
  // them again). Blocked before any thread starts, so only the waiter below receives them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (tierfs::Status s = CheckCsiServerOptions(server_options); !s.ok()) {
    std::fprintf(stderr, "tierfs-csi: %s\n", s.message().c_str());
    return 2;
  }
  std::unique_ptr<NodeOps> ops = NewSystemNodeOps(ops_options);
  // One plug-in per state directory: a second one would fight over the daemons and the state.
  tierfs::UniqueFd lock;
  if (tierfs::Status s = LockStateDir(driver_options.state_dir, ops.get(), &lock); !s.ok()) {
    std::fprintf(stderr, "tierfs-csi: %s\n", s.ToString().c_str());
    return 1;
  }
  auto driver = NodeDriver::Open(driver_options, ops.get());
  if (!driver.ok()) {
    std::fprintf(stderr, "tierfs-csi: %s\n", driver.status().ToString().c_str());
    return 1;
  }
  auto server = StartCsiServer(server_options, driver->get());
  if (!server.ok()) {
    std::fprintf(stderr, "tierfs-csi: %s\n", server.status().ToString().c_str());
    return 1;
  }
  spdlog::info("tierfs-csi {} serving {} on {} (node {}, state {})", tierfs::Version(), kDriverName,
               server_options.endpoint, server_options.node_id, driver_options.state_dir);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    spdlog::info("signal {}: stopping the server (the daemons keep running)", sig);
    (*server)->Shutdown();
  });
  (*server)->Wait();
  waiter.join();
  return 0;
}
