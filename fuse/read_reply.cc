// Read replies and stores at open (fuse/internal/read_reply.h).

#include "fuse/internal/read_reply.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <span>

#include "base/logging.h"
#include "fuse/internal/kernel_protocol.h"

namespace tierfs::fuse_internal {
namespace {

// This thread's buffer for bytes read out of cache files (ReplyFromFilesCopied, StoreInKernel):
// kept from request to request, so at most one per thread, of the largest size it was asked for.
std::vector<std::byte>& ThreadBuffer(size_t bytes) {
  thread_local std::vector<std::byte> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf;
}

// A reply with file slices that libfuse could not splice: the file bytes are read into this
// thread's buffer (ThreadBuffer), kept from reply to reply (libfuse's fallback would allocate,
// fault in and free one per reply: 11% of the daemon's time in a warm L2 read), and written with
// the memory slices in one writev. A failed read of a cache file is EIO (never a short reply).
void ReplyFromFilesCopied(fuse_req_t req, const std::vector<BlockSlice>& v) {
  size_t file_bytes = 0;
  for (const BlockSlice& s : v) file_bytes += s.file ? s.length : 0;
  std::vector<std::byte>& buf = ThreadBuffer(file_bytes);
  std::vector<struct iovec> iov(v.size());
  size_t at = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].file) {
      std::span<std::byte> out(buf.data() + at, v[i].length);
      if (!v[i].file->ReadAt(v[i].offset, out).ok()) {
        fuse_reply_err(req, EIO);
        return;
      }
      iov[i].iov_base = out.data();
      at += v[i].length;
    } else {
      iov[i].iov_base = const_cast<std::byte*>(v[i].block->data().data() + v[i].offset);
    }
    iov[i].iov_len = v[i].length;
  }
  fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
}

// A fuse_bufvec over the slices `v` (not empty), built in `storage` (fuse_bufvec ends in a
// one-element array: room for v.size() buffers): a cache-file slice is a file buffer libfuse
// splices from (with SPLICE_WRITE: the file's page-cache pages into a pipe and on to /dev/fuse),
// a memory slice a memory buffer. The slices must outlive the bufvec's use.
fuse_bufvec* SpliceBufvec(const std::vector<BlockSlice>& v, std::vector<std::byte>* storage) {
  storage->assign(sizeof(fuse_bufvec) + (v.size() - 1) * sizeof(fuse_buf), std::byte{0});
  auto* bv = new (storage->data()) fuse_bufvec{};
  bv->count = v.size();
  for (size_t i = 0; i < v.size(); ++i) {
    fuse_buf& b = bv->buf[i];
    b = fuse_buf{};
    b.size = v[i].length;
    if (v[i].file) {
      // FD_RETRY: libfuse splices until the slice is complete (one splice call may move less).
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY);
      b.fd = v[i].file->fd();
      b.pos = static_cast<off_t>(v[i].file->offset() + v[i].offset);
    } else {
      b.mem = const_cast<std::byte*>(v[i].block->data().data() + v[i].offset);
    }
  }
  return bv;
}

}  // namespace

bool StoreInKernel(Context* ctx, fuse_ino_t ino, uint64_t fh) {
  if (ctx->se == nullptr) return false;
  auto slices = ctx->fs->ReadWholeIfLocal(fh, ctx->store_on_open_max);
  if (!slices.ok() || slices->empty()) return false;
  const std::vector<BlockSlice>& v = *slices;
  size_t bytes = 0;
  for (const BlockSlice& s : v) bytes += s.length;
  const bool from_files =
      std::any_of(v.begin(), v.end(), [](const BlockSlice& s) { return s.file != nullptr; });
  // A file L2 holds goes from its cache file into the kernel without crossing user space, as an
  // L2 read reply does, when the splice pipe holds it (the notification's header is two iovecs:
  // fuse_out_header and fuse_notify_store_out, 24 bytes).
  constexpr size_t kNotifyStoreOut = 24;
  if (from_files &&
      SplicePipeNeed(bytes + kNotifyStoreOut, v.size() + 1) <= ctx->splice_pipe_bytes.load()) {
    std::vector<std::byte> storage;
    const int rc = fuse_lowlevel_notify_store(ctx->se, ino, 0, SpliceBufvec(v, &storage),
                                              static_cast<fuse_buf_copy_flags>(0));
    if (rc != 0) {
      Logger(Module::kFuse)
          .debug("store at open of inode {} (spliced): {}", ino, std::strerror(-rc));
      return false;
    }
    ctx->fs->HandedToKernel(fh);
    return true;
  }
  fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
  if (v.size() == 1 && v[0].file == nullptr) {
    bv.buf[0].mem = const_cast<std::byte*>(v[0].block->data().data() + v[0].offset);
    bv.buf[0].size = v[0].length;
  } else {
    const size_t total = bytes;
    std::vector<std::byte>& buf = ThreadBuffer(total);
    size_t at = 0;
    for (const BlockSlice& s : v) {
      std::span<std::byte> out(buf.data() + at, s.length);
      if (s.file) {
        if (!s.file->ReadAt(s.offset, out).ok()) return false;  // the read path will say why
      } else {
        std::memcpy(out.data(), s.block->data().data() + s.offset, s.length);
      }
      at += s.length;
    }
    bv.buf[0].mem = buf.data();
    bv.buf[0].size = total;
  }
  const int rc = fuse_lowlevel_notify_store(ctx->se, ino, 0, &bv, FUSE_BUF_NO_SPLICE);
  if (rc != 0) {
    Logger(Module::kFuse).debug("store at open of inode {}: {}", ino, std::strerror(-rc));
    return false;
  }
  ctx->fs->HandedToKernel(fh);
  return true;
}

void ReplyRead(fuse_req_t req, const Result<std::vector<BlockSlice>>& slices) {
  const Context* ctx = Ctx(req);
  if (!slices.ok()) {
    fuse_reply_err(req, ToErrno(slices.status()));
    return;
  }
  const std::vector<BlockSlice>& v = *slices;
  const bool from_files =
      std::any_of(v.begin(), v.end(), [](const BlockSlice& s) { return s.file != nullptr; });
  size_t bytes = 0;
  for (const BlockSlice& s : v) bytes += s.length;
  if (v.empty()) {
    fuse_reply_buf(req, nullptr, 0);  // EOF
  } else if (from_files && SplicePipeNeed(bytes, v.size()) > ctx->splice_pipe_bytes.load()) {
    ReplyFromFilesCopied(req, v);
  } else if (from_files) {
    std::vector<std::byte> storage;
    fuse_reply_data(req, SpliceBufvec(v, &storage), static_cast<fuse_buf_copy_flags>(0));
  } else if (v.size() == 1) {
    fuse_bufvec bv = FUSE_BUFVEC_INIT(v[0].length);
    bv.buf[0].mem = const_cast<std::byte*>(v[0].block->data().data() + v[0].offset);
    fuse_reply_data(req, &bv, FUSE_BUF_NO_SPLICE);
  } else {
    std::vector<struct iovec> iov(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      iov[i].iov_base = const_cast<std::byte*>(v[i].block->data().data() + v[i].offset);
      iov[i].iov_len = v[i].length;
    }
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
  }
}

}  // namespace tierfs::fuse_internal
