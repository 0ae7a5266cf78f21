#!/usr/bin/env python3
"""bench/cp_overlap.py — how much of context parallelism's ring exchange runs beside attention
compute, measured on a traced CP=2 run (not a test).

The ring (runtime/src/model/context_parallel.cpp) launches each K/V block's send/recv before the
current block's attention compute (range `cp_attention`) and waits after it; in backward the dK/dV
accumulator of one step travels during the next step's compute. For every recv on the `cp` group:
  duration = its recorded [start, end] (end: when wait() returned)
  exposed  = the part after the cp_attention block it overlaps ended (the rank waited for it), or
             the whole of it when no block ran while it was in flight (the last dK/dV hand-back)
  hidden share = 1 - sum(exposed) / sum(duration)
When a transfer is shorter than the block beside it, wait() returns right after the block, so its
recorded duration is the block's length and its exposed part ~0: it counts as fully hidden, as it was.
Peer: the same exchange with nothing beside it (exposed = duration) would give a share of 0.

Usage: bench/cp_overlap.py [--bin build/bin/trainscope] [--seq 256] [--mbs 4] [--steps 4] [--rounds 3]
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile

from common import DEFAULT_BIN


def measure(db):
    c = sqlite3.connect(db)
    names = dict(c.execute("SELECT id, value FROM strings"))
    out = {"recvs": 0, "duration_ns": 0, "exposed_ns": 0, "compute_ns": 0, "bytes": 0}
    ranks = [r for (r,) in c.execute("SELECT DISTINCT rank FROM collectives WHERE grp = 'cp'")]
    for rank in ranks:
        blocks = [(s, e) for (s, e, n) in c.execute(
            "SELECT start_ns, end_ns, name_id FROM ranges WHERE rank = ? ORDER BY start_ns", (rank,))
            if names.get(n) == "cp_attention"]
        out["compute_ns"] += sum(e - s for s, e in blocks)
        recvs = c.execute("SELECT start_ns, end_ns, bytes FROM collectives WHERE rank = ? AND grp = 'cp' "
                          "AND op = 'recv' ORDER BY start_ns", (rank,)).fetchall()
        i = 0
        for start, end, nbytes in recvs:
            while i < len(blocks) and blocks[i][0] < start:
                i += 1
            beside = i < len(blocks) and blocks[i][0] < end  # a block began while it was in flight
            exposed = max(0, end - blocks[i][1]) if beside else end - start
            out["recvs"] += 1
            out["duration_ns"] += end - start
            out["exposed_ns"] += exposed
            out["bytes"] += nbytes
    out["hidden_share"] = 1 - out["exposed_ns"] / out["duration_ns"] if out["duration_ns"] else 0.0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--workload", default="small-cpu")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--mbs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    shares, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            db = os.path.join(tmp, f"cp2_{r}.db")
            cmd = [a.bin, "run", "--workload", a.workload, "--seq", str(a.seq), "--mbs", str(a.mbs), "--steps",
                   str(a.steps), "--device", "cpu", "--threads", "1", "--nproc", "2", "--cp", "2", "-q", "--trace", db]
            subprocess.run(cmd, check=True)
            m = measure(db)
            results.append(m)
            shares.append(m["hidden_share"])
            print(f"round {r}: {m['recvs']} ring recvs, {m['bytes'] / 2**20:.1f} MiB, exchange "
                  f"{m['duration_ns'] / 1e6:.1f} ms of which exposed {m['exposed_ns'] / 1e6:.1f} ms; attention "
                  f"blocks {m['compute_ns'] / 1e6:.1f} ms; hidden {m['hidden_share']:.1%}", file=sys.stderr)
    res = {"hidden_share": statistics.median(shares), "rounds": a.rounds, "workload": a.workload, "seq": a.seq,
           "mbs": a.mbs, "steps": a.steps, "per_round": results}
    print(json.dumps(res))
    print(f"CP=2 ring exchange beside attention compute: {res['hidden_share']:.0%} (median of {a.rounds}; "
          f"a blocking exchange: 0%)", file=sys.stderr)


if __name__ == "__main__":
    main()
