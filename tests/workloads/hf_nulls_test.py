#!/usr/bin/env python3
"""A config.json key set to JSON null is read as this venv's transformers reads it.

    hf_nulls_test.py TRAINSCOPE WORKDIR

For each Llama-family model_type (llama, mistral, qwen2, mixtral, qwen2_moe) and each key below, a
tiny config.json with that key null is given to transformers (AutoConfig.from_pretrained, then
AutoModelForCausalLM.from_config and a forward pass of three tokens) and to `trainscope predict
--workload`:
  - where transformers refuses it (its configuration's strict field check) or builds a model that
    fails, trainscope must exit 2 naming workload.KEY (it used to take its own default silently:
    rms_norm_eps 1e-6, rope_theta 10000, Mixtral's top-2, ...);
  - where transformers reads a meaning into the null (sliding_window: no window; head_dim: hidden /
    heads; num_key_value_heads: the heads, for llama and qwen2), trainscope must read the file, and
    its parameter count must equal that of transformers' model.
"""
import json
import os
import subprocess
import sys
import tempfile

BASE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 64, "hidden_act": "silu"}
TYPES = {"llama": {}, "mistral": {}, "qwen2": {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1},
         "mixtral": {"num_local_experts": 4},
         "qwen2_moe": {"num_experts": 4, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64}}
KEYS = ["rms_norm_eps", "num_experts_per_tok", "rope_theta", "sliding_window", "head_dim", "num_key_value_heads",
        "tie_word_embeddings", "attention_bias", "mlp_bias", "attention_dropout", "use_sliding_window",
        "max_window_layers", "router_aux_loss_coef", "router_jitter_noise", "norm_topk_prob", "moe_intermediate_size",
        "shared_expert_intermediate_size", "num_experts", "qkv_bias", "decoder_sparse_step"]


def transformers_outcome(folder):
    """(None, parameter count) when transformers builds and runs the model; (error, None) otherwise."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    try:
        cfg = AutoConfig.from_pretrained(folder)
        model = AutoModelForCausalLM.from_config(cfg)
        with torch.no_grad():
            out = model(torch.tensor([[1, 2, 3]])).logits
        if not torch.isfinite(out).all():
            return "non-finite logits", None
        return None, sum(p.numel() for p in model.parameters())
    except Exception as e:  # noqa: BLE001 - any failure is transformers refusing the file
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120]}", None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    ts, parent = sys.argv[1:]
    os.makedirs(parent, exist_ok=True)
    failures, refused, read = [], 0, 0
    with tempfile.TemporaryDirectory(dir=parent) as work:
        for model_type, extra in TYPES.items():
            for key in KEYS:
                cfg = dict(BASE, **extra, model_type=model_type)
                cfg[key] = None
                folder = os.path.join(work, f"{model_type}-{key}")
                os.makedirs(folder)
                with open(os.path.join(folder, "config.json"), "w") as f:
                    json.dump(cfg, f)
                error, params = transformers_outcome(folder)
                r = subprocess.run([ts, "predict", "--workload", folder, "--cluster", "h100-80gb-x8", "--gpus", "1",
                                    "--seq", "16", "--json"], capture_output=True, text=True, timeout=120)
                what = f"{model_type} {key}: null"
                if error:
                    refused += 1
                    if r.returncode != 2 or f"workload.{key}" not in r.stderr:
                        failures.append(f"{what}: transformers fails ({error}) but trainscope exited {r.returncode}: "
                                        f"{r.stderr.strip()[-300:]}")
                else:
                    read += 1
                    if r.returncode != 0:
                        failures.append(f"{what}: transformers reads it, trainscope exited {r.returncode}: "
                                        f"{r.stderr.strip()[-300:]}")
                        continue
                    ours = json.loads(r.stdout.strip().splitlines()[-1])["parameters"]
                    if ours != params:
                        failures.append(f"{what}: {ours} parameters, transformers' model {params}")
                print(f"{what:50s} transformers {'fails: ' + error if error else 'reads it'}; trainscope exit "
                      f"{r.returncode}", flush=True)
    if failures:
        print("\nFAILED:\n" + "\n".join(failures))
        sys.exit(1)
    print(f"\n{refused} nulls refused as transformers refuses them, {read} read as transformers reads them")


if __name__ == "__main__":
    main()
