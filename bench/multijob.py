#!/usr/bin/python3
"""One job of the multi-job hit-rate workload (run.sh --workload multijob).

  multijob.py hot    OUT FILE...   re-reads FILES sequentially in 1 MiB reads, pass after pass:
                                   at least --passes passes, and more while --while-file exists
                                   (the stream job is running), at most --max-passes
  multijob.py stream OUT FILE...   reads FILES once, sequentially, in 1 MiB reads
  multijob.py proj   OUT FILE...   reads --fraction of each file's bytes in random ranges of
                                   16-64 KiB at scattered offsets (a column projection)

Every read is timed, and after it the file's user.tierfs.source (the tier that served the last
read of the file: l1, l2, origin) is read, so the bytes of the job are attributed to tiers. The
page cache is dropped for each file (POSIX_FADV_DONTNEED) before each pass, so the reads reach the
daemon. Writes a JSON summary to OUT.
"""
import argparse
import json
import os
import random
import signal
import time

MiB = 1 << 20


def source(path):
    try:
        return os.getxattr(path, "user.tierfs.source").decode().strip("\0") or "none"
    except OSError:
        return "unknown"


class Acc:
    def __init__(self):
        self.lat = []
        self.by_tier = {}
        self.bytes = 0

    def read(self, fd, path, off, n):
        t0 = time.perf_counter()
        got = len(os.pread(fd, n, off))
        self.lat.append(time.perf_counter() - t0)
        tier = source(path)
        self.by_tier[tier] = self.by_tier.get(tier, 0) + got
        self.bytes += got
        return got

    def summary(self, seconds):
        lat = sorted(self.lat)
        p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3 if lat else None
        return {"bytes": self.bytes, "reads": len(lat), "seconds": round(seconds, 3),
                "mib_s": round(self.bytes / MiB / seconds, 1) if seconds > 0 else None,
                "p50_ms": p(0.50), "p99_ms": p(0.99), "max_ms": lat[-1] * 1e3 if lat else None,
                "bytes_by_tier": self.by_tier,
                "hit_rate": {k: round(v / self.bytes, 4) for k, v in self.by_tier.items()}
                if self.bytes else {}}


def origin_bytes(a):
    """The delay proxy's count of ranged-GET bytes for this job's top directory, now (None
    without --proxy-pid): it writes --count-file on SIGUSR1."""
    if not a.proxy_pid:
        return None
    try:
        before = os.stat(a.count_file).st_mtime_ns
    except OSError:
        before = 0
    os.kill(a.proxy_pid, signal.SIGUSR1)
    for _ in range(100):
        try:
            if os.stat(a.count_file).st_mtime_ns != before:
                break
        except OSError:
            pass
        time.sleep(0.02)
    try:
        with open(a.count_file) as f:
            return json.load(f).get(a.group, {}).get("bytes", 0)
    except (OSError, ValueError):
        return None


def drop(fd):
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def seq_pass(files, acc):
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            drop(fd)
            off = 0
            while True:
                n = acc.read(fd, path, off, MiB)
                if n == 0:
                    break
                off += n
        finally:
            os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["hot", "stream", "proj"])
    ap.add_argument("out")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--max-passes", type=int, default=30)
    ap.add_argument("--while-file", default="")
    ap.add_argument("--fraction", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--proxy-pid", type=int, default=0, help="delay_proxy.py --count-file")
    ap.add_argument("--count-file", default="")
    ap.add_argument("--group", default="hot", help="the top directory counted for this job")
    a = ap.parse_args()
    t0 = time.perf_counter()
    res = {"kind": a.kind, "files": len(a.files)}
    if a.kind == "stream":
        acc = Acc()
        seq_pass(a.files, acc)
        res.update(acc.summary(time.perf_counter() - t0))
    elif a.kind == "hot":
        passes = []
        total = Acc()
        while True:
            acc = Acc()
            p0 = time.perf_counter()
            o0 = origin_bytes(a)
            seq_pass(a.files, acc)
            o1 = origin_bytes(a)
            s = acc.summary(time.perf_counter() - p0)
            s["stream_running"] = bool(a.while_file) and os.path.exists(a.while_file)
            s["origin_bytes"] = o1 - o0 if o0 is not None and o1 is not None else None
            passes.append(s)
            for k, v in acc.by_tier.items():
                total.by_tier[k] = total.by_tier.get(k, 0) + v
            total.bytes += acc.bytes
            total.lat += acc.lat
            n = len(passes)
            if n >= a.max_passes:
                break
            if n >= a.passes and not (a.while_file and os.path.exists(a.while_file)):
                break
        res.update(total.summary(time.perf_counter() - t0))
        res["passes"] = passes
        # after the first pass, the passes that ran while the stream job did
        later = [p for p in passes[1:] if p["stream_running"]] or passes[1:]
        b = sum(p["bytes"] for p in later)
        tiers = {}
        for p in later:
            for k, v in p["bytes_by_tier"].items():
                tiers[k] = tiers.get(k, 0) + v
        ob = [p["origin_bytes"] for p in later]
        res["after_first_pass"] = {"passes": len(later), "bytes": b,
                                   "origin_bytes": sum(ob) if later and None not in ob else None,
                                   "hit_rate": {k: round(v / b, 4) for k, v in tiers.items()} if b else {}}
    else:
        rng = random.Random(a.seed)
        acc = Acc()
        for path in a.files:
            size = os.stat(path).st_size
            want = int(size * a.fraction)
            # non-overlapping ranges at random offsets: pick slots of 64 KiB, read 16-64 KiB of each
            slots = list(range(size // (64 << 10)))
            rng.shuffle(slots)
            fd = os.open(path, os.O_RDONLY)
            try:
                drop(fd)
                done = 0
                for s in slots:
                    if done >= want:
                        break
                    n = rng.randrange(16, 65) << 10
                    done += acc.read(fd, path, s * (64 << 10), n)
            finally:
                os.close(fd)
        res.update(acc.summary(time.perf_counter() - t0))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
