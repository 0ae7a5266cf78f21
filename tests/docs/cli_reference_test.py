#!/usr/bin/env python3
"""Keeps docs/config-reference.md honest about the command line.

For each command, its `--help` (CLI11's, generated from the code) is parsed into flags and their
defaults, and docs/config-reference.md's section of that command is parsed into table rows (the
first cell names the flags, a "default" column where there is one). Checked:
  - every flag of the help has a row in its command's section (the reference documents every flag);
  - every flag a row of the section names is a flag of the command (no stale rows);
  - where the help shows a default (`--mbs INT=4`), the row's default cell holds the same value
    (numbers compared as numbers: 0.0006 is 6e-4).

usage: cli_reference_test.py TRAINSCOPE_EXE DOCS_DIR [VIEWER_EXE]
"""
import re
import subprocess
import sys

# command -> (argv after the executable, headings of its sections in config-reference.md)
COMMANDS = {
    "run": (["run", "--help"], ["## `trainscope run` flags"]),
    "tune": (["tune", "--help"], ["### `trainscope tune`"]),
    "predict": (["predict", "--help"], ["### `trainscope predict`"]),
    "calibrate": (["calibrate", "--help"], ["### `trainscope calibrate"]),
    "report": (["report", "--help"], ["### `trainscope report"]),
    "export": (["export", "--help"], ["### `trainscope export DB --chrome", "### `trainscope export STUDY"]),
    "import": (["import", "--help"], ["### `trainscope import"]),
}
VIEWER = ("view", ["--help"], ["### `trainscope-viewer`"])

FLAG = re.compile(r"`(--?[a-z0-9][a-z0-9-]*)`")


def help_flags(argv):
    """flag -> default shown by the help (None when it shows none), and the flag's aliases."""
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        sys.exit(f"FAIL: {' '.join(argv)} exited {out.returncode}: {out.stderr.strip()}")
    flags = {}
    for line in out.stdout.splitlines():
        m = re.match(r"^  ((?:-[a-zA-Z],)?--?[a-z0-9][a-z0-9-]*)(?: (\S+))?", line)
        if not m:
            continue
        names = m.group(1).split(",")
        if "--help" in names:
            continue
        default = None
        kind = (m.group(2) or "").replace(">=", "\u2265")
        if "=" in kind:
            default = kind.rsplit("=", 1)[1]
        for n in names:
            flags[n] = default
    if not flags:
        sys.exit(f"FAIL: no flags parsed from {' '.join(argv)}:\n{out.stdout}")
    return flags


def sections(text, headings):
    """The text of each section whose heading starts with one of headings, up to the next heading
    of the same or a higher level."""
    lines = text.splitlines()
    found = []
    for h in headings:
        level = len(h) - len(h.lstrip("#"))
        starts = [i for i, l in enumerate(lines) if l.startswith(h)]
        if not starts:
            sys.exit(f"FAIL: docs/config-reference.md has no section '{h}'")
        for i in starts:
            j = i + 1
            while j < len(lines):
                m = re.match(r"^(#+) ", lines[j])
                if m and len(m.group(1)) <= level:
                    break
                j += 1
            found.append("\n".join(lines[i:j]))
    return "\n".join(found)


def table_rows(section):
    """flag -> default cell (None where the table has no default column), from every table."""
    rows = {}
    default_col = None
    for line in section.splitlines():
        if not line.startswith("|"):
            default_col = None
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if default_col is None and all(not c.startswith("`") for c in cells):
            heads = [c.lower() for c in cells]
            default_col = heads.index("default") if "default" in heads else -1
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue
        for flag in FLAG.findall(cells[0]):
            rows[flag] = cells[default_col] if default_col not in (None, -1) and default_col < len(cells) else None
    return rows


def same_value(shown, cell):
    """Whether the doc's default cell states the help's default."""
    tokens = re.findall(r"[^\s`(),;→]+(?:,[^\s`(),;→]+)*", cell.replace("`", " "))
    for t in tokens + [cell.replace("`", "").strip()]:
        if t == shown:
            return True
        try:
            if float(t) == float(shown):
                return True
        except ValueError:
            pass
    return False


def check(name, argv, headings, doc, failures):
    flags = help_flags(argv)
    rows = table_rows(sections(doc, headings))
    for flag, shown in flags.items():
        if flag not in rows:
            failures.append(f"{name}: {flag} is a flag (--help) but has no row in its reference table")
            continue
        cell = rows[flag]
        if shown is not None and cell is not None and not same_value(shown, cell):
            failures.append(f"{name}: {flag}: --help shows default {shown!r}, the reference says {cell!r}")
    for flag in rows:
        if flag not in flags:
            failures.append(f"{name}: {flag} has a row in the reference but is not a flag (--help)")
    print(f"{name}: {len(flags)} flags, {len(rows)} rows")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exe, docs = sys.argv[1], sys.argv[2]
    doc = open(f"{docs}/config-reference.md", encoding="utf-8").read()
    failures = []
    for name, (args, headings) in COMMANDS.items():
        check(name, [exe] + args, headings, doc, failures)
    if len(sys.argv) > 3:
        name, args, headings = VIEWER
        check(name, [sys.argv[3]] + args, headings, doc, failures)
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok: every flag of every command is in docs/config-reference.md with the default --help shows")


if __name__ == "__main__":
    main()
