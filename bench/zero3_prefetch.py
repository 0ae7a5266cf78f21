#!/usr/bin/env python3
"""bench/zero3_prefetch.py — how much of ZeRO-3's forward all-gathers runs beside the previous layer's
compute, measured on a traced run (not a test).

ZeRO-3 (runtime/src/parallel/zero3.h) issues the all-gather of layer l+1 at the start of layer l's
forward (range `layer`) and waits for it at the start of layer l+1. For every all-gather on the
shard group that starts inside a forward `layer` range (a prefetch):
  duration = its recorded [start, end] (end: when the gather completed)
  exposed  = the part after the layer range it started in ended (layer l+1 waited for it)
  hidden share = 1 - sum(exposed) / sum(duration)
Peer: the same gathers issued where they are needed, with nothing beside them (exposed = duration),
share 0. The first layer's gather is issued with the embeddings' unit, before any layer: not counted.

Usage: bench/zero3_prefetch.py [--bin build/bin/trainscope] [--workload small-cpu] [--seq 64] [--mbs 4]
       [--nproc 2] [--steps 4] [--rounds 3]
"""
import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import os

from common import DEFAULT_BIN


def measure(db):
    c = sqlite3.connect(db)
    names = dict(c.execute("SELECT id, value FROM strings"))
    out = {"prefetches": 0, "duration_ns": 0, "exposed_ns": 0}
    for (rank,) in c.execute("SELECT DISTINCT rank FROM collectives").fetchall():
        rows = c.execute("SELECT start_ns, end_ns, name_id FROM ranges WHERE rank = ? ORDER BY start_ns", (rank,)).fetchall()
        forwards = [(s, e) for s, e, n in rows if names.get(n) == "forward"]
        layers = [(s, e) for s, e, n in rows if names.get(n) == "layer"
                  and any(fs <= s and e <= fe for fs, fe in forwards)]
        for s, e in c.execute("SELECT start_ns, end_ns FROM collectives WHERE rank = ? AND op = 'all_gather' "
                              "AND grp IN ('dp', 'zero_shard')", (rank,)).fetchall():
            inside = [le for ls, le in layers if ls <= s < le]
            if not inside:
                continue
            out["prefetches"] += 1
            out["duration_ns"] += e - s
            out["exposed_ns"] += max(0, e - inside[0])
    out["hidden_share"] = 1 - out["exposed_ns"] / out["duration_ns"] if out["duration_ns"] else 0.0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--workload", default="small-cpu")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--mbs", type=int, default=4)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    shares = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.rounds):
            db = os.path.join(tmp, f"z3_{k}.db")
            subprocess.run([a.bin, "run", "--workload", a.workload, "--seq", str(a.seq), "--mbs", str(a.mbs),
                            "--gbs", str(a.mbs * a.nproc), "--steps", str(a.steps), "--device", "cpu", "--nproc",
                            str(a.nproc), "--zero", "3", "--cpu-lanes", "1", "-q", "--overwrite", "--trace", db,
                            "--trace-level", "ranges"], check=True, stdout=subprocess.DEVNULL)
            m = measure(db)
            shares.append(m["hidden_share"])
            print(json.dumps({"round": k, **m}), file=sys.stderr)
    print(json.dumps({"workload": a.workload, "nproc": a.nproc, "hidden_share_median": statistics.median(shares),
                      "hidden_share_rounds": shares, "peer_blocking_gather_share": 0.0}))


if __name__ == "__main__":
    main()
