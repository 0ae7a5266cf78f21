#!/usr/bin/env python3
"""`trainscope calibrate --trace` on a cluster file that `calibrate --from` fitted (docs/time-model.md,
"Calibration from a trace"): a constant the earlier calibration fitted from its rows (here an FSDP
job's frameworks.fsdp.host_op_s, from three measured rows) is never replaced silently by one trace's.

  - without a flag: refused (exit 2), one line per constant on stderr, old -> new and where the old
    came from, and nothing written;
  - --keep-fitted: the earlier value stays, the trace fits only the rest (memory_bandwidth), and the
    file records what was kept, the value the trace alone gave, and the earlier record whole;
  - --replace-fitted: the trace's value, the replaced one recorded beside it, the earlier record whole;
  - both flags, or either with --from: refused.
The trace is a hand-made Kineto file of CPU ops (aten::mm and aten::add in four ProfilerSteps),
imported with `trainscope import`; the rows and the trace are sized from `predict`'s own step time.
Usage: calibrate_trace_fitted.py TRAINSCOPE_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys

CONFIG = {"workload": "small-cpu", "gpus": 1, "mbs": 4, "seq": 64, "gbs": 4, "framework": "fsdp"}
CLASH = "frameworks.fsdp.host_op_s"  # fitted by both: --from (every row) and --trace (the step less its ops)
REST = "memory_bandwidth"             # fitted by --trace alone (the memory-bound ops)


def value(cluster, path):
    for k in path.split("."):
        cluster = cluster[k]
    return cluster


def run(binary, *args, expect=0):
    out = subprocess.run([binary, *args], capture_output=True, text=True)
    if out.returncode != expect:
        raise SystemExit(f"FAIL: trainscope {' '.join(args)} exited {out.returncode}, not {expect}\n{out.stdout}{out.stderr}")
    return out


def fresh(path):
    for p in (path, path + "-wal", path + "-shm"):
        if os.path.lexists(p):
            os.remove(p)
    return path


def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


def model_step(binary, **keys):
    flags = []
    for k, v in keys.items():
        flags += ["--" + k, str(v)]
    out = run(binary, "predict", "--cluster", "cpu-local", *flags, "--json").stdout
    return json.loads(out[out.index("{"):])["time"]["step_s"]


def write_trace(path, step_s):
    """Four steps of step_s: aten::mm half of each, aten::add a fifth (µs from the base)."""
    ev, t = [], 0.0
    us = step_s * 1e6
    for k in range(4):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1, "ts": t, "dur": us})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 1, "dur": 0.5 * us})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": t + 2 + 0.5 * us, "dur": 0.2 * us})
        t += us + 1
    with open(path, "w") as f:
        json.dump({"baseTimeNanoseconds": 1700000000000000000, "traceEvents": ev}, f)


def main():
    ts, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    # An earlier calibration: frameworks.fsdp.host_op_s fitted by `calibrate --from` on three measured rows.
    rows = os.path.join(work, "rows.jsonl")
    with open(rows, "w") as f:
        for mbs in (1, 2, 4):
            keys = dict(CONFIG, mbs=mbs, gbs=mbs)
            f.write(json.dumps(dict(keys, measured_step_s=1.3 * model_step(ts, **keys))) + "\n")
    study = fresh(os.path.join(work, "study-fitted.json"))
    run(ts, "calibrate", "--cluster", "cpu-local", "--from", rows, "--fit", CLASH, "--folds", "0", "-o", study)
    earlier = json.load(open(study))
    old = value(earlier, CLASH)
    check(earlier["calibration"]["fitted"][CLASH]["value"] == old, "the --from fit's record")

    trace_json = os.path.join(work, "trace.json")
    write_trace(trace_json, 1.6 * model_step(ts, **CONFIG))
    trace = fresh(os.path.join(work, "trace.db"))
    run(ts, "import", trace_json, "-o", trace)
    base = ["calibrate", "--cluster", study, "--trace", trace, "--config", json.dumps(CONFIG)]

    # Neither flag: refused, the clash listed, nothing written.
    out = fresh(os.path.join(work, "out.json"))
    p = run(ts, *base, "-o", out, expect=2)
    line = [l for l in p.stderr.splitlines() if l.startswith(f"would replace {CLASH}: ")]
    check(len(line) == 1, "one line for the clashing constant:\n" + p.stderr)
    check(f"was fitted by calibrate --from {rows} (3 rows)" in line[0], "where the old value came from: " + line[0])
    check("--keep-fitted" in p.stderr and "--replace-fitted" in p.stderr, "the fix names both flags:\n" + p.stderr)
    check(REST not in p.stderr, "only the clashing constant is listed:\n" + p.stderr)
    check(not os.path.exists(out), "nothing written on refusal")
    new = float(line[0].split("-> ")[1].split(" ")[0])
    check(abs(new / old - 1) > 0.01, f"the trace's value {new} differs from the fitted {old}")

    # --keep-fitted: the earlier value stays; memory_bandwidth fitted from the trace alone.
    keep = fresh(os.path.join(work, "keep.json"))
    p = run(ts, *base, "-o", keep, "--keep-fitted")
    check(f"kept {CLASH} at {old:.6g} (fitted by calibrate --from {rows} (3 rows)" in p.stdout, p.stdout)
    k = json.load(open(keep))
    cal = k["calibration"]
    check(value(k, CLASH) == old, f"{CLASH} kept: {value(k, CLASH)} vs {old}")
    check(REST in cal["fitted"] and "inherited" not in cal["fitted"][REST], json.dumps(cal["fitted"]))
    # The kept constant stays recorded as fitted (inherited, where from), so a later --trace still guards it.
    check(cal["fitted"].get(CLASH, {}).get("value") == old and
          f"calibrate --from {rows} (3 rows)" in cal["fitted"][CLASH].get("inherited", ""), json.dumps(cal["fitted"]))
    check(value(k, REST) == cal["fitted"][REST]["value"] != value(earlier, REST), f"{REST} fitted")
    check(cal["kept"][CLASH]["value"] == old, json.dumps(cal.get("kept")))
    check(abs(cal["kept"][CLASH]["trace_value"] / new - 1) < 1e-5, json.dumps(cal["kept"]))
    check(cal["previous"] == earlier["calibration"], "the earlier record kept whole")

    # --replace-fitted: the trace's value, the replaced one recorded.
    rep = fresh(os.path.join(work, "replace.json"))
    p = run(ts, *base, "-o", rep, "--replace-fitted")
    check(f"replaced {CLASH}: {old:.6g} -> " in p.stdout, p.stdout)
    r = json.load(open(rep))
    cal = r["calibration"]
    check(abs(value(r, CLASH) / new - 1) < 1e-5, f"the trace's value {value(r, CLASH)} vs {new}")
    check(cal["fitted"][CLASH]["replaced"]["value"] == old, json.dumps(cal["fitted"][CLASH]))
    check(cal["previous"] == earlier["calibration"], "the earlier record kept whole")

    # A second --trace on either output: still refused, the --from fit named where it was kept.
    again = fresh(os.path.join(work, "again.json"))
    p = run(ts, "calibrate", "--cluster", keep, "--trace", trace, "--config", json.dumps(CONFIG), "-o", again, expect=2)
    line = [l for l in p.stderr.splitlines() if l.startswith(f"would replace {CLASH}: ")]
    check(len(line) == 1 and f"was fitted by calibrate --from {rows} (3 rows)" in line[0], "chained --keep-fitted:\n" + p.stderr)
    p = run(ts, "calibrate", "--cluster", rep, "--trace", trace, "--config", json.dumps(CONFIG), "-o", again, expect=2)
    check(f"would replace {CLASH}: " in p.stderr and f"would replace {REST}: " in p.stderr, "chained --replace-fitted:\n" + p.stderr)
    check(not os.path.exists(again), "nothing written on refusal")
    # A preset's shipped fit that a calibration replaced leaves the preset's "fitted" list.
    check(CLASH not in earlier.get("fitted", {}) and "frameworks.fsdp.hook_s" in earlier.get("fitted", {}),
          "the --from output's preset list: " + json.dumps(earlier.get("fitted")))

    # Both flags, or a flag with --from: refused.
    p = run(ts, *base, "-o", out, "--keep-fitted", "--replace-fitted", expect=2)
    check("--keep-fitted: cannot be given with --replace-fitted" in p.stderr, p.stderr)
    p = run(ts, "calibrate", "--cluster", study, "--from", rows, "--keep-fitted", "-o", out, expect=2)
    check("--keep-fitted: applies to --trace" in p.stderr, p.stderr)
    print(f"PASS: {CLASH} fitted {old:.6g} by --from; the trace alone gives {new:.6g}; kept / replaced as asked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
