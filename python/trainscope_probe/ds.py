"""The probe in a DeepSpeed job: the engine's own step, hooked (the sitecustomize applies it when
deepspeed.runtime.engine is imported), so an unmodified DeepSpeed script is measured as it is.

A step opens at the first forward after an optimizer step and closes when engine.step() reaches the
gradient-accumulation boundary. Tokens are each micro-batch's input_ids (keyword or first positional
tensor), the loss the sum of what engine.backward() is handed divided by the accumulation steps.
Each rank also writes the configuration its engine was built from (rank<R>.ds_config.json): the
tuner's test compares it with the trial's exported ds_config.json.
"""
import json
import os

import trainscope_probe as probe


def install():
    from deepspeed.runtime.engine import DeepSpeedEngine

    if getattr(DeepSpeedEngine, "_trainscope_probe", False):
        return
    init, forward, backward, step = (DeepSpeedEngine.__init__, DeepSpeedEngine.forward, DeepSpeedEngine.backward,
                                     DeepSpeedEngine.step)

    def __init__(self, *a, **kw):
        init(self, *a, **kw)
        self._ts = {"open": False, "tokens": 0, "loss": 0.0}
        p = probe.get()
        if p is not None:
            config = getattr(self._config, "_param_dict", None)
            if config is not None:
                path = os.path.join(p.folder, f"rank{p.rank}.ds_config.json")
                with open(path, "w") as f:
                    json.dump(config, f, indent=1, default=str)

    def hooked_forward(self, *a, **kw):
        p = probe.get()
        ts = getattr(self, "_ts", None)
        if p is not None and ts is not None and not ts["open"]:
            ts.update(open=True, tokens=0, loss=0.0)
            p.begin()
        ids = kw.get("input_ids", a[0] if a else None)
        if ts is not None and hasattr(ids, "numel"):
            ts["tokens"] += int(ids.numel())
        return forward(self, *a, **kw)

    def hooked_backward(self, loss, *a, **kw):
        ts = getattr(self, "_ts", None)
        if ts is not None:
            try:
                ts["loss"] += float(loss) / max(1, self.gradient_accumulation_steps())
            except (TypeError, ValueError):
                pass
        return backward(self, loss, *a, **kw)

    def hooked_step(self, *a, **kw):
        boundary = self.is_gradient_accumulation_boundary()
        out = step(self, *a, **kw)
        p = probe.get()
        ts = getattr(self, "_ts", None)
        if p is not None and ts is not None and boundary and ts["open"]:
            ts["open"] = False
            p.end(ts["tokens"], ts["loss"])
        return out

    DeepSpeedEngine.__init__ = __init__
    DeepSpeedEngine.forward = hooked_forward
    DeepSpeedEngine.backward = hooked_backward
    DeepSpeedEngine.step = hooked_step
    DeepSpeedEngine._trainscope_probe = True
    probe.get()
