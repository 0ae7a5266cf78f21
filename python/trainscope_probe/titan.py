"""The probe in a torchtitan job (`torchrun -m torchtitan.train --job.config_file …`), unmodified:
the sitecustomize calls install() when torchtitan.trainer is imported (torchtitan/train.py imports its
Trainer from there), and each call of `Trainer.train_step(self, data_iterator)` is one measured step.

torchtitan 0.3.0's `Trainer.train()` calls `self.train_step(data_iterator)` once per step
(torchtitan/trainer.py), so the method replaced on the class measures every step of a Trainer that
does not override it. A job's own `class MyTrainer(Trainer)` (torchtitan's FluxTrainer, GraphTrainer
and FaultTolerantTrainer are such) that defines its own `train_step` would bypass it: install() also
wraps Trainer's `__init_subclass__`, so every subclass made after it (a subclass is made after the
module it derives from, and so after install()) has its own `train_step` wrapped when the class is
created, and those made before are wrapped at install(). An override that calls
`super().train_step(...)` is still one step: the outermost measured call on a trainer measures, the
calls inside it run as they are. tests/runner/framework_hooks_test.py checks that against the
installed source and with stand-in subclasses.
  * tokens: the global batch × seq_len = gradient_accumulation_steps × training.local_batch_size ×
    the batch degree (dp_replicate × dp_shard, the "batch" mesh train_step reduces over) ×
    training.seq_len (tensor / pipeline / context ranks share one batch: not × WORLD_SIZE);
  * loss: none — train_step returns nothing, and computes the global loss only on logging steps.
"""
import inspect
import sys

import trainscope_probe as probe

# The trainers (by id) inside a measured train_step: a nested one (an override's super() call) is
# part of that step. One training loop per process, on one thread.
_inside = set()


def _global_tokens(trainer):
    """The step's tokens in the global batch, or None where the trainer's fields are not readable."""
    try:
        training = trainer.config.training
        dims = trainer.parallel_dims
        return (int(trainer.gradient_accumulation_steps) * int(training.local_batch_size) * int(dims.dp_replicate) *
                int(dims.dp_shard) * int(training.seq_len))
    except (AttributeError, TypeError, ValueError) as e:
        sys.stderr.write(f"trainscope_probe: torchtitan's global batch is not readable ({e}); no token count\n")
        return None


def _measured(train_step):
    """train_step as one measured step per outermost call on a trainer."""
    if getattr(train_step, "_trainscope_probe", False):
        return train_step

    def hooked_train_step(self, *a, **kw):
        if id(self) in _inside:  # an override's super().train_step(): inside the step being measured
            return train_step(self, *a, **kw)
        _inside.add(id(self))
        try:
            return probe.measure(lambda: train_step(self, *a, **kw), global_tokens=_global_tokens(self))
        finally:
            _inside.discard(id(self))

    hooked_train_step._trainscope_probe = True
    hooked_train_step.__wrapped__ = train_step
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(hooked_train_step, attr, getattr(train_step, attr, None))
    return hooked_train_step


def _wrap_own(cls):
    """Wraps the train_step `cls` defines itself (a plain function in its body), if any."""
    own = cls.__dict__.get("train_step")
    if inspect.isfunction(own):
        cls.train_step = _measured(own)


def install():
    Trainer = sys.modules["torchtitan.trainer"].Trainer
    if Trainer.__dict__.get("_trainscope_probe", False):
        return
    Trainer._trainscope_probe = True
    _wrap_own(Trainer)
    # Every subclass's own train_step, wrapped when the class is made (after the class's own
    # __init_subclass__ chain: torchtitan's Configurable wires its Config there).
    own_hook = Trainer.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if own_hook is not None:
            own_hook.__func__(cls, **kwargs)
        else:
            super(Trainer, cls).__init_subclass__(**kwargs)
        _wrap_own(cls)

    Trainer.__init_subclass__ = classmethod(__init_subclass__)
    pending = list(Trainer.__subclasses__())
    while pending:  # subclasses made before install(): none when the sitecustomize installs it
        cls = pending.pop()
        _wrap_own(cls)
        pending.extend(cls.__subclasses__())
    probe.get()
