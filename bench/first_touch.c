// first_touch: what the first access to fresh anonymous memory costs on this machine, the
// measurement behind `cache.l1_prefault` (README, "Memory").
//
// A daemon whose L1 is empty fills it with 128 KiB copies into memory it has never touched. On a
// bare-metal host the page faults cost little; on some VMs (this project's PVM guest) each page's
// first access from user space exits to the hypervisor even after the kernel has populated it.
// This program times, on one mapping of SIZE bytes (default 1 GiB):
//
//   populate  madvise(MADV_POPULATE_WRITE), then the first fill by 128 KiB memcpy, then a second
//   touch     one byte written per page, then a fill by 128 KiB memcpy
//   pread     with FILE: the first pread of FILE into fresh memory (a kernel copy), then a second
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
  return 0;
}
