"""The sections of bench/report.py for the workloads that run once (run.sh --workload l2,
multijob, prefetch, au, policy) and for workloads the tierfs binary could not run.

Each section is a function RUN_DIR -> (markdown, JSON-able summary), ("", None) when the run has
none of its results.
"""
import glob
import json
import os
import statistics

from report_base import load

NAN = float("nan")


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _fmt(v, spec="%.2f"):
    return "-" if v is None else spec % v


# --- multijob: per admission mode and job, medians over the runs ---------------------------------
MULTIJOB_GROUP = {"hot": "hot", "stream": "big", "proj": "proj"}


def _host_after(j):
    """The hot job's passes after its first that ended while the stream job ran: the share of
    their bytes not fetched from the origin, and how many passes
    (1 - origin bytes / bytes read; L1 is far smaller than the hot set, so these are L2 hits,
    served from L2 or through readahead copying L2 blocks to L1)."""
    later = [p for p in j.get("passes", [])[1:] if p.get("stream_running")]
    if not later or any(p.get("origin_bytes") is None for p in later):
        return None  # no pass after the first ended while the stream job ran
    b = sum(p["bytes"] for p in later)
    return (max(0.0, 1.0 - sum(p["origin_bytes"] for p in later) / b), len(later)) if b else None


def multijob_section(run):
    d = os.path.join(run, "raw", "multijob")
    runs = {}
    for p in sorted(glob.glob(os.path.join(d, "*-origin1.json"))):
        tag = os.path.basename(p)[: -len("-origin1.json")]
        mode, _ = tag.rsplit("-", 1)
        runs.setdefault(mode, []).append(tag)
    if not runs:
        return "", None
    lines = ["## Multi-job hit rates (multijob)", "",
             "| admission | job | runs | reads served by L1 / L2 / origin | hot: host hit rate after its 1st "
             "pass, while the stream runs | origin B / B read | MiB/s | p99 ms | max ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    summary = []
    for mode, tags in runs.items():
        for job in ("hot", "stream", "proj"):
            rows = []
            for tag in tags:
                j = load(os.path.join(d, "%s-%s.json" % (tag, job)))
                o0 = load(os.path.join(d, "%s-origin0.json" % tag)) or {}
                o1 = load(os.path.join(d, "%s-origin1.json" % tag)) or {}
                if not j or not j.get("bytes"):
                    continue
                g = MULTIJOB_GROUP[job]
                ob = o1.get(g, {}).get("bytes", 0) - o0.get(g, {}).get("bytes", 0)
                hr = j.get("hit_rate", {})
                rows.append({
                    "l1": hr.get("l1", 0.0), "l2": hr.get("l2", 0.0), "origin": hr.get("origin", 0.0),
                    "after_host": _host_after(j) if job == "hot" else None,
                    "ratio": ob / j["bytes"], "mib_s": j.get("mib_s"), "p99": j.get("p99_ms"),
                    "max": j.get("max_ms"), "passes": len(j.get("passes", [])),
                })
            if not rows:
                continue
            ah = [r["after_host"] for r in rows if r["after_host"] is not None]
            for r in rows:
                r["after_host"] = None
            m = {k: _med([r[k] for r in rows]) for k in rows[0]}
            after = "-"
            if ah:
                after = "%.1f%% (%d runs, %d passes)" % (
                    100 * _med([h for h, _ in ah]), len(ah), sum(n for _, n in ah))
            summary.append(dict(m, mode=mode, job=job, runs=len(rows)))
            lines.append("| %s | %s | %d | %s / %s / %s | %s | %s | %s | %s | %s |" % (
                mode, job, len(rows), _fmt(100 * m["l1"], "%.0f%%"), _fmt(100 * m["l2"], "%.0f%%"),
                _fmt(100 * m["origin"], "%.0f%%"), after, _fmt(m["ratio"]), _fmt(m["mib_s"], "%.0f"),
                _fmt(m["p99"], "%.1f"), _fmt(m["max"], "%.0f")))
    lines.append("")
    for mode, tags in runs.items():
        for tag in tags:
            try:
                stats = open(os.path.join(d, "%s-stats.txt" % tag)).read().split()
            except OSError:
                continue
            keep = [kv for kv in stats if kv.startswith(("admit.", "l2.hits", "l2.evictions", "origin.bytes"))]
            lines.append("- %s: %s" % (tag, " ".join(keep)))
    lines.append("")
    return "\n".join(lines), summary


# --- prefetch: deep prefetch against copying, and a reader next to a job -------------------------
def prefetch_section(run):
    try:
        r = {d["name"]: d for d in map(json.loads, open(os.path.join(run, "prefetch.jsonl")))}
    except (OSError, ValueError):
        return "", None

    def g(n, k):
        return r.get(n, {}).get(k, NAN)

    def ratio(a, b):
        return a / b if b and b == b and a == a else NAN

    lines = ["## Deep prefetch (prefetch)", "", "| measure | tierfs | baseline | ratio | target |",
             "|---|---|---|---|---|"]
    a, b = g("tierfs-prefetch-small", "seconds"), g("rclone-copy-small", "seconds")
    lines.append("| 4,000 x 128 KiB: prefetch --tier l2 --wait vs rclone copy --transfers 32, s "
                 "| %.2f | %.2f | %.2fx | <= 1.1x |" % (a, b, ratio(a, b)))
    a, b = g("tierfs-prefetch-big", "mbps"), g("raw-ranged8", "mbps")
    lines.append("| 2 x 256 MiB: prefetch --tier l2 --wait vs 8-way ranged GET, MB/s "
                 "| %.1f | %.1f | %.2fx time | <= 1.1x |" % (a, b, ratio(b, a)))
    for k in ("uncached", "cached"):
        al, jo = r.get("reader-%s-alone" % k, {}), r.get("reader-%s-job" % k, {})

        def f(d):
            return "%.1f / %.1f / %.1f" % (d.get("p50_ms", NAN), d.get("p99_ms", NAN), d.get("max_ms", NAN))
        lines.append("| reader, %s 128 KiB files, p50 / p99 / max ms: job running vs alone "
                     "| %s | %s | p99 %.2fx | p99 <= 2x |" % (
                         k, f(jo), f(al), ratio(jo.get("p99_ms", NAN), al.get("p99_ms", NAN))))
    lines.append("")
    return "\n".join(lines), list(r.values())


# --- au: accelerator utilization (bench/au.py renders it) ----------------------------------------
def au_section(run):
    d = os.path.join(run, "au")
    if not glob.glob(os.path.join(d, "*.json")):
        return "", None
    import au  # torch-free at import time; only its report functions are used here
    text, summary = au.report_text([d])
    if text is None:
        return "", None
    return "## Accelerator utilization (au)\n\n" + text + "\n", summary


# --- policy: the cache-policy matrix (run.sh --workload policy, lib/policy.sh) --------------------
# Per case (a directory of raw/policy/), the figures and their targets: (label, phase, top
# directories counted, measure, comparison, target). Measures: "gets" origin GETs of the phase,
# "ratio" origin bytes / bytes read, "rss" the daemon's peak RSS in MiB, "iops" / "longest_read_ms"
# the phase's (policy.py ranges), "iops/CASE" the phase's read IOPS over the same phase's in CASE
# (of the same run).
POLICY_CHECKS = [
    ("once-", "second read: origin GETs", "second", ("once",), "gets", "<=", 0),
    ("scan-", "hot set re-read after the scan: origin GETs", "reread", ("hot",), "gets", "<=", 2),
    ("scan-", "scan: origin bytes / bytes read", "scan", ("scan",), "ratio", "<=", 1.05),
    ("proj-one-25", "origin bytes / bytes read", "read", ("proj",), "ratio", "<=", 1.3),
    ("proj-many-25", "origin bytes / bytes read", "read", ("projmany",), "ratio", "<=", 1.3),
    ("proj-one-90", "origin bytes / bytes read", "read", ("proj",), "ratio", "<=", 1.15),
    ("proj-one-90", "read IOPS / cold random reads' (proj-cold-90)", "read", ("proj",), "iops/proj-cold-90",
     ">=", 1.0),
    ("proj-one-90", "longest single read, ms", "read", ("proj",), "longest_read_ms", None, None),
    ("proj-cold-90", "read IOPS (never hydrated: each read a round trip)", "read", ("proj",), "iops", None,
     None),
    ("proj-big-", "origin bytes / bytes read", "read", ("scan",), "ratio", "<=", 1.3),
    ("memory", "daemon peak RSS, MiB", "readers", ("mem", "memrand", "mempf"), "rss", "<=", 560),
]


def _origin(d, phase, tops):
    """(GETs, bytes asked for) of the phase's top directories, from the proxy's counts."""
    c0 = load(os.path.join(d, phase + ".origin0.json"))
    c1 = load(os.path.join(d, phase + ".origin1.json"))
    if c0 is None or c1 is None:
        return None, None
    gets = sum(c1.get(t, {}).get(k, 0) - c0.get(t, {}).get(k, 0) for t in tops for k in ("requests", "whole"))
    nbytes = sum(c1.get(t, {}).get("bytes", 0) - c0.get(t, {}).get("bytes", 0) for t in tops)
    return gets, nbytes


def _policy_case(d, case):
    rows = []
    for prefix, label, phase, tops, measure, op, target in POLICY_CHECKS:
        if not case.startswith(prefix):
            continue
        r = load(os.path.join(d, phase + ".json"))
        if r is None:
            continue
        gets, ob = _origin(d, phase, tops)
        value = None
        if r.get("status") in ("ok", "wrong bytes"):
            if measure == "gets":
                value = gets
            elif measure == "ratio" and ob is not None and r.get("bytes"):
                value = ob / r["bytes"]
            elif measure == "rss":
                value = r.get("peak_rss_mib")
                if r.get("vmhwm_mib") is not None:
                    value = max(value or 0, r["vmhwm_mib"])
            elif measure in ("iops", "longest_read_ms"):
                value = r.get(measure)
            elif measure.startswith("iops/"):
                other = load(os.path.join(os.path.dirname(d), measure[5:], phase + ".json"))
                if other and other.get("iops") and r.get("iops") is not None:
                    value = r["iops"] / other["iops"]
        if value is None or target is None:
            verdict = "–"
        else:
            verdict = "pass" if (value <= target if op == "<=" else value >= target) else "FAIL"
        target_text = "" if target is None else "%s %s" % (op, target)
        if r.get("exact") is False:
            verdict += ", wrong bytes"
        rows.append({"case": case, "check": label, "status": r.get("status", "error"),
                     "message": r.get("message", ""), "value": value, "target": target_text,
                     "verdict": verdict, "origin_gets": gets, "origin_bytes": ob,
                     "bytes_read": r.get("bytes"), "iops": r.get("iops"), "exact": r.get("exact")})
    return rows


def policy_section(run):
    root = os.path.join(run, "raw", "policy")
    rows = []
    for d in sorted(glob.glob(os.path.join(root, "*"))):
        if os.path.isdir(d):
            rows += _policy_case(d, os.path.basename(d))
            m = load(os.path.join(d, "mount.json"))
            if m and not any(r["case"] == os.path.basename(d) for r in rows):
                rows.append({"case": os.path.basename(d), "check": "mount", "status": m.get("status"),
                             "message": m.get("message", ""), "value": None, "target": "", "verdict": "–",
                             "origin_gets": None, "origin_bytes": None, "bytes_read": None, "iops": None,
                             "exact": None})
    if not rows:
        return "", None
    lines = ["## Cache policy (policy)", "",
             "Origin GETs and bytes as the delay proxy counted them for the directories a phase reads "
             "(bytes asked for by ranged GETs); *exact*: every byte read equals the local copy's. A "
             "target is the product's aim for the shape, reported, never failing the run.", "",
             "| case | figure | value | target | verdict | origin GETs | origin MiB | MiB read | read IOPS "
             "| exact |", "|---|---|---|---|---|---|---|---|---|---|"]

    def mib(v):
        return "–" if v is None else "%.1f" % (v / 1048576.0)
    for r in rows:
        if r["status"] not in ("ok", "wrong bytes"):
            val = "%s (%s)" % (r["status"], r["message"]) if r["message"] else r["status"]
        elif r["value"] is None:
            val = "–"
        else:
            v = r["value"]
            val = "%d" % v if isinstance(v, int) else ("%.0f" % v if v >= 100 else "%.3g" % v)
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["case"], r["check"], val, r["target"], r["verdict"],
            "–" if r["origin_gets"] is None else r["origin_gets"], mib(r["origin_bytes"]),
            mib(r["bytes_read"]), "–" if r["iops"] is None else "%.0f" % r["iops"],
            {True: "yes", False: "**no**", None: "–"}[r["exact"]]))
    lines.append("")
    return "\n".join(lines), rows


# --- l2: warm reads from L2 against a plain file, in pairs (run.sh --workload l2) ----------------
def _bw(p):
    j = load(p)
    try:
        return j["jobs"][0]["read"]["bw_bytes"] / 2**20
    except (TypeError, KeyError, IndexError):
        return None


def _sps(p):
    j = load(p) or {}
    return [e.get("samples_per_s") for e in j.get("epochs", [])]


def l2_section(run):
    """Per pair: the plain file's and tierfs's warm MiB/s (and the plain file through nullfs), and
    the DataLoader after a prefetch against local disk; the medians of the pairs' ratios."""
    r = os.path.join(run, "raw")
    reps = len(glob.glob(os.path.join(r, "l2", "plain-seq-*.json")))
    if not reps:
        return "", None
    pairs = [(_bw("%s/l2/plain-seq-%d.json" % (r, i)), _bw("%s/tierfs/l2-warm-seq-%d.json" % (r, i)))
             for i in range(1, reps + 1)]
    ratios = [t / p for p, t in pairs if p and t]
    nan = float("nan")

    def med(xs):
        return _med([x for x in xs if x]) or nan
    lines = ["l2: plain file / tierfs warm from L2, MiB/s per pair: " +
             ", ".join("%.0f/%.0f" % (p or 0, t or 0) for p, t in pairs),
             "l2: median plain %.0f MiB/s, tierfs %.0f MiB/s, median ratio %.2f (range %.2f-%.2f)" % (
                 med([p for p, _ in pairs]), med([t for _, t in pairs]), med(ratios), min(ratios, default=0),
                 max(ratios, default=0))]
    fuse = [_bw("%s/l2/fuse-plain-seq-%d.json" % (r, i)) for i in range(1, reps + 1)]
    fuse_ratios = {}
    if any(fuse):
        lines.append("l2: the plain file through FUSE (nullfs --backing), MiB/s per pair: " +
                     ", ".join("%.0f" % (x or 0) for x in fuse))
        for what, rs in (("FUSE / plain file", [f / p for (p, _), f in zip(pairs, fuse) if p and f]),
                         ("tierfs / FUSE", [t / f for (_, t), f in zip(pairs, fuse) if t and f])):
            fuse_ratios[what] = rs
            lines.append("l2: %s, per pair: %s median %.2f" % (what, ", ".join("%.2f" % x for x in rs), med(rs)))
    loader = {}
    for e in (0, 1):
        rs = []
        for i in range(1, reps + 1):
            loc, tf = _sps("%s/local/loader-%d.json" % (r, i)), _sps("%s/tierfs/loader-prefetched-%d.json" % (r, i))
            if len(loc) > e and len(tf) > e and loc[e] and tf[e]:
                rs.append(tf[e] / loc[e])
        loader["epoch%d" % (e + 1)] = rs
        lines.append("l2: loader epoch %d after a prefetch / local disk, per pair: %s median %.2f" % (
            e + 1, ", ".join("%.2f" % x for x in rs), med(rs)))
    summary = {"pairs_mib_s": pairs, "ratios": ratios, "median_ratio": med(ratios), "fuse_plain_mib_s": fuse,
               "fuse_ratios": fuse_ratios, "loader_ratios": loader}
    return "## Warm reads from L2 (l2)\n\n" + "\n".join("- " + x for x in lines) + "\n", summary


# --- workloads the tierfs binary could not run ---------------------------------------------------
def skipped_section(run):
    rows = []
    for p in sorted(glob.glob(os.path.join(run, "raw", "skipped", "*.json"))):
        j = load(p) or {}
        rows.append({"workload": os.path.basename(p)[:-5], "status": j.get("status", "skipped"),
                     "reason": j.get("message", "")})
    if not rows:
        return "", None
    lines = ["## Skipped workloads", ""]
    lines += ["- **%s**: %s (%s)" % (r["workload"], r["status"], r["reason"]) for r in rows]
    lines.append("")
    return "\n".join(lines), rows


SECTIONS = [("l2", l2_section), ("multijob", multijob_section), ("prefetch", prefetch_section), ("au", au_section),
            ("policy", policy_section), ("skipped", skipped_section)]


def sections(run):
    """[(key, markdown, summary)] of every section with results in RUN_DIR, in report order."""
    out = []
    for key, fn in SECTIONS:
        md, summary = fn(run)
        if md:
            out.append((key, md, summary))
    return out


if __name__ == "__main__":
    # report_jobs.py SECTION RUN_DIR: one section's markdown (run.sh prints l2's to run.log)
    import sys
    md, _ = dict(SECTIONS)[sys.argv[1]](sys.argv[2])
    print(md)
