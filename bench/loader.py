#!/usr/bin/python3
"""The PyTorch DataLoader workload: shuffled reads of every file under ROOT, like an image
classification loader, for a number of epochs.

Each sample is one whole file (open + read + close), timed inside Dataset.__getitem__ in the worker
process; the latencies travel back with the batch. Reports samples/s per epoch and the p50/p99/max
of the per-sample read latency. An epoch that runs past --cap seconds is cut short and reported as
capped (its samples/s is then measured over the samples that did complete).

  loader.py ROOT [--epochs 2] [--workers 4] [--batch 64] [--cap 120] [--expect N] [--out FILE]
            [--compute-ms 20 [--sampler plain|prefetch] [--ahead N]] [--cpu NAME=PID ...]
            [--start-file F]

With --compute-ms (the GPU-stall view), the training loop sleeps that long per batch, as if a GPU
were busy with it, and each epoch also reports the time to the first batch, the time spent waiting
on the loader (stall fraction = waiting / epoch time), the longest wait after the first batch and
the 99th percentile of those waits (one wait in a hundred is longer; a 10,000-sample epoch in
batches of 64 has 156 of them, so the longest is a single sample of the tail).
The shuffle then comes from a RandomSampler seeded with 0, the same order for every tool; with
--sampler prefetch it is wrapped in tierfs.torch.PrefetchSampler (python/tierfs), which hands the
daemon the paths of the next --ahead samples as the loop advances.

With --cpu NAME=PID (without --compute-ms), each epoch also carries "cpu": the machine's busy
fraction and CPU-seconds over the epoch and each named process's CPU-seconds (bench/cpustat.py).

With --start-file F (without --compute-ms), the wall-clock time (Unix seconds) at which epoch 1
starts is written to F (atomically, by rename) the moment it starts, so that a caller can start
other work beside the epoch (run.sh raw_loaderpar); every epoch carries "start_unix"/"end_unix".
"""
import argparse
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

import cpustat  # bench/cpustat.py, beside this script


class FileDataset(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        t0 = time.perf_counter()
        with open(self.paths[i], "rb", buffering=0) as f:
            data = f.read()
        dt = time.perf_counter() - t0
        # A minimal "decode": view the bytes as a tensor (no copy) and touch one byte, so the
        # loader costs no more CPU than the file system it measures.
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(1, dtype=torch.uint8)
        return len(data), dt, int(t[0])


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    k = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * (len(sorted_vals) - 1)))))
    return sorted_vals[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--cap", type=float, default=120.0, help="seconds per epoch before cutting it short")
    ap.add_argument("--expect", type=int, default=0, help="expected number of files")
    ap.add_argument("--out")
    ap.add_argument("--compute-ms", type=float, default=0.0,
                    help="simulated compute per batch (GPU-stall view); 0: read as fast as possible")
    ap.add_argument("--sampler", choices=("plain", "prefetch"), default="plain")
    ap.add_argument("--ahead", type=int, default=1024, help="PrefetchSampler's look-ahead, in samples")
    ap.add_argument("--cpu", action="append", default=[], metavar="NAME=PID",
                    help="per epoch, record the CPU time of this process (and the machine's busy "
                         "time) with bench/cpustat.py; repeatable")
    ap.add_argument("--start-file", help="write epoch 1's start time (Unix seconds) here when it starts")
    args = ap.parse_args()
    cpu_pids = cpustat.parse_pids(args.cpu)
    if args.compute_ms > 0 or args.sampler != "plain":
        return stall_view(args)

    result = {"root": args.root, "workers": args.workers, "batch": args.batch, "epochs": []}
    t0 = time.perf_counter()
    paths = []
    for dirpath, dirnames, filenames in os.walk(args.root):
        dirnames.sort()
        for n in sorted(filenames):
            paths.append(os.path.join(dirpath, n))
    result["list_s"] = time.perf_counter() - t0
    result["files"] = len(paths)
    if args.expect and len(paths) != args.expect:
        result["status"] = "error"
        result["error"] = "listed %d files, expected %d" % (len(paths), args.expect)
    else:
        torch.manual_seed(0)
        loader = DataLoader(FileDataset(paths), batch_size=args.batch, shuffle=True,
                            num_workers=args.workers, persistent_workers=False)
        status = "ok"
        for epoch in range(args.epochs):
            lat = []
            nbytes = 0
            capped = False
            c0 = cpustat.snapshot(cpu_pids)
            start_unix = time.time()
            t0 = time.perf_counter()
            if epoch == 0 and args.start_file:
                with open(args.start_file + ".tmp", "w") as f:
                    f.write("%.6f\n" % start_unix)
                os.replace(args.start_file + ".tmp", args.start_file)
            it = iter(loader)
            try:
                for sizes, dts, _ in it:
                    lat.extend(dts.tolist())
                    nbytes += int(sizes.sum())
                    if time.perf_counter() - t0 > args.cap:
                        capped = True
                        break
            finally:
                del it
            secs = time.perf_counter() - t0
            cpu = cpustat.delta(c0, cpustat.snapshot(cpu_pids))
            lat.sort()
            n = len(lat)
            result["epochs"].append({
                "cpu": cpu,
                "epoch": epoch + 1, "samples": n, "seconds": secs, "bytes": nbytes,
                "start_unix": start_unix, "end_unix": start_unix + secs,
                "samples_per_s": n / secs if secs > 0 else None,
                "mb_per_s": nbytes / secs / 1e6 if secs > 0 else None,
                "lat_p50_ms": pct(lat, 50) * 1e3 if n else None,
                "lat_p99_ms": pct(lat, 99) * 1e3 if n else None,
                "lat_max_ms": lat[-1] * 1e3 if n else None,
                "capped": capped,
            })
            print("loader: epoch %d: %d samples in %.1f s = %.0f samples/s, p50 %.2f ms p99 %.2f ms max %.1f ms%s"
                  % (epoch + 1, n, secs, n / secs, pct(lat, 50) * 1e3, pct(lat, 99) * 1e3, lat[-1] * 1e3,
                     " (capped)" if capped else ""), flush=True)
            if capped:
                status = "capped"
                break
        result["status"] = status
    return write_result(args, result)


def write_result(args, result):
    """Writes the JSON result to --out (or stdout); the exit code: 1 when the run failed."""
    out = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out)
    else:
        print(out)
    return 0 if result["status"] != "error" else 1


def list_files(root):
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for n in sorted(filenames):
            paths.append(os.path.join(dirpath, n))
    return paths


def stall_view(args):
    """The training-loop view: a fixed compute time per batch; how long the loop waits on data."""
    result = {"root": args.root, "workers": args.workers, "batch": args.batch,
              "compute_ms": args.compute_ms, "sampler": args.sampler, "epochs": []}
    t0 = time.perf_counter()
    paths = list_files(args.root)
    result["list_s"] = time.perf_counter() - t0
    result["files"] = len(paths)
    if args.expect and len(paths) != args.expect:
        result["status"] = "error"
        result["error"] = "listed %d files, expected %d" % (len(paths), args.expect)
        paths = []
    sampler = RandomSampler(range(len(paths)), generator=torch.Generator().manual_seed(0))
    if args.sampler == "prefetch":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        from tierfs.torch import PrefetchSampler
        sampler = PrefetchSampler(sampler, paths, ahead=args.ahead)
    loader = DataLoader(FileDataset(paths), batch_size=args.batch, sampler=sampler,
                        num_workers=args.workers, persistent_workers=False)
    compute = args.compute_ms / 1e3
    status = "ok" if paths else result.get("status", "error")
    for epoch in range(args.epochs if paths else 0):
        waits = []
        n = 0
        capped = False
        t0 = time.perf_counter()
        it = iter(loader)
        try:
            while True:
                tw = time.perf_counter()
                try:
                    sizes, _, _ = next(it)
                except StopIteration:
                    break
                waits.append(time.perf_counter() - tw)
                n += len(sizes)
                time.sleep(compute)  # the "GPU" works on the batch; the workers keep loading
                if time.perf_counter() - t0 > args.cap:
                    capped = True
                    break
        finally:
            del it
        secs = time.perf_counter() - t0
        e = {"epoch": epoch + 1, "samples": n, "batches": len(waits), "seconds": secs,
             "first_batch_s": waits[0] if waits else None,
             "wait_s": sum(waits), "stall_fraction": sum(waits) / secs if secs > 0 else None,
             "max_wait_ms": max(waits[1:]) * 1e3 if len(waits) > 1 else None,
             "wait_p99_ms": pct(sorted(waits[1:]), 99) * 1e3 if len(waits) > 1 else None,
             "samples_per_s": n / secs if secs > 0 else None, "capped": capped}
        if args.sampler == "prefetch":
            e["prefetch_sampler"] = {"active": sampler.active, "sent": sampler.sent, "sets": sampler.sets,
                                     "passed_through_because": sampler._disabled}
        result["epochs"].append(e)
        print("loader: epoch %d: %d samples in %.2f s, first batch %.3f s, stall %.1f%%, max wait %.1f ms%s"
              % (epoch + 1, n, secs, e["first_batch_s"] or 0, 100 * (e["stall_fraction"] or 0),
                 e["max_wait_ms"] or 0, " (capped)" if capped else ""), flush=True)
        if capped:
            status = "capped"
            break
    result["status"] = status
    return write_result(args, result)


if __name__ == "__main__":
    sys.exit(main())
