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
    by Megatron; only the last pipeline stage has one, the other ranks' rows have none;
  * iteration: Megatron's own 1-indexed iteration number (train_step's `iteration` + 1, as it logs it);
  * skipped: true where train_step returned skipped_iter 1 (the optimizer refused the update: a
    non-finite gradient under fp16's loss scale). Its forward/backward ran, so the row is counted as a
    native run's skipped step is (the trial database's steps.skipped, rundb/import_probe.h).

`--iterations-to-skip` (megatron-core 0.19.2's train(): `if (iteration + 1) in args.iterations_to_skip`)
goes around train_step: that iteration runs `dummy_train_step`, which only draws its micro-batches
from the data iterator, then `continue`s. It does no training work, so the probe records no row for it
and it is in no step-time statistic: the tuner's step time is a training step's cost, which such an
iteration would understate. What happened stays visible: the rows' `iteration` has a gap there, while
their `step` counts the measured steps (step 0, the first real train_step, is the warm-up the summary
leaves out, even where iteration 1 was skipped). tests/runner/framework_hooks_test.py checks the skip
path in the installed source and runs a stand-in of it.
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


def _skipped(out):
    """train_step's second return, skipped_iter: 1 where the update was skipped."""
    skipped = out[1] if isinstance(out, tuple) and len(out) > 1 else None
    return {"skipped": True} if skipped else {}


def _iteration(a, kw):
    """Megatron's 1-indexed iteration: train_step's `iteration` (keyword, or its 8th parameter) + 1."""
    it = kw.get("iteration", a[7] if len(a) > 7 else None)
    return {"iteration": int(it) + 1} if isinstance(it, int) else {}


def install():
    training = sys.modules["megatron.training.training"]
    train_step = training.train_step
    if getattr(train_step, "_trainscope_probe", False):
        return

    def hooked_train_step(*a, **kw):
        return probe.measure(lambda: train_step(*a, **kw), global_tokens=_global_tokens(), loss_of=_loss,
                             extra=_iteration(a, kw), extra_of=_skipped)

    hooked_train_step._trainscope_probe = True
    hooked_train_step.__wrapped__ = train_step
    hooked_train_step.__name__ = train_step.__name__
    training.train_step = hooked_train_step
    probe.get()
