#!/usr/bin/env python3
"""bench/check_exports_arch.py — the architecture in trainscope's exports, read by the targets' own code.

Used by bench/check_exports.py for every Megatron-LM export and every config.json, and runnable
alone on one export (scratch venv: megatron-core 0.19.2, transformers 5.24.0, torch):

  bench/check_exports_arch.py WORKLOAD MEGATRON_FLAGS_FILE CONFIG_JSON
      WORKLOAD: a preset name (workloads/NAME.json) or its file: what the exports must say.

Megatron-LM: the flags are parsed by megatron/training/arguments.py's parse_args (as
check_exports.py does), then megatron-core's TransformerConfig is built from them
(core_transformer_config_from_args) and must agree with the workload: hidden size, attention heads,
query groups (GQA), kv_channels (head_dim), ffn_hidden_size, normalization and its epsilon,
gated_linear_unit with SiLU (SwiGLU), add_bias_linear / add_qkv_bias, the experts; the GPT model's
position embedding type, RoPE base and Llama 3 scaling and the untied head from the parsed arguments;
and megatron-core's RotaryEmbedding built from them has transformers' inv_freq for the config.json
(the same rotation frequencies, llama3 scaling included).
config.json: transformers.AutoConfig.from_pretrained(its folder) agrees with the workload's own
preset read by AutoConfig (a Hugging Face preset) or with its GPT-2 shape (trainscope's own file),
and the model it builds on the meta device has the same parameter count as the preset's.
"""
import json
import os
import shlex
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def preset(name_or_path):
    path = name_or_path if name_or_path.endswith(".json") else os.path.join(ROOT, "workloads", name_or_path + ".json")
    with open(path) as f:
        return json.load(f)


def architecture(w):
    """What the exports must say, from the workload file itself (not from trainscope's reader)."""
    t = w.get("model_type")
    if t is None or t == "gpt2":  # trainscope's own GPT file (or GPT-2's config): GPT-2's shape
        C, H = w["n_embd"], w["n_head"]
        return dict(hidden=C, heads=H, kv=H, head_dim=C // H, ffn=4 * C, norm="LayerNorm", eps=1e-5, swiglu=False,
                    positions="learned_absolute", theta=None, scaling=None, untied=False, bias_linear=True,
                    qkv_bias=False, experts=w.get("n_experts") or None, topk=w.get("top_k", 1),
                    moe_ffn=w.get("moe_ffn_hidden") or 4 * C, layers=w["n_layer"],
                    pre_softmax=w.get("top_k", 1) == 1 if "norm_topk_prob" not in w else not w["norm_topk_prob"],
                    shared_ffn=(w.get("shared_expert_hidden") or w.get("moe_ffn_hidden") or 4 * C)
                    if w.get("shared_expert") else None, shared_gate=bool(w.get("shared_expert_gate")))
    C, H = w["hidden_size"], w["num_attention_heads"]
    attn_bias = t == "llama" and w.get("attention_bias", False)
    mlp_bias = t == "llama" and w.get("mlp_bias", False)
    scaling = w.get("rope_scaling") or {}
    params = w.get("rope_parameters") or {}  # transformers 5 writes rope_theta and the scaling here
    if params:
        w = {**w, "rope_theta": params.get("rope_theta", w.get("rope_theta", 10000))}
        scaling = params if params.get("rope_type", "default") != "default" else scaling
    window = _window(w, t)
    if t == "qwen2_moe":  # Qwen2MoeConfig: q/k/v biases per qkv_bias, a gated shared expert, top-k of the whole softmax
        return dict(hidden=C, heads=H, kv=w.get("num_key_value_heads") or 16, head_dim=w.get("head_dim") or C // H,
                    ffn=w["intermediate_size"], norm="RMSNorm", eps=w.get("rms_norm_eps", 1e-6), swiglu=True,
                    positions="rope", theta=w.get("rope_theta", 10000), scaling=None,
                    untied=not w.get("tie_word_embeddings", False), bias_linear=False,
                    qkv_bias=w.get("qkv_bias", True), experts=w.get("num_experts", 60) or None,
                    topk=w.get("num_experts_per_tok", 4), moe_ffn=w.get("moe_intermediate_size", 1408),
                    layers=w["num_hidden_layers"], pre_softmax=not w.get("norm_topk_prob", False),
                    shared_ffn=w.get("shared_expert_intermediate_size", 5632), shared_gate=True, window=None)
    return dict(hidden=C, heads=H, kv=w.get("num_key_value_heads") or H, head_dim=w.get("head_dim") or C // H,
                ffn=w["intermediate_size"], norm="RMSNorm", eps=w.get("rms_norm_eps", 1e-6), swiglu=True,
                positions="rope", theta=w.get("rope_theta", 1e6 if t == "mixtral" else 10000),
                scaling=scaling.get("factor") if scaling.get("rope_type", scaling.get("type")) == "llama3" else None,
                untied=not w.get("tie_word_embeddings", False), bias_linear=attn_bias and mlp_bias,
                qkv_bias=(t == "qwen2") or attn_bias, experts=w.get("num_local_experts") or None,
                topk=w.get("num_experts_per_tok", 2), moe_ffn=w["intermediate_size"], layers=w["num_hidden_layers"],
                pre_softmax=False, shared_ffn=None, shared_gate=False, window=window)


def _window(w, t):
    """(W, list of windowed layers or None for all) as transformers builds the file's windows, or None."""
    if t in ("mistral", "mixtral"):
        W = w.get("sliding_window", 4096 if t == "mistral" else None)
        return (W, None) if W else None
    if t == "qwen2" and w.get("use_sliding_window", False):
        W, L = w.get("sliding_window", 4096), w["num_hidden_layers"]
        m = w.get("max_window_layers", 28)
        if not W or m >= L:
            return None
        return (W, None) if m == 0 else (W, [1 if layer >= m else 0 for layer in range(L)])
    return None


def _want(p, name, got, expected):
    ok = abs(got - expected) <= 1e-9 * max(abs(got), abs(expected)) if isinstance(expected, float) else got == expected
    if not ok:
        p.append(f"{name} {got!r} != {expected!r}")


def megatron_arch_problems(args, tc, a):
    """The parsed arguments and the TransformerConfig built from them against architecture(w)."""
    import torch.nn.functional as F
    p = []
    _want(p, "args.position_embedding_type", args.position_embedding_type, a["positions"])
    _want(p, "args.untie_embeddings_and_output_weights", args.untie_embeddings_and_output_weights, a["untied"])
    _want(p, "args.group_query_attention", args.group_query_attention, a["kv"] != a["heads"])
    if a["theta"] is not None:
        _want(p, "args.rotary_base", args.rotary_base, int(round(a["theta"])))
        _want(p, "args.rotary_percent", args.rotary_percent, 1.0)
        _want(p, "args.use_rope_scaling", args.use_rope_scaling, a["scaling"] is not None)
        if a["scaling"] is not None:
            _want(p, "args.rope_scaling_factor", args.rope_scaling_factor, float(a["scaling"]))
    _want(p, "TransformerConfig.num_layers", tc.num_layers, a["layers"])
    _want(p, "TransformerConfig.hidden_size", tc.hidden_size, a["hidden"])
    _want(p, "TransformerConfig.num_attention_heads", tc.num_attention_heads, a["heads"])
    _want(p, "TransformerConfig.num_query_groups", tc.num_query_groups, a["kv"])
    _want(p, "TransformerConfig.kv_channels", tc.kv_channels, a["head_dim"])
    _want(p, "TransformerConfig.ffn_hidden_size", tc.ffn_hidden_size, a["ffn"])
    _want(p, "TransformerConfig.normalization", tc.normalization, a["norm"])
    _want(p, "TransformerConfig.layernorm_epsilon", tc.layernorm_epsilon, float(a["eps"]))
    _want(p, "TransformerConfig.gated_linear_unit", tc.gated_linear_unit, a["swiglu"])
    if a["swiglu"]:
        _want(p, "TransformerConfig.activation_func", tc.activation_func, F.silu)
    _want(p, "TransformerConfig.add_bias_linear", tc.add_bias_linear, a["bias_linear"])
    _want(p, "TransformerConfig.add_qkv_bias", bool(tc.add_qkv_bias or tc.add_bias_linear),
          a["qkv_bias"] or a["bias_linear"])
    # transformers' window of W keys (t − W < j ≤ t) is Transformer Engine's (W − 1, 0).
    window = a.get("window")
    _want(p, "TransformerConfig.window_size", tuple(tc.window_size) if tc.window_size else None,
          (window[0] - 1, 0) if window else None)
    _want(p, "TransformerConfig.window_attn_skip_freq", tc.window_attn_skip_freq, window[1] if window else None)
    _want(p, "TransformerConfig.num_moe_experts", tc.num_moe_experts, a["experts"])
    if a["experts"]:
        _want(p, "TransformerConfig.moe_router_topk", tc.moe_router_topk, a["topk"])
        _want(p, "TransformerConfig.moe_ffn_hidden_size", tc.moe_ffn_hidden_size, a["moe_ffn"])
        _want(p, "TransformerConfig.moe_router_pre_softmax (false: softmax over the top k, i.e. renormalised gates)",
              tc.moe_router_pre_softmax, a["pre_softmax"])
        _want(p, "TransformerConfig.moe_shared_expert_intermediate_size", tc.moe_shared_expert_intermediate_size,
              a["shared_ffn"])
        _want(p, "TransformerConfig.moe_shared_expert_gate", bool(tc.moe_shared_expert_gate), a["shared_gate"])
    return p


def rope_problems(args, tc, hf_config):
    """megatron-core's RotaryEmbedding from the parsed flags against transformers' inv_freq."""
    import torch
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    rope = RotaryEmbedding(kv_channels=tc.kv_channels, rotary_percent=args.rotary_percent,
                           rotary_base=args.rotary_base, rope_scaling=args.use_rope_scaling,
                           rope_scaling_factor=args.rope_scaling_factor, use_cpu_initialization=True)
    params = getattr(hf_config, "rope_parameters", None) or {}
    kind = params.get("rope_type", "default")
    if kind == "default":
        theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
        hf = 1.0 / (theta ** (torch.arange(0, tc.kv_channels, 2, dtype=torch.float32) / tc.kv_channels))
    else:
        hf, _ = ROPE_INIT_FUNCTIONS[kind](hf_config, "cpu")
    if rope.inv_freq.shape != hf.shape or not torch.allclose(rope.inv_freq.float(), hf.float(), rtol=1e-6, atol=0):
        return [f"RotaryEmbedding.inv_freq differs from transformers' ({kind}): max |diff| "
                f"{(rope.inv_freq.float() - hf.float()).abs().max().item() if rope.inv_freq.shape == hf.shape else 'shape'}"]
    return []


def hf_config_problems(config_text, w):
    """AutoConfig.from_pretrained(folder of config_text) against the workload's preset."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    p = []
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config_text)
        cfg = AutoConfig.from_pretrained(d)
    a = architecture(w)
    if w.get("model_type"):
        keys = {k: v for k, v in w.items() if k not in ("name", "description", "source")}
        ref = AutoConfig.for_model(keys.pop("model_type"), **keys)
        _want(p, "model_type", cfg.model_type, ref.model_type if ref.model_type != "mistral" or w.get("sliding_window")
              else "llama")
        for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                  "vocab_size", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings", "num_local_experts",
                  "num_experts_per_tok", "rope_parameters", "num_experts", "moe_intermediate_size",
                  "shared_expert_intermediate_size", "norm_topk_prob", "qkv_bias"):
            if hasattr(ref, k):
                _want(p, f"AutoConfig.{k}", getattr(cfg, k, None), getattr(ref, k))
        if ref.model_type == "qwen2_moe":  # which layers hold experts (decoder_sparse_step, mlp_only_layers)
            def sparse(c):
                return [i not in (c.mlp_only_layers or []) and c.num_experts > 0 and (i + 1) % c.decoder_sparse_step == 0
                        for i in range(c.num_hidden_layers)]
            _want(p, "AutoConfig's sparse layers", sparse(cfg), sparse(ref))
        _want(p, "AutoConfig.head_dim", getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
              a["head_dim"])
    else:
        ref = AutoConfig.for_model("gpt2", n_layer=w["n_layer"], n_head=w["n_head"], n_embd=w["n_embd"],
                                   n_positions=w["n_positions"], vocab_size=w["vocab_size"],
                                   bos_token_id=w["vocab_size"] - 1, eos_token_id=w["vocab_size"] - 1)
        for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size", "tie_word_embeddings", "eos_token_id"):
            _want(p, f"AutoConfig.{k}", getattr(cfg, k), getattr(ref, k))
        _want(p, "AutoConfig.activation_function", cfg.activation_function, "gelu_new")
    with torch.device("meta"):
        n = sum(t.numel() for t in AutoModelForCausalLM.from_config(cfg).parameters())
        n_ref = sum(t.numel() for t in AutoModelForCausalLM.from_config(ref).parameters())
    _want(p, "parameters of the model built from config.json", n, n_ref)
    return p, cfg


def check_one(workload, megatron_text, config_text, world=1):
    """Both checks for one export (the CLI below; check_exports.py calls the pieces)."""
    from megatron.training.arguments import parse_args, core_transformer_config_from_args
    w = preset(workload)
    problems, cfg = hf_config_problems(config_text, w)
    flags = shlex.split(megatron_text)
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
    sys.argv = ["pretrain_gpt.py"] + flags
    args = parse_args(ignore_unknown_args=False)
    # parse_args leaves the derived fields to validate_args (check_exports.py runs it with the
    # run's layout); the TransformerConfig needs these.
    args.params_dtype = __import__("torch").float32
    if args.num_query_groups is None or not args.group_query_attention:
        args.num_query_groups = args.num_attention_heads
    if args.kv_channels is None:
        args.kv_channels = args.hidden_size // args.num_attention_heads
    args.apply_rope_fusion = False  # a Transformer Engine kernel (a GPU's), not the model
    args.data_parallel_size = max(1, world // (args.tensor_model_parallel_size * args.pipeline_model_parallel_size))
    tc = core_transformer_config_from_args(args)
    problems += megatron_arch_problems(args, tc, architecture(w))
    if args.position_embedding_type == "rope":
        problems += rope_problems(args, tc, cfg)
    return problems


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    workload, mfile, cfile = sys.argv[1:]
    with open(mfile) as f:
        mtext = f.read()
    with open(cfile) as f:
        ctext = f.read()
    world = 1
    t = shlex.split(mtext)
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size"):
        if flag in t:
            world *= int(t[t.index(flag) + 1])
    import warnings
    warnings.filterwarnings("ignore")
    problems = check_one(workload, mtext, ctext, world)
    print(("ok    " if not problems else "FAIL  ") + f"{workload}: {mfile}, {cfile}" +
          ("" if not problems else ": " + "; ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
