// fuse/internal/handover — a live restart's parts on the FUSE side (fuse/FORMAT.md, "Handover"):
// the state one daemon hands the next with the /dev/fuse descriptor, its versioned encoding, the
// transfer over a unix socket (SCM_RIGHTS), and the ReadGate that stops a serving session from
// taking requests while they are handed over.
//
// Thread-safety: HandoverState and the codec functions are plain values and pure functions. The
// ReadGate is thread-safe; no external synchronization needed.
#pragma once

#include <pthread.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/fd.h"
#include "base/mutex.h"
#include "base/result.h"
#include "base/status.h"
#include "fuse/filesystem.h"
#include "fuse/fuse_server.h"
#include "fuse/internal/kernel_abi.h"

namespace tierfs::fuse_internal {

// The state format's version (fuse/FORMAT.md). A daemon decodes only kHandoverVersion: a state
// of another version is refused, and the daemon that sent it keeps serving.
constexpr uint32_t kHandoverVersion = 1;

// The io mode of one inode's opens under passthrough (Context::KernelIo), with its inode.
struct KernelIoRec {
  uint64_t ino = 0;
  uint32_t cached_opens = 0;
  uint32_t passthrough_opens = 0;
  int32_t backing_id = 0;
  std::string version;
  bool opened_passthrough = false;
};

struct HandoverState {
  // The kernel's INIT request and the reply it was given: the new daemon answers the same INIT
  // again (to its libfuse) and must come to the same reply.
  kabi::InitIn init_in{};
  kabi::InitOut init_out{};
  // "name=value" of each setting fixed for the life of a connection (FixedSettings).
  std::vector<std::string> fixed;
  // The mount's history: when it was mounted (Unix ns) and how many live restarts it has been
  // through before this one.
  int64_t mounted_at_ns = 0;
  uint32_t restarts = 0;
  FilesystemState fs;
  std::vector<KernelIoRec> kernel_io;
};

// The messages of the handover's second half (fuse/FORMAT.md): the old daemon's "go" once it has
// released the cache directory, the new daemon's "serving" once it serves, and how long the old
// daemon waits for that (opening a large L2 takes a while).
inline constexpr std::string_view kHandoverGo = "go";
inline constexpr std::string_view kHandoverServing = "serving";
inline constexpr std::chrono::minutes kHandoverServeLimit{5};

// "name=value" of each setting of `options` (as the Context applies them) that cannot change
// while the kernel's connection lives: they are given at mount time or by INIT.
std::vector<std::string> FixedSettings(const FuseOptions& options, bool open_in_kernel,
                                       bool passthrough_wanted);

// What differs between the running mount's fixed settings `running` and `wanted`, as one
// message naming each setting ("allow_other: running true, new false"); "" if none.
std::string FixedSettingsDiff(const std::vector<std::string>& running,
                              const std::vector<std::string>& wanted);

// What differs between two INIT replies (flags, sizes), as one message; "" if none.
std::string InitOutDiff(const kabi::InitOut& running, const kabi::InitOut& wanted);

// A whole state (what a live restart hands over), or an update of one: the records handed out
// since the state it follows on the same crash-resume state log (fuse/FORMAT.md, "Crash
// resume"; Filesystem::ExportStateSince). The same layout, told apart by the magic.
enum class HandoverKind { kWhole, kUpdate };

std::string EncodeHandover(const HandoverState& state, HandoverKind kind = HandoverKind::kWhole);
// NotSupported for another version (naming both); Corruption for a truncated or malformed state.
// With `kind` null, only a whole state is accepted (an update is Corruption); else *kind tells.
Result<HandoverState> DecodeHandover(std::string_view bytes, HandoverKind* kind = nullptr);

// A message of the crash-resume log that is not a state: "successor PID", the daemon that takes
// the mount over in a live restart (0: the handover failed; fuse/FORMAT.md).
inline constexpr std::string_view kLogSuccessor = "successor ";

// A supervisor's copy of the state its daemon logs (fuse/FORMAT.md, "Crash resume"): the last
// whole state and the updates sent since, kept as they came (a few hundred bytes per record,
// and no work per message beyond its header), merged when handed over: a record replaces the
// one of the same inode or handle number, the io table is replaced whole. What it hands over has
// every lookup count raised to kLookupsUnknown: the log does not follow lookups of known inodes,
// so the kernel may hold more than any count logged, and a resumed daemon must never drop an
// inode the kernel still holds.
//
// Thread-safety: not thread-safe (the supervisor's one thread).
class StateCopy {
 public:
  static constexpr uint64_t kLookupsUnknown = uint64_t{1} << 62;

  // Takes the next message of the log. Errors: a bad header (DecodeHandover's), or
  // FailedPrecondition for an update before any whole state; the copy is then unchanged.
  Status Apply(std::string message);
  bool empty() const { return whole_.empty(); }
  // The state to hand over, merged. Errors: a message that does not decode (DecodeHandover's),
  // FailedPrecondition when empty().
  Result<std::string> Encode() const;

 private:
  std::string whole_;
  std::vector<std::string> updates_;
};

// Now plus `d`, as the deadline ReceiveMessage takes.
inline std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::nanoseconds d) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(d);
}

// One message on a connected unix stream socket: a length, the bytes and, with fd >= 0, the
// descriptor (SCM_RIGHTS). Messages are at most 1 GiB.
Status SendMessage(int sock, std::string_view bytes, int fd = -1);
// The next message, and the descriptor it carried in *fd (if `fd` is not null; -1 if none). Waits
// until `deadline`: TimedOut then; Unavailable when the peer closed the socket first.
Result<std::string> ReceiveMessage(int sock, std::chrono::steady_clock::time_point deadline,
                                   UniqueFd* fd = nullptr);

// Stops the readers of a session's /dev/fuse descriptors (the custom I/O's reads) between two
// requests, for a handover: Pause parks every reader before its next read and waits until the
// requests being served are answered; Resume lets them read again; Close ends them (the session
// was handed over: each read returns ENODEV and the loop ends).
class ReadGate {
 public:
  ReadGate();
  ~ReadGate();
  ReadGate(const ReadGate&) = delete;
  ReadGate& operator=(const ReadGate&) = delete;

  // Around each read of the descriptor. Enter: false when closed (do not read). Leave: whether
  // the read returned a request (then the thread serves it until its next Enter or exit).
  bool Enter() EXCLUDES(mu_);
  void Leave(bool got_request) EXCLUDES(mu_);

  // Parks the readers and waits, until `deadline`, for no request to be in a reader's hands and
  // for `idle()` (the requests handed to other threads) to hold. False on timeout (the gate stays
  // paused: Resume or Close).
  bool Pause(std::chrono::steady_clock::time_point deadline, const std::function<bool()>& idle)
      EXCLUDES(mu_);
  void Resume() EXCLUDES(mu_);
  void Close() EXCLUDES(mu_);

 private:
  friend struct ReaderSlot;
  void Finished() EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  bool paused_ GUARDED_BY(mu_) = false;
  bool closed_ GUARDED_BY(mu_) = false;
  std::vector<pthread_t> in_read_ GUARDED_BY(mu_);  // threads in (or about to be in) read(2)
  size_t serving_ GUARDED_BY(mu_) = 0;  // threads between a request read and their next Enter
};

}  // namespace tierfs::fuse_internal
