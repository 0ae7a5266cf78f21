#!/usr/bin/env python3
"""Parameter counts of trainscope's Hugging Face-format workload presets, from transformers itself.

The outside oracle for workloads' analytic parameterCount()/activeParameterCount() (issue 32): each
preset's config.json keys build the model with AutoModelForCausalLM.from_config on the meta device
(no memory, no weights), and its parameters are counted. The numbers are written into
tests/core/architecture_test.cpp. Run by hand (transformers is not part of scripts/setup):

  /opt/trainscope/venv/bin/pip install --target /tmp/arch-pylib transformers
  PYTHONPATH=/tmp/arch-pylib /opt/trainscope/venv/bin/python bench/arch_param_oracle.py
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

PRESETS = ["tiny-llama", "tiny-mixtral", "small-llama", "llama3-8b", "llama3-70b", "llama3.1-405b", "mistral-7b",
           "qwen2.5-7b", "mixtral-8x7b", "tiny-qwen2-moe", "qwen1.5-moe-a2.7b"]
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads")


def counts(name):
    with open(os.path.join(HERE, name + ".json")) as f:
        keys = json.load(f)
    for k in ("name", "description", "source"):
        keys.pop(k, None)
    cfg = AutoConfig.for_model(keys.pop("model_type"), **keys)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    total = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    active = total
    n_exp = getattr(cfg, "num_local_experts", 0) or getattr(cfg, "num_experts", 0) or 0  # Mixtral, Qwen2-MoE
    if n_exp:
        # Each layer's experts hold n_exp equal shares; a token passes through num_experts_per_tok
        # (Qwen2-MoE's shared expert, "shared_expert.", is not among ".experts.": every token's).
        expert_params = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
        active = total - expert_params + expert_params * cfg.num_experts_per_tok // n_exp
    return total, active


def main():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for name in sys.argv[1:] or PRESETS:
        total, active = counts(name)
        print(f"{name:16s} total {total:>16d} active {active:>16d}")


if __name__ == "__main__":
    main()
