#!/usr/bin/env python3
"""Real Hugging Face Hub config.json files, verbatim, read as transformers reads them (issue 32).

    hub_configs_test.py TRAINSCOPE WORKDIR

tests/data/hub/<org>__<model>/config.json are the files as published on the Hub (every key, null
values, rope_scaling dicts, head_dim, sliding-window keys, GPT-2's summary_* keys). For each:
  - `trainscope predict --json` reads the file, and the model folder holding it, and prices a plan;
    and so is the file as this venv's transformers saves it again (dtype, rope_parameters,
    layer_types); its `parameters` and `active_parameters` equal transformers' own count of the model built from
    the same file (AutoConfig.from_pretrained + AutoModelForCausalLM.from_config on the meta device:
    no weights, no memory; tied weights counted once; active = the shared parts plus top-k of each
    layer's experts);
  - `trainscope tune --budget 0.001s` makes a study of it (a small space, over its budget before a trial), and `export --format megatron|deepspeed|
    accelerate` write its first valid candidate, and `export --format hf-config` writes a config.json
    that transformers builds into a model of the same parameter count.
tests/data/hub-refused/<org>__<model>/config.json are real files of what trainscope does not build:
each is refused with exit 2 and a message naming the key that made it unsupported (REFUSED below).
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "data"))

# The plan each model is priced under on H100 nodes of 8 (a layout its heads, KV heads and experts
# allow, on enough nodes to hold its training state): predict must run, whether it fits or not.
NODES = {"meta-llama__Llama-3.1-70B": 4, "mistralai__Mixtral-8x7B-v0.1": 4, "Qwen__Qwen2-57B-A14B": 4,
         "mistralai__Mixtral-8x22B-v0.1": 8}
PLANS = {
    "meta-llama__Llama-3.1-70B": ["--tp", "8", "--pp", "4", "--sequence-parallel"],
    "mistralai__Mixtral-8x22B-v0.1": ["--ep", "8", "--pp", "8", "--zero", "1"],
    "mistralai__Mixtral-8x7B-v0.1": ["--ep", "8", "--tp", "2", "--zero", "1"],
    "Qwen__Qwen2-57B-A14B": ["--ep", "8", "--pp", "4", "--zero", "1"],
    "Qwen__Qwen1.5-MoE-A2.7B": ["--ep", "4", "--zero", "1"],
    "HuggingFaceTB__SmolLM2-135M": ["--zero", "2"],  # 9 heads, 3 KV heads: no TP 2
}
DEFAULT_PLAN = ["--tp", "2", "--zero", "1"]
# tune's space, kept small (the models rank it; the budget is spent before a trial starts): its first valid candidate is exported.
SPACE = ["--gbs", "64", "--seq", "1024", "--budget", "0.001s", "--mbs", "1,2", "--ckpt", "none,full",
         "--pp-schedules", "1f1b", "--cp", "1", "--virtual-stages", "1", "--zero", "1,3"]

# Refused files: the key the message must name (the first line of `error:`).
REFUSED = {
    "google__gemma-2b": ['workload.model_type', '"gemma"', "llama"],
    "microsoft__Phi-3-mini-4k-instruct": ['workload.model_type', '"phi3"', "llama"],
    "Qwen__Qwen3-8B": ['workload.model_type', '"qwen3"', "qwen2"],
    "deepseek-ai__DeepSeek-V3": ['workload.model_type', '"deepseek_v3"', 'rope_scaling.type "yarn"'],
    "NousResearch__Yarn-Mistral-7b-128k": ["workload.rope_scaling.type", '"yarn"', "llama3"],
    "lmsys__vicuna-7b-v1.5-16k": ["workload.rope_scaling.type", '"linear"', "llama3"],
}


def run(args, ok=(0,)):
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if r.returncode not in ok:
        raise AssertionError(f"{' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-1500:]}")
    return r


def build(folder):
    """transformers' config and model (on the meta device: no weights, no memory) of folder/config.json."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return cfg, model


def oracle(folder):
    """transformers' (total, active) parameters of the model built from folder/config.json."""
    cfg, model = build(folder)
    total = sum(p.numel() for p in model.parameters())  # a tied head is the embedding: counted once
    n_exp = getattr(cfg, "num_local_experts", 0) or getattr(cfg, "num_experts", 0) or 0
    active = total
    if n_exp:
        experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
        active = total - experts + experts * cfg.num_experts_per_tok // n_exp
    return total, active


def semantics(folder):
    """What the model built from folder/config.json computes, as far as its config decides it: every
    parameter's name and shape (biases, head_dim, GQA, a tied head, experts), the norm's epsilon, the
    activation, the RoPE parameters (theta and scaling), the positions' length and each layer's
    attention window (transformers' own rule per model_type: Mistral and Mixtral window every layer,
    Qwen2 and Qwen2-MoE the layers layer_types names)."""
    cfg, model = build(folder)
    # The model_type (and so the model class) the file names, as the user gave it: Mistral v0.3 (no
    # window) used to come back as llama. The tokens generation stops on, and the routing of experts.
    s = {"shapes": {n: tuple(p.shape) for n, p in model.named_parameters()}, "model_type": cfg.model_type,
         "architectures": type(model).__name__,
         "tokens": [getattr(cfg, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")],
         "routing": [getattr(cfg, k, None) for k in ("num_experts_per_tok", "norm_topk_prob")]}
    if cfg.model_type == "gpt2":
        s.update(eps=cfg.layer_norm_epsilon, act=cfg.activation_function, positions=cfg.n_positions)
        return s
    rope = dict(getattr(cfg, "rope_parameters", None) or {})
    s.update(eps=cfg.rms_norm_eps, act=cfg.hidden_act, positions=cfg.max_position_embeddings,
             rope={k: (v if isinstance(v, str) else float(v)) for k, v in rope.items() if v is not None})
    n = cfg.num_hidden_layers
    window = getattr(cfg, "sliding_window", None) or None
    if cfg.model_type in ("mistral", "mixtral"):
        s["windows"] = [window] * n
    elif getattr(cfg, "layer_types", None):
        s["windows"] = [window if t == "sliding_attention" else None for t in cfg.layer_types]
    else:
        s["windows"] = [None] * n
    return s


def check_supported(ts, name, work, failures):
    folder = os.path.join(DATA, "hub", name)
    path = os.path.join(folder, "config.json")
    plan = PLANS.get(name, DEFAULT_PLAN)
    cluster = ["--cluster", "h100-80gb-x8", "--nodes", str(NODES.get(name, 1))]
    got = {}
    for what in (path, folder):  # the file, and the model folder holding it (as --init-from takes)
        r = run([ts, "predict", "--workload", what, *cluster, *plan, "--json"])
        got[what] = json.loads(r.stdout)
    p = got[path]
    if got[folder]["parameters"] != p["parameters"]:
        failures.append(f"{name}: the folder and its config.json give {got[folder]['parameters']} and {p['parameters']}")
    total, active = oracle(folder)
    # The same file as transformers (this venv's version) saves it: dtype for torch_dtype,
    # rope_parameters for rope_theta + rope_scaling, layer_types, nulls for the defaults.
    from transformers import AutoConfig
    resaved = os.path.join(work, name + "-resaved")
    AutoConfig.from_pretrained(folder).save_pretrained(resaved)
    r = run([ts, "predict", "--workload", resaved, *cluster, *plan, "--json"])
    if (json.loads(r.stdout)["parameters"], json.loads(r.stdout)["active_parameters"]) != (total, active):
        failures.append(f"{name}: saved again by transformers, it counts "
                        f"{json.loads(r.stdout)['parameters']:,} parameters, transformers {total:,}")
    line = f"{name:40s} {p['plan']:40s} params {p['parameters']:>15,} active {p['active_parameters']:>15,}"
    if (p["parameters"], p["active_parameters"]) != (total, active):
        failures.append(f"{name}: trainscope counts {p['parameters']:,} total / {p['active_parameters']:,} active, "
                        f"transformers {total:,} / {active:,}")
        line += f"  transformers {total:,} / {active:,}  MISMATCH"
    print(line, flush=True)
    study = os.path.join(work, name + ".db")
    run([ts, "tune", "--workload", path, *cluster, *SPACE, "--study", study], ok=(0, 1))
    con = sqlite3.connect(f"file:{study}?mode=ro", uri=True)
    try:  # bench/check_exports_studies.py's valid_candidates
        row = con.execute("SELECT id FROM candidates WHERE config IS NOT NULL AND coalesce(rejected, '') = '' "
                          "ORDER BY id LIMIT 1").fetchone()
    finally:
        con.close()
    if row is None:
        failures.append(f"{name}: tune {' '.join(cluster + SPACE)} left no valid candidate")
        return
    for fmt in ("megatron", "deepspeed", "accelerate", "hf-config"):
        r = subprocess.run([ts, "export", study, "--format", fmt, "--trial", str(row[0])], capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0 or not r.stdout.strip():
            failures.append(f"{name}: export --format {fmt} exited {r.returncode}: {r.stderr.strip()[-800:]}")
        elif fmt == "hf-config":
            back = os.path.join(work, name + "-export")
            os.makedirs(back, exist_ok=True)
            with open(os.path.join(back, "config.json"), "w") as f:
                f.write(r.stdout)
            want, got_back = semantics(folder), semantics(back)
            for key in want:
                if want[key] != got_back.get(key):
                    diff = want[key] if key != "shapes" else sorted(set(want[key].items()) ^ set(got_back[key].items()))[:6]
                    failures.append(f"{name}: export --format hf-config builds another model in transformers: {key} "
                                    f"{diff if key == 'shapes' else want[key]} in the Hub file, "
                                    f"{'' if key == 'shapes' else got_back.get(key)} in the export")


def check_refused(ts, name, failures):
    path = os.path.join(DATA, "hub-refused", name, "config.json")
    r = subprocess.run([ts, "predict", "--workload", path, "--json"], capture_output=True, text=True, timeout=120)
    msg = r.stderr.strip()
    missing = [s for s in REFUSED[name] if s not in msg]
    print(f"{name:40s} exit {r.returncode}: {msg.splitlines()[0][:200] if msg else ''}", flush=True)
    if r.returncode != 2 or missing:
        failures.append(f"{name}: expected exit 2 naming {REFUSED[name]}, got exit {r.returncode} "
                        f"(missing {missing}): {msg[-600:]}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    ts, parent = sys.argv[1:]
    os.makedirs(parent, exist_ok=True)
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers is not installed in", sys.executable, "(run scripts/setup)")
        sys.exit(1)
    supported = sorted(os.listdir(os.path.join(DATA, "hub")))
    refused = sorted(os.listdir(os.path.join(DATA, "hub-refused")))
    if sorted(REFUSED) != refused:
        sys.exit(f"REFUSED lists {sorted(REFUSED)} but tests/data/hub-refused holds {refused}")
    failures = []
    with tempfile.TemporaryDirectory(dir=parent) as work:
        for name in supported:
            try:
                check_supported(ts, name, work, failures)
            except (AssertionError, subprocess.TimeoutExpired, KeyError, ValueError) as e:
                failures.append(f"{name}: {e}")
    for name in refused:
        check_refused(ts, name, failures)
    # A download in the Hugging Face cache: a snapshot folder whose config.json links to a blob.
    with tempfile.TemporaryDirectory(dir=parent) as hf_home:
        repo = os.path.join(hf_home, "hub", "models--meta-llama--Llama-3.2-1B")
        snap = os.path.join(repo, "snapshots", "4e20de362430cd3b72f300e6b0f18e50e7166e08")
        os.makedirs(snap)
        os.makedirs(os.path.join(repo, "blobs"))
        with open(os.path.join(DATA, "hub", "meta-llama__Llama-3.2-1B", "config.json")) as f, \
                open(os.path.join(repo, "blobs", "4e1b4c2"), "w") as g:
            g.write(f.read())
        os.symlink(os.path.join("..", "..", "blobs", "4e1b4c2"), os.path.join(snap, "config.json"))
        r = subprocess.run([ts, "predict", "--workload", snap, "--json"], capture_output=True, text=True, timeout=120)
        name = json.loads(r.stdout)["workload"] if r.returncode == 0 else r.stderr.strip()
        print(f"Hugging Face cache snapshot: exit {r.returncode}, workload {name}")
        if name != "meta-llama/Llama-3.2-1B":
            failures.append(f"a Hugging Face cache snapshot is read as {name!r}, not meta-llama/Llama-3.2-1B")
    if failures:
        print("\nFAILED:\n" + "\n".join(failures))
        sys.exit(1)
    print(f"\n{len(supported)} Hub configs read, priced, exported and counted as transformers does; "
          f"{len(refused)} refused by name")


if __name__ == "__main__":
    main()
