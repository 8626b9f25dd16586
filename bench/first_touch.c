// first_touch: what the first access to fresh anonymous memory costs on this machine, the
// measurement behind `cache.l1_prefault` (docs/configuration.md, "Memory").
//
// A daemon whose L1 is empty fills it with 128 KiB copies into memory it has never touched. On a
// bare-metal host the page faults cost little; on some VMs (this project's PVM guest) each page's
// first access from user space exits to the hypervisor even after the kernel has populated it.
// This program times, on one mapping of SIZE bytes (default 1 GiB):
//
//   populate  madvise(MADV_POPULATE_WRITE), then the first fill by 128 KiB memcpy, then a second
//   touch     one byte written per page, then a fill by 128 KiB memcpy
//   pread     with FILE: the first pread of FILE into fresh memory (a kernel copy), then a second
//   memfd     the same bytes written with pwrite into a memfd (kernel-owned shmem pages, never
//             mapped in this process) twice, then spliced out of it through a pipe to /dev/null:
//             what memory the kernel alone touches costs, the way s3fs's cache file and a
//             splice-served L1 would use it
//
//   gcc -O2 -Wall -o first_touch bench/first_touch.c
//   ./first_touch [SIZE_MIB] [FILE]       e.g. ./first_touch 1024 /var/cache/big.bin
//
// Each line is "<step> <seconds>". Nothing is asserted: the figures are for the reader.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum { kChunk = 128 * 1024 };

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char* Map(size_t size) {
  void* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, "first_touch: mmap %zu bytes: %s\n", size, strerror(errno));
    exit(1);
  }
  // Normal pages only: transparent huge pages would measure a different thing (and this VM
  // serves them fast only for huge pages freed moments before).
  madvise(p, size, MADV_NOHUGEPAGE);
  return p;
}

static double Fill(char* dst, size_t size, const char* src) {
  double t0 = Now();
  for (size_t off = 0; off + kChunk <= size; off += kChunk) memcpy(dst + off, src, kChunk);
  return Now() - t0;
}

static void Populate(size_t size, const char* src) {
  char* p = Map(size);
  double t0 = Now();
  if (madvise(p, size, MADV_POPULATE_WRITE) != 0) {
    printf("populate unsupported (%s)\n", strerror(errno));
  } else {
    printf("populate_write %.3f\n", Now() - t0);
  }
  printf("populate_first_fill %.3f\n", Fill(p, size, src));
  printf("populate_second_fill %.3f\n", Fill(p, size, src));
  munmap(p, size);
}

static void Touch(size_t size, const char* src) {
  char* p = Map(size);
  long page = sysconf(_SC_PAGESIZE);
  double t0 = Now();
  for (size_t off = 0; off < size; off += (size_t)page) ((volatile char*)p)[off] = 1;
  printf("touch_each_page %.3f\n", Now() - t0);
  printf("touch_then_fill %.3f\n", Fill(p, size, src));
  munmap(p, size);
}

static double ReadInto(int fd, char* dst, size_t size) {
  double t0 = Now();
  size_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, dst + done, kChunk, (off_t)done);
    if (n < 0) {
      fprintf(stderr, "first_touch: pread: %s\n", strerror(errno));
      exit(1);
    }
    if (n == 0) break;
    done += (size_t)n;
  }
  return Now() - t0;
}

static void Pread(size_t size, const char* path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    fprintf(stderr, "first_touch: open %s: %s\n", path, strerror(errno));
    exit(1);
  }
  char* p = Map(size);
  ReadInto(fd, p, size);  // warm the page cache so that both passes copy from memory
  munmap(p, size);
  p = Map(size);
  printf("pread_first %.3f\n", ReadInto(fd, p, size));
  printf("pread_second %.3f\n", ReadInto(fd, p, size));
  munmap(p, size);
  close(fd);
}

static double WriteFd(int fd, size_t size, const char* src) {
  double t0 = Now();
  for (size_t off = 0; off + kChunk <= size; off += kChunk) {
    if (pwrite(fd, src, kChunk, (off_t)off) != kChunk) {
      fprintf(stderr, "first_touch: pwrite: %s\n", strerror(errno));
      exit(1);
    }
  }
  return Now() - t0;
}

static void Memfd(size_t size, const char* src) {
  int fd = memfd_create("first_touch", MFD_CLOEXEC);
  int p[2];
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || pipe(p) != 0) {
    fprintf(stderr, "first_touch: memfd: %s\n", strerror(errno));
    exit(1);
  }
  printf("memfd_first_write %.3f\n", WriteFd(fd, size, src));
  printf("memfd_second_write %.3f\n", WriteFd(fd, size, src));
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0) {
    fprintf(stderr, "first_touch: open /dev/null: %s\n", strerror(errno));
    exit(1);
  }
  double t0 = Now();
  for (size_t off = 0; off + kChunk <= size; off += kChunk) {
    loff_t in = (loff_t)off;
    size_t left = kChunk;
    while (left > 0) {  // a pipe holds 64 KiB unless enlarged: move the chunk in pieces
      ssize_t n = splice(fd, &in, p[1], NULL, left, 0);
      if (n <= 0 || splice(p[0], NULL, null, NULL, (size_t)n, 0) != n) {
        fprintf(stderr, "first_touch: splice: %s\n", strerror(errno));
        exit(1);
      }
      left -= (size_t)n;
    }
  }
  printf("memfd_splice_out %.3f\n", Now() - t0);
  close(null);
  close(p[0]);
  close(p[1]);
  close(fd);
}

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
  if (mib == 0) {
    fprintf(stderr, "usage: first_touch [SIZE_MIB] [FILE]\n");
    return 2;
  }
  size_t size = mib << 20;
  static char src[kChunk];
  memset(src, 0x5a, sizeof src);
  printf("size_mib %zu\n", mib);
  Populate(size, src);
  Touch(size, src);
  if (argc > 2) Pread(size, argv[2]);
  Memfd(size, src);
  return 0;
}
