#!/usr/bin/env python3
"""bench/fsdp_cpu_counts.py — what FSDP 1 does a step under the Hugging Face Trainer on 2 Gloo CPU ranks
(issue 34; docs/framework-profiles.md, "FSDP on CPU ranks"): the collective calls, their bytes and
seconds, and FSDP's own functions, counted per optimizer step — the counts models/src/time_model.cpp
addCpuFsdp prices.

Each case runs examples/hf_trainer.py under torchrun (2 ranks, one thread each, seq 32, global batch 8)
with the probe's sitecustomize and CPU FSDP shim, as a `tune --runner hf` trial runs it, and this
script as each rank's entry: it wraps torch.distributed's collectives and FSDP 1's runtime functions
(torch/distributed/fsdp/_runtime_utils.py, FlatParamHandle in _flat_param.py) to count calls, bytes
(the first tensor or tensor list argument) and wall seconds between the Trainer's on_step_begin and
on_step_end, then runs the script. Per case it prints the median over the steps after the first two.

Usage: bench/fsdp_cpu_counts.py [--models gpt2,llama] [--cases FULL_SHARD:1,FULL_SHARD:4,SHARD_GRAD_OP:1,...]
                                [--steps 10] [--out bench/out/fsdp_cpu_counts] [--port 29641]
"""
import argparse
import collections
import json
import os
import runpy
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WRAP = {"gpt2": "GPT2Block", "llama": "LlamaDecoderLayer"}
COLLECTIVES = ("all_gather_into_tensor", "all_gather", "reduce_scatter_tensor", "all_reduce", "broadcast")
FSDP_FUNCTIONS = ("_pre_forward", "_post_forward", "_pre_backward_hook", "_post_backward_hook", "_unshard",
                  "_reshard")
HANDLE_METHODS = ("pre_unshard", "_use_unsharded_views", "_use_sharded_views", "_use_unsharded_grad_views")


def rank_entry(out_path, script_argv):
    """One rank: wrap, then run the training script as __main__."""
    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp._flat_param as flat_param
    import torch.distributed.fsdp._runtime_utils as runtime
    import transformers

    stats = collections.defaultdict(lambda: [0, 0.0, 0])  # name -> calls, seconds, bytes
    steps, t0 = [], [0.0]

    def first_bytes(args):
        for x in args:
            if isinstance(x, torch.Tensor):
                return x.numel() * x.element_size()
            if isinstance(x, (list, tuple)) and x and isinstance(x[0], torch.Tensor):
                return sum(y.numel() * y.element_size() for y in x if isinstance(y, torch.Tensor))
        return 0

    def wrap(owner, name):
        f = getattr(owner, name, None)
        if f is None:
            return

        def counted(*a, **kw):
            t = time.perf_counter()
            r = f(*a, **kw)
            s = stats[name]
            s[0] += 1
            s[1] += time.perf_counter() - t
            s[2] += first_bytes(a)
            return r

        setattr(owner, name, counted)

    for n in COLLECTIVES:  # FSDP calls them as dist.<name> at call time
        wrap(dist, n)
    import torch.distributed.fsdp.fully_sharded_data_parallel as wrapper
    for n in FSDP_FUNCTIONS:  # module-level names the hooks look up at call time
        wrap(runtime, n)
        if hasattr(wrapper, n):  # FullyShardedDataParallel.forward's own imported names
            setattr(wrapper, n, getattr(runtime, n))
    for n in HANDLE_METHODS:
        wrap(flat_param.FlatParamHandle, n)

    class Counter(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            stats.clear()
            t0[0] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            steps.append({"wall_s": time.perf_counter() - t0[0], "stats": {k: list(v) for k, v in stats.items()}})

        def on_train_end(self, args, state, control, **kw):
            with open(f"{out_path}.rank{dist.get_rank()}.json", "w") as f:
                json.dump(steps, f)

    init = transformers.Trainer.__init__

    def trainer_init(self, *a, **kw):
        init(self, *a, **kw)
        self.add_callback(Counter())

    transformers.Trainer.__init__ = trainer_init
    sys.argv = script_argv
    runpy.run_path(script_argv[0], run_name="__main__")


def run_case(a, model, strategy, mbs):
    tag = f"{model}-{strategy}-mbs{mbs}"
    folder = os.path.join(a.out, tag)
    os.makedirs(os.path.join(folder, "probe"), exist_ok=True)
    ga = 4 // mbs
    args = {"per_device_train_batch_size": mbs, "gradient_accumulation_steps": ga, "use_cpu": True,
            "max_steps": a.steps, "max_grad_norm": 1.0, "report_to": "none"}
    env = dict(os.environ, TRAINSCOPE_PROBE_DIR=os.path.join(folder, "probe"),
               TRAINSCOPE_OUTPUT_DIR=os.path.join(folder, "output"), TRAINSCOPE_PROBE_PROFILE_STEPS="0",
               TRAINSCOPE_MEM_LIMIT="0", TRAINSCOPE_TRAINING_ARGS=os.path.join(folder, "training_args.json"),
               PYTHONPATH=":".join([os.path.join(ROOT, "python", "trainscope_probe", "site"),
                                    os.path.join(ROOT, "python"), os.path.join(ROOT, "examples")]))
    if strategy != "DDP":  # as tune --runner hf hands an FSDP trial its configuration (tuner/src/job.cpp)
        args.update(fsdp=True, fsdp_config={
            "version": 1, "reshard_after_forward": strategy.lower(), "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "transformer_layer_cls_to_wrap": [WRAP[model]], "backward_prefetch": "backward_pre",
            "forward_prefetch": False, "use_orig_params": True, "sync_module_states": False})
        env.update(TRAINSCOPE_PROBE_CPU_FSDP="1", FSDP_SHARDING_STRATEGY=strategy)
    with open(env["TRAINSCOPE_TRAINING_ARGS"], "w") as f:
        json.dump(args, f)
    out = os.path.join(folder, "counts")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(a.port),
           os.path.abspath(__file__), "--rank-entry", out, "--",
           os.path.join(ROOT, "examples", "hf_trainer.py"), "--model", model, "--seq", "32"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"{tag}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    ranks = [json.load(open(f"{out}.rank{r}.json"))[2:] for r in (0, 1)]
    names = sorted({k for s in ranks[0] for k in s["stats"]})
    row = {"case": tag, "mbs": mbs, "ga": ga,
           "wall_ms": statistics.median(max(x["wall_s"], y["wall_s"]) for x, y in zip(*ranks)) * 1e3}
    for n in names:
        per = [s["stats"].get(n, [0, 0.0, 0]) for s in ranks[0]]
        row[n] = {"calls": statistics.median(v[0] for v in per), "ms": statistics.median(v[1] for v in per) * 1e3,
                  "bytes": statistics.median(v[2] for v in per)}
    return row


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--rank-entry":
        return rank_entry(sys.argv[2], sys.argv[4:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--cases", default="DDP:1,DDP:4,SHARD_GRAD_OP:1,SHARD_GRAD_OP:4,FULL_SHARD:1,FULL_SHARD:4")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(HERE, "out", "fsdp_cpu_counts"))
    ap.add_argument("--port", type=int, default=29641)
    a = ap.parse_args()
    rows = []
    for model in a.models.split(","):
        for case in a.cases.split(","):
            strategy, mbs = case.split(":")
            row = run_case(a, model, strategy, int(mbs))
            rows.append(row)
            calls = " ".join(f"{n} {row[n]['calls']:g}x {row[n]['ms']:.1f} ms" for n in COLLECTIVES + FSDP_FUNCTIONS
                             if n in row)
            print(f"{row['case']:26} {row['mbs']} x {row['ga']}: step {row['wall_ms']:.1f} ms | {calls}", flush=True)
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
