#!/usr/bin/env python3
"""bench/check_exports.py — trainscope's study exports read by the targets' own code.

Every check runs the target's own parser or constructor, from its PyPI package, in a scratch virtual
environment (the targets need torch and Python >= 3.12; trainscope's /opt venv is left as it is):

  megatron           megatron-core 0.19.2, which ships Megatron-LM's megatron/training/arguments.py.
                     (megatron-core wheels up to 0.16.1 hold megatron/core only: 0.1-0.3, 0.5-0.8,
                     0.10, 0.12, 0.14, 0.15.3, 0.16.0 and 0.16.1 looked at; 0.17.0, 0.18.0 and 0.19.2
                     ship megatron/training/ too, declared for Python >= 3.12; PyPI has no megatron-lm.
                     The cpu suite's exports.megatron_parser runs these same checks on the project
                     venv's Python 3.11: 0.19.2's sources run there given typing.override.)
                     sys.argv = pretrain_gpt.py + the flags, then parse_args(ignore_unknown_args=
                     False) as pretrain_gpt.py calls it (every flag known, every value of its type and
                     among its choices, abbreviations refused), validate_args with WORLD_SIZE = dp x cp
                     x tp x pp (Megatron-LM's consistency checks; on a machine without a GPU it is told
                     sm90, Hopper, and CUDA_DEVICE_MAX_CONNECTIONS=1 is set as Megatron-LM's launch
                     scripts do, which TP needs before Blackwell), every parsed value against the run,
                     gbs / (mbs x dp) = GA, core_transformer_config_from_args (the TransformerConfig
                     the model is built from), and build_tokenizer with NullTokenizer (padded
                     vocabulary = this runtime's, a multiple of TP).
  deepspeed          deepspeed 0.19.8: DeepSpeedConfig(config, mpu=<data-parallel size dp>) (batch
                     arithmetic and sanity checks; zero_optimization, fp16 and bf16 go through its
                     pydantic models, which refuse unknown keys); every other key must be read by that
                     code (the dict is traced), pipeline keys be get_pipeline_config's; the optimizer
                     built by DeepSpeedEngine._configure_basic_optimizer (FusedAdam here) and the
                     scheduler by _scheduler_from_config, the engine's own code, WarmupCosineLR stepped
                     to the end (peak lr, cos_min_ratio x lr at the end, within two warm-up increments
                     of this runtime's lr at every step). For the recommendation (pp 1) also a real
                     deepspeed.initialize(config=FILE) on dp CPU processes and two training steps.
  training-args      transformers 5.24.0: HfArgumentParser(TrainingArguments).parse_json_file(FILE,
                     allow_extra_keys=False), the optimizer from Trainer.get_optimizer_cls_and_kwargs,
                     the scheduler from get_scheduler as Trainer.create_scheduler calls it (stepped to
                     the end, as above).
  accelerate-config  accelerate 1.15.0: load_config_from_file (ClusterConfig.from_yaml_file refuses
                     unknown keys) and accelerate launch's own argument handling (launch_command_parser
                     + _validate_launch_command). For the recommendation (a CPU config) also a real
                     launch: dp processes (torchrun around accelerate launch when dp > 1: Accelerate
                     starts MULTI_CPU processes only through mpirun), each reading the training-args
                     with TrainingArguments inside it: distributed type, process count, precision.

It makes a one-candidate study of the tiny workload (one 2-step trial), or takes STUDY, and checks its
recommendation as above; then it exports every valid candidate of that study, of a wider tiny
study (1, 2 and 4 ranks: dp, TP, PP, sequence parallelism, ZeRO 0-3, GPipe, fp32/bf16/fp16, every
checkpointing; only its first candidate is tried, for 1 step) and of a small-cpu study of issue 22's
knobs (2 and 4 ranks, ZeRO 0-3, virtual stages 1-2, cp 1-2: those the runtime runs are valid) and of a
small-cpu-moe study (issue 23: ep 1/2/4 over 2 and 4 ranks, ZeRO 0-2, PP and interleaving; Megatron-LM's
MoE arguments checked as parsed against the workload file, and the TransformerConfig's experts), and
runs the parser checks on each (once per distinct input). ZeRO stages carry DeepSpeed's bucket
sizes, ZeRO-2/3 the Accelerate and TrainingArguments FSDP settings; Megatron-LM's
context_parallel_size and virtual_pipeline_model_parallel_size are checked as parsed. SGD, Adafactor and 8-bit Adam are not in tune's space, so not swept; a GPU
study's Accelerate config is not launched (no GPU here).
Issue 32 (bench/check_exports_arch.py): every Megatron-LM export's architecture flags against the
workload file, through megatron-core's TransformerConfig built from the parsed arguments (heads,
query groups, kv_channels, ffn size, norm and epsilon, SwiGLU, biases, experts) and the parsed
position embedding, RoPE base and scaling, untied head; megatron-core's RotaryEmbedding from those
flags has transformers' inv_freq for the exported config.json; hf-config (the config.json the
DeepSpeed / Accelerate / TrainingArguments exports write beside them) loaded by
transformers.AutoConfig.from_pretrained agrees with the workload's preset and builds a model of the
same parameter count. A small-llama study (GQA 4/2 on 2 and 4 ranks: tp 1, 2 and 4 > n_kv_head) is
swept once `trainscope tune` runs Llama-family workloads; until then it is skipped, saying why.
One line per check: ok / FAIL / skip (a target not importable) / note. Exit 1 on any FAIL.

Usage:
  bench/check_exports.py --setup [VENV]   make the scratch venv (default /tmp/exports-venv) with the
                                          pinned versions (PINS below; ~5 GB with torch's CUDA
                                          libraries) and build DeepSpeed's CPU ops (a few minutes)
  bench/check_exports.py [--python VENV/bin/python] [--bin build/bin/trainscope] [--no-sweep] [STUDY]
--python defaults to /tmp/exports-venv/bin/python when it exists, else this interpreter (whose
missing targets are skipped). Takes 3-5 minutes, most of it the sweep (--no-sweep: ~1).
"""
import argparse
import concurrent.futures
import contextlib
import glob
import io
import json
import math
import os
import shlex
import socket
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import output_file  # noqa: E402  (the rule of every trainscope output)
import check_exports_arch as arch  # noqa: E402  (issue 32: the architecture in the exports)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_VENV = "/tmp/exports-venv"
# What --setup installs (2026-12-02). torch first: DeepSpeed's setup.py imports it.
PINS_TORCH = ["torch==2.11.0"]
PINS = ["megatron-core==0.19.2", "deepspeed==0.19.8", "transformers==5.24.0", "accelerate==1.15.0"]

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
MEGATRON_ARCH = 9  # the GPU architecture Megatron's validate_args is told on a machine without one
FORMATS = ["run", "megatron", "deepspeed", "training-args", "accelerate-config", "hf-config"]


# ---------------------------------------------------------------------------------------------
# Outer: trainscope's studies and exports (any Python 3).

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


def setup(venv):
    py = None
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))
    for cand in ["python3.12", "python3.13", *pyenv]:
        r = subprocess.run(["bash", "-c", f"command -v {cand} && {cand} -c 'import sys; "
                            "assert sys.version_info >= (3, 12)'"], capture_output=True, text=True)
        if r.returncode == 0:
            py = r.stdout.split()[0]
            break
    if py is None:
        sys.exit("--setup: needs a Python >= 3.12 (megatron-core's wheels with megatron/training/)")
    subprocess.run([py, "-m", "venv", venv], check=True)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + PINS_TORCH, check=True)
    subprocess.run(pip + PINS, check=True, env=dict(os.environ, DS_BUILD_OPS="0"))
    # DeepSpeed's CPU ops (fused_adam, shm comm) are JIT-built on first use (~3 min): build them now.
    print("building DeepSpeed's CPU ops (one deepspeed.initialize; a few minutes the first time)")
    subprocess.run([os.path.join(venv, "bin", "python"), os.path.abspath(__file__), "--warm-up"], check=True)
    print(f"ready: bench/check_exports.py --python {venv}/bin/python")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "trainscope"))
    default_py = os.path.join(DEFAULT_VENV, "bin", "python")
    ap.add_argument("--python", default=default_py if os.path.exists(default_py) else sys.executable,
                    help="the scratch venv's python, where the targets are installed")
    ap.add_argument("--setup", nargs="?", const=DEFAULT_VENV, metavar="VENV",
                    help="create the scratch venv with the pinned versions and exit")
    ap.add_argument("--no-sweep", action="store_true", help="check the recommendation only")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    ap.add_argument("--ds-rank", help=argparse.SUPPRESS)
    ap.add_argument("--warm-up", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--accelerate-probe", help=argparse.SUPPRESS)
    ap.add_argument("study", nargs="?")
    a = ap.parse_args()
    if a.setup:
        return setup(a.setup)
    if a.inner:
        return inner(a.inner)
    if a.ds_rank:
        return ds_rank(a.ds_rank)
    if a.warm_up:
        return warm_up()
    if a.accelerate_probe:
        return accelerate_probe(a.accelerate_probe)
    with tempfile.TemporaryDirectory() as folder:
        study = a.study or make_study(a.bin, folder, "study.db", TINY)
        rec = case_of(a.bin, study, None, "recommendation")
        run = rec["run"]
        print(f"study {study}: recommendation dp {run['dp']} tp {run['tp']} pp {run['pp']} mbs {run['mbs']} "
              f"ga {run['ga']} {run['precision']} zero {run['zero']} ckpt {run['ckpt']}")
        manifest = {"recommendation": rec, "sweep": []}
        if not a.no_sweep:
            studies = [("", study)] + ([] if a.study else [("wide ", make_study(a.bin, folder, "wide.db", WIDE, False)),
                                                           ("knobs ", make_study(a.bin, folder, "knobs.db", KNOBS,
                                                                                 False)),
                                                           ("moe ", make_study(a.bin, folder, "moe.db", MOE, False)),
                                                           ("llama ", optional_study(a.bin, folder, "llama.db", LLAMA))])
            studies = [(tag, s) for tag, s in studies if s]
            jobs = [(s, cid, f"{tag}c{cid} {plan}") for tag, s in studies for cid, plan in valid_candidates(s)]
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                manifest["sweep"] = list(pool.map(lambda j: case_of(a.bin, *j), jobs))
            print(f"sweep: {len(jobs)} valid candidates of {len(studies)} studies, each exported in "
                  f"{len(FORMATS)} formats")
        path = os.path.join(folder, "manifest.json")
        with output_file(path) as f:
            json.dump(manifest, f)
        return subprocess.run([a.python, os.path.abspath(__file__), "--inner", path]).returncode


# ---------------------------------------------------------------------------------------------
# Inner: the targets' own code (the scratch venv's Python).

failures = []


def check(problems, what):
    print(("ok    " if not problems else "FAIL  ") + what + ("" if not problems else ": " + "; ".join(problems)),
          flush=True)
    if problems:
        failures.append(what)


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def want(problems, name, got, expected):
    ok = close(got, expected) if isinstance(expected, float) and isinstance(got, (int, float)) else got == expected
    if not ok:
        problems.append(f"{name} {got!r} != {expected!r}")


class Captured(contextlib.ExitStack):
    """The targets' banners (stdout) and warnings (stderr) around a call, kept for the report."""

    def __enter__(self):
        super().__enter__()
        self.out, self.err = io.StringIO(), io.StringIO()
        self.enter_context(contextlib.redirect_stdout(self.out))
        self.enter_context(contextlib.redirect_stderr(self.err))
        return self


def version(dist):
    from importlib.metadata import version as v, PackageNotFoundError
    try:
        return v(dist)
    except PackageNotFoundError:
        return None


# -- Megatron-LM --------------------------------------------------------------------------------

def megatron_problems(text, run, hf_config=None):
    from megatron.training.arguments import parse_args, validate_args, core_transformer_config_from_args
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer
    import torch
    import megatron.training.arguments as margs
    world = run["dp"] * run.get("cp", 1) * run["tp"] * run["pp"]
    saved = {k: os.environ.get(k) for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "CUDA_DEVICE_MAX_CONNECTIONS")}
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")  # what parse_args reads
    if not torch.cuda.is_available():
        # validate_args asks the GPU's architecture when TP > 1; answer Hopper (9), whose rules are
        # the stricter: TP needs CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM's launch scripts set.
        margs.get_device_arch_version = lambda: MEGATRON_ARCH
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    sys.argv = ["pretrain_gpt.py"] + shlex.split(text)
    try:
        return megatron_args_problems(run, parse_args, validate_args, core_transformer_config_from_args,
                                      build_tokenizer, hf_config)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def megatron_moe_expected(run):
    """The parsed MoE arguments the run's workload file asks for ({} for a dense workload)."""
    spec = run.get("workload_spec") or ""
    if not spec.endswith(".json") or not os.path.exists(spec):
        spec = os.path.join(ROOT, "workloads", run["workload"] + ".json")
    if not os.path.exists(spec):
        return {}
    with open(spec) as f:
        w = json.load(f)
    if not w.get("n_experts"):
        return {}
    cf = w.get("capacity_factor", 0)
    e = {"num_experts": w["n_experts"], "moe_router_topk": w.get("top_k", 2), "moe_layer_freq": w.get("moe_every", 1),
         "moe_ffn_hidden_size": w.get("moe_ffn_hidden") or 4 * w["n_embd"],
         "expert_model_parallel_size": run.get("ep", 1), "expert_tensor_parallel_size": 1,
         "moe_token_dispatcher_type": "alltoall", "moe_router_load_balancing_type": "aux_loss",
         "moe_aux_loss_coeff": w.get("aux_loss_coeff", 0.0), "moe_expert_capacity_factor": cf if cf > 0 else None}
    if cf > 0:
        e["moe_token_drop_policy"] = "position"
    if w.get("z_loss_coeff"):
        e["moe_z_loss_coeff"] = w["z_loss_coeff"]
    return e


def importable(mod):
    import importlib.util
    return importlib.util.find_spec(mod) is not None


def workload_file(run):
    spec = run.get("workload_spec") or ""
    return spec if spec.endswith(".json") and os.path.exists(spec) else os.path.join(ROOT, "workloads",
                                                                                      run["workload"] + ".json")


def megatron_args_problems(run, parse_args, validate_args, core_transformer_config_from_args, build_tokenizer,
                           hf_config=None):
    p = []
    with Captured() as cap:
        try:
            args = parse_args(ignore_unknown_args=False)
        except SystemExit:
            return [f"parse_args refused the flags: {cap.err.getvalue().strip().splitlines()[-1:]}"]
        try:
            validate_args(args, {})
        except (AssertionError, ValueError, RuntimeError) as e:
            return [f"validate_args refused them: {e!r}"]
    prec = run["precision"]
    ckpt = {"none": None, "selective": "selective", "full": "full"}[run["ckpt"]]
    expected = {"num_layers": run["n_layer"], "hidden_size": run["n_embd"], "num_attention_heads": run["n_head"],
                "seq_length": run["seq"], "max_position_embeddings": run["n_positions"],
                "vocab_size": run["vocab_size"], "tensor_model_parallel_size": run["tp"],
                "pipeline_model_parallel_size": run["pp"], "data_parallel_size": run["dp"],
                "micro_batch_size": run["mbs"], "global_batch_size": run["gbs"], "lr": run["lr"],
                "min_lr": run["lr"] * run["min_lr_ratio"], "lr_decay_style": "cosine",
                "lr_warmup_iters": run["warmup"], "train_iters": run["steps"], "weight_decay": run["weight_decay"],
                "clip_grad": run["clip"], "adam_beta1": run["beta1"], "adam_beta2": run["beta2"],
                "adam_eps": run["eps"], "seed": run["seed"], "bf16": prec in ("bf16", "fp8"), "fp16": prec == "fp16",
                "recompute_granularity": ckpt, "sequence_parallel": bool(run["sequence_parallel"]),
                "use_distributed_optimizer": run["zero"] >= 1, "hidden_dropout": 0.0, "attention_dropout": 0.0,
                "optimizer": "sgd" if run["optimizer"] == "sgd" else "adam",
                "context_parallel_size": run.get("cp", 1),
                "virtual_pipeline_model_parallel_size": run.get("virtual_stages", 1) if run.get("virtual_stages", 1) > 1
                else None}
    if prec == "fp16":
        expected["initial_loss_scale"] = float(run["fp16_init_scale"])
    # fp8 trains in bf16 with Transformer Engine's delayed-scaling HYBRID recipe (this runtime's: amax
    # history 16, the max of it, margin 0; runtime/src/model/fp8.h).
    if prec == "fp8":
        expected.update(fp8="hybrid", fp8_recipe="delayed", fp8_margin=0, fp8_amax_history_len=16,
                        fp8_amax_compute_algo="max")
    else:
        expected["fp8"] = None
    expected.update(megatron_moe_expected(run))
    for k, v in expected.items():
        want(p, k, getattr(args, k), v)
    want(p, "micro-batches (gbs / (mbs x dp))", args.global_batch_size // (args.micro_batch_size *
                                                                          args.data_parallel_size), run["ga"])
    if not importable("transformer_engine"):
        args.apply_rope_fusion = False  # Transformer Engine's RoPE kernel (a GPU's), not the model
    try:
        with Captured():
            tc = core_transformer_config_from_args(args)
        want(p, "TransformerConfig.num_layers", tc.num_layers, run["n_layer"])
        want(p, "TransformerConfig.recompute_granularity", tc.recompute_granularity, ckpt)
        want(p, "TransformerConfig.sequence_parallel", tc.sequence_parallel, bool(run["sequence_parallel"]))
        want(p, "TransformerConfig.fp8", tc.fp8, expected["fp8"])
        w = arch.preset(workload_file(run))
        p += arch.megatron_arch_problems(args, tc, arch.architecture(w))
        if args.position_embedding_type == "rope" and hf_config is not None:
            p += arch.rope_problems(args, tc, arch.hf_config_problems(hf_config, w)[1])
        if "num_experts" in expected:
            want(p, "TransformerConfig.num_moe_experts", tc.num_moe_experts, expected["num_experts"])
            want(p, "TransformerConfig.expert_model_parallel_size", tc.expert_model_parallel_size,
                 expected["expert_model_parallel_size"])
    except Exception as e:
        p.append(f"core_transformer_config_from_args refused them: {e!r}")
    try:
        args.tokenizer_type = "NullTokenizer"
        with Captured():
            build_tokenizer(args)
        tp = run["tp"]
        want(p, "padded vocab (NullTokenizer)", args.padded_vocab_size, -(-run["vocab_size"] // tp) * tp)
    except Exception as e:
        p.append(f"build_tokenizer(NullTokenizer) refused them: {e!r}")
    return p


# -- DeepSpeed ----------------------------------------------------------------------------------

class Traced(dict):
    """A config dict that records which keys DeepSpeed's code reads (by [], get or in)."""

    def __init__(self, d, path, seen):
        super().__init__({k: Traced(v, path + (k,), seen) if isinstance(v, dict) else v for k, v in d.items()})
        self.__dict__.update(path=path, seen=seen)

    def __getitem__(self, k):
        self.seen.add(self.path + (k,))
        return super().__getitem__(k)

    def get(self, k, default=None):
        if k in self.keys():
            self.seen.add(self.path + (k,))
        return super().get(k, default)

    def __contains__(self, k):
        if k in self.keys():
            self.seen.add(self.path + (k,))
        return super().__contains__(k)

    def __reduce_ex__(self, protocol):  # copy.copy keeps the trace
        return (Traced, (dict(self), self.path, self.seen))


class DataParallelMpu:
    """What DeepSpeedConfig asks of an mpu: the data-parallel world size (Megatron-DeepSpeed's and
    the pipeline engine's grid answer it the same way)."""

    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_data_parallel_rank(self):
        return 0


def walk(d, path=()):
    for k, v in d.items():
        yield path + (k,)
        if isinstance(v, dict) and k not in ("params",):
            yield from walk(v, path + (k,))


def deepspeed_problems(text, run):
    import torch
    import deepspeed.runtime.config as dsc
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config, DeepSpeedBF16Config
    p = []
    d = json.loads(text)
    seen = set()
    real_get_rank = dsc.dist.get_rank
    dsc.dist.get_rank = lambda *a, **k: 0  # no process group here: rank 0, the mpu gives dp
    try:
        with Captured():
            cfg = dsc.DeepSpeedConfig(Traced(d, (), seen), mpu=DataParallelMpu(run["dp"]))
    except Exception as e:
        return [f"DeepSpeedConfig refused it: {e!r}"]
    finally:
        dsc.dist.get_rank = real_get_rank
    # Keys: read by DeepSpeedConfig, or validated by a pydantic model that forbids extra keys.
    models = {"zero_optimization": DeepSpeedZeroConfig, "fp16": DeepSpeedFP16Config, "bf16": DeepSpeedBF16Config}
    for name, model in models.items():
        if model.model_config.get("extra") != "forbid":
            p.append(f"{model.__name__} no longer forbids unknown keys: {name} unchecked")
    pipeline_keys = set(dsc.get_pipeline_config({}))
    for path in walk(d):
        if path in seen or (len(path) == 2 and path[0] in models):
            continue
        if len(path) == 2 and path[0] == "pipeline" and path[1] in pipeline_keys:
            continue
        p.append(f"key {'.'.join(path)} is read by no DeepSpeed code")
    want(p, "train_batch_size", cfg.train_batch_size, run["gbs"])
    want(p, "train_micro_batch_size_per_gpu", cfg.train_micro_batch_size_per_gpu, run["mbs"])
    want(p, "gradient_accumulation_steps", cfg.gradient_accumulation_steps, run["ga"])
    want(p, "zero stage", cfg.zero_optimization_stage, run["zero"])
    if run["zero"] >= 1:  # the bucket sizes the models price (models/zero.h), as DeepSpeed read them
        z = cfg.zero_config
        want(p, "zero reduce_bucket_size", z.reduce_bucket_size, 500000000)
        want(p, "zero allgather_bucket_size", z.allgather_bucket_size, 500000000)
        want(p, "zero overlap_comm", z.overlap_comm, True)
        want(p, "zero contiguous_gradients", z.contiguous_gradients, run["zero"] >= 2)
    if run["zero"] == 3:
        want(p, "stage3_prefetch_bucket_size", z.prefetch_bucket_size, 50000000)
        want(p, "stage3_param_persistence_threshold", z.param_persistence_threshold, 100000)
        want(p, "stage3_max_live_parameters", z.max_live_parameters, 1000000000)
    want(p, "fp16", cfg.float16_config.enabled, run["precision"] == "fp16")
    want(p, "bf16", cfg.bfloat16_config.enabled, run["precision"] == "bf16")
    want(p, "gradient_clipping", cfg.gradient_clipping, run["clip"])
    if run["pp"] > 1:
        want(p, "pipeline stages", cfg.pipeline["stages"], run["pp"])
    # The engine's own optimizer and scheduler construction, on an engine with only this config.
    eng = DeepSpeedEngine.__new__(DeepSpeedEngine)
    eng.__dict__.update(_config=cfg, client_optimizer=None, zenflow=False, has_moe_layers=False)
    model = torch.nn.Linear(4, 4)
    try:
        with Captured():
            opt = eng._configure_basic_optimizer(model.parameters())
    except Exception as e:
        return p + [f"DeepSpeedEngine._configure_basic_optimizer refused the optimizer: {e!r}"]
    g = opt.param_groups[0]
    want(p, "optimizer lr", g["lr"], run["lr"])
    want(p, "optimizer weight_decay", g["weight_decay"], run["weight_decay"])
    if run["optimizer"] != "sgd":
        want(p, "optimizer betas", tuple(g["betas"]), (run["beta1"], run["beta2"]))
        want(p, "optimizer eps", g["eps"], run["eps"])
    try:
        with Captured():
            sched = eng._scheduler_from_config(opt)
    except Exception as e:
        return p + [f"DeepSpeedEngine._scheduler_from_config refused the scheduler: {e!r}"]
    applied = [opt.param_groups[0]["lr"]]  # the engine steps the scheduler after each optimizer step
    for _ in range(run["steps"]):
        sched.step()
        applied.append(opt.param_groups[0]["lr"])
    return p + schedule_problems(type(sched).__name__, applied, run)


def runtime_lr(step, run):
    """This runtime's schedule (runtime/src/optim/optim.cpp, learningRate) for 0-based step."""
    lr, total, warmup, min_lr = run["lr"], run["steps"], run["warmup"], run["lr"] * run["min_lr_ratio"]
    if step < warmup:
        return lr * (step + 1) / warmup
    if total - warmup <= 1:
        return lr
    return min_lr + 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup - 1))) * (lr - min_lr)


def schedule_problems(name, applied, run):
    """applied[s]: the lr the target's scheduler gives step s (0-based), applied[steps]: after the last.
    The same shape as this runtime's: a peak of lr after the warm-up, cos_min_ratio x lr at the end,
    and at most two warm-up increments (lr/warmup each) off this runtime's lr at any step (the
    targets' warm-ups start from 0, this runtime's from lr/warmup)."""
    p = []
    lr, steps = run["lr"], run["steps"]
    peak = max(applied[:steps])
    if not lr * (1 - 1e-3) <= peak <= lr * (1 + 1e-12):
        p.append(f"{name}: peak lr {peak} is not lr {lr}")
    if not close(applied[steps], lr * run["min_lr_ratio"], 1e-9):
        p.append(f"{name}: lr after the last step {applied[steps]} != {lr * run['min_lr_ratio']}")
    off = max(abs(applied[s] - runtime_lr(s, run)) for s in range(steps))
    if off > 2 * lr / max(1, run["warmup"]) * (1 + 1e-9):
        p.append(f"{name}: {off:.3g} off this runtime's lr at some step (more than two warm-up increments)")
    return p


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ds_rank(path):
    """One rank of the real deepspeed.initialize check: prints a JSON summary on its last line."""
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import deepspeed
    cfg = json.load(open(path))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    eng, opt, _, sched = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=path)
    for _ in range(2 * eng.gradient_accumulation_steps()):
        x = torch.randn(cfg["train_micro_batch_size_per_gpu"], 8)
        if eng.bfloat16_enabled():
            x = x.bfloat16()
        loss = eng(x).float().sum()
        eng.backward(loss)
        eng.step()
    print(json.dumps({"train_batch_size": eng.train_batch_size(), "ga": eng.gradient_accumulation_steps(),
                      "zero": eng.zero_optimization_stage(), "optimizer": type(eng.optimizer).__name__,
                      "scheduler": type(sched).__name__, "global_steps": eng.global_steps,
                      "world": deepspeed.comm.get_world_size()}))
    return 0


def deepspeed_initialize_problems(text, run, folder):
    path = os.path.join(tempfile.mkdtemp(dir=folder), "deepspeed.json")  # one per case: the sweep checks many
    with output_file(path) as f:
        f.write(text)
    port = str(free_port())
    procs = []
    for r in range(run["dp"]):
        env = dict(os.environ, WORLD_SIZE=str(run["dp"]), RANK=str(r), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, PYTHONWARNINGS="ignore")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--ds-rank", path], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    p, optimizer = [], None
    for r, pr in enumerate(procs):
        try:
            out, _ = pr.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            pr.kill()
            out, _ = pr.communicate()
        if pr.returncode != 0:
            tail = [line for line in out.strip().splitlines() if line.strip()][-3:]
            p.append(f"rank {r} exited {pr.returncode}: {' | '.join(tail)}")
            continue
        s = json.loads(out.strip().splitlines()[-1])
        if r == 0:
            want(p, "engine world", s["world"], run["dp"])
            want(p, "engine train_batch_size", s["train_batch_size"], run["gbs"])
            want(p, "engine gradient_accumulation_steps", s["ga"], run["ga"])
            want(p, "engine zero stage", s["zero"], run["zero"])
            want(p, "engine scheduler", s["scheduler"], "WarmupCosineLR")
            want(p, "engine global_steps after 2 steps", s["global_steps"], 2)
            optimizer = s["optimizer"]
    return p, optimizer


def warm_up():
    """--setup's last step: one deepspeed.initialize, so DeepSpeed JIT-builds its CPU ops now."""
    cfg = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
           "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "warmup_num_steps": 1}}}
    with tempfile.TemporaryDirectory() as folder:
        p, _ = deepspeed_initialize_problems(json.dumps(cfg), {"dp": 1, "gbs": 1, "ga": 1, "zero": 1}, folder)
    print("DeepSpeed's CPU ops built" if not p else f"warm-up failed: {p}")
    return 1 if p else 0


# -- Transformers -------------------------------------------------------------------------------

def training_args_problems(text, run, folder):
    import torch
    from transformers import HfArgumentParser, TrainingArguments, Trainer, get_scheduler
    p = []
    path = os.path.join(tempfile.mkdtemp(dir=folder), "training_args.json")  # one per case: the sweep checks many
    with output_file(path) as f:
        f.write(text)
    try:
        with Captured():
            (t,) = HfArgumentParser(TrainingArguments).parse_json_file(path, allow_extra_keys=False)
    except Exception as e:
        return [f"HfArgumentParser(TrainingArguments).parse_json_file refused it: {e!r}"]
    prec = run["precision"]
    want(p, "per_device_train_batch_size", t.per_device_train_batch_size, run["mbs"])
    want(p, "gradient_accumulation_steps", t.gradient_accumulation_steps, run["ga"])
    want(p, "gradient_checkpointing", t.gradient_checkpointing, run["ckpt"] != "none")
    want(p, "bf16", t.bf16, prec == "bf16")
    want(p, "fp16", t.fp16, prec == "fp16")
    want(p, "max_steps", t.max_steps, run["steps"])
    want(p, "seed", t.seed, run["seed"])
    # ZeRO-2/3 as FSDP 1's SHARD_GRAD_OP / FULL_SHARD: what TrainingArguments hands Accelerate's plugin.
    fsdp = {2: "shard_grad_op", 3: "full_shard"}.get(run["zero"]) if run["dp"] > 1 else None
    if fsdp == "full_shard" and 0 < run.get("zero_shard_size", 0) < run["dp"]:
        fsdp = "hybrid_shard"  # ZeRO-3 sharded in groups of zero_shard_size (--zero-shard-size)
    want(p, "fsdp", bool(t.fsdp), bool(fsdp))
    if fsdp:
        plugin = t.fsdp_plugin_args or {}
        want(p, "fsdp_plugin_args fsdp_version", plugin.get("fsdp_version"), 1)
        want(p, "fsdp_plugin_args reshard_after_forward", plugin.get("reshard_after_forward"), fsdp)
        want(p, "fsdp_plugin_args transformer_cls_names_to_wrap", plugin.get("transformer_cls_names_to_wrap"),
             "GPT2Block")
    try:
        cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(t)
        opt = cls(torch.nn.Linear(4, 4).parameters(), **kwargs)
    except Exception as e:
        return p + [f"Trainer.get_optimizer_cls_and_kwargs refused optim {t.optim}: {e!r}"]
    g = opt.param_groups[0]
    want(p, "optimizer lr", g["lr"], run["lr"])
    if "betas" in g:
        want(p, "optimizer betas", tuple(g["betas"]), (run["beta1"], run["beta2"]))
        want(p, "optimizer eps", g["eps"], run["eps"])
    try:
        sched = get_scheduler(t.lr_scheduler_type, optimizer=opt, num_warmup_steps=t.get_warmup_steps(t.max_steps),
                              num_training_steps=t.max_steps, scheduler_specific_kwargs=t.lr_scheduler_kwargs)
    except Exception as e:
        return p + [f"get_scheduler refused {t.lr_scheduler_type} {t.lr_scheduler_kwargs}: {e!r}"]
    applied = [opt.param_groups[0]["lr"]]  # Trainer steps the scheduler after each optimizer step
    for _ in range(t.max_steps):
        opt.step()
        sched.step()
        applied.append(opt.param_groups[0]["lr"])
    return p + schedule_problems(f"get_scheduler({t.lr_scheduler_type.value})", applied, run)


# -- Accelerate ---------------------------------------------------------------------------------

def accelerate_problems(text, run, folder):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.commands.launch import launch_command_parser, _validate_launch_command
    p = []
    path = os.path.join(tempfile.mkdtemp(dir=folder), "accelerate.yaml")  # one per case: the sweep checks many
    with output_file(path) as f:
        f.write(text)
    try:
        cfg = load_config_from_file(path)
    except Exception as e:
        return [f"load_config_from_file refused it: {e!r}"]
    if not isinstance(cfg, ClusterConfig):
        p.append(f"loaded as {type(cfg).__name__}, not ClusterConfig")
    fsdp = {2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}.get(run["zero"]) if run["dp"] > 1 else None
    if fsdp == "FULL_SHARD" and 0 < run.get("zero_shard_size", 0) < run["dp"]:
        fsdp = "HYBRID_SHARD"  # ZeRO-3 sharded in groups of zero_shard_size (--zero-shard-size)
    want_type = "NO" if run["dp"] == 1 else "FSDP" if fsdp else ("MULTI_CPU" if cfg.use_cpu else "MULTI_GPU")
    want(p, "distributed_type", str(cfg.distributed_type).split(".")[-1], want_type)
    if fsdp:
        want(p, "fsdp_sharding_strategy", (cfg.fsdp_config or {}).get("fsdp_sharding_strategy"), fsdp)
    want(p, "num_processes", cfg.num_processes, run["dp"])
    want(p, "mixed_precision", str(cfg.mixed_precision), "no" if run["precision"] == "fp32" else run["precision"])
    try:
        with Captured():
            args = launch_command_parser().parse_args(["--config_file", path, "train.py"])
            args, _, _ = _validate_launch_command(args)
    except (Exception, SystemExit) as e:
        return p + [f"accelerate launch --config_file refused it: {e!r}"]
    want(p, "launch num_processes", args.num_processes, run["dp"])
    want(p, "launch mixed_precision", args.mixed_precision, "no" if run["precision"] == "fp32" else run["precision"])
    want(p, "launch use_cpu", bool(args.use_cpu), bool(cfg.use_cpu))
    return p


def accelerate_probe(training_args_path):
    """Inside `accelerate launch`: what Accelerate and TrainingArguments make of the launch."""
    import warnings
    warnings.filterwarnings("ignore")
    from accelerate import PartialState
    from transformers import HfArgumentParser, TrainingArguments
    out = {}
    try:
        (t,) = HfArgumentParser(TrainingArguments).parse_json_file(training_args_path, allow_extra_keys=False)
        out.update(t_world=t.world_size, t_device=t.device.type, t_parallel=str(t.parallel_mode).split(".")[-1])
    except Exception as e:
        out["t_error"] = repr(e)
    st = PartialState()
    out.update(rank=st.process_index, processes=st.num_processes, type=str(st.distributed_type).split(".")[-1],
               device=st.device.type, mixed_precision=os.environ.get("ACCELERATE_MIXED_PRECISION"))
    print("PROBE " + json.dumps(out), flush=True)
    return 0


def launched(cmd, folder, timeout=300):
    """Runs a launcher in its own process group (a timeout ends all of it); its probes' reports."""
    pr = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"), start_new_session=True)
    try:
        out, err = pr.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(pr.pid, 9)
        out, err = pr.communicate()
        err += f"\ntimed out after {timeout} s"
    probes = [json.loads(line[6:]) for line in out.splitlines() if line.startswith("PROBE ")]
    tail = [x for x in (out + err).strip().splitlines() if x.strip()][-3:]
    return pr.returncode, sorted(probes, key=lambda q: q["rank"]), tail


def accelerate_launch_problems(case, folder):
    """The recommendation's accelerate-config launched for real, with its training-args read inside.
    Returns (problems, how it was launched, a note or None); None when it cannot run here."""
    run = case["run"]
    yaml_path, ta_path = os.path.join(folder, "launch.yaml"), os.path.join(folder, "launch_args.json")
    with output_file(yaml_path) as f:
        f.write(case["accelerate-config"])
    with output_file(ta_path) as f:
        f.write(case["training-args"])
    from accelerate.commands.config.config_args import load_config_from_file
    cpu = bool(load_config_from_file(yaml_path).use_cpu)
    if not cpu:
        return None  # a GPU config: no GPU here
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", yaml_path]
    probe = [os.path.abspath(__file__), "--accelerate-probe", ta_path]
    note = None
    how = "accelerate launch --config_file FILE"
    cmd = launch + probe
    if run["dp"] > 1:
        # Accelerate starts MULTI_CPU processes only through mpirun (mpirun_hostfile); alone it runs one.
        rc, probes, _ = launched(cmd, folder, timeout=120)
        note = (f"accelerate launch --config_file FILE alone started {len(probes)} process(es) "
                f"({probes[0]['type'] if probes else '?'}), not {run['dp']}: Accelerate launches MULTI_CPU "
                f"processes through mpirun only")
        port = str(free_port())
        how = (f"torchrun --nproc_per_node {run['dp']} --master_port P -m accelerate.commands.launch "
               f"--config_file FILE --main_process_port P")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(run["dp"]),
               "--master_port", port] + launch[1:] + ["--main_process_port", port] + probe
    rc, probes, tail = launched(cmd, folder)
    p = []
    if rc != 0 or len(probes) != run["dp"]:
        return [f"{how}: exit {rc}, {len(probes)} process(es) reported: {' | '.join(tail)}"], how, note
    want_type = "NO" if run["dp"] == 1 else "MULTI_CPU"
    mp = "no" if run["precision"] == "fp32" else run["precision"]
    for q in probes:
        want(p, f"rank {q['rank']} distributed_type", q["type"], want_type)
        want(p, f"rank {q['rank']} processes", q["processes"], run["dp"])
        want(p, f"rank {q['rank']} mixed precision", q["mixed_precision"], mp)
        if "t_error" in q:
            p.append(f"rank {q['rank']}: TrainingArguments refused the training-args: {q['t_error']}")
        else:
            want(p, f"rank {q['rank']} TrainingArguments world_size", q["t_world"], run["dp"])
            want(p, f"rank {q['rank']} TrainingArguments device", q["t_device"], "cpu")
    return p, how, note


# -- the checks, in order -----------------------------------------------------------------------

def inner(manifest_path):
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    with open(manifest_path) as f:
        manifest = json.load(f)
    have = {}
    for fmt, dist, mod in [("megatron", "megatron-core", "megatron.training.arguments"),
                           ("hf-config", "transformers", "transformers"),
                           ("deepspeed", "deepspeed", "deepspeed"),
                           ("training-args", "transformers", "transformers"),
                           ("accelerate-config", "accelerate", "accelerate")]:
        try:
            with Captured():
                __import__(mod)
            have[fmt] = f"{dist} {version(dist)}"
        except Exception as e:  # ImportError, or a package too old or too new for this Python
            print(f"skip  {fmt}: {mod} is not importable with {sys.executable} ({e!r}); "
                  f"make the scratch venv: bench/check_exports.py --setup")
    print(f"python {sys.version.split()[0]} ({sys.executable}); torch {version('torch')}; "
          + "; ".join(f"{k}: {v}" for k, v in have.items()), flush=True)
    rec = manifest["recommendation"]
    run = rec["run"]
    checks = {
        "megatron": (lambda c, folder: megatron_problems(c["megatron"], c["run"], c.get("hf-config")),
                     lambda r: (r["megatron"], r.get("hf-config"), r["dp"], r["tp"], r["pp"], r["ga"], r["precision"], r["ckpt"],
                                r["sequence_parallel"], r["zero"], r["vocab_size"], r["min_lr_ratio"],
                                r.get("cp", 1), r.get("virtual_stages", 1)),
                     "parse_args(ignore_unknown_args=False) + validate_args (WORLD_SIZE dp x cp x tp x pp; sm90 rules), "
                     "values = "
                     "the run's, core_transformer_config_from_args (architecture = the workload's; RoPE = "
                     "transformers'), NullTokenizer padded vocab"),
        "hf-config": (lambda c, folder: arch.hf_config_problems(c["hf-config"], arch.preset(workload_file(c["run"])))[0]
                      if c.get("hf-config") is not None else [],
                      lambda r: (r.get("hf-config"), r["workload"]),
                      "transformers.AutoConfig.from_pretrained(folder) = the workload's preset; the same parameter "
                      "count on the meta device"),
        "deepspeed": (lambda c, folder: deepspeed_problems(c["deepspeed"], c["run"]),
                      lambda r: (r["deepspeed"], r["dp"], r["ga"], r["zero"], r["precision"], r["pp"]),
                      "DeepSpeedConfig(mpu: dp) + every key read or model-validated + the engine's "
                      "optimizer and WarmupCosineLR stepped to the end"),
        "training-args": (lambda c, folder: training_args_problems(c["training-args"], c["run"], folder),
                          lambda r: (r["training-args"], r["dp"], r["zero"]),
                          "HfArgumentParser(TrainingArguments).parse_json_file(allow_extra_keys=False) + "
                          "Trainer's optimizer + get_scheduler stepped to the end"),
        "accelerate-config": (lambda c, folder: accelerate_problems(c["accelerate-config"], c["run"], folder),
                              lambda r: (r["accelerate-config"], r["dp"], r["precision"], r["zero"]),
                              "load_config_from_file + accelerate launch's _validate_launch_command"),
    }
    with tempfile.TemporaryDirectory() as folder:
        for fmt, (fn, _, what) in checks.items():
            if fmt in have:
                check(fn(rec, folder), f"{fmt} (recommendation; {have[fmt]}): {what}")
        if "deepspeed" in have:
            if run["pp"] > 1:
                print("skip  deepspeed.initialize: pp > 1 needs the model as a PipelineModule")
            else:
                p, opt = deepspeed_initialize_problems(rec["deepspeed"], run, folder)
                check(p, f"deepspeed (recommendation): deepspeed.initialize(config=FILE) on {run['dp']} CPU "
                      f"process(es) and 2 training steps" + (f" ({opt}, WarmupCosineLR)" if opt else ""))
        if "accelerate-config" in have and "training-args" in have:
            r = accelerate_launch_problems(rec, folder)
            if r is None:
                print("skip  accelerate launch: a GPU config, and no GPU here")
            else:
                p, how, note = r
                if note:
                    print("note  " + note)
                check(p, f"accelerate-config + training-args (recommendation): `{how} probe.py` started "
                      f"{run['dp']} process(es) of the right type and precision; TrainingArguments(training-args) "
                      f"inside each saw them")
        sweep = manifest["sweep"]
        for fmt, (fn, key, what) in checks.items():
            if fmt not in have or not sweep:
                continue
            seen, bad = {}, {}
            for c in sweep:
                k = key(dict(c["run"], **{f: c[f] for f in FORMATS if f != "run"}))
                if k not in seen:
                    seen[k] = fn(c, folder)
                for problem in seen[k]:
                    bad.setdefault(problem, []).append(c["label"])
            n = f"{len(sweep)} candidates ({len(seen)} distinct)"
            if not bad:
                check([], f"{fmt} (sweep; {have[fmt]}): {n}: {what}")
            for problem, labels in bad.items():
                check([problem], f"{fmt} (sweep): {len(labels)} of {n}, e.g. {labels[:3]}")
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
