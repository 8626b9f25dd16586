// fuse/internal/context — what every handler of the FUSE adapter shares: the server's Context
// (fuse_req_userdata of every request), the operations timed for the request metrics, and the
// timer that observes them. Internal to fuse/.
//
// Thread-safety: the Context's plain fields are set by FuseServer::Mount (`se` by the Session,
// `remote` by FuseServer::Run) before the session serves a request, and constant after; the
// atomics change while it serves; `io` is guarded by io_mu; the Filesystem and RemoteWork are
// thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/metrics.h"
#include "base/mutex.h"
#include "fuse/fuse_server.h"
#include "fuse/internal/handover.h"
#include "fuse/internal/libfuse.h"
#include "fuse/internal/remote_work.h"

namespace tierfs {

class Filesystem;

namespace fuse_internal {

// The kernel's max_background (see InitConnection).
constexpr unsigned kMaxBackground = 1024;

// The operations timed for tierfs_fuse_request_duration_seconds{op}; the label is the name
// libfuse's fuse_lowlevel_ops gives the handler.
enum class Op : uint8_t {
  kLookup,
  kForget,
  kGetAttr,
  kOpenDir,
  kReadDir,
  kReadDirPlus,
  kReleaseDir,
  kOpen,
  kRead,
  kRelease,
  kStatFs,
  kGetXattr,
  kListXattr,
  kSetXattr,
  kRemoveXattr,
  kCount,
};
constexpr std::array<const char*, static_cast<size_t>(Op::kCount)> kOpNames = {
    "lookup", "forget",  "getattr", "opendir",  "readdir",   "readdirplus", "releasedir", "open",
    "read",   "release", "statfs",  "getxattr", "listxattr", "setxattr",    "removexattr"};

}  // namespace fuse_internal

struct FuseServer::Context {
  // Per-op latency histograms (empty without FuseOptions::metrics), and their registration.
  std::vector<std::unique_ptr<metrics::Histogram>> op_latency;
  metrics::Registry::Registration metrics_reg;  // reset first in ~FuseServer
  // Set before the session serves (FuseServer::Mount, or Attach after TakeOver); replaced only
  // while every reader is parked (a failed handover's restore, Session::Release).
  Filesystem* fs = nullptr;
  // Crash resume (Session::LogStateTo): before a reply hands the kernel an inode or a handle,
  // the supervisor gets the state that holds it. Set before the loop runs; null without one.
  std::function<void()> log_state;
  void LogState() const {
    if (log_state) log_state();
  }
  // The session (fuse_internal::Session owns it), for notifications and the backing-file
  // ioctls: set once it exists, before the loop runs.
  fuse_session* se = nullptr;
  std::unique_ptr<fuse_internal::RemoteWork> remote;  // made by FuseServer::Run
  std::string mountpoint;
  double entry_timeout = 60;
  double attr_timeout = 60;
  double negative_timeout = 60;
  uint32_t max_read = 1U << 20;
  uint32_t max_readahead = 1U << 20;
  unsigned max_background = 12;    // the kernel's default
  bool open_in_kernel = false;     // FuseOptions::open_in_kernel
  uint64_t store_on_open_max = 0;  // FuseOptions::store_on_open_max
  // open_in_kernel and the kernel offers it: opens are answered ENOSYS. Set by InitConnection,
  // before any open arrives.
  std::atomic<bool> no_open{false};
  // The largest pipe this process can have (ProbeSplicePipe, at Mount).
  size_t pipe_bytes = 0;
  // The largest pipe libfuse can splice a reply through (0: no splicing): pipe_bytes, set by
  // InitConnection when the kernel offers splicing. A reply from cache files that needs more is
  // copied by ReplyFromFilesCopied instead.
  std::atomic<size_t> splice_pipe_bytes{0};

  // ---- the INIT of the connection (fuse/internal/kernel_protocol.h) ----
  // Written by the custom I/O's read of INIT, read by its writev of the reply (libfuse handles
  // INIT on one thread before any other request).
  std::atomic<bool> init_seen{false};
  std::atomic<bool> init_answered{false};
  uint64_t init_unique = 0;
  bool init_offers_passthrough = false;
  fuse_internal::kabi::InitIn init_in{};    // the kernel's INIT request
  fuse_internal::kabi::InitOut init_out{};  // our reply to it, as sent
  // A daemon taking a mount over (fuse/internal/handover.h): the INIT its libfuse is given
  // instead of reading one (the kernel's, as the first daemon got it), read once by the custom
  // I/O; its reply is not sent (the kernel had its answer).
  std::string synthetic_init;
  std::atomic<bool> synthetic_init_pending{false};
  // Stops the custom I/O's reads for a handover.
  fuse_internal::ReadGate gate;
  // The mount's history (FuseServer::History): set at Mount, or from the handover at Adopt.
  int64_t mounted_at_ns = 0;
  uint32_t restarts = 0;
  uint32_t resumes = 0;  // crash resumes (FuseServer::ResumeAfterCrash)

  // ---- passthrough (fuse/internal/passthrough.h) ----
  bool passthrough_wanted = false;  // FuseOptions::passthrough, without open_in_kernel
  // Our INIT reply took passthrough: opens are counted per inode from then on.
  std::atomic<bool> passthrough_negotiated{false};
  // Opens may use it: negotiated, and no backing-file ioctl refused yet (CAP_SYS_ADMIN, a cache
  // directory on a stacked file system).
  std::atomic<bool> passthrough{false};
  // The io mode of an inode's outstanding opens, and its backing file while any is passthrough.
  struct KernelIo {
    uint32_t cached_opens = 0;
    uint32_t passthrough_opens = 0;
    int32_t backing_id = 0;           // while passthrough_opens > 0
    std::string version;              // of the backing file's bytes (OpenResult::version)
    bool opened_passthrough = false;  // an open was passthrough: prefer it while the inode lives
  };
  Mutex io_mu;
  std::unordered_map<fuse_ino_t, KernelIo> io GUARDED_BY(io_mu);
};

namespace fuse_internal {

using Context = FuseServer::Context;

inline Context* Ctx(fuse_req_t req) { return static_cast<Context*>(fuse_req_userdata(req)); }

// Times one request from its handler's start to the end of the scope that replies (a job run
// by Dispatch() carries the start along). Without metrics it reads no clock.
class OpTimer {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  static TimePoint Start(const Context* ctx) {
    return ctx->op_latency.empty() ? TimePoint() : std::chrono::steady_clock::now();
  }
  OpTimer(const Context* ctx, Op op, TimePoint start = {})
      : h_(ctx->op_latency.empty() ? nullptr : ctx->op_latency[static_cast<size_t>(op)].get()),
        start_(h_ != nullptr && start == TimePoint() ? std::chrono::steady_clock::now() : start) {}
  ~OpTimer() {
    if (h_ != nullptr) h_->ObserveDuration(std::chrono::steady_clock::now() - start_);
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  metrics::Histogram* const h_;
  const TimePoint start_;
};

}  // namespace fuse_internal
}  // namespace tierfs
