#!/usr/bin/env python3
"""`trainscope run --init-from DIR` on a checkpoint as a Hub user has it (docs/checkpoints.md).

    init_from_hub_test.py TRAINSCOPE_CLI WORKDIR [LAYERS]

The oracle tests (hf_oracle_test.py) load tiny fp32 models saved in one file. A Hub checkpoint is none
of that: HuggingFaceTB/SmolLM2-135M's verbatim config.json (tests/data/hub; hidden 576, 9 heads over
3 K/V heads of head_dim 64, SwiGLU 1536, vocabulary 49152, tied embeddings, rope_theta 100000, written
by transformers 4.42 with torch_dtype and rope_theta at the top level) and its weights in bf16, sharded
with model.safetensors.index.json. Here its layers are cut to LAYERS (4: the 30 take ~3x as long on
2 cores) and the weights are random (seeded), every other dimension the real one; the shards are
30 MB so that 4 layers still make several.

1. transformers builds the model in bf16 and save_pretrained()s it sharded; the Hub's config.json
   (layers cut) replaces the one transformers 5 writes, so the folder is as it is on the Hub.
2. `run --init-from D0` (fp32, SGD lr 1e-2, 2 steps, --save D1): the first loss equals transformers'
   loss of D0 loaded in fp32 on the same tokens (relative 1e-5), the second step's loss equals
   transformers' after its own SGD step (relative 1e-4: the step's gradient is summed in
   another order), and D1 loads with from_pretrained, its weights within 1e-4 of |w0| of
   transformers' two SGD steps (the gradient's order again), its head tied.
   D1's config.json keeps the checkpoint's bos/eos_token_id (0, not LlamaConfig's defaults 1 and 2).
3. The same under DP 2 and TP 3 (3 K/V heads: one per rank), saved: the losses are one process's,
   the saved weights D1's.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
HUB_CONFIG = os.path.join(HERE, "..", "data", "hub", "HuggingFaceTB__SmolLM2-135M", "config.json")
SEQ, GBS, LR = 32, 2, 1e-2
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def run(cli, args):
    p = subprocess.run([cli, "run"] + args + ["--json", "-q"], capture_output=True, text=True, timeout=500)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: trainscope run {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def batch(tokens, step):
    base = step * GBS * SEQ
    x = np.stack([tokens[base + s * SEQ:base + s * SEQ + SEQ] for s in range(GBS)]).astype(np.int64)
    y = np.stack([tokens[base + s * SEQ + 1:base + s * SEQ + SEQ + 1] for s in range(GBS)]).astype(np.int64)
    return torch.tensor(x), torch.tensor(y)


def hf_loss(model, tokens, step):
    x, y = batch(tokens, step)
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))


def main():
    cli, work = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(HUB_CONFIG) as f:
        hub_cfg = json.load(f)
    hub_cfg["num_hidden_layers"] = layers
    # 1. The checkpoint: bf16, sharded, the Hub's config.json.
    d0, cfg_dir = os.path.join(work, "smollm2-bf16"), os.path.join(work, "config")
    os.makedirs(cfg_dir)
    with open(os.path.join(cfg_dir, "config.json"), "w") as f:
        json.dump(hub_cfg, f, indent=2)
    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(cfg_dir)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(d0, max_shard_size="30MB")
    del model
    shutil.copy(os.path.join(cfg_dir, "config.json"), os.path.join(d0, "config.json"))
    with open(os.path.join(d0, "model.safetensors.index.json")) as f:
        shards = set(json.load(f)["weight_map"].values())
    if len(shards) < 2 or os.path.exists(os.path.join(d0, "model.safetensors")):
        raise SystemExit(f"FAIL: the checkpoint is not sharded: {sorted(os.listdir(d0))}")
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, hub_cfg["vocab_size"], size=SEQ * GBS * 4, dtype=np.uint16)
    data = os.path.join(work, "tokens.bin")
    tokens.tofile(data)
    common = ["--seq", str(SEQ), "--gbs", str(GBS), "--optimizer", "sgd", "--momentum", "0", "--weight-decay", "0",
              "--clip", "0", "--warmup", "0", "--min-lr-ratio", "1", "--lr", str(LR), "--data", data, "--precision", "fp32",
              "--device", "cpu", "--threads", "1"]
    # 2. One process, 2 steps, saved.
    d1 = os.path.join(work, "smollm2-2steps")
    one = run(cli, ["--init-from", d0, "--steps", "2", "--mbs", str(GBS), "--save", d1,
                    "--out", os.path.join(work, "one.db")] + common)
    ts = [one["first_loss"], one["final_loss"]]
    hf = transformers.AutoModelForCausalLM.from_pretrained(d0, dtype=torch.float32, attn_implementation="eager")
    check(hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr(), "transformers' D0 head is not tied")
    w0 = {k: v.detach().clone() for k, v in hf.named_parameters()}
    opt = torch.optim.SGD(hf.parameters(), lr=LR)
    hf_losses = []
    for step in range(2):
        opt.zero_grad()
        loss = hf_loss(hf, tokens, step)
        loss.backward()
        opt.step()
        hf_losses.append(loss.item())
    check(abs(ts[0] - hf_losses[0]) <= 1e-5 * abs(hf_losses[0]),
          f"first loss: trainscope {ts[0]!r}, transformers {hf_losses[0]!r} (relative 1e-5)")
    if len(ts) > 1:
        check(abs(ts[1] - hf_losses[1]) <= 1e-4 * abs(hf_losses[1]),
              f"second loss: trainscope {ts[1]!r}, transformers {hf_losses[1]!r} (relative 1e-4)")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(d1, dtype=torch.float32, attn_implementation="eager")
    check(loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr(),
          "D1's head is not tied after from_pretrained")
    for key in ("bos_token_id", "eos_token_id"):  # SmolLM2's 0, not LlamaConfig's defaults 1 and 2
        check(getattr(loaded.config, key) == hub_cfg[key],
              f"D1's {key} is {getattr(loaded.config, key)!r}, the checkpoint's {hub_cfg[key]!r}")
    w1 = dict(loaded.named_parameters())
    for k, p in hf.named_parameters():
        if k not in w1:
            failures.append(f"{d1} lacks {k} after from_pretrained")
            continue
        diff, moved = float((w1[k].detach() - p.detach()).norm()), float((p.detach() - w0[k]).norm())
        tol = 1e-4 * moved + 2.0 ** -21 * float(w0[k].norm())
        check(diff <= tol, f"{k}: D1 differs from transformers' two SGD steps by {diff:.3g} > {tol:.3g}")
    # 3. The same checkpoint into DP 2 and TP 3, 2 steps, saved: the losses are one process's, and the
    # saved weights (gathered over the ranks) D1's up to the gradient's order of summation.
    layouts = {"dp2": ["--nproc", "2", "--mbs", "1"], "tp3": ["--nproc", "3", "--tp", "3", "--mbs", str(GBS)]}
    for name, flags in layouts.items():
        saved = os.path.join(work, f"{name}-2steps")
        got = run(cli, ["--init-from", d0, "--steps", "2", "--save", saved, "--out", os.path.join(work, f"{name}.db")]
                  + flags + common)
        check(abs(got["first_loss"] - ts[0]) <= 1e-5 * abs(ts[0]),
              f"{name}: first loss {got['first_loss']!r}, one process {ts[0]!r}")
        check(abs(got["final_loss"] - ts[1]) <= 1e-4 * abs(ts[1]),
              f"{name}: second loss {got['final_loss']!r}, one process {ts[1]!r}")
        w2 = dict(transformers.AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32).named_parameters())
        for k, p in w1.items():
            moved = float((p.detach() - w0[k]).norm())
            diff = float((w2[k].detach() - p.detach()).norm()) if k in w2 else float("inf")
            tol = 1e-4 * moved + 2.0 ** -21 * float(w0[k].norm())
            check(diff <= tol, f"{name}: saved {k} differs from one process's by {diff:.3g} > {tol:.3g}")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"ok: SmolLM2-135M shape ({layers} layers, bf16, {len(shards)} shards): losses {ts} "
          f"(transformers {hf_losses}); D1 loads tied with its token ids; DP 2 and TP 3 the same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
