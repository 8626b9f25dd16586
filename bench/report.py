#!/usr/bin/python3
"""Turns one benchmark run directory (bench/out/<stamp>/) into results.json, results.md, results.png.

  report.py RUN_DIR
  report.py --rounds RUN_DIR   only the interleaved cold sequential rounds, as markdown on stdout
  report.py --loader-rounds RUN_DIR   only the interleaved cold DataLoader rounds (run.sh --only
                               loaderrounds), as markdown on stdout
  report.py --stall-rounds RUN_DIR   only the interleaved GPU-stall rounds after a prefetch (run.sh
                               --only stallrounds), as markdown on stdout

Reads RUN_DIR/meta.json and RUN_DIR/raw/<tool>/*.json (fio JSON output, or the small status/result
records run.sh and loader.py write). Every figure in the table comes with its ratio to the best
*other* peer (tierfs, s3fs, rclone) and to local disk, oriented so that > 1 means better.
"""
import json
import math
import os
import statistics
import sys

TOOLS = ["tierfs", "s3fs", "rclone", "local", "nullfs", "raw"]
PEERS = ["tierfs", "s3fs", "rclone"]
COLORS = {"tierfs": "#d62728", "s3fs": "#1f77b4", "rclone": "#2ca02c", "local": "#7f7f7f",
          "nullfs": "#9467bd", "raw": "#ff7f0e"}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# A figure: {"value": float|None, "status": "ok"|"capped"|"timeout"|"error"|"n/a", "note": str}
def fig(value, status="ok", note=""):
    return {"value": value, "status": status, "note": note}


def fio_figures(j, expected_bytes=None):
    """fio JSON -> dict of figures (bw MB/s, iops, p50/p99/max latency ms)."""
    if j is None:
        return {}
    if "jobs" not in j:
        st = j.get("status", "error")
        return {k: fig(None, st, j.get("message", "")) for k in ("mbps", "iops", "p50", "p99", "max")}
    r = j["jobs"][0]["read"]
    st = "ok"
    if expected_bytes and r.get("io_bytes", 0) < expected_bytes * 0.999:
        st = "capped"
    pct = r.get("clat_ns", {}).get("percentile", {})

    def p(k):
        for key, v in pct.items():
            if abs(float(key) - k) < 1e-6:
                return v / 1e6
        return None
    return {
        "mbps": fig(r["bw_bytes"] / 1e6, st),
        "iops": fig(r["iops"], st),
        "p50": fig(p(50), st),
        "p99": fig(p(99), st),
        "max": fig(r.get("clat_ns", {}).get("max", 0) / 1e6, st),
    }


def seq_cpu_per_gib(cpu, nbytes):
    """(origin side, rest of the machine) CPU seconds per GiB read, from a bench/cpustat.py
    figure attached to a result of `nbytes` bytes; None without one."""
    if not cpu or not nbytes or cpu.get("machine_busy") is None:
        return None
    gib = nbytes / float(1 << 30)
    origin = cpu.get("origin_cpu_s", 0) + cpu.get("proxy_cpu_s", 0)
    return origin / gib, max(0.0, cpu["machine_cpu_s"] - origin) / gib


def collect(run):
    meta = load(os.path.join(run, "meta.json")) or {}
    ds = meta.get("dataset", {})
    big = ds.get("big_size")
    tools = [t for t in meta.get("tools", TOOLS) if t in TOOLS]
    res = {}   # metric -> tool -> figure
    notes = {}

    def put(metric, tool, f):
        res.setdefault(metric, {})[tool] = f

    def put_cpu(tool, cpu, objects):
        """CPU per cold small object (bench/cpustat.py figures over `objects` objects)."""
        if not cpu or not objects or cpu.get("machine_busy") is None:
            return
        origin = cpu.get("origin_cpu_s", 0) + cpu.get("proxy_cpu_s", 0)
        if origin > 0:  # local disk and nullfs never ask the origin
            put("cpu.origin_ms", tool, fig(origin / objects * 1e3))
        put("cpu.rest_ms", tool, fig(max(0.0, cpu["machine_cpu_s"] - origin) / objects * 1e3))
        busy = fig(cpu["machine_busy"] * 100)
        busy["cores"] = cpu.get("cores")
        put("cpu.busy", tool, busy)

    def put_seq_cpu(tool, name, cpu, nbytes):
        """CPU seconds per GiB of a cold sequential read: the origin side and the rest."""
        per_gib = seq_cpu_per_gib(cpu, nbytes)
        if per_gib is None:
            return
        origin, rest_s = per_gib
        if origin > 0:
            put("cpu.%s.origin_s" % name, tool, fig(origin))
        rest = fig(rest_s)
        rest["cores"] = cpu.get("cores")
        put("cpu.%s.rest_s" % name, tool, rest)

    for t in tools:
        d = os.path.join(run, "raw", t)
        if os.path.exists(os.path.join(d, "skipped.json")):
            notes[t] = "not available on this machine (skipped)"
            continue
        if t == "raw":
            for name, metric in (("seq1", "seq1-cold"), ("seq2", "seq2-cold"), ("seqpar", "seqpar")):
                j = load(os.path.join(d, name + ".json"))
                if j:
                    v = j["bytes"] / j["seconds"] / 1e6 if j.get("status") == "ok" else None
                    put(metric + ".mbps", t, fig(v, j.get("status", "error")))
                    if name == "seqpar" and j.get("status") == "ok":  # the 8-way GETs' CPU
                        put_seq_cpu(t, "seq1-cold", j.get("cpu"), j["bytes"])
            for name in ("rand4k", "rand128k"):
                j = load(os.path.join(d, name + ".json"))
                if j:
                    st = j.get("status", "error")
                    put(name + "-cold.iops", t, fig(j.get("iops"), st))
                    for k in ("p50", "p99", "max"):
                        put("%s-cold.%s" % (name, k), t, fig(j.get("lat_%s_ms" % k), st))
            j = load(os.path.join(d, "small.json"))
            if j:
                st = j.get("status", "error")
                put("loader.e1.sps", t, fig(j.get("iops"), st, "GET of whole objects, 4 in flight"))
                for k in ("p50", "p99", "max"):
                    put("loader.e1.%s" % k, t, fig(j.get("lat_%s_ms" % k), st))
            # the origin's small-object ceiling: the better of 64 and 128 GETs in flight
            best = None
            for par in (64, 128):
                j = load(os.path.join(d, "small-par%d.json" % par))
                if j and j.get("status", "error") == "ok" and j.get("iops"):
                    if best is None or j["iops"] > best[0]:
                        best = (j["iops"], par, j)
            if best:
                put("smallpar.ops", t, fig(best[0], "ok", "%d GETs in flight" % best[1]))
                put_cpu(t, best[2].get("cpu"), best[2].get("requests"))
            j = load(os.path.join(d, "small-par128-spin.json"))
            if j:
                put("smallspin.ops", t, fig(j.get("iops"), j.get("status", "error")))
            continue
        for name, nfiles in (("seq1-cold", 1), ("seq1-next", 1), ("seq1-warm", 1), ("seq2-cold", 2),
                             ("seq2-warm", 2)):
            j = load(os.path.join(d, name + ".json"))
            if j is not None:
                f = fio_figures(j, big * nfiles if big else None)["mbps"]
                put(name + ".mbps", t, f)
                if name in ("seq1-cold", "seq1-next") and f["status"] == "ok" and "jobs" in j:
                    put_seq_cpu(t, name, j.get("cpu"), j["jobs"][0]["read"].get("io_bytes"))
        for name in ("rand4k-cold", "rand4k-warm", "rand128k-cold", "rand128k-warm"):
            j = load(os.path.join(d, name + ".json"))
            if j is not None:
                for k, f in fio_figures(j).items():
                    if k != "mbps":
                        put("%s.%s" % (name, k), t, f)
        for name in ("find-cold", "find-warm"):
            j = load(os.path.join(d, name + ".json"))
            if j is not None:
                st = j.get("status", "error")
                put(name + ".s", t, fig(j.get("seconds"), st,
                                        "%s/%s files" % (j.get("files"), j.get("expected"))))
        for name in ("loader", "loader-sampler", "loader-prefetched"):
            j = load(os.path.join(d, name + ".json"))
            if j is None:
                continue
            if not j.get("epochs"):
                for e in (1, 2):
                    put("%s.e%d.sps" % (name, e), t, fig(None, j.get("status", "error"), j.get("error", "")))
                continue
            for e in j["epochs"]:
                st = "capped" if e.get("capped") else "ok"
                n = e["epoch"]
                if name == "loader" and n == 1:
                    put_cpu(t, e.get("cpu"), e.get("samples"))
                put("%s.e%d.sps" % (name, n), t, fig(e["samples_per_s"], st))
                for k in ("p50", "p99", "max"):
                    put("%s.e%d.%s" % (name, n, k), t, fig(e.get("lat_%s_ms" % k), st))
            if len(j["epochs"]) < 2 and j.get("status") == "capped":
                put("%s.e2.sps" % name, t, fig(None, "skipped", "epoch 1 capped"))
        j = load(os.path.join(d, "prefetch.json"))
        if j:
            put("prefetch.s", t, fig(j.get("seconds"), j.get("status", "error"), j.get("how", "")))
            if t == "tierfs":
                notes.setdefault("tierfs", "")
                notes["tierfs"] = ("prefetch: " + j.get("how", "")).strip()
        rss = []
        try:
            for line in open(os.path.join(d, "rss.jsonl")):
                rss.append(json.loads(line)["vmhwm_kb"])
        except OSError:
            pass
        if rss:
            put("rss.mib", t, fig(max(rss) / 1024.0))
    return meta, tools, res, notes


# metric key -> (label, unit, higher is better, in chart)
METRICS = [
    ("seq1-cold.mbps", "seq read 1 MiB, 1 stream, cold", "MB/s", True, True),
    ("cpu.seq1-cold.origin_s", "  ↳ CPU s per GiB on the origin side (s3rver + proxy); raw: the 8 ranged GETs",
     "s", False, False),
    ("cpu.seq1-cold.rest_s", "  ↳ CPU s per GiB on the rest of the machine (client, reader, kernel)", "s",
     False, False),
    ("seq1-next.mbps", "seq read 1 MiB, 1 stream, cold, the other file in the same mount", "MB/s", True,
     False),
    ("cpu.seq1-next.rest_s", "  ↳ CPU s per GiB on the rest of the machine", "s", False, False),
    ("seq1-warm.mbps", "seq read 1 MiB, 1 stream, warm", "MB/s", True, True),
    ("seq2-cold.mbps", "seq read 1 MiB, 2 streams, cold", "MB/s", True, True),
    ("seq2-warm.mbps", "seq read 1 MiB, 2 streams, warm", "MB/s", True, True),
    ("seqpar.mbps", "origin: 8 parallel ranged GETs", "MB/s", True, False),
]
SMALLPAR = ("smallpar.ops", "origin: whole 128 KiB objects, many GETs in flight", "objects/s", True, False)
for _bs in ("4k", "128k"):
    for _st in ("cold", "warm"):
        METRICS += [
            ("rand%s-%s.iops" % (_bs, _st), "rand read %s, 4 jobs, %s" % (_bs.replace("k", " KiB"), _st),
             "IOPS", True, True),
            ("rand%s-%s.p50" % (_bs, _st), "  ↳ latency p50", "ms", False, False),
            ("rand%s-%s.p99" % (_bs, _st), "  ↳ latency p99", "ms", False, _bs == "4k"),
            ("rand%s-%s.max" % (_bs, _st), "  ↳ latency max", "ms", False, False),
        ]
METRICS += [
    ("find-cold.s", "find/stat tiny files, cold", "s", False, True),
    ("find-warm.s", "find/stat tiny files, warm", "s", False, True),
]
for _name, _label in (("loader", "DataLoader"), ("loader-prefetched", "DataLoader, dir prefetched")):
    if _name == "loader-prefetched":
        METRICS.append(("prefetch.s", "prefetch the directory", "s", False, False))
    for _e in (1, 2):
        METRICS += [
            ("%s.e%d.sps" % (_name, _e), "%s epoch %d" % (_label, _e), "samples/s", True, True),
            ("%s.e%d.p50" % (_name, _e), "  ↳ sample read p50", "ms", False, False),
            ("%s.e%d.p99" % (_name, _e), "  ↳ sample read p99", "ms", False, _e == 1),
            ("%s.e%d.max" % (_name, _e), "  ↳ sample read max", "ms", False, False),
        ]
    if _name == "loader":
        METRICS.append(SMALLPAR)
        METRICS.append(("smallspin.ops", "  ↳ the same while a process spins on one core", "objects/s",
                        True, False))
        METRICS += [
            ("loader-sampler.e%d.sps" % _e, "DataLoader epoch %d with tierfs.torch.PrefetchSampler" % _e,
             "samples/s", True, False) for _e in (1, 2)
        ]
        METRICS += [
            ("cpu.origin_ms", "cold small objects, CPU per object on the origin side (s3rver + proxy); "
             "raw: the ceiling run, others: DataLoader epoch 1", "ms", False, False),
            ("cpu.rest_ms", "  ↳ CPU per object on the rest of the machine (client, loader, kernel)",
             "ms", False, False),
            ("cpu.busy", "  ↳ machine busy (all cores)", "%", True, False),
        ]
METRICS.append(("rss.mib", "daemon peak RSS (VmHWM)", "MiB", False, True))


def ok(f):
    return f is not None and f["value"] is not None and f["status"] in ("ok", "capped") and f["value"] > 0


def better_ratio(v, ref, higher):
    return v / ref if higher else ref / v


def fmt_ratio(r):
    if r < 0.01:
        return "<0.01×"
    if r >= 100:
        return "%.0f×" % r
    if r >= 10:
        return "%.1f×" % r
    return "%.2f×" % r


def fmt_num(v):
    if v is None:
        return "–"
    a = abs(v)
    if a >= 1000:
        return "{:,.0f}".format(v)
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    if a >= 1:
        return "%.2f" % v
    return "%.3f" % v


def cell(metric, tool, row, higher, meta):
    f = row.get(tool)
    if f is None:
        return "–"
    if not ok(f):
        if f["status"] == "timeout":
            return "timeout (> %ss)" % fmt_num(meta.get("cap_s"))
        if f["status"] == "skipped":
            return "– (%s)" % f.get("note", "skipped")
        return f["status"]
    s = fmt_num(f["value"])
    if f["status"] == "capped":
        s += " (capped)"
    if metric.startswith("cpu."):
        return s  # where the CPU went, not a score: no ratios
    ratios = []
    if tool in PEERS:
        others = [row[p]["value"] for p in PEERS if p != tool and ok(row.get(p))]
        if others:
            best = max(others) if higher else min(others)
            ratios.append(fmt_ratio(better_ratio(f["value"], best, higher)) + " peer")
    if tool != "local" and ok(row.get("local")) and not metric.startswith("rss"):
        ratios.append(fmt_ratio(better_ratio(f["value"], row["local"]["value"], higher)) + " local")
    if ratios:
        s += " <sub>" + ", ".join(ratios) + "</sub>"
    return s


def markdown(meta, tools, res, notes):
    ds = meta.get("dataset", {})
    v = meta.get("versions", {})
    shown = [t for t in tools if t not in notes or not notes[t].startswith("not available")]
    lines = [
        "# tierfs benchmark — %s" % meta.get("date", "?"),
        "",
        "Machine: %s, %s cores, %s GiB RAM, Linux %s. Origin: s3rver on loopback behind a %.0f ms-each-way "
        "delay proxy. Dataset (%s): 2 × %s MiB, %s × 128 KiB files, %s tiny files. Cap per workload: %ss."
        % (meta.get("cpu", "?"), meta.get("cores", "?"), round(meta.get("mem_mib", 0) / 1024),
           meta.get("kernel", "?"), meta.get("delay_ms", 0), meta.get("layout", "?"),
           (ds.get("big_size") or 0) >> 20, "{:,}".format(ds.get("small_files", 0)),
           "{:,}".format(ds.get("tiny_files", 0)), fmt_num(meta.get("cap_s"))),
        "",
        "Versions: tierfs %s, %s, %s, fio %s, libfuse %s, torch %s."
        % (v.get("tierfs", "?"), v.get("s3fs", "?"), v.get("rclone", "?"), v.get("fio", "?"),
           v.get("libfuse", "?"), v.get("torch", "?")),
        "",
        "Each figure is followed by its ratio to the best *other* peer (tierfs, s3fs, rclone) and to "
        "local disk, oriented so that **> 1× means better** (faster, more IOPS, lower latency). "
        "*cold* = fresh mount, empty caches; *warm* = after the tool has read the data once and "
        "`drop_caches`, so the tool's own cache tiers are measured, not the kernel page cache. "
        "`capped`: the workload hit the cap and the figure covers the part that ran; `timeout`: "
        "nothing usable within the cap (a lower bound on the time).",
        "",
        "| workload | unit | " + " | ".join(shown) + " |",
        "|---|---|" + "---|" * len(shown),
    ]
    for key, label, unit, higher, _ in METRICS:
        row = res.get(key)
        if not row:
            continue
        lines.append("| %s | %s | %s |" % (label, unit, " | ".join(cell(key, t, row, higher, meta) for t in shown)))
    lines.append("")
    ceil = res.get("smallpar.ops", {}).get("raw")
    e1 = res.get("loader.e1.sps", {})
    if ok(ceil):
        for t in shown:
            if t != "raw" and ok(e1.get(t)):
                lines.append("- **%s** cold DataLoader epoch 1 / the origin's small-object ceiling (%s objects/s, "
                             "%s): %s" % (t, fmt_num(ceil["value"]), ceil.get("note", ""),
                                          fmt_ratio(e1[t]["value"] / ceil["value"])))
    spin = res.get("smallspin.ops", {}).get("raw")
    if ok(ceil) and ok(spin):
        line = ("- the origin's small-object ceiling while a process spins on one core (as a loader and a "
                "file system take CPU of their own on the machine that runs the origin): %s objects/s, %s the "
                "ceiling" % (fmt_num(spin["value"]), fmt_ratio(spin["value"] / ceil["value"])))
        for t in shown:
            if t not in ("raw", "local", "nullfs") and ok(e1.get(t)):
                line += "; **%s** epoch 1 / that: %s" % (t, fmt_ratio(e1[t]["value"] / spin["value"]))
        lines.append(line)
    lines += cpu_bound_lines(res, shown)
    for t in tools:
        if t in notes and notes[t]:
            lines.append("- **%s**: %s" % (t, notes[t]))
    pre = res.get("prefetch.s", {})
    for t in shown:
        if t in pre and t != "tierfs" and pre[t].get("note"):
            lines.append("- **%s** prefetch: %s" % (t, pre[t]["note"]))
    lines.append("- **raw**: curl against the delayed origin (single GET, 2 GETs at once, 8 parallel "
                 "ranged GETs; random ranged GETs 4 in flight; its DataLoader row is whole-object GETs of the "
                 "128 KiB files, 4 in flight, in shuffled order: the origin's rate at the loader's own concurrency; the small-object ceiling row is the same with 64 and with 128 in flight, the better one). **nullfs**: a do-nothing FUSE file system "
                 "serving memory — the FUSE ceiling of this machine. **local**: the same files on local "
                 "disk; its cold and warm runs both read from disk after `drop_caches`.")
    lines.append("")
    return "\n".join(lines)


def cpu_bound_lines(res, shown):
    """The cold small-object rate a tool's CPU cost allows on this machine: the origin and the
    client share the cores, so with every core busy a client costing `rest` ms per object next to
    an origin costing `origin` ms per object reads at most cores * 1000 / (origin + rest) objects/s.
    The same bound for a cold sequential read, from the CPU seconds per GiB."""
    lines = []
    ceil = res.get("smallpar.ops", {}).get("raw")
    busy = res.get("cpu.busy", {})
    for t in shown:
        o, r, b = (res.get(k, {}).get(t) for k in ("cpu.origin_ms", "cpu.rest_ms", "cpu.busy"))
        if not (ok(o) and ok(r) and b is not None and b.get("cores")):
            continue
        bound = b["cores"] * 1000.0 / (o["value"] + r["value"])
        line = ("- **%s** cold small objects (%s): %s ms of CPU per object on the origin side and %s "
                "on the rest of the machine, which was %.0f%% busy; with every one of its %d cores "
                "busy, that cost allows at most %s objects/s"
                % (t, "the origin's ceiling run" if t == "raw" else "DataLoader epoch 1",
                   fmt_num(o["value"]), fmt_num(r["value"]), b["value"], b["cores"], fmt_num(bound)))
        if ok(ceil) and t != "raw":
            line += " (%s the ceiling)" % fmt_ratio(bound / ceil["value"])
        lines.append(line)
    # The same for a cold 1 GiB sequential read (the origin side and the rest, seconds per GiB).
    par = res.get("seqpar.mbps", {}).get("raw")
    for t in shown:
        o, r = (res.get(k, {}).get(t) for k in ("cpu.seq1-cold.origin_s", "cpu.seq1-cold.rest_s"))
        if not (ok(o) and ok(r) and r.get("cores")):
            continue
        bound = r["cores"] * (1 << 30) / 1e6 / (o["value"] + r["value"])
        line = ("- **%s** cold sequential 1 GiB (%s): %s s of CPU per GiB on the origin side and %s on the "
                "rest of the machine; with every one of its %d cores busy, that cost allows at most %s MB/s"
                % (t, "8 ranged GETs" if t == "raw" else "one stream", fmt_num(o["value"]),
                   fmt_num(r["value"]), r["cores"], fmt_num(bound)))
        if ok(par) and t != "raw":
            line += " (%s the 8 ranged GETs' rate)" % fmt_ratio(bound / par["value"])
        lines.append(line)
    # A file system that cost no CPU at all: the origin's cost per object in the ceiling run and
    # the loader's own cost (what the rest of the machine spent on the local-disk epoch).
    o, r = res.get("cpu.origin_ms", {}).get("raw"), res.get("cpu.rest_ms", {}).get("local")
    cores = (busy.get("local") or {}).get("cores")
    if ok(o) and ok(r) and ok(ceil) and cores:
        bound = cores * 1000.0 / (o["value"] + r["value"])
        lines.append("- a file system costing no CPU, under this loader (its own cost on local disk: %s ms "
                     "per object) and this origin (%s ms per object in the ceiling run), could read at most "
                     "%s objects/s: %s the ceiling" % (fmt_num(r["value"]), fmt_num(o["value"]),
                                                     fmt_num(bound), fmt_ratio(bound / ceil["value"])))
    return lines


def chart(meta, tools, res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    keys = [(k, l, u, h) for k, l, u, h, c in METRICS
            if c and k in res and any(t != "raw" for t in res[k])]
    if not keys:
        return
    shown = [t for t in tools if any(t in res[k] for k, _, _, _ in keys)]
    ncol = 4
    nrow = int(math.ceil(len(keys) / float(ncol)))
    fig_, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.0 * nrow + 0.8), squeeze=False)
    for i, (key, label, unit, higher) in enumerate(keys):
        ax = axes[i // ncol][i % ncol]
        row = res[key]
        vals, cols, hatches, names = [], [], [], []
        here = [t for t in shown if t in row]
        for t in here:
            f = row.get(t)
            names.append(t)
            cols.append(COLORS[t])
            if ok(f):
                vals.append(f["value"])
                hatches.append("//" if f["status"] == "capped" else "")
            else:
                vals.append(0)
                hatches.append("")
        bars = ax.bar(range(len(here)), vals, color=cols)
        for b, h in zip(bars, hatches):
            if h:
                b.set_hatch(h)
                b.set_edgecolor("white")
        positive = [v for v in vals if v > 0]
        if positive and max(positive) / min(positive) > 50:
            ax.set_yscale("log")
        top = max(positive) if positive else 1
        for j, (b, t) in enumerate(zip(bars, here)):
            f = row.get(t)
            if ok(f):
                txt = fmt_num(f["value"])
            elif f is None:
                txt = "n/a"
            else:
                txt = f["status"]
            y = b.get_height() if b.get_height() > 0 else (min(positive) if positive and ax.get_yscale() == "log" else 0)
            ax.annotate(txt, (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 2), textcoords="offset points",
                        color="black" if ok(f) else "#b00000")
        ax.set_xticks(range(len(here)))
        ax.set_xticklabels(here, fontsize=7.5)
        title = label.strip().replace("↳ ", "")
        if key.endswith(".p99") and key.startswith("rand"):
            title = key.split(".")[0].replace("-", " ") + " p99 latency"
        if key.startswith("loader") and key.endswith(".p99"):
            title = ("prefetched " if "prefetched" in key else "") + "loader epoch %s sample p99" % key.split(".")[1][1:]
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("%s (%s)" % (unit, "higher is better" if higher else "lower is better"), fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        if ax.get_yscale() != "log":
            ax.set_ylim(0, top * 1.18)
        else:
            ax.set_ylim(top=top * 3)
        ax.grid(axis="y", alpha=0.3)
    for i in range(len(keys), nrow * ncol):
        axes[i // ncol][i % ncol].axis("off")
    ds = meta.get("dataset", {})
    fig_.suptitle("tierfs benchmark (%s, %s) — %s cores, %s; origin s3rver + %.0f ms each way; hatched = capped"
                  % (meta.get("layout", "?"), meta.get("date", "?"), meta.get("cores", "?"),
                     (meta.get("cpu") or "?")[:40], meta.get("delay_ms", 0)), fontsize=10)
    fig_.legend(handles=[Patch(color=COLORS[t], label=t) for t in shown], loc="upper right", ncol=len(shown),
                fontsize=8, frameon=False)
    fig_.tight_layout(rect=(0, 0, 1, 0.96))
    fig_.savefig(path, dpi=110)
    plt.close(fig_)


# The GPU-stall view (group G): rows in display order: (label, tool, loader file, prefetch file)
STALL_ROWS = [
    ("tierfs", "tierfs", "stall-plain", None),
    ("tierfs + PrefetchSampler", "tierfs", "stall-sampler", None),
    ("tierfs after prefetch", "tierfs", "stall-prefetched", "stall-prefetch"),
    ("s3fs", "s3fs", "stall-plain", None),
    ("rclone", "rclone", "stall-plain", None),
    ("local disk", "local", "stall-plain", None),
    ("copy-first (rclone copy --transfers 32, then local)", "rclone", "stall-copyfirst",
     "stall-copyfirst-copy"),
]


def stall_rows(run):
    """[(label, loader JSON, before JSON)] of the stall files present in the run."""
    rows = []
    for label, tool, name, before in STALL_ROWS:
        j = load(os.path.join(run, "raw", tool, name + ".json"))
        if j is None and before is None:
            continue
        b = load(os.path.join(run, "raw", tool, before + ".json")) if before else None
        if j is None and b is None:
            continue
        rows.append((label, j or {"status": "not run", "epochs": []}, b))
    return rows


def stall_markdown(meta, run):
    rows = stall_rows(run)
    if not rows:
        return ""
    st = meta.get("stall", {})
    lines = [
        "## GPU-stall view",
        "",
        "A DataLoader (4 workers, batch 64, shuffled with the same seeded RandomSampler for every "
        "row) over `small/`, with %s ms of simulated compute per batch, two epochs, each row on a "
        "fresh mount with empty caches. *stall* = time the loop waited on the loader / epoch time; "
        "*max wait* = the longest wait after the first batch; *before* = the prefetch or copy that "
        "ran first; *total* = before + epoch 1. PrefetchSampler look-ahead: %s samples."
        % (fmt_num(st.get("compute_ms", 20)), st.get("ahead", "?")),
        "",
        "| | before, s | epoch 1: first batch, s | stall | max wait, ms | epoch, s | total, s "
        "| epoch 2: first batch, s | stall | max wait, ms | epoch, s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ep(e):
        if e is None:
            return ["–"] * 4
        capped = " (capped)" if e.get("capped") else ""
        return [fmt_num(e.get("first_batch_s")), "%.1f%%" % (100 * (e.get("stall_fraction") or 0)),
                fmt_num(e.get("max_wait_ms")), fmt_num(e.get("seconds")) + capped]

    for label, j, b in rows:
        eps = j.get("epochs", [])
        ps = (eps[0].get("prefetch_sampler") if eps else None) or {}
        if ps and not ps.get("active"):
            label += " (passed through: %s)" % (ps.get("passed_through_because") or "inactive")
        before = "–"
        bsecs = 0.0
        if b is not None:
            bsecs = b.get("seconds") or 0.0
            before = fmt_num(bsecs) + ("" if b.get("status") == "ok" else " (%s)" % b.get("status"))
        e1 = eps[0] if eps else None
        e2 = eps[1] if len(eps) > 1 else None
        if e1 is None:
            cells = ["%s" % j.get("status", "error")] + ["–"] * 3
            total = "–"
        else:
            cells = ep(e1)
            total = fmt_num(bsecs + (e1.get("seconds") or 0))
        lines.append("| %s | %s | %s | %s | %s |" % (label, before, " | ".join(cells), total,
                                                     " | ".join(ep(e2))))
    lines.append("")
    return "\n".join(lines)


ROUND_TOOLS = ["raw", "tierfs", "s3fs", "rclone"]
# The series of a round (run.sh run_seq_rounds): key, tool, file name before "-round-N.json",
# column label.
ROUND_SERIES = [("raw", "raw", "seqpar", "origin: 8 ranged GETs"),
                ("raw-spin", "raw", "seqpar-spin", "8 ranged GETs, one core busy"),
                ("raw-fuse", "raw", "seqpar-fuse", "8 ranged GETs + the bytes through FUSE"),
                ("raw-fusel2", "raw", "seqpar-fusel2",
                 "8 ranged GETs + through FUSE + a 1 GiB flash write"),
                ("raw-fetchfs", "raw", "seqpar-fetchfs", "one FUSE process: the 8 GETs to the reader"),
                ("raw-fetchfsl2", "raw", "seqpar-fetchfsl2",
                 "one FUSE process: the 8 GETs to the reader and to flash"),
                ("raw-fetchfs8m", "raw", "seqpar-fetchfs8m",
                 "one FUSE process: 8 MiB GETs, 8 at a time, to the reader and to flash")] + [
    (k, t, f, l) for t in ROUND_TOOLS[1:]
    for k, f, l in ((t, "seq1", t), (t + "-2", "seq2", t + ", 2 streams"))]

# The series of ROUND_SERIES that do a FUSE cache's work in one process (nullfs --origin).
COUPLED_CEILINGS = ("raw-fetchfs", "raw-fetchfsl2", "raw-fetchfs8m")


def median_of(xs):
    """The median of the figures in xs that are there (None when none is)."""
    xs = [x for x in xs if x]
    return statistics.median(xs) if xs else None


def round_count(run, series):
    """How many rounds of `series` (key, tool, file name before "-round-N.json", label, ...) RUN holds:
    N while some series has its round-N file."""
    n = 0
    while any(os.path.exists(os.path.join(run, "raw", t, "%s-round-%d.json" % (f, n + 1)))
              for _, t, f, *_ in series):
        n += 1
    return n


def per_round(rates, a, b):
    """Series a over series b, per round where both have a figure."""
    return [x / y for x, y in zip(rates.get(a, []), rates.get(b, [])) if x and y]


def round_table(n, keys, label, rates, cpu):
    """The markdown table of a rounds report: a row per round (figure, CPU in brackets) and the
    medians."""
    lines = ["| round | " + " | ".join(label.get(k, k) for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for i in range(n):
        cells = []
        for k in keys:
            v, c = rates[k][i], cpu[k][i]
            cells.append("–" if not v else fmt_num(v) + (
                " <sub>(%s / %s)</sub>" % (fmt_num(c[0]), fmt_num(c[1])) if c else ""))
        lines.append("| %d | %s |" % (i + 1, " | ".join(cells)))
    lines.append("| median | %s |" % " | ".join(fmt_num(median_of(rates[k])) for k in keys))
    lines.append("")
    return lines


def ratio_line(what, rs):
    """ "- WHAT, per round: ...; median ..." for the per-round ratios rs."""
    return "- %s, per round: %s; median %s" % (
        what, ", ".join(fmt_ratio(x) for x in rs), fmt_ratio(median_of(rs)))


def round_rows(run):
    """{series: [MB/s or None per round]} of the interleaved cold sequential rounds (run.sh
    run_seq_rounds: raw/<tool>/seq{1,2}-round-N.json,
    raw/raw/seqpar{,-spin,-fuse,-fusel2,-fetchfs,-fetchfsl2,-fetchfs8m}-round-N.json; the
    series of ROUND_SERIES, "TOOL-2" for two streams), and their CPU seconds per GiB ({series:
    [(origin, rest) or None per round]})."""
    def path(t, f, i):
        return os.path.join(run, "raw", t, "%s-round-%d.json" % (f, i))
    n = round_count(run, ROUND_SERIES)
    rates, cpu = {}, {}
    for key, t, f, _ in ROUND_SERIES:
        rs, cs = [], []
        for i in range(1, n + 1):
            j = load(path(t, f, i)) or {}
            v, nbytes = None, None
            if t == "raw" and j.get("status") == "ok":
                v, nbytes = j["bytes"] / j["seconds"] / 1e6, j["bytes"]
            elif "jobs" in j:
                r = j["jobs"][0]["read"]
                nbytes = r.get("io_bytes")
                v = r["bw_bytes"] / 1e6 if nbytes else None
            rs.append(v)
            cs.append(seq_cpu_per_gib(j.get("cpu"), nbytes) if v else None)
        if any(rs):
            rates[key], cpu[key] = rs, cs
    return n, rates, cpu


def rounds_markdown(run):
    n, rates, cpu = round_rows(run)
    if not n or "tierfs" not in rates:
        return ""
    keys = [k for k, _, _, _ in ROUND_SERIES if k in rates]
    label = {k: lab for k, _, _, lab in ROUND_SERIES}
    lines = [
        "## Cold sequential, interleaved rounds",
        "",
        "Cold 1 GiB sequential reads (fio, 1 MiB), each on a fresh mount with empty caches, %sand "
        "the origin's 8 parallel ranged GETs of the same object%s, back to back in %d rounds whose "
        "order rotates: the tools are compared within a round, where they see the same origin (its "
        "rate drifts by a quarter from minute to minute here). MB/s; CPU s per GiB, origin side / "
        "rest of the machine, in brackets." % (
            "then both 1 GiB files at once (2 streams, total MB/s) on another fresh mount, "
            if any(k.endswith("-2") for k in keys) else "",
            ", alone and while a process spins on one core (what the origin gives a client that "
            "takes CPU of its own on this machine, as a file system does)" if "raw-spin" in keys else "",
            n),
        "",
        "The two FUSE columns are the least a FUSE cache of this origin has to do, done as "
        "independent jobs at the same time on this machine: the 8 GETs while the same 1 GiB is "
        "read through a do-nothing FUSE file system (nullfs, from its memory), and that plus "
        "writing 1 GiB to one file on the cache's filesystem with O_DIRECT (what keeping the "
        "bytes on flash costs at the least); MB/s is 1 GiB over the time until all are done, "
        "a ceiling for a FUSE file system (one that also keeps the bytes) on this machine."
        if "raw-fuse" in keys else "",
        "",
    ] + ([
        "The \"one FUSE process\" columns do that work coupled, as a cache does: a FUSE file system "
        "(nullfs --origin) whose first open fetches the whole file with the same 8 GETs (16 ranges) "
        "into memory and answers each read as soon as its bytes have arrived; with flash, a thread "
        "of its own also writes each arrived MiB to one file with O_DIRECT; with 8 MiB GETs, the "
        "file is fetched as 128 ranges, 8 at a time, tierfs's request shape (its readahead runs), "
        "but never held back by the reader (no window: the whole file is fetched at once). No "
        "cache logic, no checksums, no index: a ceiling for a FUSE cache of this origin.",
        "",
    ] if "raw-fetchfs" in keys else []) + round_table(n, keys, label, rates, cpu)
    for ref in [k for k in ("raw", "raw-spin", "raw-fuse", "raw-fusel2") + COUPLED_CEILINGS +
                tuple(ROUND_TOOLS[2:]) if k in rates]:
        rs = per_round(rates, "tierfs", ref)
        if rs:
            lines.append(ratio_line("**tierfs** / " + label.get(ref, ref), rs))
    # Each coupled ceiling against the GETs alone: what any FUSE cache of this origin reaches here.
    for ref in [k for k in COUPLED_CEILINGS if k in rates]:
        rs = per_round(rates, ref, "raw")
        if rs:
            lines.append(ratio_line(label[ref] + " / " + label["raw"], rs))
    for t in ROUND_TOOLS[1:]:
        rs = per_round(rates, t + "-2", t)
        if rs:
            lines.append(ratio_line(
                ("**tierfs**" if t == "tierfs" else t) + ", 2 streams / 1 stream", rs))
    lines.append("")
    return "\n".join(lines)


# The series of a loader round (run.sh run_loader_rounds): key, tool, file name before
# "-round-N.json", column label.
LOADER_ROUND_SERIES = [
    ("raw", "raw", "loaderpar", "origin: 128 GETs in flight"),
    ("raw-fuse", "raw", "loaderpar-fuse", "128 GETs + the loader through FUSE"),
    ("raw-fusel2", "raw", "loaderpar-fusel2", "128 GETs + the loader through FUSE + flash writes"),
    ("raw-fuseseg", "raw", "loaderpar-fuseseg",
     "128 GETs + the loader through FUSE + appends to one segment file"),
    ("tierfs", "tierfs", "loader", "tierfs epoch 1"),
]


def loader_round_rows(run):
    """{series: [objects/s or None per round]} of the interleaved loader rounds (run.sh
    run_loader_rounds: raw/raw/loaderpar{,-fuse,-fusel2,-fuseseg}-round-N.json,
    raw/tierfs/loader-round-N.json),
    and their CPU per object in ms ({series: [(origin, rest) or None per round]})."""
    def path(t, f, i):
        return os.path.join(run, "raw", t, "%s-round-%d.json" % (f, i))
    n = round_count(run, LOADER_ROUND_SERIES)
    rates, cpu = {}, {}
    for key, t, f, _ in LOADER_ROUND_SERIES:
        rs, cs = [], []
        for i in range(1, n + 1):
            j = load(path(t, f, i)) or {}
            v, c, objects = None, None, None
            if t == "raw" and j.get("status") == "ok":
                v, c, objects = j.get("iops"), j.get("cpu"), j.get("objects")
            elif j.get("status") == "ok" and j.get("epochs"):
                e = j["epochs"][0]
                if not e.get("capped"):
                    v, c, objects = e.get("samples_per_s"), e.get("cpu"), e.get("samples")
            per = None
            if v and c and objects and c.get("machine_busy") is not None:
                origin = c.get("origin_cpu_s", 0) + c.get("proxy_cpu_s", 0)
                per = (origin / objects * 1e3, max(0.0, c["machine_cpu_s"] - origin) / objects * 1e3)
            rs.append(v)
            cs.append(per)
        if any(rs):
            rates[key], cpu[key] = rs, cs
    return n, rates, cpu


def loader_rounds_markdown(run):
    n, rates, cpu = loader_round_rows(run)
    if not n or "tierfs" not in rates:
        return ""
    keys = [k for k, _, _, _ in LOADER_ROUND_SERIES if k in rates]
    label = {k: lab for k, _, _, lab in LOADER_ROUND_SERIES}
    first = load(os.path.join(run, "raw", "raw", "loaderpar-round-1.json")) or {}
    objects = "%d" % first["objects"] if first.get("objects") else "the"
    lines = [
        "## Cold DataLoader epoch, interleaved rounds",
        "",
        "A cold epoch of the DataLoader (4 workers, batch 64, shuffled) over the %s objects of "
        "`small/`, and the least any FUSE cache of this origin must do for it, done as independent "
        "jobs at the same time on this machine, back to back in %d rounds whose order rotates: "
        "every object with 128 GETs in flight (the origin's small-object ceiling); that while the "
        "same DataLoader epoch reads the same files through a do-nothing FUSE file system (nullfs, "
        "from its memory); and that plus writing as many files of the same bytes on the cache's "
        "filesystem as L2 writes its blocks (a file each: created, written with O_DIRECT, renamed; "
        "no index record), or appending them to one segment file instead (O_DIRECT, page-aligned: "
        "what a log-structured cache writes). Objects/s is the objects over the time from the epoch's start until "
        "all are done; tierfs's figure is its epoch 1 on a fresh mount with empty caches. CPU ms "
        "per object, origin side / rest of the machine, in brackets." % (objects, n),
        "",
    ] + round_table(n, keys, label, rates, cpu)
    for ref in [k for k in ("raw", "raw-fuse", "raw-fusel2", "raw-fuseseg") if k in rates]:
        rs = per_round(rates, "tierfs", ref)
        if rs:
            lines.append(ratio_line("**tierfs** / " + label[ref], rs))
    for ref in ("raw-fuse", "raw-fusel2", "raw-fuseseg"):
        rs = per_round(rates, ref, "raw")
        if rs:
            lines.append(ratio_line("%s / %s" % (label[ref], label["raw"]), rs))
    lines.append("")
    return "\n".join(lines)


# The series of a stall round (run.sh run_stall_rounds): key, tool, file name before
# "-round-N.json", row label, name in the ratio lines.
STALL_ROUND_SERIES = [
    ("tierfs", "tierfs", "stall-prefetched", "tierfs after a prefetch", "**tierfs**"),
    ("local", "local", "stall-plain", "local disk", "local disk"),
    ("fuselocal", "fuselocal", "stall-plain",
     "local disk through a FUSE file system that only opens the file and splices its reads",
     "FUSE over local disk"),
]


def stall_round_rows(run):
    """The interleaved stall rounds (run.sh run_stall_rounds): (n, {series: [epochs per round]})
    from raw/tierfs/stall-prefetched-round-N.json, raw/local/stall-plain-round-N.json and
    raw/fuselocal/stall-plain-round-N.json (epochs: the loader's list, empty where the file is
    missing or not ok); only series with some round present."""
    n = round_count(run, STALL_ROUND_SERIES)
    eps = {}
    for key, t, f, _, _ in STALL_ROUND_SERIES:
        per = []
        for i in range(1, n + 1):
            j = load(os.path.join(run, "raw", t, "%s-round-%d.json" % (f, i))) or {}
            per.append(j.get("epochs", []) if j.get("status") == "ok" else [])
        if any(per):
            eps[key] = per
    return n, eps


def stall_rounds_markdown(run):
    n, eps = stall_round_rows(run)
    if not n or "tierfs" not in eps:
        return ""

    def val(e, k, key, scale=1.0):
        """Epoch k's figure key (scaled), None where missing."""
        return e[k].get(key) * scale if len(e) > k and e[k].get(key) is not None else None

    def cells(e, k):
        st = val(e, k, "stall_fraction", 100)
        return ["–" if st is None else "%.1f%%" % st, fmt_num(val(e, k, "wait_p99_ms")),
                fmt_num(val(e, k, "max_wait_ms"))]

    label = {k: lab for k, _, _, lab, _ in STALL_ROUND_SERIES}
    name = {k: nm for k, _, _, _, nm in STALL_ROUND_SERIES}
    keys = [k for k, _, _, _, _ in STALL_ROUND_SERIES if k in eps]
    lines = [
        "## GPU-stall view after a prefetch, interleaved rounds",
        "",
        "Group G's \"tierfs after prefetch\" session (a fresh mount, `small/` prefetched into L2, "
        "the page cache dropped, two epochs of the same loader with 20 ms of compute per batch), "
        "the same two epochs from local disk (page cache dropped) and, where measured, from local "
        "disk through a FUSE file system that only opens each file and splices its reads (nullfs "
        "--backing: the least a FUSE file system serving local files does), back to back in %d "
        "rounds whose order rotates. Per epoch: stall, the 99th percentile of the waits after the "
        "first batch and the longest one (ms). A longest wait is one sample of an epoch's tail and "
        "moves from run to run on this VM, local disk's too; within a round all see the same "
        "minutes." % n,
        "",
        "| round | source | epoch 1: stall | p99 wait | max wait | epoch 2: stall | p99 wait | max wait |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i in range(n):
        for k in keys:
            e = eps[k][i]
            lines.append("| %d | %s | %s | %s |" % (i + 1, label[k], " | ".join(cells(e, 0)),
                                                 " | ".join(cells(e, 1))))
    lines.append("")
    for a, b in [("tierfs", "local"), ("fuselocal", "local"), ("tierfs", "fuselocal")]:
        if a not in eps or b not in eps:
            continue
        for k in (0, 1):
            for key, what in (("max_wait_ms", "longest wait"), ("wait_p99_ms", "p99 wait")):
                rates = {s: [val(e, k, key) for e in eps[s]] for s in (a, b)}
                rs = per_round(rates, a, b)
                if rs:
                    lines.append(ratio_line("epoch %d: %s's %s / %s's" % (k + 1, name[a], what, name[b]),
                                            rs))
    lines.append("")
    return "\n".join(lines)


def latencies(path, secs, rc):
    """run.sh helper: curl's per-request times (one per line) -> JSON summary on stdout."""
    lat = sorted(float(x) for x in open(path) if x.strip())
    secs, rc = float(secs), int(rc)

    def pick(p):
        return lat[min(len(lat) - 1, int(round(p / 100.0 * (len(lat) - 1))))] * 1e3 if lat else None
    print(json.dumps({"status": "ok" if rc == 0 else ("timeout" if rc == 124 else "error"), "seconds": secs,
                      "requests": len(lat), "iops": len(lat) / secs if secs else None,
                      "lat_p50_ms": pick(50), "lat_p99_ms": pick(99),
                      "lat_max_ms": lat[-1] * 1e3 if lat else None}))


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--latencies":
        latencies(*sys.argv[2:])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--rounds":
        print(rounds_markdown(sys.argv[2]))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--loader-rounds":
        print(loader_rounds_markdown(sys.argv[2]))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--stall-rounds":
        print(stall_rounds_markdown(sys.argv[2]))
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = sys.argv[1]
    meta, tools, res, notes = collect(run)
    out = {"meta": meta, "notes": notes,
           "metrics": [{"key": k, "label": l.replace("↳ ", "").strip(), "unit": u, "higher_is_better": h,
                        "results": res.get(k, {})} for k, l, u, h, _ in METRICS if k in res]}
    out["stall"] = [{"row": label, "loader": j, "before": b} for label, j, b in stall_rows(run)]
    n, rates, cpu = round_rows(run)
    if n:
        out["seq_rounds"] = {"rounds": n, "mb_s": rates, "cpu_s_per_gib_origin_rest": cpu}
    sn, seps = stall_round_rows(run)
    if sn:
        out["stall_rounds"] = {"rounds": sn, "epochs": seps}
    with open(os.path.join(run, "results.json"), "w") as f:
        json.dump(out, f, indent=1)
    stall = stall_markdown(meta, run)
    if meta.get("stall_only"):
        md = "# tierfs benchmark, GPU-stall view — %s\n\n%s" % (meta.get("date", "?"), stall)
    else:
        rounds = rounds_markdown(run)
        lrounds = loader_rounds_markdown(run)
        srounds = stall_rounds_markdown(run)
        md = (markdown(meta, tools, res, notes) + ("\n" + stall if stall else "") +
              ("\n" + rounds if rounds else "") + ("\n" + lrounds if lrounds else "") +
              ("\n" + srounds if srounds else ""))
        chart(meta, tools, res, os.path.join(run, "results.png"))
    with open(os.path.join(run, "results.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
