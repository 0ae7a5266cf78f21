#!/usr/bin/env python3
"""A job that runs its own torch.profiler, for tests/runner/probe_profiler_test.py (CPU, no download).

    profiler_job.py MODE OUT [STEPS]

MODE says when the job's profiler runs, around a plain loop of STEPS (default 5) measured steps
(`with trainscope_probe.step()`), or an HF Trainer (the tiny GPT-2 of examples/tiny_models.py, synthetic
tokens) under the probe's sitecustomize:
  outer      `with torch.profiler.profile()` around the whole loop (running before the probe exists)
  inner      2 steps, then `with torch.profiler.profile()` around the rest (starts while the probe traces)
  schedule   torch.profiler.profile(schedule=wait 1, warmup 1, active 2), stepped after each step
             (prepared, not running, when the probe's trace would start)
  warm0      schedule wait 0, warmup 2, active 2 started before the first step (prepared before the
             probe exists and still only prepared at step 1: invisible to torch's _profiler_enabled)
  legacy     torch.autograd.profiler.profile() (the old API) around steps 1-3
  none       no profiler of its own (the probe's trace alone; OUT is not written)
  hf         a Trainer with the job's own profiler callback (schedule wait 1, warmup 1, active 2,
             started in on_train_begin, stepped in on_step_end, stopped in on_train_end)
The job's own trace is exported to OUT (Chrome JSON), and it prints `job-events N` (the job's profiler
saw N events) and `job-steps N`.
"""
import os
import sys

import torch


def loop(steps, after_step=None, first=0):
    import trainscope_probe as probe
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(first, first + steps):
        with probe.step(tokens=16) as s:
            loss = model(torch.randn(16, 32)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            s.loss = loss.item()
        if after_step is not None:
            after_step(i)


def cpu_profile(**kw):
    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **kw)


def scheduled(out, wait, warmup, active, acc):
    """A scheduled profiler whose active window's events land in `acc` and in OUT."""
    def ready(p):
        p.export_chrome_trace(out)
        acc.append(len(p.events()))
    return cpu_profile(schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                       on_trace_ready=ready)


def hf(out, steps):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
    from tiny_models import model_of
    from transformers import Trainer, TrainerCallback, TrainingArguments
    acc = []

    class ProfilerCallback(TrainerCallback):  # a user's own profiling callback
        def on_train_begin(self, args, state, control, **kwargs):
            self.prof = scheduled(out, 1, 1, 2, acc)
            self.prof.start()

        def on_step_end(self, args, state, control, **kwargs):
            self.prof.step()

        def on_train_end(self, args, state, control, **kwargs):
            self.prof.stop()

    class Tokens(torch.utils.data.Dataset):
        def __init__(self):
            self.ids = torch.randint(0, 128, (256, 32), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    args = TrainingArguments(output_dir=os.path.join(os.path.dirname(out), "hf-out"), max_steps=steps,
                             per_device_train_batch_size=2, use_cpu=True, report_to="none", save_strategy="no",
                             logging_steps=1, dataloader_num_workers=0)
    trainer = Trainer(model=model_of("gpt2"), args=args, train_dataset=Tokens(), callbacks=[ProfilerCallback()])
    trainer.train()
    return acc[0] if acc else 0, trainer.state.global_step


def main():
    mode, out = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    events, done = 0, steps
    if mode == "outer":
        with cpu_profile() as p:
            loop(steps)
        events = len(p.events())
    elif mode == "inner":
        loop(2)
        with cpu_profile() as p:
            loop(steps - 2, first=2)
        events = len(p.events())
    elif mode in ("schedule", "warm0"):
        acc = []
        p = scheduled(out, 1, 1, 2, acc) if mode == "schedule" else scheduled(out, 0, 2, 2, acc)
        p.start()
        loop(steps, after_step=lambda i: p.step())
        p.stop()
        events = acc[0] if acc else 0
    elif mode == "legacy":
        loop(1)
        with torch.autograd.profiler.profile() as p:
            loop(3, first=1)
        loop(steps - 4, first=4)
        events = len(p.function_events)
    elif mode == "hf":
        events, done = hf(out, steps)
    elif mode == "none":  # no profiler of the job's own: the probe's trace alone
        loop(steps)
    else:
        sys.exit(f"profiler_job.py: unknown mode {mode!r}")
    if mode in ("outer", "inner", "legacy"):
        p.export_chrome_trace(out)
    print("job-events", events)
    print("job-steps", done)


if __name__ == "__main__":
    main()
