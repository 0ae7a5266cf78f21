#!/usr/bin/env python3
"""tests/exports/torchtitan_parser_test.py — torchtitan's own config parser reads trainscope's exports.

Usage: torchtitan_parser_test.py TRAINSCOPE_BINARY WORK_FOLDER (a temporary folder in it per run). Exit 77 (skipped) when scripts/setup
has not installed torchtitan 0.3.0 (with tyro 1.0.17, its command-line parser).

torchtitan 0.3 reads no TOML: `torchtitan/train.py --module M --config C` loads a registry config and
its ConfigManager (tyro) applies `--section.field VALUE` overrides. With this venv's torch 2.11 only
torchtitan.config and its optimizer / LR-scheduler configs import (tests/exports/torchtitan_root.py
says why and what the root holds), so ConfigManager.parse_args runs on a root of torchtitan's own
TrainingConfig, ParallelismConfig, OptimizersContainer.Config (default_adamw's group) and
LRSchedulersContainer.Config: every flag must be one of theirs, of its type and among its choices.
The parsed values must be the run's: batch (local = micro-batch, global, and torchtitan's gradient
accumulation global / (local x dp) = ga), sequence, steps, clipping, precision, the data-parallel
replicate/shard degrees and resharding for the ZeRO stage, TP, PP, CP, EP (which torchtitan takes
from dp_shard x cp x tp: a layout where it cannot must say so in a note), the AdamW group's lr, betas,
eps and weight decay, the schedule (warm-up, cosine, min lr); with PP the schedule torch's
get_schedule_class knows (as torchtitan's pipeline_llm resolves it) and the virtual stages torchtitan
derives from layers_per_stage equal to pp x this run's virtual stages, local batch a multiple of the
pipeline micro-batch (Trainer.Config's check). Exports of spread layouts of llama3-8b, mixtral-8x7b
(two nodes) and small-llama, and the argument vectors two `tune --runner torchtitan` trials started
(tests/exports/record_argv.py in place of torchtitan/train.py), against each trial's own run (its
cN-rR.json: the candidate's layout, the trial's steps and constant rate).
"""
import json
import re
import math
import os
import shlex
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_parsers as ep  # noqa: E402

ep.parser_folder("torchtitan-0.3.0")
ROOT_ARGS = ["--module", "torchtitan_root", "--config", "root"]
H100 = ["--cluster", "h100-80gb-x8", "--gbs", "64"]
STUDIES = [
    ("llama3-8b", ["--workload", "llama3-8b", *H100, "--seq", "8192"], 10),
    ("mixtral-8x7b", ["--workload", "mixtral-8x7b", *H100, "--nodes", "2", "--seq", "4096"], 6),
    ("small-llama", ["--workload", "small-llama", "--cluster", "cpu-local", "--seq", "16", "--gbs", "8",
                     "--mbs", "1,2", "--ranks", "2,4", "--zero", "0,2,3", "--virtual-stages", "1,2",
                     "--mem-limit", "400M"], 10),
]
# Layers that do not divide over the pipeline (Llama 3.1 405B's 126 over 16 or 32 stages): the
# candidates whose pp leaves a remainder, each target's uneven split read by its own parser.
UNEVEN = ("llama3.1-405b-uneven", ["--workload", "llama3.1-405b", "--cluster", "h100-80gb-x8", "--nodes", "16",
                                   "--gbs", "64", "--seq", "4096", "--mbs", "1", "--ckpt", "full"], 2)


def uneven(plan):
    pp = re.search(r"\bpp(\d+)\b", plan)
    return pp is not None and 126 % int(pp.group(1)) != 0


RUNNER = ["--workload", "small-llama", "--cluster", "cpu-local", "--seq", "16", "--gbs", "8", "--mbs", "2",
          "--ranks", "2", "--zero", "3", "--trial-steps", "1", "--mem-limit", "400M"]


def parse(argv):
    """torchtitan's ConfigManager on the flags (its banner and warnings kept out of the report)."""
    import contextlib
    import io
    from torchtitan.config import ConfigManager
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return ConfigManager().parse_args(list(argv)), None
    except SystemExit:
        said = " ".join(w for w in err.getvalue().split() if w.strip("─│╭╮╰╯-"))  # tyro's box, as one line
        return None, f"ConfigManager refused the flags: {said[:600]}"


def problems(cfg, run, notes=()):
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
    p, want = [], ep.want
    t, par = cfg.training, cfg.parallelism
    dp, zero = run["dp"], run["zero"]
    shard = zero >= 2 and dp > 1
    want(p, "training.local_batch_size", t.local_batch_size, run["mbs"])
    want(p, "training.global_batch_size", t.global_batch_size, run["gbs"])
    want(p, "training.seq_len", t.seq_len, run["seq"])
    want(p, "training.steps", t.steps, run["steps"])
    want(p, "training.max_norm", float(t.max_norm), float(run["clip"]))
    want(p, "training.mixed_precision_param", t.mixed_precision_param,
         "bfloat16" if run["precision"] in ("bf16", "fp8") else "float32")
    want(p, "parallelism.data_parallel_replicate_degree", par.data_parallel_replicate_degree, 1 if shard else dp)
    want(p, "parallelism.data_parallel_shard_degree", par.data_parallel_shard_degree, dp if shard else 1)
    want(p, "parallelism.fsdp_reshard_after_forward", par.fsdp_reshard_after_forward,
         "never" if zero == 2 else "default")
    want(p, "parallelism.tensor_parallel_degree", par.tensor_parallel_degree, run["tp"])
    want(p, "parallelism.pipeline_parallel_degree", par.pipeline_parallel_degree, run["pp"])
    want(p, "parallelism.context_parallel_degree", par.context_parallel_degree, run.get("cp", 1))
    want(p, "parallelism.expert_parallel_degree", par.expert_parallel_degree, run.get("ep", 1))
    dense = par.data_parallel_shard_degree * par.context_parallel_degree * par.tensor_parallel_degree
    if dense % par.expert_parallel_degree and not any("expert parallelism takes its ranks" in n for n in notes):
        p.append(f"ep {par.expert_parallel_degree} does not divide dp_shard x cp x tp = {dense} (torchtitan's "
                 "efsdp x ep), and no note says so")
    dp_degree = par.data_parallel_replicate_degree * par.data_parallel_shard_degree
    want(p, "gradient accumulation (global / (local x dp))", t.global_batch_size // (t.local_batch_size * dp_degree),
         run["ga"])
    if run["pp"] > 1:
        want(p, "parallelism.pipeline_parallel_microbatch_size", par.pipeline_parallel_microbatch_size, run["mbs"])
        if t.local_batch_size % par.pipeline_parallel_microbatch_size:
            p.append("training.local_batch_size is not a multiple of parallelism.pipeline_parallel_microbatch_size")
        try:
            single = issubclass(get_schedule_class(par.pipeline_parallel_schedule), PipelineScheduleSingle)
        except ValueError as e:
            return p + [f"parallelism.pipeline_parallel_schedule: {e}"]
        v = run.get("virtual_stages", 1)
        want(p, "single-stage schedule", single, v == 1)
        per = par.pipeline_parallel_layers_per_stage
        if per is None:
            p.append("parallelism.pipeline_parallel_layers_per_stage not set (torchtitan would pick 2 stages a rank)")
        else:
            stages = math.ceil((run["n_layer"] + par.pipeline_parallel_first_stage_less_layers +
                                par.pipeline_parallel_last_stage_less_layers) / per)
            want(p, "virtual stages torchtitan derives", stages, run["pp"] * v)
    groups = cfg.optimizer.param_groups
    want(p, "optimizer.param_groups", len(groups), 1)
    if groups:
        kw = groups[0].optimizer_kwargs
        want(p, "optimizer group's optimizer_name", groups[0].optimizer_name, "AdamW")
        want(p, "optimizer_kwargs.lr", float(kw.get("lr", -1)), float(run["lr"]))
        want(p, "optimizer_kwargs.betas", tuple(float(b) for b in kw.get("betas", ())),
             (float(run["beta1"]), float(run["beta2"])))
        want(p, "optimizer_kwargs.eps", float(kw.get("eps", -1)), float(run["eps"]))
        want(p, "optimizer_kwargs.weight_decay", float(kw.get("weight_decay", -1)), float(run["weight_decay"]))
    s = cfg.lr_scheduler
    want(p, "lr_scheduler.warmup_steps", s.warmup_steps, run["warmup"])
    want(p, "lr_scheduler.decay_type", s.decay_type, "cosine")
    want(p, "lr_scheduler.min_lr_factor", float(s.min_lr_factor), float(run["min_lr_ratio"]))
    return p


def check(checks, what, argv, run, notes):
    cfg, refused = parse(argv)
    checks.report(what, [refused] if refused else problems(cfg, run, notes))


def main():
    ep.main(__doc__, run_checks)


def run_checks(bin_, folder):
    warnings.filterwarnings("ignore")
    checks = ep.Checks()
    for name, flags, limit, keep in [(*s, lambda plan: True) for s in STUDIES] + [(*UNEVEN, uneven)]:
        study = ep.space(bin_, folder, name, flags)
        for cid, plan in ep.spread(study, limit, keep):
            run = json.loads(ep.export(bin_, study, "run", cid))
            text, notes = ep.export(bin_, study, "torchtitan", cid, notes=True)
            check(checks, f"{name} c{cid} {plan}: export --format torchtitan", ROOT_ARGS + shlex.split(text), run,
                  notes)
    study, recorded = ep.runner_trials(bin_, folder, "torchtitan", ROOT_ARGS, RUNNER)
    for cid, argv, env, trial in recorded:
        run = ep.trial_run(json.loads(ep.export(bin_, study, "run", cid)), trial)
        extra = []
        world = run["dp"] * run.get("cp", 1) * run["tp"] * run["pp"]
        ep.want(extra, "WORLD_SIZE the launcher gave", int(env["WORLD_SIZE"] or 0), world)
        ep.want(extra, "the entry's own arguments first", argv[1:1 + len(ROOT_ARGS)], ROOT_ARGS)
        cfg, refused = parse(argv[1:])
        checks.report(f"--runner torchtitan trial c{cid} rank {env['RANK']}",
                      extra + ([refused] if refused else problems(cfg, run)))
    checks.exit()


if __name__ == "__main__":
    main()
