// The handlers of open, read and release (fuse/internal/ops.h): the open's io mode (cached,
// passthrough, or opens in the kernel), the store at open, and reads served inline when every
// block is in L1/L2 or through the remote slots when one must be fetched.

#include <fcntl.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "base/logging.h"
#include "fuse/filesystem.h"
#include "fuse/internal/context.h"
#include "fuse/internal/kernel_protocol.h"
#include "fuse/internal/ops.h"
#include "fuse/internal/passthrough.h"
#include "fuse/internal/read_reply.h"

namespace tierfs::fuse_internal {
namespace {

// After an open's reply: a new version of another size (seen at once after an ESTALE, whatever
// the attribute timeout) drops the kernel's cached attributes (offset -1: not the pages), so its
// i_size is fetched again instead of cutting reads at the old size. After the reply: not in the
// path of this open.
void DropChangedAttributes(Context* ctx, fuse_ino_t ino, const OpenResult& r) {
  if (r.attr_changed && ctx->se != nullptr) fuse_lowlevel_notify_inval_inode(ctx->se, ino, -1, 0);
}

// Opens in the kernel: this one did its checks (and pinned the version at the inode); ENOSYS
// tells the kernel to open files itself from now on, keeping their pages (FOPEN_KEEP_CACHE;
// AUTO_INVAL_DATA drops them when getattr shows another size or mtime). Reads then come with
// fh 0 (Filesystem::ReadInode).
void ReplyOpenInKernel(Context* ctx, fuse_req_t q, fuse_ino_t ino, const OpenResult& r) {
  ctx->fs->Release(r.fh);
  fuse_reply_err(q, ENOSYS);
  DropChangedAttributes(ctx, ino, r);
}

// With passthrough negotiated: counts the open in its io mode (ChooseOpenIo) and replies it if
// that mode is passthrough or a refusal. True if replied; else `*may_store` says whether the
// cached open may store the file.
bool ReplyPassthroughOpen(Context* ctx, fuse_req_t q, fuse_ino_t ino, const OpenResult& r,
                          bool* may_store) {
  const OpenIo io = ChooseOpenIo(ctx, ino, r);
  *may_store = io.may_store;
  if (io.refused) {
    Logger(Module::kFuse)
        .warn(
            "open of inode {}: the object changed while open files of this host read the "
            "previous version through passthrough; ESTALE until they are closed",
            ino);
    ctx->fs->Release(r.fh);
    fuse_reply_err(q, ESTALE);
    // The inode took the new size: the kernel's attributes go, as after any open that saw it.
    DropChangedAttributes(ctx, ino, r);
    return true;
  }
  if (!io.passthrough) return false;
  kabi::OpenOut out{};
  out.fh = r.fh | kFhPassthrough;
  out.open_flags = kabi::kOpenPassthrough | kabi::kOpenNoFlush;
  out.backing_id = io.backing_id;
  ctx->LogState();
  if (fuse_reply_buf(q, reinterpret_cast<const char*>(&out), sizeof(out)) == -ENOENT) {
    ctx->fs->Release(r.fh);  // interrupted
    ReleaseOpenIo(ctx, ino, /*passthrough=*/true);
    return true;
  }
  ctx->fs->NotePassthroughOpen();
  DropChangedAttributes(ctx, ino, r);
  return true;
}

// A cached-mode open, with the file stored in the kernel's page cache first where it may be.
void ReplyCachedOpen(Context* ctx, fuse_req_t q, fuse_ino_t ino, const OpenResult& r,
                     fuse_file_info f, bool may_store) {
  f.fh = r.fh;
  // A first open finds no pages of the file in the kernel, so a store now needs no keep_cache
  // check; a changed size waits for the kernel to learn it (notify_store would extend i_size).
  const bool stored = (r.first_open || may_store) && !r.attr_changed &&
                      ctx->store_on_open_max > 0 && StoreInKernel(ctx, ino, r.fh);
  f.keep_cache = r.keep_cache || stored ? 1 : 0;
  f.direct_io = 0;
  f.noflush = 1;  // nothing to flush on close(2) of a read-only file
  ctx->LogState();
  if (fuse_reply_open(q, &f) == -ENOENT) {
    ctx->fs->Release(r.fh);  // interrupted
    if (ctx->passthrough_negotiated.load()) ReleaseOpenIo(ctx, ino, /*passthrough=*/false);
    return;
  }
  DropChangedAttributes(ctx, ino, r);
}

void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Context* ctx = Ctx(req);
  // Read-only: write access is refused here, before anything is fetched (the mount is not
  // MS_RDONLY so that user.tierfs.* setxattr reaches us; see Session::Mount).
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
    fuse_reply_err(req, EROFS);
    return;
  }
  // Open revalidates the object (a HEAD when its metadata is stale). `fi` lives in libfuse's
  // request handling, gone once this handler returns: copied.
  const auto start = OpTimer::Start(ctx);
  ctx->remote->Dispatch(req, [ctx, ino, f = *fi, start](fuse_req_t q, RequestToken* t) {
    OpTimer timer(ctx, Op::kOpen, start);
    auto r = ctx->fs->Open(ino);
    t->Detach();
    if (!r.ok()) {
      fuse_reply_err(
          q, r.status().code() == Status::Code::kInvalidArgument ? EISDIR : ToErrno(r.status()));
      return;
    }
    if (ctx->no_open.load()) {
      ReplyOpenInKernel(ctx, q, ino, *r);
      return;
    }
    bool may_store = false;
    if (ctx->passthrough_negotiated.load() && ReplyPassthroughOpen(ctx, q, ino, *r, &may_store)) {
      return;
    }
    ReplyCachedOpen(ctx, q, ino, *r, f, may_store);
  });
}

// fh 0: no open handle (opens in the kernel, FuseOptions::open_in_kernel): the inode's version.
Result<std::vector<BlockSlice>> ReadFile(Context* ctx, fuse_ino_t ino, uint64_t fh, uint64_t offset,
                                         size_t size, const CancelToken* token) {
  if (fh != 0) return ctx->fs->Read(fh, offset, size, token);
  auto r = ctx->fs->ReadInode(ino, offset, size, token);
  if (r.status().code() == Status::Code::kFailedPrecondition && ctx->se != nullptr) {
    // The inode took the origin's new version: drop the kernel's attributes (offset -1: not the
    // pages, so no page lock is waited for here), so getattr shows the new size and mtime and
    // AUTO_INVAL_DATA drops the old pages.
    fuse_lowlevel_notify_inval_inode(ctx->se, ino, -1, 0);
  }
  return r;
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info* fi) {
  Context* ctx = Ctx(req);
  if (off < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  const uint64_t fh = fi->fh & ~kFhPassthrough;  // (the kernel reads passthrough files itself)
  const auto offset = static_cast<uint64_t>(off);
  const auto start = OpTimer::Start(ctx);
  if (fh == 0 ? ctx->fs->ReadInodeIsLocal(ino, offset, size)
              : ctx->fs->ReadIsLocal(fh, offset, size)) {
    // Every block is in L1/L2: served here, without a remote slot.
    OpTimer timer(ctx, Op::kRead, start);
    ReplyRead(req, ReadFile(ctx, ino, fh, offset, size, nullptr));
    return;
  }
  ctx->remote->Dispatch(req, [ctx, ino, fh, offset, size, start](fuse_req_t q, RequestToken* t) {
    OpTimer timer(ctx, Op::kRead, start);
    auto slices = ReadFile(ctx, ino, fh, offset, size, t->token());
    t->Detach();
    ReplyRead(q, slices);
  });
}

void Release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Context* ctx = Ctx(req);
  OpTimer timer(ctx, Op::kRelease);
  ctx->fs->Release(fi->fh & ~kFhPassthrough);
  if (ctx->passthrough_negotiated.load()) {
    ReleaseOpenIo(ctx, ino, (fi->fh & kFhPassthrough) != 0);
  }
  fuse_reply_err(req, 0);
}

}  // namespace

void AddFileOps(fuse_lowlevel_ops* ops) {
  ops->open = Open;
  ops->read = Read;
  ops->release = Release;
}

}  // namespace tierfs::fuse_internal
