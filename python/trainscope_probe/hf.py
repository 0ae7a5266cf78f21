"""The probe in a Hugging Face Trainer: a TrainerCallback, and the patches the sitecustomize applies.

`TrainscopeCallback` times each optimizer step (on_step_begin → on_step_end); the tokens and the
loss come from Trainer.training_step, wrapped by `install()` to count each micro-batch's input_ids
and add up the losses it returns (what the Trainer itself sums into its logged loss).

`install()` (called by the sitecustomize when transformers.trainer is imported):
  * every Trainer gets the callback (a script that already added it is not measured twice);
  * TrainingArguments takes the candidate's fields from $TRAINSCOPE_TRAINING_ARGS (the
    training-args JSON `trainscope export --format training-args` writes, as the trial's folder
    holds it), over what the script set, all but output_dir (the trial's folder,
    $TRAINSCOPE_OUTPUT_DIR): the trial runs the exported configuration, not the script's defaults.
"""
import json
import os
import sys

import trainscope_probe as probe

_KEEP_FROM_SCRIPT = {"output_dir"}


def _callback_class():
    from transformers import TrainerCallback

    class TrainscopeCallback(TrainerCallback):
        def __init__(self):
            self.tokens = 0
            self.loss = 0.0
            self.open = False

        def on_step_begin(self, args, state, control, **kwargs):
            p = probe.get()
            if p is not None:
                self.tokens, self.loss, self.open = 0, 0.0, True
                p.begin()

        def on_step_end(self, args, state, control, **kwargs):
            p = probe.get()
            if p is not None and self.open:
                self.open = False
                p.end(self.tokens, self.loss)

        def on_train_begin(self, args, state, control, **kwargs):
            p = probe.get()
            if p is not None:
                _record_launch(p)

        def on_train_end(self, args, state, control, **kwargs):
            p = probe.get()
            if p is not None:
                p.finish()

    return TrainscopeCallback


TrainscopeCallback = None

# What `accelerate launch` hands its process from the config file it read (--runner accelerate).
_LAUNCH_ENV = ("ACCELERATE_USE_CPU", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_FSDP", "FSDP_SHARDING_STRATEGY",
               "FSDP_RESHARD_AFTER_FORWARD", "ACCELERATE_DYNAMO_BACKEND", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


_write_record = probe.write_record


def _record_launch(p):
    """probe/rankR.accelerate.json: the launch's variables and Accelerate's state as this rank's
    Trainer runs it (its processes, distributed type, precision, FSDP strategy): what a trial ran,
    for comparing with the trial's exported accelerate.yaml / training_args.json."""
    out = {"env": {k: os.environ.get(k) for k in _LAUNCH_ENV}}
    # Every FSDP_* variable accelerate launch set from the config's fsdp_config (utils/launch.py).
    out["env"].update({k: v for k, v in os.environ.items() if k.startswith("FSDP_")})
    try:
        from accelerate.state import AcceleratorState
        s = AcceleratorState()
        fsdp = getattr(s, "fsdp_plugin", None)
        # FSDP 1 shards by sharding_strategy, else reshard_after_forward (accelerate/accelerator.py:1947);
        # FSDP 2 by reshard_after_forward (a bool).
        strategy = None if fsdp is None else (getattr(fsdp, "sharding_strategy", None) or
                                              getattr(fsdp, "reshard_after_forward", None))
        out.update(num_processes=s.num_processes, distributed_type=str(s.distributed_type.value),
                   mixed_precision=str(s.mixed_precision), fsdp_sharding_strategy=None if fsdp is None else str(strategy))
        if fsdp is not None:  # the plugin's own fields: whose settings it was built from
            out["fsdp_plugin"] = {k: str(getattr(fsdp, k, None)) for k in (
                "fsdp_version", "state_dict_type", "backward_prefetch", "use_orig_params", "sync_module_states",
                "cpu_ram_efficient_loading", "forward_prefetch")}
    except Exception as e:  # noqa: BLE001 — a state this Accelerate does not have: recorded as such
        out["state_error"] = f"{type(e).__name__}: {e}"
    _write_record(os.path.join(p.folder, f"rank{p.rank}.accelerate.json"), out)


def _record_model(p, model):
    """probe/rankR.model.json: the module the Trainer steps (its wrapper: DistributedDataParallel,
    FullyShardedDataParallel, FSDP2's FSDP<Model>, or the model itself) and the parameter bytes this
    rank holds in it (a sharded wrapper's rank holds its shard): whether the trial's layout is the one
    its name says."""
    out = {"wrapper": f"{type(model).__module__}.{type(model).__qualname__}"}
    if getattr(model, "sharding_strategy", None) is not None:  # FSDP 1's wrapper: the strategy it shards by
        out["sharding_strategy"] = str(model.sharding_strategy)
    try:
        # FSDP 2's parameters are DTensors, whose numel() is the whole tensor's: count the local shard.
        local = [t.to_local() if hasattr(t, "to_local") else t for t in model.parameters()]
        out["param_bytes"] = int(sum(t.numel() * t.element_size() for t in local))
        out["param_count"] = int(sum(t.numel() for t in local))
    except Exception as e:  # noqa: BLE001 — a wrapper without parameters(): recorded as such
        out["param_error"] = f"{type(e).__name__}: {e}"
    _write_record(os.path.join(p.folder, f"rank{p.rank}.model.json"), out)


def _overrides():
    path = os.environ.get("TRAINSCOPE_TRAINING_ARGS")
    if not path:
        return {}
    with open(path) as f:
        fields = json.load(f)
    out = {k: v for k, v in fields.items() if k not in _KEEP_FROM_SCRIPT}
    if os.environ.get("TRAINSCOPE_OUTPUT_DIR"):  # the trial's own folder: trials never share outputs
        out["output_dir"] = os.environ["TRAINSCOPE_OUTPUT_DIR"]
    return out


def install():
    global TrainscopeCallback
    import transformers

    if getattr(transformers.Trainer, "_trainscope_probe", False):
        return
    TrainscopeCallback = _callback_class()
    overrides = _overrides()

    args_cls = transformers.TrainingArguments
    post_init = args_cls.__post_init__

    def __post_init__(self):
        for k, v in overrides.items():
            setattr(self, k, v)
        post_init(self)

    args_cls.__post_init__ = __post_init__

    trainer_cls = transformers.Trainer
    init = trainer_cls.__init__

    def __init__(self, *a, **kw):
        init(self, *a, **kw)
        if not any(type(cb).__name__ == "TrainscopeCallback" for cb in self.callback_handler.callbacks):
            self.add_callback(TrainscopeCallback())

    trainer_cls.__init__ = __init__

    training_step = trainer_cls.training_step

    def counted_training_step(self, model, inputs, *a, **kw):
        if not getattr(self, "_trainscope_model_recorded", False):  # the wrapped model the step runs
            self._trainscope_model_recorded = True
            p = probe.get()
            if p is not None:
                _record_model(p, model)
        loss = training_step(self, model, inputs, *a, **kw)
        for cb in self.callback_handler.callbacks:
            if type(cb).__name__ == "TrainscopeCallback":
                ids = inputs.get("input_ids") if hasattr(inputs, "get") else None
                if ids is not None:
                    cb.tokens += int(ids.numel())
                try:
                    cb.loss += float(loss)
                except (TypeError, ValueError):
                    pass
        return loss

    trainer_cls.training_step = counted_training_step
    trainer_cls._trainscope_probe = True
    probe.get()  # the rank's files (and its fault record) exist from here on


def installed():
    return "transformers" in sys.modules and getattr(sys.modules["transformers"].Trainer, "_trainscope_probe", False)
