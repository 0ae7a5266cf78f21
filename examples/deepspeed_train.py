#!/usr/bin/env python3
"""A plain DeepSpeed training script: the job `trainscope tune --runner deepspeed` measures as it is.

Its engine is built from the JSON named by --deepspeed (as the deepspeed launcher hands it: the
trial's exported ds_config.json); the model is a tiny GPT-2 (`tiny`) or the tiny Llama
(`tiny-llama`) from a config, trained on synthetic tokens. Nothing in it knows trainscope.

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 examples/deepspeed_train.py --deepspeed ds.json
"""
import argparse
import json

import torch
import torch.distributed as dist

from tiny_models import model_of


def main():
    import deepspeed
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--steps", type=int, default=0, help="0: the config's scheduler total_num_steps, else 10")
    ap.add_argument("--local_rank", type=int, default=0)
    ap.add_argument("--deepspeed", required=True)
    a = ap.parse_args()
    with open(a.deepspeed) as f:
        config = json.load(f)
    steps = a.steps or config.get("scheduler", {}).get("params", {}).get("total_num_steps", 10)
    torch.manual_seed(0)
    model = model_of(a.model)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    g = torch.Generator().manual_seed(1 + dist.get_rank())
    vocab = model.config.vocab_size
    for _ in range(steps):
        for _ in range(engine.gradient_accumulation_steps()):
            ids = torch.randint(0, vocab, (engine.train_micro_batch_size_per_gpu(), a.seq), generator=g)
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
    dist.barrier()
    dist.destroy_process_group()  # before the interpreter exits: Gloo's threads otherwise abort it


if __name__ == "__main__":
    main()
