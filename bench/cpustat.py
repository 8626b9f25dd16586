#!/usr/bin/env python3
"""Where the CPU goes while a benchmark workload runs: the whole machine's busy time and the CPU
time of named processes (the origin, the delay proxy, a daemon), from /proc, between two
snapshots. The benchmark's origin runs on the same cores as the client, so a client's throughput
against it is bounded by the CPU the origin leaves: these figures say how close to that bound a
workload ran (see bench/README.md, "CPU accounting").

  cpustat.py snap NAME=PID... > a.json     a snapshot (PIDs that are gone count as 0)
  cpustat.py delta a.json b.json           the figures between two snapshots, as JSON
  cpustat.py attach RESULT a.json b.json   the same figures, added to the JSON object in RESULT
                                           as "cpu"

As a module (bench/loader.py): snapshot({"origin": pid, ...}) and delta(a, b).
"""
import json
import os
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine_ticks(stat_text):
    """(busy, total) clock ticks of all CPUs from /proc/stat's first line: busy is everything but
    idle and iowait."""
    f = stat_text.split("\n", 1)[0].split()
    if not f or f[0] != "cpu":
        raise ValueError("not a /proc/stat text")
    v = [int(x) for x in f[1:]]
    total = sum(v[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return total - idle, total


def process_ticks(stat_text):
    """utime + stime of a process (all its threads) from /proc/PID/stat; the comm field may hold
    spaces and parentheses, so the fields are counted from the last ')'."""
    rest = stat_text[stat_text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15
    return int(rest[11]) + int(rest[12])


def _read(path):
    with open(path) as f:
        return f.read()


def snapshot(pids):
    """pids: name -> PID (or None). A process that is gone or unnamed counts 0 ticks."""
    busy, total = machine_ticks(_read("/proc/stat"))
    procs = {}
    for name, pid in pids.items():
        try:
            procs[name] = process_ticks(_read("/proc/%d/stat" % int(pid))) if pid else 0
        except (OSError, ValueError, IndexError):
            procs[name] = 0
    return {"t": time.monotonic(), "busy": busy, "total": total, "procs": procs,
            "cores": os.cpu_count()}


def delta(a, b):
    """Figures between snapshots a and b: seconds, machine_busy (0..1 of all cores), machine_cpu_s
    (busy CPU-seconds of the machine), and NAME_cpu_s for each named process."""
    total = b["total"] - a["total"]
    out = {"seconds": b["t"] - a["t"],
           "machine_busy": (b["busy"] - a["busy"]) / total if total > 0 else None,
           "machine_cpu_s": (b["busy"] - a["busy"]) / CLK_TCK,
           "cores": b.get("cores")}
    for name, ticks in b["procs"].items():
        # a process restarted between the snapshots would go backwards: count only what it did
        out[name + "_cpu_s"] = max(0, ticks - a["procs"].get(name, 0)) / CLK_TCK
    return out


def parse_pids(args):
    pids = {}
    for a in args:
        name, sep, pid = a.partition("=")
        if not sep or not name:
            raise SystemExit("cpustat: expected NAME=PID, got %r" % a)
        pids[name] = int(pid) if pid.strip() else None
    return pids


def _load(path):
    with open(path) as f:
        return json.load(f)


def main(argv):
    if len(argv) >= 1 and argv[0] == "snap":
        json.dump(snapshot(parse_pids(argv[1:])), sys.stdout)
        print()
        return 0
    if len(argv) == 3 and argv[0] == "delta":
        json.dump(delta(_load(argv[1]), _load(argv[2])), sys.stdout)
        print()
        return 0
    if len(argv) == 4 and argv[0] == "attach":
        result = _load(argv[1])
        result["cpu"] = delta(_load(argv[2]), _load(argv[3]))
        with open(argv[1], "w") as f:
            json.dump(result, f)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
