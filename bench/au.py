#!/usr/bin/python3
"""Accelerator utilization (AU) on MLPerf-Storage-shaped workloads.

MLPerf Storage emulates each accelerator with a real data loader that "computes" by sleeping a
fixed time per batch, with a barrier across accelerators every step; the figure of merit is how
many accelerators one host keeps at or above a minimum accelerator utilization
(AU = compute time / wall time, first step excluded). This is that measurement with PyTorch only:

  - R ranks = R processes (multiprocessing, fork start method: the parent imported torch once, and
    the ranks start in milliseconds instead of importing it again), one per emulated accelerator;
  - each rank has its own torch.utils.data.DataLoader (--workers worker processes, shuffled with a
    per-rank seed) over its shard of the dataset (sample i belongs to rank i mod R; every rank
    runs the same number of steps, len(shard) // batch, drop_last);
  - a batch is collated to its byte count (collate_fn=sum), so no tensor crosses from the
    workers (torch's shared-memory hand-over would cost more CPU than a 3.5 ms step holds);
  - every step: wait for the batch, then a multiprocessing.Barrier across the ranks, then
    time.sleep(compute); step wait = batch wait + barrier wait;
  - AU of a rank = the time spent in sleep(compute) / the wall time of the epoch, counted from
    the moment the rank's last DataLoader worker process is running (process start-up is not
    the storage's; the first batch's reads are); the run's AU is the mean over the ranks (the
    lowest rank's is reported beside it). MLPerf's own definition excludes the first step
    instead; it is reported too (au_mlperf), but with epochs of 6 to 320 steps it flatters a
    slow source: during a slow first step the workers fill their buffer (workers x 2 batches),
    and the steps that follow consume it without waiting. MiB/s counts every byte the ranks read
    over the whole epoch; p99 and max of the step wait are over all ranks' steps 2..n;
  - one epoch per (shape, source, R); with --drop-caches the page cache is dropped before it, so
    every epoch reads from the source (the datasets are smaller than this machine's page cache).

Shapes (MLPerf Storage v1.0/v2.0, H100 compute times) and how they are scaled to a 2-core machine:

  shape      MLPerf sample                  batch  compute/step  min AU  here
  unet3d     ~140 MiB .npz, one per file,     7     0.323 s       90%    224 files of 4.375 MiB
             read whole                                                  (140 MiB / 32), compute
                                                                         0.323 s / 32 = 10.1 ms
  resnet50   record files of 1,251 x          400   0.224 s       90%    8 record files (10,008
             114,660 B, random sample reads                              samples), unscaled
  cosmoflow  2.7 MiB files, one sample each   1     0.0035 s      70%    320 files, unscaled

The scaling keeps the batch and every shape's bytes per second of compute (for unet3d the sample
and the compute time shrink by the same factor 32), so an emulated accelerator asks the storage
for the same bandwidth as an H100 would: unet3d 3,034 MiB/s, resnet50 195 MiB/s, cosmoflow
771 MiB/s per accelerator. Only the number of files (and so samples per epoch) is cut. Samples
are read into a reused buffer and not decoded (DLIO decodes .npz; here the loader costs no more
CPU than the storage it measures). AU_COMPUTE_SCALE (environment, default 1) multiplies every
compute time (2 = an accelerator half as fast as an H100), for machines where no source keeps one
H100 busy.

  au.py run --shape S --source NAME --root DIR --ranks 1,2,4 --out-dir DIR
            [--workers 4] [--prefetch none|sampler|deep] [--ahead N] [--drop-caches] [--cap 120]
            [--batch N] [--compute SECONDS]
      one epoch per R; writes DIR/S-NAME-rR.json and prints one line per run
  au.py ceiling --shape S --root LOCALDIR --url URL/BUCKET/PREFIX --out-dir DIR [--streams 16]
      the origin's bandwidth ceiling: every object of the shape (8 MiB ranges of the larger ones)
      fetched by curl, --streams GETs in flight, straight from URL (the delay proxy)
  au.py report DIR [DIR ...]
      the table of one run (au.md, au.json in the first DIR); with several DIRs (repeated runs),
      also the spread of each figure across them against MLPerf's 5% rule
  au.py smoke
      a tiny local dataset, every shape at R = 1 and 2 (the test suite runs it; a few seconds)
"""
import argparse
import glob
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import seed  # noqa: E402  (the dataset layouts)

MIB = 1 << 20
SHAPES = {
    # kind: file = one sample per file, read whole; record = fixed-size samples at random offsets
    "unet3d": {"kind": "file", "batch": 7, "compute": 0.323, "min_au": 0.90, "scale": 32,
               "mlperf": "~140 MiB .npz, one sample per file, read whole"},
    "resnet50": {"kind": "record", "batch": 400, "compute": 0.224, "min_au": 0.90, "scale": 1,
                 "sample": 114660, "mlperf": "~137 MiB record files of 1,251 x 114,660 B, random sample reads"},
    "cosmoflow": {"kind": "file", "batch": 1, "compute": 0.0035, "min_au": 0.70, "scale": 1,
                  "mlperf": "2.7 MiB files, one sample per file"},
}
SOURCES = ("local", "tierfs-l2", "tierfs-cold", "tierfs-prefetch")
SOURCE_NAMES = {"local": "local disk", "tierfs-l2": "tierfs warm from L2",
                "tierfs-cold": "tierfs cold (origin)", "tierfs-prefetch": "tierfs cold + prefetch ahead"}


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    k = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * (len(sorted_vals) - 1)))))
    return sorted_vals[k]


def list_files(root):
    return sorted(os.path.join(root, n) for n in os.listdir(root) if not n.startswith("."))


def shape_params(shape, batch=None, compute=None):
    p = dict(SHAPES[shape])
    p["compute"] = (compute if compute is not None else p["compute"] / p["scale"]) \
        * float(os.environ.get("AU_COMPUTE_SCALE", "1"))
    if batch is not None:
        p["batch"] = batch
    return p


# --- the dataset (in the rank's DataLoader workers) ---------------------------------------------
def _dataset_class():
    from torch.utils.data import Dataset

    class AuDataset(Dataset):
        """Sample i: a whole file (kind file), or sample_bytes at a random slot of a record file
        (kind record). __getitem__ returns the number of bytes read."""

        def __init__(self, kind, files, sample_bytes):
            self.kind = kind
            self.files = files
            self.sample = sample_bytes
            self.index = []  # record: (file number, offset)
            if kind == "record":
                for fi, f in enumerate(files):
                    for j in range(os.path.getsize(f) // sample_bytes):
                        self.index.append((fi, j * sample_bytes))
            self._buf = None
            self._fds = {}

        def __len__(self):
            return len(self.index) if self.kind == "record" else len(self.files)

        def path(self, i):
            return self.files[self.index[i][0]] if self.kind == "record" else self.files[i]

        def __getitem__(self, i):
            if self._buf is None:
                self._buf = memoryview(bytearray(8 * MIB))
            if self.kind == "record":
                fi, off = self.index[i]
                fd = self._fds.get(fi)
                if fd is None:
                    fd = self._fds[fi] = os.open(self.files[fi], os.O_RDONLY)
                n = os.preadv(fd, [self._buf[:self.sample]], off)
                if n != self.sample:
                    raise IOError("short read at %s+%d: %d bytes" % (self.files[fi], off, n))
                return n
            n = 0
            with open(self.files[i], "rb", buffering=0) as f:
                while True:
                    k = f.readinto(self._buf)
                    if not k:
                        break
                    n += k
            return n

    return AuDataset


# --- one rank ------------------------------------------------------------------------------------
def rank_main(rank, ranks, cfg, barrier, stop, results):
    try:
        results.put(_rank(rank, ranks, cfg, barrier, stop))
    except BaseException as e:  # the parent must hear of it, and the other ranks must not hang
        try:
            barrier.abort()
        except Exception:
            pass
        results.put({"rank": rank, "error": "%s: %s" % (type(e).__name__, e)})


def _rank(rank, ranks, cfg, barrier, stop):
    import warnings
    import torch
    from torch.utils.data import DataLoader, Sampler
    torch.set_num_threads(1)
    # more workers than cores is the point here (they wait on I/O); DataLoader warns about it
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    ds = _dataset_class()(cfg["kind"], cfg["files"], cfg.get("sample_bytes") or 0)
    batch = cfg["batch"]
    shard = list(range(rank, len(ds), ranks))
    steps = len(shard) // batch
    if steps < 2:
        raise ValueError("%d samples per rank give %d steps of %d; need at least 2"
                         % (len(shard), steps, batch))

    class ShardSampler(Sampler):
        def __init__(self):
            super().__init__(None)
            self.g = torch.Generator().manual_seed(1000 + rank)

        def __len__(self):
            return len(shard)

        def __iter__(self):
            for k in torch.randperm(len(shard), generator=self.g).tolist():
                yield shard[k]

    sampler = ShardSampler()
    if cfg["prefetch"] == "sampler":
        sys.path.insert(0, os.path.join(BENCH, "..", "python"))
        from tierfs.torch import PrefetchSampler
        sampler = PrefetchSampler(sampler, ds.path, ahead=cfg["ahead"])
    # A batch is collated to its byte count (a Python int): no tensor crosses from the workers,
    # so the per-step cost is the storage's and the loop's, not torch's shared-memory hand-over.
    # When the last worker process is up (perf_counter is CLOCK_MONOTONIC: comparable across
    # processes); the epoch AU counts from there, so process start-up is not charged to storage.
    up = mp.get_context("fork").Value("d", 0.0)

    def worker_up(_):
        with up.get_lock():
            up.value = max(up.value, time.perf_counter())

    loader = DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=cfg["workers"],
                        drop_last=True, persistent_workers=False, collate_fn=sum,
                        worker_init_fn=worker_up if cfg["workers"] else None)
    compute = cfg["compute"]
    barrier.wait()  # all ranks start together
    t_start = time.perf_counter()
    waits, computes, nbytes = [], [], 0
    t_first_end = None
    capped = False
    it = iter(loader)
    try:
        for step in range(steps):
            t0 = time.perf_counter()
            nbytes += next(it)
            if rank == 0 and t0 - t_start > cfg["cap"]:
                stop.value = 1  # set before the barrier: every rank reads it after
            barrier.wait()
            t1 = time.perf_counter()
            time.sleep(compute)
            t2 = time.perf_counter()
            waits.append(t1 - t0)
            computes.append(t2 - t1)
            if step == 0:
                t_first_end = t2
            if stop.value:
                capped = True
                break
    finally:
        del it
    t_end = time.perf_counter()
    measured = t_end - t_first_end
    t_up = max(t_start, up.value)
    return {"rank": rank, "steps": len(waits), "samples": len(waits) * batch, "bytes": nbytes,
            "seconds": t_end - t_start, "first_step_s": t_first_end - t_start,
            "au_mlperf": sum(computes[1:]) / measured if measured > 0 and len(waits) > 1 else None,
            "au_epoch": sum(computes) / (t_end - t_up) if t_end > t_up else None,
            "workers_up_s": t_up - t_start,
            "waits": waits[1:], "capped": capped,
            "prefetch_sampler": ({"active": sampler.active, "sent": sampler.sent}
                                 if cfg["prefetch"] == "sampler" else None)}


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def run_one(shape, source, root, ranks, args):
    p = shape_params(shape, args.batch, args.compute)
    files = list_files(root)
    cfg = {"kind": p["kind"], "files": files, "sample_bytes": p.get("sample"), "batch": p["batch"],
           "compute": p["compute"], "workers": args.workers, "prefetch": args.prefetch,
           "ahead": args.ahead, "cap": args.cap}
    res = {"shape": shape, "source": source, "root": root, "ranks": ranks, "batch": p["batch"],
           "compute_s": p["compute"], "min_au": p["min_au"], "workers": args.workers,
           "files": len(files), "dataset_bytes": sum(os.path.getsize(f) for f in files),
           "prefetch": args.prefetch, "caches_dropped": bool(args.drop_caches),
           "compute_scale": float(os.environ.get("AU_COMPUTE_SCALE", "1")),
           "barrier": "multiprocessing.Barrier (fork context)"}
    if args.drop_caches:
        drop_caches()
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(ranks, timeout=max(300.0, 3 * args.cap))
    stop = ctx.Value("i", 0)
    q = ctx.Queue()
    t0 = time.perf_counter()
    if args.prefetch == "deep":  # a deep prefetch job of the whole directory, started with the epoch
        sys.path.insert(0, os.path.join(BENCH, "..", "python"))
        import tierfs
        tierfs.prefetch([root], tier="l2")
    procs = [ctx.Process(target=rank_main, args=(r, ranks, cfg, barrier, stop, q), daemon=False)
             for r in range(ranks)]
    for pr in procs:
        pr.start()
    outs = []
    deadline = time.monotonic() + 3 * args.cap + 300
    while len(outs) < ranks and time.monotonic() < deadline:
        try:
            outs.append(q.get(timeout=1.0))
        except Exception:
            if not any(pr.is_alive() for pr in procs) and q.empty():
                break
    for pr in procs:
        pr.join(timeout=10)
        if pr.is_alive():
            pr.kill()
            pr.join()
    res["wall_s"] = time.perf_counter() - t0
    res["loadavg_1m"] = os.getloadavg()[0]  # other work on the machine (the ranks count too)
    for kind in ("cpu", "io"):  # PSI: share of the last 10 s some task waited for CPU / for I/O
        try:
            with open("/proc/pressure/%s" % kind) as f:
                res["pressure_%s_some_avg10" % kind] = float(f.readline().split()[1].split("=")[1])
        except (OSError, ValueError, IndexError):
            pass
    errors = [o["error"] for o in outs if "error" in o]
    if errors or len(outs) < ranks:
        res["status"] = "error"
        res["error"] = "; ".join(errors) or "%d of %d ranks reported" % (len(outs), ranks)
        return res
    outs.sort(key=lambda o: o["rank"])
    waits = sorted(w for o in outs for w in o["waits"])
    aus = [o["au_epoch"] for o in outs if o["au_epoch"] is not None]
    aus_mlperf = [o["au_mlperf"] for o in outs if o["au_mlperf"] is not None]
    secs = max(o["seconds"] for o in outs)
    nbytes = sum(o["bytes"] for o in outs)
    res.update({
        "status": "capped" if any(o["capped"] for o in outs) else "ok",
        "steps": outs[0]["steps"], "samples": sum(o["samples"] for o in outs), "bytes": nbytes,
        "seconds": secs, "mib_s": nbytes / secs / MIB if secs > 0 else None,
        "au": sum(aus) / len(aus) if aus else None, "au_min": min(aus) if aus else None,
        "au_ranks": aus, "first_step_s": max(o["first_step_s"] for o in outs),
        "au_mlperf": sum(aus_mlperf) / len(aus_mlperf) if aus_mlperf else None,
        "workers_up_s": max(o["workers_up_s"] for o in outs),
        "wait_p50_ms": pct(waits, 50) * 1e3 if waits else None,
        "wait_p99_ms": pct(waits, 99) * 1e3 if waits else None,
        "wait_max_ms": waits[-1] * 1e3 if waits else None,
        # what R accelerators ask for: R x batch x sample bytes per compute second
        "demand_mib_s": ranks * p["batch"] * (p["sample"] if p["kind"] == "record" else
                                              res["dataset_bytes"] / max(1, len(files))) / p["compute"] / MIB,
        "prefetch_sampler": [o["prefetch_sampler"] for o in outs] if args.prefetch == "sampler" else None,
    })
    return res


def fmt_line(r):
    if r.get("status") == "error":
        return "au: %s %s R=%d: error: %s" % (r["shape"], r["source"], r["ranks"], r.get("error"))
    return ("au: %s %s R=%d: AU %.1f%% (min rank %.1f%%, first step excluded %.1f%%), %d steps, %.0f MiB/s, step wait p99 %.1f ms max "
            "%.1f ms, first step %.2f s, %.1f s%s" % (
                r["shape"], r["source"], r["ranks"], 100 * r["au"], 100 * r["au_min"], 100 * r["au_mlperf"], r["steps"],
                r["mib_s"], r["wait_p99_ms"], r["wait_max_ms"], r["first_step_s"], r["seconds"],
                " (capped)" if r["status"] == "capped" else ""))


def cmd_run(args):
    import torch  # noqa: F401  (once, in the parent: the forked ranks and their workers share it)
    os.makedirs(args.out_dir, exist_ok=True)
    rc = 0
    for ranks in [int(x) for x in args.ranks.split(",") if x]:
        r = run_one(args.shape, args.source, args.root, ranks, args)
        with open(os.path.join(args.out_dir, "%s-%s-r%d.json" % (args.shape, args.source, ranks)), "w") as f:
            json.dump(r, f, indent=1)
        print(fmt_line(r), flush=True)
        if r["status"] == "error":
            rc = 1
    return rc


# --- the origin's ceiling --------------------------------------------------------------------------
def cmd_ceiling(args):
    """Every object of the shape (8 MiB ranges of larger ones), --streams GETs in flight, by curl."""
    os.makedirs(args.out_dir, exist_ok=True)
    files = list_files(args.root)
    part = 8 * MIB
    lines, total = [], 0
    for f in files:
        size = os.path.getsize(f)
        url = "%s/%s" % (args.url.rstrip("/"), os.path.basename(f))
        for off in range(0, size, part):
            end = min(size, off + part) - 1
            if lines:
                lines.append("next")
            lines.append('url = "%s"\nrange = "%d-%d"\noutput = "/dev/null"' % (url, off, end))
            total += end - off + 1
    cfg = os.path.join(args.out_dir, ".ceiling-%s.cfg" % args.shape)
    with open(cfg, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = dict(os.environ)
    t0 = time.perf_counter()
    rc = subprocess.call(["curl", "-sSf", "--no-progress-meter", "--parallel", "--parallel-max",
                          str(args.streams), "-K", cfg], env=env)
    secs = time.perf_counter() - t0
    os.unlink(cfg)
    res = {"shape": args.shape, "source": "origin-ceiling", "status": "ok" if rc == 0 else "error",
           "streams": args.streams, "range_bytes": part, "bytes": total, "seconds": secs,
           "mib_s": total / secs / MIB if rc == 0 else None,
           "how": "curl --parallel-max %d, whole objects or 8 MiB ranges, straight from %s"
                  % (args.streams, args.url)}
    with open(os.path.join(args.out_dir, "%s-origin-ceiling.json" % args.shape), "w") as f:
        json.dump(res, f, indent=1)
    print("au: %s origin ceiling: %s MiB/s (%d GETs in flight, %.0f MiB in %.1f s)%s" % (
        args.shape, "%.0f" % res["mib_s"] if res["mib_s"] else "-", args.streams, total / MIB, secs,
        "" if rc == 0 else " curl exit %d" % rc), flush=True)
    return 0 if rc == 0 else 1


# --- report ----------------------------------------------------------------------------------------
def load_dir(d):
    runs, ceil = {}, {}
    for p in sorted(glob.glob(os.path.join(d, "*.json"))):
        if os.path.basename(p) == "au.json":
            continue
        try:
            r = json.load(open(p))
        except (OSError, ValueError):
            continue
        if r.get("source") == "origin-ceiling":
            ceil[r["shape"]] = r
        elif "ranks" in r:
            runs[(r["shape"], r["source"], r["ranks"])] = r
    return runs, ceil


def largest_r(runs, shape, source):
    """The largest measured R whose AU stays at or above the shape's minimum (0: none);
    (R, True) when the largest R measured still passes (the machine may hold more)."""
    rs = sorted(r for (s, src, r) in runs if s == shape and src == source)
    best = 0
    for r in rs:
        x = runs[(shape, source, r)]
        if x.get("status") in ("ok", "capped") and x.get("au") is not None and x["au"] >= x["min_au"]:
            best = r
    return best, bool(rs) and best == rs[-1]


def summarize(runs, ceil):
    out = {"shapes": {}}
    for shape in SHAPES:
        srcs = [s for s in SOURCES if any(k[0] == shape and k[1] == s for k in runs)]
        if not srcs:
            continue
        sh = {"sources": {}, "ceiling_mib_s": (ceil.get(shape) or {}).get("mib_s")}
        for src in srcs:
            rs = sorted(r for (s, x, r) in runs if s == shape and x == src)
            best, at_top = largest_r(runs, shape, src)
            peak = max((runs[(shape, src, r)].get("mib_s") or 0 for r in rs), default=0)
            sh["sources"][src] = {
                "au": {r: runs[(shape, src, r)].get("au") for r in rs},
                "au_mlperf": {r: runs[(shape, src, r)].get("au_mlperf") for r in rs},
                "mib_s": {r: runs[(shape, src, r)].get("mib_s") for r in rs},
                "wait_p99_ms": {r: runs[(shape, src, r)].get("wait_p99_ms") for r in rs},
                "wait_max_ms": {r: runs[(shape, src, r)].get("wait_max_ms") for r in rs},
                "status": {r: runs[(shape, src, r)].get("status") for r in rs},
                "largest_r": best, "largest_r_is_top": at_top, "peak_mib_s": peak}
        loc = sh["sources"].get("local", {}).get("largest_r")
        t = {}
        if loc is not None and "tierfs-l2" in sh["sources"]:
            l2 = sh["sources"]["tierfs-l2"]["largest_r"]
            t["l2_r_vs_local"] = {"r": l2, "local": loc, "met": l2 >= 0.9 * loc}
        if "tierfs-prefetch" in sh["sources"]:
            pf = sh["sources"]["tierfs-prefetch"]
            if loc is not None and shape in ("unet3d", "cosmoflow"):
                t["prefetch_r_vs_local"] = {"r": pf["largest_r"], "local": loc, "met": pf["largest_r"] >= 0.5 * loc}
            if sh["ceiling_mib_s"]:
                ratio = pf["peak_mib_s"] / sh["ceiling_mib_s"]
                t["prefetch_vs_ceiling"] = {"ratio": ratio, "met": ratio >= 0.8}
        sh["targets"] = t
        out["shapes"][shape] = sh
    return out


def f_au(x):
    return "–" if x is None else "%.0f%%" % (100 * x)


def f_num(x, nd=0):
    return "–" if x is None else ("{:,.%df}" % nd).format(x)


def markdown(summary, runs):
    allr = sorted({k[2] for k in runs})
    lines = ["| shape | source | " + " | ".join("AU R=%d (1st step excl.)" % r for r in allr)
             + " | largest R at min AU | MiB/s at R=" + "/".join(map(str, allr))
             + " | step wait p99 / max, ms (at R=%d) |" % allr[-1],
             "|---|---|" + "---|" * len(allr) + "---|---|---|"]
    for shape, sh in summary["shapes"].items():
        p = SHAPES[shape]
        for src, s in sh["sources"].items():
            top = max(s["au"]) if s["au"] else None
            lr = "%d%s" % (s["largest_r"], "+" if s["largest_r_is_top"] and s["largest_r"] else "")
            lines.append("| %s (min %d%%) | %s | %s | %s | %s | %s / %s |" % (
                shape, round(100 * p["min_au"]), SOURCE_NAMES[src],
                " | ".join("%s (%s)%s" % (f_au(s["au"].get(r)), f_au(s["au_mlperf"].get(r)),
                                          "*" if s["status"].get(r) == "capped" else "") for r in allr),
                lr, " / ".join(f_num(s["mib_s"].get(r)) for r in allr),
                f_num(s["wait_p99_ms"].get(top), 0), f_num(s["wait_max_ms"].get(top), 0)))
        if sh.get("ceiling_mib_s"):
            lines.append("| %s | origin ceiling (16 parallel GETs, no file system) | %s – | %s | – |" % (
                shape, "– | " * len(allr), f_num(sh["ceiling_mib_s"])))
    lines.append("")
    lines.append("AU over the whole epoch from the moment the rank's DataLoader workers run; in brackets "
                 "MLPerf's definition (first step excluded), which a short epoch inflates: the loader buffers "
                 "batches during a slow first step. Largest R: by the first figure. `+`: the largest R measured "
                 "still meets the minimum AU; `*`: the epoch was cut at --cap.")
    def verdict(x):
        if x["local"] == 0:
            return "not decided: local disk keeps no accelerator at the minimum AU either"
        return "met" if x["met"] else "missed"

    def au_ratio(sh, src):
        a = sh["sources"].get(src, {}).get("au", {}).get(1)
        b = sh["sources"].get("local", {}).get("au", {}).get(1)
        return "; AU at R=1 %.2f× local disk's" % (a / b) if a is not None and b else ""

    tl = []
    for shape, sh in summary["shapes"].items():
        t = sh["targets"]
        if "l2_r_vs_local" in t:
            x = t["l2_r_vs_local"]
            tl.append("- %s: tierfs warm from L2 R = %d vs local disk %d (target ≥ 0.9×): %s%s"
                      % (shape, x["r"], x["local"], verdict(x), au_ratio(sh, "tierfs-l2")))
        if "prefetch_r_vs_local" in t:
            x = t["prefetch_r_vs_local"]
            tl.append("- %s: tierfs cold + prefetch R = %d vs local disk %d (target ≥ 0.5×): %s%s"
                      % (shape, x["r"], x["local"], verdict(x), au_ratio(sh, "tierfs-prefetch")))
        if "prefetch_vs_ceiling" in t:
            x = t["prefetch_vs_ceiling"]
            tl.append("- %s: tierfs cold + prefetch peak MiB/s = %.2f× the origin ceiling (target ≥ 0.8×): %s"
                      % (shape, x["ratio"], "met" if x["met"] else "missed"))
    if tl:
        lines += ["", "Goals:"] + tl
    return "\n".join(lines)


def spread(values):
    v = sorted(x for x in values if x is not None)
    if len(v) < 2:
        return None
    med = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return (v[-1] - v[0]) / med if med else None


def report_text(dirs):
    """(markdown, summary) of the runs in dirs[0] (the other dirs: the same runs repeated, for
    their spread); (None, None) when dirs[0] holds none. bench/report.py's au section."""
    runs, ceil = load_dir(dirs[0])
    if not runs:
        return None, None
    summary = summarize(runs, ceil)
    any_run = next(iter(runs.values()))
    head = ("AU per emulated accelerator (H100 compute times%s), one epoch per (shape, source, R), "
            "%s; %d DataLoader workers per rank; barrier: %s."
            % ("" if any_run.get("compute_scale", 1) == 1 else
               " × %g (AU_COMPUTE_SCALE)" % any_run["compute_scale"], "page cache dropped before every epoch" if any_run.get("caches_dropped")
               else "page cache NOT dropped", any_run.get("workers", 0), any_run.get("barrier")))
    loads = sorted(r["loadavg_1m"] for r in runs.values() if r.get("loadavg_1m") is not None)
    if loads:
        head += " Load average (1 min) after the runs: %.1f–%.1f on %d cores." % (loads[0], loads[-1], os.cpu_count())
    io = sorted(r["pressure_io_some_avg10"] for r in runs.values() if r.get("pressure_io_some_avg10") is not None)
    if io:
        head += " I/O pressure (PSI some, avg10) after the runs: %.0f–%.0f%%." % (io[0], io[-1])
    md = [head, "", markdown(summary, runs)]
    if len(dirs) > 1:
        md += ["", "Reproducibility over %d runs (spread = (max − min) / median; MLPerf asks ≤ 5%%):" % len(dirs), "",
               "| shape | source | R | AU per run | AU spread | MiB/s spread |", "|---|---|---|---|---|---|"]
        others = [load_dir(d)[0] for d in dirs[1:]]
        summary["repro"] = []
        for key in sorted(runs):
            rr = [runs[key]] + [o[key] for o in others if key in o]
            aus = [r.get("au") for r in rr]
            s_au = spread(aus)
            s_bw = spread([r.get("mib_s") for r in rr])
            summary["repro"].append({"shape": key[0], "source": key[1], "ranks": key[2], "au": aus,
                                     "au_spread": s_au, "mib_s_spread": s_bw})
            md.append("| %s | %s | %d | %s | %s | %s |" % (
                key[0], SOURCE_NAMES[key[1]], key[2], ", ".join(f_au(a) for a in aus),
                "–" if s_au is None else "%.1f%%" % (100 * s_au), "–" if s_bw is None else "%.1f%%" % (100 * s_bw)))
    return "\n".join(md), summary


def cmd_report(args):
    dirs = args.dirs
    text, summary = report_text(dirs)
    if text is None:
        print("au report: no results in %s" % dirs[0], file=sys.stderr)
        return 1
    print(text)
    with open(os.path.join(dirs[0], "au.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(dirs[0], "au.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    return 0


# --- smoke (the test suite) --------------------------------------------------------------------------
def cmd_smoke(args):
    tmp = tempfile.mkdtemp(prefix="au-smoke-")
    try:
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):
            seed.cmd_local("au-smoke", os.path.join(tmp, "data"))
        out = os.path.join(tmp, "out")
        bad = []
        for shape, batch in (("unet3d", 2), ("resnet50", 8), ("cosmoflow", 1)):
            a = argparse.Namespace(batch=batch, compute=0.002, workers=1, prefetch="none", ahead=16,
                                   cap=30.0, drop_caches=False, out_dir=out, shape=shape, source="local",
                                   root=os.path.join(tmp, "data", shape), ranks="1,2")
            cmd_run(a)
            for r in (1, 2):
                res = json.load(open(os.path.join(out, "%s-local-r%d.json" % (shape, r))))
                if res["status"] != "ok" or not (0 < res["au"] <= 1.0) or res["bytes"] <= 0 \
                        or res["steps"] < 2 or res["wait_max_ms"] is None:
                    bad.append("%s R=%d: %s" % (shape, r, res))
        with contextlib.redirect_stdout(io.StringIO()):
            if cmd_report(argparse.Namespace(dirs=[out, out])) != 0:
                bad.append("report failed")
        summary = json.load(open(os.path.join(out, "au.json")))
        if set(summary["shapes"]) != set(SHAPES):
            bad.append("report lacks shapes: %s" % sorted(summary["shapes"]))
        for b in bad:
            print("au smoke: FAILED: %s" % b, file=sys.stderr)
        print("au smoke: %s" % ("ok" if not bad else "failed"))
        return 1 if bad else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--shape", choices=sorted(SHAPES), required=True)
    r.add_argument("--source", required=True, choices=SOURCES + ("other",))
    r.add_argument("--root", required=True, help="the shape's directory")
    r.add_argument("--ranks", default="1,2,4")
    r.add_argument("--out-dir", required=True)
    r.add_argument("--workers", type=int, default=4, help="DataLoader workers per rank")
    r.add_argument("--prefetch", choices=("none", "sampler", "deep"), default="none",
                   help="sampler: tierfs.torch.PrefetchSampler in every rank; deep: tierfs.prefetch "
                        "of the directory, started with the epoch")
    r.add_argument("--ahead", type=int, default=256, help="PrefetchSampler's look-ahead, samples")
    r.add_argument("--drop-caches", action="store_true", help="drop the page cache before every epoch")
    r.add_argument("--cap", type=float, default=120.0, help="seconds before an epoch is cut short")
    r.add_argument("--batch", type=int, help="override the shape's batch")
    r.add_argument("--compute", type=float, help="override the compute per step, seconds")
    c = sub.add_parser("ceiling")
    c.add_argument("--shape", choices=sorted(SHAPES), required=True)
    c.add_argument("--root", required=True, help="local copy of the shape's directory (the object list)")
    c.add_argument("--url", required=True, help="ENDPOINT/BUCKET/PREFIX of the objects")
    c.add_argument("--out-dir", required=True)
    c.add_argument("--streams", type=int, default=16)
    rp = sub.add_parser("report")
    rp.add_argument("dirs", nargs="+")
    sub.add_parser("smoke")
    args = ap.parse_args(argv)
    return {"run": cmd_run, "ceiling": cmd_ceiling, "report": cmd_report, "smoke": cmd_smoke}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
