#!/usr/bin/env python3
"""The transformers oracle (issue 32): trainscope's loss and gradients equal transformers' on the
same config.json, weights and tokens, and checkpoints travel both ways unchanged.

    hf_oracle_test.py TRAINSCOPE_CLI MODEL WORKDIR
    (MODEL: gpt2, llama, llama3_scaled, mistral, mistral_window, qwen2, qwen2_window, mixtral, qwen2_moe,
    qwen2_moe_sparse)

1. transformers builds MODEL from a tiny config.json (fp32, seeded) and save_pretrained()s it: D0.
2. `trainscope run --init-from D0 --save D1` takes one step of SGD with lr 1 (no momentum, weight
   decay, clipping): w1 = w0 - g, so g = w0 - w1, with no gradient dump.
3. transformers computes the loss and gradients of w0 on the step's batch (the same token file;
   sample s of step 0 is tokens[s*T : s*T+T+1]) and loads D1 with from_pretrained, unchanged.
4. Checked: the logits of the step's batch at w0 (`run --dump-logits`, max difference 1e-5 of the
   largest logit), the step's loss (relative 1e-5), every gradient (D1's w1 against transformers' own
   step w0 - g: within 1e-4 of |g| plus the fp32 rounding of the subtraction, 2^-22 |w0|), and D1's
   loss in transformers against trainscope's on D1 (`--init-from D1`).
5. llama: the same step under DP 2 with ZeRO-3, mixtral and qwen2_moe(_sparse): under EP 2, saved (weights gathered from the
   ranks' pieces): transformers loads it, its weights are D1's within the gradient tolerance, and
   trainscope's logits of it equal transformers'.
trainscope trains every MODEL here: a refusal is a failure. (It used to exit 77, which ctest counts as
skipped, so a regression into a refusal would have passed unseen.)
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file

SEQ, GBS, VOCAB = 16, 2, 96
# One entry per architecture: the tiny config.json transformers and trainscope both read.
CONFIGS = {
    "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": VOCAB, "n_positions": 32,
             "n_embd": 32, "n_layer": 2, "n_head": 4, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
             "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True},
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": VOCAB, "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "hidden_act": "silu"},
    "mistral": {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "vocab_size": VOCAB,
                "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 1, "max_position_embeddings": 32, "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0, "sliding_window": None, "tie_word_embeddings": False, "hidden_act": "silu"},
    # Mistral v0.1's sliding window, shorter than the sequence (SEQ 16): query t sees keys t-5 .. t.
    "mistral_window": {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "vocab_size": VOCAB,
                       "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-5,
                       "rope_theta": 10000.0, "sliding_window": 6, "tie_word_embeddings": False,
                       "hidden_act": "silu"},
    "qwen2": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": VOCAB, "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": True, "use_sliding_window": False, "hidden_act": "silu"},
    # Qwen2 windowing only some layers (transformers' layer_types from max_window_layers): layer 0
    # attends over the whole sequence, layers 1 and 2 over a 6-token window (< SEQ 16).
    "qwen2_window": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": VOCAB,
                     "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-6,
                     "rope_theta": 10000.0, "tie_word_embeddings": False, "use_sliding_window": True,
                     "sliding_window": 6, "max_window_layers": 1, "hidden_act": "silu"},
    # Llama 3.2's shape in small: a tied head, head_dim 12 ≠ 32/4, and Llama 3's RoPE scaling with
    # original_max_position_embeddings 8, so the bands it scales (wavelength > 8) and blends (2 .. 8) meet
    # positions 0 .. 15 of SEQ 16.
    "llama3_scaled": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": VOCAB,
                      "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "num_key_value_heads": 2, "head_dim": 12, "max_position_embeddings": 32, "rms_norm_eps": 1e-5,
                      "rope_theta": 10000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                             "original_max_position_embeddings": 8},
                      "tie_word_embeddings": True, "hidden_act": "silu"},
    "mixtral": {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": VOCAB,
                "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0, "num_local_experts": 4, "num_experts_per_tok": 2,
                "router_aux_loss_coef": 0.0, "sliding_window": None, "tie_word_embeddings": False,
                "hidden_act": "silu"},
    # Qwen1.5-MoE's layer: 4 SwiGLU experts of 24 (top-2, the softmax's probabilities not renormalised:
    # norm_topk_prob false, Qwen2-MoE's default) and a shared expert of its own width 40 behind its
    # sigmoid gate; q/k/v biases; experts in every layer (decoder_sparse_step 1).
    "qwen2_moe": {"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "vocab_size": VOCAB,
                  "hidden_size": 32, "intermediate_size": 64, "moe_intermediate_size": 24,
                  "shared_expert_intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-6,
                  "rope_theta": 10000.0, "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": False,
                  "router_aux_loss_coef": 0.0, "decoder_sparse_step": 1, "mlp_only_layers": [],
                  "use_sliding_window": False, "qkv_bias": True, "tie_word_embeddings": False,
                  "hidden_act": "silu"},
    # Qwen2-MoE with dense layers (transformers' Qwen2MoeDecoderLayer): experts where (l + 1) % 2 == 0
    # outside mlp_only_layers, so layers 1 and 3 are a Qwen2MoeSparseMoeBlock and 0 and 2 a
    # Qwen2MoeMLP of intermediate_size 64 (model.layers.N.mlp.{gate,up,down}_proj).
    "qwen2_moe_sparse": {"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "vocab_size": VOCAB,
                         "hidden_size": 32, "intermediate_size": 64, "moe_intermediate_size": 24,
                         "shared_expert_intermediate_size": 40, "num_hidden_layers": 4, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-6,
                         "rope_theta": 10000.0, "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": False,
                         "router_aux_loss_coef": 0.0, "decoder_sparse_step": 2, "mlp_only_layers": [0],
                         "use_sliding_window": False, "qkv_bias": True, "tie_word_embeddings": False,
                         "hidden_act": "silu"},
}
# Windowed configs (and llama3_scaled's RoPE scaling): the same weights under these other windows must give transformers another loss
# (the oracle would not see a window that trainscope dropped or put on the wrong layers otherwise);
# likewise qwen2_moe's gates renormalised.
OTHER_WINDOWS = {"mistral_window": [{"sliding_window": None}], "llama3_scaled": [{"rope_scaling": None}],
                 "qwen2_window": [{"use_sliding_window": False}, {"max_window_layers": 0}],
                 "qwen2_moe": [{"norm_topk_prob": True}]}
# The sharded layouts each architecture's save is also checked under (step 5).
SHARDED = {"llama": ["--zero", "3"], "mixtral": ["--ep", "2"], "qwen2_moe": ["--ep", "2"],
           "qwen2_moe_sparse": ["--ep", "2"]}


def run(cli, args):
    p = subprocess.run([cli, "run"] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def step_loss(cli, args):
    rc, out, err = run(cli, args + ["--json", "-q"])
    if rc != 0:
        raise SystemExit(f"FAIL: trainscope run {' '.join(args)} exited {rc}:\n{err}")
    return json.loads(out.strip().splitlines()[-1])["first_loss"]


def hf_loss(model, tokens):
    x = torch.tensor(np.stack([tokens[s * SEQ:s * SEQ + SEQ] for s in range(GBS)]).astype(np.int64))
    y = torch.tensor(np.stack([tokens[s * SEQ + 1:s * SEQ + SEQ + 1] for s in range(GBS)]).astype(np.int64))
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))


def main():
    cli, name, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    cfg_json = CONFIGS[name]
    d0, d1 = os.path.join(work, f"{name}-w0"), os.path.join(work, f"{name}-w1")
    # 1. transformers' model, its weights the oracle's w0.
    cfg_dir = os.path.join(work, f"{name}-config")
    os.makedirs(cfg_dir, exist_ok=True)
    with open(os.path.join(cfg_dir, "config.json"), "w") as f:
        json.dump(cfg_json, f)
    config = transformers.AutoConfig.from_pretrained(cfg_dir)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                           attn_implementation="eager")
    model.save_pretrained(d0)
    # The token file: raw uint16 (nanoGPT layout).
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, VOCAB, size=SEQ * GBS * 4, dtype=np.uint16)
    data = os.path.join(work, f"{name}-tokens.bin")
    tokens.tofile(data)
    common = ["--seq", str(SEQ), "--mbs", str(GBS), "--gbs", str(GBS), "--optimizer", "sgd", "--momentum", "0",
              "--weight-decay", "0", "--clip", "0", "--warmup", "0", "--data", data, "--precision", "fp32",
              "--device", "cpu", "--threads", "1"]
    # 2. One SGD step of lr 1 from w0, saved.
    logits_file = os.path.join(work, f"{name}-logits.safetensors")
    if os.path.exists(logits_file):
        os.unlink(logits_file)
    rc, out, err = run(cli, ["--init-from", d0, "--steps", "1", "--lr", "1", "--save", d1, "--json", "-q",
                             "--dump-logits", logits_file] + common)
    if rc != 0:
        print(f"FAIL: trainscope run --init-from {d0} exited {rc}:\n{err}")
        return 1
    ts_loss0 = json.loads(out.strip().splitlines()[-1])["first_loss"]
    # 3. The oracle: loss and gradients of w0 in transformers.
    model.train()
    model.zero_grad()
    loss0 = hf_loss(model, tokens)
    loss0.backward()
    failures = []
    if abs(ts_loss0 - loss0.item()) > 1e-5 * abs(loss0.item()):
        failures.append(f"loss at w0: trainscope {ts_loss0!r}, transformers {loss0.item()!r}")
    with torch.no_grad():  # logits of the first micro-batch (all GBS samples: mbs = gbs)
        x = torch.tensor(np.stack([tokens[s * SEQ:s * SEQ + SEQ] for s in range(GBS)]).astype(np.int64))
        hf_logits = model(input_ids=x).logits.float()
    ts_logits = load_file(logits_file)["logits"]
    if ts_logits.shape != hf_logits.shape:
        failures.append(f"logits shape {tuple(ts_logits.shape)}, transformers {tuple(hf_logits.shape)}")
    else:
        err = float((ts_logits - hf_logits).abs().max())
        scale = float(hf_logits.abs().max())
        if not err <= 1e-5 * scale:
            failures.append(f"logits: max difference {err:.3g} against max |logit| {scale:.3g} (1e-5 relative)")
    for change in OTHER_WINDOWS.get(name, []):
        other_dir = os.path.join(work, f"{name}-other")
        os.makedirs(other_dir, exist_ok=True)
        with open(os.path.join(other_dir, "config.json"), "w") as f:
            json.dump({**cfg_json, **change}, f)
        other = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(other_dir),
                                                              dtype=torch.float32, attn_implementation="eager")
        other.load_state_dict(model.state_dict())
        with torch.no_grad():
            other_loss = hf_loss(other, tokens).item()
            # The logits as well: at initialisation the routed experts add little to the residual, so
            # qwen2_moe's renormalised gates move the loss by < 1e-4 but its logits by ~2% of the largest
            # (0.0085 of 0.43), far past the 1e-5 the logits are compared to above.
            other_err = float((other(input_ids=x).logits.float() - hf_logits).abs().max())
        if not (abs(other_loss - loss0.item()) > 1e-4 * abs(loss0.item()) or other_err > 1e-3 * float(hf_logits.abs().max())):
            failures.append(f"{change}: transformers' loss {other_loss!r} and logits (max difference {other_err:.3g}) "
                            f"equal the model's: the setting is inert")
    w0 = {k: v.detach().clone() for k, v in model.named_parameters()}
    grads = {k: v.grad.detach().clone() for k, v in model.named_parameters()}
    # 4. D1 loads in transformers unchanged; g = w0 - w1 per tensor.
    loaded = transformers.AutoModelForCausalLM.from_pretrained(d1, dtype=torch.float32,
                                                               attn_implementation="eager")
    w1 = dict(loaded.named_parameters())
    for k, g in grads.items():
        if k not in w1:
            failures.append(f"{d1} lacks {k} after from_pretrained")
            continue
        # transformers' own step from the same w0 (fp32, as trainscope's: p - lr * g). The two w1
        # differ by lr * (g_ts - g_hf) plus at most an ulp of w per element from the subtraction.
        hf_w1 = w0[k] - g
        diff = float((w1[k].detach() - hf_w1).norm())
        tol = 1e-4 * float(g.norm()) + 2.0 ** -22 * float(w0[k].norm())
        if not diff <= tol:
            failures.append(f"gradient of {k}: |w1 - (w0 - g_transformers)| = {diff:.3g} > {tol:.3g} "
                            f"(relative to |g| {diff / max(float(g.norm()), 1e-30):.3g})")
    with torch.no_grad():
        loss1 = hf_loss(loaded, tokens).item()
    ts_loss1 = step_loss(cli, ["--init-from", d1, "--steps", "1", "--lr", "1e-9"] + common)
    if abs(ts_loss1 - loss1) > 1e-5 * abs(loss1):
        failures.append(f"loss at w1 (D1): trainscope {ts_loss1!r}, transformers {loss1!r}")
    # 5. The same step saved from a sharded layout (ZeRO-3's parameter pieces, experts over ep ranks):
    # gathered into the Hugging Face layout, loaded by transformers unchanged, the same w1 as D1 up to
    # the order of the gradient's reduction (the gradient tolerance above), and trainscope's logits of
    # it (one process, --init-from) equal transformers'.
    sharded = SHARDED.get(name)
    if sharded:
        d2 = os.path.join(work, f"{name}-w1-sharded")
        flags = common[:common.index("--mbs")] + ["--mbs", "1"] + common[common.index("--mbs") + 2:]
        rc, out, err = run(cli, ["--init-from", d0, "--steps", "1", "--lr", "1", "--save", d2, "-q", "--nproc", "2"]
                           + sharded + flags)
        if rc != 0:
            failures.append(f"the save under {' '.join(sharded)} exited {rc}: {err.strip()}")
        else:
            w2 = dict(transformers.AutoModelForCausalLM.from_pretrained(d2, dtype=torch.float32,
                                                                        attn_implementation="eager").named_parameters())
            for k, g in grads.items():
                diff = float((w2[k].detach() - w1[k].detach()).norm()) if k in w2 else float("inf")
                tol = 2e-4 * float(g.norm()) + 2.0 ** -21 * float(w0[k].norm())
                if not diff <= tol:
                    failures.append(f"{' '.join(sharded)}: {k} differs from the one-process step by {diff:.3g} > {tol:.3g}")
            logits2 = os.path.join(work, f"{name}-logits-sharded.safetensors")
            if os.path.exists(logits2):
                os.unlink(logits2)
            step_loss(cli, ["--init-from", d2, "--steps", "1", "--lr", "1e-9", "--dump-logits", logits2] + common)
            with torch.no_grad():
                hf2 = transformers.AutoModelForCausalLM.from_pretrained(d2, dtype=torch.float32,
                                                                        attn_implementation="eager")(input_ids=x).logits
            err = float((load_file(logits2)["logits"] - hf2).abs().max())
            if not err <= 1e-5 * float(hf2.abs().max()):
                failures.append(f"{' '.join(sharded)}: logits of the gathered checkpoint differ by {err:.3g}")
    # 6. The Hub's older layout (openai-community/gpt2's model.safetensors): the base model's names
    # without "transformer.", no lm_head (tied), and the attention's causal-mask buffers h.L.attn.bias.
    # transformers loads it by adding the prefix; so must --init-from, to the same loss.
    if name == "gpt2":
        d3 = os.path.join(work, f"{name}-hub-layout")
        os.makedirs(d3, exist_ok=True)
        hub = {k[len("transformer."):]: v.detach().clone().contiguous() for k, v in w0.items()
               if k.startswith("transformer.")}
        n_pos = cfg_json["n_positions"]
        for layer in range(cfg_json["n_layer"]):
            hub[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(n_pos, n_pos)).view(1, 1, n_pos, n_pos)
        save_file(hub, os.path.join(d3, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(d3, "config.json"), "w") as f:
            json.dump(cfg_json, f)
        rc, out, err = run(cli, ["--init-from", d3, "--steps", "1", "--lr", "1e-9", "--json", "-q"] + common)
        if rc != 0:
            failures.append(f"--init-from the Hub's gpt2 layout (no 'transformer.' prefix) exited {rc}: {err.strip()}")
        else:
            hub_loss = json.loads(out.strip().splitlines()[-1])["first_loss"]
            if abs(hub_loss - loss0.item()) > 1e-5 * abs(loss0.item()):
                failures.append(f"the Hub's gpt2 layout: loss {hub_loss!r}, transformers {loss0.item()!r}")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"ok: {name}: logits, loss {ts_loss0:.6f} (transformers {loss0.item():.6f}), {len(grads)} gradients within 1e-4, "
          f"D1 loss {ts_loss1:.6f} (transformers {loss1:.6f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
