"""bench/check_exports_hf.py — the Transformers and Accelerate exports read by their own code
(TrainingArguments' parser, Trainer's optimizer and scheduler; Accelerate's config loader and launch
checks) and a real `accelerate launch` on CPU processes (bench/check_exports.py; --accelerate-probe is
the launched script).
"""

import json
import os
import sys
import tempfile

from common import output_file  # noqa: E402  (the rule of every trainscope output)
from check_exports_common import SCRIPT, Captured, free_port, launched, schedule_problems, want  # noqa: E402

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
    probe = [SCRIPT, "--accelerate-probe", ta_path]
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
