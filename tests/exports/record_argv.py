#!/usr/bin/env python3
"""tests/exports/record_argv.py — the entry of a test's `tune --runner megatron|torchtitan` trial.

Stands where pretrain_gpt.py or torchtitan/train.py would: writes the argument vector it was started
with, its working folder and the launch's variables (rank, world size, the probe's folder in the
trial's cN-rR.job) to $TRAINSCOPE_TEST_ARGV_DIR/rank<RANK>-<pid>.json, and exits. The export parser
tests hand that vector to the framework's own parser.
"""
import json
import os
import sys

out = os.path.join(os.environ["TRAINSCOPE_TEST_ARGV_DIR"], f"rank{os.environ.get('RANK', '0')}-{os.getpid()}.json")
with open(out + ".tmp", "w") as f:
    json.dump({"argv": sys.argv, "cwd": os.getcwd(),
               "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TRAINSCOPE_PROBE_DIR")}}, f)
os.replace(out + ".tmp", out)
