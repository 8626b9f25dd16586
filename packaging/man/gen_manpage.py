#!/usr/bin/python3
"""Writes the tierfs(1) man page: the hand-written sections of tierfs.1.in with the command
reference generated from the binary's own --help, so the page lists exactly the subcommands and
flags the binary has.

  gen_manpage.py --binary build/daemon/tierfs --template packaging/man/tierfs.1.in -o tierfs.1

The template's placeholders: @VERSION@ (from `tierfs --version`), @SYNOPSIS@ (one line per
subcommand, from its Usage line) and @COMMANDS@ (one .SS per subcommand: its description, usage,
positionals and options, and any other text of its help). Subcommands are found by walking the
"Subcommands:" sections of the help, recursively (`tierfs l3 gc`).

The help is CLI11's layout: a description line, "Usage: ...", then sections headed by a line
ending in ':' whose items are indented ("  NAME   description"). Items under a heading that
names subcommands are subcommands; indented lines starting with '-' are options; other indented
lines under a "Positionals:" heading are positionals; any other text is kept as it is.
"""
import argparse
import re
import subprocess
import sys


def run_help(binary, words):
    out = subprocess.run([binary] + words + ["--help"], executable=binary, capture_output=True,
                         text=True, check=True).stdout
    return out.replace(binary, "tierfs")


def esc(text):
    """Roff-escapes running text: backslashes, minus signs, and a leading control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


ITEM = re.compile(r"^ {2,}(\S.*?)(?: {2,}(\S.*))?$")


def parse(help_text):
    """Returns (description, usage, sections): sections is a list of (heading, [lines])."""
    lines = help_text.splitlines()
    description, usage, sections = [], "", []
    current = None
    for line in lines:
        if line.startswith("Usage:"):
            usage = line[len("Usage:"):].strip()
            continue
        if not usage and current is None:
            if line.strip():
                description.append(line.strip())
            continue
        if re.match(r"^\S.*:$", line):
            current = (line[:-1], [])
            sections.append(current)
            continue
        if current is None:
            current = ("", [])
            sections.append(current)
        current[1].append(line)
    return " ".join(description), usage, sections


def subcommands(sections):
    names = []
    for heading, lines in sections:
        if "subcommand" not in heading.lower():
            continue
        for line in lines:
            m = ITEM.match(line)
            if m:
                names.append(m.group(1).split()[0])
    return names


def render_section(heading, lines, out):
    is_sub = "subcommand" in heading.lower()
    if heading and heading not in ("Options", "Positionals"):
        out.append(".PP")
        out.append("\\fI" + esc(heading) + "\\fR")
    verbatim = []

    def flush():
        if verbatim:
            out.append(".PP")
            out.append(".nf")
            out.extend(esc(v) for v in verbatim)
            out.append(".fi")
            verbatim.clear()

    skip = False
    for i, line in enumerate(lines):
        if skip:
            skip = False
            continue
        if not line.strip():
            flush()
            continue
        m = ITEM.match(line)
        if m and (line.lstrip().startswith("-") or is_sub or heading == "Positionals"):
            flush()
            desc = m.group(2)
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if desc is None and nxt.startswith("      ") and not nxt.lstrip().startswith("-"):
                desc = nxt.strip()  # CLI11 puts the text of a long option name on the next line
                skip = True
            out.append(".TP")
            out.append("\\fB" + esc(m.group(1)) + "\\fR")
            out.append(esc(desc or ""))
        else:
            verbatim.append(line.strip() if not line.startswith(" ") else line.rstrip())
    flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--template", required=True)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()

    version_out = subprocess.run([a.binary, "--version"], capture_output=True, text=True,
                                 check=True).stdout.strip()
    version = version_out.split()[-1]

    synopsis, commands = [], []
    queue = [[]]
    while queue:
        words = queue.pop(0)
        desc, usage, sections = parse(run_help(a.binary, words))
        subs = subcommands(sections)
        queue.extend(words + [s] for s in subs)
        if not words:
            continue  # the top level: its description is in the hand-written DESCRIPTION
        if subs and not any(l.strip().startswith("-") and not l.strip().startswith("-h")
                            for _, ls in sections for l in ls):
            continue  # a group such as `tierfs l3`: its subcommands get their own section
        name = "tierfs " + " ".join(words)
        usage_args = usage.split(None, 1 + len(words))[1 + len(words):]
        synopsis.append(".B " + name)
        if usage_args:
            synopsis.append(esc(usage_args[0]))
        synopsis.append(".br")
        commands.append(".SS " + esc(name))
        commands.append(esc(desc))
        commands.append(".PP")
        commands.append("Usage: \\fB" + esc(name) + "\\fR " + esc(" ".join(usage_args)))
        for heading, lines in sections:
            render_section(heading, lines, commands)

    with open(a.template, encoding="utf-8") as f:
        page = f.read()
    for key, value in (("@VERSION@", version), ("@SYNOPSIS@", "\n".join(synopsis)),
                       ("@COMMANDS@", "\n".join(commands))):
        if key not in page:
            sys.exit(f"gen_manpage: {key} missing from {a.template}")
        page = page.replace(key, value)
    with open(a.output, "w", encoding="utf-8") as f:
        f.write(page)


if __name__ == "__main__":
    main()
