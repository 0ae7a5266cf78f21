"""bench/check_exports_megatron.py — a Megatron-LM export read by Megatron-LM's own code (megatron-core's
parse_args, validate_args, core_transformer_config_from_args, build_tokenizer): bench/check_exports.py's
megatron check, also run by tests/exports/megatron_parser_test.py.
"""

import json
import os
import shlex
import sys

import check_exports_arch as arch  # noqa: E402  (issue 32: the architecture in the exports)
from check_exports_common import ROOT, Captured, importable, want, workload_file  # noqa: E402

MEGATRON_ARCH = 9  # the GPU architecture Megatron's validate_args is told on a machine without one


def megatron_problems(text, run, hf_config=None):
    from megatron.training.arguments import parse_args, validate_args, core_transformer_config_from_args
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer
    import torch
    import megatron.training.arguments as margs
    world = run["dp"] * run.get("cp", 1) * run["tp"] * run["pp"]
    saved = {k: os.environ.get(k) for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "CUDA_DEVICE_MAX_CONNECTIONS")}
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")  # what parse_args reads
    if not torch.cuda.is_available():
        # validate_args asks the GPU's architecture when TP > 1; answer Hopper (9), whose rules are
        # the stricter: TP needs CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM's launch scripts set.
        margs.get_device_arch_version = lambda: MEGATRON_ARCH
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    sys.argv = ["pretrain_gpt.py"] + shlex.split(text)
    try:
        return megatron_args_problems(run, parse_args, validate_args, core_transformer_config_from_args,
                                      build_tokenizer, hf_config)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def megatron_moe_expected(run):
    """The parsed MoE arguments the run's workload file asks for ({} for a dense workload)."""
    spec = run.get("workload_spec") or ""
    if not spec.endswith(".json") or not os.path.exists(spec):
        spec = os.path.join(ROOT, "workloads", run["workload"] + ".json")
    if not os.path.exists(spec):
        return {}
    with open(spec) as f:
        w = json.load(f)
    if w.get("model_type") == "qwen2_moe":
        return {**megatron_moe_expected_hf(w), "expert_model_parallel_size": run.get("ep", 1)}
    if not w.get("n_experts"):
        return {}
    cf = w.get("capacity_factor", 0)
    e = {"num_experts": w["n_experts"], "moe_router_topk": w.get("top_k", 2), "moe_layer_freq": w.get("moe_every", 1),
         "moe_ffn_hidden_size": w.get("moe_ffn_hidden") or 4 * w["n_embd"],
         "expert_model_parallel_size": run.get("ep", 1), "expert_tensor_parallel_size": 1,
         "moe_token_dispatcher_type": "alltoall", "moe_router_load_balancing_type": "aux_loss",
         "moe_aux_loss_coeff": w.get("aux_loss_coeff", 0.0), "moe_expert_capacity_factor": cf if cf > 0 else None}
    if cf > 0:
        e["moe_token_drop_policy"] = "position"
    if w.get("z_loss_coeff"):
        e["moe_z_loss_coeff"] = w["z_loss_coeff"]
    return e


def qwen2_moe_layers(cfg):
    """transformers' Qwen2MoeDecoderLayer: 1 where layer i holds the experts, 0 where its MLP is dense."""
    step, only = cfg.get("decoder_sparse_step", 1), cfg.get("mlp_only_layers") or []
    return [int(i not in only and (i + 1) % step == 0) for i in range(cfg["num_hidden_layers"])]


def megatron_layer_freq(pattern):
    """Megatron-LM's parsed --moe-layer-freq for a layer pattern: the integer k where the pattern is every
    k-th layer from layer 0 (megatron-core's own expansion: i % k == 0), else the list itself."""
    for k in range(1, len(pattern) + 1):
        if pattern == [int(i % k == 0) for i in range(len(pattern))]:
            return k
    return pattern


def megatron_moe_expected_hf(cfg):
    """The same for a Hugging Face qwen2_moe config.json (a shared expert of its own width behind a gate,
    top-k of the full softmax unless norm_topk_prob)."""
    if cfg.get("model_type") != "qwen2_moe":
        return {}
    return {"num_experts": cfg["num_experts"], "moe_router_topk": cfg["num_experts_per_tok"],
            "moe_layer_freq": megatron_layer_freq(qwen2_moe_layers(cfg)),
            "moe_ffn_hidden_size": cfg["moe_intermediate_size"],
            "moe_shared_expert_intermediate_size": cfg["shared_expert_intermediate_size"],
            "moe_shared_expert_gate": True, "moe_router_pre_softmax": not cfg.get("norm_topk_prob", False)}


def megatron_args_problems(run, parse_args, validate_args, core_transformer_config_from_args, build_tokenizer,
                           hf_config=None):
    p = []
    with Captured() as cap:
        try:
            args = parse_args(ignore_unknown_args=False)
        except SystemExit:
            return [f"parse_args refused the flags: {cap.err.getvalue().strip().splitlines()[-1:]}"]
        try:
            validate_args(args, {})
        except (AssertionError, ValueError, RuntimeError) as e:
            return [f"validate_args refused them: {e!r}"]
    prec = run["precision"]
    ckpt = {"none": None, "selective": "selective", "full": "full"}[run["ckpt"]]
    expected = {"num_layers": run["n_layer"], "hidden_size": run["n_embd"], "num_attention_heads": run["n_head"],
                "seq_length": run["seq"], "max_position_embeddings": run["n_positions"],
                "vocab_size": run["vocab_size"], "tensor_model_parallel_size": run["tp"],
                "pipeline_model_parallel_size": run["pp"], "data_parallel_size": run["dp"],
                "micro_batch_size": run["mbs"], "global_batch_size": run["gbs"], "lr": run["lr"],
                "min_lr": run["lr"] * run["min_lr_ratio"], "lr_decay_style": "cosine",
                "lr_warmup_iters": run["warmup"], "train_iters": run["steps"], "weight_decay": run["weight_decay"],
                "clip_grad": run["clip"], "adam_beta1": run["beta1"], "adam_beta2": run["beta2"],
                "adam_eps": run["eps"], "seed": run["seed"], "bf16": prec in ("bf16", "fp8"), "fp16": prec == "fp16",
                "recompute_granularity": ckpt, "sequence_parallel": bool(run["sequence_parallel"]),
                "use_distributed_optimizer": run["zero"] >= 1, "hidden_dropout": 0.0, "attention_dropout": 0.0,
                "optimizer": "sgd" if run["optimizer"] == "sgd" else "adam",
                "context_parallel_size": run.get("cp", 1),
                "virtual_pipeline_model_parallel_size": run.get("virtual_stages", 1) if run.get("virtual_stages", 1) > 1
                else None}
    if prec == "fp16":
        expected["initial_loss_scale"] = float(run["fp16_init_scale"])
    # fp8 trains in bf16 with Transformer Engine's delayed-scaling HYBRID recipe (this runtime's: amax
    # history 16, the max of it, margin 0; runtime/src/model/fp8.h).
    # Every term of the recipe is in the flags, none left to megatron-core's defaults (issue 32); what
    # its defaults already say as this runtime does is checked on the parsed arguments: FP8 weight
    # gradients, bf16 parameters (no FP8 parameter gather), bf16 attention core, every block in FP8,
    # amaxes reduced over the whole data- and tensor-parallel domain (runtime/src/model/fp8.h).
    if prec == "fp8":
        expected.update(fp8="hybrid", fp8_recipe="delayed", fp8_margin=0, fp8_amax_history_len=16,
                        fp8_amax_compute_algo="max", fp8_wgrad=True, fp8_param_gather=False)
        said = set(sys.argv[1:])
        for flag in ("--fp8-format", "--fp8-recipe", "--fp8-margin", "--fp8-amax-history-len",
                     "--fp8-amax-compute-algo"):
            if flag not in said:
                p.append(f"{flag} is not in the flags: the recipe would be megatron-core's default")
    else:
        expected["fp8"] = None
    expected.update(megatron_moe_expected(run))
    for k, v in expected.items():
        want(p, k, getattr(args, k), v)
    want(p, "micro-batches (gbs / (mbs x dp))", args.global_batch_size // (args.micro_batch_size *
                                                                          args.data_parallel_size), run["ga"])
    if not importable("transformer_engine"):
        args.apply_rope_fusion = False  # Transformer Engine's RoPE kernel (a GPU's), not the model
    try:
        with Captured():
            tc = core_transformer_config_from_args(args)
        want(p, "TransformerConfig.num_layers", tc.num_layers, run["n_layer"])
        want(p, "TransformerConfig.recompute_granularity", tc.recompute_granularity, ckpt)
        want(p, "TransformerConfig.sequence_parallel", tc.sequence_parallel, bool(run["sequence_parallel"]))
        want(p, "TransformerConfig.fp8", tc.fp8, expected["fp8"])
        if prec == "fp8":
            tc_fp8 = dict(fp8_recipe="delayed", fp8_margin=0, fp8_amax_history_len=16, fp8_amax_compute_algo="max",
                          fp8_wgrad=True, fp8_dot_product_attention=False, first_last_layers_bf16=False,
                          tp_only_amax_red=False)
            for k in ("fp8_recipe", "fp8_margin", "fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_wgrad",
                      "fp8_dot_product_attention", "first_last_layers_bf16", "tp_only_amax_red"):
                want(p, "TransformerConfig." + k, str(getattr(tc, k)).split(".")[-1], str(tc_fp8[k]))
        w = arch.preset(workload_file(run))
        p += arch.megatron_arch_problems(args, tc, arch.architecture(w))
        if args.position_embedding_type == "rope" and hf_config is not None:
            p += arch.rope_problems(args, tc, arch.hf_config_problems(hf_config, w)[1])
        if "num_experts" in expected:
            want(p, "TransformerConfig.num_moe_experts", tc.num_moe_experts, expected["num_experts"])
            want(p, "TransformerConfig.expert_model_parallel_size", tc.expert_model_parallel_size,
                 expected["expert_model_parallel_size"])
    except Exception as e:
        p.append(f"core_transformer_config_from_args refused them: {e!r}")
    try:
        args.tokenizer_type = "NullTokenizer"
        with Captured():
            build_tokenizer(args)
        tp = run["tp"]
        want(p, "padded vocab (NullTokenizer)", args.padded_vocab_size, -(-run["vocab_size"] // tp) * tp)
    except Exception as e:
        p.append(f"build_tokenizer(NullTokenizer) refused them: {e!r}")
    return p
