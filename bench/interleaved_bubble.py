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
  replay = the same ratio for the step replayed from the trace: each rank's units in their recorded
           order with their recorded durations, each starting once its input unit has finished
           (free communication, no time lost to other processes on the machine): the schedule's
           own bubble over the measured stage costs
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

from common import DEFAULT_BIN, output_file

P = 2
WORKLOAD = {"name": "bubble-cpu", "n_layer": 8, "n_head": 4, "n_embd": 256, "n_positions": 256, "vocab_size": 512}


def step_units(db):
    """(rank, step) -> that step's units in time order: (start, end, "F" or "B", the rank's chunk k),
    for the steps after the first two."""
    con = sqlite3.connect(db)
    names = dict(con.execute("SELECT id, value FROM strings"))
    by_rank = {}
    for rank, start, end, name_id in con.execute("SELECT rank, start_ns, end_ns, name_id FROM ranges ORDER BY start_ns"):
        by_rank.setdefault(rank, []).append((start, end, names.get(name_id, "")))
    units = {}
    for rank, ranges in by_rank.items():
        chunks = [(s, e, int(n[6:])) for s, e, n in ranges if n.startswith("chunk/")]
        for k, (s0, e0) in enumerate([(s, e) for s, e, n in ranges if n == "step"]):
            if k < 2:
                continue
            units[rank, k] = [(s, e, "F" if n == "forward" else "B",
                               next((c for cs, ce, c in chunks if cs <= s and e <= ce), 0))
                              for s, e, n in ranges if n in ("forward", "backward") and s >= s0 and e <= e0]
    return units


def replay(per_rank, v):
    """The step's length with each rank running its units in its recorded order and measured
    durations, every unit starting as soon as its input is there (free communication, no
    descheduling): the schedule's own bubble over these stage costs."""
    done, clock, pos = {}, {r: 0 for r in per_rank}, {r: 0 for r in per_rank}
    seen = {r: {} for r in per_rank}
    keyed = {}
    for r, u in per_rank.items():  # (kind, global chunk, micro-batch) of each unit
        keyed[r] = []
        for s, e, kind, k in u:
            m = seen[r].setdefault((kind, k), 0)
            seen[r][kind, k] += 1
            keyed[r].append((kind, r + k * P, m, e - s))
    last = P * v - 1
    while any(pos[r] < len(keyed[r]) for r in keyed):
        moved = False
        for r in keyed:
            while pos[r] < len(keyed[r]):
                kind, c, m, d = keyed[r][pos[r]]
                dep = ("F", c - 1, m) if kind == "F" and c > 0 else ("B", c + 1, m) if kind == "B" and c < last else None
                if dep is not None and dep not in done:
                    break
                start = max(clock[r], done[dep] if dep is not None else 0)
                clock[r] = done[kind, c, m] = start + d
                pos[r] += 1
                moved = True
        if not moved:
            raise RuntimeError("replay stalled: the trace's unit order is not a valid schedule")
    span = max(clock.values())
    return {r: (span - sum(x[3] for x in keyed[r])) / sum(x[3] for x in keyed[r]) for r in keyed}


def bubbles(db, v):
    """Per rank, the median over steps of idle / busy: in the stage's own window, in the pipeline's
    (the step's first forward to its last backward over all ranks, on the merged clock), and in
    the replay of the recorded order and unit times."""
    units = step_units(db)
    ranks = sorted({r for r, _ in units})
    own, pipeline, replayed = {}, {}, {}
    for step in sorted({k for _, k in units}):
        if not all((r, step) in units and units[r, step] for r in ranks):
            continue
        lo = min(s for r in ranks for s, _, _, _ in units[r, step])
        hi = max(e for r in ranks for _, e, _, _ in units[r, step])
        for r, b in replay({r: units[r, step] for r in ranks}, v).items():
            replayed.setdefault(r, []).append(b)
        for r in ranks:
            u = units[r, step]
            busy = sum(e - s for s, e, _, _ in u)
            own.setdefault(r, []).append((max(e for _, e, _, _ in u) - min(s for s, _, _, _ in u) - busy) / busy)
            pipeline.setdefault(r, []).append((hi - lo - busy) / busy)
    med = lambda d: {r: statistics.median(x) for r, x in sorted(d.items())}
    return med(own), med(pipeline), med(replayed)


def traced_run(binary, v, m, a, folder):
    db = os.path.join(folder, f"pp2_v{v}_m{m}.db")
    cmd = [binary, "run", "--workload", os.path.join(folder, "bubble-cpu.json"), "--seq", str(a.seq), "--mbs", str(a.mbs),
           "--gbs", str(a.mbs * m), "--steps", str(a.steps), "--device", "cpu", "--threads", "1",
           "--cpu-lanes", "1", "--nproc", str(P), "--pp", str(P), "--pp-schedule", "1f1b",
           "--virtual-stages", str(v), "-q", "--overwrite", "--trace", db]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return bubbles(db, v)


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
        with output_file(os.path.join(folder, "bubble-cpu.json")) as f:
            json.dump(WORKLOAD, f)
        for m in a.micro_batches:
            measured = {v: [] for v in a.virtual}
            for _ in range(a.rounds):  # alternate the schedules so that a noisy moment hits all of them
                for v in a.virtual:
                    measured[v].append(traced_run(a.bin, v, m, a, folder))
            for v in a.virtual:
                ideal = (P - 1) / (v * m)
                row = {"pp": P, "v": v, "m": m, "ideal_bubble": ideal}
                for i, window in enumerate(("own", "pipeline", "replay")):
                    per_rank = {r: statistics.median(x[i][r] for x in measured[v]) for r in measured[v][0][i]}
                    row[window] = {str(r): b for r, b in per_rank.items()}
                    row[window + "_mean"] = statistics.mean(per_rank.values())
                    row[window + "_min_round"] = min(statistics.mean(x[i].values()) for x in measured[v])
                rows.append(row)
                fmt = lambda w: "  ".join(f"rank {r} {b:.3f}" for r, b in row[w].items())
                print(f"p {P} v {v} m {m}: ideal (p-1)/(v.m) {ideal:.3f} | pipeline window {fmt('pipeline')}  mean "
                      f"{row['pipeline_mean']:.3f} (best round {row['pipeline_min_round']:.3f}) | own window "
                      f"{fmt('own')} | replay {fmt('replay')}  mean {row['replay_mean']:.3f}", file=sys.stderr)
    for m in a.micro_batches:
        for w in ("pipeline", "replay"):
            base = next(r[w + "_mean"] for r in rows if r["m"] == m and r["v"] == a.virtual[0])
            for r in rows:
                if r["m"] == m and r["v"] != a.virtual[0]:
                    print(f"m {m}: {w} bubble v {r['v']} / v {a.virtual[0]} {r[w + '_mean'] / base:.2f} "
                          f"(ideal {a.virtual[0] / r['v']:.2f})", file=sys.stderr)
    # A core per rank is the premise: other work on the machine shows up as idle time (a rank
    # waits for a neighbour that was descheduled), so the load is part of the result.
    load = os.getloadavg()[0]
    print(f"load average (1 min) at the end: {load:.1f} on {os.cpu_count()} cores", file=sys.stderr)
    print(json.dumps({"load_average": load, "cores": os.cpu_count(), "rows": rows, "seq": a.seq, "mbs": a.mbs, "steps": a.steps, "rounds": a.rounds}))


if __name__ == "__main__":
    main()
