#!/usr/bin/env python3
"""bench/moe_a2a.py — the expert-parallel all-to-all's share of a MoE training step, measured on a
traced run (not a test).

Runs `trainscope run --workload small-cpu-moe --nproc 2 --ep 2 --trace DB` (a CPU core per rank,
Gloo over loopback), then reads the run database (docs/trace-schema.md: `steps`, `collectives`).
For every rank, over the steps after the first --skip (warm-up: allocation, the optimizer state):
  step time      Σ steps.step_time_ns
  per (group, op) the collectives that started inside those steps' windows: calls, bytes and
                 seconds per step, and their share of the step time (Σ duration / Σ step time)
  wait           of a call linked across its members (the rows of one group with the same seq and
                 op, exactly group_size of them, as trace-schema.md's rule for unknown groups), the
                 time from this rank's start to the last member's arrival; transfer = the rest
  bus bandwidth  Σ bytes / Σ transfer seconds × (n - 1)/n (nccl-tests' factor for all-to-all and
                 all-gather; 2(n - 1)/n for all-reduce)
The all-to-all rows are the token dispatch and combine (4 per MoE layer and micro-batch: forward
and backward, each there and back); the all-gather on the same group is the per-expert counts'
exchange (8·ep·E bytes, forward only). For scale the script also gives the all-to-all bytes against
4·N·k·C·b per MoE layer and micro-batch, what drop-less balanced routing would send
(docs/architecture.md, "Mixture of experts"); capacity dropping sends less.

Usage: bench/moe_a2a.py [--bin build/bin/trainscope] [--workload small-cpu-moe] [--seq 128] [--mbs 8]
                        [--steps 8] [--skip 1] [--nproc 2] [--ep 2] [--threads 1] [--db KEEP.db]
                        [-- extra trainscope run flags]
       bench/moe_a2a.py --read RUN.db     (an existing traced run database)
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

from common import DEFAULT_BIN, ROOT, moe_layer_indices

FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
          "all_gather": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


def step_windows(con, skip):
    """rank -> [(start_ns, end_ns)] of its counted steps."""
    windows = {}
    for rank, step, start, dur in con.execute("SELECT rank, step, start_ns, step_time_ns FROM steps ORDER BY rank, step"):
        if step >= skip:
            windows.setdefault(rank, []).append((start, start + dur))
    return windows


def collective_rows(con):
    """Every collective row with its wait: (rank, grp, op, n, bytes, start, end, wait_ns)."""
    rows = con.execute("SELECT rank, grp, op, group_size, seq, bytes, start_ns, end_ns FROM collectives").fetchall()
    calls = {}
    for r in rows:
        if r[2] not in ("send", "recv"):
            calls.setdefault((r[1], r[4], r[2]), []).append(r)
    out = []
    for rank, grp, op, n, seq, nbytes, start, end in rows:
        members = calls.get((grp, seq, op), [])
        # Linked only when exactly one instance's members are there; otherwise no wait is known.
        linked = len(members) == n and len({m[0] for m in members}) == n
        wait = max(m[6] for m in members) - start if linked else 0
        out.append((rank, grp, op, n, nbytes, start, end, max(0, min(wait, end - start))))
    return out


def inside(windows, t):
    return any(s <= t < e for s, e in windows)


def dropped_share(con, skip):
    """Σ dropped / Σ routed assignments over the counted steps (expert_load, schema 5), or None."""
    if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'expert_load'").fetchone():
        return None
    routed, dropped = con.execute("SELECT sum(tokens), sum(dropped) FROM expert_load WHERE step >= ?", (skip,)).fetchone()
    return dropped / routed if routed else None


def analyse(db, skip):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    windows = step_windows(con, skip)
    if not windows:
        raise SystemExit(f"error: {db} has no steps after the first {skip} (fix: run more --steps or lower --skip)")
    config = json.loads((con.execute("SELECT value FROM meta WHERE key = 'config'").fetchone() or ["{}"])[0])
    stats = {}  # (rank, grp, op) -> [calls, bytes, seconds, wait seconds, group size]
    for rank, grp, op, n, nbytes, start, end, wait in collective_rows(con):
        if rank not in windows or not inside(windows[rank], start):
            continue
        s = stats.setdefault((rank, grp, op), [0, 0, 0.0, 0.0, n])
        s[0] += 1
        s[1] += nbytes
        s[2] += (end - start) / 1e9
        s[3] += wait / 1e9
    table = []
    for (rank, grp, op), (calls, nbytes, secs, wait, n) in sorted(stats.items()):
        steps = len(windows[rank])
        step_s = sum(e - s for s, e in windows[rank]) / 1e9
        transfer = secs - wait
        table.append({"rank": rank, "grp": grp, "op": op, "group_size": n, "steps": steps,
                      "calls_per_step": calls / steps, "bytes_per_step": nbytes / steps,
                      "s_per_step": secs / steps, "wait_s_per_step": wait / steps, "step_s": step_s / steps,
                      "share_of_step": secs / step_s, "transfer_share_of_step": transfer / step_s,
                      "busbw_gbps": nbytes / transfer * FACTOR.get(op, lambda _: 1.0)(n) / 1e9 if transfer > 0 else 0.0})
    return config, table, dropped_share(con, skip)


def print_table(table, config, workload):
    print(f"{'rank':>4} {'group':<10} {'op':<11} {'calls/step':>10} {'KiB/step':>10} {'ms/step':>8} "
          f"{'wait ms':>8} {'share':>7} {'xfer share':>10} {'busbw GB/s':>10}", file=sys.stderr)
    for r in table:
        print(f"{r['rank']:>4} {r['grp']:<10} {r['op']:<11} {r['calls_per_step']:>10.1f} {r['bytes_per_step'] / 1024:>10.1f} "
              f"{r['s_per_step'] * 1e3:>8.2f} {r['wait_s_per_step'] * 1e3:>8.2f} {r['share_of_step']:>7.1%} "
              f"{r['transfer_share_of_step']:>10.1%} {r['busbw_gbps']:>10.2f}", file=sys.stderr)
    a2a = [r for r in table if r["op"] == "all_to_all"]
    if not a2a:
        return
    step_ms = ", ".join(f"rank {r['rank']} {r['step_s'] * 1e3:.0f} ms" for r in a2a)
    print(f"step time: {step_ms}", file=sys.stderr)
    if workload:
        # Drop-less balanced routing sends 4·N·k·C·b per MoE layer and micro-batch (architecture.md).
        N = config.get("mbs", 0) * config.get("seq", 0)
        b = 2 if config.get("precision", "fp32") in ("bf16", "fp16") else 4
        layers = len(moe_layer_indices(workload))
        ga = max(1, config.get("ga", 1))
        ideal = 4 * N * workload.get("top_k", 1) * workload["n_embd"] * b * layers * ga
        for r in a2a:
            print(f"rank {r['rank']}: all-to-all bytes = {r['bytes_per_step'] / ideal:.2f} x drop-less balanced "
                  f"4·N·k·C·b per layer and micro-batch ({ideal / 1024:.0f} KiB/step)", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--workload", default="small-cpu-moe")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--skip", type=int, default=1, help="leading steps left out (warm-up)")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--ep", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="per rank: a core each on a 2-core machine")
    ap.add_argument("--db", help="keep the run database here (default: a temporary one)")
    ap.add_argument("--read", help="analyse this existing run database instead of running")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    wpath = os.path.join(ROOT, "workloads", a.workload + ".json")
    workload = json.load(open(wpath)) if os.path.exists(wpath) else None
    with tempfile.TemporaryDirectory() as tmp:
        db = a.read or a.db or os.path.join(tmp, "moe.db")
        run = None
        if not a.read:
            cmd = [a.bin, "run", "--workload", a.workload, "--nproc", str(a.nproc), "--ep", str(a.ep),
                   "--seq", str(a.seq), "--mbs", str(a.mbs), "--steps", str(a.steps), "--threads", str(a.threads),
                   "--device", "cpu", "--data", "synthetic", "--trace", db, "--overwrite", "-q", "--json", *a.extra]
            print("$ " + " ".join(cmd), file=sys.stderr)
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"error: trainscope run failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
            run = json.loads(p.stdout.strip().splitlines()[-1])
        config, table, dropped = analyse(db, a.skip)
    print_table(table, config, workload)
    a2a = [r for r in table if r["op"] == "all_to_all"]
    if not a2a:
        raise SystemExit("error: the run has no all_to_all collectives in its counted steps "
                         "(fix: a MoE workload (n_experts > 0) with --ep > 1, and --steps > --skip)")
    counts = [r for r in table if r["op"] == "all_gather" and r["grp"] in {x["grp"] for x in a2a}]
    result = {"workload": a.workload, "seq": a.seq, "mbs": a.mbs, "nproc": a.nproc, "ep": a.ep, "skip": a.skip,
              "all_to_all_share": [r["share_of_step"] for r in a2a],
              "all_to_all_transfer_share": [r["transfer_share_of_step"] for r in a2a],
              "all_to_all_busbw_gbps": [r["busbw_gbps"] for r in a2a],
              "counts_all_gather_share": [r["share_of_step"] for r in counts], "dropped_share": dropped,
              "tokens_per_s_median": run and run.get("tokens_per_s_median"), "collectives": table}
    print(json.dumps(result))
    share = " / ".join(f"{s:.1%}" for s in result["all_to_all_share"])
    xfer = " / ".join(f"{s:.1%}" for s in result["all_to_all_transfer_share"])
    print(f"all-to-all share of the step (ranks 0/1...): {share} (transfer only, wait excluded: {xfer})",
          file=sys.stderr)
    if dropped is not None:
        print(f"assignments dropped over capacity: {dropped:.1%} (expert_load)", file=sys.stderr)


if __name__ == "__main__":
    main()
