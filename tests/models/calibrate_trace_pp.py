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
the bubble the fitted model prices from its stages is (pp - 1)/M of the trace's class times per
step (the sum over classes, mean over ranks: a rank's own work) within TOL — a third short before. The machine is shared, so no step time is compared with a bound.
Usage: calibrate_trace_pp.py TRAINSCOPE_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys

TOL = 0.15
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
    # The CPU model's bubble is (compute + recompute)(pp - 1)/(v M): from the fitted stages, a rank's work
    # (the trace's classes) times (pp - 1)/M = 1/2 here. Fitting the classes to the step with its
    # bubble left in made the stages 1/(1 + 1/2) of the trace's, and this bubble a third short.
    want = classes * (2 - 1) / 2
    print(f"trace: step {row['step_s']:.4g} s, classes {classes:.4g} s/step ({row['class_s']}); the fitted model's "
          f"bubble {bubble.get('model_fitted', 0):.4g} s against (pp-1)/M of the classes {want:.4g} s")
    if abs(bubble.get("model_fitted", 0) / want - 1) > TOL:
        failures.append(f"the fitted model's bubble {bubble.get('model_fitted', 0):.4g} s is not (pp-1)/M of the trace's "
                        f"work ({want:.4g} s) within {TOL:.0%}: the stages were not fitted to a rank's own work")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
