#!/usr/bin/env python3
"""predict_vs_published.py — `trainscope predict` against every measured set in shared/calibration/
(bench/published_sets.py: Korthikanti et al. 2022 Table 5, Narayanan et al. 2021 Table 1, vTrain's
Megatron-LM runs in one node and across nodes, MosaicML's MPT FSDP rows), with the shipped presets
and framework profiles. All rows go through one `predict --batch` call (one process, JSON lines).

Prints, per set and overall: MAPE, median signed error (predicted / measured - 1), and the median
within-group Spearman rank correlation (a group: the configurations of one model on one cluster
size, groups of 3 rows or more); then the breakdowns the issue reads (by micro-batch, TP, hidden,
sequence, bound) and, with --rows, every row. Table 5 and Table 1 are also listed row by row, with
Figure 1's memory, as before.

Assumptions where the papers leave a knob open (stated again in the output):
  Table 1 rows: micro-batch 1 (2 for 18.4B and 76.1B: published_sets.table1_mbs) and the non-interleaved 1F1B schedule (the table gives neither),
  full recomputation, fp16, sequence 2048, vocabulary 51200.
  Table 5: fp16; 'full' = full recomputation without sequence parallelism, 'sp_selective' = sequence
  parallelism + selective recomputation; 175B and 530B interleaved with 3 model chunks per stage.
  vTrain: --framework megatron, full recomputation, fp16, 1F1B, vocabulary 50257, its 800 Gb/s per
  node; TP 16 with --allow-tp-across-nodes. MPT: --framework fsdp (--fsdp-framework),
  ZeRO-3 (FULL_SHARD), bf16, learned positions and biases (as NumParams says), gradients reduced in bf16 on PURE rows, full recomputation where the row has it.

usage: bench/predict_vs_published.py [--bin build/bin/trainscope] [--json] [--markdown] [--rows SET] [--cv]
                                    [--cv-group-by model|hidden]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import published_sets
from common import DEFAULT_BIN, spearman


def run_batch(binary, workdir, lines):
    """One `predict --batch` over `lines` (dicts of predict's keys): the results in order, each the
    line's JSON result (an "error" key where predict refused it)."""
    path = os.path.join(workdir, "batch.jsonl")
    with open(path, "w") as f:  # our own temporary folder
        for l in lines:
            f.write(json.dumps(l) + "\n")
    t = time.monotonic()
    out = subprocess.run([binary, "predict", "--batch", path], capture_output=True, text=True)
    wall = time.monotonic() - t
    res = [json.loads(x) for x in out.stdout.splitlines() if x.strip().startswith("{")]
    if len(res) != len(lines):
        raise SystemExit("predict --batch gave %d results for %d lines:\n%s" % (len(res), len(lines), out.stderr[-2000:]))
    return res, wall


def median(v):
    v = sorted(v)
    n = len(v)
    return float("nan") if n == 0 else v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def summary(rows):
    """MAPE, median signed error, median within-group Spearman (groups of >= 3 rows) of priced rows."""
    ok = [r for r in rows if "predicted_s" in r]
    errs = [r["predicted_s"] / r["measured_s"] - 1 for r in ok]
    groups = {}
    for r in ok:
        groups.setdefault(r["group"], []).append(r)
    rhos = [spearman([r["measured_s"] for r in g], [r["predicted_s"] for r in g]) for g in groups.values() if len(g) >= 3]
    rhos = [x for x in rhos if x == x]
    return {"rows": len(rows), "priced": len(ok), "mape": sum(abs(e) for e in errs) / max(1, len(errs)),
            "median_signed": median(errs), "spearman_median": median(rhos), "groups": len(rhos)}


SETS = ("table5", "table1", "vtrain-single", "vtrain-multi", "mpt-fsdp")


def fmt(s):
    sp = "%.2f (%d groups)" % (s["spearman_median"], s["groups"]) if s["groups"] else "-"
    return "%5d %6.1f%% %+7.1f%%  %s" % (s["priced"], 100 * s["mape"], 100 * s["median_signed"], sp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--data", default=published_sets.DATA)
    ap.add_argument("--framework", default="megatron", help="--framework of the Megatron-LM sets ('' to leave it out)")
    ap.add_argument("--fsdp-framework", default="fsdp", help="--framework of the MPT FSDP set ('': predict's default)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="the per-set table as Markdown (docs/time-model.md)")
    ap.add_argument("--rows", default="", help="print every row of this set")
    ap.add_argument("--cv", action="store_true",
                    help="then the k-fold cross-validated calibration per set (bench/calibrate_cv.py, calib's)")
    ap.add_argument("--cv-group-by", choices=("model", "hidden"), default="model",
                    help="--cv's folds of vTrain's rows: by model and GPUs, or by hidden size and GPUs (calibrate_cv.py)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sets = published_sets.Sets(tmp, a.data, a.framework, a.fsdp_framework)
        rows = sets.published() + sets.vtrain() + sets.mpt()
        # Figure 1's memory: Table 5's rows with no recomputation, and with SP + selective.
        fig = [r for r in rows if r["set"] == "table5"]
        fig_lines = []
        for r in fig:
            l = dict(r["line"])
            l["ckpt"], l["sequence_parallel"] = ("none", False) if r["label"].endswith("full") else ("selective", True)
            fig_lines.append(l)
        res, wall = run_batch(a.bin, tmp, [r["line"] for r in rows] + fig_lines)
        fig_res = res[len(rows):]
        for r, p in zip(rows, res):
            if "error" in p:
                r["error"] = p["error"]
                continue
            r["predicted_s"] = p["time"]["step_s"]
            r["bound"] = p["time"].get("bound", "")
            r["mfu"] = p.get("mfu", 0)
            r["result"] = p
    print("%d rows priced by one predict --batch in %.2f s (%.2f ms a row)" % (len(res), wall, 1000 * wall / len(res)))
    for n in sets.notes:
        print("  note: " + n)
    print()
    # Table 5 and Table 1, row by row.
    print("Korthikanti et al. 2022, Table 5 (s/iteration)")
    for r in rows:
        if r["set"] == "table5" and "predicted_s" in r:
            print("  %-18s %9.2f %9.2f %6.1f%%   %s" % (r["label"], r["measured_s"], r["predicted_s"],
                                                       100 * (r["predicted_s"] / r["measured_s"] - 1), r["bound"]))
    print("Figure 1, first stage, GiB: parameters + optimizer (layers only) | activations (TP only / SP+selective)")
    d = json.load(open(os.path.join(a.data, "published-runs.json")))
    gib = float(1 << 30)
    for i, r in enumerate(d["korthikanti2022"]["rows"]):
        plain, sel = fig_res[2 * i], fig_res[2 * i + 1]
        if "error" in plain or "error" in sel:
            continue
        s0, t0 = plain["stages"][0], sel["stages"][0]
        po = s0.get("megatron_params_opt_bytes", s0["params_bytes"] + s0["grads_bytes"] + s0["optimizer_bytes"]) / gib
        print("  %5s %8.2f / %8.2f (%5.1f%%) | %6.2f / %6.2f | %6.2f / %6.2f" % (
            r["model"], r["fig1_params_opt_gib"], po, 100 * (po / r["fig1_params_opt_gib"] - 1), r["fig1_act_tp_only_gib"],
            s0["megatron_activations_bytes"] / gib, r["fig1_act_sp_selective_gib"], t0["megatron_activations_bytes"] / gib))
    print("Narayanan et al. 2021, Table 1 (s/iteration); assumed mbs 1 (2 where b*heads/tp would miss the fused softmax), 1F1B")
    for r in rows:
        if r["set"] == "table1" and "predicted_s" in r:
            print("  %-18s %9.2f %9.2f %6.1f%%   %s" % (r["label"], r["measured_s"], r["predicted_s"],
                                                       100 * (r["predicted_s"] / r["measured_s"] - 1), r["bound"]))
    worst = {s: max([abs(r["predicted_s"] / r["measured_s"] - 1) for r in rows if r["set"] == s and "predicted_s" in r] or [0])
             for s in ("table5", "table1")}
    print("worst row: Table 5 %.1f%%, Table 1 %.1f%%" % (100 * worst["table5"], 100 * worst["table1"]))
    print()
    failed = [r for r in rows if "error" in r]
    if failed:
        print("%d rows refused by predict (first: %s: %s)" % (len(failed), failed[0]["label"], failed[0]["error"]))
    # SETS, then any further MPT tables the data folder holds (published_sets.Sets.mpt).
    sets_seen = SETS + tuple(sorted({r["set"] for r in rows} - set(SETS)))
    summaries = {s: summary([r for r in rows if r["set"] == s]) for s in sets_seen}
    summaries["overall"] = summary(rows)
    print("%-14s %5s %7s %8s  %s" % ("set", "rows", "MAPE", "median", "within-group Spearman (median)"))
    for s in sets_seen + ("overall",):
        print("%-14s %s" % (s, fmt(summaries[s])))
    if a.markdown:
        print()
        print("| set | rows | MAPE | median signed error | within-group Spearman (median, groups) |")
        print("|---|---|---|---|---|")
        for s in sets_seen + ("overall",):
            x = summaries[s]
            sp = "%.2f (%d)" % (x["spearman_median"], x["groups"]) if x["groups"] else "-"
            print("| %s | %d | %.1f%% | %+.1f%% | %s |" % (s, x["priced"], 100 * x["mape"], 100 * x["median_signed"], sp))
    print()
    print("median signed error by key (the issue's breakdowns):")
    for s, keys in (("vtrain-single", ("mbs", "tp", "hidden")), ("vtrain-multi", ("tp",))) + \
            tuple((m, ("gpu", "seq", "model")) for m in sets_seen if m.startswith("mpt")):
        for k in keys:
            by = {}
            for r in rows:
                if r["set"] == s and "predicted_s" in r:
                    by.setdefault(r[k], []).append(r["predicted_s"] / r["measured_s"] - 1)
            print("  %-13s %-6s " % (s, k) + "  ".join("%s:%+.0f%%(%d)" % (v, 100 * median(e), len(e)) for v, e in sorted(by.items())))
    bounds = {}
    for r in rows:
        if "predicted_s" in r:
            bounds.setdefault((r["set"], r["bound"]), 0)
            bounds[(r["set"], r["bound"])] += 1
    print("  bound: " + ", ".join("%s %s: %d" % (s, b, n) for (s, b), n in sorted(bounds.items())))
    if a.rows:
        for r in rows:
            if r["set"] == a.rows and "predicted_s" in r:
                print("  %-50s %10.4f %10.4f %+6.1f%% %s" % (r["label"], r["measured_s"], r["predicted_s"],
                                                           100 * (r["predicted_s"] / r["measured_s"] - 1), r["bound"]))
    if a.cv:
        cv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibrate_cv.py")
        if not os.path.exists(cv):
            print("--cv: bench/calibrate_cv.py is not in this tree (it comes with `trainscope calibrate`)")
        else:
            print()
            sys.stdout.flush()
            subprocess.run([sys.executable, cv, "--bin", a.bin, "--group-by", a.cv_group_by])
    if a.json:
        for r in rows:
            r.pop("result", None)
        print(json.dumps({"summaries": summaries, "rows": rows}))


if __name__ == "__main__":
    sys.exit(main())
