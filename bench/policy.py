#!/usr/bin/python3
"""The readers of the cache-policy workloads (run.sh --workload policy). Every byte read through
the mount is compared with the same bytes of the local copy (LOCAL/REL), so a result also says
whether the bytes were exact.

  policy.py read   OUT MNT LOCAL REL...    reads each file once, sequentially, 1 MiB at a time
  policy.py ranges OUT MNT LOCAL REL...    reads --fraction of each file in random ranges of
                                           --min..--max bytes at random, non-overlapping offsets
  policy.py memory OUT MNT LOCAL --pid PID --seq REL... --rand REL...
                                           a reader per --seq file (sequential, 1 MiB) and
                                           --rand-readers random readers (128 KiB) over the --rand
                                           files until the sequential ones are done, while the
                                           daemon's VmRSS is sampled every 50 ms

The page cache of each file is dropped (POSIX_FADV_DONTNEED) before it is read, so the reads reach
the daemon. Each command writes a JSON summary to OUT.
"""
import argparse
import json
import os
import random
import threading
import time

MiB = 1 << 20


def drop(fd):
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class Reader:
    """Reads ranges of one file through the mount and compares them with the local copy."""

    def __init__(self, mnt, local, rel):
        self.fd = os.open(os.path.join(mnt, rel), os.O_RDONLY)
        self.ref = os.open(os.path.join(local, rel), os.O_RDONLY)
        self.size = os.fstat(self.ref).st_size
        self.rel = rel
        drop(self.fd)

    def read(self, off, n):
        """(bytes read, whether they equal the local copy's)"""
        got = os.pread(self.fd, n, off)
        return len(got), got == os.pread(self.ref, n, off)

    def close(self):
        os.close(self.fd)
        os.close(self.ref)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.bytes = 0
        self.reads = 0
        self.mismatches = []

    def add(self, rel, off, n, same):
        with self.lock:
            self.bytes += n
            self.reads += 1
            if not same and len(self.mismatches) < 10:
                self.mismatches.append("%s@%d+%d" % (rel, off, n))

    def summary(self, seconds, **extra):
        d = {"status": "ok" if not self.mismatches else "wrong bytes", "bytes": self.bytes,
             "reads": self.reads, "seconds": round(seconds, 3), "exact": not self.mismatches,
             "mismatches": self.mismatches,
             "iops": round(self.reads / seconds, 1) if seconds > 0 else None,
             "mib_s": round(self.bytes / MiB / seconds, 1) if seconds > 0 else None}
        d.update(extra)
        return d


def read_sequential(mnt, local, rel, tally, bs=MiB):
    r = Reader(mnt, local, rel)
    try:
        off = 0
        while off < r.size:
            n, same = r.read(off, min(bs, r.size - off))
            if n == 0:
                tally.add(rel, off, 0, False)
                break
            tally.add(rel, off, n, same)
            off += n
    finally:
        r.close()


def ranges_of(size, fraction, lo, hi, rng):
    """Random non-overlapping (offset, length) ranges of lo..hi bytes covering about fraction of
    size, in random order: the file is cut into consecutive pieces of lo..hi bytes and a random
    share of the pieces is drawn."""
    pieces, off = [], 0
    while off < size:
        n = min(rng.randint(lo, hi), size - off)
        pieces.append((off, n))
        off += n
    rng.shuffle(pieces)
    want = int(size * fraction)
    out, total = [], 0
    for off, n in pieces:
        if total + n > want:
            break
        out.append((off, n))
        total += n
    return out


def cmd_read(a):
    tally = Tally()
    t0 = time.monotonic()
    for rel in a.rel:
        read_sequential(a.mnt, a.local, rel, tally)
    return tally.summary(time.monotonic() - t0)


def cmd_ranges(a):
    tally = Tally()
    rng = random.Random(a.seed)
    trace = open(a.trace, "w") if a.trace else None
    longest = 0.0
    t0 = time.monotonic()
    for rel in a.rel:
        r = Reader(a.mnt, a.local, rel)
        try:
            for off, n in ranges_of(r.size, a.fraction, a.min, a.max, rng):
                t1 = time.monotonic()
                got, same = r.read(off, n)
                took = time.monotonic() - t1
                longest = max(longest, took)
                if trace:
                    trace.write("%.4f %.5f %s %d %d\n" % (t1 - t0, took, rel, off, n))
                tally.add(rel, off, got, same and got == n)
        finally:
            r.close()
    if trace:
        trace.close()
    return tally.summary(time.monotonic() - t0, fraction=a.fraction,
                         longest_read_ms=round(longest * 1000, 1))


def vm(pid, key):
    """VmRSS / VmHWM of PID in KiB (None once it is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cmd_memory(a):
    tally = Tally()
    done = threading.Event()
    errors = []
    peak = [0]

    def sample():
        while not done.wait(0.05):
            kb = vm(a.pid, "VmRSS")
            if kb:
                peak[0] = max(peak[0], kb)

    def seq(rel):
        try:
            read_sequential(a.mnt, a.local, rel, tally)
        except OSError as e:
            errors.append("%s: %s" % (rel, e))

    def rand(k):
        rng = random.Random(100 + k)
        readers = [Reader(a.mnt, a.local, rel) for rel in a.rand]
        try:
            while not done.is_set():
                r = rng.choice(readers)
                off = rng.randrange(0, max(1, r.size - 128 * 1024))
                n, same = r.read(off, 128 * 1024)
                tally.add(r.rel, off, n, same)
        except OSError as e:
            errors.append("random reader %d: %s" % (k, e))
        finally:
            for r in readers:
                r.close()

    t0 = time.monotonic()
    sampler = threading.Thread(target=sample)
    sampler.start()
    seqs = [threading.Thread(target=seq, args=(rel,)) for rel in a.seq]
    rands = [threading.Thread(target=rand, args=(k,)) for k in range(a.rand_readers)]
    for t in seqs + rands:
        t.start()
    for t in seqs:
        t.join()
    done.set()
    for t in rands + [sampler]:
        t.join()
    hwm = vm(a.pid, "VmHWM")
    s = tally.summary(time.monotonic() - t0, peak_rss_mib=round(peak[0] / 1024, 1),
                      vmhwm_mib=round(hwm / 1024, 1) if hwm else None, errors=errors[:10],
                      seq_readers=len(a.seq), rand_readers=a.rand_readers)
    if errors:
        s["status"] = "error"
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("read", "ranges", "memory"):
        p = sub.add_parser(name)
        p.add_argument("out")
        p.add_argument("mnt")
        p.add_argument("local")
        if name != "memory":
            p.add_argument("rel", nargs="+")
    r = sub.choices["ranges"]
    r.add_argument("--fraction", type=float, default=0.25)
    r.add_argument("--min", type=int, default=16 << 10)
    r.add_argument("--max", type=int, default=64 << 10)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--trace", help="write a line per read: start (s), time it took (s), file, offset, length")
    m = sub.choices["memory"]
    m.add_argument("--pid", type=int, required=True, help="the daemon, whose VmRSS is sampled")
    m.add_argument("--seq", nargs="+", required=True)
    m.add_argument("--rand", nargs="+", required=True)
    m.add_argument("--rand-readers", type=int, default=8)
    a = ap.parse_args()
    res = {"read": cmd_read, "ranges": cmd_ranges, "memory": cmd_memory}[a.cmd](a)
    with open(a.out, "w") as f:
        json.dump(res, f)
    print("policy %s: %s" % (a.cmd, json.dumps({k: res[k] for k in ("status", "bytes", "reads", "seconds")})))
    return 0 if res["status"] == "ok" else 1


if __name__ == "__main__":
    raise SystemExit(main())
