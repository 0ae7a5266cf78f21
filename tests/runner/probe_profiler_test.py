#!/usr/bin/env python3
"""A job's own torch.profiler in the probe's profile trial (python/trainscope_probe/profiler.py).

    probe_profiler_test.py TRAINSCOPE WORKDIR

Kineto holds one profiler a process; with torch 2.11 the job's and the probe's clashed and ended the
job ("Can't disable Kineto profiler when it's not running", from the job's own exit or the probe's
start). tests/runner/profiler_job.py (a tiny Linear loop, or the tiny GPT-2 under an HF Trainer with a
profiler callback; CPU, no download) runs under the probe's sitecustomize with
TRAINSCOPE_PROBE_PROFILE_STEPS=2, its profiler running around the loop, started inside it while the
probe traces, scheduled (prepared at step 1), prepared before the probe exists, the old autograd API,
and an HF callback. Each: the job exits 0, every step has its row, the job's profiler saw the events it
sees without the probe (the plain loops; the HF one some), its trace is written, the probe's notice
says what became of its own trace, which is kept (and imports) only where it holds a whole step.
Then one `tune --runner hf` trial of the HF job: ok, measured, the notice in the trial's message and
its database's meta `probe_notice`.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_runner_test import PROBE, PY, check, steps_of, trial_dir, tune  # noqa: E402

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiler_job.py")
SITE = os.path.join(PROBE, "trainscope_probe", "site")
SKIPPED = "the job's own torch.profiler was active at step 1: the probe did not trace"
# mode: (the probe's notice, the probe's trace kept)
MODES = {"outer": (SKIPPED, False),
         "inner": ("the job started its own torch.profiler at step 2: the probe's trace keeps step 1", True),
         "schedule": (SKIPPED, False),
         "warm0": ("the probe's torch.profiler did not start (RuntimeError", False),
         "legacy": (SKIPPED, False),
         "hf": (SKIPPED, False)}


def run(work, mode, profile=True):
    folder = os.path.join(work, f"{mode}-{'probe' if profile else 'plain'}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    env = dict(os.environ, PYTHONPATH=f"{SITE}:{PROBE}", OMP_NUM_THREADS="1")
    if profile:
        env.update(TRAINSCOPE_PROBE_DIR=os.path.join(folder, "probe"), TRAINSCOPE_PROBE_PROFILE_STEPS="2")
    trace = os.path.join(folder, "job.trace.json")
    p = subprocess.run([PY, JOB, mode, trace, "5"], env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"{mode}: the job exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    said = dict(line.split() for line in p.stdout.splitlines() if line.startswith("job-"))
    check(os.path.exists(trace) and json.load(open(trace))["traceEvents"], f"{mode}: the job's own trace is empty")
    return folder, int(said["job-events"]), int(said["job-steps"])


def check_mode(ts, work, mode):
    want_notice, kept = MODES[mode]
    folder, events, steps = run(work, mode)
    probe = os.path.join(folder, "probe")
    rows = [json.loads(x) for x in open(os.path.join(probe, "rank0.steps.jsonl"))]
    check(steps == 5 and [r["step"] for r in rows] == list(range(5)), f"{mode}: rows {rows}")
    notice = json.load(open(os.path.join(probe, "rank0.notice.json")))["notice"]
    check(notice.startswith(want_notice), f"{mode}: notice {notice!r}, want {want_notice!r}…")
    trace = os.path.join(probe, "rank0.trace.json")
    check(os.path.exists(trace) == kept, f"{mode}: the probe's trace {'missing' if kept else 'kept'}")
    if kept:
        db = os.path.join(folder, "probe.db")
        p = subprocess.run([ts, "import", trace, "-o", db], capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"{mode}: the probe's cut trace does not import: {p.stderr}")
    if mode != "hf":  # the job's profiler saw what it sees without the probe
        _, alone, _ = run(work, mode, profile=False)
        check(events == alone, f"{mode}: the job's profiler saw {events} events under the probe, {alone} alone")
    else:
        check(events > 0, f"hf: the job's profiler callback saw no event")
    print(f"{mode}: exit 0, 5 rows, job's profiler {events} events, probe trace {'kept' if kept else 'none'}: "
          f"{notice}")


def check_tune(ts, work):
    out = os.path.join(work, "tune-job.trace.json")
    study, r = tune(ts, work, "profiler-hf", ["--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "1",
                                              "--mbs", "2", "--ckpt", "none", "--exhaustive", "--trial-steps", "4",
                                              "--mem-limit", "3G", "--entry", f"{JOB} hf {out}"])
    trials = r["trials"]
    check(trials and all(t["status"] == "ok" for t in trials), f"trials {trials}")
    t = [t for t in trials if t["profile"]]
    check(t, f"no profile trial: {trials}")
    t = t[0]
    check(f"rank 0: {SKIPPED}" in t["message"], f"the trial's message {t['message']!r}")
    rows, meta, host_ops = steps_of(t["db"])
    check(len(rows) == t["steps"] > 0 and host_ops == 0, f"{t['db']}: {len(rows)} rows, {host_ops} host ops")
    check(meta.get("probe_notice", "").startswith(f"rank 0: {SKIPPED}"), f"meta {meta.get('probe_notice')!r}")
    check(os.path.exists(out), "the job's own trace was not written")
    print(f"tune --runner hf: trial {os.path.basename(trial_dir(t))} ok, {len(rows)} steps, message: {t['message']}")


def main():
    ts, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    try:
        import accelerate  # noqa: F401  (the HF case's Trainer needs it; scripts/setup installs it)
    except ImportError:
        print("SKIP: accelerate is not installed in", PY, "(run scripts/setup)")
        sys.exit(77)
    for mode in MODES:
        check_mode(ts, work, mode)
    # The probe's own trace cannot be written (its path is a folder here): a notice, never the job's end.
    folder = os.path.join(work, "unwritable-probe")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "probe", "rank0.trace.json"))
    env = dict(os.environ, PYTHONPATH=f"{SITE}:{PROBE}", OMP_NUM_THREADS="1",
               TRAINSCOPE_PROBE_DIR=os.path.join(folder, "probe"), TRAINSCOPE_PROBE_PROFILE_STEPS="2")
    p = subprocess.run([PY, JOB, "none", os.path.join(folder, "unused.json"), "5"], env=env, capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 0, f"unwritable trace: the job exited {p.returncode}:\n{p.stderr[-3000:]}")
    rows = [json.loads(x) for x in open(os.path.join(folder, "probe", "rank0.steps.jsonl"))]
    check([r["step"] for r in rows] == list(range(5)), f"unwritable trace: rows {rows}")
    notice = json.load(open(os.path.join(folder, "probe", "rank0.notice.json")))["notice"]
    check(notice.startswith("the probe's trace was not written"), "unwritable trace: notice " + notice)
    check(not os.path.exists(os.path.join(folder, "probe", "rank0.trace.json.part")), "the partial trace left behind")
    # Without a profile trial the probe leaves torch's profiler alone and notes nothing.
    folder, _, _ = run(work, "outer", profile=False)
    check(not os.path.exists(os.path.join(folder, "probe")), "a probe folder without TRAINSCOPE_PROBE_DIR")
    check_tune(ts, work)
    print("PASS")


if __name__ == "__main__":
    main()
