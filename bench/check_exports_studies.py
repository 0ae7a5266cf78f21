"""bench/check_exports_studies.py — the outer side of bench/check_exports.py (any Python 3): the
studies it makes with trainscope (the wider sweeps' flags), their valid candidates, and each one's
exports in every format.
"""

import json
import os
import sqlite3
import subprocess
import sys

# The wider study swept besides the given one: every parallel layout of 1, 2 and 4 ranks.
WIDE = ["--workload", "tiny", "--seq", "16", "--gbs", "8", "--mbs", "1,2", "--ckpt", "none,selective,full",
        "--precision", "fp32,bf16,fp16", "--ranks", "1,2,4", "--trial-steps", "1", "--first-round", "1",
        "--final-rounds", "0", "--mem-limit", "200M"]
# The knobs of issue 22 (ZeRO 0-3, virtual pipeline stages, context parallelism) on a model whose 4
# layers interleave over 2 stages: those the runtime runs are valid candidates and swept.
KNOBS = ["--workload", "small-cpu", "--seq", "16", "--gbs", "8", "--mbs", "1,2", "--ckpt", "none",
         "--precision", "fp32,bf16", "--ranks", "2,4", "--zero", "0,1,2,3", "--cp", "1,2", "--virtual-stages", "1,2",
         "--trial-steps", "1", "--first-round", "1", "--final-rounds", "0", "--mem-limit", "400M"]
# Issue 23: a mixture of experts (8 experts, top-2, capacity 1.25, every other layer) on 2 and 4 ranks,
# ep 1/2/4 with ZeRO 0-2, PP with and without interleaving: Megatron-LM's MoE flags parsed and checked.
MOE = ["--workload", "small-cpu-moe", "--seq", "16", "--gbs", "8", "--mbs", "1,2", "--ckpt", "none,full",
       "--precision", "fp32,bf16", "--ranks", "2,4", "--zero", "0,1,2", "--cp", "1", "--virtual-stages", "1,2",
       "--no-sequence-parallel", "--trial-steps", "1", "--first-round", "1", "--final-rounds", "0",
       "--mem-limit", "400M"]
# Issue 32: a Llama (GQA 4 query / 2 K/V heads, SwiGLU, RoPE, RMSNorm, untied) on 2 and 4 ranks, TP up
# to 4 (K/V heads replicated over TP when tp > 2), PP, ZeRO 0-3.
LLAMA = ["--workload", "small-llama", "--seq", "16", "--gbs", "8", "--mbs", "1,2", "--ckpt", "none,selective",
         "--precision", "fp32,bf16", "--ranks", "2,4", "--zero", "0,1,3", "--cp", "1", "--virtual-stages", "1",
         "--trial-steps", "1", "--first-round", "1", "--final-rounds", "0", "--mem-limit", "400M"]
TINY = ["--workload", "tiny", "--seq", "16", "--gbs", "4", "--mbs", "2", "--ckpt", "selective", "--ranks", "2",
        "--no-sequence-parallel", "--trial-steps", "2", "--first-round", "1", "--final-rounds", "0",
        "--mem-limit", "200M"]
FORMATS = ["run", "megatron", "deepspeed", "training-args", "accelerate-config", "hf-config"]


def export(bin_, study, fmt, trial=None):
    cmd = [bin_, "export", study, "--format", fmt] + ([] if trial is None else ["--trial", str(trial)])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def make_study(bin_, folder, name, flags, need_trial=True):
    """need_trial False: the candidates are enough (export --trial N takes unmeasured ones too)."""
    study = os.path.join(folder, name)
    r = subprocess.run([bin_, "tune", *flags, "--study", study], capture_output=True, text=True)
    if r.returncode != 0 and (need_trial or not os.path.exists(study)):
        sys.exit(f"trainscope tune for {name} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return study


def optional_study(bin_, folder, name, flags):
    """A study of a workload this tree may not tune yet (Llama before the runtime trains it): None."""
    study = os.path.join(folder, name)
    r = subprocess.run([bin_, "tune", *flags, "--study", study], capture_output=True, text=True)
    if r.returncode != 0 and not valid_candidates_or_none(study):
        print(f"skip  {name}: trainscope tune refused it ({r.stderr.strip().splitlines()[-1:]})")
        return None
    return study


def valid_candidates_or_none(study):
    return os.path.exists(study) and valid_candidates(study)


def valid_candidates(study):
    con = sqlite3.connect(f"file:{study}?mode=ro", uri=True)
    try:
        return con.execute("SELECT id, plan FROM candidates WHERE config IS NOT NULL AND "
                           "coalesce(rejected, '') = '' ORDER BY id").fetchall()
    finally:
        con.close()


def export_or_none(bin_, study, fmt, trial):
    """hf-config is refused for a model no Transformers class builds (a GPT-style MoE): None."""
    try:
        return export(bin_, study, fmt, trial)
    except RuntimeError:
        if fmt != "hf-config":
            raise
        return None


def case_of(bin_, study, trial, label):
    c = {f: export_or_none(bin_, study, f, trial) for f in FORMATS}
    c["run"] = json.loads(c["run"])
    c["label"] = label
    return c
