// FuseServer (fuse/fuse_server.h): the Context every handler shares, built from FuseOptions, the
// session that serves it, and the one Status → errno function. The parts, each in fuse/internal/:
//   session.h          the FUSE session: /dev/fuse, the custom I/O, the loop, signals, unmount
//   ops.h              the operation handlers (file_ops.cc: open, read, release)
//   read_reply.h       how read replies and stores at open carry bytes (splice, iovec, copy)
//   remote_work.h      request tokens, interrupts, the remote slots and pool
//   kernel_protocol.h  INIT, the custom I/O, passthrough's ioctls, the splice pipe's size
//   kernel_abi.h       the kernel's FUSE ABI that libfuse 3.14 lacks
//   handover.h         a live restart: the state, its encoding and transfer, the ReadGate
//   passthrough.h      the io mode of each open under passthrough
//   context.h          the Context, the timed operations

#include "fuse/fuse_server.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "base/metrics.h"
#include "base/units.h"
#include "fuse/filesystem.h"
#include "fuse/internal/context.h"
#include "fuse/internal/handover.h"
#include "fuse/internal/kernel_protocol.h"
#include "fuse/internal/remote_work.h"
#include "fuse/internal/session.h"

namespace tierfs {

int ToErrno(const Status& status, ErrnoContext context) {
  switch (status.code()) {
    case Status::Code::kOk:
      return 0;
    case Status::Code::kNotFound:
      // No such entry → ENOENT. For xattrs NotFound means "no such attribute", which getxattr(2)
      // and removexattr(2) report as ENODATA.
      return context == ErrnoContext::kXattr ? ENODATA : ENOENT;
    case Status::Code::kInvalidArgument:
      // Bad input from the user (xattr value, name, read-only attribute) → EINVAL.
      return EINVAL;
    case Status::Code::kIOError:
      // Local or remote I/O failed after retries → EIO, what readers of files expect.
      return EIO;
    case Status::Code::kCorruption:
      // Unparsable data from a store (checksum failures are refetched below us, never surfaced)
      // → EIO: a wrong byte is never returned.
      return EIO;
    case Status::Code::kUnavailable:
      // The origin cannot be reached (retries spent) → EIO, not EAGAIN: readers do not retry.
      return EIO;
    case Status::Code::kTimedOut:
      // A deadline passed after retries → EIO (ETIMEDOUT would read as a network socket error).
      return EIO;
    case Status::Code::kPermissionDenied:
      // The store refused our credentials (401/403) → EACCES. A user.tierfs.* control set by a
      // user other than root and the mounting user → EPERM, as for other privileged attributes.
      return context == ErrnoContext::kXattr ? EPERM : EACCES;
    case Status::Code::kNoSpace:
      // A tier or quota is full → ENOSPC.
      return ENOSPC;
    case Status::Code::kCancelled:
      // Cancelled by the reader's interrupt → EINTR (as 3FS does; ECANCELED is for AIO). A
      // request the daemon gave up on because it is stopping (SIGTERM, after the shutdown grace)
      // → EIO: its reader interrupted nothing.
      return fuse_internal::EndedByShutdown() ? EIO : EINTR;
    case Status::Code::kNotSupported:
      // Operation not supported here (setxattr of an unknown name) → ENOTSUP.
      return ENOTSUP;
    case Status::Code::kInternal:
      // A bug: an invariant did not hold → EIO, and it is logged where it happened.
      return EIO;
    case Status::Code::kFailedPrecondition:
      // The object changed under an open handle (If-Match failed with 412, or an answer's ETag,
      // size or Last-Modified differed from the version the handle pinned), or an inode/handle
      // the kernel named is unknown → ESTALE: the next open sees the new version.
      return ESTALE;
  }
  return EIO;
}

double TimeoutSeconds(std::chrono::nanoseconds d) {
  constexpr double kYear = 365.0 * 24 * 3600;
  if (d == kForever) return kYear;
  double s = std::chrono::duration<double>(d).count();
  return std::clamp(s, 0.0, kYear);
}

namespace {

using fuse_internal::Context;
using fuse_internal::Op;

// tierfs_fuse_* of docs/operations.md, "Metrics": the op histograms, and the Filesystem's and its
// Prefetcher's counters (the same atomics as the fuse.* fields of user.tierfs.stats).
void CollectFuseMetrics(const Context& ctx, metrics::Exposition* e) {
  if (ctx.fs == nullptr) return;  // a taken-over mount before Attach
  for (size_t i = 0; i < ctx.op_latency.size(); ++i) {
    const metrics::Histogram::Snapshot snap = ctx.op_latency[i]->Snap();
    const metrics::Labels l = {{"op", fuse_internal::kOpNames[i]}};
    e->AddCounter("tierfs_fuse_requests_total", "FUSE requests answered, by operation.", l,
                  static_cast<double>(snap.count));
    e->AddHistogram("tierfs_fuse_request_duration_seconds",
                    "FUSE request latency, from the handler's start to its reply, by operation.", l,
                    snap);
  }
  const FsCounters& c = ctx.fs->counters();
  e->AddCounter("tierfs_fuse_lookups_total", "Lookups.", {}, c.lookups);
  e->AddCounter("tierfs_fuse_negative_lookups_total", "Lookups of names that do not exist.", {},
                c.negative_lookups);
  e->AddCounter("tierfs_fuse_opens_total", "Files opened.", {}, c.opens);
  e->AddCounter("tierfs_fuse_reads_total", "File reads.", {}, c.reads);
  e->AddCounter("tierfs_fuse_read_bytes_total", "Bytes returned by file reads.", {}, c.read_bytes);
  const PrefetcherStats& p = ctx.fs->prefetch_stats();
  e->AddCounter("tierfs_fuse_readahead_requests_total", "Readahead windows requested.", {},
                p.readahead_requests);
  e->AddCounter("tierfs_fuse_next_file_prefetches_total",
                "Files queued by the next-files prefetch.", {}, p.next_file_prefetches);
  e->AddCounter("tierfs_fuse_next_file_opens_total",
                "Small-file opens in directories read file after file.", {}, p.next_file_opens);
  e->AddCounter("tierfs_fuse_next_file_hits_total",
                "Of those, opens that found the file in L1 or L2 already.", {}, p.next_file_hits);
  e->AddCounter("tierfs_fuse_random_hydrations_total",
                "Open files hydrated in the background after random reads kept missing.", {},
                p.random_hydrations);
  e->AddCounter("tierfs_fuse_stale_reads_total",
                "Reads failed with ESTALE: the object changed under an open file.", {},
                c.stale_reads);
  e->AddCounter("tierfs_fuse_open_stores_total",
                "Small files stored in the kernel's page cache with their open.", {},
                c.open_stores);
  e->AddCounter("tierfs_fuse_passthrough_opens_total",
                "Opens answered with an L2 file the kernel reads itself (FUSE passthrough).", {},
                c.passthrough_opens);
  e->AddGauge("tierfs_fuse_inodes", "Inodes the kernel holds.", {},
              static_cast<double>(ctx.fs->InodeCount()));
  e->AddCounter("tierfs_live_restarts_total",
                "Live restarts the mount has been through (tierfs restart), carried from daemon to "
                "daemon.",
                {}, ctx.restarts);
  e->AddCounter(
      "tierfs_crash_resumes_total",
      "Times the mount's supervisor started a daemon on it after the serving daemon died.", {},
      ctx.resumes);
  e->AddGauge("tierfs_mount_time_seconds", "When the mount was made (Unix time), kept by restarts.",
              {}, static_cast<double>(ctx.mounted_at_ns) / 1e9);
}

// The Context of a mount of `fs` at `mountpoint` with `options`.
std::unique_ptr<Context> NewContext(const FuseOptions& options, Filesystem* fs,
                                    const std::string& mountpoint) {
  auto ctx = std::make_unique<Context>();
  ctx->fs = fs;
  ctx->mountpoint = mountpoint;
  ctx->entry_timeout = TimeoutSeconds(options.entry_timeout);
  ctx->attr_timeout = TimeoutSeconds(options.attr_timeout);
  ctx->negative_timeout = TimeoutSeconds(options.negative_timeout);
  ctx->max_read = options.max_read;
  ctx->max_readahead = options.max_readahead;
  ctx->pipe_bytes = fuse_internal::ProbeSplicePipe(options.max_read);
  if (options.fit_reads_to_splice_pipe) {
    // Reads the pipe can splice from cache files (FuseOptions::fit_reads_to_splice_pipe); the
    // kernel's readahead no larger, or it would split each window into a full read and a sliver.
    ctx->max_read = FitReadToPipe(options.max_read, ctx->pipe_bytes);
    ctx->max_readahead = std::min(options.max_readahead, ctx->max_read);
  }
  ctx->max_background = fuse_internal::kMaxBackground;
  ctx->open_in_kernel = options.open_in_kernel;
  ctx->store_on_open_max = options.store_on_open_max;
  ctx->passthrough_wanted = options.passthrough && !options.open_in_kernel;
  if (options.metrics != nullptr) {
    for (size_t i = 0; i < static_cast<size_t>(Op::kCount); ++i) {
      ctx->op_latency.push_back(std::make_unique<metrics::Histogram>());
    }
    const Context* c = ctx.get();
    ctx->metrics_reg =
        options.metrics->Add([c](metrics::Exposition* e) { CollectFuseMetrics(*c, e); });
  }
  return ctx;
}

}  // namespace

FuseServer::FuseServer(const FuseOptions& options, std::unique_ptr<Context> ctx,
                       std::unique_ptr<fuse_internal::Session> session)
    : options_(options), ctx_(std::move(ctx)), session_(std::move(session)) {}

Result<std::unique_ptr<FuseServer>> FuseServer::Mount(const FuseOptions& options, Filesystem* fs,
                                                      const std::string& mountpoint) {
  std::unique_ptr<Context> ctx = NewContext(options, fs, mountpoint);
  ctx->mounted_at_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  TIERFS_ASSIGN_OR_RETURN(std::unique_ptr<fuse_internal::Session> session,
                          fuse_internal::Session::Mount(options, ctx.get()));
  return std::unique_ptr<FuseServer>(new FuseServer(options, std::move(ctx), std::move(session)));
}

Result<std::unique_ptr<FuseServer>> FuseServer::TakeOver(const FuseOptions& options,
                                                         const std::string& mountpoint, int channel,
                                                         std::chrono::nanoseconds timeout) {
  UniqueFd fd;
  Result<std::string> bytes =
      fuse_internal::ReceiveMessage(channel, fuse_internal::DeadlineAfter(timeout), &fd);
  if (!bytes.ok()) return bytes.status();
  auto refuse = [channel](const Status& why) {
    (void)fuse_internal::SendMessage(channel, why.message());
    return why;
  };
  if (fd.get() < 0) return refuse(Status::InvalidArgument("no /dev/fuse descriptor came"));
  Result<fuse_internal::HandoverState> state = fuse_internal::DecodeHandover(*bytes);
  if (!state.ok()) return refuse(state.status());
  std::unique_ptr<Context> ctx = NewContext(options, nullptr, mountpoint);
  Result<std::unique_ptr<fuse_internal::Session>> session =
      fuse_internal::Session::Adopt(options, ctx.get(), std::move(fd), *state);
  if (!session.ok()) return refuse(session.status());
  if (Status s = fuse_internal::SendMessage(channel, "ok"); !s.ok()) return s;
  auto server =
      std::unique_ptr<FuseServer>(new FuseServer(options, std::move(ctx), std::move(*session)));
  server->pending_state_ = std::make_unique<FilesystemState>(std::move(state->fs));
  server->channel_ = channel;
  return server;
}

void FuseServer::RefuseTakeOver(int channel, const Status& why) {
  (void)fuse_internal::SendMessage(channel, why.message());
}

Status FuseServer::AwaitRelease(std::chrono::nanoseconds timeout) {
  if (channel_ < 0) return Status::FailedPrecondition("not a taken-over mount");
  TIERFS_ASSIGN_OR_RETURN(
      const std::string go,
      fuse_internal::ReceiveMessage(channel_, fuse_internal::DeadlineAfter(timeout)));
  if (go != fuse_internal::kHandoverGo) {
    return Status::Internal("the old daemon sent '" + go + "' for 'go'");
  }
  return Status::OK();
}

Status FuseServer::Attach(Filesystem* fs) {
  if (pending_state_ == nullptr) return Status::FailedPrecondition("not a taken-over mount");
  TIERFS_RETURN_IF_ERROR(fs->ImportState(*pending_state_));
  pending_state_.reset();
  ctx_->fs = fs;
  // The old daemon ends once it reads this; until then it would take the mount back.
  TIERFS_RETURN_IF_ERROR(fuse_internal::SendMessage(channel_, fuse_internal::kHandoverServing));
  channel_ = -1;
  return Status::OK();
}

Result<int> FuseServer::HandOver(const HandOverHooks& hooks, std::chrono::nanoseconds pause_limit,
                                 std::chrono::nanoseconds start_limit) {
  return session_->HandOver(hooks, pause_limit, start_limit);
}

bool FuseServer::handed_over() const { return session_->handed_over(); }

FuseServer::History FuseServer::history() const {
  return History{ctx_->mounted_at_ns, ctx_->restarts, ctx_->resumes};
}

Status FuseServer::Run() {
  if (ctx_->fs == nullptr) return Status::FailedPrecondition("no Filesystem attached");
  if (!ctx_->remote) {
    // The libfuse workers' share of network-bound requests: all but `reserved` of them.
    const int workers = std::max(1, options_.max_threads);
    const int reserved = std::max(2, workers / 4);
    ctx_->remote = std::make_unique<fuse_internal::RemoteWork>(std::max(0, workers - reserved),
                                                               std::max(0, options_.remote_threads),
                                                               options_.request_timeout);
  }
  return session_->Run();
}

void FuseServer::Unmount() { session_->Unmount(); }

void FuseServer::LogStateTo(int channel) { session_->LogStateTo(channel); }

void FuseServer::CountCrashResumes(uint32_t resumes) { ctx_->resumes = resumes; }

bool FuseServer::ResumeAfterCrash(uint32_t resumes) {
  // The takeover counted itself a live restart; it is not one.
  if (ctx_->restarts > 0) --ctx_->restarts;
  ctx_->resumes = resumes;
  return session_->AskResend();
}

FuseServer::LoggedState::LoggedState() : copy_(std::make_unique<fuse_internal::StateCopy>()) {}
FuseServer::LoggedState::~LoggedState() = default;

Status FuseServer::LoggedState::Receive(int channel, std::chrono::nanoseconds timeout, int* fd) {
  UniqueFd got;
  Result<std::string> bytes =
      fuse_internal::ReceiveMessage(channel, fuse_internal::DeadlineAfter(timeout), &got);
  *fd = got.release();
  if (!bytes.ok()) return bytes.status();
  if (std::string_view(*bytes).starts_with(fuse_internal::kLogSuccessor)) {
    const std::string pid = bytes->substr(fuse_internal::kLogSuccessor.size());
    successor_ = std::atoi(pid.c_str());
    return Status::OK();
  }
  return copy_->Apply(std::move(*bytes));
}

bool FuseServer::LoggedState::empty() const { return copy_->empty(); }

int FuseServer::LoggedState::TakeSuccessor() { return std::exchange(successor_, 0); }

Status FuseServer::LoggedState::HandTo(int channel, int fuse_fd,
                                       std::chrono::nanoseconds start_limit) const {
  TIERFS_ASSIGN_OR_RETURN(const std::string state, copy_->Encode());
  TIERFS_RETURN_IF_ERROR(fuse_internal::SendMessage(channel, state, fuse_fd));
  TIERFS_ASSIGN_OR_RETURN(
      const std::string answer,
      fuse_internal::ReceiveMessage(channel, fuse_internal::DeadlineAfter(start_limit)));
  if (answer != "ok") return Status::FailedPrecondition("the new daemon refused: " + answer);
  TIERFS_RETURN_IF_ERROR(fuse_internal::SendMessage(channel, fuse_internal::kHandoverGo));
  TIERFS_ASSIGN_OR_RETURN(
      const std::string serving,
      fuse_internal::ReceiveMessage(
          channel, fuse_internal::DeadlineAfter(fuse_internal::kHandoverServeLimit)));
  if (serving != fuse_internal::kHandoverServing) {
    return Status::FailedPrecondition("the new daemon failed: " + serving);
  }
  return Status::OK();
}

FuseServer::~FuseServer() {
  ctx_->metrics_reg.Reset();  // no scrape reads this server any more
  // Pool requests end first (cancelled: EINTR to a kernel that no longer listens), while the
  // session they reply on still exists.
  if (ctx_->remote) ctx_->remote->Stop();
  session_.reset();  // unmounts if still mounted, and closes the session
}

}  // namespace tierfs
