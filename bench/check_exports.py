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
swept too (skipped, saying why, only if `trainscope tune` refuses it).
One line per check: ok / FAIL / skip (a target not importable) / note. Exit 1 on any FAIL.
The checks live beside it, one module per concern: check_exports_studies.py (the studies and their
exports), check_exports_megatron.py, check_exports_deepspeed.py, check_exports_hf.py (Transformers,
Accelerate), check_exports_arch.py (the architecture) and check_exports_common.py (what they share);
this file is the entry and the driver, and re-exports their functions (valid_candidates,
megatron_problems, …) under their old names.

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
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import output_file  # noqa: E402  (the rule of every trainscope output)
import check_exports_arch as arch  # noqa: E402  (issue 32: the architecture in the exports)
from check_exports_common import (ROOT, Captured, check, close, failures, free_port, importable,  # noqa: E402,F401
                                  launched, runtime_lr, schedule_problems, version, want, workload_file)
from check_exports_studies import (FORMATS, KNOBS, LLAMA, MOE, TINY, WIDE, case_of, export,  # noqa: E402,F401
                                   export_or_none, make_study, optional_study, valid_candidates,
                                   valid_candidates_or_none)
from check_exports_megatron import (MEGATRON_ARCH, megatron_args_problems, megatron_moe_expected,  # noqa: E402,F401
                                    megatron_problems)
from check_exports_deepspeed import (DataParallelMpu, Traced, deepspeed_initialize_problems,  # noqa: E402,F401
                                     deepspeed_problems, ds_rank, walk, warm_up)
from check_exports_hf import (accelerate_launch_problems, accelerate_probe, accelerate_problems,  # noqa: E402,F401
                              training_args_problems)

DEFAULT_VENV = "/tmp/exports-venv"
# What --setup installs (2026-12-02). torch first: DeepSpeed's setup.py imports it.
PINS_TORCH = ["torch==2.11.0"]
PINS = ["megatron-core==0.19.2", "deepspeed==0.19.8", "transformers==5.24.0", "accelerate==1.15.0"]


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
# Inner: the targets' own code (the scratch venv's Python), the checks in order.

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

