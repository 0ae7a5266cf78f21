#!/usr/bin/env python3
"""Hugging Face transformers peer for bench/: the Llama-family workload (workloads/<name>.json is a
transformers config: llama, mistral, qwen2, mixtral) built as transformers' own
AutoModelForCausalLM in the same torch wheel, trained as a user would (torch.optim.AdamW, clip 1.0,
the same shapes and hyper-parameters as `trainscope run`), eager or under torch.compile. Prints one
JSON line like `trainscope run --json`.

Usage: peer_llama.py --workload tiny-llama --seq 128 --mbs 8 --steps 20 [--compile] [--threads N]
"""
import argparse
import json
import os
import time

import torch

import peer_gpt

HERE = os.path.dirname(os.path.abspath(__file__))
OURS = {"name", "description", "source", "notes"}  # trainscope's keys beside the transformers config


def build(workload):
    import transformers

    with open(os.path.join(HERE, "..", "workloads", workload + ".json")) as f:
        cfg = {k: v for k, v in json.load(f).items() if k not in OURS}
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    return model, config, transformers.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="tiny-llama")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default: eager)")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    dev = torch.device(a.device)
    model, config, version = build(a.workload)
    model.to(dev).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    fwd = torch.compile(model) if a.compile else model
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, config.vocab_size, (a.steps, a.mbs, a.seq + 1), generator=g).to(dev)
    times, losses = [], []
    for k in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        # The loss as trainscope computes it: input k predicts token k + 1 (transformers' own `labels`
        # would shift them again).
        out = fwd(input_ids=data[k, :, :-1].contiguous(), use_cache=False)
        loss = torch.nn.functional.cross_entropy(out.logits.float().view(-1, config.vocab_size),
                                                 data[k, :, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    # torch.compile's first steps compile: time only the steady state.
    print(json.dumps({"peer": "transformers-" + ("compile" if a.compile else "eager"), "transformers": version,
                      "torch": torch.__version__, "threads": torch.get_num_threads(),
                      **peer_gpt.step_timing(times, a.mbs * a.seq, skip=3 if a.compile else 1),
                      "final_loss": losses[-1]}))


if __name__ == "__main__":
    main()
