#!/usr/bin/env python3
"""tests/exports/megatron_parser_test.py — Megatron-LM's own argument parser reads trainscope's exports.

Usage: megatron_parser_test.py TRAINSCOPE_BINARY WORK_FOLDER (a temporary folder in it per run). Exit 77 (skipped) when scripts/setup
has not installed megatron-core 0.19.2 (the first release that ships Megatron-LM's
megatron/training/arguments.py; PyPI has no megatron-lm).

megatron-core 0.19.2 says Requires-Python >= 3.12 and its wheel is tagged cp312; its sources compile
on this venv's Python 3.11 and its parser runs there once `typing.override` (new in 3.12, imported by
megatron/training/models/hybrid.py) is given typing_extensions' — the only 3.12 name it needs.

For a spread of layouts of llama3-8b (bf16 and fp8), mistral-7b, qwen2.5-7b, mixtral-8x7b and qwen1.5-moe-a2.7b (also with
dense layers: decoder_sparse_step 2, mlp_only_layers [0], --moe-layer-freq's list form), Mistral-7B-v0.1's Hub file
and Qwen2.5-7B with its window on from layer 14 (seq 8192 > the 4096-token windows: --window-size, --window-attn-skip-freq's
list, context parallelism's a2a) on H100 nodes and
small-llama on CPU ranks (`tune --max-trials 0`: the space, no trial), `export --format megatron` goes
through bench/check_exports.py's megatron_problems: Megatron-LM's parse_args(ignore_unknown_args=False)
as pretrain_gpt.py calls it, validate_args with the run's world size, every parsed value against the
run, megatron-core's TransformerConfig built from the parsed arguments (core_transformer_config_from_args)
against the workload file (heads, query groups, kv_channels, ffn size, RMSNorm and its epsilon, SwiGLU,
biases, RoPE base and Llama 3 scaling, untied head, experts, fp8's recipe), megatron-core's RotaryEmbedding against
transformers' inv_freq for the exported config.json, and the NullTokenizer's padded vocabulary.
Then two trials of `tune --runner megatron` start tests/exports/record_argv.py in place of
pretrain_gpt.py: the exact argument vector each rank was started with goes through the same checks,
against the trial's own run (its cN-rR.json: the candidate's layout, the trial's steps and constant
rate) and with the world size the launcher gave it.
"""
import logging
import re
import os
import shlex
import sys
import typing
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_parsers as ep  # noqa: E402

ep.parser_folder("megatron-core-0.19.2")
if not hasattr(typing, "override"):  # Python 3.11: the one 3.12 name megatron-core imports
    import typing_extensions
    typing.override = typing_extensions.override
import check_exports as ce  # noqa: E402  (the bench's Megatron-LM checks, run here on every export)

H100 = ["--cluster", "h100-80gb-x8", "--gbs", "64"]
STUDIES = [  # (name, tune flags, candidates checked)
    ("llama3-8b", ["--workload", "llama3-8b", *H100, "--seq", "8192"], 8),
    ("llama3-8b-fp8", ["--workload", "llama3-8b", *H100, "--seq", "8192", "--precision", "fp8"], 3),
    ("mistral-7b", ["--workload", "mistral-7b", *H100, "--seq", "4096"], 3),
    ("qwen2.5-7b", ["--workload", "qwen2.5-7b", *H100, "--seq", "4096"], 3),
    ("mixtral-8x7b", ["--workload", "mixtral-8x7b", *H100, "--nodes", "2", "--seq", "4096"], 6),
    ("qwen1.5-moe-a2.7b", ["--workload", "qwen1.5-moe-a2.7b", *H100, "--seq", "4096"], 3),
    ("small-llama", ["--workload", "small-llama", "--cluster", "cpu-local", "--seq", "16", "--gbs", "8",
                     "--mbs", "1,2", "--ranks", "2,4", "--zero", "0,1", "--mem-limit", "400M"], 8),
]
# Layers that do not divide over the pipeline (Llama 3.1 405B's 126 over 16 or 32 stages): the
# candidates whose pp leaves a remainder, each target's uneven split read by its own parser.
UNEVEN = ("llama3.1-405b-uneven", ["--workload", "llama3.1-405b", "--cluster", "h100-80gb-x8", "--nodes", "16",
                                   "--gbs", "64", "--seq", "4096", "--mbs", "1", "--ckpt", "full"], 2)


def uneven(plan):
    pp = re.search(r"\bpp(\d+)\b", plan)
    return pp is not None and 126 % int(pp.group(1)) != 0


GPU_ENTRY = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--transformer-impl", "local"]
RUNNER = ["--workload", "small-llama", "--cluster", "cpu-local", "--seq", "16", "--gbs", "8", "--mbs", "2",
          "--ranks", "2", "--zero", "0", "--trial-steps", "1", "--mem-limit", "400M"]


def exported(bin_, study, cid):
    import json
    run = json.loads(ep.export(bin_, study, "run", cid))
    return run, ep.export(bin_, study, "megatron", cid), ep.export(bin_, study, "hf-config", cid)


def main():
    ep.main(__doc__, run_checks)


def qwen_moe_sparse(folder):
    """Qwen1.5-MoE-A2.7B's shape with dense layers (decoder_sparse_step 2, mlp_only_layers [0]): experts in
    layers 1, 3, …, 23, --moe-layer-freq's list form."""
    import json
    with open(os.path.join(ep.ROOT, "workloads", "qwen1.5-moe-a2.7b.json")) as f:
        cfg = json.load(f)
    cfg.update(name="qwen1.5-moe-sparse", decoder_sparse_step=2, mlp_only_layers=[0])
    path = os.path.join(folder, "qwen1.5-moe-sparse.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def qwen2_window(folder):
    """Qwen2.5-7B's shape with its sliding window on (use_sliding_window true, 4096 tokens) from layer 14
    on: --window-size 4095,0 and --window-attn-skip-freq's list, 14 full layers then 14 windowed."""
    import json
    with open(os.path.join(ep.ROOT, "workloads", "qwen2.5-7b.json")) as f:
        cfg = json.load(f)
    cfg.update(name="qwen2.5-7b-window", use_sliding_window=True, sliding_window=4096, max_window_layers=14)
    path = os.path.join(folder, "qwen2.5-7b-window.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


# Mistral-7B-v0.1's window of 4096 under a longer sequence (and context parallelism): --window-size.
MISTRAL_V01 = os.path.join(ep.ROOT, "tests", "data", "hub", "mistralai__Mistral-7B-v0.1", "config.json")


def run_checks(bin_, folder):
    warnings.filterwarnings("ignore")
    logging.getLogger("megatron").setLevel(logging.WARNING)  # its tokenizer's INFO line per export
    checks = ep.Checks()
    studies = STUDIES + [("qwen1.5-moe-sparse", ["--workload", qwen_moe_sparse(folder), *H100, "--seq", "4096"], 3),
                         ("mistral-7b-v0.1", ["--workload", MISTRAL_V01, *H100, "--seq", "8192"], 4),
                         ("qwen2.5-7b-window", ["--workload", qwen2_window(folder), *H100, "--seq", "8192"], 3)]
    for name, flags, limit, keep in [(*s, lambda plan: True) for s in studies] + [(*UNEVEN, uneven)]:
        study = ep.space(bin_, folder, name, flags)
        for cid, plan in ep.spread(study, limit, keep):
            run, text, hf = exported(bin_, study, cid)
            checks.report(f"{name} c{cid} {plan}: export --format megatron", ce.megatron_problems(text, run, hf))
    # The entry a GPU run needs besides the exported flags (/work/audit-gpu.md, docs/tuner.md): a data
    # source (--mock-data), a tokenizer that reads --vocab-size (build_tokenizer refuses none), and
    # megatron-core's own layers where Transformer Engine is not installed (its default impl is TE's).
    study, recorded = ep.runner_trials(bin_, folder, "megatron", GPU_ENTRY, RUNNER)
    for cid, argv, env, trial in recorded:
        run, text, hf = exported(bin_, study, cid)
        run = ep.trial_run(run, trial)
        p = ce.megatron_problems(shlex.join(argv[1:]), run, hf)
        world = run["dp"] * run.get("cp", 1) * run["tp"] * run["pp"]
        ep.want(p, "WORLD_SIZE the launcher gave", int(env["WORLD_SIZE"] or 0), world)
        checks.report(f"--runner megatron trial c{cid} rank {env['RANK']}: {shlex.join(argv[1:6])} …", p)
    checks.exit()


if __name__ == "__main__":
    main()
