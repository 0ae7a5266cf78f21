"""published_sets.py — the measured sets bench/predict_vs_published.py compares `trainscope predict`
with, each row as the `predict --batch` line that prices it (shared/calibration/):

  table5        Korthikanti et al. 2022, Table 5 (Megatron-LM, A100, full and SP+selective recomputation)
  table1        Narayanan et al. 2021, Table 1 (Megatron-LM, A100, derived from TFLOP/s per GPU)
  vtrain-single vTrain's 1,440 Megatron-LM runs in one A100 node, 2-8 GPUs (Bang et al., MICRO 2024)
  vtrain-multi  vTrain's 109 Megatron-LM runs on 64-512 A100s (800 Gb/s per node between nodes)
  mpt-fsdp      MosaicML llm-foundry's 139 MPT throughput rows, PyTorch FSDP on A100 80 GB and 40 GB

Each row states the attention its run used ("attention" in its line), so that predict's framework
default (a fused flash kernel: Megatron-LM runs Transformer Engine's with --attention-backend auto
today) does not decide it: the Megatron-LM sets ran Megatron-LM's unfused attention (the s×s scores
materialised, its fused scale-mask-softmax kernel; Korthikanti et al.'s Table 2 counts their 5as²b/t,
and Narayanan et al. 2021 and vTrain's Megatron-DeepSpeed of 2022-2023 predate flash attention in
Megatron-LM or leave its --use-flash-attn off), the MPT set flash attention (its run_settings).

A row is {"set", "group", "measured_s", "line": predict --batch keys, "label"}. The group is one
model on one cluster size (the issue's definition for the within-group Spearman). Cluster files
that differ from a preset in a published fact only (vTrain's 800 Gb/s per node; A100 40 GB's memory
and HBM bandwidth) are written into `workdir` and named in `notes`.
"""
import copy
import json
import os
import re

from common import ROOT

DATA = os.path.join(os.path.dirname(ROOT), "shared", "calibration")
if not os.path.isdir(DATA):  # a worktree beside the shared folder's parent
    DATA = os.path.join(os.path.dirname(os.path.dirname(ROOT)), "shared", "calibration")
# The presets predict reads (TRAINSCOPE_CLUSTERS moves them, as it moves predict's).
PRESET = os.path.join(os.environ.get("TRAINSCOPE_CLUSTERS") or os.path.join(ROOT, "models", "clusters"), "a100-80gb-x8.json")


def table1_mbs(heads, tp):
    """Table 1 gives no micro-batch: 1, or the least power of two that puts b * heads / tp on a
    multiple of 4 - Megatron-LM's fused softmax constraint (fused_softmax.py, attn_batches % 4); at
    b = 1 the 18.4B row (48 heads over TP 8) would run PyTorch's fp32 softmax, 27 % over its
    measured time, so the published run cannot have taken that path."""
    b = 1
    while (b * heads // tp) % 4:
        b *= 2
    return b


def _write(path, obj):
    with open(path, "w") as f:  # our own temporary folder, rewritten per run
        json.dump(obj, f)
    return path


class Sets:
    def __init__(self, workdir, data=DATA, framework_megatron="megatron", framework_fsdp=""):
        self.workdir, self.data = workdir, data
        self.fw_meg, self.fw_fsdp = framework_megatron, framework_fsdp
        self.notes = []
        self._workloads = {}
        base = json.load(open(PRESET))
        # vTrain's runs: 800 Gb/s per node between nodes (its config/validation files), 12.5 GB/s a GPU.
        vt = copy.deepcopy(base)
        vt["name"] = "a100-80gb-x8-800gbps"
        vt["inter_node"]["bandwidth"] = 800e9 / 8 / 8
        self.vtrain_cluster = _write(os.path.join(workdir, "a100-800gbps.json"), vt)
        self._mpt_clusters = {}
        self.notes.append("vtrain: a100-80gb-x8 with inter_node.bandwidth 12.5e9 (vTrain's 800 Gb/s per node)")

    def mpt_cluster(self, gpu, precision, table="", where="an mpt row"):
        """The cluster file an MPT row of `gpu` ("a100_80gb", "a100_40gb", "h100_80gb") ran on: the
        GPU's preset (A100 40 GB: a100-40gb-x8, the 80 GB preset with CUDA's 40,536 MiB and 1,555 GB/s
        HBM2). Its "bf16" rows ran Composer's FSDP mixed_precision PURE (gradients reduced in bf16:
        the fsdp profile's reduce_bytes 2), its "amp_bf16" and "amp_fp8" rows DEFAULT (reduce_dtype fp32):
        the MP Mode column of llm-foundry's benchmarking tables; amp_fp8 (Transformer Engine's FP8 linears
        under Composer) is priced as `predict --precision fp8`. The node-to-node rate, where the row's table names
        one ("... with 1600 Gbps node-node interconnect"), is that rate over the node's 8 GPUs."""
        key = (gpu, precision, table)
        if key in self._mpt_clusters:
            return self._mpt_clusters[key]
        presets = {"a100_80gb": "a100-80gb-x8", "a100_40gb": "a100-40gb-x8", "h100_80gb": "h100-80gb-x8",
                   "h200": "h200-x8", "h200_141gb": "h200-x8"}
        if gpu not in presets:
            raise SystemExit("%s: gpu %r has no cluster preset here; use one of %s" % (where, gpu, ", ".join(sorted(presets))))
        if precision not in ("bf16", "amp_bf16", "amp_fp8"):
            raise SystemExit("%s: precision %r is none of bf16 (FSDP PURE), amp_bf16 or amp_fp8 (DEFAULT)" % (where, precision))
        if precision == "amp_fp8" and not presets[gpu].startswith("h"):
            raise SystemExit("%s: precision amp_fp8 on %s, which has no FP8 tensor cores" % (where, gpu))
        c = json.load(open(os.path.join(os.path.dirname(PRESET), presets[gpu] + ".json")))
        changed = []
        if precision == "bf16":
            c.setdefault("frameworks", {}).setdefault("fsdp", {})["reduce_bytes"] = 2
            changed.append("frameworks.fsdp.reduce_bytes 2 (FSDP mixed_precision PURE)")
        m = re.search(r"(\d+)\s*Gbps node-node", table or "")
        if m and c.get("devices_per_node", 8) > 0:
            per_gpu = float(m.group(1)) * 1e9 / 8 / c.get("devices_per_node", 8)
            if abs(per_gpu - c["inter_node"]["bandwidth"]) > 1:
                c["inter_node"]["bandwidth"] = per_gpu
                changed.append("inter_node.bandwidth %.4g (%s Gb/s per node)" % (per_gpu, m.group(1)))
        if not changed:
            self._mpt_clusters[key] = presets[gpu]
            return presets[gpu]
        c["name"] = "%s-%s-%d" % (presets[gpu], precision, len(self._mpt_clusters))
        path = _write(os.path.join(self.workdir, "mpt-%d.json" % len(self._mpt_clusters)), c)
        self.notes.append("mpt %s %s rows: %s with %s" % (gpu, precision, presets[gpu], "; ".join(changed)))
        self._mpt_clusters[key] = path
        return path

    def workload(self, name, layers, heads, hidden, seq, vocab, **arch):
        spec = {"name": name, "n_layer": layers, "n_head": heads, "n_embd": hidden, "n_positions": seq,
                "vocab_size": vocab, **arch}
        key = json.dumps(spec, sort_keys=True)
        if key not in self._workloads:
            self._workloads[key] = _write(os.path.join(self.workdir, "w%d.json" % len(self._workloads)), spec)
        return self._workloads[key]

    def _megatron(self, line):
        if self.fw_meg:
            line["framework"] = self.fw_meg
        line["attention"] = "unfused"  # what the published Megatron-LM runs ran (module docstring)
        # Their interleaved schedule's sends were blocking (batch_isend_irecv, then a synchronize):
        # Megatron-LM's overlap_p2p_comm, today's default, came in 2023.
        if line.get("pp_schedule") == "interleaved" and self.fw_meg == "megatron":
            line["no_overlap_p2p_comm"] = True
        return line

    def published(self):
        """Table 5 (both modes) and Table 1 rows."""
        d = json.load(open(os.path.join(self.data, "published-runs.json")))
        rows = []
        for r in d["korthikanti2022"]["rows"]:
            for mode, ckpt, sp, key in (("full", "full", False, "table5_full_s"),
                                        ("sp+selective", "selective", True, "table5_sp_selective_s")):
                wl = self.workload("k" + r["model"], r["layers"], r["heads"], r["hidden"], 2048, 51200)
                line = {"workload": wl, "cluster": "a100-80gb-x8", "nodes": max(1, (r["gpus"] + 7) // 8),
                        "gpus": r["gpus"], "tp": r["tp"], "pp": r["pp"], "mbs": r["mbs"], "gbs": r["gbs"],
                        "seq": 2048, "ckpt": ckpt, "precision": "fp16", "sequence_parallel": sp}
                if r["pp"] > 1 and r["virtual_stages"] > 1:
                    line["pp_schedule"], line["virtual_stages"] = "interleaved", r["virtual_stages"]
                rows.append({"set": "table5", "group": "table5 " + mode, "measured_s": r[key],
                             "line": self._megatron(line), "label": "%s %s" % (r["model"], mode)})
        for r in d["narayanan2021"]["rows"]:
            wl = self.workload("n%g" % r["params_b"], r["layers"], r["heads"], r["hidden"], 2048, 51200)
            line = {"workload": wl, "cluster": "a100-80gb-x8", "nodes": max(1, (r["gpus"] + 7) // 8),
                    "gpus": r["gpus"], "tp": r["tp"], "pp": r["pp"], "mbs": table1_mbs(r["heads"], r["tp"]), "gbs": r["gbs"], "seq": 2048,
                    "ckpt": "full", "precision": "fp16"}
            rows.append({"set": "table1", "group": "table1", "measured_s": r["iteration_s_derived"],
                         "line": self._megatron(line), "label": "%gB" % r["params_b"]})
        return rows

    def vtrain(self):
        d = json.load(open(os.path.join(self.data, "vtrain-a100.json")))
        rows = []
        for r in d["rows"]:
            wl = self.workload("v%d-%d-%d" % (r["hidden"], r["layers"], r["heads"]), r["layers"], r["heads"], r["hidden"],
                               r["seq"], 50257)
            line = {"workload": wl, "cluster": self.vtrain_cluster, "nodes": max(1, (r["gpus"] + 7) // 8),
                    "gpus": r["gpus"], "tp": r["tp"], "pp": r["pp"], "mbs": r["mbs"], "gbs": r["gbs"], "seq": r["seq"],
                    "ckpt": "full", "precision": "fp16"}
            if r["tp"] > 8:
                line["allow_tp_across_nodes"] = True
            rows.append({"set": "vtrain-" + r["set"], "measured_s": r["iteration_ms"] / 1000.0,
                         "group": "h%d L%d s%d gpus%d" % (r["hidden"], r["layers"], r["seq"], r["gpus"]),
                         "line": self._megatron(line),
                         "label": "h%d L%d s%d tp%d pp%d dp%d mbs%d gbs%d" % (r["hidden"], r["layers"], r["seq"], r["tp"],
                                                                              r["pp"], r["dp"], r["mbs"], r["gbs"]),
                         "mbs": r["mbs"], "tp": r["tp"], "hidden": r["hidden"]})
        return rows

    def mpt(self):
        """llm-foundry's MPT throughput rows: mpt-a100.json as the set "mpt-fsdp", and any other
        mpt-*.json of the same form in the data folder (another GPU's table) as its own set, "mpt-" and
        the file's suffix (mpt-h100.json: "mpt-h100"), each row on its GPU's preset (mpt_cluster)."""
        names = sorted(f for f in os.listdir(self.data) if f.startswith("mpt-") and f.endswith(".json"))
        rows = []
        for name in names:
            rows += self._mpt_file(name, "mpt-fsdp" if name == "mpt-a100.json" else name[:-len(".json")])
        return rows

    def _mpt_file(self, name, set_name):
        d = json.load(open(os.path.join(self.data, name)))
        rows = []
        for i, r in enumerate(d["rows"]):
            s = d["shapes"][r["model"]]
            # Learned positions and biases, not the run_settings' "ALiBi, no biases": each row's NumParams
            # is L(12h² + 13h) + Vh + 2h + seq·h exactly (a wpe of max_seq_len rows; 9h of linear biases
            # a layer), as MPTConfig's defaults (alibi False, no_bias False) and the yamls give.
            wl = self.workload("mpt-" + r["model"], s["n_layers"], s["n_heads"], s["d_model"], r["seq"], s["vocab_size"])
            cluster = self.mpt_cluster(r["gpu"], r["precision"], r.get("table", ""), "%s row %d" % (name, i))
            line = {"workload": wl, "cluster": cluster, "nodes": max(1, r["gpus"] // 8), "gpus": r["gpus"],
                    "mbs": r["mbs"], "gbs": r["gbs"], "seq": r["seq"],
                    "precision": "fp8" if r["precision"] == "amp_fp8" else "bf16",
                    "ckpt": "full" if r["activation_checkpointing"] else "none",
                    "zero": 3 if r["sharding"] == "FULL_SHARD" else 2, "attention": "flash"}
            if self.fw_fsdp:
                line["framework"] = self.fw_fsdp
            rows.append({"set": set_name, "measured_s": r["gbs"] * r["seq"] / r["tokens_per_s"],
                         "group": "%s %s gpus%d" % (r["gpu"], r["model"], r["gpus"]), "line": line,
                         "label": "%s %s seq%d gpus%d mbs%d" % (r["gpu"], r["model"], r["seq"], r["gpus"], r["mbs"]),
                         "seq": r["seq"], "gpu": r["gpu"], "model": r["model"]})
        return rows
