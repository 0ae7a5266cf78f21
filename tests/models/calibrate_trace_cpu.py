#!/usr/bin/env python3
"""`trainscope calibrate --trace` on a real CPU run: the rates fitted from one traced run (its GEMM
and memory-bound CPU ops, docs/time-model.md "Calibration from a trace") predict runs of other
configurations, which the fit never saw, no worse than the preset it started from.

One run of small-cpu is recorded at --trace-level ops (the trace); three runs of other micro-batch
sizes and sequence lengths are recorded without a trace (held out). Both clusters price the held-out
runs through `calibrate --evaluate`; the refitted file's MAPE must not exceed the preset's by more
than 2 points (the machine is shared: a held-out step time moves by a few percent between runs), in
one of at most two measurements.
Usage: calibrate_trace_cpu.py TRAINSCOPE_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys

SLACK = 0.02


def run(binary, *args):
    out = subprocess.run([binary, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL: trainscope {' '.join(args)}\n{out.stdout}{out.stderr}")
    return out.stdout


def fresh(path):
    if os.path.lexists(path):
        os.remove(path)
    return path


def mape(binary, cluster, dbs):
    out = run(binary, "calibrate", "--evaluate", "--json", "--cluster", cluster, "--from", *dbs)
    return json.loads(out[out.rindex("\n{") + 1 if "\n{" in out else out.index("{"):])["mape"]


def attempt(binary, work):
    """The trace, the held-out runs and both clusters' MAPE on them: (preset, refit)."""
    common = ["--workload", "small-cpu", "--steps", "12", "--ga", "1"]
    trace = fresh(os.path.join(work, "calib-trace.db"))
    run(binary, "run", *common, "--seq", "64", "--mbs", "4", "--trace", trace, "--trace-level", "ops")
    held = []
    for seq, mbs in [(64, 2), (128, 4), (32, 8)]:
        db = fresh(os.path.join(work, f"calib-held-{seq}-{mbs}.db"))
        run(binary, "run", *common, "--seq", str(seq), "--mbs", str(mbs), "--out", db)
        held.append(db)
    fitted = fresh(os.path.join(work, "calib-trace-fitted.json"))
    print(run(binary, "calibrate", "--cluster", "cpu-local", "--trace", trace, "-o", fitted))
    preset, refit = mape(binary, "cpu-local", held), mape(binary, fitted, held)
    print(f"held-out MAPE over {len(held)} runs: preset {preset:.1%}, fitted from the trace {refit:.1%}")
    return preset, refit


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    # The trace and the held-out runs are measured a few seconds apart on a shared machine: a burst of
    # other work during one of them moves the comparison by more than the slack (seen beside a fresh
    # clone's suite: 28.2% against 25.3%). Measured twice at most; both figures are printed.
    for tries in (1, 2):
        preset, refit = attempt(binary, work)
        if refit <= preset + SLACK:
            print("PASS")
            return 0
        print(f"attempt {tries}: the trace's fit predicts the held-out runs worse than the preset")
    print("FAIL: the trace's fit predicts the held-out runs worse than the preset, twice")
    return 1


if __name__ == "__main__":
    sys.exit(main())
