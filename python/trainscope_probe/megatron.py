"""The probe in a Megatron-LM job (pretrain_gpt.py and the like), unmodified: the sitecustomize calls
install() when megatron.training.training is imported, and each call of its module-level
`train_step` is one measured step.

Megatron-LM's `train()` calls `train_step(forward_step_func, data_iterator, model, optimizer, ...)`
once per iteration through the module's global name (megatron-core 0.19.2,
megatron/training/training.py), so replacing the module attribute measures every iteration;
tests/runner/framework_hooks_test.py checks that against the installed source.
  * tokens: the iteration's global batch × seq_length (the batch-size ramp-up's current global batch
    where megatron.core's micro-batch calculator is set up, else args.global_batch_size): tensor and
    pipeline ranks share one batch, so the row's tokens are the global batch's, not × WORLD_SIZE;
  * loss: the returned loss dict's "lm loss" (else its first entry), averaged over the micro-batches
    by Megatron; only the last pipeline stage has one, the other ranks' rows have none.
"""
import sys

import trainscope_probe as probe


def _global_tokens():
    """This iteration's tokens in the global batch, or None where Megatron's args are not readable."""
    try:
        from megatron.training import get_args
        args = get_args()
    except Exception:  # noqa: BLE001 — args not parsed yet: no token count, the step still measured
        return None
    batch = None
    try:
        from megatron.core.num_microbatches_calculator import get_current_global_batch_size
        batch = get_current_global_batch_size()
    except Exception:  # noqa: BLE001 — no calculator set up: the fixed global batch
        batch = None
    batch = batch or getattr(args, "global_batch_size", None)
    seq = getattr(args, "seq_length", None)
    if not batch or not seq:
        return None
    return int(batch) * int(seq)


def _loss(out):
    """train_step returns (loss_dict, skipped_iter, ...); loss_dict maps names to reduced losses."""
    losses = out[0] if isinstance(out, tuple) and out else None
    if not isinstance(losses, dict) or not losses:
        return None
    value = losses.get("lm loss", next(iter(losses.values())))
    return float(value)


def install():
    training = sys.modules["megatron.training.training"]
    train_step = training.train_step
    if getattr(train_step, "_trainscope_probe", False):
        return

    def hooked_train_step(*a, **kw):
        return probe.measure(lambda: train_step(*a, **kw), global_tokens=_global_tokens(), loss_of=_loss)

    hooked_train_step._trainscope_probe = True
    hooked_train_step.__wrapped__ = train_step
    hooked_train_step.__name__ = train_step.__name__
    training.train_step = hooked_train_step
    probe.get()
