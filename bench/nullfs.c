// nullfs: a do-nothing read-only FUSE filesystem that serves files from memory, so the benchmark
// can measure the FUSE ceiling of the machine (kernel <-> daemon round trips, copies, no I/O).
//
// The tree is generated from a layout, the same one bench/seed.py writes to the origin:
//   GROUP/dNNN/fNNNNN.bin   (NDIRS > 0)      GROUP/fNNNNN.bin   (NDIRS == 0)
// Every file's content is a 4 KiB repeating pattern, served from one static buffer: no per-read
// allocation, no copy other than the one libfuse does into /dev/fuse.
//
//   nullfs MOUNTPOINT --layout big:0:2:1073741824,small:10:1000:131072,tiny:200:100:1024
//          [-f] [-o max_read=1048576] [-o ...]
//   layout entry: NAME:NDIRS:FILES_PER_DIR:SIZE_BYTES
//
// With --backing DIR it serves each file's bytes from DIR/<the same path> instead (a file opened
// per FUSE open, read with pread or spliced by libfuse): the ceiling of a FUSE file system that
// serves local files, to compare with local disk once the page cache is dropped.
//
//   nullfs MOUNTPOINT --layout small:10:1000:131072 --backing /data  (/data/small/d000/...)
//
// With --origin URL it serves each file's bytes from URL/<the same path>, the way the benchmark's
// origin ceiling reads them (run.sh raw_seqpar): the first open of a file starts fetching the whole
// file into memory as 16 ranges, 8 ranged GETs at a time (libcurl, one connection per fetching
// thread), and a read is answered as soon as its bytes have arrived. With --flash PREFIX as well,
// each MiB is also written to PREFIX.INO (O_DIRECT, at its offset; INO the file's inode number)
// once it has arrived, by a writer thread of its own (the GETs and the reads never wait for it).
// The least a FUSE cache of that origin has to do, done in one process with no cache logic: the
// coupled ceiling of a cold sequential read (the raw_seqpar "fuse" and "fusel2" ceilings run the
// same work as independent jobs instead).
//
//   nullfs MOUNTPOINT --layout big:0:2:1073741824 --origin http://127.0.0.1:9000/bucket
//          [--flash /cache/probe] [--ranges N]     (writes /cache/probe.INO)
//
// --ranges N (default 16, at most 1024): the file is fetched as N ranges (of whole MiB), still 8 at
// a time; 128 for a 1 GiB file gives tierfs's request shape (8 MiB readahead runs, 8 in flight),
// but never held back by the reader.
//
// Low-level libfuse 3 API, multi-threaded loop, keep_cache on open, 1 hour entry/attr timeouts,
// max_readahead as large as the kernel allows. Built by CMake: `ninja -C build bench_nullfs`
// (build/bench/nullfs).
#define _GNU_SOURCE  // O_DIRECT
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATTERN_PERIOD 4096u
#define MAX_READ (1u << 20)
#define TIMEOUT 3600.0

struct node {
  char name[24];
  uint64_t size;       // files only
  uint32_t parent;     // index
  uint32_t first;      // first child index (dirs)
  uint32_t nchild;     // number of children (dirs)
  uint8_t is_dir;
};

static struct node *nodes;
static uint32_t nnodes;
static const char *backing;  // --backing DIR, or NULL: serve the pattern
static const char *origin;   // --origin URL, or NULL
static const char *flash;    // --flash PREFIX (with --origin), or NULL
static char pattern[MAX_READ + PATTERN_PERIOD];

struct group {
  char name[24];
  uint32_t ndirs, nfiles;
  uint64_t size;
};

static int cmp_group(const void *a, const void *b) {
  return strcmp(((const struct group *)a)->name, ((const struct group *)b)->name);
}

static uint32_t add_node(const char *name, int is_dir, uint64_t size, uint32_t parent) {
  struct node *n = &nodes[nnodes];
  size_t len = strnlen(name, sizeof(n->name) - 1);
  memcpy(n->name, name, len);
  n->name[len] = '\0';
  n->is_dir = (uint8_t)is_dir;
  n->size = size;
  n->parent = parent;
  n->first = 0;
  n->nchild = 0;
  return nnodes++;
}

static void add_files(uint32_t dir, uint32_t count, uint64_t size) {
  char name[24];
  nodes[dir].first = nnodes;
  nodes[dir].nchild = count;
  for (uint32_t i = 0; i < count; i++) {
    snprintf(name, sizeof(name), "f%05u.bin", i);
    add_node(name, 0, size, dir);
  }
}

static int build_tree(const char *spec) {
  struct group g[64];
  int ng = 0;
  char *copy = strdup(spec), *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (ng == 64) return -1;
    unsigned long long size;
    char name[24];
    if (sscanf(tok, "%23[^:]:%u:%u:%llu", name, &g[ng].ndirs, &g[ng].nfiles, &size) != 4) {
      fprintf(stderr, "nullfs: bad layout entry '%s'\n", tok);
      return -1;
    }
    if (g[ng].ndirs > 1000 || g[ng].nfiles > 100000) return -1;
    snprintf(g[ng].name, sizeof(g[ng].name), "%s", name);
    g[ng].size = size;
    ng++;
  }
  free(copy);
  qsort(g, ng, sizeof(g[0]), cmp_group);  // children must be sorted by name for lookup
  uint64_t total = 1 + ng;
  for (int i = 0; i < ng; i++)
    total += (uint64_t)(g[i].ndirs ? g[i].ndirs : 1) * g[i].nfiles + g[i].ndirs;
  nodes = calloc(total, sizeof(*nodes));
  if (!nodes) return -1;
  add_node("", 1, 0, 0);  // root: index 0, ino 1
  nodes[0].first = 1;
  nodes[0].nchild = ng;
  for (int i = 0; i < ng; i++) add_node(g[i].name, 1, 0, 0);
  for (int i = 0; i < ng; i++) {
    uint32_t gi = 1 + i;
    if (g[i].ndirs == 0) {
      add_files(gi, g[i].nfiles, g[i].size);
      continue;
    }
    nodes[gi].first = nnodes;
    nodes[gi].nchild = g[i].ndirs;
    uint32_t first = nnodes;
    char name[24];
    for (uint32_t d = 0; d < g[i].ndirs; d++) {
      snprintf(name, sizeof(name), "d%03u", d);
      add_node(name, 1, 0, gi);
    }
    for (uint32_t d = 0; d < g[i].ndirs; d++) add_files(first + d, g[i].nfiles, g[i].size);
  }
  return 0;
}

static struct node *node_of(fuse_ino_t ino) {
  if (ino < 1 || ino > nnodes) return NULL;
  return &nodes[ino - 1];
}

// ROOT/GROUP/dNNN/fNNNNN.bin for file node idx (ROOT: --backing's DIR or --origin's URL). Returns
// 0, or -1 if it does not fit.
static int backing_path(const char *root, uint32_t idx, char *out, size_t cap) {
  uint32_t chain[8];
  int depth = 0;
  for (uint32_t i = idx; i != 0 && depth < 8; i = nodes[i].parent) chain[depth++] = i;
  int len = snprintf(out, cap, "%s", root);
  for (int d = depth - 1; d >= 0 && len >= 0 && (size_t)len < cap; d--)
    len += snprintf(out + len, cap - (size_t)len, "/%s", nodes[chain[d]].name);
  return len >= 0 && (size_t)len < cap ? 0 : -1;
}

// --origin: one whole-file fetch per file, started by its first open.
#define MAX_RANGES 1024u
static unsigned fetch_ranges = 16;  // --ranges N, at most MAX_RANGES
#define FETCH_STREAMS 8u
#define FLASH_PIECE (1u << 20)
struct fetch {
  char url[4096];
  unsigned char *buf;  // the file's bytes, mmap'd (page-aligned, as O_DIRECT needs)
  uint64_t size, range;
  uint64_t got[MAX_RANGES];    // bytes of each range arrived
  uint64_t wrote[MAX_RANGES];  // bytes of each range written to flash
  unsigned next;               // next range to fetch
  int failed;
  int flash_fd;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};
static struct fetch **fetches;  // per node, created by the first open
static pthread_mutex_t fetches_mu = PTHREAD_MUTEX_INITIALIZER;

struct transfer {
  struct fetch *f;
  unsigned r;
  uint64_t pos;  // bytes of range r received
};

static size_t fetch_write(char *data, size_t size, size_t nmemb, void *userdata) {
  struct transfer *t = userdata;
  struct fetch *f = t->f;
  const size_t len = size * nmemb;
  const uint64_t start = t->r * f->range;
  const uint64_t end = start + f->range < f->size ? start + f->range : f->size;
  if (start + t->pos + len > end) return 0;  // more than asked for: fail the transfer
  memcpy(f->buf + start + t->pos, data, len);
  const uint64_t before = t->pos;
  t->pos += len;
  if (before / FLASH_PIECE != t->pos / FLASH_PIECE || t->pos == end - start) {
    pthread_mutex_lock(&f->mu);
    f->got[t->r] = t->pos;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
  }
  return len;
}

static void *fetch_thread(void *arg) {
  struct fetch *f = arg;
  CURL *h = curl_easy_init();
  for (;;) {
    pthread_mutex_lock(&f->mu);
    const unsigned r = f->next < fetch_ranges && !f->failed ? f->next++ : fetch_ranges;
    pthread_mutex_unlock(&f->mu);
    if (r == fetch_ranges || !h) break;
    const uint64_t start = r * f->range;
    if (start >= f->size) continue;
    const uint64_t end = start + f->range < f->size ? start + f->range : f->size;
    char range[64];
    snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)start,
             (unsigned long long)(end - 1));
    struct transfer t = {f, r, 0};
    curl_easy_setopt(h, CURLOPT_URL, f->url);
    curl_easy_setopt(h, CURLOPT_RANGE, range);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fetch_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(h) != CURLE_OK || t.pos != end - start) {
      fprintf(stderr, "nullfs: GET %s bytes=%s failed\n", f->url, range);
      pthread_mutex_lock(&f->mu);
      f->failed = 1;
      pthread_cond_broadcast(&f->cv);
      pthread_mutex_unlock(&f->mu);
    }
  }
  if (h) curl_easy_cleanup(h);
  return NULL;
}

// --flash: writes each arrived MiB of f (a range's last piece if it is whole pages: O_DIRECT) at
// its offset, in whatever order they arrive, until all are written or a GET failed.
static void *flash_thread(void *arg) {
  struct fetch *f = arg;
  pthread_mutex_lock(&f->mu);
  for (;;) {
    unsigned r = 0, left = 0;
    uint64_t n = 0;
    for (unsigned i = 0; i < fetch_ranges; i++) {
      const uint64_t start = i * f->range;
      const uint64_t len = start >= f->size ? 0
                           : start + f->range < f->size ? f->range : f->size - start;
      if (f->wrote[i] < len) left++;
      const uint64_t ready = f->got[i] - f->wrote[i];
      if (!n && (ready >= FLASH_PIECE || (ready > 0 && f->got[i] == len))) {
        r = i;
        n = ready < FLASH_PIECE ? ready : FLASH_PIECE;
      }
    }
    if (!left || f->failed) break;
    if (!n) {
      pthread_cond_wait(&f->cv, &f->mu);
      continue;
    }
    const uint64_t off = r * f->range + f->wrote[r];
    pthread_mutex_unlock(&f->mu);
    if (n % 4096 == 0 && pwrite(f->flash_fd, f->buf + off, n, (off_t)off) != (ssize_t)n)
      fprintf(stderr, "nullfs: flash write at %llu failed\n", (unsigned long long)off);
    pthread_mutex_lock(&f->mu);
    f->wrote[r] += n;
  }
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

// The fetch of file node idx, started on the first call; NULL if it cannot start.
static struct fetch *fetch_of(uint32_t idx) {
  pthread_mutex_lock(&fetches_mu);
  struct fetch *f = fetches[idx];
  if (!f && (f = calloc(1, sizeof(*f)))) {
    const int bad = backing_path(origin, idx, f->url, sizeof(f->url));
    f->size = nodes[idx].size;
    f->range = (f->size + fetch_ranges - 1) / fetch_ranges;
    f->range = (f->range + FLASH_PIECE - 1) / FLASH_PIECE * FLASH_PIECE;
    f->flash_fd = -1;
    f->buf = f->size ? mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                            MAP_NORESERVE, -1, 0) : NULL;
    char flash_path[4096];
    if (flash && snprintf(flash_path, sizeof(flash_path), "%s.%u", flash, idx + 1) <
                     (int)sizeof(flash_path))
      f->flash_fd = open(flash_path, O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (bad || f->buf == MAP_FAILED || (flash && f->flash_fd < 0)) {
      if (f->buf && f->buf != MAP_FAILED) munmap(f->buf, f->size);
      if (f->flash_fd >= 0) close(f->flash_fd);
      free(f);
      f = NULL;
    } else {
      for (unsigned i = 0; i < FETCH_STREAMS + (f->flash_fd >= 0); i++) {
        pthread_t th;
        if (pthread_create(&th, NULL, i < FETCH_STREAMS ? fetch_thread : flash_thread, f) == 0)
          pthread_detach(th);
      }
      fetches[idx] = f;
    }
  }
  pthread_mutex_unlock(&fetches_mu);
  return f;
}

// Waits until bytes [off, off + size) of f have arrived; 0, or EIO when a GET failed.
static int fetch_wait(struct fetch *f, uint64_t off, uint64_t size) {
  int err = 0;
  pthread_mutex_lock(&f->mu);
  for (uint64_t r = off / f->range; r <= (off + size - 1) / f->range && !err; r++) {
    const uint64_t need = (off + size < (r + 1) * f->range ? off + size : (r + 1) * f->range) -
                          r * f->range;
    while (f->got[r] < need && !f->failed) pthread_cond_wait(&f->cv, &f->mu);
    if (f->got[r] < need) err = EIO;
  }
  pthread_mutex_unlock(&f->mu);
  return err;
}

static void fill_attr(uint32_t idx, struct stat *st) {
  const struct node *n = &nodes[idx];
  memset(st, 0, sizeof(*st));
  st->st_ino = idx + 1;
  if (n->is_dir) {
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2;
  } else {
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = (off_t)n->size;
    st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
  }
  st->st_blksize = 1 << 20;
}

static void nl_init(void *userdata, struct fuse_conn_info *conn) {
  (void)userdata;
  conn->max_read = MAX_READ;  // must match -o max_read, which run.sh passes
  conn->max_readahead = conn->max_readahead > MAX_READ ? MAX_READ : conn->max_readahead;
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  if (backing && (conn->capable & FUSE_CAP_SPLICE_WRITE)) conn->want |= FUSE_CAP_SPLICE_WRITE;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
}

static void nl_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  struct node *p = node_of(parent);
  if (!p || !p->is_dir) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  uint32_t lo = p->first, hi = p->first + p->nchild;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    int c = strcmp(nodes[mid].name, name);
    if (c == 0) {
      struct fuse_entry_param e;
      memset(&e, 0, sizeof(e));
      e.ino = mid + 1;
      e.attr_timeout = TIMEOUT;
      e.entry_timeout = TIMEOUT;
      fill_attr(mid, &e.attr);
      fuse_reply_entry(req, &e);
      return;
    }
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  struct fuse_entry_param e;  // negative entry, cached by the kernel
  memset(&e, 0, sizeof(e));
  e.entry_timeout = TIMEOUT;
  fuse_reply_entry(req, &e);
}

static void nl_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  if (!node_of(ino)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st;
  fill_attr((uint32_t)(ino - 1), &st);
  fuse_reply_attr(req, &st, TIMEOUT);
}

static void nl_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi) {
  (void)fi;
  struct node *d = node_of(ino);
  if (!d || !d->is_dir) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  char *buf = malloc(size);  // one per readdir call (not per read), bounded by the kernel's size
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  size_t used = 0;
  uint64_t total = 2 + (uint64_t)d->nchild;
  for (uint64_t i = (uint64_t)off; i < total; i++) {
    struct stat st;
    memset(&st, 0, sizeof(st));
    const char *name;
    if (i == 0) {
      name = ".";
      st.st_ino = ino;
      st.st_mode = S_IFDIR;
    } else if (i == 1) {
      name = "..";
      st.st_ino = d->parent + 1;
      st.st_mode = S_IFDIR;
    } else {
      uint32_t c = d->first + (uint32_t)(i - 2);
      name = nodes[c].name;
      st.st_ino = c + 1;
      st.st_mode = nodes[c].is_dir ? S_IFDIR : S_IFREG;
    }
    size_t need = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)(i + 1));
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf, used);
  free(buf);
}

static void nl_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct node *n = node_of(ino);
  if (!n) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  if (n->is_dir) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  fi->keep_cache = 1;
  if (backing) {
    char path[4096];
    if (backing_path(backing, (uint32_t)(ino - 1), path, sizeof(path)) != 0) {
      fuse_reply_err(req, ENAMETOOLONG);
      return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      fuse_reply_err(req, errno);
      return;
    }
    fi->fh = (uint64_t)fd;
  } else if (origin) {  // the file's fetch, for its reads (it lives until the process ends)
    struct fetch *f = fetch_of((uint32_t)(ino - 1));
    if (!f) {
      fuse_reply_err(req, EIO);
      return;
    }
    fi->fh = (uint64_t)(uintptr_t)f;
  }
  if (fuse_reply_open(req, fi) != 0 && backing) close((int)fi->fh);  // interrupted: no release
}

static void nl_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino;
  if (backing) close((int)fi->fh);
  fuse_reply_err(req, 0);
}

static void nl_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi) {
  struct node *n = node_of(ino);
  if (!n || n->is_dir) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if ((uint64_t)off >= n->size) {
    fuse_reply_buf(req, NULL, 0);
    return;
  }
  if (size > MAX_READ) size = MAX_READ;
  if ((uint64_t)off + size > n->size) size = (size_t)(n->size - (uint64_t)off);
  if (backing) {  // libfuse splices from the file when it can, else reads it into a buffer
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    buf.buf[0].fd = (int)fi->fh;
    buf.buf[0].pos = off;
    fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
    return;
  }
  if (origin) {
    struct fetch *f = (struct fetch *)(uintptr_t)fi->fh;
    const int err = fetch_wait(f, (uint64_t)off, size);
    if (err) {
      fuse_reply_err(req, err);
    } else {
      fuse_reply_buf(req, (const char *)f->buf + off, size);
    }
    return;
  }
  fuse_reply_buf(req, pattern + ((uint64_t)off % PATTERN_PERIOD), size);
}

static void nl_statfs(fuse_req_t req, fuse_ino_t ino) {
  (void)ino;
  struct statvfs sv;
  memset(&sv, 0, sizeof(sv));
  sv.f_bsize = 4096;
  sv.f_frsize = 4096;
  sv.f_files = nnodes;
  sv.f_namemax = 255;
  fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ops = {
    .init = nl_init,
    .lookup = nl_lookup,
    .getattr = nl_getattr,
    .readdir = nl_readdir,
    .open = nl_open,
    .read = nl_read,
    .release = nl_release,
    .statfs = nl_statfs,
};

int main(int argc, char *argv[]) {
  const char *layout = "big:0:2:1073741824,small:10:1000:131072,tiny:200:100:1024";
  // Take --layout out of argv before libfuse parses the rest.
  int out = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--layout") == 0 && i + 1 < argc) {
      layout = argv[++i];
    } else if (strcmp(argv[i], "--backing") == 0 && i + 1 < argc) {
      backing = argv[++i];
    } else if (strcmp(argv[i], "--origin") == 0 && i + 1 < argc) {
      origin = argv[++i];
    } else if (strcmp(argv[i], "--flash") == 0 && i + 1 < argc) {
      flash = argv[++i];
    } else if (strcmp(argv[i], "--ranges") == 0 && i + 1 < argc) {
      fetch_ranges = (unsigned)atoi(argv[++i]);
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  argv[argc] = NULL;
  if (build_tree(layout) != 0) {
    fprintf(stderr, "nullfs: bad --layout\n");
    return 2;
  }
  if ((origin && backing) || (flash && !origin) || fetch_ranges < 1 || fetch_ranges > MAX_RANGES) {
    fprintf(stderr, "nullfs: --origin excludes --backing; --flash needs --origin; --ranges 1..%u\n",
            MAX_RANGES);
    return 2;
  }
  if (origin && (curl_global_init(CURL_GLOBAL_DEFAULT) != 0 ||
                 !(fetches = calloc(nnodes, sizeof(*fetches))))) {
    fprintf(stderr, "nullfs: cannot set up the origin fetches\n");
    return 1;
  }
  for (size_t i = 0; i < sizeof(pattern); i++)
    pattern[i] = (char)(((i % PATTERN_PERIOD) * 131u + 7u) & 0xff);

  struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
  struct fuse_cmdline_opts opts;
  if (fuse_parse_cmdline(&args, &opts) != 0) return 2;
  if (opts.show_help || !opts.mountpoint) {
    printf("usage: %s MOUNTPOINT --layout NAME:NDIRS:FILES:SIZE,... [--backing DIR | --origin URL "
           "[--flash PREFIX] [--ranges N]] [-f]\n",
           argv[0]);
    fuse_cmdline_help();
    fuse_lowlevel_help();
    return opts.show_help ? 0 : 2;
  }
  fuse_opt_add_arg(&args, "-oro,default_permissions,fsname=nullfs,subtype=nullfs");
  struct fuse_session *se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
  int ret = 1;
  if (!se) goto out;
  if (fuse_set_signal_handlers(se) != 0) goto out_destroy;
  if (fuse_session_mount(se, opts.mountpoint) != 0) goto out_signals;
  fprintf(stderr, "nullfs: %u nodes mounted on %s%s%s\n", nnodes, opts.mountpoint,
          backing || origin ? ", served from " : "", backing ? backing : origin ? origin : "");
  fuse_daemonize(opts.foreground);
  struct fuse_loop_config *cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, opts.clone_fd);
  fuse_loop_cfg_set_max_threads(cfg, 16);
  fuse_loop_cfg_set_idle_threads(cfg, 8);
  ret = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_session_unmount(se);
out_signals:
  fuse_remove_signal_handlers(se);
out_destroy:
  fuse_session_destroy(se);
out:
  free(opts.mountpoint);
  fuse_opt_free_args(&args);
  free(nodes);
  return ret ? 1 : 0;
}
