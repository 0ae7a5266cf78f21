#!/usr/bin/env python3
"""The machine's own matmul rate at a GPT's training shapes: times every GEMM of one training step
(forward, and backward's dX and dW, for the four linears of each layer and the tied LM head) with
torch.mm from the same LibTorch, and prints the achieved FLOP/s over all of them as JSON. A step's
model FLOP/s divided by this rate is how close the runtime runs to the limit its GEMMs set.

Usage: matmul_rate.py --workload small-cpu --seq 128 --mbs 8 [--threads N] [--device cpu]
"""
import argparse
import json
import os
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="small-cpu")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    w = json.load(open(os.path.join(HERE, "..", "workloads", a.workload + ".json")))
    N = a.mbs * a.seq
    dev = torch.device(a.device)
    # (M, K, N) of y = x W^T for each linear; backward adds dX = dy W (M, N, K) and dW = dy^T x (N, M, K).
    if "hidden_size" in w:  # a Hugging Face (Llama-family) config: GQA's q + 2·kv, SwiGLU's [gate; up]
        C, V, L = w["hidden_size"], w["vocab_size"], w["num_hidden_layers"]
        H = w["num_attention_heads"]
        D = w.get("head_dim") or C // H
        q, kv, F = H * D, w.get("num_key_value_heads", H) * D, w["intermediate_size"]
        linears = [(N, C, q + 2 * kv), (N, q, C), (N, C, 2 * F), (N, F, C)] * L + [(N, C, V)]
    else:
        C, V, L = w["n_embd"], w["vocab_size"], w["n_layer"]
        linears = [(N, C, 3 * C), (N, C, C), (N, C, 4 * C), (N, 4 * C, C)] * L + [(N, C, V)]
    gemms = []
    for (m, k, n) in linears:
        gemms += [("fwd", m, k, n, False), ("dX", m, n, k, False), ("dW", n, m, k, True)]
    total_flops, total_time = 0.0, 0.0
    cache = {}
    for (_, m, k, n, trans_a) in gemms:
        key = (m, k, n, trans_a)
        if key not in cache:
            A = torch.randn(k, m, device=dev).t() if trans_a else torch.randn(m, k, device=dev)
            B = torch.randn(k, n, device=dev)
            for _ in range(3):
                torch.mm(A, B)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(a.repeat):
                torch.mm(A, B)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            cache[key] = (time.perf_counter() - t) / a.repeat
        total_time += cache[key]
        total_flops += 2.0 * m * k * n
    print(json.dumps({"matmul_flops_per_s": total_flops / total_time, "gemm_flops_per_step": total_flops,
                      "gemm_time_per_step_s": total_time, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
