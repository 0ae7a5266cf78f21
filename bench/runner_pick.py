#!/usr/bin/env python3
"""bench/runner_pick.py — does an external runner's search find that job's best, and does trainscope's own
runtime pick what the framework would pick? (issue 34; docs/benchmarks.md, "Picking for another framework")

One small model and one CPU space per runner, three studies in one run:
  --runner hf (default)  examples/hf_trainer.py --model gpt2 (a plain Trainer), the `tiny` workload at seq 32,
                         global batch 8, 1-2 Gloo ranks, micro-batch 1/2/4, no or full checkpointing, ZeRO 0
                         (DDP), 2 (FSDP SHARD_GRAD_OP) or 3 (FSDP FULL_SHARD; on CPU ranks through the probe's
                         cpu_fsdp shim): 24 candidates (ZeRO-2/3 need 2 ranks)
  --runner deepspeed     examples/deepspeed_train.py --model gpt2 under the deepspeed launcher, the same
                         workload on 2 Gloo ranks, micro-batch 1/2/4, no checkpointing, ZeRO 0-3: 12 candidates
  exhaustive   `tune --runner R --exhaustive`: every candidate measured in the framework's job (the truth)
  search       `tune --runner R` (successive halving, the default): its pick, trials and wall time
  trainscope   `tune` (trainscope's own runtime, halving): its pick — or, when that is a layout R does not
               run (TP, PP), the fastest it measured of those R runs — exported in R's format
               (`export --format training-args|deepspeed`) and looked up in the exhaustive measurements,
               the export checked against what R's trial of that plan ran
Reports (a) the search's pick against the exhaustive best (within x%) and its cost (trials, steps,
seconds) against exhaustive; (b) trainscope's pick measured in R against R's best, and whether it
is the same configuration. One process per configuration is a noisy truth on a shared host: where a
pick is not the exhaustive best, each is re-measured in R alternately with the best, three times (a
one-candidate tune, the space narrowed to that plan), and the medians are compared.

Usage: bench/runner_pick.py [--runner hf|deepspeed] [--bin build/bin/trainscope] [--out bench/out/runner_pick]
                            [--steps 6]
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

from common import _busy_cpu_s

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROBE = os.path.join(ROOT, "python")
WORKLOAD = ["--workload", "tiny", "--seq", "32", "--gbs", "8", "--mem-limit", "3G", "--cluster", "cpu-local"]
# Each runner: its entry, its space (what that framework runs on Gloo CPU ranks; the trainscope study
# searches the same flags, its TP/PP layouts included), the export format of its trial's file, and the
# keys of that file that say the plan (compared between trainscope's export and what the trial ran).
RUNNERS = {
    "hf": {
        "entry": os.path.join(ROOT, "examples", "hf_trainer.py") + " --model gpt2 --seq 32",
        # ZeRO-1 is DeepSpeed's (the HF runner refuses it); ZeRO-2/3 run as FSDP SHARD_GRAD_OP / FULL_SHARD.
        "space": ["--ranks", "1,2", "--mbs", "1,2,4", "--ckpt", "none,full", "--zero", "0,2,3"],
        "format": "training-args", "file": "training_args.json",
        "keys": ("per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing", "fsdp"),
    },
    "deepspeed": {
        "entry": os.path.join(ROOT, "examples", "deepspeed_train.py") + " --model gpt2 --seq 32",
        # deepspeed_train.py enables no activation checkpointing: checkpointing is left out of the space.
        "space": ["--ranks", "2", "--mbs", "1,2,4", "--ckpt", "none", "--zero", "0,1,2,3"],
        "format": "deepspeed", "file": "ds_config.json",
        "keys": ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization", "optimizer",
                 "bf16", "fp16"),
    },
}


# (study, cores other processes kept busy during it: the machine's busy CPU time less the study's own, over
# its wall time — bench/common.py's measure): the host's load, reported with the figures.
LOAD = []


def runner_args(name):
    return ["--runner", name, "--python", sys.executable, "--probe", PROBE, "--entry", RUNNERS[name]["entry"]]

def tune(bin_, study, args):
    for p in (study, study + "-wal", study + "-shm", study + ".lock"):
        if os.path.exists(p):
            os.remove(p)
    shutil.rmtree(study + ".trials", ignore_errors=True)
    t0 = time.time()
    busy, own = _busy_cpu_s(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([bin_, "tune", *WORKLOAD, "--study", study, "--json", *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tune {' '.join(args)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    ru, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.time() - t0
    own_s = (ru.ru_utime - own.ru_utime) + (ru.ru_stime - own.ru_stime)
    LOAD.append((os.path.basename(study), round(max(0.0, (_busy_cpu_s() - busy - own_s) / wall), 2)))
    return json.loads(p.stdout.strip().splitlines()[-1]), time.time() - t0


def measured(r):
    """plan -> measured step time (the study's pooled estimate), over the candidates it measured."""
    return {c["plan"]: c["measured_step_s"] for c in r["ranked"] if c.get("measured_step_s")}


def plan_of(r, cid):
    return next(c["plan"] for c in r["ranked"] if c["id"] == cid)


def effort(r):
    return len({t["candidate"] for t in r["trials"]}), len(r["trials"]), sum(t["steps"] for t in r["trials"])


def narrowed(plan):
    """The space flags that hold one plan ("dp2 tp1 pp1 mbs4 ga1 full fp32 adamw zero3")."""
    words = plan.split()
    num = {w.rstrip("0123456789"): w[len(w.rstrip("0123456789")):] for w in words}
    ckpt = next(w for w in words if w in ("none", "selective", "full"))
    return ["--ranks", num["dp"], "--mbs", num["mbs"], "--ckpt", ckpt, "--zero", num.get("zero", "0")]


def remeasure(bin_, out, runner, plans, steps, rounds=3):
    """Each plan re-measured in the runner's job alternately, `rounds` times (a one-candidate exhaustive tune each)."""
    times = {p: [] for p in plans}
    for k in range(rounds):
        for i, p in enumerate(plans):
            r, _ = tune(bin_, os.path.join(out, f"remeasure-{i}-{k}.db"),
                        runner_args(runner) + narrowed(p) + ["--exhaustive", "--trial-steps", str(steps)])
            m = measured(r)
            times[p].append(m[p] if p in m else min(m.values()))
    return {p: statistics.median(v) for p, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", choices=sorted(RUNNERS), default="hf")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "trainscope"))
    ap.add_argument("--out", default=None, help="default bench/out/runner_pick (hf), bench/out/runner_pick-deepspeed")
    ap.add_argument("--steps", type=int, default=6, help="steps of an exhaustive trial (and of the first round)")
    a = ap.parse_args()
    R = RUNNERS[a.runner]
    name = "HF" if a.runner == "hf" else "DeepSpeed"
    out = a.out or os.path.join(HERE, "out", "runner_pick" + ("" if a.runner == "hf" else "-" + a.runner))
    os.makedirs(out, exist_ok=True)
    steps = ["--trial-steps", str(a.steps)]
    ext = runner_args(a.runner) + R["space"]
    ex, ex_s = tune(a.bin, os.path.join(out, f"{a.runner}-exhaustive.db"), ext + ["--exhaustive"] + steps)
    hs, hs_s = tune(a.bin, os.path.join(out, f"{a.runner}-search.db"), ext + steps)
    native_study = os.path.join(out, "trainscope.db")
    ts, ts_s = tune(a.bin, native_study, R["space"] + steps)

    truth = measured(ex)
    best = min(truth, key=truth.get)
    ext_pick, ts_pick = plan_of(hs, hs["recommended"]), plan_of(ts, ts["recommended"])
    # trainscope's space holds TP and PP too, which the runner rejects: its pick among what the runner can
    # run is the fastest it measured of those (its own pick when the runner can run that).
    ts_measured = measured(ts)
    runnable = {p: v for p, v in ts_measured.items() if p in truth}
    ts_ext = ts_pick if ts_pick in truth else (min(runnable, key=runnable.get) if runnable else None)
    ts_ext_id = next((c["id"] for c in ts["ranked"] if c["plan"] == ts_ext), None)
    # trainscope's pick exported in the runner's format: the file the runner's trial of that plan ran.
    same_args = None
    if ts_ext_id is not None:
        exp = json.loads(subprocess.run([a.bin, "export", native_study, "--format", R["format"], "--trial",
                                         str(ts_ext_id)], check=True, capture_output=True, text=True).stdout)
        ran = [t for t in ex["trials"] if plan_of(ex, t["candidate"]) == ts_ext]
        ran_args = json.load(open(ran[-1]["db"][: -len(".db")] + ".job/" + R["file"]))
        same_args = all(ran_args.get(k) == exp.get(k) for k in R["keys"])
    others = sorted({p for p in (ext_pick, ts_ext) if p and p != best})
    again = remeasure(a.bin, out, a.runner, [best] + others, a.steps) if others else {}
    res = {
        "runner": a.runner, "valid_candidates": ex["valid"], "best": best, "best_s": truth[best],
        "search_pick": ext_pick, "search_pick_s": truth.get(ext_pick),
        "search_vs_best": truth.get(ext_pick, float("nan")) / truth[best],
        "exhaustive_effort": effort(ex), "exhaustive_wall_s": ex_s,
        "search_effort": effort(hs), "search_wall_s": hs_s,
        "trainscope_pick": ts_pick, "trainscope_pick_own_s": ts_measured.get(ts_pick),
        "trainscope_pick_runnable": ts_ext, "trainscope_pick_in_runner_s": truth.get(ts_ext),
        "trainscope_pick_in_runner_vs_best": truth.get(ts_ext, float("nan")) / truth[best],
        "trainscope_effort": effort(ts), "trainscope_wall_s": ts_s,
        "export_is_what_runner_ran": same_args,
        "remeasured": again,
        "ranked_by_step_s": sorted(truth.items(), key=lambda kv: kv[1]),
        "exhaustive_statuses": sorted(t["status"] for t in ex["trials"]),
        "exhaustive_prediction_check": ex.get("prediction_check"),
        "others_cores": LOAD,
    }
    print(json.dumps(res))
    c, t, s = res["exhaustive_effort"]
    print(f"{name} exhaustive: {c} candidates, {t} trials, {s} steps in {ex_s:.0f} s; best {best} "
          f"{1e3 * truth[best]:.1f} ms/step")
    c, t, s = res["search_effort"]
    print(f"{name} search: pick {ext_pick} at {1e3 * (truth.get(ext_pick) or float('nan')):.1f} ms "
          f"(exhaustive measurement) -> {res['search_vs_best']:.3f}x the best; {c} candidates, {t} trials, "
          f"{s} steps in {hs_s:.0f} s ({hs_s / ex_s:.2f}x the exhaustive wall time)")
    c, t, s = res["trainscope_effort"]
    print(f"trainscope runner: pick {ts_pick} ({1e3 * (ts_measured.get(ts_pick) or float('nan')):.1f} ms in "
          f"trainscope; {c} candidates, {t} trials, {s} steps in {ts_s:.0f} s); of what {name} runs: {ts_ext}, in "
          f"{name} {1e3 * (truth.get(ts_ext) or float('nan')):.1f} ms -> "
          f"{res['trainscope_pick_in_runner_vs_best']:.3f}x {name}'s best; same configuration as {name}'s best: "
          f"{ts_ext == best}; export = what {name} ran: {same_args}")
    for p, v in again.items():
        print(f"re-measured in {name} (3 alternating one-candidate tunes, median): {p}: {1e3 * v:.1f} ms")
    print("cores other processes kept busy (of 2): " + ", ".join(f"{s} {c}" for s, c in LOAD))
    for p, v in res["ranked_by_step_s"]:
        print(f"  {1e3 * v:7.1f} ms  {p}")

if __name__ == "__main__":
    main()
