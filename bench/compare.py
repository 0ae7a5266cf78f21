#!/usr/bin/env python3
"""bench/compare.py — trainscope against PyTorch eager, side by side in one run.

Runs `trainscope run --json` and bench/peer_gpt.py (bench/peer_moe.py for a mixture-of-experts
workload, n_experts > 0; or as --peer says) (the same model, shapes and optimizer, in the
same torch wheel's Python, so the same kernels) alternately, ROUNDS times each, and reports median
tokens/s of each, the median of the per-round ratios, and trainscope's model FLOP/s as a share of
the machine's matmul rate at the model's shapes (bench/matmul_rate.py), measured in the same run.
It also gives each side's best round against the other's best (noise only slows rounds down, so
that is what a quiet machine would show).

Usage: bench/compare.py [--bin build/bin/trainscope] [--python PY] [--rounds 3] [--steps 20]
                        [--workload small-cpu --seq 128 --mbs 8] [--peer auto|gpt|moe]
                        [--threads N] [--quiet-below CORES] [-- extra trainscope run flags]
Each round line also gives the cores other processes kept busy during each side's run (the noise of
a shared host; --quiet-below waits for a quieter moment before each run).
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
from common import ROOT, run_json, run_json_measuring_others, wait_for_quiet



PEERS = {"gpt": "peer_gpt.py", "moe": "peer_moe.py", "llama": "peer_llama.py"}


def peer_script(peer, workload):
    """auto: peer_llama.py (transformers' own model) for a Hugging Face config (llama, mistral, qwen2,
    mixtral), peer_moe.py for a GPT MoE workload, else peer_gpt.py."""
    if peer == "auto":
        with open(os.path.join(ROOT, "workloads", workload + ".json")) as f:
            w = json.load(f)
        peer = ("llama" if w.get("model_type", "gpt2") != "gpt2"
                else "moe" if w.get("n_experts", 0) > 0 else "gpt")
    return os.path.join(HERE, PEERS[peer])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "trainscope"))
    ap.add_argument("--python", default=os.environ.get("TRAINSCOPE_VENV", "/opt/trainscope/venv") + "/bin/python")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--workload", default="small-cpu")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--peer", default="auto", choices=["auto", *PEERS],
                    help="the peer: auto picks peer_llama.py (transformers) for a Hugging Face config, "
                         "peer_moe.py when a GPT workload has n_experts > 0")
    ap.add_argument("--compile", action="store_true",
                    help="peer_llama.py only: the transformers model under torch.compile (default eager)")
    ap.add_argument("--threads", type=int, default=0,
                    help="intra-op threads of trainscope, the peer and the matmul rate alike (0: each one's default)")
    ap.add_argument("--quiet-below", type=float, default=0.0,
                    help="before each run wait (up to 2 min) until other processes use fewer cores than this")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    shape = ["--workload", a.workload, "--seq", str(a.seq), "--mbs", str(a.mbs), "--steps", str(a.steps)]
    ts_cmd = [a.bin, "run", *shape, "--device", a.device, "--data", "synthetic", "--json", "-q", *a.extra]
    peer_cmd = [a.python, peer_script(a.peer, a.workload), *shape, "--device", a.device]
    if a.compile:
        if not peer_cmd[1].endswith("peer_llama.py"):
            sys.exit("error: --compile is for the transformers peer (peer_llama.py); fix: drop it or use "
                     "a Hugging Face workload such as tiny-llama")
        peer_cmd.append("--compile")
    rate_cmd = [a.python, os.path.join(HERE, "matmul_rate.py"), "--workload", a.workload, "--seq", str(a.seq),
                "--mbs", str(a.mbs), "--device", a.device]
    if a.threads:
        for cmd in (ts_cmd, peer_cmd, rate_cmd):
            cmd += ["--threads", str(a.threads)]
    ts, peer, ratios, shares, losses, others = [], [], [], [], [], []
    rate = run_json(rate_cmd)["matmul_flops_per_s"]
    for r in range(a.rounds):
        if a.quiet_below > 0:
            wait_for_quiet(a.quiet_below)
        t, t_others = run_json_measuring_others(ts_cmd)
        if a.quiet_below > 0:
            wait_for_quiet(a.quiet_below)
        p, p_others = run_json_measuring_others(peer_cmd)
        others.append((t_others, p_others))
        ts.append(t["tokens_per_s_median"])
        peer.append(p["tokens_per_s_median"])
        ratios.append(ts[-1] / peer[-1])
        losses.append((t.get("final_loss"), p.get("final_loss")))  # both must train: a sanity check
        shares.append(t["model_flops_per_step"] / t["step_time_median_s"] / rate)
        print(f"round {r}: trainscope {ts[-1]:.0f} tok/s, {p.get('peer', 'peer')} {peer[-1]:.0f} tok/s, "
              f"ratio {ratios[-1]:.3f}, model FLOP/s / matmul rate {shares[-1]:.1%}; "
              f"other processes' CPU {t_others:.2f} / {p_others:.2f} cores", file=sys.stderr)
    rate_end = run_json(rate_cmd)["matmul_flops_per_s"]
    result = {
        "workload": a.workload, "seq": a.seq, "mbs": a.mbs, "steps": a.steps, "rounds": a.rounds,
        "extra_flags": a.extra, "threads": a.threads, "peer": os.path.basename(peer_cmd[1]), "peer_kind": p.get("peer"),
        "trainscope_tokens_per_s": statistics.median(ts), "pytorch_eager_tokens_per_s": statistics.median(peer),
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        # Each side's best round against the other's: what a quiet machine would show, since noise
        # only ever slows a round down.
        "ratio_of_best": max(ts) / max(peer),
        "matmul_rate_gflops": rate / 1e9, "matmul_rate_end_gflops": rate_end / 1e9,
        "share_of_matmul_rate": statistics.median(shares),
        # Cores other processes kept busy during each round's trainscope and peer runs: the noise.
        "other_processes_cores": others,
        "final_loss_last_round": {"trainscope": losses[-1][0], "pytorch_eager": losses[-1][1]},
    }
    print(json.dumps(result))
    print(f"trainscope / {result['peer_kind'] or 'PyTorch eager'}: {result['ratio_median']:.2f}x (median of {a.rounds} paired rounds, "
          f"range {result['ratio_min']:.2f}-{result['ratio_max']:.2f}; best round against best round "
          f"{result['ratio_of_best']:.2f}x); model FLOP/s = "
          f"{result['share_of_matmul_rate']:.0%} of the machine's matmul rate at these shapes "
          f"({result['matmul_rate_gflops']:.0f} GFLOP/s)", file=sys.stderr)


if __name__ == "__main__":
    main()
