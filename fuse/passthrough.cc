// The io mode of each open under FUSE passthrough (fuse/internal/passthrough.h).

#include "fuse/internal/passthrough.h"

#include <utility>

#include "fuse/internal/kernel_protocol.h"

namespace tierfs::fuse_internal {

OpenIo ChooseOpenIo(Context* ctx, fuse_ino_t ino, const OpenResult& r) {
  bool preferred = r.first_open;
  if (!preferred) {
    MutexLock l(&ctx->io_mu);
    auto it = ctx->io.find(ino);
    preferred = it != ctx->io.end() && it->second.opened_passthrough;
  }
  FileExtentRef file;
  bool warm = false;
  if (preferred && !r.attr_changed && ctx->passthrough.load()) {
    if (auto f = ctx->fs->FileForKernel(r.fh); f.ok()) {
      file = std::move(f).value();
      // Not on a first open: verifying a block after a restart reads its file, which would
      // make every first use look like a file read lately.
      warm = !r.first_open && file->AllCached();
    }
  }
  MutexLock l(&ctx->io_mu);
  Context::KernelIo& k = ctx->io[ino];
  OpenIo io;
  if (k.passthrough_opens > 0) {
    if (r.version != k.version) {
      io.refused = true;
      return io;
    }
    ++k.passthrough_opens;
    io.passthrough = true;
    io.backing_id = k.backing_id;
    return io;
  }
  if (k.cached_opens == 0 && file != nullptr && !warm && ctx->passthrough.load()) {
    if (const int32_t id = BackingOpen(ctx, file->fd()); id > 0) {
      k.passthrough_opens = 1;
      k.backing_id = id;
      k.version = r.version;
      k.opened_passthrough = true;
      io.passthrough = true;
      io.backing_id = id;
      return io;
    }
  }
  // No open outstanding, and every open since the lookup was passthrough: the inode's page
  // cache is empty, and no reader of another version can see a store.
  io.may_store = k.opened_passthrough && k.cached_opens == 0;
  k.opened_passthrough = false;  // from now on its pages are the inode's
  ++k.cached_opens;
  return io;
}

void ReleaseOpenIo(Context* ctx, fuse_ino_t ino, bool passthrough) {
  MutexLock l(&ctx->io_mu);
  auto it = ctx->io.find(ino);
  if (it == ctx->io.end()) return;
  Context::KernelIo& k = it->second;
  if (passthrough) {
    if (k.passthrough_opens > 0 && --k.passthrough_opens == 0) {
      BackingClose(ctx, k.backing_id);
      k.backing_id = 0;
    }
  } else if (k.cached_opens > 0) {
    --k.cached_opens;
  }
  if (k.passthrough_opens == 0 && k.cached_opens == 0 && !k.opened_passthrough) ctx->io.erase(it);
}

void ForgetOpenIo(Context* ctx, fuse_ino_t ino) {
  MutexLock l(&ctx->io_mu);
  auto it = ctx->io.find(ino);
  if (it == ctx->io.end()) return;
  it->second.opened_passthrough = false;
  if (it->second.passthrough_opens == 0 && it->second.cached_opens == 0) ctx->io.erase(it);
}

}  // namespace tierfs::fuse_internal
