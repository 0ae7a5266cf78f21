#!/usr/bin/env python3
"""calibration_rows.py — the shared measured sets (shared/calibration/*.json) as the JSON lines that
`trainscope calibrate --from` reads: predict --batch's keys (an inline "workload" object for each
shape), "measured_step_s", and "group" (the model and cluster size: cross-validation never splits one).

Sets:
  vtrain-single  vTrain's 1,440 Megatron-LM rows in one node (2-8 A100s)
  vtrain-multi   vTrain's 109 rows on 64-512 A100s
  mpt-80gb       MosaicML's MPT FSDP rows on A100 80 GB
  mpt-40gb       the same on A100 40 GB
  table5         Korthikanti et al. 2022 Table 5 (both recomputation modes)
  table1         Narayanan et al. 2021 Table 1 (mbs 1 or 2, 1F1B assumed, as predict_vs_published.py)

Each set's run settings are the data file's own (run_settings): vTrain full recomputation, fp16,
1F1B, no gradient bucketing (dp_overlap 0), vocabulary 50257; MPT bf16, ZeRO-3 for FULL_SHARD and
ZeRO-2 for SHARD_GRAD_OP, full recomputation where the row says so, vocabulary 50368. Each row says
its attention (ATTENTION; published_sets.py gives the sources): Megatron-LM's unfused attention for
the Megatron-LM sets, flash for MPT — not predict's framework default (a fused flash kernel).

usage: bench/calibration_rows.py SET [--data DIR] [--framework F] [-o FILE]
"""
import argparse
import json
import os
import sys

import published_sets
from common import ROOT, output_file

SETS = ("vtrain-single", "vtrain-multi", "mpt-80gb", "mpt-40gb", "table5", "table1")
DEFAULT_FRAMEWORK = {"vtrain-single": "megatron", "vtrain-multi": "megatron", "table5": "megatron", "table1": "megatron",
                     "mpt-80gb": "fsdp", "mpt-40gb": "fsdp"}
ATTENTION = {"vtrain-single": "unfused", "vtrain-multi": "unfused", "table5": "unfused", "table1": "unfused",
             "mpt-80gb": "flash", "mpt-40gb": "flash"}


def workload(name, layers, heads, hidden, positions, vocab):
    return {"name": name, "n_layer": layers, "n_head": heads, "n_embd": hidden, "n_positions": positions,
            "vocab_size": vocab}


def nodes_of(gpus):
    return max(1, (gpus + 7) // 8)


def vtrain(data, which):
    for r in data["rows"]:
        if r["set"] != which:
            continue
        name = "gpt-h%d-l%d-a%d" % (r["hidden"], r["layers"], r["heads"])
        row = {"workload": workload(name, r["layers"], r["heads"], r["hidden"], max(r["seq"], 1024), 50257),
               "nodes": nodes_of(r["gpus"]), "gpus": r["gpus"], "tp": r["tp"], "pp": r["pp"], "mbs": r["mbs"],
               "gbs": r["gbs"], "seq": r["seq"], "ckpt": "full", "precision": "fp16", "dp_overlap": 0.0,
               "measured_step_s": r["iteration_ms"] / 1000.0, "group": "%s @ %d" % (name, r["gpus"])}
        if r["tp"] > 8:
            row["allow_tp_across_nodes"] = True
        yield row


def mpt(data, gpu):
    for r in data["rows"]:
        if r["gpu"] != gpu:
            continue
        s = data["shapes"][r["model"]]
        name = "mpt-" + r["model"]
        yield {"workload": workload(name, s["n_layers"], s["n_heads"], s["d_model"], max(r["seq"], 2048), s["vocab_size"]),
               "nodes": nodes_of(r["gpus"]), "gpus": r["gpus"], "mbs": r["mbs"], "gbs": r["gbs"], "seq": r["seq"],
               "zero": 3 if r["sharding"] == "FULL_SHARD" else 2, "precision": r["precision"].replace("amp_", ""),
               "ckpt": "full" if r["activation_checkpointing"] else "none",
               "measured_step_s": r["gbs"] * r["seq"] / r["tokens_per_s"],
               "group": "%s @ %d" % (name, r["gpus"])}


def table5(data):
    for r in data["korthikanti2022"]["rows"]:
        for ckpt, sp, key in (("full", False, "table5_full_s"), ("selective", True, "table5_sp_selective_s")):
            name = "k" + r["model"]
            row = {"workload": workload(name, r["layers"], r["heads"], r["hidden"], 2048, 51200),
                   "nodes": nodes_of(r["gpus"]), "gpus": r["gpus"], "tp": r["tp"], "pp": r["pp"], "mbs": r["mbs"],
                   "gbs": r["gbs"], "seq": 2048, "ckpt": ckpt, "precision": "fp16", "sequence_parallel": sp,
                   "measured_step_s": r[key], "group": "%s @ %d" % (name, r["gpus"])}
            if r["pp"] > 1 and r["virtual_stages"] > 1:
                row.update({"pp_schedule": "interleaved", "virtual_stages": r["virtual_stages"]})
            yield row


def table1(data):
    for r in data["narayanan2021"]["rows"]:
        name = "n%gb" % r["params_b"]
        yield {"workload": workload(name, r["layers"], r["heads"], r["hidden"], 2048, 51200),
               "nodes": nodes_of(r["gpus"]), "gpus": r["gpus"], "tp": r["tp"], "pp": r["pp"],
               "mbs": published_sets.table1_mbs(r["heads"], r["tp"]),
               "gbs": r["gbs"], "seq": 2048, "ckpt": "full", "precision": "fp16",
               "measured_step_s": r["iteration_s_derived"], "group": "%s @ %d" % (name, r["gpus"])}


def rows(set_name, data_dir, framework=None):
    if set_name.startswith("vtrain"):
        out = vtrain(json.load(open(os.path.join(data_dir, "vtrain-a100.json"))), set_name.split("-")[1])
    elif set_name.startswith("mpt"):
        out = mpt(json.load(open(os.path.join(data_dir, "mpt-a100.json"))), "a100_" + set_name.split("-")[1])
    else:
        data = json.load(open(os.path.join(data_dir, "published-runs.json")))
        out = table5(data) if set_name == "table5" else table1(data)
    fw = DEFAULT_FRAMEWORK[set_name] if framework is None else framework
    for r in out:
        if fw:
            r["framework"] = fw
        r["attention"] = ATTENTION[set_name]
        yield r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("set", choices=SETS)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(ROOT), "shared", "calibration"))
    ap.add_argument("--framework", default=None, help="every row's --framework (default: the set's)")
    ap.add_argument("-o", default="-", help="output file (default: stdout)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing -o")
    a = ap.parse_args()
    lines = "".join(json.dumps(r) + "\n" for r in rows(a.set, a.data, a.framework))
    if a.o == "-":
        sys.stdout.write(lines)
    else:
        with output_file(a.o, overwrite=a.overwrite) as f:
            f.write(lines)


if __name__ == "__main__":
    sys.exit(main())
