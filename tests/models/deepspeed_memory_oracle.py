#!/usr/bin/env python3
"""`trainscope predict --framework deepspeed` model states against DeepSpeed's own estimators.

The oracle is DeepSpeed 0.19.8 (scripts/setup installs it): estimate_zero2_model_states_mem_needs in
deepspeed/runtime/zero/stage_1_and_2.py and estimate_zero3_model_states_mem_needs in
deepspeed/runtime/zero/stage3.py, the functions their *_all_live variants call with a model's
parameter count (and its largest module's). Those counts are taken here from the model itself:
transformers builds each preset's architecture on the meta device, parameters counted once each
(shared ones once), the largest module the one with the most parameters of its own, as DeepSpeed's
model_to_params counts them.

Compared, per preset and cluster size (8 GPUs per node, 1 to 4 nodes, pure data parallelism, no
offload): framework_memory.model_states_bytes of `predict --json`.
  ZeRO-2: within 1% of the estimator's GPU figure (2P + 18P/N).
  ZeRO-3: the estimator counts 18P/N + 4L; trainscope counts the 16-bit gradient partition it leaves
          out (stage3.py's grad_partitions_flat_buffer, 2P/N) as well: trainscope − estimator must be
          that term within 1%, and the two within 12% of each other.
Usage: deepspeed_memory_oracle.py TRAINSCOPE_BINARY. Exit 77 (skipped) without deepspeed/transformers.
"""
import json
import os
import subprocess
import sys

PRESETS = ["llama3-8b", "mistral-7b", "qwen2.5-7b", "llama3-70b"]
NODES = [1, 2, 4]
GPUS_PER_NODE = 8
ZERO2_TOL = 0.01
ZERO3_TERM_TOL = 0.01
ZERO3_TOL = 0.12


def load():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import torch  # noqa: F401
        import transformers
        from deepspeed.runtime.zero import stage_1_and_2, stage3
    except ImportError as e:
        print(f"SKIP: {e} (scripts/setup installs deepspeed==0.19.8 and transformers)")
        sys.exit(77)
    return transformers, stage_1_and_2, stage3


def counts(transformers, preset):
    import torch
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "workloads")
    with open(os.path.join(root, preset + ".json")) as f:
        spec = json.load(f)
    keys = {k: v for k, v in spec.items() if k not in ("name", "description", "source", "model_type")}
    config = transformers.AutoConfig.for_model(spec["model_type"], **keys)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    seen = {}
    for p in model.parameters():  # each Parameter object once: a tied weight counts once
        seen[id(p)] = p.numel()
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return sum(seen.values()), largest


def predict(binary, preset, nodes, zero):
    gpus = nodes * GPUS_PER_NODE
    cmd = [binary, "predict", "--workload", preset, "--cluster", "a100-80gb-x8", "--nodes", str(nodes),
           "--gpus", str(gpus), "--framework", "deepspeed", "--zero", str(zero), "--mbs", "1", "--seq", "2048",
           "--gbs", str(gpus), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    return json.loads(out.stdout[out.stdout.index("{"):])["framework_memory"]


def main():
    binary = sys.argv[1]
    transformers, stage_1_and_2, stage3 = load()
    failures = 0
    for preset in PRESETS:
        total, largest = counts(transformers, preset)
        for nodes in NODES:
            n = nodes * GPUS_PER_NODE
            _, ds2 = stage_1_and_2.estimate_zero2_model_states_mem_needs(
                total, num_gpus_per_node=GPUS_PER_NODE, num_nodes=nodes, cpu_offload=False)
            ours2 = predict(binary, preset, nodes, 2)["model_states_bytes"]
            err2 = ours2 / ds2 - 1
            ok2 = abs(err2) <= ZERO2_TOL
            _, ds3, _ = stage3.estimate_zero3_model_states_mem_needs(
                total, largest, num_gpus_per_node=GPUS_PER_NODE, num_nodes=nodes, cpu_offload=False,
                cpu_offload_params=False, zero_init=True)
            ours3 = predict(binary, preset, nodes, 3)["model_states_bytes"]
            term = 2 * total / n
            err3 = ours3 / ds3 - 1
            term_err = (ours3 - ds3) / term - 1
            ok3 = abs(err3) <= ZERO3_TOL and abs(term_err) <= ZERO3_TERM_TOL
            print(f"{preset:12s} {n:3d} GPUs  P {total / 1e9:6.2f}e9 L {largest / 1e6:7.1f}e6  "
                  f"ZeRO-2 {ours2 / 2**30:7.2f} vs {ds2 / 2**30:7.2f} GiB ({err2:+.2%}) {'ok' if ok2 else 'FAIL'}  "
                  f"ZeRO-3 {ours3 / 2**30:7.2f} vs {ds3 / 2**30:7.2f} GiB ({err3:+.2%}; the 2P/N term {term_err:+.2%}) "
                  f"{'ok' if ok3 else 'FAIL'}")
            failures += (not ok2) + (not ok3)
    if failures:
        print(f"FAIL: {failures} comparison(s) outside tolerance")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
