// fuse/internal/passthrough — the io mode of each open when the connection has FUSE passthrough
// (FuseOptions::passthrough; the protocol is in fuse/internal/kernel_protocol.h). A file L2 holds
// whole in one file of exactly its bytes is opened with that file as its backing file, and the
// kernel reads it without us. The kernel keeps one io mode per inode: while any open of an inode
// is in passthrough mode every other open must be too, with the same backing file, and a
// passthrough open is refused while a cached-mode open is outstanding (either mismatch fails
// open(2) with EIO). So the opens and releases of each inode are counted by mode
// (Context::KernelIo, counted before the reply, released at RELEASE, which the kernel sends after
// its own count dropped); a backing id lives until the last passthrough release of its inode.
//
// Thread-safety: thread-safe (Context::io_mu); no lock is held across a reply.
#pragma once

#include <cstdint>

#include "fuse/filesystem.h"
#include "fuse/internal/context.h"

namespace tierfs::fuse_internal {

// How one open is answered when the connection has passthrough.
struct OpenIo {
  bool passthrough = false;
  int32_t backing_id = 0;
  // Another version than the one the inode's passthrough opens read: refused (ESTALE).
  bool refused = false;
  // Cached mode for an inode whose opens since the lookup were all passthrough: the kernel holds
  // none of its pages, so they may be stored with this open (as with a first open).
  bool may_store = false;
};

// Chooses the io mode of an open of `ino` (answered with `r.fh`) and counts it, before the
// reply. Passthrough while the inode has passthrough opens, with their backing file (the kernel
// allows no other mode, and one backing file per inode): an open of another version (the object
// changed at the origin while those are open) is refused, since the kernel would serve the old
// version's bytes to it (mmap maps the backing file even with FOPEN_DIRECT_IO). Else cached
// while the inode has cached opens. Else passthrough when the file can have a backing file and
// either the kernel holds none of the file's pages (its first open since the lookup) or the
// inode's opens since then were passthrough, unless such a reopened file's backing pages are all
// in the page cache (read lately): then it is opened cached and stored with its open (the kernel
// holds none of its pages), because a passthrough read marks the inode's atime stale on this
// writable mount, so every later stat(2) of it asks us, where a file in the inode's own page
// cache costs no request at all when it is read again.
OpenIo ChooseOpenIo(Context* ctx, fuse_ino_t ino, const OpenResult& r);

// The release (or failed reply) of an open counted by ChooseOpenIo.
void ReleaseOpenIo(Context* ctx, fuse_ino_t ino, bool passthrough);

// The kernel forgot `ino`: its preference goes (the entry itself once its last open is released).
void ForgetOpenIo(Context* ctx, fuse_ino_t ino);

}  // namespace tierfs::fuse_internal
