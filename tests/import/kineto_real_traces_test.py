#!/usr/bin/env python3
"""`trainscope import` and `report` of real torch.profiler CPU traces a user brings, each checked
against the trace itself (an oracle computed here from the JSON, not from the importer):

  - every profiler option at once (record_shapes, with_stack, profile_memory, with_flops,
    with_modules), user ranges nested on the main thread, three Python threads running ranges (torch
    2.11 records none of them: only the profiling thread's), a DataLoader with 2 workers: report's
    per-op self time, total time and calls equal the oracle's (self = duration minus the ops directly
    nested in it on the same thread), and profile_memory's events give a peak;
  - record_function names holding a quote: torch 2.11 writes them unescaped (not JSON; the whole
    trace was refused), a newline (dropped by the profiler) and a backslash (written as '/');
  - schedule(wait=0, warmup=1, active=3) over 5 iterations with tensorboard_trace_handler(use_gzip):
    the exit cuts the next cycle as it begins, leaving a ProfilerStep#5 of a few µs with nothing in
    it, alone in its own .pt.trace.json.gz; it was a step (mean step time 49 ms where the steps took
    65 ms). The steps are the ones holding work, and report's mean is theirs, from the JSON; and
    on_trace_ready=export_chrome_trace(one path) without repeat=, whose cut cycle overwrites the
    trace with that step alone, is refused saying so (it was imported as one step of 40 µs).
Usage: kineto_real_traces_test.py TRAINSCOPE_BINARY WORK_DIR
"""
import collections
import glob
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import warnings


def model():
    import torch
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def everything(path):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    m = model()
    def worker(k):
        for _ in range(3):
            with record_function(f"worker{k}"):
                with record_function("inner"):
                    torch.randn(64, 64).mm(torch.randn(64, 64))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 32)), batch_size=8, num_workers=2)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True, profile_memory=True,
                 with_flops=True, with_modules=True) as p:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for (x,) in loader:
            with record_function("train_step"):
                with record_function("forward"):
                    loss = m(x).square().mean()
                loss.backward()
        for t in threads:
            t.join()
    p.export_chrome_trace(path)


NAMES = ['say "hi"', '"both ends"', "new\nline", "back\\slash"]
STORED = ['say "hi"', '"both ends"', "newline", "back/slash"]  # as torch 2.11's writer leaves them


def names(path):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for n in NAMES:
            with record_function(n):
                torch.randn(10).sum()
    p.export_chrome_trace(path)


def cut_cycle(folder):
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    m = model()
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=tensorboard_trace_handler(folder, use_gzip=True)) as p:
        for _ in range(5):
            m(torch.randn(256, 32)).square().mean().backward()
            p.step()


def overwritten(path):
    """on_trace_ready writing one path, schedule() without repeat=: the exit's cut cycle overwrites the trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    m = model()
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as p:
        for _ in range(2):
            m(torch.randn(8, 32)).sum().backward()
            p.step()


def events(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        d = json.load(f)
    return d.get("baseTimeNanoseconds", 0), d["traceEvents"]


def span(base, e):
    b = base + round(e["ts"] * 1000)
    return b, b + round(e["dur"] * 1000)


def op_oracle(path):
    """name -> [calls, total ns, self ns] over the file's cpu_op events."""
    base, evs = events(path)
    by_thread = collections.defaultdict(list)
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            b, en = span(base, e)
            by_thread[(e["pid"], e["tid"])].append((b, -en, e["name"]))
    out = collections.defaultdict(lambda: [0, 0, 0])
    for ops in by_thread.values():
        ops.sort()
        stack = []  # [end, name, duration, nested]
        def pop():
            end, name, dur, nested = stack.pop()
            out[name][2] += dur - nested
        for b, neg_end, name in ops:
            en = -neg_end
            while stack and stack[-1][0] <= b:
                pop()
            if stack:
                stack[-1][3] += en - b
            stack.append([en, name, en - b, 0])
            out[name][0] += 1
            out[name][1] += en - b
        while stack:
            pop()
    return out


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


def imported(binary, files, db, failures):
    out = run([binary, "import", *files, "-o", db])
    print(out.stdout.strip(), out.stderr.strip())
    if out.returncode != 0:
        failures.append(f"import {files} exited {out.returncode}: {out.stderr.strip()}")
        return None
    rep = run([binary, "report", db, "--json", "--top", "100000"])
    if rep.returncode != 0:
        failures.append(f"report {db} exited {rep.returncode}: {rep.stderr.strip()}")
        return None
    return out.stdout, json.loads(rep.stdout)


def check_ops(binary, work, failures):
    path = os.path.join(work, "everything.json")
    everything(path)
    got = imported(binary, [path], os.path.join(work, "everything.db"), failures)
    if got is None:
        return
    top = {o["name"]: o for o in got[1]["top_ops"]}
    want = op_oracle(path)
    bad = []
    for name, (calls, total, self_ns) in want.items():
        o = top.get(name)
        # report's seconds are sums of whole nanoseconds: within a nanosecond a call of the oracle's
        if o is None or o["count"] != calls or abs(o["total_s"] * 1e9 - total) > calls or abs(o["self_s"] * 1e9 - self_ns) > 2 * calls:
            bad.append(f"{name}: report {o}, trace {calls} calls, {total} ns, self {self_ns} ns")
    bad += [f"{n}: in report, not a cpu_op of the trace" for n in top if n not in want]
    print(f"ops: {len(want)} names in the trace, {len(top)} in report, {len(bad)} differ")
    failures.extend(bad[:10])
    if got[1]["summary"]["peak_bytes"] <= 0:
        failures.append("profile_memory's events gave no peak memory")


def check_names(binary, work, failures):
    path = os.path.join(work, "names.json")
    names(path)
    got = imported(binary, [path], os.path.join(work, "names.db"), failures)
    if got is None:
        return
    con = sqlite3.connect(os.path.join(work, "names.db"))
    ranges = [n for (n,) in con.execute("SELECT s.value FROM ranges r JOIN strings s ON s.id = r.name_id ORDER BY r.start_ns")]
    print(f"names: {ranges}")
    if ranges != STORED:
        failures.append(f"range names {ranges} != {STORED}")
    if f"{path}: 4 quote(s) inside a string, written unescaped" not in got[0]:
        failures.append(f"import does not count the repaired quotes: {got[0]}")


def check_cut_cycle(binary, work, failures):
    folder = os.path.join(work, "cycles")
    cut_cycle(folder)
    files = sorted(glob.glob(os.path.join(folder, "*.pt.trace.json.gz")))
    working = {}  # step -> duration ns, for the ProfilerSteps some cpu_op starts in
    for f in files:
        base, evs = events(f)
        ops = [span(base, e)[0] for e in evs if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
        for e in evs:
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"):
                b, en = span(base, e)
                if any(b <= t < en for t in ops):
                    working[int(e["name"].split("#")[1])] = en - b
    print(f"cut cycle: {len(files)} files, steps with work {sorted(working)}")
    if len(files) != 2 or sorted(working) != [1, 2, 3]:
        failures.append(f"the profiler wrote {files}, steps with work {sorted(working)}: not the cut-cycle shape")
    got = imported(binary, files, os.path.join(work, "cycles.db"), failures)
    if got is None:
        return
    con = sqlite3.connect(os.path.join(work, "cycles.db"))
    steps = [s for (s,) in con.execute("SELECT step FROM steps ORDER BY step")]
    if steps != sorted(working):
        failures.append(f"steps {steps}, the steps with work {sorted(working)}")
    rank = got[1]["summary"]["ranks"][0]
    mean = sum(working.values()) / len(working) / 1e9
    print(f"report mean step {rank['step_time_mean_s'] * 1e3:.3f} ms, the trace's {mean * 1e3:.3f} ms")
    if abs(rank["step_time_mean_s"] - mean) > 1e-9:
        failures.append(f"mean step time {rank['step_time_mean_s']} s, the working steps' {mean} s")
    if "ProfilerStep#5, its last, holds no host event" not in got[0]:
        failures.append(f"import does not say the cut step was left out: {got[0]}")

    # The same cut cycle written over the trace: refused, saying why (it was imported as a 40 µs step).
    path = os.path.join(work, "overwritten.json")
    overwritten(path)
    db = os.path.join(work, "overwritten.db")
    out = run([binary, "import", path, "-o", db])
    print(out.stderr.strip())
    if out.returncode != 2 or f"{path} holds no step but ProfilerStep#2, which the profiler's stop cut" not in out.stderr \
            or "pass repeat=1" not in out.stderr or os.path.exists(db):
        failures.append(f"import of a trace its cut cycle overwrote: exit {out.returncode}, {out.stderr.strip()}")


def main():
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)  # this test's own folder, made afresh
    os.makedirs(work)
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(1)
    failures = []
    check_ops(binary, work, failures)
    check_names(binary, work, failures)
    check_cut_cycle(binary, work, failures)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
