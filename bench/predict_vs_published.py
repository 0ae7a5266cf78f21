#!/usr/bin/env python3
"""predict_vs_published.py — `trainscope predict` against the published Megatron-LM runs in
shared/calibration/published-runs.json (Korthikanti et al. 2022 Table 5 and Figure 1; Narayanan et
al. 2021 Table 1), on the a100-80gb-x8 cluster preset. Prints, per row, predicted vs published
iteration time (and Figure 1's memory), the error, then the mean |error| and the Spearman rank
correlation per table.

Assumptions where the papers leave a knob open (stated again in the output):
  Table 1 rows: micro-batch 1 and the non-interleaved 1F1B schedule (the table gives neither),
  full recomputation, fp16, sequence 2048, vocabulary 51200.
  Table 5: fp16; 'full' = full recomputation without sequence parallelism, 'sp_selective' = sequence
  parallelism + selective recomputation; 175B and 530B interleaved with 3 model chunks per stage.

usage: bench/predict_vs_published.py [--bin build/bin/trainscope] [--data PATH] [--json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from common import DEFAULT_BIN, ROOT, output_file


def spearman(xs, ys):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r
    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (vx * vy) if vx and vy else float("nan")


def predict(binary, workdir, name, heads, hidden, layers, tp, pp, gpus, mbs, gbs, ckpt, sp, vstages, framework):
    wl = os.path.join(workdir, name + ".json")
    with output_file(wl, overwrite=True) as f:  # our own temporary folder: rewritten per call
        json.dump({"name": name, "n_layer": layers, "n_head": heads, "n_embd": hidden, "n_positions": 2048,
                   "vocab_size": 51200}, f)
    nodes = max(1, (gpus + 7) // 8)
    cmd = [binary, "predict", "--workload", wl, "--cluster", "a100-80gb-x8", "--nodes", str(nodes),
           "--gpus", str(gpus), "--tp", str(tp), "--pp", str(pp), "--mbs", str(mbs), "--gbs", str(gbs),
           "--seq", "2048", "--ckpt", ckpt, "--precision", "fp16", "--json"]
    if framework:
        cmd += ["--framework", framework]
    if sp:
        cmd.append("--sequence-parallel")
    if pp > 1 and vstages > 1:
        cmd += ["--pp-schedule", "interleaved", "--virtual-stages", str(vstages)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("predict failed: " + " ".join(cmd) + "\n" + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(ROOT), "shared", "calibration", "published-runs.json"))
    ap.add_argument("--framework", default="megatron", help="passed to predict --framework ('' to leave it out)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    data = json.load(open(a.data))
    results = {"table5": [], "table1": []}
    with tempfile.TemporaryDirectory() as tmp:
        print("Korthikanti et al. 2022, Table 5 (s/iteration) and Figure 1 (GiB, first stage)")
        print(f"{'model':>6} {'mode':>13} {'published':>9} {'predicted':>9} {'error':>7}   {'bound':<10}")
        for r in data["korthikanti2022"]["rows"]:
            for mode, ckpt, sp, key in (("full", "full", False, "table5_full_s"),
                                        ("sp+selective", "selective", True, "table5_sp_selective_s")):
                p = predict(a.bin, tmp, "k" + r["model"], r["heads"], r["hidden"], r["layers"], r["tp"], r["pp"], r["gpus"],
                            r["mbs"], r["gbs"], ckpt, sp, r["virtual_stages"], a.framework)
                pred = p["time"]["step_s"]
                e = pred / r[key] - 1
                results["table5"].append({"model": r["model"], "mode": mode, "published": r[key], "predicted": pred, "error": e,
                                          "bound": p["time"].get("bound", "")})
                print(f"{r['model']:>6} {mode:>13} {r[key]:9.2f} {pred:9.2f} {e*100:6.1f}%   {p['time'].get('bound', ''):<10}")
        print()
        print("Figure 1, first stage, GiB: parameters + optimizer (Megatron-LM, layers only) and activations")
        print(f"{'model':>6} {'params+opt':>10} {'predicted':>9} {'error':>7} | {'act TP':>8} {'predicted':>9} | "
              f"{'act SP+sel':>10} {'predicted':>9}")
        results["figure1"] = []
        gib = float(1 << 30)
        for r in data["korthikanti2022"]["rows"]:
            plain = predict(a.bin, tmp, "k" + r["model"], r["heads"], r["hidden"], r["layers"], r["tp"], r["pp"], r["gpus"],
                            r["mbs"], r["gbs"], "none", False, r["virtual_stages"], a.framework)
            sel = predict(a.bin, tmp, "k" + r["model"], r["heads"], r["hidden"], r["layers"], r["tp"], r["pp"], r["gpus"],
                          r["mbs"], r["gbs"], "selective", True, r["virtual_stages"], a.framework)
            s0, t0 = plain["stages"][0], sel["stages"][0]
            po = s0.get("megatron_params_opt_bytes", s0["params_bytes"] + s0["grads_bytes"] + s0["optimizer_bytes"]) / gib
            e = po / r["fig1_params_opt_gib"] - 1
            results["figure1"].append({"model": r["model"], "params_opt": po, "published": r["fig1_params_opt_gib"], "error": e,
                                       "act_tp": s0["megatron_activations_bytes"] / gib,
                                       "act_sp_selective": t0["megatron_activations_bytes"] / gib})
            print(f"{r['model']:>6} {r['fig1_params_opt_gib']:10.2f} {po:9.2f} {e*100:6.1f}% | {r['fig1_act_tp_only_gib']:8.2f} "
                  f"{s0['megatron_activations_bytes']/gib:9.2f} | {r['fig1_act_sp_selective_gib']:10.2f} "
                  f"{t0['megatron_activations_bytes']/gib:9.2f}")
        rows = results["table5"]
        full = {x["model"]: x for x in rows if x["mode"] == "full"}
        sel = {x["model"]: x for x in rows if x["mode"] != "full"}
        print("speed-up of SP+selective over full (published / predicted):")
        for m in full:
            pub = full[m]["published"] / sel[m]["published"]
            pre = full[m]["predicted"] / sel[m]["predicted"]
            print(f"  {m:>5}: {pub:.3f} / {pre:.3f}  ({pre - pub:+.3f})")
        mae5 = sum(abs(x["error"]) for x in rows) / len(rows)
        print(f"Table 5: mean |error| {mae5*100:.1f}%, max {max(abs(x['error']) for x in rows)*100:.1f}%, Spearman "
              f"{spearman([x['published'] for x in rows], [x['predicted'] for x in rows]):.3f}")
        print()
        print("Narayanan et al. 2021, Table 1 (s/iteration, derived from TFLOP/s per GPU); assumed mbs 1, 1F1B")
        print(f"{'params':>7} {'tp':>3} {'pp':>3} {'gpus':>5} {'published':>9} {'predicted':>9} {'error':>7}   "
              f"TFLOP/s per GPU published / predicted")
        for r in data["narayanan2021"]["rows"]:
            p = predict(a.bin, tmp, "n%g" % r["params_b"], r["heads"], r["hidden"], r["layers"], r["tp"], r["pp"], r["gpus"],
                        1, r["gbs"], "full", False, 1, a.framework)
            pred = p["time"]["step_s"]
            e = pred / r["iteration_s_derived"] - 1
            # The table's own FLOP count (recomputation included) over the predicted time.
            tflops = r["tflops_per_gpu"] * r["iteration_s_derived"] / pred
            results["table1"].append({"params_b": r["params_b"], "published": r["iteration_s_derived"], "predicted": pred, "error": e,
                                      "tflops_published": r["tflops_per_gpu"], "tflops_predicted": tflops})
            print(f"{r['params_b']:>6}B {r['tp']:>3} {r['pp']:>3} {r['gpus']:>5} {r['iteration_s_derived']:9.2f} {pred:9.2f} {e*100:6.1f}%   "
                  f"{r['tflops_per_gpu']:5.0f} / {tflops:5.1f}")
        rows = results["table1"]
        mae1 = sum(abs(x["error"]) for x in rows) / len(rows)
        print(f"Table 1: mean |error| {mae1*100:.1f}%, max {max(abs(x['error']) for x in rows)*100:.1f}%, Spearman "
              f"{spearman([x['published'] for x in rows], [x['predicted'] for x in rows]):.3f}")
    if a.json:
        print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
