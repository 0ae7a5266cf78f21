#!/usr/bin/env python3
"""bench/dp_scaling.py — data-parallel scaling on this machine: DP=2 against DP=1 at the same
per-rank micro-batch on the small CPU model, in one run, alternating.

A CPU core plays the part of one device: DP=1 runs one rank with one thread, DP=2 two ranks with one
thread each (Gloo all-reduce over loopback). Reports
  scaling efficiency = tokens/s(DP=2) / (2 x tokens/s(DP=1))
  hidden share       = share of the gradient all-reduce time that ran before backward ended
                       (measured per bucket by trainscope; see docs/architecture.md).
Usage: bench/dp_scaling.py [--bin build/bin/trainscope] [--rounds 3] [--steps 12] [--bucket-mb 4]
"""
import argparse
import json
import os
import statistics
import sys

from common import ROOT, run_json



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "trainscope"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--bucket-mb", default="4")
    a = ap.parse_args()
    base = [a.bin, "run", "--workload", "small-cpu", "--seq", "128", "--mbs", str(a.mbs), "--steps", str(a.steps),
            "--device", "cpu", "--threads", "1", "--bucket-mb", a.bucket_mb, "-q", "--json"]
    effs, hidden, t1s, t2s = [], [], [], []
    for r in range(a.rounds):
        one = run_json(base)
        two = run_json(base + ["--nproc", "2"])
        t1, t2 = one["tokens_per_s_median"], two["tokens_per_s_median"]
        t1s.append(t1)
        t2s.append(t2)
        effs.append(t2 / (2 * t1))
        hidden.append(two["allreduce_hidden_share"])
        print(f"round {r}: DP=1 {t1:.0f} tok/s, DP=2 {t2:.0f} tok/s, efficiency {effs[-1]:.1%}, "
              f"all-reduce hidden {hidden[-1]:.1%}, grad comm {two['grad_comm_s_per_step']*1e3:.1f} ms/step",
              file=sys.stderr)
    res = {"dp1_tokens_per_s": statistics.median(t1s), "dp2_tokens_per_s": statistics.median(t2s),
           "scaling_efficiency": statistics.median(effs), "allreduce_hidden_share": statistics.median(hidden),
           "rounds": a.rounds, "bucket_mb": a.bucket_mb}
    print(json.dumps(res))
    print(f"DP=2 vs DP=1 (1 core per rank): scaling efficiency {res['scaling_efficiency']:.0%}, "
          f"{res['allreduce_hidden_share']:.0%} of all-reduce time hidden behind backward", file=sys.stderr)


if __name__ == "__main__":
    main()
