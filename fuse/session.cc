// The FUSE session of one mount (fuse/internal/session.h): its creation and mount, the loop,
// the stop signals and the drain, and the unmount.

#include "fuse/internal/session.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "fuse/internal/kernel_protocol.h"
#include "fuse/internal/ops.h"

namespace tierfs::fuse_internal {
namespace {

// ---- libfuse's own messages → Logger(Module::kFuse) ----

std::mutex g_last_error_mu;
std::string g_last_error;  // the last error libfuse logged, for mount failure messages

void FuseLog(enum fuse_log_level level, const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  std::string_view msg(buf);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.remove_suffix(1);
  spdlog::logger& log = Logger(Module::kFuse);
  if (level <= FUSE_LOG_ERR) {
    {
      std::lock_guard<std::mutex> l(g_last_error_mu);
      g_last_error = std::string(msg);
    }
    log.error("libfuse: {}", msg);
  } else if (level == FUSE_LOG_WARNING) {
    log.warn("libfuse: {}", msg);
  } else if (level == FUSE_LOG_DEBUG) {
    log.debug("libfuse: {}", msg);
  } else {
    log.info("libfuse: {}", msg);
  }
}

std::string TakeLastFuseError() {
  std::lock_guard<std::mutex> l(g_last_error_mu);
  std::string e = std::move(g_last_error);
  g_last_error.clear();
  return e;
}

// fuse_opt treats ',' as a separator and '\' as an escape.
std::string EscapeOpt(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == ',' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// The SIGINT/SIGTERM handler's state (one Session serves per process): the first stop
// signal, and the write end of the session's stop pipe, which wakes the supervisor thread
// (Session::Supervise). Lock-free atomics: async-signal-safe.
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_fd{-1};

extern "C" void OnStopSignal(int sig) {
  const int saved_errno = errno;
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
  const int fd = g_stop_fd.load();
  if (fd >= 0) {
    const char c = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &c, 1);  // a full pipe already holds a wakeup
  }
  errno = saved_errno;
}

// SIGINT and SIGTERM → OnStopSignal, in place of libfuse's handler (which would end the loop at
// once, abandoning the requests in flight). No SA_RESTART: the loop's sem_wait wakes up.
bool InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  return sigaction(SIGINT, &sa, nullptr) == 0 && sigaction(SIGTERM, &sa, nullptr) == 0;
}

// Puts SIGINT/SIGTERM back to the default, dropping one that is pending (sent to wake the loop).
void RemoveStopHandlers() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) {
    sa.sa_handler = SIG_IGN;  // discards a pending one
    sigaction(sig, &sa, nullptr);
    sa.sa_handler = SIG_DFL;
    sigaction(sig, &sa, nullptr);
  }
}

// Detaches the mount at `mountpoint` (MNT_DETACH; fusermount3 -u -z when not root): no new
// path reaches it; files still open keep their connection until closed.
Status DetachMount(const std::string& mountpoint) {
  if (geteuid() == 0) {
    if (umount2(mountpoint.c_str(), MNT_DETACH) == 0) return Status::OK();
    return Status::FromErrno(errno, "umount2(MNT_DETACH) " + mountpoint);
  }
  std::vector<std::string> args = {"fusermount3", "-u", "-q", "-z", "--", mountpoint};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawnp(&pid, "fusermount3", nullptr, nullptr, argv.data(), environ);
      err != 0) {
    return Status::FromErrno(err, "spawning fusermount3 -u -z " + mountpoint);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::OK();
  return Status::IOError("fusermount3 -u -z " + mountpoint + " failed");
}

// Waits up to `d` for a byte on the stop pipe (a signal, or the loop's end); drains the pipe.
void WaitStopPipe(int fd, std::chrono::milliseconds d) {
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(d.count())) > 0) {
    char buf[64];
    while (::read(fd, buf, sizeof(buf)) > 0) {
    }
  }
}

// The -o options of the mount. Not "ro": the VFS refuses setxattr on a read-only mount (EROFS
// before the request reaches us), and the control plane is user.tierfs.* setxattr. Every write
// operation is refused by the handlers instead (EROFS from Open for writing, Create, Write,
// SetAttr, MkDir, ...).
std::string MountOptions(const FuseOptions& options, uint32_t max_read) {
  std::string o = "subtype=tierfs,fsname=" + EscapeOpt(options.fsname) +
                  ",max_read=" + std::to_string(max_read);
  if (options.allow_other) o += ",allow_other";
  if (options.allow_root) o += ",allow_root";
  if (options.default_permissions) o += ",default_permissions";
  for (const auto& extra : options.extra_options) o += "," + extra;
  return o;
}

// A new session with the options `o` (and -d with FuseOptions::debug), `ctx` its userdata.
Result<fuse_session*> NewSession(const FuseOptions& options, const std::string& o, Context* ctx) {
  std::vector<std::string> args = {"tierfs"};
  if (options.debug) args.push_back("-d");
  args.push_back("-o");
  args.push_back(o);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(args.size()), argv.data());
  static const fuse_lowlevel_ops kOps = MakeOps();
  fuse_session* se = fuse_session_new(&fargs, &kOps, sizeof(kOps), ctx);
  fuse_opt_free_args(&fargs);
  if (se == nullptr) {
    return Status::InvalidArgument("cannot create the FUSE session with options '" + o +
                                   "': " + TakeLastFuseError());
  }
  return se;
}

// libfuse's signal handlers but for SIGHUP, then ours for SIGINT/SIGTERM, which write to the
// stop pipe `stop_write`. On failure nothing stays installed.
Status InstallSignalHandlers(fuse_session* se, int stop_write) {
  // libfuse ends the loop on SIGHUP too; tierfs keeps serving and leaves SIGHUP to the daemon
  // (which reopens its log file, as logrotate expects): its disposition is put back as it was.
  struct sigaction hup_before {};
  sigaction(SIGHUP, nullptr, &hup_before);
  if (fuse_set_signal_handlers(se) != 0) {
    return Status::Internal("cannot install the FUSE signal handlers");
  }
  sigaction(SIGHUP, &hup_before, nullptr);
  // SIGINT/SIGTERM start the drain (Session::Drain) instead of ending the loop at once.
  g_stop_signal.store(0);
  g_stop_fd.store(stop_write);
  if (!InstallStopHandlers()) {
    g_stop_fd.store(-1);
    fuse_remove_signal_handlers(se);
    return Status::Internal("cannot install the SIGINT/SIGTERM handlers");
  }
  return Status::OK();
}

// The stop pipe of a session (Session::stop_read_, stop_write_); non-blocking: a full pipe already
// holds a wakeup.
Status NewStopPipe(UniqueFd* read_end, UniqueFd* write_end) {
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Status::FromErrno(errno, "pipe for the stop signals");
  }
  *read_end = UniqueFd(p[0]);
  *write_end = UniqueFd(p[1]);
  return Status::OK();
}

void RemoveSignalHandlers(fuse_session* se) {
  g_stop_fd.store(-1);
  RemoveStopHandlers();
  fuse_remove_signal_handlers(se);
}

}  // namespace

Session::Session(const FuseOptions& options, Context* ctx, fuse_session* se, UniqueFd stop_read,
                 UniqueFd stop_write)
    : options_(options),
      ctx_(ctx),
      se_(se),
      stop_read_(std::move(stop_read)),
      stop_write_(std::move(stop_write)) {}

Result<std::unique_ptr<Session>> Session::Mount(const FuseOptions& options, Context* ctx) {
  fuse_set_log_func(FuseLog);
  TakeLastFuseError();
  const std::string o = MountOptions(options, ctx->max_read);
  TIERFS_ASSIGN_OR_RETURN(fuse_session * se, NewSession(options, o, ctx));
  UniqueFd stop_read, stop_write;
  if (Status s = NewStopPipe(&stop_read, &stop_write); !s.ok()) {
    fuse_session_destroy(se);
    return s;
  }
  if (Status s = InstallSignalHandlers(se, stop_write.get()); !s.ok()) {
    fuse_session_destroy(se);
    return s;
  }
  const std::string& mountpoint = ctx->mountpoint;
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    std::string why = TakeLastFuseError();
    RemoveSignalHandlers(se);
    fuse_session_destroy(se);
    return Status::IOError("cannot mount at " + mountpoint + (why.empty() ? "" : ": " + why));
  }
  ctx->se = se;
  // Our own read/writev on the mounted fd, to keep (and for passthrough amend) INIT and to pause
  // the readers for a handover (fuse/internal/kernel_protocol.h). libfuse closes the fd as before.
  if (fuse_session_custom_io(se, &SessionCustomIo(), fuse_session_fd(se)) != 0) {
    Logger(Module::kFuse).warn("libfuse refused the custom I/O: no passthrough, no live restart");
  }
  Logger(Module::kFuse).info("mounted {} at {} (-o {})", options.fsname, mountpoint, o);
  return std::unique_ptr<Session>(
      new Session(options, ctx, se, std::move(stop_read), std::move(stop_write)));
}

Result<std::unique_ptr<Session>> Session::Adopt(const FuseOptions& options, Context* ctx,
                                                UniqueFd fd, const HandoverState& state) {
  const std::vector<std::string> fixed =
      FixedSettings(options, ctx->open_in_kernel, ctx->passthrough_wanted);
  if (std::string diff = FixedSettingsDiff(state.fixed, fixed); !diff.empty()) {
    return Status::InvalidArgument("settings that cannot change on a live mount differ: " + diff);
  }
  fuse_set_log_func(FuseLog);
  TakeLastFuseError();
  const std::string o = MountOptions(options, ctx->max_read);
  TIERFS_ASSIGN_OR_RETURN(fuse_session * se, NewSession(options, o, ctx));
  if (fuse_session_custom_io(se, &SessionCustomIo(), fd.get()) != 0) {
    fuse_session_destroy(se);
    return Status::Internal("libfuse refused the custom I/O on the handed-over descriptor");
  }
  fd.release();  // the session's now: fuse_session_destroy closes it
  UniqueFd stop_read, stop_write;
  if (Status s = NewStopPipe(&stop_read, &stop_write); !s.ok()) {
    fuse_session_destroy(se);
    return s;
  }
  // The kernel's INIT again, answered by libfuse (and InitConnection) here; the reply is kept, not
  // sent, and must be the one the kernel got.
  ctx->se = se;
  ctx->synthetic_init = SyntheticInit(state.init_in);
  ctx->synthetic_init_pending.store(true);
  fuse_buf buf{};
  const int got = fuse_session_receive_buf(se, &buf);
  if (got > 0) fuse_session_process_buf(se, &buf);
  std::free(buf.mem);
  Status status;
  if (!ctx->init_answered.load() || fuse_session_exited(se)) {
    status =
        Status::Internal("libfuse did not answer the handed-over INIT: " + TakeLastFuseError());
  } else if (std::string diff = InitOutDiff(state.init_out, ctx->init_out); !diff.empty()) {
    status = Status::InvalidArgument(
        "the new configuration changes what the kernel was told at mount time (" + diff +
        "): fuse.max_read, fuse.max_readahead, fuse.splice_sized_reads and the fuse.* settings of "
        "INIT cannot change on a live mount");
  }
  if (status.ok()) status = InstallSignalHandlers(se, stop_write.get());
  if (!status.ok()) {
    ctx->se = nullptr;
    fuse_session_destroy(se);
    return status;
  }
  {
    MutexLock l(&ctx->io_mu);
    for (const KernelIoRec& k : state.kernel_io) {
      Context::KernelIo& io = ctx->io[k.ino];
      io.cached_opens = k.cached_opens;
      io.passthrough_opens = k.passthrough_opens;
      io.backing_id = k.backing_id;
      io.version = k.version;
      io.opened_passthrough = k.opened_passthrough;
    }
  }
  ctx->mounted_at_ns = state.mounted_at_ns;
  ctx->restarts = state.restarts + 1;
  Logger(Module::kFuse)
      .info("took over {} (-o {}; live restart {} of this mount)", ctx->mountpoint, o,
            ctx->restarts);
  auto session = std::unique_ptr<Session>(
      new Session(options, ctx, se, std::move(stop_read), std::move(stop_write)));
  session->adopted_ = true;
  // Not ours to unmount until it serves: a daemon that fails before Run() gives the mount back
  // to the one that handed it over.
  session->mounted_ = false;
  return session;
}

Result<int> Session::HandOver(const HandOverHooks& hooks, std::chrono::nanoseconds pause_limit,
                              std::chrono::nanoseconds start_limit) {
  using SteadyClock = std::chrono::steady_clock;
  std::lock_guard<std::mutex> one(handover_mu_);
  if (handed_over_.load() || fuse_session_exited(se_)) {
    return Status::FailedPrecondition("the session of " + ctx_->mountpoint + " has ended");
  }
  if (!ctx_->init_answered.load()) {
    return Status::FailedPrecondition("the kernel has not initialised " + ctx_->mountpoint);
  }
  RemoteWork* remote = ctx_->remote.get();
  const auto t0 = SteadyClock::now();
  if (!ctx_->gate.Pause(t0 + pause_limit, [remote] { return remote->ActiveCount() == 0; })) {
    ctx_->gate.Resume();
    return Status::Unavailable(fmt::format(
        "{} requests were still waiting on the network after {} ms; {} keeps serving (try again)",
        remote->ActiveCount(),
        std::chrono::duration_cast<std::chrono::milliseconds>(pause_limit).count(),
        ctx_->mountpoint));
  }
  const auto paused_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - t0).count();
  const HandoverState state = Snapshot(ctx_->fs->ExportState());
  Successor next;
  Status s = StartSuccessor(state, hooks.start, start_limit, &next);
  // A supervisor learns the new daemon before it may log (it does once it serves, after "go").
  const bool told = s.ok() && LogSuccessor(next.pid);
  if (s.ok()) s = Release(hooks, state, &next);
  if (!s.ok()) {
    if (told) LogSuccessor(0);
    ctx_->gate.Resume();
    Logger(Module::kFuse)
        .warn("handover of {} failed, serving on: {}", ctx_->mountpoint, s.ToString());
    return s;
  }
  handed_over_.store(true);
  ctx_->gate.Close();  // the readers end; the loop returns
  Logger(Module::kFuse)
      .info("handed {} over to pid {} (requests paused {} ms before the handover)",
            ctx_->mountpoint, next.pid, paused_ms);
  return next.pid;
}

HandoverState Session::Snapshot(FilesystemState fs) const {
  HandoverState state;
  state.init_in = ctx_->init_in;
  state.init_out = ctx_->init_out;
  state.fixed = FixedSettings(options_, ctx_->open_in_kernel, ctx_->passthrough_wanted);
  state.mounted_at_ns = ctx_->mounted_at_ns;
  state.restarts = ctx_->restarts;
  state.fs = std::move(fs);
  state.kernel_io = KernelIoRecords();
  return state;
}

std::vector<KernelIoRec> Session::KernelIoRecords() const {
  std::vector<KernelIoRec> out;
  MutexLock l(&ctx_->io_mu);
  for (const auto& [ino, io] : ctx_->io) {
    out.push_back(KernelIoRec{ino, io.cached_opens, io.passthrough_opens, io.backing_id, io.version,
                              io.opened_passthrough});
  }
  return out;
}

void Session::LogStateTo(int channel) {
  // The supervisor takes the log in batches (every 20 ms): room for a few thousand messages
  // (a small one takes about 1 KiB of the buffer), so that a send does not wait for it.
  int bytes = kStateLogBuffer;
  if (::setsockopt(channel, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    ::setsockopt(channel, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  }
  {
    MutexLock l(&log_mu_);
    log_channel_ = channel;
  }
  ctx_->log_state = [this] { SendState(); };
  state_log_ = std::jthread([this](std::stop_token stop) {
    while (!stop.stop_requested()) {
      std::this_thread::sleep_for(kStateLogPeriod);
      // Not while a live restart has the tables (its release may destroy the Filesystem); the
      // readers, the other callers, are parked then.
      std::unique_lock<std::mutex> one(handover_mu_, std::try_to_lock);
      if (!one.owns_lock() || handed_over_.load()) continue;
      SendState();
    }
  });
}

void Session::SendState() {
  if (!ctx_->init_answered.load() || ctx_->fs == nullptr) return;
  // What the caller handed out so far; a state sent at this version or later holds it (the
  // callers waiting on the lock share the next one).
  const uint64_t needed = ctx_->fs->TablesVersion();
  MutexLock l(&log_mu_);
  if (log_channel_ < 0) return;
  if (!log_first_ && needed <= log_sent_) return;
  // Taken before the export, which therefore holds every inode and handle up to it.
  const uint64_t version = ctx_->fs->TablesVersion();
  // An update holds what was handed out since the last message; a whole state replaces the
  // supervisor's copy, dropping what was forgotten and released. A whole state once the updates
  // since the last one hold as many records as it did keeps the log's cost per record constant.
  const bool whole =
      log_first_ || log_update_records_ >= std::max(kLogWholeMin, log_whole_records_);
  HandoverState state;
  if (whole) {
    state = Snapshot(ctx_->fs->ExportState());
  } else {
    // An update's header is not read (the copy keeps the whole state's): only its records.
    state.fs = ctx_->fs->ExportStateSince(log_next_ino_, log_next_handle_);
    state.kernel_io = KernelIoRecords();
  }
  const size_t records = state.fs.inodes.size() + state.fs.files.size() + state.fs.dirs.size();
  const Status s = SendMessage(
      log_channel_, EncodeHandover(state, whole ? HandoverKind::kWhole : HandoverKind::kUpdate),
      log_first_ ? fuse_session_fd(se_) : -1);
  if (!s.ok()) {
    Logger(Module::kFuse).warn("no crash resume: the supervisor is gone ({})", s.ToString());
    log_channel_ = -1;
    return;
  }
  log_first_ = false;
  log_sent_ = version;
  log_next_ino_ = state.fs.next_ino;
  log_next_handle_ = state.fs.next_handle;
  if (whole) {
    log_whole_records_ = records;
    log_update_records_ = 0;
  } else {
    log_update_records_ += records;
  }
}

bool Session::LogSuccessor(int pid) {
  MutexLock l(&log_mu_);
  if (log_channel_ < 0) return false;
  const Status s = SendMessage(log_channel_, fmt::format("{}{}", kLogSuccessor, pid));
  if (!s.ok()) {
    Logger(Module::kFuse).warn("no crash resume: the supervisor is gone ({})", s.ToString());
    log_channel_ = -1;
    return false;
  }
  return true;
}

bool Session::AskResend() {
  kabi::OutHeader h{};
  h.len = sizeof(h);
  h.error = kabi::kNotifyResend;
  h.unique = 0;
  if (::write(fuse_session_fd(se_), &h, sizeof(h)) == static_cast<ssize_t>(sizeof(h))) return true;
  Logger(Module::kFuse)
      .warn(
          "the kernel cannot send again the requests read before the crash ({}; Linux 6.9+): "
          "their readers wait until they are interrupted",
          std::strerror(errno));
  return false;
}

std::string Session::Successor::End() {
  // Ends and reaps the new daemon; how it ended, if it had by itself. One that failed is
  // usually exiting as its socket closes: a moment to tell its status.
  int st = 0;
  pid_t r = 0;
  for (int i = 0; i < 50 && r == 0; ++i) {
    r = ::waitpid(pid, &st, WNOHANG);
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string how;
  if (r == pid && WIFEXITED(st)) how = fmt::format(" (it exited with status {})", WEXITSTATUS(st));
  if (r == pid && WIFSIGNALED(st)) how = fmt::format(" (it was killed by signal {})", WTERMSIG(st));
  if (r == pid) return how;
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return how;
}

Status Session::StartSuccessor(const HandoverState& state,
                               const std::function<Result<int>(int channel)>& start,
                               std::chrono::nanoseconds start_limit, Successor* next) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return Status::FromErrno(errno, "socketpair for the handover");
  }
  next->channel = UniqueFd(pair[0]);
  UniqueFd theirs(pair[1]);
  TIERFS_ASSIGN_OR_RETURN(next->pid, start(theirs.get()));
  theirs.Reset();
  const int pid = next->pid;
  if (Status s = SendMessage(next->channel.get(), EncodeHandover(state), fuse_session_fd(se_));
      !s.ok()) {
    const std::string how = next->End();
    return Status::Unavailable(
        fmt::format("the new daemon (pid {}) did not take over{}: {}", pid, how, s.ToString()));
  }
  Result<std::string> answer = ReceiveMessage(
      next->channel.get(),
      std::chrono::steady_clock::now() +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(start_limit));
  if (!answer.ok()) {
    // A daemon that is still starting when its time is up is ended here.
    const std::string how = next->End();
    return Status::Unavailable(fmt::format("the new daemon (pid {}) did not take over{}: {}", pid,
                                           how, answer.status().ToString()));
  }
  if (*answer != "ok") {
    (void)next->End();
    return Status::FailedPrecondition(
        fmt::format("the new daemon (pid {}) refused: {}", pid, *answer));
  }
  return Status::OK();
}

Status Session::Release(const HandOverHooks& hooks, const HandoverState& state, Successor* next) {
  // The new daemon accepted: free what it opens next (the cache directory, the metrics port),
  // tell it to go on, and wait until it serves.
  hooks.release();
  const int pid = next->pid;
  Status s = SendMessage(next->channel.get(), kHandoverGo);
  Result<std::string> answer = Status::OK();
  if (s.ok()) {
    answer =
        ReceiveMessage(next->channel.get(), std::chrono::steady_clock::now() + kHandoverServeLimit);
    if (answer.ok() && *answer != kHandoverServing) {
      answer = Status::FailedPrecondition(*answer);
    }
    s = answer.status();
  }
  if (s.ok()) return Status::OK();
  const std::string how = next->End();
  const Status why = Status::Unavailable(fmt::format(
      "the new daemon (pid {}) failed after it took over{}: {}", pid, how, s.ToString()));
  // This daemon serves on: its components again, and the tables it handed over.
  Result<Filesystem*> fs = hooks.restore();
  if (fs.ok()) {
    if (Status imported = (*fs)->ImportState(state.fs); imported.ok()) {
      ctx_->fs = *fs;
      return why;
    } else {
      fs = imported;
    }
  }
  Logger(Module::kFuse)
      .error("{}; and this daemon cannot serve {} again ({}): ending the mount", why.ToString(),
             ctx_->mountpoint, fs.status().ToString());
  fuse_session_exit(se_);
  return why;
}

Status Session::Run() {
  mounted_ = true;
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  if (cfg == nullptr) return Status::Internal("fuse_loop_cfg_create failed");
  fuse_loop_cfg_set_clone_fd(cfg, options_.clone_fd ? 1 : 0);
  fuse_loop_cfg_set_max_threads(cfg, static_cast<unsigned>(std::max(1, options_.max_threads)));
  // Beside the loop: the supervisor ends the session on SIGINT/SIGTERM once the requests in
  // flight are answered (Drain), and cancels the requests still waiting on the network once the
  // session has ended otherwise (unmounted), so that libfuse's join of its workers does not wait
  // for their deadlines. Its thread takes no signal.
  loop_thread_ = pthread_self();
  loop_done_.store(false);
  std::thread supervisor;
  {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    supervisor = std::thread([this] { Supervise(); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  // This thread takes SIGINT/SIGTERM while the loop runs: its sem_wait is what the drain's
  // pthread_kill interrupts.
  sigset_t stop_signals, before;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, &before);
  int rc = fuse_session_loop_mt(se_, cfg);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  fuse_loop_cfg_destroy(cfg);
  if (state_log_.joinable()) {
    state_log_.request_stop();
    state_log_.join();
  }
  loop_done_.store(true);
  WakeSupervisor();
  supervisor.join();
  const std::string& mountpoint = ctx_->mountpoint;
  // 0: unmounted (fusermount3 -u / umount, or by the drain); < 0: the loop failed.
  if (rc > 0) Logger(Module::kFuse).info("signal {}: unmounting {}", rc, mountpoint);
  if (rc == -ECONNABORTED && detached_.load()) {
    // The drain detached the mount and the last open file was closed while a worker was taking
    // a request (the kernel's RELEASE racing the connection's end): the session is over, as
    // with ENODEV, which libfuse itself takes as the end.
    Logger(Module::kFuse).info("the connection of {} ended while a request was read", mountpoint);
    return Status::OK();
  }
  if (rc < 0) return Status::FromErrno(-rc, "fuse session loop");
  return Status::OK();
}

void Session::WakeSupervisor() {
  const char c = 0;
  [[maybe_unused]] ssize_t n = ::write(stop_write_.get(), &c, 1);
}

void Session::Supervise() {
  pthread_setname_np(pthread_self(), "tierfs-stop");
  while (!loop_done_.load()) {
    if (const int sig = g_stop_signal.load(); sig != 0) {
      Drain(sig);
      return;
    }
    if (fuse_session_exited(se_)) {
      ctx_->remote->CancelAll();
      return;
    }
    WaitStopPipe(stop_read_.get(), std::chrono::milliseconds(200));
  }
}

void Session::Drain(int sig) {
  using SteadyClock = std::chrono::steady_clock;
  const auto grace = std::chrono::duration_cast<std::chrono::milliseconds>(options_.shutdown_grace);
  RemoteWork* remote = ctx_->remote.get();
  // 1. Nothing new waits on the network; what was asked before gets up to the grace period.
  remote->BeginShutdown();
  const size_t waiting = remote->ActiveCount();
  Logger(Module::kFuse)
      .info(
          "signal {}: stopping; {} requests wait on the network (answered within {} ms, else "
          "EIO), then unmounting {}",
          sig, waiting, grace.count(), ctx_->mountpoint);
  if (!remote->WaitIdle(SteadyClock::now() + grace)) {
    Logger(Module::kFuse)
        .warn("{} requests still wait on the network {} ms after signal {}: answering them EIO",
              remote->ActiveCount(), grace.count(), sig);
    remote->CancelAllForShutdown();
    if (!remote->WaitIdle(SteadyClock::now() + std::chrono::seconds(5))) {
      Logger(Module::kFuse)
          .error("{} requests did not end 5 s after their cancellation", remote->ActiveCount());
    }
  }
  // 2. Every request asked before the signal is answered. Detach the mount: no new path reaches
  // it, and the kernel ends the session once the files still open are closed. A reader whose
  // read just failed asks again at once (the kernel retries a failed readahead page): the loop
  // keeps answering (EIO for what would wait on the network) for up to kLinger.
  constexpr auto kLinger = std::chrono::seconds(1);
  if (Status s = DetachMount(ctx_->mountpoint); s.ok()) {
    detached_.store(true);
  } else {
    Logger(Module::kFuse).warn("detaching {}: {}", ctx_->mountpoint, s.ToString());
  }
  const auto linger_end = SteadyClock::now() + kLinger;
  while (!fuse_session_exited(se_) && !loop_done_.load() && SteadyClock::now() < linger_end) {
    WaitStopPipe(stop_read_.get(), std::chrono::milliseconds(20));
  }
  // 3. End the loop: its main thread waits in sem_wait, which a signal interrupts (our handler
  // only notes it); repeated until the loop has returned, so a wakeup cannot be lost.
  fuse_session_exit(se_);
  while (!loop_done_.load()) {
    pthread_kill(loop_thread_, SIGTERM);
    WaitStopPipe(stop_read_.get(), std::chrono::milliseconds(50));
  }
  Logger(Module::kFuse).info("signal {}: unmounted {}", sig, ctx_->mountpoint);
}

void Session::Unmount() {
  if (!mounted_) return;
  mounted_ = false;
  // Handed over: the mount is the new daemon's.
  if (handed_over_.load()) return;
  // Detached by the drain already: the path may hold another mount by now; the session's fd is
  // closed by fuse_session_destroy.
  if (detached_.load()) return;
  if (adopted_) {
    // libfuse did not mount, so it cannot unmount: detach it as the drain does, while the
    // connection is still ours.
    if (!fuse_session_exited(se_)) {
      if (Status s = DetachMount(ctx_->mountpoint); !s.ok()) {
        Logger(Module::kFuse).warn("unmounting {}: {}", ctx_->mountpoint, s.ToString());
      }
    }
    return;
  }
  fuse_session_unmount(se_);
  Logger(Module::kFuse).info("unmounted {}", ctx_->mountpoint);
}

Session::~Session() {
  Unmount();
  RemoveSignalHandlers(se_);
  fuse_session_destroy(se_);
  ctx_->se = nullptr;
}

}  // namespace tierfs::fuse_internal
