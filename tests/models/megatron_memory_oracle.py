#!/usr/bin/env python3
"""`trainscope predict --framework megatron` memory against Megatron-LM's own theoretical memory.

The oracle is Megatron-LM's theoretical memory as Megatron-Bridge ships it on PyPI
(megatron-bridge==0.3.1, megatron/bridge/training/utils/theoretical_memory_utils.py: the functions
compute_weight_and_optimizer_memory and compute_activation_memory; scripts/setup installs it). Its
module is loaded by path and called with a namespace of the configuration: its two imports beyond
torch are a type annotation (ConfigContainer) and the vocabulary padding helper, which these calls
do not reach (should_pad_vocab False: the vocabulary is given as Megatron would pad it for the tp).

For the Llama presets under several Megatron layouts it compares, on the first pipeline stage (the
one the oracle describes), the weights and optimizer state (megatron_params_opt_bytes +
megatron_embedding_opt_bytes) and, where the oracle applies (sequence parallelism with selective
recomputation, its stated assumption), the activations (megatron_activations_bytes) and the peak
`fits` is judged on (framework_memory.peak_bytes, fits_by megatron) where the first stage is the worst:
each within 2%.
The same comparisons are made against megatron-core 0.19.2's own copy,
megatron/training/theoretical_memory_usage.py (the file issue 32 names; scripts/setup installs
megatron-core 0.19.2 under $VENV/trainscope-parsers), called with a namespace of Megatron-LM's
arguments. Where it applies another formula than ours, activations without both SP and selective
recomputation (compute_activation_memory_without_sp: no attention scores, recomputation not counted,
× 1.05), the difference is printed as a note, not checked (docs/memory-model.md).
Mixtral-8x7B and Qwen1.5-MoE-A2.7B (a gated shared expert) under EP layouts, with and without the distributed
optimizer, are compared with megatron-core's copy alone (its MoE terms: experts ÷ ep at the expert-data-parallel
group's bytes, router and norms replicated), weights and optimizer within 2%.
Usage: megatron_memory_oracle.py TRAINSCOPE_BINARY. Exit 77 (skipped) without megatron-bridge.
"""
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import types
from types import SimpleNamespace

TOLERANCE = 0.02
ORACLE_FILE = "megatron/bridge/training/utils/theoretical_memory_utils.py"

# (workload, its architecture as Megatron-LM's arguments, layouts)
PRESETS = {
    "llama3-8b": dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                      ffn_hidden_size=14336, vocab_size=128256, untied=True),
    "llama3-70b": dict(num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8,
                       ffn_hidden_size=28672, vocab_size=128256, untied=True),
    "llama3.1-405b": dict(num_layers=126, hidden_size=16384, num_attention_heads=128, num_query_groups=8,
                          ffn_hidden_size=53248, vocab_size=128256, untied=True),
}
# dp, tp, pp, virtual stages (1: none), sp, ckpt, distributed optimizer, mbs, gbs, seq
LAYOUTS = {
    "llama3-8b": [
        (8, 1, 1, 1, False, "none", False, 1, 64, 8192),
        (4, 2, 1, 1, True, "selective", False, 1, 64, 8192),
        (2, 4, 1, 1, True, "selective", True, 2, 64, 8192),
        (2, 2, 2, 1, True, "selective", True, 1, 64, 8192),
        (4, 2, 1, 1, False, "full", True, 1, 64, 8192),
    ],
    "llama3-70b": [
        (8, 8, 1, 1, True, "selective", True, 1, 128, 8192),
        (4, 8, 2, 1, True, "selective", True, 1, 128, 8192),
        (2, 4, 4, 5, True, "selective", True, 1, 128, 8192),
        (2, 8, 4, 1, True, "full", False, 1, 128, 8192),
    ],
    "llama3.1-405b": [
        (2, 8, 6, 1, True, "selective", True, 1, 96, 8192),
        (4, 8, 7, 3, True, "selective", True, 1, 112, 8192),
        (2, 8, 9, 1, True, "none", True, 1, 36, 8192),
    ],
}


# Mixtures of experts against megatron-core's copy alone (its MoE terms): (workload, architecture,
# layouts dp, tp, pp, ep, distributed optimizer, seq). The export runs the experts whole on each TP rank
# (--expert-tensor-parallel-size 1), so their state shards over dp·tp/ep expert-data-parallel ranks.
MOE = {
    "mixtral-8x7b": (dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                          ffn_hidden_size=14336, vocab_size=32000, untied=True, num_experts=8, topk=2,
                          moe_ffn_hidden_size=14336, shared=None, shared_gate=False),
                     [(8, 2, 1, 1, True, 4096), (8, 2, 1, 8, True, 4096), (4, 4, 2, 4, True, 4096),
                      (16, 1, 1, 8, False, 4096)]),
    "qwen1.5-moe-a2.7b": (dict(num_layers=24, hidden_size=2048, num_attention_heads=16, num_query_groups=16,
                               ffn_hidden_size=5632, vocab_size=151936, untied=True, num_experts=60, topk=4,
                               moe_ffn_hidden_size=1408, shared=5632, shared_gate=True),
                          [(8, 1, 1, 4, True, 4096), (4, 2, 1, 2, True, 4096), (8, 1, 2, 4, False, 4096)]),
}


def moe_core_args(arch, layout):
    dp, tp, pp, ep, distopt, seq = layout
    args = core_args(arch, (dp, tp, pp, 1, False, "none", distopt, 1, dp, seq))
    args.num_experts, args.moe_router_topk = arch["num_experts"], arch["topk"]
    args.moe_ffn_hidden_size, args.moe_layer_freq = arch["moe_ffn_hidden_size"], 1
    args.moe_shared_expert_intermediate_size, args.moe_shared_expert_gate = arch["shared"], arch["shared_gate"]
    args.expert_tensor_parallel_size, args.expert_model_parallel_size = 1, ep
    return args


def moe_failures(binary, core):
    """predict --framework megatron's weights + optimizer of MoE layouts against megatron-core's formula."""
    failures = 0
    for workload, (arch, layouts) in MOE.items():
        for layout in layouts:
            dp, tp, pp, ep, distopt, seq = layout
            gpus = dp * tp * pp
            cmd = [binary, "predict", "--workload", workload, "--cluster", "h100-80gb-x8",
                   "--nodes", str(max(1, gpus // 8)), "--gpus", str(gpus), "--tp", str(tp), "--pp", str(pp),
                   "--ep", str(ep), "--mbs", "1", "--gbs", str(dp * pp), "--seq", str(seq), "--framework", "megatron",
                   "--json"] + (["--use-distributed-optimizer"] if distopt else [])
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
            first = json.loads(out.stdout)["stages"][0]
            got = first["megatron_params_opt_bytes"] + first["megatron_embedding_opt_bytes"]
            want = core.compute_weight_and_optimizer_memory(moe_core_args(arch, layout))
            err = got / want - 1.0
            ok = abs(err) <= TOLERANCE
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {workload} dp{dp} tp{tp} pp{pp} ep{ep}{' distopt' if distopt else ''} "
                  f"seq{seq}: weights+optimizer (megatron-core, MoE) {got / 2**30:.3f} GiB, Megatron "
                  f"{want / 2**30:.3f} GiB ({err * 100:+.2f}%)")
    return failures


def load_oracle():
    try:
        dist = importlib.metadata.distribution("megatron-bridge")
    except importlib.metadata.PackageNotFoundError:
        print("SKIP: megatron-bridge is not installed in this Python (scripts/setup installs megatron-bridge==0.3.1)")
        sys.exit(77)
    path = dist.locate_file(ORACLE_FILE)
    # The module's own imports, beside torch: a type annotation and a helper these calls do not reach.
    stubs = {
        "megatron": None, "megatron.bridge": None, "megatron.bridge.training": None,
        "megatron.bridge.training.config": {"ConfigContainer": object},
        "megatron.bridge.utils": None,
        "megatron.bridge.utils.vocab_utils": {"calculate_padded_vocab_size": _no_padding},
    }
    for name, attrs in stubs.items():
        mod = types.ModuleType(name)
        mod.__path__ = []
        for k, v in (attrs or {}).items():
            setattr(mod, k, v)
        sys.modules[name] = mod
    spec = importlib.util.spec_from_file_location("megatron_theoretical_memory", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_core_oracle():
    """megatron-core 0.19.2's megatron/training/theoretical_memory_usage.py, or None when not installed.
    Its one import (.utils: is_hybrid_model, print_rank_0) is given as two plain functions."""
    folder = os.path.join(sys.prefix, "trainscope-parsers", "megatron-core-0.19.2")
    path = os.path.join(folder, "megatron", "training", "theoretical_memory_usage.py")
    if not (os.path.exists(os.path.join(folder, ".complete")) and os.path.isfile(path)):
        print(f"note: {path} is not installed (scripts/setup installs it): megatron-core's own copy not compared")
        return None
    package = types.ModuleType("megatron_core_training")
    package.__path__ = []
    utils = types.ModuleType("megatron_core_training.utils")
    utils.is_hybrid_model = lambda args: False
    utils.print_rank_0 = print
    sys.modules["megatron_core_training"], sys.modules["megatron_core_training.utils"] = package, utils
    spec = importlib.util.spec_from_file_location("megatron_core_training.theoretical_memory_usage", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def core_args(arch, layout):
    """Megatron-LM's arguments (as parse_args leaves them) for megatron-core's copy."""
    dp, tp, pp, v, sp, ckpt, distopt, mbs, gbs, seq = layout
    return SimpleNamespace(
        num_layers=arch["num_layers"], hidden_size=arch["hidden_size"], num_attention_heads=arch["num_attention_heads"],
        kv_channels=arch["hidden_size"] // arch["num_attention_heads"], group_query_attention=True,
        num_query_groups=arch["num_query_groups"], ffn_hidden_size=arch["ffn_hidden_size"], swiglu=True,
        normalization="RMSNorm", add_bias_linear=False, multi_latent_attention=False, num_experts=None,
        moe_shared_expert_intermediate_size=None, moe_latent_size=None, mtp_num_layers=None,
        padded_vocab_size=arch["vocab_size"], untie_embeddings_and_output_weights=arch["untied"],
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, expert_tensor_parallel_size=tp,
        expert_model_parallel_size=1, world_size=dp * tp * pp, data_parallel_size=dp,
        use_distributed_optimizer=distopt, seq_length=seq, micro_batch_size=mbs,
        virtual_pipeline_model_parallel_size=v if v > 1 else None, sequence_parallel=sp,
        recompute_granularity=ckpt if ckpt != "none" else None)


def _no_padding(*args, **kwargs):
    raise AssertionError("the oracle was asked to pad the vocabulary; the test passes it padded")


def oracle_config(arch, layout):
    import torch.nn.functional as F
    dp, tp, pp, v, sp, ckpt, distopt, mbs, gbs, seq = layout
    model = SimpleNamespace(
        num_layers=arch["num_layers"], hidden_size=arch["hidden_size"],
        num_attention_heads=arch["num_attention_heads"], num_query_groups=arch["num_query_groups"],
        kv_channels=arch["hidden_size"] // arch["num_attention_heads"], ffn_hidden_size=arch["ffn_hidden_size"],
        num_moe_experts=None, gated_linear_unit=True, activation_func=F.silu,
        share_embeddings_and_output_weights=not arch["untied"], should_pad_vocab=False,
        vocab_size=arch["vocab_size"], tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=v if v > 1 else None, seq_length=seq,
        sequence_parallel=sp, recompute_granularity=ckpt if ckpt != "none" else None)
    return SimpleNamespace(model=model, train=SimpleNamespace(micro_batch_size=mbs),
                           optimizer=SimpleNamespace(use_distributed_optimizer=distopt), data_parallel_size=dp)


def predict(binary, workload, layout):
    dp, tp, pp, v, sp, ckpt, distopt, mbs, gbs, seq = layout
    gpus = dp * tp * pp
    cmd = [binary, "predict", "--workload", workload, "--cluster", "h100-80gb-x8", "--nodes", str(max(1, gpus // 8)),
           "--gpus", str(gpus), "--tp", str(tp), "--pp", str(pp), "--mbs", str(mbs), "--gbs", str(gbs),
           "--seq", str(seq), "--ckpt", ckpt, "--framework", "megatron", "--json"]
    if v > 1:
        cmd += ["--virtual-stages", str(v)]
    if sp:
        cmd.append("--sequence-parallel")
    if distopt:
        cmd.append("--use-distributed-optimizer")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    oracle = load_oracle()
    core = load_core_oracle()
    failures = 0
    for workload, layouts in LAYOUTS.items():
        for layout in layouts:
            dp, tp, pp, v, sp, ckpt, distopt, mbs, gbs, seq = layout
            name = (f"{workload} dp{dp} tp{tp} pp{pp}{f' v{v}' if v > 1 else ''}{' sp' if sp else ''} {ckpt}"
                    f"{' distopt' if distopt else ''} mbs{mbs} gbs{gbs} seq{seq}")
            cfg = oracle_config(PRESETS[workload], layout)
            ours = predict(sys.argv[1], workload, layout)
            first = ours["stages"][0]
            pairs = [("weights+optimizer", first["megatron_params_opt_bytes"] + first["megatron_embedding_opt_bytes"],
                      oracle.compute_weight_and_optimizer_memory(cfg))]
            if sp and ckpt == "selective":  # the oracle's activation formula assumes both
                pairs.append(("activations", first["megatron_activations_bytes"],
                              oracle.compute_activation_memory(cfg, num_microbatches=ours["ga"])))
                # What `fits` is judged on (fits_by megatron): the worst stage's theoretical memory, the
                # oracle's total where that stage is the first (bf16: no FP8 weight workspaces).
                fm = ours["framework_memory"]
                if ours["fits_by"] != "megatron" or fm["framework"] != "megatron":
                    failures += 1
                    print(f"FAIL {name}: fits judged by {ours['fits_by']}, not megatron")
                elif fm["stage"] == 0:
                    pairs.append(("peak (fits)", fm["peak_bytes"], pairs[0][2] + pairs[1][2]))
            if core is not None:
                args = core_args(PRESETS[workload], layout)
                pairs.append(("weights+optimizer (megatron-core)", pairs[0][1],
                              core.compute_weight_and_optimizer_memory(args)))
                if sp and ckpt == "selective":
                    pairs.append(("activations (megatron-core)", first["megatron_activations_bytes"],
                                  core.compute_activation_memory(args, num_microbatches=ours["ga"])))
                else:
                    theirs = core.compute_activation_memory_without_sp(args, num_microbatches=ours["ga"])
                    print(f"note {name}: activations {first['megatron_activations_bytes'] / 2**30:.3f} GiB, "
                          f"megatron-core's without-SP formula {theirs / 2**30:.3f} GiB "
                          f"({(first['megatron_activations_bytes'] / theirs - 1) * 100:+.0f}%; not compared)")
            for what, got, want in pairs:
                err = got / want - 1.0
                ok = abs(err) <= TOLERANCE
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {name}: {what} {got / 2**30:.3f} GiB, Megatron "
                      f"{want / 2**30:.3f} GiB ({err * 100:+.2f}%)")
    if core is not None:
        failures += moe_failures(sys.argv[1], core)
    print(f"{failures} outside {TOLERANCE * 100:.0f}%")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
