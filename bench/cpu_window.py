#!/usr/bin/env python3
"""bench/cpu_window.py — does the CPU time model's sliding window move as a measured run does (not a test).

A tiny Mistral (tiny-llama's shape, model_type mistral) with and without a sliding window W, trained
on the CPU in fp32 (one process, one thread), runs alternated so that the machine's load falls on
both alike; each run's step time is the median of its steps after the first two. Beside it,
`trainscope predict --cluster cpu-local` of the same two. Reported: the windowed/full ratio of step
times, measured and predicted (docs/time-model.md, "Sliding windows on the CPU"); and the share of the
attention core's products the model gives the window (cpuAttentionShare).

Usage: bench/cpu_window.py [--bin build/bin/trainscope] [--seq 256] [--window 64] [--mbs 4] [--steps 12]
                           [--rounds 3]
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import tempfile

from common import DEFAULT_BIN

SHAPE = {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-05,
         "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False}


def config(folder, name, seq, window):
    c = dict(SHAPE, max_position_embeddings=seq, sliding_window=window if window else None)
    path = os.path.join(folder, name + ".json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def measured(binary, workload, a, db):
    subprocess.run([binary, "run", "--workload", workload, "--seq", str(a.seq), "--mbs", str(a.mbs), "--steps",
                    str(a.steps), "--device", "cpu", "--threads", "1", "--precision", "fp32", "-q", "--out", db],
                   check=True, capture_output=True)
    with sqlite3.connect(db) as c:
        t = [ns for (ns,) in c.execute("SELECT step_time_ns FROM steps WHERE rank = 0 AND step >= 2 ORDER BY step")]
    return statistics.median(t) / 1e9


def predicted(binary, workload, a):
    p = subprocess.run([binary, "predict", "--workload", workload, "--cluster", "cpu-local", "--seq", str(a.seq),
                        "--mbs", str(a.mbs), "--gbs", str(a.mbs), "--gpus", "1", "--precision", "fp32", "--json"],
                       check=True, capture_output=True, text=True)
    j = json.loads(p.stdout)
    return j["time"] if "time" in j else j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--mbs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        full, win = config(d, "full", a.seq, 0), config(d, "window", a.seq, a.window)
        m = {"full": [], "window": []}
        for r in range(a.rounds):
            for name, w in (("full", full), ("window", win)):
                m[name].append(measured(a.bin, w, a, os.path.join(d, f"{name}-{r}.db")))
        pf, pw = predicted(a.bin, full, a), predicted(a.bin, win, a)
    mf, mw = statistics.median(m["full"]), statistics.median(m["window"])
    step = lambda p: p.get("step_s", p.get("step", 0))
    print(f"seq {a.seq}, window {a.window}, mbs {a.mbs}, fp32, 1 thread; medians of {a.rounds} alternated runs")
    print(f"measured  step: full {mf * 1e3:.2f} ms, window {mw * 1e3:.2f} ms, ratio {mw / mf:.3f}"
          f"  (runs: full {[round(x * 1e3, 2) for x in m['full']]}, window {[round(x * 1e3, 2) for x in m['window']]})")
    print(f"predicted step: full {step(pf) * 1e3:.2f} ms, window {step(pw) * 1e3:.2f} ms, ratio {step(pw) / step(pf):.3f}")


if __name__ == "__main__":
    main()
