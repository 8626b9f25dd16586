#!/usr/bin/python3
"""The table of run.sh --workload prefetch from its prefetch.jsonl (one JSON object a line).

  pf_report.py OUT/prefetch.jsonl
"""
import json
import sys


def main():
    r = {d["name"]: d for d in map(json.loads, open(sys.argv[1]))}
    nan = float("nan")

    def g(n, k):
        return r.get(n, {}).get(k, nan)

    def ratio(a, b):
        return a / b if b and b == b and a == a else nan

    print("| measure | tierfs | baseline | ratio | target |")
    print("|---|---|---|---|---|")
    a, b = g("tierfs-prefetch-small", "seconds"), g("rclone-copy-small", "seconds")
    print("| 4,000 x 128 KiB: prefetch --tier l2 --wait vs rclone copy --transfers 32, s "
          "| %.2f | %.2f | %.2fx | <= 1.1x |" % (a, b, ratio(a, b)))
    a, b = g("tierfs-prefetch-big", "mbps"), g("raw-ranged8", "mbps")
    print("| 2 x 256 MiB: prefetch --tier l2 --wait vs 8-way ranged GET, MB/s "
          "| %.1f | %.1f | %.2fx time | <= 1.1x |" % (a, b, ratio(b, a)))
    for k in ("uncached", "cached"):
        al, jo = r.get("reader-%s-alone" % k, {}), r.get("reader-%s-job" % k, {})
        f = lambda d: "%.1f / %.1f / %.1f" % (d.get("p50_ms", nan), d.get("p99_ms", nan),
                                             d.get("max_ms", nan))
        print("| reader, %s 128 KiB files, p50 / p99 / max ms: job running vs alone "
              "| %s | %s | p99 %.2fx | p99 <= 2x |" % (
                  k, f(jo), f(al), ratio(jo.get("p99_ms", nan), al.get("p99_ms", nan))))


if __name__ == "__main__":
    main()
