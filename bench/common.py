"""Shared helpers of the bench/ scripts."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BIN = os.path.join(ROOT, "build", "bin", "trainscope")


def run_json(cmd):
    """Runs a command that prints one JSON object on its last line, and returns it."""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
