#!/usr/bin/env python3
"""bench/interleaved_bubble.py — the pipeline bubble of 1F1B and interleaved 1F1B, measured on
traced runs (not a test).

Two pipeline ranks (one core each) train a balanced CPU model (small-cpu's width, 8 layers and a
512-token vocabulary, so that the last stage's LM head costs about a sixth of a layer and the stages
are nearly equal) with plain 1F1B (v = 1: four layers per stage) and with Megatron-LM's interleaved
schedule (v = 2: rank 0 holds chunks 0 and 2 of two layers each, rank 1 chunks 1 and 3; v = 4:
one-layer chunks; runtime/src/parallel/pipeline.cpp), traced at the ranges level. For every rank
and step after the first two (warm-up: allocation, the optimizer state):
  busy   = the time inside the stage's `forward` and `backward` ranges (they do not nest)
  own window      = from the stage's first `forward` range to its last `backward` range
  pipeline window = from the step's first `forward` to its last `backward` over all ranks (the
                    merged trace puts every rank on rank 0's clock)
  bubble = (window - busy) / busy: waiting on pipeline receives (and the sends' bookkeeping)
In the ideal schedule every stage idles (p - 1)/(v.m) of its busy time in the pipeline window; in
its own window the first stage sees all of it and the last stage little (it starts late and ends
early), so the pipeline window is the one to compare with the formula.
The peer is the schedule's ideal bubble over the same work, (p - 1)/m for 1F1B and (p - 1)/(v.m)
interleaved (Narayanan et al. 2021, §2.2), which assumes equal stages and free communication; the
LM head and the point-to-point latency (2(p.v - 1) sends per micro-batch) make the measured bubble
larger, the more so for more chunks.

Usage: bench/interleaved_bubble.py [--bin build/bin/trainscope] [--micro-batches 4 8] [--virtual 1 2 4]
                                   [--steps 6] [--rounds 2] [--seq 128] [--mbs 2]
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

P = 2
WORKLOAD = {"name": "bubble-cpu", "n_layer": 8, "n_head": 4, "n_embd": 256, "n_positions": 256, "vocab_size": 512}


def bubbles(db):
    """Per rank, the median over steps (after the first two) of idle / busy, in the stage's own
    window and in the pipeline's (the step's first forward to its last backward over all ranks,
    on the merged clock)."""
    con = sqlite3.connect(db)
    names = dict(con.execute("SELECT id, value FROM strings"))
    by_rank = {}
    for rank, start, end, name_id in con.execute("SELECT rank, start_ns, end_ns, name_id FROM ranges ORDER BY start_ns"):
        by_rank.setdefault(rank, []).append((start, end, names.get(name_id, "")))
    units = {}  # (rank, step) -> the forward and backward ranges of that step
    for rank, ranges in by_rank.items():
        for k, (s0, e0) in enumerate([(s, e) for s, e, n in ranges if n == "step"]):
            if k >= 2:
                units[rank, k] = [(s, e) for s, e, n in ranges if n in ("forward", "backward") and s >= s0 and e <= e0]
    own, pipeline = {}, {}
    for (rank, k), u in units.items():
        ranks = [units[r, k] for r in by_rank if (r, k) in units]
        lo, hi = min(s for x in ranks for s, _ in x), max(e for x in ranks for _, e in x)
        busy = sum(e - s for s, e in u)
        own.setdefault(rank, []).append((max(e for _, e in u) - min(s for s, _ in u) - busy) / busy)
        pipeline.setdefault(rank, []).append((hi - lo - busy) / busy)
    return ({r: statistics.median(v) for r, v in sorted(own.items())},
            {r: statistics.median(v) for r, v in sorted(pipeline.items())})


def traced_run(binary, v, m, a, folder):
    db = os.path.join(folder, f"pp2_v{v}_m{m}.db")
    cmd = [binary, "run", "--workload", os.path.join(folder, "bubble-cpu.json"), "--seq", str(a.seq), "--mbs", str(a.mbs),
           "--gbs", str(a.mbs * m), "--steps", str(a.steps), "--device", "cpu", "--threads", "1",
           "--cpu-lanes", "1", "--nproc", str(P), "--pp", str(P), "--pp-schedule", "1f1b",
           "--virtual-stages", str(v), "-q", "--overwrite", "--trace", db]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return bubbles(db)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--micro-batches", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--virtual", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mbs", type=int, default=2)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "bubble-cpu.json"), "w") as f:
            json.dump(WORKLOAD, f)
        for m in a.micro_batches:
            measured = {v: [] for v in a.virtual}
            for _ in range(a.rounds):  # alternate the schedules so that a noisy moment hits all of them
                for v in a.virtual:
                    measured[v].append(traced_run(a.bin, v, m, a, folder))
            for v in a.virtual:
                ideal = (P - 1) / (v * m)
                row = {"pp": P, "v": v, "m": m, "ideal_bubble": ideal}
                for i, window in enumerate(("own", "pipeline")):
                    per_rank = {r: statistics.median(x[i][r] for x in measured[v]) for r in measured[v][0][i]}
                    row[window] = {str(r): b for r, b in per_rank.items()}
                    row[window + "_mean"] = statistics.mean(per_rank.values())
                    row[window + "_min_round"] = min(statistics.mean(x[i].values()) for x in measured[v])
                rows.append(row)
                print(f"p {P} v {v} m {m}: ideal (p-1)/(v.m) {ideal:.3f}  pipeline window " +
                      "  ".join(f"rank {r} {b:.3f}" for r, b in row["pipeline"].items()) +
                      f"  mean {row['pipeline_mean']:.3f} (best round {row['pipeline_min_round']:.3f});"
                      f"  own window " + "  ".join(f"rank {r} {b:.3f}" for r, b in row["own"].items()),
                      file=sys.stderr)
    for m in a.micro_batches:
        base = next(r["pipeline_mean"] for r in rows if r["m"] == m and r["v"] == a.virtual[0])
        for r in rows:
            if r["m"] == m and r["v"] != a.virtual[0]:
                print(f"m {m}: v {r['v']} / v {a.virtual[0]} bubble {r['pipeline_mean'] / base:.2f} "
                      f"(ideal {a.virtual[0] / r['v']:.2f})", file=sys.stderr)
    print(json.dumps({"rows": rows, "seq": a.seq, "mbs": a.mbs, "steps": a.steps, "rounds": a.rounds}))


if __name__ == "__main__":
    main()
