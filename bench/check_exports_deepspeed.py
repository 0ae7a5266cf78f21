"""bench/check_exports_deepspeed.py — a DeepSpeed export read by DeepSpeed's own code (DeepSpeedConfig with
every key traced, the engine's optimizer and scheduler) and a real deepspeed.initialize on CPU processes
(bench/check_exports.py's deepspeed checks; --ds-rank runs one such process).
"""

import json
import os
import subprocess
import sys
import tempfile

from common import output_file  # noqa: E402  (the rule of every trainscope output)
from check_exports_common import SCRIPT, Captured, free_port, schedule_problems, want  # noqa: E402

class Traced(dict):
    """A config dict that records which keys DeepSpeed's code reads (by [], get or in)."""

    def __init__(self, d, path, seen):
        super().__init__({k: Traced(v, path + (k,), seen) if isinstance(v, dict) else v for k, v in d.items()})
        self.__dict__.update(path=path, seen=seen)

    def __getitem__(self, k):
        self.seen.add(self.path + (k,))
        return super().__getitem__(k)

    def get(self, k, default=None):
        if k in self.keys():
            self.seen.add(self.path + (k,))
        return super().get(k, default)

    def __contains__(self, k):
        if k in self.keys():
            self.seen.add(self.path + (k,))
        return super().__contains__(k)

    def __reduce_ex__(self, protocol):  # copy.copy keeps the trace
        return (Traced, (dict(self), self.path, self.seen))


class DataParallelMpu:
    """What DeepSpeedConfig asks of an mpu: the data-parallel world size (Megatron-DeepSpeed's and
    the pipeline engine's grid answer it the same way)."""

    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_data_parallel_rank(self):
        return 0


def walk(d, path=()):
    for k, v in d.items():
        yield path + (k,)
        if isinstance(v, dict) and k not in ("params",):
            yield from walk(v, path + (k,))


def deepspeed_problems(text, run):
    import torch
    import deepspeed.runtime.config as dsc
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config, DeepSpeedBF16Config
    p = []
    d = json.loads(text)
    seen = set()
    real_get_rank = dsc.dist.get_rank
    dsc.dist.get_rank = lambda *a, **k: 0  # no process group here: rank 0, the mpu gives dp
    try:
        with Captured():
            cfg = dsc.DeepSpeedConfig(Traced(d, (), seen), mpu=DataParallelMpu(run["dp"]))
    except Exception as e:
        return [f"DeepSpeedConfig refused it: {e!r}"]
    finally:
        dsc.dist.get_rank = real_get_rank
    # Keys: read by DeepSpeedConfig, or validated by a pydantic model that forbids extra keys.
    models = {"zero_optimization": DeepSpeedZeroConfig, "fp16": DeepSpeedFP16Config, "bf16": DeepSpeedBF16Config}
    for name, model in models.items():
        if model.model_config.get("extra") != "forbid":
            p.append(f"{model.__name__} no longer forbids unknown keys: {name} unchecked")
    pipeline_keys = set(dsc.get_pipeline_config({}))
    for path in walk(d):
        if path in seen or (len(path) == 2 and path[0] in models):
            continue
        if len(path) == 2 and path[0] == "pipeline" and path[1] in pipeline_keys:
            continue
        p.append(f"key {'.'.join(path)} is read by no DeepSpeed code")
    want(p, "train_batch_size", cfg.train_batch_size, run["gbs"])
    want(p, "train_micro_batch_size_per_gpu", cfg.train_micro_batch_size_per_gpu, run["mbs"])
    want(p, "gradient_accumulation_steps", cfg.gradient_accumulation_steps, run["ga"])
    want(p, "zero stage", cfg.zero_optimization_stage, run["zero"])
    if run["zero"] >= 1:  # the bucket sizes the models price (models/zero.h), as DeepSpeed read them
        z = cfg.zero_config
        want(p, "zero reduce_bucket_size", z.reduce_bucket_size, 500000000)
        want(p, "zero allgather_bucket_size", z.allgather_bucket_size, 500000000)
        want(p, "zero overlap_comm", z.overlap_comm, True)
        want(p, "zero contiguous_gradients", z.contiguous_gradients, run["zero"] >= 2)
    if run["zero"] == 3:
        want(p, "stage3_prefetch_bucket_size", z.prefetch_bucket_size, 50000000)
        want(p, "stage3_param_persistence_threshold", z.param_persistence_threshold, 100000)
        want(p, "stage3_max_live_parameters", z.max_live_parameters, 1000000000)
    want(p, "fp16", cfg.float16_config.enabled, run["precision"] == "fp16")
    want(p, "bf16", cfg.bfloat16_config.enabled, run["precision"] == "bf16")
    want(p, "gradient_clipping", cfg.gradient_clipping, run["clip"])
    # The reduce dtype, said (export --reduce-dtype, default the model's: DeepSpeedEngine's own default).
    model_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.bfloat16}.get(run["precision"], torch.float32)
    want(p, "communication_data_type", cfg.communication_data_type,
         {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(run.get("reduce_dtype"), model_dtype))
    if run["pp"] > 1:
        want(p, "pipeline stages", cfg.pipeline["stages"], run["pp"])
    # The engine's own optimizer and scheduler construction, on an engine with only this config.
    eng = DeepSpeedEngine.__new__(DeepSpeedEngine)
    eng.__dict__.update(_config=cfg, client_optimizer=None, zenflow=False, has_moe_layers=False)
    model = torch.nn.Linear(4, 4)
    try:
        with Captured():
            opt = eng._configure_basic_optimizer(model.parameters())
    except Exception as e:
        return p + [f"DeepSpeedEngine._configure_basic_optimizer refused the optimizer: {e!r}"]
    g = opt.param_groups[0]
    want(p, "optimizer lr", g["lr"], run["lr"])
    want(p, "optimizer weight_decay", g["weight_decay"], run["weight_decay"])
    if run["optimizer"] != "sgd":
        want(p, "optimizer betas", tuple(g["betas"]), (run["beta1"], run["beta2"]))
        want(p, "optimizer eps", g["eps"], run["eps"])
    try:
        with Captured():
            sched = eng._scheduler_from_config(opt)
    except Exception as e:
        return p + [f"DeepSpeedEngine._scheduler_from_config refused the scheduler: {e!r}"]
    applied = [opt.param_groups[0]["lr"]]  # the engine steps the scheduler after each optimizer step
    for _ in range(run["steps"]):
        sched.step()
        applied.append(opt.param_groups[0]["lr"])
    return p + schedule_problems(type(sched).__name__, applied, run)


def ds_rank(path):
    """One rank of the real deepspeed.initialize check: prints a JSON summary on its last line."""
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import deepspeed
    cfg = json.load(open(path))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    eng, opt, _, sched = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=path)
    for _ in range(2 * eng.gradient_accumulation_steps()):
        x = torch.randn(cfg["train_micro_batch_size_per_gpu"], 8)
        if eng.bfloat16_enabled():
            x = x.bfloat16()
        loss = eng(x).float().sum()
        eng.backward(loss)
        eng.step()
    print(json.dumps({"train_batch_size": eng.train_batch_size(), "ga": eng.gradient_accumulation_steps(),
                      "zero": eng.zero_optimization_stage(), "optimizer": type(eng.optimizer).__name__,
                      "scheduler": type(sched).__name__, "global_steps": eng.global_steps,
                      "world": deepspeed.comm.get_world_size()}))
    return 0


def deepspeed_initialize_problems(text, run, folder):
    path = os.path.join(tempfile.mkdtemp(dir=folder), "deepspeed.json")  # one per case: the sweep checks many
    with output_file(path) as f:
        f.write(text)
    port = str(free_port())
    procs = []
    for r in range(run["dp"]):
        env = dict(os.environ, WORLD_SIZE=str(run["dp"]), RANK=str(r), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, PYTHONWARNINGS="ignore")
        procs.append(subprocess.Popen([sys.executable, SCRIPT, "--ds-rank", path], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    p, optimizer = [], None
    for r, pr in enumerate(procs):
        try:
            out, _ = pr.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            pr.kill()
            out, _ = pr.communicate()
        if pr.returncode != 0:
            tail = [line for line in out.strip().splitlines() if line.strip()][-3:]
            p.append(f"rank {r} exited {pr.returncode}: {' | '.join(tail)}")
            continue
        s = json.loads(out.strip().splitlines()[-1])
        if r == 0:
            want(p, "engine world", s["world"], run["dp"])
            want(p, "engine train_batch_size", s["train_batch_size"], run["gbs"])
            want(p, "engine gradient_accumulation_steps", s["ga"], run["ga"])
            want(p, "engine zero stage", s["zero"], run["zero"])
            want(p, "engine scheduler", s["scheduler"], "WarmupCosineLR")
            want(p, "engine global_steps after 2 steps", s["global_steps"], 2)
            optimizer = s["optimizer"]
    return p, optimizer


def warm_up():
    """--setup's last step: one deepspeed.initialize, so DeepSpeed JIT-builds its CPU ops now."""
    cfg = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
           "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "warmup_num_steps": 1}}}
    with tempfile.TemporaryDirectory() as folder:
        p, _ = deepspeed_initialize_problems(json.dumps(cfg), {"dp": 1, "gbs": 1, "ga": 1, "zero": 1}, folder)
    print("DeepSpeed's CPU ops built" if not p else f"warm-up failed: {p}")
    return 1 if p else 0
