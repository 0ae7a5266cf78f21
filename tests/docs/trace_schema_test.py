#!/usr/bin/env python3
"""Keeps docs/trace-schema.md honest about the run database.

A real traced run (`trainscope run --workload tiny --trace DB`, two steps, one process) writes a
run database; its schema (sqlite_master) is compared with the `CREATE TABLE` blocks of
docs/trace-schema.md:
  - every table of the database has a block, with the same columns, types and constraints (the
    event tables' shorthand: a bare column name is `INTEGER NOT NULL`, as the page says; a
    `-- last N nullable` comment makes the last N plain `INTEGER`);
  - every block names a table the database has (no stale tables);
  - every index of the database is named on the page;
  - every `meta` key the run wrote has a row in the `meta` table, and every key of `meta.config`
    is named on the page.

usage: trace_schema_test.py TRAINSCOPE_EXE DOCS_DIR WORK_DIR
"""
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys


def norm(s):
    return re.sub(r"\s+", " ", s).replace("( ", "(").replace(" )", ")").strip().rstrip(";")


def split_columns(body):
    return [c.strip() for c in re.split(r",\s*(?![^()]*\))", body)]


def doc_tables(doc):
    """table -> list of column definitions, from the page's ```sql blocks."""
    tables = {}
    for block in re.findall(r"```sql\n(.*?)```", doc, re.S):
        for m in re.finditer(r"CREATE TABLE (\w+)\s*\((.*?)\);([^\n]*)", block, re.S):
            cols = split_columns(norm(m.group(2)))
            nullable = re.search(r"--\s*last (\d+) nullable", m.group(3))
            last = int(nullable.group(1)) if nullable else 0
            out = []
            for i, c in enumerate(cols):
                if re.fullmatch(r"\w+", c):
                    c += " INTEGER" if i >= len(cols) - last else " INTEGER NOT NULL"
                out.append(c)
            tables.setdefault(m.group(1), []).append(out)
    return tables


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    exe, docs, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    db = os.path.join(work, "run.db")
    run = subprocess.run([exe, "run", "--workload", "tiny", "--seq", "16", "--mbs", "2", "--steps", "2",
                          "--device", "cpu", "--trace", db, "--trace-level", "ops", "-q"],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        sys.exit(f"FAIL: the traced run exited {run.returncode}: {run.stderr}")
    doc = open(os.path.join(docs, "trace-schema.md"), encoding="utf-8").read()
    con = sqlite3.connect(db)
    real = {name: split_columns(norm(re.search(r"\((.*)\)", sql, re.S).group(1)))
            for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")}
    indexes = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")]
    meta = dict(con.execute("SELECT key, value FROM meta"))
    documented = doc_tables(doc)
    failures = []
    for table, cols in real.items():
        if table not in documented:
            failures.append(f"table {table} has no CREATE TABLE block on the page")
        for d in documented.get(table, []):
            if d != cols:
                failures.append(f"table {table}: the page says\n    {', '.join(d)}\n  the database has\n    {', '.join(cols)}")
    for table in documented:
        if table not in real:
            failures.append(f"table {table} is on the page but not in a run database")
    for index in indexes:
        if f"`{index}`" not in doc:
            failures.append(f"index {index} is not named on the page")
    meta_rows = set()
    for line in doc.splitlines():
        if line.startswith("| `"):
            meta_rows.update(re.findall(r"`(\w+)`", line.split("|")[1]))
    for key in meta:
        if key not in meta_rows:
            failures.append(f"meta key {key} has no row on the page")
    for key in json.loads(meta["config"]):
        if f"`{key}`" not in doc:
            failures.append(f"meta.config key {key} is not named on the page")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print(f"ok: {len(real)} tables, {len(indexes)} indexes, {len(meta)} meta keys as docs/trace-schema.md says")


if __name__ == "__main__":
    main()
