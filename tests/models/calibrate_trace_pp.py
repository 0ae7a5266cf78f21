#!/usr/bin/env python3
"""`trainscope calibrate --trace` on a real pipeline-parallel run: the trace of a `--pp 2` run holds
each rank's own stage and its waits at the pipeline's receives (the bubble). The fit reads each
class's time off the model's step less its bubble, so the fitted model's own work per rank is what
the trace measured, and the bubble follows from the fitted stages (docs/time-model.md, "The
pipeline bubble"). Before, the bubble was left in the class times the fit matched: every rate came
out 1 + (pp - 1)/M times too fast (here M = 2: the fitted work a third short) and the stage waits
were attributed to nothing.

One run of small-cpu on 2 ranks (pp 2, 2 micro-batches) is recorded at --trace-level ops; calibrate
fits cpu-local to it. Checked: the record gives the trace's bubble and the model's (both > 0), and
the fitted cluster's compute + recompute + optimizer for the configuration (`predict --json`) is
within TOL of the trace's class times per step (the sum over classes, mean over ranks: the fit's
own target). The machine is shared, so no step time is compared with a bound.
Usage: calibrate_trace_pp.py TRAINSCOPE_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys

TOL = 0.12
FLAGS = ["--workload", "small-cpu", "--seq", "64", "--mbs", "2", "--gbs", "4"]


def run(binary, *args):
    out = subprocess.run([binary, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL: trainscope {' '.join(args)}\n{out.stdout}{out.stderr}")
    return out.stdout


def last_json(text):
    return json.loads(text[text.rindex("\n{") + 1 if "\n{" in text else text.index("{"):])


def fresh(path):
    if os.path.lexists(path):
        os.remove(path)
    return path


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    trace = fresh(os.path.join(work, "pp2-trace.db"))
    run(binary, "run", *FLAGS, "--nproc", "2", "--pp", "2", "--steps", "8", "--trace", trace, "--trace-level", "ops")
    fitted = fresh(os.path.join(work, "pp2-fitted.json"))
    text = run(binary, "calibrate", "--cluster", "cpu-local", "--trace", trace, "-o", fitted, "--json")
    cal = last_json(text)
    print(text[:text.rindex("\n{")] if "\n{" in text else "")
    failures = []
    bubble = cal.get("pipeline_bubble", {}).get("per_step_s", {})
    print(f"pipeline bubble per step: trace {bubble.get('measured')}, model {bubble.get('model_base')} -> "
          f"{bubble.get('model_fitted')}")
    if not (bubble.get("measured", 0) > 0 and bubble.get("model_fitted", 0) > 0):
        failures.append(f"the record's pipeline_bubble is missing or 0: {bubble}")
    row = cal["rows"][0]
    classes = sum(row["class_s"].values())
    t = last_json(run(binary, "predict", "--cluster", fitted, *FLAGS, "--gpus", "2", "--pp", "2", "--json"))["time"]
    work_s = t["compute_s"] + t.get("recompute_s", 0) + t.get("optimizer_s", 0)
    print(f"trace: step {row['step_s']:.4g} s, classes {classes:.4g} s/step ({row['class_s']}); fitted model: work "
          f"{work_s:.4g} s (compute {t['compute_s']:.4g}, optimizer {t.get('optimizer_s', 0):.4g}), bubble "
          f"{t.get('bubble_s', 0):.4g}, step {t['step_s']:.4g}")
    if abs(work_s / classes - 1) > TOL:
        failures.append(f"the fitted model's work {work_s:.4g} s is not the trace's {classes:.4g} s within {TOL:.0%} "
                        f"(the bubble's share, 1 + (pp-1)/M, attributed to the classes?)")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
