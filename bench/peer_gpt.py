#!/usr/bin/env python3
"""PyTorch-eager peer for bench/: the same GPT, data shapes and optimizer as `trainscope run`,
written the way a PyTorch user would (nanoGPT style: nn.Module, F.scaled_dot_product_attention,
torch.optim.AdamW). Prints one JSON line like `trainscope run --json`.

Usage: peer_gpt.py --workload small-cpu --seq 128 --mbs 8 --steps 20 [--fused-adamw] [--threads N]
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class Block(nn.Module):
    """A pre-LN GPT-2 block; mlp=False leaves the MLP to a subclass (peer_moe.py's MoE blocks)."""

    def __init__(self, C, NH, mlp=True):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        if mlp:
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

    def attend(self, x):
        """x + causal self-attention of ln_1(x)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        k = k.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        v = v.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    def mlp(self, x):
        """The dense MLP of ln_2(x), residual not added."""
        return self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    def forward(self, x):
        x = self.attend(x)
        return x + self.mlp(x)


def gpt2_init(model, L):
    """GPT-2's initialisation, as trainscope's initGpt: N(0, 0.02) matrices, the residual projections
    scaled by 1/sqrt(2L), zero biases."""
    for n, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * L) if n.endswith("c_proj.weight") or n.endswith("mlp_proj.weight") else 0.02
            nn.init.normal_(p, 0.0, std)
        elif n.endswith("bias"):
            nn.init.zeros_(p)


class GPT(nn.Module):
    def __init__(self, L, NH, C, Tmax, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(Tmax, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        gpt2_init(self, L)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))


def step_timing(times, tokens, skip=1):
    """The throughput fields every peer prints (as `trainscope run --json` does), over the steps after
    the first `skip` (warm-up; torch.compile's compilation)."""
    timed = times[skip:] if len(times) > skip else times
    median = sorted(timed)[len(timed) // 2]
    return {"tokens_per_s": tokens * len(timed) / sum(timed), "step_time_s": sum(timed) / len(timed),
            "step_time_median_s": median, "tokens_per_s_median": tokens / median}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="small-cpu")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--fused-adamw", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    w = json.load(open(os.path.join(HERE, "..", "workloads", a.workload + ".json")))
    torch.manual_seed(1337)
    dev = torch.device(a.device)
    model = GPT(w["n_layer"], w["n_head"], w["n_embd"], w["n_positions"], w["vocab_size"]).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True if a.fused_adamw else None)
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, w["vocab_size"], (a.steps, a.mbs, a.seq + 1), generator=g).to(dev)
    times, losses = [], []
    for k in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(data[k, :, :-1].contiguous(), data[k, :, 1:].contiguous())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())  # syncs the device, so the step time is complete
        times.append(time.perf_counter() - t0)
    print(json.dumps({"peer": "pytorch-eager", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      **step_timing(times, a.mbs * a.seq), "final_loss": losses[-1]}))


if __name__ == "__main__":
    main()
