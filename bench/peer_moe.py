#!/usr/bin/env python3
"""PyTorch-eager peer of a mixture-of-experts GPT for bench/: the GPT of peer_gpt.py with the MLP
of its MoE layers (moe_pattern, or l % moe_every == 0) replaced by a MoE MLP, written the way a PyTorch user would (Mixtral's
Hugging Face block, Megatron-LM's "sequential MLP"): a router nn.Linear(C, E, bias=False), fp32
softmax, torch.topk, and a Python loop over the experts, each gathering its tokens with
index_select and scattering its gated output back with index_add_. Same shapes, data shapes and
AdamW as `trainscope run`; prints one JSON line like `trainscope run --json`.

What it matches in trainscope's layer (runtime/src/model/moe.h): top-k gates renormalised for
k > 1; capacity ceil(cf·N·k/E) assignments per expert with GShard's priority (every token's first
choice before any second choice, token order within), drop-less at cf 0; GELU-tanh experts
C -> F -> C; an optional shared expert; the Switch load-balancing loss coeff·E·Σ f_e·P_e and the
ST-MoE z-loss coeff·mean(logsumexp²) added to the loss. What it is not: expert parallelism (one
process), a grouped GEMM.

Usage: peer_moe.py --workload small-cpu-moe --seq 128 --mbs 8 --steps 20 [--threads N] [--precision bf16]
       peer_moe.py --check     (the routing and losses against trainscope's rule, one assignment at a time)
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import peer_gpt
from common import moe_layer_indices

HERE = os.path.dirname(os.path.abspath(__file__))


class Expert(nn.Module):
    """One GELU MLP C -> F -> C (the dense block's MLP at width F)."""

    def __init__(self, C, Fh):
        super().__init__()
        self.c_fc = nn.Linear(C, Fh)
        self.c_proj = nn.Linear(Fh, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class MoeMLP(nn.Module):
    def __init__(self, C, w):
        super().__init__()
        self.E, self.k, self.cf = w["n_experts"], w.get("top_k", 1), w.get("capacity_factor", 0.0)
        self.aux_coeff, self.z_coeff = w.get("aux_loss_coeff", 0.01), w.get("z_loss_coeff", 0.0)
        Fh = w.get("moe_ffn_hidden", 0) or 4 * C
        self.router = nn.Linear(C, self.E, bias=False)
        self.experts = nn.ModuleList(Expert(C, Fh) for _ in range(self.E))
        self.shared = Expert(C, Fh) if w.get("shared_expert", False) else None

    def forward(self, x):
        B, T, C = x.shape
        N, E, k = B * T, self.E, self.k
        x2 = x.reshape(N, C)
        with torch.autocast(x.device.type, enabled=False):  # fp32 router, as trainscope: top-k must not flip
            logits = self.router(x2.float())                               # (N, E)
        probs = logits.softmax(dim=1)                                      # (N, E)
        gate, idx = torch.topk(probs, k, dim=1)                            # (N, k)
        if k > 1:
            gate = gate / gate.sum(dim=1, keepdim=True)
        mask = F.one_hot(idx, E)                                           # (N, k, E)
        routed = mask.sum(dim=(0, 1))                                      # (E) load before capacity
        if self.cf > 0:
            # GShard's priority: choice j's places in an expert start after all choices < j.
            cap = math.ceil(self.cf * N * k / E)
            by_choice = mask.transpose(0, 1)                               # (k, N, E)
            before = by_choice.sum(dim=1).cumsum(dim=0) - by_choice.sum(dim=1)  # (k, E)
            place = by_choice.cumsum(dim=1) - 1 + before.unsqueeze(1)      # (k, N, E)
            mask = mask * (place < cap).transpose(0, 1)                    # (N, k, E) kept only
        out = torch.zeros_like(x2)                                         # (N, C)
        for e, expert in enumerate(self.experts):
            tok, choice = torch.where(mask[:, :, e] > 0)                   # (n_e), (n_e)
            y = expert(x2.index_select(0, tok))                            # (n_e, C)
            out.index_add_(0, tok, (y * gate[tok, choice, None]).to(out.dtype))
        if self.shared is not None:
            out = out + self.shared(x2)
        f = routed.float() / (N * k)                                       # (E) not differentiated
        aux = self.aux_coeff * E * (f * probs.mean(dim=0)).sum()
        z = self.z_coeff * torch.logsumexp(logits, dim=1).pow(2).mean()
        return out.view(B, T, C), aux + z


class Block(peer_gpt.Block):
    """peer_gpt.Block with a MoE MLP when `moe` is given."""

    def __init__(self, C, NH, moe=None):
        super().__init__(C, NH, mlp=moe is None)
        self.moe = moe

    def forward(self, x):
        x = self.attend(x)
        if self.moe is None:
            return x + self.mlp(x), 0.0
        y, router_loss = self.moe(self.ln_2(x))
        return x + y, router_loss


class MoeGPT(nn.Module):
    def __init__(self, w):
        super().__init__()
        L, C, moe = w["n_layer"], w["n_embd"], set(moe_layer_indices(w))
        self.wte = nn.Embedding(w["vocab_size"], C)
        self.wpe = nn.Embedding(w["n_positions"], C)
        self.h = nn.ModuleList(Block(C, w["n_head"], MoeMLP(C, w) if l in moe else None) for l in range(L))
        self.ln_f = nn.LayerNorm(C)
        peer_gpt.gpt2_init(self, L)  # as trainscope's initGpt and initMoe

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        router_loss = 0.0
        for b in self.h:
            x, r = b(x)
            router_loss = router_loss + r
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T)), router_loss


def expected_params(w):
    """docs/architecture.md, "Mixture of experts": the dense count, and per MoE layer
    E·C + (E + s)·(2CF + F + C) − (8C² + 5C)."""
    C, L, E = w["n_embd"], w["n_layer"], w["n_experts"]
    Fh, s = w.get("moe_ffn_hidden", 0) or 4 * C, int(w.get("shared_expert", False))
    dense = w["vocab_size"] * C + w["n_positions"] * C + L * (12 * C * C + 13 * C) + 2 * C
    moe_layers = len(moe_layer_indices(w))
    return dense + moe_layers * (E * C + (E + s) * (2 * C * Fh + Fh + C) - (8 * C * C + 5 * C))


def check_routing():
    """MoeMLP against trainscope's rule transcribed one assignment at a time (moe.cpp: assignment
    a = choice·N + token, kept when its place in its expert's column of cumsum(onehot) is under the
    capacity), for cf 1.25 / 0.5 / 0 and k 1 / 2; and its losses against the formulas."""
    torch.manual_seed(0)
    N, C, E = 74, 32, 8
    for cf in (1.25, 0.5, 0.0):
        for k in (1, 2):
            m = MoeMLP(C, {"n_experts": E, "top_k": k, "capacity_factor": cf, "aux_loss_coeff": 0.01,
                           "z_loss_coeff": 0.001})
            x = torch.randn(2, N // 2, C)
            out, loss = m(x)
            with torch.no_grad():
                x2 = x.reshape(N, C)
                logits = m.router(x2)
                probs = logits.softmax(1)
                gate, idx = probs.topk(k, 1)
                gate = gate / gate.sum(1, keepdim=True) if k > 1 else gate
                expert_a, token_a, gate_a = idx.t().reshape(-1), torch.arange(N).repeat(k), gate.t().reshape(-1)
                onehot = F.one_hot(expert_a, E)
                place = (onehot.cumsum(0) - 1).gather(1, expert_a[:, None]).squeeze(1)
                keep = place < math.ceil(cf * N * k / E) if cf > 0 else torch.ones(N * k, dtype=torch.bool)
                ref = torch.zeros(N, C)
                for a in keep.nonzero().squeeze(1).tolist():
                    ref[token_a[a]] += gate_a[a] * m.experts[int(expert_a[a])](x2[token_a[a]])
                f = onehot.sum(0).float() / (N * k)
                ref_loss = 0.01 * E * (f * probs.mean(0)).sum() + 0.001 * torch.logsumexp(logits, 1).pow(2).mean()
            err = (out.reshape(N, C) - ref).abs().max().item()
            assert err < 1e-5 and abs(loss.item() - ref_loss.item()) < 1e-6, (cf, k, err)
            print(f"cf {cf} k {k}: {int((~keep).sum())} of {N * k} dropped, max |out - ref| {err:.1e}")


def markov_batches(V, steps, mbs, seq, seed=0):
    """trainscope's `--data synthetic` rule (runtime/src/train/data.cpp), with torch's generator in
    place of mt19937: a stream where the next token is a fixed random successor of the previous one
    with probability 7/8, else uniform; sample s of step k starts at ((k·mbs + s)·seq) mod (n − seq).
    Learnable, so the loss falls, and routing sees the same kind of data as trainscope's."""
    g = torch.Generator().manual_seed(seed)
    succ = torch.randint(0, V, (V,), generator=g)
    n = max(64 * (seq + 1), 1 << 16)
    jump = torch.rand(n, generator=g) >= 7 / 8
    uniform = torch.randint(0, V, (n,), generator=g)
    stream = torch.empty(n, dtype=torch.long)
    stream[0] = uniform[0]
    for i in range(1, n):  # sequential by nature; 64 K tokens take well under a second
        stream[i] = uniform[i] if jump[i] else succ[stream[i - 1]]
    starts = (torch.arange(steps * mbs) * seq) % (n - seq)
    return torch.stack([stream[s:s + seq + 1] for s in starts.tolist()]).view(steps, mbs, seq + 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="small-cpu-moe")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--data", default="synthetic", choices=["synthetic", "uniform"],
                    help="synthetic: trainscope's learnable Markov stream; uniform: peer_gpt.py's random tokens")
    ap.add_argument("--check", action="store_true", help="check the routing against trainscope's rule and exit")
    a = ap.parse_args()
    if a.check:
        return check_routing()
    if a.threads:
        torch.set_num_threads(a.threads)
    path = a.workload if a.workload.endswith(".json") else os.path.join(HERE, "..", "workloads", a.workload + ".json")
    w = json.load(open(path))
    if w.get("n_experts", 0) <= 0:
        raise SystemExit(f"error: workload.n_experts: {a.workload} is dense (fix: use bench/peer_gpt.py)")
    torch.manual_seed(1337)
    dev = torch.device(a.device)
    model = MoeGPT(w).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == expected_params(w), f"peer has {n_params} parameters, the workload {expected_params(w)}"
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    # trainscope's default schedule (optim.cpp learningRate: no warm-up, cosine to 0.1·lr at the
    # last step), so that the two final losses are comparable.
    cosine = lambda k: 0.1 + 0.45 * (1 + math.cos(math.pi * k / max(1, a.steps - 1))) if a.steps > 1 else 1.0
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine)
    if a.data == "synthetic":
        data = markov_batches(w["vocab_size"], a.steps, a.mbs, a.seq).to(dev)
    else:
        g = torch.Generator().manual_seed(0)
        data = torch.randint(0, w["vocab_size"], (a.steps, a.mbs, a.seq + 1), generator=g).to(dev)
    times, losses, router_losses = [], [], []
    for k in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss, router_loss = model(data[k, :, :-1].contiguous(), data[k, :, 1:].contiguous())
        (loss + router_loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())  # syncs the device, so the step time is complete
        times.append(time.perf_counter() - t0)
        router_losses.append(router_loss.item())
    print(json.dumps({"peer": "pytorch-eager-moe", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "params": n_params, **peer_gpt.step_timing(times, a.mbs * a.seq),
                      # final_loss: the cross-entropy alone, as `trainscope run` reports it
                      "first_loss": losses[0], "final_loss": losses[-1],
                      "final_router_loss": router_losses[-1]}))


if __name__ == "__main__":
    main()
