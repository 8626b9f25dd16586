#!/usr/bin/env python3
"""A syntax check of a Dockerfile where no Docker engine runs (`docker build --check` needs one).

  check_dockerfile.py [--context DIR] DOCKERFILE

Checks: every instruction is a Dockerfile instruction; the first (after parser directives and
ARGs) is FROM, written `FROM [--platform=P] IMAGE [AS NAME]`; stage names are unique and a
`COPY --from=` names an earlier stage; the JSON forms of RUN/CMD/ENTRYPOINT/SHELL are arrays of
strings; the shell form of every RUN parses with `sh -n` (dash, the shell of debian images); the
sources of COPY/ADD exist in the build context and are not excluded by its .dockerignore (plain
names and `*` patterns); no amd64/x86_64 literal (the architecture comes from the build
platform). Prints each problem as FILE:LINE: MESSAGE and exits 1 if there is one.
"""
import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys

INSTRUCTIONS = {"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK",
                "LABEL", "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME",
                "WORKDIR"}


def instructions(text):
    """(line number, keyword, arguments) per instruction: continuations joined, comments and
    parser directives dropped."""
    out = []
    start, parts = None, []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not parts and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if parts and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if start is None:
            start = n
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        joined = " ".join(p.strip() for p in parts)
        keyword, _, args = joined.partition(" ")
        out.append((start, keyword, args.strip()))
        start, parts = None, []
    if parts:
        out.append((start, "<eof>", "a continuation line ends the file"))
    return out


def ignored(path, patterns):
    excluded = False
    for pat in patterns:
        negate = pat.startswith("!")
        pat = pat.lstrip("!").strip("/")
        if pat.startswith("**/"):
            match = any(fnmatch.fnmatch(part, pat[3:]) for part in path.split("/"))
        else:
            match = fnmatch.fnmatch(path, pat) or path.startswith(pat + "/")
        if match:
            excluded = not negate
    return excluded


def check(dockerfile, context):
    text = open(dockerfile).read()
    problems = []

    def bad(line, msg):
        problems.append(f"{dockerfile}:{line}: {msg}")

    for n, raw in enumerate(text.splitlines(), 1):
        literal = re.search(r"(?<![A-Za-z0-9])(amd64|x86_64)(?![A-Za-z0-9])", raw)
        if literal and not raw.lstrip().startswith("#"):
            bad(n, "an architecture literal: take it from the build platform "
                   "(dpkg --print-architecture or TARGETARCH)")
    dockerignore = os.path.join(context, ".dockerignore")
    patterns = []
    if os.path.exists(dockerignore):
        patterns = [p.strip() for p in open(dockerignore)
                    if p.strip() and not p.lstrip().startswith("#")]
    stages = []
    seen_from = False
    for line, keyword, args in instructions(text):
        if keyword == "<eof>":
            bad(line, args)
            continue
        upper = keyword.upper()
        if upper not in INSTRUCTIONS:
            bad(line, f"unknown instruction {keyword}")
            continue
        if not seen_from and upper not in ("FROM", "ARG"):
            bad(line, f"{upper} before the first FROM")
        if upper == "FROM":
            seen_from = True
            m = re.fullmatch(r"(--platform=\S+\s+)?(\S+)(\s+[Aa][Ss]\s+([a-z][a-z0-9_.-]*))?", args)
            if not m:
                bad(line, f"FROM [--platform=P] IMAGE [AS NAME], not: FROM {args}")
                continue
            name = m.group(4)
            if name and name in stages:
                bad(line, f"stage {name} defined twice")
            stages.append(name or str(len(stages)))
        if upper in ("RUN", "CMD", "ENTRYPOINT", "SHELL") and args.startswith("["):
            try:
                value = json.loads(args)
                if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                    raise ValueError("not an array of strings")
            except ValueError as e:
                bad(line, f"{upper}: the JSON form is not an array of strings ({e})")
        elif upper == "RUN":
            body = re.sub(r"^(--\S+\s+)+", "", args)
            r = subprocess.run(["sh", "-n", "-c", body], capture_output=True, text=True)
            if r.returncode != 0:
                bad(line, f"RUN: sh -n: {r.stderr.strip()}")
        if upper in ("COPY", "ADD"):
            words = args.split()
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            if len(paths) < 2:
                bad(line, f"{upper} needs a source and a destination")
                continue
            src_stage = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
            if src_stage:
                if src_stage[0] not in stages[:-1] and not re.search(r"[:/]", src_stage[0]):
                    bad(line, f"{upper} --from={src_stage[0]}: no earlier stage of that name")
                continue
            for src in paths[:-1]:
                rel = os.path.normpath(src).lstrip("/")
                if rel == ".":
                    continue
                if not os.path.exists(os.path.join(context, rel)):
                    bad(line, f"{upper} {src}: not in the build context {context}")
                elif ignored(rel, patterns):
                    bad(line, f"{upper} {src}: excluded by {dockerignore}")
    if not stages:
        bad(1, "no FROM")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", default=".", help="the build context (default: .)")
    ap.add_argument("dockerfile")
    a = ap.parse_args()
    problems = check(a.dockerfile, a.context)
    for p in problems:
        print(p)
    if not problems:
        print(f"ok {a.dockerfile}: syntax, stages, COPY sources in {a.context}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
