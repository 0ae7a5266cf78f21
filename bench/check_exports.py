#!/usr/bin/env python3
"""bench/check_exports.py — trainscope's study exports read by the targets' own code, where installed.

Makes a one-candidate study of the tiny workload (one 2-step trial: a few seconds), or takes STUDY,
and exports it in each format. Then:
  - accelerate-config: loaded with Accelerate's own loader (load_config_from_file, which picks
    ClusterConfig.from_yaml_file and refuses unknown keys); its fields compared with the run's.
  - deepspeed: every key checked against DeepSpeed's documented config keys (the list below, from
    the config-json documentation and deepspeed/runtime/config.py, lr_schedules.py), the scheduler's
    type and parameters against WarmupCosineLR's signature, and train_batch_size = micro × GA × dp.
  - training-args: with transformers installed, TrainingArguments(**json); otherwise skipped.
Exit 0 when every check that could run passed; prints one line per check.

Usage: bench/check_exports.py [--bin build/bin/trainscope] [STUDY]
Needs: PyPI's accelerate (pip install accelerate into /opt/trainscope/venv) for the YAML check.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# DeepSpeed's documented config keys (https://www.deepspeed.ai/docs/config-json/; `pipeline` is read
# by deepspeed/runtime/config.py, get_pipeline_config).
DS_TOP = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer",
          "scheduler", "fp16", "bf16", "gradient_clipping", "zero_optimization", "activation_checkpointing",
          "steps_per_print", "pipeline", "wall_clock_breakdown", "prescale_gradients", "communication_data_type"}
DS_FP16 = {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
           "consecutive_hysteresis", "min_loss_scale"}
DS_BF16 = {"enabled", "immediate_grad_update", "check_grad_overflow"}
DS_ZERO = {"stage", "allgather_partitions", "allgather_bucket_size", "overlap_comm", "reduce_scatter",
           "reduce_bucket_size", "contiguous_gradients", "offload_param", "offload_optimizer"}
DS_ACT = {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization", "number_checkpoints",
          "synchronize_checkpoint_boundary", "profile"}
DS_PIPELINE = {"stages", "partition", "seed_layers", "activation_checkpoint_interval", "pipe_partitioned",
               "grad_partitioned"}
# lr_schedules.py: WarmupCosineLR(optimizer, total_num_steps, warmup_min_ratio, warmup_num_steps,
# cos_min_ratio, warmup_type, last_batch_iteration).
DS_SCHEDULERS = {"WarmupCosineLR": {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio",
                                    "warmup_type", "last_batch_iteration"}}
DS_OPTIMIZERS = {"Adam", "AdamW", "Lamb", "SGD"}  # SGD: DeepSpeed falls back to torch.optim by name

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def export(bin_, study, fmt):
    r = subprocess.run([bin_, "export", study, "--format", fmt], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"export --format {fmt} failed ({r.returncode}): {r.stderr}")
    return r.stdout


def make_study(bin_, folder):
    study = os.path.join(folder, "study.db")
    subprocess.run([bin_, "tune", "--workload", "tiny", "--seq", "16", "--gbs", "4", "--mbs", "2", "--ckpt",
                    "selective", "--ranks", "2", "--no-sequence-parallel", "--trial-steps", "2", "--first-round",
                    "1", "--final-rounds", "0", "--mem-limit", "200M", "--study", study],
                   check=True, capture_output=True, text=True)
    return study


def check_subset(keys, allowed, where):
    extra = sorted(set(keys) - allowed)
    check(not extra, f"deepspeed {where}: every key documented" + (f" (not: {extra})" if extra else ""))


def check_deepspeed(text, run):
    d = json.loads(text)
    check_subset(d, DS_TOP, "top level")
    check_subset(d.get("fp16", {}), DS_FP16, "fp16")
    check_subset(d.get("bf16", {}), DS_BF16, "bf16")
    check_subset(d.get("zero_optimization", {}), DS_ZERO, "zero_optimization")
    check_subset(d.get("activation_checkpointing", {}), DS_ACT, "activation_checkpointing")
    check_subset(d.get("pipeline", {}), DS_PIPELINE, "pipeline")
    check(d["optimizer"]["type"] in DS_OPTIMIZERS, f"deepspeed optimizer type {d['optimizer']['type']}")
    s = d.get("scheduler", {})
    check(s.get("type") in DS_SCHEDULERS, f"deepspeed scheduler type {s.get('type')}")
    if s.get("type") in DS_SCHEDULERS:
        check_subset(s["params"], DS_SCHEDULERS[s["type"]], "scheduler params")
        p = s["params"]
        check(p["total_num_steps"] == run["steps"] and p["warmup_num_steps"] == max(1, run["warmup"]) and
              abs(p["cos_min_ratio"] - run["min_lr_ratio"]) < 1e-12 and p["warmup_type"] in ("linear", "log"),
              "deepspeed scheduler: the run's steps, warm-up and final ratio")
    check(d["train_batch_size"] == d["train_micro_batch_size_per_gpu"] * d["gradient_accumulation_steps"] * run["dp"],
          "deepspeed train_batch_size = micro x GA x dp")


def check_accelerate(text, run, folder):
    try:
        from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    except ImportError:
        print("skip  accelerate-config: accelerate is not installed")
        return
    path = os.path.join(folder, "accelerate.yaml")
    with open(path, "w") as f:
        f.write(text)
    try:
        cfg = load_config_from_file(path)
    except Exception as e:  # what `accelerate launch --config_file` would print
        check(False, f"accelerate-config: load_config_from_file refused it: {e!r}")
        return
    check(isinstance(cfg, ClusterConfig), "accelerate-config: loaded as a ClusterConfig")
    check(cfg.num_processes == run["dp"], f"accelerate num_processes {cfg.num_processes} = dp {run['dp']}")
    want_type = "NO" if run["dp"] == 1 else ("MULTI_CPU" if cfg.use_cpu else "MULTI_GPU")
    check(str(cfg.distributed_type).split(".")[-1] == want_type,
          f"accelerate distributed_type {cfg.distributed_type} = {want_type}")
    want_prec = "no" if run["precision"] == "fp32" else run["precision"]
    check(str(cfg.mixed_precision) == want_prec, f"accelerate mixed_precision {cfg.mixed_precision!r} = {want_prec!r}")


def check_training_args(text, run):
    try:
        from transformers import TrainingArguments
    except ImportError:
        print("skip  training-args: transformers is not installed")
        return
    a = json.loads(text)
    try:
        t = TrainingArguments(**a)
    except Exception as e:
        check(False, f"training-args: TrainingArguments refused it: {e!r}")
        return
    check(t.per_device_train_batch_size == run["mbs"] and t.gradient_accumulation_steps == run["ga"],
          "training-args: batch and accumulation")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "trainscope"))
    ap.add_argument("study", nargs="?")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        study = a.study or make_study(a.bin, folder)
        run = json.loads(export(a.bin, study, "run"))
        print(f"study {study}: dp {run['dp']} tp {run['tp']} pp {run['pp']} mbs {run['mbs']} ga {run['ga']} "
              f"{run['precision']} zero {run['zero']}")
        check_deepspeed(export(a.bin, study, "deepspeed"), run)
        check_accelerate(export(a.bin, study, "accelerate-config"), run, folder)
        check_training_args(export(a.bin, study, "training-args"), run)
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
