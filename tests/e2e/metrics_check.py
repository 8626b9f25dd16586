#!/usr/bin/python3
"""A strict parser of the Prometheus text format (version 0.0.4) and checks on scrapes.

    metrics_check.py selftest                        check that the parser refuses malformed input
    metrics_check.py parse FILE                      parse (exit 1 on any format error), print a summary
    metrics_check.py value FILE SERIES               print the value of one series
    metrics_check.py delta BEFORE AFTER SERIES OP N  check AFTER[SERIES] - BEFORE[SERIES] OP N
                                                     (OP: == >= > <=); a series missing from
                                                     BEFORE counts as 0, from AFTER is an error
SERIES is written as in the exposition: name{label="value",...} with labels in the order served.

Checked beyond the grammar: HELP/TYPE at most once per family and before its samples, the samples
of a family contiguous, no duplicate series, counters named *_total and never negative, every
histogram series with cumulative non-decreasing buckets ending in le="+Inf", equal to its _count,
and a _sum.
"""
import math
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class FormatError(Exception):
    pass


def parse_value(s, where):
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s):
        raise FormatError(f"{where}: bad value {s!r}")
    return float(s)


def parse_labels(s, where):
    """s is the text between { and }; returns a list of (name, value)."""
    out = []
    i = 0
    while i < len(s):
        m = re.match(LABEL, s[i:])
        if not m:
            raise FormatError(f"{where}: bad label name at {s[i:]!r}")
        name = m.group(0)
        i += len(name)
        if s[i:i + 2] != '="':
            raise FormatError(f"{where}: expected =\" after label {name}")
        i += 2
        val = []
        while True:
            if i >= len(s):
                raise FormatError(f"{where}: unterminated value of label {name}")
            c = s[i]
            if c == "\\":
                nxt = s[i + 1:i + 2]
                if nxt not in ("\\", '"', "n"):
                    raise FormatError(f"{where}: bad escape \\{nxt} in label {name}")
                val.append("\n" if nxt == "n" else nxt)
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise FormatError(f"{where}: raw newline in label {name}")
            else:
                val.append(c)
                i += 1
        if any(n == name for n, _ in out):
            raise FormatError(f"{where}: label {name} twice")
        out.append((name, "".join(val)))
        if i < len(s):
            if s[i] != ",":
                raise FormatError(f"{where}: expected , after label {name}")
            i += 1
    return out


def family_of(name, types):
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)] if name.endswith(suffix) else None
        if base and types.get(base) in ("histogram", "summary"):
            return base
    return name


def series_key(name, labels):
    if not labels:
        return name
    def esc(v):  # back to the exposition's escaping, so SERIES is written as served
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return name + "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels) + "}"


def parse(text):
    """Returns {series: value}; raises FormatError."""
    if text and not text.endswith("\n"):
        raise FormatError("the exposition does not end with a newline")
    types, helps, done = {}, set(), set()
    samples = {}
    current = None
    hist = {}  # (family, labels without le) -> {"buckets": [(le, v)], "sum": v, "count": v}
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n}"
        if line == "":
            raise FormatError(f"{where}: empty line")
        if line.startswith("#"):
            m = re.fullmatch(r"# (HELP|TYPE) (" + NAME + r") ?(.*)", line)
            if not m:
                continue  # a plain comment
            kind, name, rest = m.groups()
            if name in done or (current and current != name and name in types):
                raise FormatError(f"{where}: {kind} of {name} after its samples")
            if kind == "TYPE":
                if name in types:
                    raise FormatError(f"{where}: second TYPE for {name}")
                if rest not in TYPES:
                    raise FormatError(f"{where}: unknown type {rest!r}")
                types[name] = rest
            else:
                if name in helps:
                    raise FormatError(f"{where}: second HELP for {name}")
                helps.add(name)
            continue
        m = re.fullmatch(r"(" + NAME + r")(?:\{(.*)\})? (\S+)(?: (-?\d+))?", line)
        if not m:
            raise FormatError(f"{where}: not a sample: {line!r}")
        name, ltext, vtext, _ts = m.groups()
        labels = parse_labels(ltext or "", where)
        value = parse_value(vtext, where)
        fam = family_of(name, types)
        if fam != current:
            if fam in done:
                raise FormatError(f"{where}: samples of {fam} are not contiguous")
            if current:
                done.add(current)
            current = fam
        key = series_key(name, labels)
        if key in samples:
            raise FormatError(f"{where}: duplicate series {key}")
        samples[key] = value
        t = types.get(fam, "untyped")
        if t == "counter":
            if not name.endswith("_total"):
                raise FormatError(f"{where}: counter {name} does not end in _total")
            if not value >= 0:
                raise FormatError(f"{where}: counter {key} is {value}")
        if t == "histogram":
            rest = tuple((k, v) for k, v in labels if k != "le")
            h = hist.setdefault((fam, rest), {"buckets": [], "sum": None, "count": None})
            if name == fam + "_bucket":
                le = dict(labels).get("le")
                if le is None:
                    raise FormatError(f"{where}: bucket without le")
                h["buckets"].append((parse_value(le, where), value))
            elif name == fam + "_sum":
                h["sum"] = value
            elif name == fam + "_count":
                h["count"] = value
            else:
                raise FormatError(f"{where}: {name} in histogram {fam}")
    for (fam, rest), h in hist.items():
        what = series_key(fam, list(rest))
        b = h["buckets"]
        if not b or b[-1][0] != math.inf:
            raise FormatError(f"histogram {what}: no le=\"+Inf\" bucket last")
        for (le1, v1), (le2, v2) in zip(b, b[1:]):
            if not le1 < le2:
                raise FormatError(f"histogram {what}: le {le2} after {le1}")
            if v2 < v1:
                raise FormatError(f"histogram {what}: bucket le={le2} ({v2}) below le={le1} ({v1})")
        if h["count"] is None or h["sum"] is None:
            raise FormatError(f"histogram {what}: _sum or _count missing")
        if h["count"] != b[-1][1]:
            raise FormatError(f"histogram {what}: _count {h['count']} != +Inf bucket {b[-1][1]}")
    return samples


def load(path):
    with open(path, encoding="utf-8") as f:
        return parse(f.read())


SELFTEST_BAD = {
    "no newline at end": "a_total 1",
    "bad escape": '# TYPE a_total counter\na_total{x="\\q"} 1\n',
    "unterminated label": '# TYPE a_total counter\na_total{x="y} 1\n',
    "duplicate series": "# TYPE g gauge\ng 1\ng 2\n",
    "second TYPE": "# TYPE g gauge\n# TYPE g gauge\ng 1\n",
    "family not contiguous": "# TYPE g gauge\ng{a=\"1\"} 1\n# TYPE h gauge\nh 1\ng{a=\"2\"} 1\n",
    "counter without _total": "# TYPE c counter\nc 1\n",
    "negative counter": "# TYPE c_total counter\nc_total -1\n",
    "bad value": "# TYPE g gauge\ng one\n",
    "histogram without +Inf": "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
    "histogram not cumulative": ("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                                 "h_sum 1\nh_count 1\n"),
    "histogram count != +Inf": ("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
                                "h_sum 1\nh_count 2\n"),
    "histogram without _sum": "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
}
SELFTEST_GOOD = ('# HELP h Lat.\n# TYPE h histogram\nh_bucket{t="a\\"b\\\\c\\n",le="0.5"} 1\n'
                 'h_bucket{t="a\\"b\\\\c\\n",le="+Inf"} 2\nh_sum{t="a\\"b\\\\c\\n"} 3.5\n'
                 'h_count{t="a\\"b\\\\c\\n"} 2\n# TYPE c_total counter\nc_total 1e+06\n')


def selftest():
    """The parser refuses each malformed exposition and accepts a good one."""
    bad = 0
    for what, text in SELFTEST_BAD.items():
        try:
            parse(text)
            print(f"selftest: accepted {what}", file=sys.stderr)
            bad += 1
        except FormatError:
            pass
    s = parse(SELFTEST_GOOD)
    if s.get(r'h_count{t="a\"b\\c\n"}') != 2 or s.get("c_total") != 1e6:
        print(f"selftest: good exposition parsed as {s}", file=sys.stderr)
        bad += 1
    print(f"metrics_check selftest: {len(SELFTEST_BAD)} malformed refused, 1 good parsed"
          if not bad else f"metrics_check selftest: {bad} failures")
    return 1 if bad else 0


def main(argv):
    try:
        if len(argv) == 2 and argv[1] == "selftest":
            return selftest()
        if len(argv) == 3 and argv[1] == "parse":
            s = load(argv[2])
            fams = {re.sub(r"\{.*", "", k) for k in s}
            print(f"{argv[2]}: {len(s)} samples, {len(fams)} metric names: ok")
            return 0
        if len(argv) == 4 and argv[1] == "value":
            s = load(argv[2])
            if argv[3] not in s:
                print(f"no series {argv[3]}", file=sys.stderr)
                return 1
            print(f"{s[argv[3]]:.17g}")
            return 0
        if len(argv) == 7 and argv[1] == "delta":
            before, after = load(argv[2]), load(argv[3])
            series, op, n = argv[4], argv[5], float(argv[6])
            if series not in after:
                print(f"FAIL: no series {series} in {argv[3]}", file=sys.stderr)
                return 1
            d = after[series] - before.get(series, 0.0)
            ok = {"==": d == n, ">=": d >= n, ">": d > n, "<=": d <= n}.get(op)
            if ok is None:
                print(f"unknown op {op}", file=sys.stderr)
                return 2
            print(f"{'ok' if ok else 'FAIL'}: {series}: {before.get(series, 0.0):g} -> "
                  f"{after[series]:g} (delta {d:g} {op} {n:g})")
            return 0 if ok else 1
    except FormatError as e:
        print(f"FAIL: format error: {e}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
