#!/usr/bin/python3
"""Turns one benchmark run directory (bench/out/<stamp>/) into results.json, results.md, results.png.

  report.py RUN_DIR

The one reporter of bench/run.sh, whatever workloads ran: reads RUN_DIR/meta.json and
RUN_DIR/raw/<tool>/*.json (fio JSON output, or the small status/result records run.sh and loader.py
write) and renders every workload's results: the tools' table (every figure with its ratio to the
best *other* peer, tierfs, s3fs, rclone, and to local disk, oriented so that > 1 means better) and
its chart, the GPU-stall view, the interleaved rounds (report_rounds.py) and the sections of the
workloads that run once (report_jobs.py: multijob, prefetch, au, policy, skipped).
"""
import json
import math
import os
import sys

from report_base import better_ratio, fig, fmt_num, fmt_ratio, load, ok, seq_cpu_per_gib
from report_rounds import (loader_rounds_markdown, round_rows, rounds_markdown, stall_round_rows,
                           stall_rounds_markdown)
import report_jobs

TOOLS = ["tierfs", "s3fs", "rclone", "local", "nullfs", "raw"]
PEERS = ["tierfs", "s3fs", "rclone"]
COLORS = {"tierfs": "#d62728", "s3fs": "#1f77b4", "rclone": "#2ca02c", "local": "#7f7f7f",
          "nullfs": "#9467bd", "raw": "#ff7f0e"}


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


def header(meta):
    """The title and machine line of a run whose workloads have no rows in the tools' table."""
    return ("# tierfs benchmark — %s\n\nMachine: %s, %s cores, %s GiB RAM, Linux %s. Origin: s3rver on "
            "loopback behind a %.0f ms-each-way delay proxy. Dataset: %s. tierfs %s. Workloads: %s.\n"
            % (meta.get("date", "?"), meta.get("cpu", "?"), meta.get("cores", "?"),
               round(meta.get("mem_mib", 0) / 1024), meta.get("kernel", "?"), meta.get("delay_ms", 0),
               meta.get("layout", "?"), meta.get("versions", {}).get("tierfs", "?"),
               ", ".join(meta.get("workloads", []))))


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--latencies":
        latencies(*sys.argv[2:])
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
    jobs = report_jobs.sections(run)
    for key, _, summary in jobs:
        out[key] = summary
    with open(os.path.join(run, "results.json"), "w") as f:
        json.dump(out, f, indent=1, default=str)
    # The tools' table when the run has rows for it (the daemon's peak RSS alone is not a row).
    parts = []
    if any(k != "rss.mib" for k in res):
        parts.append(markdown(meta, tools, res, notes))
        chart(meta, tools, res, os.path.join(run, "results.png"))
    else:
        parts.append(header(meta))
    parts += [stall_markdown(meta, run), rounds_markdown(run), loader_rounds_markdown(run),
              stall_rounds_markdown(run)]
    parts += [md for _, md, _ in jobs]
    md = "\n".join(p for p in parts if p)
    with open(os.path.join(run, "results.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
