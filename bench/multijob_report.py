#!/usr/bin/python3
"""The table of run.sh --workload multijob: per admission mode and job, medians over the runs.

  multijob_report.py DIR     (DIR = OUT/raw/multijob: MODE-REP-{hot,stream,proj,origin0,origin1}.json)
"""
import glob
import json
import os
import statistics
import sys

GROUP = {"hot": "hot", "stream": "big", "proj": "proj"}


def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec="%.2f"):
    return "-" if v is None else spec % v


def host_after(j):
    """The hot job's passes after its first that ended while the stream job ran: the share of
    their bytes not fetched from the origin, and how many passes
    (1 - origin bytes / bytes read; L1 is far smaller than the hot set, so these are L2 hits,
    served from L2 or through readahead copying L2 blocks to L1)."""
    later = [p for p in j.get("passes", [])[1:] if p.get("stream_running")]
    if not later or any(p.get("origin_bytes") is None for p in later):
        return None  # no pass after the first ended while the stream job ran
    b = sum(p["bytes"] for p in later)
    return (max(0.0, 1.0 - sum(p["origin_bytes"] for p in later) / b), len(later)) if b else None


def main():
    d = sys.argv[1]
    runs = {}
    for p in sorted(glob.glob(os.path.join(d, "*-origin1.json"))):
        tag = os.path.basename(p)[: -len("-origin1.json")]
        mode, rep = tag.rsplit("-", 1)
        runs.setdefault(mode, []).append(tag)
    print("| admission | job | runs | reads served by L1 / L2 / origin | hot: host hit rate after its 1st pass, while the stream runs | origin B / B read | MiB/s | p99 ms | max ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, tags in runs.items():
        for job in ("hot", "stream", "proj"):
            rows = []
            for tag in tags:
                j = load(os.path.join(d, "%s-%s.json" % (tag, job)))
                o0 = load(os.path.join(d, "%s-origin0.json" % tag)) or {}
                o1 = load(os.path.join(d, "%s-origin1.json" % tag)) or {}
                if not j or not j.get("bytes"):
                    continue
                g = GROUP[job]
                ob = o1.get(g, {}).get("bytes", 0) - o0.get(g, {}).get("bytes", 0)
                hr = j.get("hit_rate", {})
                after = j.get("after_first_pass", {}).get("hit_rate", {})
                rows.append({
                    "l1": hr.get("l1", 0.0), "l2": hr.get("l2", 0.0), "origin": hr.get("origin", 0.0),
                    "after_host": host_after(j) if job == "hot" else None,
                    "ratio": ob / j["bytes"], "mib_s": j.get("mib_s"), "p99": j.get("p99_ms"),
                    "max": j.get("max_ms"), "passes": len(j.get("passes", [])),
                })
            if not rows:
                continue
            ah = [r["after_host"] for r in rows if r["after_host"] is not None]
            for r in rows:
                r["after_host"] = None
            m = {k: med([r[k] for r in rows]) for k in rows[0]}
            after = "-"
            if ah:
                after = "%.1f%% (%d runs, %d passes)" % (
                    100 * med([h for h, _ in ah]), len(ah), sum(n for _, n in ah))
            print("| %s | %s | %d | %s / %s / %s | %s | %s | %s | %s | %s |" % (
                mode, job, len(rows), fmt(100 * m["l1"], "%.0f%%"), fmt(100 * m["l2"], "%.0f%%"),
                fmt(100 * m["origin"], "%.0f%%"), after, fmt(m["ratio"]), fmt(m["mib_s"], "%.0f"),
                fmt(m["p99"], "%.1f"), fmt(m["max"], "%.0f")))
    for mode, tags in runs.items():
        for tag in tags:
            try:
                stats = open(os.path.join(d, "%s-stats.txt" % tag)).read().split()
            except OSError:
                continue
            keep = [kv for kv in stats if kv.startswith(("admit.", "l2.hits", "l2.evictions", "origin.bytes"))]
            print("\n%s: %s" % (tag, " ".join(keep)), end="")
    print()


if __name__ == "__main__":
    main()
