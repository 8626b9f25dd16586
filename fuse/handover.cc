// A live restart's parts on the FUSE side (fuse/internal/handover.h): the state's encoding
// (fuse/FORMAT.md), its transfer with the descriptor, and the ReadGate.

#include "fuse/internal/handover.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

namespace tierfs::fuse_internal {
namespace {

constexpr char kMagic[8] = {'t', 'i', 'e', 'r', 'f', 's', 'H', 'O'};
constexpr char kUpdateMagic[8] = {'t', 'i', 'e', 'r', 'f', 's', 'H', 'U'};
constexpr size_t kMaxMessage = 1U << 30;

// Little-endian fields (the hosts tierfs runs on): u32, u64, and strings as u32 length + bytes.
class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  uint8_t U8() {
    uint8_t v = 0;
    Raw(&v, 1);
    return v;
  }
  uint32_t U32() {
    uint32_t v = 0;
    Raw(&v, sizeof(v));
    return v;
  }
  uint64_t U64() {
    uint64_t v = 0;
    Raw(&v, sizeof(v));
    return v;
  }
  std::string Str() {
    const uint32_t n = U32();
    if (!ok_ || n > in_.size()) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  // A count of records of at least `min_bytes` each: no more than the bytes left can hold.
  uint32_t Count(size_t min_bytes) {
    const uint32_t n = U32();
    if (ok_ && static_cast<uint64_t>(n) * min_bytes > in_.size()) ok_ = false;
    return ok_ ? n : 0;
  }
  void Raw(void* p, size_t n) {
    if (!ok_ || in_.size() < n) {
      ok_ = false;
      return;
    }
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
  }
  bool AtEnd() const { return in_.empty(); }

 private:
  std::string_view in_;
  bool ok_ = true;
};

void PutInode(Writer* w, const FilesystemState::InodeRec& r) {
  w->U64(r.ino);
  w->Str(r.path);
  w->U8((r.is_dir ? 1 : 0) | (r.mapped ? 2 : 0) | (r.owner_known ? 4 : 0));
  w->U64(r.nlookup);
  w->U64(r.size);
  w->Str(r.etag);
  w->U64(static_cast<uint64_t>(r.mtime_ns));
  w->U32(r.uid);
  w->U32(r.gid);
  w->U32(r.mode);
  w->Str(r.opened_etag);
  w->U32(r.open_handles);
}

FilesystemState::InodeRec GetInode(Reader* r) {
  FilesystemState::InodeRec n;
  n.ino = r->U64();
  n.path = r->Str();
  const uint8_t bits = r->U8();
  n.is_dir = (bits & 1) != 0;
  n.mapped = (bits & 2) != 0;
  n.owner_known = (bits & 4) != 0;
  n.nlookup = r->U64();
  n.size = r->U64();
  n.etag = r->Str();
  n.mtime_ns = static_cast<int64_t>(r->U64());
  n.uid = r->U32();
  n.gid = r->U32();
  n.mode = r->U32();
  n.opened_etag = r->Str();
  n.open_handles = r->U32();
  return n;
}

// The signal that wakes a reader out of read(2) for ReadGate::Pause: the handler does nothing
// (installed without SA_RESTART, so the read returns EINTR and the reader meets the gate).
int WakeSignal() { return SIGRTMIN + 2; }
extern "C" void OnWake(int) {}

}  // namespace

std::vector<std::string> FixedSettings(const FuseOptions& options, bool open_in_kernel,
                                       bool passthrough_wanted) {
  auto b = [](bool v) { return v ? "true" : "false"; };
  return {fmt::format("allow_other={}", b(options.allow_other)),
          fmt::format("allow_root={}", b(options.allow_root)),
          fmt::format("default_permissions={}", b(options.default_permissions)),
          fmt::format("open_in_kernel={}", b(open_in_kernel)),
          fmt::format("passthrough={}", b(passthrough_wanted))};
}

std::string FixedSettingsDiff(const std::vector<std::string>& running,
                              const std::vector<std::string>& wanted) {
  std::string out;
  auto split = [](const std::string& s) {
    const size_t eq = s.find('=');
    return eq == std::string::npos ? std::pair(s, std::string())
                                   : std::pair(s.substr(0, eq), s.substr(eq + 1));
  };
  for (const std::string& w : wanted) {
    auto [name, value] = split(w);
    std::string was = "(unknown to the running daemon)";
    for (const std::string& r : running) {
      if (auto [rn, rv] = split(r); rn == name) was = rv;
    }
    if (was != value) {
      if (!out.empty()) out += "; ";
      out += fmt::format("fuse.{}: running {}, new {}", name, was, value);
    }
  }
  return out;
}

std::string InitOutDiff(const kabi::InitOut& a, const kabi::InitOut& b) {
  std::string out;
  auto field = [&out](const char* name, uint64_t x, uint64_t y) {
    if (x == y) return;
    if (!out.empty()) out += "; ";
    out += fmt::format("{}: running {:#x}, new {:#x}", name, x, y);
  };
  field("flags", a.flags, b.flags);
  field("flags2", a.flags2, b.flags2);
  field("max_readahead", a.max_readahead, b.max_readahead);
  field("max_write", a.max_write, b.max_write);
  field("max_pages", a.max_pages, b.max_pages);
  field("max_background", a.max_background, b.max_background);
  field("congestion_threshold", a.congestion_threshold, b.congestion_threshold);
  field("time_gran", a.time_gran, b.time_gran);
  field("max_stack_depth", a.max_stack_depth, b.max_stack_depth);
  return out;
}

std::string EncodeHandover(const HandoverState& s, HandoverKind kind) {
  Writer w;
  w.Raw(kind == HandoverKind::kUpdate ? kUpdateMagic : kMagic, sizeof(kMagic));
  w.U32(kHandoverVersion);
  w.Raw(&s.init_in, sizeof(s.init_in));
  w.Raw(&s.init_out, sizeof(s.init_out));
  w.U32(static_cast<uint32_t>(s.fixed.size()));
  for (const std::string& f : s.fixed) w.Str(f);
  w.U64(static_cast<uint64_t>(s.mounted_at_ns));
  w.U32(s.restarts);
  w.U64(s.fs.next_ino);
  w.U64(s.fs.next_handle);
  w.U32(static_cast<uint32_t>(s.fs.inodes.size()));
  for (const auto& n : s.fs.inodes) PutInode(&w, n);
  w.U32(static_cast<uint32_t>(s.fs.files.size()));
  for (const auto& f : s.fs.files) {
    w.U64(f.fh);
    w.U64(f.ino);
    w.Str(f.key);
    w.U64(f.size);
    w.Str(f.etag);
    w.U64(static_cast<uint64_t>(f.mtime_ns));
  }
  w.U32(static_cast<uint32_t>(s.fs.dirs.size()));
  for (const auto& d : s.fs.dirs) {
    w.U64(d.dh);
    w.U64(d.ino);
    w.U64(d.parent_ino);
    w.Str(d.path);
  }
  w.U32(static_cast<uint32_t>(s.kernel_io.size()));
  for (const KernelIoRec& k : s.kernel_io) {
    w.U64(k.ino);
    w.U32(k.cached_opens);
    w.U32(k.passthrough_opens);
    w.U32(static_cast<uint32_t>(k.backing_id));
    w.Str(k.version);
    w.U8(k.opened_passthrough ? 1 : 0);
  }
  return w.Take();
}

namespace {

// The magic and version at the head of `r` (DecodeHandover's errors); in *update which magic.
Status ReadHeader(Reader* r, bool* update) {
  char magic[sizeof(kMagic)];
  r->Raw(magic, sizeof(magic));
  *update = r->ok() && std::memcmp(magic, kUpdateMagic, sizeof(kMagic)) == 0;
  if (!r->ok() || (!*update && std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)) {
    return Status::Corruption("not a tierfs handover state (bad magic)");
  }
  const uint32_t version = r->U32();
  if (!r->ok()) return Status::Corruption("handover state truncated in its header");
  if (version != kHandoverVersion) {
    return Status::NotSupported(fmt::format(
        "the running daemon hands over state version {}; this binary reads version {} only",
        version, kHandoverVersion));
  }
  return Status::OK();
}

}  // namespace

Result<HandoverState> DecodeHandover(std::string_view bytes, HandoverKind* kind) {
  Reader r(bytes);
  bool update = false;
  TIERFS_RETURN_IF_ERROR(ReadHeader(&r, &update));
  if (update && kind == nullptr) {
    return Status::Corruption("a state log's update where a whole handover state belongs");
  }
  if (kind != nullptr) *kind = update ? HandoverKind::kUpdate : HandoverKind::kWhole;
  HandoverState s;
  r.Raw(&s.init_in, sizeof(s.init_in));
  r.Raw(&s.init_out, sizeof(s.init_out));
  for (uint32_t i = 0, n = r.Count(4); i < n; ++i) s.fixed.push_back(r.Str());
  s.mounted_at_ns = static_cast<int64_t>(r.U64());
  s.restarts = r.U32();
  s.fs.next_ino = r.U64();
  s.fs.next_handle = r.U64();
  for (uint32_t i = 0, n = r.Count(64); i < n && r.ok(); ++i) s.fs.inodes.push_back(GetInode(&r));
  for (uint32_t i = 0, n = r.Count(40); i < n && r.ok(); ++i) {
    FilesystemState::FileRec f;
    f.fh = r.U64();
    f.ino = r.U64();
    f.key = r.Str();
    f.size = r.U64();
    f.etag = r.Str();
    f.mtime_ns = static_cast<int64_t>(r.U64());
    s.fs.files.push_back(std::move(f));
  }
  for (uint32_t i = 0, n = r.Count(28); i < n && r.ok(); ++i) {
    FilesystemState::DirRec d;
    d.dh = r.U64();
    d.ino = r.U64();
    d.parent_ino = r.U64();
    d.path = r.Str();
    s.fs.dirs.push_back(std::move(d));
  }
  for (uint32_t i = 0, n = r.Count(21); i < n && r.ok(); ++i) {
    KernelIoRec k;
    k.ino = r.U64();
    k.cached_opens = r.U32();
    k.passthrough_opens = r.U32();
    k.backing_id = static_cast<int32_t>(r.U32());
    k.version = r.Str();
    k.opened_passthrough = r.U8() != 0;
    s.kernel_io.push_back(std::move(k));
  }
  if (!r.ok()) return Status::Corruption("handover state truncated");
  if (!r.AtEnd()) return Status::Corruption("handover state has trailing bytes");
  return s;
}

Status StateCopy::Apply(std::string message) {
  Reader r(message);
  bool update = false;
  TIERFS_RETURN_IF_ERROR(ReadHeader(&r, &update));
  if (!update) {
    whole_ = std::move(message);
    updates_.clear();
    return Status::OK();
  }
  if (whole_.empty()) {
    return Status::FailedPrecondition("a state log's update before its first state");
  }
  updates_.push_back(std::move(message));
  return Status::OK();
}

namespace {

// Merges `u` (an update) into `s`: records of the same number replace the copy's, new ones are
// appended; a path mapped by a new inode is no longer mapped by an older one; the io table is
// replaced whole (a backing id closed since must not survive: the kernel may give its number to
// another file).
class Merger {
 public:
  explicit Merger(HandoverState* s) : s_(s) {
    FilesystemState& fs = s_->fs;
    for (size_t i = 0; i < fs.inodes.size(); ++i) {
      inode_at_[fs.inodes[i].ino] = i;
      if (fs.inodes[i].mapped) mapped_[fs.inodes[i].path] = fs.inodes[i].ino;
    }
    for (size_t i = 0; i < fs.files.size(); ++i) file_at_[fs.files[i].fh] = i;
    for (size_t i = 0; i < fs.dirs.size(); ++i) dir_at_[fs.dirs[i].dh] = i;
  }

  void Merge(HandoverState u) {
    FilesystemState& fs = s_->fs;
    for (FilesystemState::InodeRec& n : u.fs.inodes) {
      if (n.mapped) {
        auto [m, fresh] = mapped_.try_emplace(n.path, n.ino);
        if (!fresh && m->second != n.ino) {
          if (auto old = inode_at_.find(m->second); old != inode_at_.end()) {
            fs.inodes[old->second].mapped = false;
          }
          m->second = n.ino;
        }
      }
      const uint64_t ino = n.ino;
      Put(&fs.inodes, &inode_at_, ino, std::move(n));
    }
    for (FilesystemState::FileRec& f : u.fs.files) {
      const uint64_t fh = f.fh;
      Put(&fs.files, &file_at_, fh, std::move(f));
    }
    for (FilesystemState::DirRec& d : u.fs.dirs) {
      const uint64_t dh = d.dh;
      Put(&fs.dirs, &dir_at_, dh, std::move(d));
    }
    s_->kernel_io = std::move(u.kernel_io);
    fs.next_ino = std::max(fs.next_ino, u.fs.next_ino);
    fs.next_handle = std::max(fs.next_handle, u.fs.next_handle);
  }

 private:
  template <typename Rec>
  static void Put(std::vector<Rec>* vec, std::unordered_map<uint64_t, size_t>* at, uint64_t id,
                  Rec rec) {
    if (auto it = at->find(id); it != at->end()) {
      (*vec)[it->second] = std::move(rec);
    } else {
      (*at)[id] = vec->size();
      vec->push_back(std::move(rec));
    }
  }

  HandoverState* s_;
  std::unordered_map<uint64_t, size_t> inode_at_, file_at_, dir_at_;
  std::unordered_map<std::string, uint64_t> mapped_;
};

}  // namespace

Result<std::string> StateCopy::Encode() const {
  if (whole_.empty()) return Status::FailedPrecondition("no state was logged");
  TIERFS_ASSIGN_OR_RETURN(HandoverState s, DecodeHandover(whole_));
  Merger merger(&s);
  for (const std::string& u : updates_) {
    HandoverKind kind = HandoverKind::kUpdate;
    TIERFS_ASSIGN_OR_RETURN(HandoverState update, DecodeHandover(u, &kind));
    merger.Merge(std::move(update));
  }
  for (FilesystemState::InodeRec& n : s.fs.inodes) n.nlookup = kLookupsUnknown;
  return EncodeHandover(s);
}

Status SendMessage(int sock, std::string_view bytes, int fd) {
  if (bytes.size() > kMaxMessage) return Status::InvalidArgument("handover message too large");
  const uint64_t len = bytes.size();
  struct iovec iov[2] = {{const_cast<uint64_t*>(&len), sizeof(len)},
                         {const_cast<char*>(bytes.data()), bytes.size()}};
  struct msghdr msg {};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  // The descriptor goes with the first byte; the rest follows in plain sends.
  size_t done = 0;
  const size_t total = sizeof(len) + bytes.size();
  while (done < total) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "sending the handover message");
    }
    done += static_cast<size_t>(n);
    msg.msg_control = nullptr;
    msg.msg_controllen = 0;
    // Skip what was sent.
    size_t skip = static_cast<size_t>(n);
    while (msg.msg_iovlen > 0 && skip >= msg.msg_iov[0].iov_len) {
      skip -= msg.msg_iov[0].iov_len;
      ++msg.msg_iov;
      --msg.msg_iovlen;
    }
    if (msg.msg_iovlen > 0) {
      msg.msg_iov[0].iov_base = static_cast<char*>(msg.msg_iov[0].iov_base) + skip;
      msg.msg_iov[0].iov_len -= skip;
    }
  }
  return Status::OK();
}

namespace {

// Reads exactly `n` bytes into `p` by `deadline`, taking a descriptor that comes with them.
Status ReadExactly(int sock, char* p, size_t n, std::chrono::steady_clock::time_point deadline,
                   UniqueFd* fd) {
  size_t done = 0;
  while (done < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status::TimedOut("no handover message in time");
    struct pollfd pfd = {sock, POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0 && errno != EINTR) return Status::FromErrno(errno, "poll on the handover socket");
    if (pr <= 0) continue;
    struct iovec iov = {p + done, n - done};
    struct msghdr msg {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t got = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::FromErrno(errno, "reading the handover socket");
    }
    if (got == 0) return Status::Unavailable("the other daemon closed the handover socket");
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c), sizeof(int));
        if (fd != nullptr) {
          *fd = UniqueFd(received);
        } else {
          ::close(received);
        }
      }
    }
    done += static_cast<size_t>(got);
  }
  return Status::OK();
}

}  // namespace

Result<std::string> ReceiveMessage(int sock, std::chrono::steady_clock::time_point deadline,
                                   UniqueFd* fd) {
  uint64_t len = 0;
  TIERFS_RETURN_IF_ERROR(
      ReadExactly(sock, reinterpret_cast<char*>(&len), sizeof(len), deadline, fd));
  if (len > kMaxMessage) return Status::Corruption("handover message too large");
  std::string bytes(len, '\0');
  TIERFS_RETURN_IF_ERROR(ReadExactly(sock, bytes.data(), bytes.size(), deadline, fd));
  return bytes;
}

// ---- ReadGate ----

// A reader thread's membership: whether it serves a request it read. When the thread ends while
// serving one (libfuse lets idle workers go), the gate counts it done.
struct ReaderSlot {
  ReadGate* gate = nullptr;
  bool serving = false;
  ~ReaderSlot() {
    if (gate != nullptr && serving) gate->Finished();
  }
};

namespace {
thread_local ReaderSlot t_slot;
}  // namespace

ReadGate::ReadGate() : cv_(&mu_) {
  struct sigaction sa {};
  sa.sa_handler = OnWake;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the read returns EINTR
  sigaction(WakeSignal(), &sa, nullptr);
}

ReadGate::~ReadGate() = default;

bool ReadGate::Enter() {
  if (t_slot.gate != this) {
    // A thread new to this gate: it takes the wake signal (libfuse's workers inherit the mask of
    // the thread that started the loop).
    t_slot.gate = this;
    t_slot.serving = false;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, WakeSignal());
    pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
  }
  MutexLock l(&mu_);
  if (t_slot.serving) {
    t_slot.serving = false;
    --serving_;
    cv_.SignalAll();
  }
  while (paused_ && !closed_) cv_.Wait();
  if (closed_) return false;
  in_read_.push_back(pthread_self());
  return true;
}

void ReadGate::Leave(bool got_request) {
  MutexLock l(&mu_);
  auto it = std::find_if(in_read_.begin(), in_read_.end(),
                         [](pthread_t t) { return pthread_equal(t, pthread_self()); });
  if (it != in_read_.end()) in_read_.erase(it);
  if (got_request) {
    t_slot.serving = true;
    ++serving_;
  }
  cv_.SignalAll();
}

void ReadGate::Finished() {
  MutexLock l(&mu_);
  --serving_;
  cv_.SignalAll();
}

bool ReadGate::Pause(std::chrono::steady_clock::time_point deadline,
                     const std::function<bool()>& idle) {
  MutexLock l(&mu_);
  paused_ = true;
  while (true) {
    if (in_read_.empty() && serving_ == 0 && idle()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    // A reader may be between its Enter and its read(2): the signal is sent again until it has
    // left the read.
    for (pthread_t t : in_read_) pthread_kill(t, WakeSignal());
    cv_.WaitFor(std::chrono::milliseconds(5));
  }
}

void ReadGate::Resume() {
  MutexLock l(&mu_);
  paused_ = false;
  cv_.SignalAll();
}

void ReadGate::Close() {
  MutexLock l(&mu_);
  closed_ = true;
  cv_.SignalAll();
}

}  // namespace tierfs::fuse_internal
