#!/usr/bin/env python3
"""bench/fsdp_cpu_predict.py — the fsdp framework profile against measured CPU FSDP trials (issue 34;
docs/framework-profiles.md, "An external runner's trials").

For each model (examples/hf_trainer.py --model gpt2 | llama: the `tiny` and `tiny-llama` workloads, seq
32, global batch 8) one exhaustive `tune --runner hf` on 2 Gloo ranks of this machine: DDP, FSDP
SHARD_GRAD_OP and FULL_SHARD (the probe's CPU-only cpu_fsdp shim) x micro-batch 1, 2, 4 (4, 2, 1
accumulated), no checkpointing. Each measured candidate is then priced by `trainscope predict
--framework fsdp --cluster cpu-local` (the shipped preset, nothing refitted) and the table printed:
measured, predicted, signed error, and per model the Spearman rank correlation and MAPE, for all
trials and for FSDP's alone; then per FSDP row its step over DDP's at the same micro-batch, measured
against 1 + (predicted FSDP - predicted DDP) / measured DDP (what runner.hf_predict_fsdp asserts) and
against the plain predicted ratio, and the worst of each.

Usage: bench/fsdp_cpu_predict.py [--bin build/bin/trainscope] [--out bench/out/fsdp_cpu_predict]
                                 [--steps 6] [--models gpt2,llama] [--study-only]
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
from common import spearman  # noqa: E402

SCRIPT = os.path.join(ROOT, "examples", "hf_trainer.py")
PROBE = os.path.join(ROOT, "python")
WORKLOAD = {"gpt2": "tiny", "llama": "tiny-llama"}
SPACE = ["--seq", "32", "--gbs", "8", "--ranks", "2", "--mbs", "1,2,4", "--ckpt", "none", "--zero", "0,2,3",
         "--mem-limit", "3G", "--cluster", "cpu-local"]


def plan_fields(plan):
    """"dp2 tp1 pp1 mbs4 ga1 none fp32 adamw zero3" -> {"dp": 2, "mbs": 4, "zero": 3, ...}"""
    out = {}
    for w in plan.split():
        head = w.rstrip("0123456789")
        if head != w:
            out[head] = int(w[len(head):])
    return out


def study(bin_, out, model, steps):
    db = os.path.join(out, f"{model}.db")
    for p in (db, db + "-wal", db + "-shm", db + ".lock"):
        if os.path.exists(p):
            os.remove(p)
    shutil.rmtree(db + ".trials", ignore_errors=True)
    cmd = [bin_, "tune", "--workload", WORKLOAD[model], *SPACE, "--exhaustive", "--trial-steps", str(steps),
           "--runner", "hf", "--python", sys.executable, "--probe", PROBE, "--study", db, "--json",
           "--entry", f"{SCRIPT} --model {model} --seq 32"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tune exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def predicted(bin_, model, f):
    cmd = [bin_, "predict", "--workload", WORKLOAD[model], "--seq", "32", "--gbs", "8", "--gpus", str(f["dp"]), "--precision", "fp32",
           "--mbs", str(f["mbs"]), "--zero", str(f.get("zero", 0)), "--cluster", "cpu-local", "--framework", "fsdp",
           "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"predict exited {p.returncode}: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "trainscope"))
    ap.add_argument("--out", default=os.path.join(HERE, "out", "fsdp_cpu_predict"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--reuse", action="store_true", help="price the studies' JSON kept in --out (no new trials)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for model in a.models.split(","):
        kept = os.path.join(a.out, f"{model}.json")
        if a.reuse and os.path.exists(kept):
            r = json.load(open(kept))
        else:
            r = study(a.bin, a.out, model, a.steps)
            json.dump(r, open(kept, "w"))
        for c in r["ranked"]:
            if not c.get("measured_step_s"):
                continue
            f = dict(plan_fields(c["plan"]), zero=c.get("zero", 0))
            pr = predicted(a.bin, model, f)
            t = pr.get("time", pr)
            rows.append({"model": model, "plan": c["plan"], "zero": f.get("zero", 0), "mbs": f["mbs"],
                         "measured_s": c["measured_step_s"], "predicted_s": t["step_s"],
                         "terms": {k: t[k] for k in ("compute_s", "dp_comm_s", "host_s", "optimizer_s") if k in t}})
    layout = {0: "DDP", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}
    print(f"{'model':6} {'layout':14} {'mbs':>3} {'measured ms':>11} {'predicted ms':>12} {'error':>7}")
    for x in rows:
        err = x["predicted_s"] / x["measured_s"] - 1
        print(f"{x['model']:6} {layout[x['zero']]:14} {x['mbs']:>3} {x['measured_s'] * 1e3:>11.1f} "
              f"{x['predicted_s'] * 1e3:>12.1f} {err * 100:>+6.1f}%  {json.dumps(x['terms'])}")
    summary = {}
    for model in a.models.split(","):
        for name, sel in (("all", lambda x: True), ("fsdp", lambda x: x["zero"] > 0)):
            xs = [x for x in rows if x["model"] == model and sel(x)]
            if len(xs) < 2:
                continue
            mape = sum(abs(x["predicted_s"] / x["measured_s"] - 1) for x in xs) / len(xs)
            rho = spearman([x["predicted_s"] for x in xs], [x["measured_s"] for x in xs])
            summary[f"{model}/{name}"] = {"n": len(xs), "mape": mape, "spearman": rho}
            print(f"{model} {name}: {len(xs)} trials, MAPE {mape * 100:.1f}%, Spearman {rho:.2f}")
    # What FSDP adds to DDP's step at the same micro-batch (runner.hf_predict_fsdp's check): the measured
    # ratio FSDP/DDP against 1 + (predicted FSDP - predicted DDP) / measured DDP, which leaves DDP's own
    # pricing error out; and the plain predicted ratio for comparison.
    ddp = {(x["model"], x["mbs"]): x for x in rows if x["zero"] == 0}
    worst = {}
    for x in rows:
        d = ddp.get((x["model"], x["mbs"]))
        if not x["zero"] or d is None:
            continue
        measured = x["measured_s"] / d["measured_s"]
        added = 1 + (x["predicted_s"] - d["predicted_s"]) / d["measured_s"]
        plain = x["predicted_s"] / d["predicted_s"]
        x["ratio"] = {"measured": measured, "predicted_added": added, "predicted_plain": plain}
        print(f"{x['model']:6} {layout[x['zero']]:14} mbs {x['mbs']}: FSDP/DDP measured {measured:.2f}, "
              f"1 + added/measured DDP {added:.2f} (x{added / measured:.2f}), predicted/predicted {plain:.2f} "
              f"(x{plain / measured:.2f})")
        for k, v in (("added", added / measured), ("plain", plain / measured)):
            if k not in worst or abs(math.log(v)) > abs(math.log(worst[k]["error"])):
                worst[k] = {"error": v, "model": x["model"], "zero": x["zero"], "mbs": x["mbs"]}
    for k, v in worst.items():
        print(f"worst FSDP/DDP ratio error ({k}): x{v['error']:.2f} ({v['model']} {layout[v['zero']]} mbs {v['mbs']})")
    summary["worst_ratio_error"] = worst
    print(json.dumps({"rows": rows, "summary": summary}))


if __name__ == "__main__":
    main()
