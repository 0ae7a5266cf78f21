#!/usr/bin/env python3
"""`trainscope import` of PyTorch profiler traces taken with profile_memory=True: the "[memory]"
allocation and free events become each rank's memory counter, and each step's peak_bytes is the most
allocated in its window, so `report` prints the real peak (it printed 0.00 MiB before).

Two ranks' traces are made here by the real torch.profiler (the venv's torch; CPU, a schedule of
warm-up 1 and 3 active steps, as a training loop records them): rank 0 a small MLP, rank 1 a wider
one. The expected figures are computed from the trace files themselves, independently of the
importer: per ProfilerStep#N window, the largest "Total Allocated" of the events in it and of the
last event before it (the memory the step started with).
Usage: kineto_memory_test.py TRAINSCOPE_BINARY WORK_DIR
"""
import json
import os
import sqlite3
import subprocess
import sys
import warnings


def trace(path, width):
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, width), torch.nn.GELU(), torch.nn.Linear(width, 256))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(4):
            x = torch.randn(64, 256)
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()


def expected(path):
    """Per step number: the most allocated in its window (the level carried into it included)."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    mem = sorted((float(e["ts"]), e["args"]["Total Allocated"]) for e in events if e.get("name") == "[memory]")
    peaks = {}
    for e in events:
        if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"):
            b, en = float(e["ts"]), float(e["ts"]) + float(e["dur"])
            before = [v for t, v in mem if t <= b]
            inside = [v for t, v in mem if b < t <= en]
            peaks[int(e["name"][len("ProfilerStep#"):])] = max(([before[-1]] if before else []) + inside + [0])
    return len(mem), max(v for _, v in mem), peaks


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    warnings.filterwarnings("ignore")
    files = [os.path.join(work, f"memory-rank{r}.json") for r in range(2)]
    for path, width in zip(files, (512, 2048)):
        if os.path.lexists(path):
            os.remove(path)
        trace(path, width)
    db = os.path.join(work, "memory.db")
    out = subprocess.run([binary, "import", *files, "-o", db, "--overwrite"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL: import exited {out.returncode}: {out.stderr}")
    print(out.stdout.strip())
    failures = []
    con = sqlite3.connect(db)
    rep = json.loads(subprocess.run([binary, "report", db, "--json"], capture_output=True, text=True,
                                    check=True).stdout)["summary"]
    text = subprocess.run([binary, "report", db], capture_output=True, text=True, check=True).stdout
    whole = 0
    for rank, path in enumerate(files):
        n, top, peaks = expected(path)
        if n == 0 or top <= 0:
            raise SystemExit(f"FAIL: the profiler wrote no [memory] events in {path}")
        rows = con.execute("SELECT COUNT(*), MAX(counters.value) FROM counters JOIN strings ON strings.id = counters.name_id "
                           "WHERE counters.rank = ? AND strings.value = 'memory.allocated_bytes'", (rank,)).fetchone()
        print(f"rank {rank}: {n} [memory] events, most allocated {top} bytes; counter rows {rows[0]}, max {rows[1]}")
        if rows[0] != n or rows[1] != top:
            failures.append(f"rank {rank}: counter rows {rows} != ({n}, {top})")
        got = dict(con.execute("SELECT step, peak_bytes FROM steps WHERE rank = ?", (rank,)).fetchall())
        print(f"rank {rank}: step peaks {got}, from the trace {peaks}")
        if got != peaks:
            failures.append(f"rank {rank}: step peak_bytes {got} != {peaks}")
        ranked = [r for r in rep["ranks"] if r["rank"] == rank]
        if not ranked or ranked[0]["peak_bytes"] != max(peaks.values()):
            failures.append(f"rank {rank}: report's peak_bytes {ranked} != {max(peaks.values())}")
        whole = max(whole, max(peaks.values()))
    if rep["peak_bytes"] != whole:
        failures.append(f"report's run peak_bytes {rep['peak_bytes']} != {whole}")
    line = f"peak memory {whole / (1 << 20):.2f} MiB"
    if line not in text:
        failures.append(f"report does not say '{line}':\n{text[:600]}")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
