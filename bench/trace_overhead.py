#!/usr/bin/env python3
"""bench/trace_overhead.py — what tracing costs a training run: the small CPU model untraced and
traced (`--trace`, at the default level `ranges`, or --level), alternating in one run; reports the
median per-round ratio of step time (traced / untraced - 1), plus the stored-event count.

Usage: bench/trace_overhead.py [--bin build/bin/trainscope] [--rounds 5] [--steps 20] [--level ranges]
"""
import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile

from common import ROOT, run_json



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "trainscope"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--level", default="ranges")
    a = ap.parse_args()
    base = [a.bin, "run", "--workload", "small-cpu", "--seq", "128", "--mbs", "8", "--steps", str(a.steps),
            "--device", "cpu", "-q", "--json"]
    overheads, events = [], 0
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            plain = run_json(base)
            db = os.path.join(d, f"t{r}.db")
            traced = run_json(base + ["--trace", db, "--trace-level", a.level])
            overheads.append(traced["step_time_median_s"] / plain["step_time_median_s"] - 1)
            events = sqlite3.connect(db).execute("SELECT SUM(stored) FROM drops").fetchone()[0]
            print(f"round {r}: untraced {plain['step_time_median_s']*1e3:.1f} ms/step, traced "
                  f"{traced['step_time_median_s']*1e3:.1f} ms/step ({overheads[-1]:+.1%}), {events} events",
                  file=sys.stderr)
    res = {"level": a.level, "overhead_median": statistics.median(overheads), "overhead_min": min(overheads),
           "overhead_max": max(overheads), "events_per_run": events, "rounds": a.rounds}
    print(json.dumps(res))
    print(f"tracing at level {a.level}: {res['overhead_median']:+.2%} step time (median of {a.rounds} rounds)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
