"""The interleaved rounds of bench/report.py: cold sequential (seqrounds), cold DataLoader
(loaderrounds) and the GPU-stall view after a prefetch (stallrounds), each compared within its
rounds."""
import os
import statistics

from report_base import fmt_num, fmt_ratio, load, seq_cpu_per_gib


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
