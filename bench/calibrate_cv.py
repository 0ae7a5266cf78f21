#!/usr/bin/env python3
"""calibrate_cv.py — k-fold cross-validated error of `trainscope calibrate` per shared measured set
(shared/calibration/*.json, as bench/calibration_rows.py writes them): for each set, the shipped
preset's MAPE, median signed error and within-group Spearman, then the same for the held-out folds
of a calibration (folds by model and cluster size, never by row) and for the fit in sample.

Each set's base cluster is a100-80gb-x8 with what the data file says of its machines: vTrain's
multi-node runs had 800 Gb/s between nodes (12.5 GB/s per GPU), MPT's 40 GB table ran on A100 40 GB
(1,555 GB/s of HBM2). Nothing else is changed before the fit.

  --group-by hidden   fold vTrain's rows by hidden size and GPUs (every layer count of a model
                      family together) instead of by model and GPUs: vTrain's one-node rows are
                      exactly linear in layers and micro-batches per (hidden, tp, mbs) configuration,
                      whose few figures its 12-24-layer models share, so folds by model leave each
                      held-out row's configuration in the training folds (docs/time-model.md,
                      "Where the one-node misses lie").

usage: bench/calibrate_cv.py [--bin build/bin/trainscope] [--sets a,b] [--folds 5] [--fit a,b]
                             [--framework F] [--group-by model|hidden] [--json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import calibration_rows
from common import DEFAULT_BIN, ROOT, output_file

BASE_CHANGES = {
    "vtrain-multi": {"inter_node": {"bandwidth": 12.5e9}},
    # The 40 GB rows ran FSDP mixed_precision PURE: gradients reduced in bf16 (the 80 GB rows DEFAULT:
    # fp32, the profile's own; its two 70b rows were PURE too and are priced in fp32 here).
    "mpt-40gb": {"memory_bytes": 42949672960, "memory_bandwidth": 1.555e12,
                 "frameworks": {"fsdp": {"reduce_bytes": 2}}},
}


# The constants MPT's rows identify (by default, calibrate's --fit otherwise: the constants the rows
# move). The rows are device-bound (micro-batches of 4k-260k tokens): at any physical host cost per op
# (10-100 us) FSDP's host thread is under 3% of a layer's device time in every row, so the host
# constants (dispatch_s, frameworks.fsdp.host_op_s, host_micro_batch_s) move a row only at values no
# eager stack has, and the fit made them a proxy (~400 us per op, or 0 at the bound). They stay at the
# preset's; the collectives' cost is fitted through the tiers and overlap_slowdown.
SET_FIT = {s: ",".join(["frameworks.fsdp.flash_forward_scale", "frameworks.fsdp.flash_backward_scale",
                        "frameworks.fsdp.overlap_slowdown", "memory_efficiency", "sustained_clock",
                        "intra_node.efficiency", "inter_node.efficiency"]) for s in ("mpt-80gb", "mpt-40gb")}


def base_cluster(set_name, workdir):
    preset = json.load(open(os.path.join(ROOT, "models", "clusters", "a100-80gb-x8.json")))
    for key, value in BASE_CHANGES.get(set_name, {}).items():
        if key == "frameworks":
            for fw, consts in value.items():
                preset.setdefault("frameworks", {}).setdefault(fw, {}).update(consts)
        elif isinstance(value, dict):
            preset[key].update(value)
        else:
            preset[key] = value
    preset["name"] = "a100-" + set_name
    path = os.path.join(workdir, set_name + "-base.json")
    with output_file(path, overwrite=True) as f:  # our own temporary folder
        json.dump(preset, f, indent=2)
    return path


def hidden_group(row):
    """"gpt-h1024-l12-a16 @ 8" -> "gpt-h1024 @ 8": the model family (its hidden size) and the GPUs."""
    name, at = row["group"].split(" @ ")
    return "%s @ %s" % (name.split("-l")[0], at)


def calibrate(binary, set_name, workdir, folds, fit, framework, group_by="model"):
    rows = os.path.join(workdir, set_name + ".jsonl")
    groups = set()
    with output_file(rows, overwrite=True) as f:
        for r in calibration_rows.rows(set_name, os.path.join(os.path.dirname(ROOT), "shared", "calibration"), framework):
            if group_by == "hidden" and set_name.startswith("vtrain"):
                r["group"] = hidden_group(r)
            f.write(json.dumps(r) + "\n")
            groups.add(r["group"])
    folds = min(folds, len(groups))  # a set of 4 groups (vTrain's multi-node rows) gets 4 folds
    out = os.path.join(workdir, set_name + "-calibrated.json")
    cmd = [binary, "calibrate", "--cluster", base_cluster(set_name, workdir), "--from", rows, "-o", out,
           "--folds", str(folds), "--overwrite", "--json"]
    if fit:
        cmd += ["--fit", fit]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("calibrate failed on %s: %s\n%s" % (set_name, " ".join(cmd), p.stderr))
    cal = json.loads(p.stdout.strip().splitlines()[-1])
    cal["seconds"] = time.monotonic() - t
    return cal


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--sets", default=",".join(calibration_rows.SETS))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--fit", default="", help="calibrate --fit (default: SET_FIT's for MPT, else the constants the rows move)")
    ap.add_argument("--framework", default=None, help="every row's --framework (default: the set's)")
    ap.add_argument("--group-by", choices=("model", "hidden"), default="model",
                    help="folds of vTrain's rows by model and GPUs (default) or by hidden size and GPUs")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for s in a.sets.split(","):
            results[s] = calibrate(a.bin, s, tmp, a.folds, a.fit or SET_FIT.get(s, ""), a.framework, a.group_by)
    print("%-14s %5s %6s %5s | %-24s | %-24s | %-24s | %s" % ("set", "rows", "groups", "folds", "preset: MAPE  med  rho",
                                                          "cross-validated", "in sample", "fitted"))
    for s, c in results.items():
        def fig(x):
            rho = "%5.2f" % x["spearman_within_group_median"] if x["spearman_groups"] else "    -"
            return "%6.1f%% %+6.1f%% %s" % (x["mape"] * 100, x["median_signed_error"] * 100, rho)
        cv = c.get("cross_validation")
        fitted = ", ".join("%s %.4g" % (k, v["value"]) for k, v in c["fitted"].items())
        print("%-14s %5d %6d %5s | %s | %s | %s | %s (%.0f s)" % (s, c["residuals"]["rows"], c["groups"],
                                                                  cv["folds"] if cv else "-", fig(c["base_residuals"]),
                                                            fig(cv) if cv else "%24s" % "-", fig(c["residuals"]), fitted,
                                                            c["seconds"]))
    if a.json:
        print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
