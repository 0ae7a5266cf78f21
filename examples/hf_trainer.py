#!/usr/bin/env python3
"""A plain Hugging Face Trainer script: the job `trainscope tune --runner hf` measures as it is.

Nothing in it knows trainscope. It builds a tiny GPT-2 (the `tiny` workload's shape) or the tiny
Llama (`tiny-llama`) from a config (no download), trains on synthetic tokens and exits. Run it alone:

    python examples/hf_trainer.py --model gpt2 --seq 64
    torchrun --nproc_per_node 2 examples/hf_trainer.py --model llama

Under `tune --runner hf` the probe's sitecustomize sets the candidate's TrainingArguments fields
(micro-batch, accumulation, checkpointing, FSDP, max_steps) and records every step.
"""
import argparse

import torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from tiny_models import model_of


class SyntheticTokens(Dataset):
    """Random token sequences, the same on every rank (seeded), labels = inputs."""

    def __init__(self, vocab, seq, n=4096, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--output-dir", default="hf-trainer-out")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = model_of(a.model)
    args = TrainingArguments(output_dir=a.output_dir, max_steps=a.steps, per_device_train_batch_size=2,
                             learning_rate=1e-3, use_cpu=not torch.cuda.is_available(), report_to="none",
                             save_strategy="no", logging_steps=1, dataloader_num_workers=0)
    Trainer(model=model, args=args, train_dataset=SyntheticTokens(model.config.vocab_size, a.seq)).train()


if __name__ == "__main__":
    main()
