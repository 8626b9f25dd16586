// fuse/internal/libfuse — libfuse's low-level API at the version tierfs is written against. Every
// file of fuse/ includes libfuse through this header, and no other module includes it.
#pragma once

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)  // fuse_loop_cfg_* (libfuse >= 3.12)
#endif
#include <fuse3/fuse_lowlevel.h>
