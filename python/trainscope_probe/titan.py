"""The probe in a torchtitan job (`torchrun -m torchtitan.train --job.config_file …`), unmodified:
the sitecustomize calls install() when torchtitan.trainer is imported (torchtitan/train.py imports its
Trainer from there), and each call of `Trainer.train_step(self, data_iterator)` is one measured step.

torchtitan 0.3.0's `Trainer.train()` calls `self.train_step(data_iterator)` once per step
(torchtitan/trainer.py), so the method replaced on the class measures every step of a Trainer that
does not override it; tests/runner/framework_hooks_test.py checks that against the installed source.
  * tokens: the global batch × seq_len = gradient_accumulation_steps × training.local_batch_size ×
    the batch degree (dp_replicate × dp_shard, the "batch" mesh train_step reduces over) ×
    training.seq_len (tensor / pipeline / context ranks share one batch: not × WORLD_SIZE);
  * loss: none — train_step returns nothing, and computes the global loss only on logging steps.
"""
import sys

import trainscope_probe as probe


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


def install():
    Trainer = sys.modules["torchtitan.trainer"].Trainer
    train_step = Trainer.train_step
    if getattr(train_step, "_trainscope_probe", False):
        return

    def hooked_train_step(self, *a, **kw):
        return probe.measure(lambda: train_step(self, *a, **kw), global_tokens=_global_tokens(self))

    hooked_train_step._trainscope_probe = True
    hooked_train_step.__wrapped__ = train_step
    hooked_train_step.__name__ = train_step.__name__
    Trainer.train_step = hooked_train_step
    probe.get()
