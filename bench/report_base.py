"""Helpers shared by the benchmark reporter (bench/report.py and its sections): loading result
files, figures and their formatting."""
import json


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# A figure: {"value": float|None, "status": "ok"|"capped"|"timeout"|"error"|"n/a", "note": str}
def fig(value, status="ok", note=""):
    return {"value": value, "status": status, "note": note}


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


def seq_cpu_per_gib(cpu, nbytes):
    """(origin side, rest of the machine) CPU seconds per GiB read, from a bench/cpustat.py
    figure attached to a result of `nbytes` bytes; None without one."""
    if not cpu or not nbytes or cpu.get("machine_busy") is None:
        return None
    gib = nbytes / float(1 << 30)
    origin = cpu.get("origin_cpu_s", 0) + cpu.get("proxy_cpu_s", 0)
    return origin / gib, max(0.0, cpu["machine_cpu_s"] - origin) / gib
