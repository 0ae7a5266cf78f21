#!/usr/bin/env python3
"""`trainscope import` of real torch.profiler traces of a 2-rank Gloo job whose schedule repeats
(schedule(wait=1, warmup=1, active=2, repeat=2) with tensorboard_trace_handler(use_gzip=True): two
.pt.trace.json.gz files per rank, one per cycle), and of a single process's cycles.

What it checks, each of which once failed on real traces:
  - a rank's cycles are that one rank (a distributed job's were refused: "claims rank 0, as an
    earlier file does"; a single process's became ranks 0, 1, 2), whatever order the files come in;
  - each rank's collectives are numbered over all its cycles in the order they started, so rank 0's
    k-th call is rank 1's k-th (same op, same bytes);
  - a scalar all-reduce (a 0-d tensor: DeepSpeed's overflow check, a loss average) has 4 bytes (it had
    the size of the call before it), and an all-gather's bytes are its output (they were each rank's
    input: half, on 2 ranks);
  - two profiling sessions of one process (each numbering its steps from 0) stay two ranks, as
    before: only cycles, whose ProfilerStep numbers continue, are merged;
  - another tool's Chrome trace beside the ranks' files is refused naming it (it was an empty rank);
  - a file passed twice is refused (one process's trace twice was two identical ranks);
  - tensorboard_trace_handler's folder is refused naming the files to pass (the hint said "pass one
    trace file per rank");
  - report says the throughput and peak memory are not recorded (it printed 0 tokens/s, 0.00 MiB);
  - two files of one rank recorded at the same time are refused.
The expected figures come from what the job did (the tensors' sizes below) and from the files
themselves (their ProfilerStep#N), not from the importer.
Usage: kineto_cycles_gloo_test.py TRAINSCOPE_BINARY WORK_DIR
"""
import glob
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import warnings

GRAD, SHARD = 1000, 96  # elements of the all-reduced buffer and of each rank's all-gather input


def job(rank, world, folder, port):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    w = torch.nn.Linear(GRAD // 10, 10, bias=False)  # GRAD parameters
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=tensorboard_trace_handler(folder, worker_name=f"rank{rank}", use_gzip=True)) as p:
        for _ in range(8):
            loss = w(torch.randn(4, GRAD // 10)).square().mean()
            loss.backward()
            if world > 1:
                dist.all_reduce(w.weight.grad)                                  # GRAD floats
                out = torch.empty(SHARD * world)
                dist.all_gather_into_tensor(out, torch.full((SHARD,), float(rank)))  # output SHARD * world
                dist.all_reduce(loss.detach())                                  # a 0-d tensor: 4 bytes
            w.weight.grad = None
            p.step()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def session(path):
    """One profile() session of this process, exported with export_chrome_trace: steps 0 and 1."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    w = torch.nn.Linear(16, 16)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=2, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as p:
        for _ in range(2):
            w(torch.randn(4, 16)).sum().backward()
            p.step()


def steps_of(path):
    with (gzip.open(path) if path.endswith(".gz") else open(path)) as f:
        events = json.load(f)["traceEvents"]
    return sorted(int(e["name"][len("ProfilerStep#"):]) for e in events
                  if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


def main():
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)  # this test's own folder, made afresh
    os.makedirs(work)
    import torch.multiprocessing as mp
    dist_dir, one_dir = os.path.join(work, "ddp"), os.path.join(work, "one")
    mp.spawn(job, args=(2, dist_dir, 29000 + os.getpid() % 2000), nprocs=2, join=True)
    job(0, 1, one_dir, 0)
    failures = []

    # The 2-rank job: 2 cycles per rank, passed in an order that is neither rank nor time order.
    files = sorted(glob.glob(os.path.join(dist_dir, "*.pt.trace.json.gz")))
    if len(files) != 4:
        raise SystemExit(f"FAIL: the profiler wrote {files}, not 2 cycles per rank")
    expected_steps = {r: sorted(s for f in files if os.path.basename(f).startswith(f"rank{r}.") for s in steps_of(f))
                      for r in range(2)}
    db = os.path.join(work, "ddp.db")
    out = run([binary, "import", *reversed(files), "-o", db])
    print(out.stdout.strip(), out.stderr.strip())
    if out.returncode != 0:
        raise SystemExit(f"FAIL: import of a rank's cycles exited {out.returncode}: {out.stderr}")
    con = sqlite3.connect(db)
    world = con.execute("SELECT value FROM meta WHERE key = 'world_size'").fetchone()[0]
    if world != "2":
        failures.append(f"world_size {world}, not 2")
    calls = {}
    for r in range(2):
        got = [s for (s,) in con.execute("SELECT step FROM steps WHERE rank = ? ORDER BY step", (r,))]
        print(f"rank {r}: steps {got}, in its files {expected_steps[r]}")
        if got != expected_steps[r]:
            failures.append(f"rank {r}: steps {got} != {expected_steps[r]}")
        calls[r] = con.execute("SELECT seq, op, bytes, group_size FROM collectives WHERE rank = ? ORDER BY seq", (r,)).fetchall()
        want = [("all_reduce", GRAD * 4), ("all_gather", SHARD * 2 * 4), ("all_reduce", 4)] * len(expected_steps[r])
        got_calls = [(op, b) for _, op, b, _ in calls[r]]
        print(f"rank {r}: {len(got_calls)} collectives, first {got_calls[:3]}")
        if got_calls != want:
            failures.append(f"rank {r}: collectives {got_calls} != {want}")
        if [s for s, _, _, _ in calls[r]] != list(range(len(calls[r]))):
            failures.append(f"rank {r}: seq {[s for s, _, _, _ in calls[r]]} is not 0..{len(calls[r]) - 1}")
    if [c[:3] for c in calls[0]] != [c[:3] for c in calls[1]]:
        failures.append("the ranks' k-th calls differ (linked to the wrong peers)")
    rep = run([binary, "report", db, "--json"])
    if rep.returncode != 0:
        failures.append(f"report exited {rep.returncode}: {rep.stderr}")
    else:
        summary = json.loads(rep.stdout)["summary"]
        if sorted(r["rank"] for r in summary["ranks"]) != [0, 1]:
            failures.append(f"report's ranks {summary['ranks']}")
    # The profiler counts no tokens, and this trace has no memory events: said so, not "0 tokens/s".
    text = run([binary, "report", db]).stdout
    print(text.splitlines()[1] if len(text.splitlines()) > 1 else text)
    for needle in (f"throughput not recorded (no token counts) over {len(expected_steps[0])} step(s)", "peak memory not recorded"):
        if needle not in text:
            failures.append(f"report does not say '{needle}':\n{text[:400]}")

    # A single process (no distributedInfo): its cycles are rank 0, not ranks 0 and 1.
    ones = sorted(glob.glob(os.path.join(one_dir, "*.pt.trace.json.gz")))
    one_db = os.path.join(work, "one.db")
    out = run([binary, "import", *ones, "-o", one_db])
    if out.returncode != 0:
        failures.append(f"import of one process's {len(ones)} cycles exited {out.returncode}: {out.stderr}")
    else:
        con = sqlite3.connect(one_db)
        ranks = [r for (r,) in con.execute("SELECT DISTINCT rank FROM steps")]
        want = sorted(s for f in ones for s in steps_of(f))
        got = [s for (s,) in con.execute("SELECT step FROM steps ORDER BY step")]
        print(f"one process, {len(ones)} cycle files: ranks {ranks}, steps {got}")
        if len(ones) != 2 or ranks != [0] or got != want:
            failures.append(f"one process's cycles: ranks {ranks}, steps {got} (files' {want})")

    # Two sessions of one process (profile() twice: steps from 0 each time) are two ranks, as before.
    sessions = [os.path.join(work, f"session{k}.json") for k in range(2)]
    for path in sessions:
        session(path)
    two_db = os.path.join(work, "sessions.db")
    out = run([binary, "import", *sessions, "-o", two_db])
    if out.returncode != 0:
        failures.append(f"import of two sessions of one process exited {out.returncode}: {out.stderr}")
    else:
        ranks = [r for (r,) in sqlite3.connect(two_db).execute("SELECT DISTINCT rank FROM steps ORDER BY rank")]
        print(f"two sessions of one process: ranks {ranks}")
        if ranks != [0, 1]:
            failures.append(f"two sessions of one process: ranks {ranks}, not [0, 1]")

    # Refusals: a non-zero exit naming the file, and nothing written.
    chrome = os.path.join(work, "chrome.json")
    with open(chrome, "w") as f:
        json.dump({"traceEvents": [{"name": "paint", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1, "cat": "blink"}]}, f)
    rank0 = [f for f in files if os.path.basename(f).startswith("rank0.")]
    twice = os.path.join(work, "twice.json.gz")
    shutil.copy(rank0[0], twice)
    for args, needle in (([rank0[0], chrome], "nothing was recognised in " + chrome),
                         ([ones[0], ones[0]], "is passed twice"),
                         ([dist_dir], f"is a directory (fix: pass the trace files in it, one per rank or each rank's "
                                      f"profiling cycles: {dist_dir}/*.pt.trace.json.gz (4 there))"),
                         ([rank0[0], twice], "at overlapping times")):
        bad = os.path.join(work, "refused.db")
        out = run([binary, "import", *args, "-o", bad])
        print(out.stderr.strip())
        if out.returncode == 0 or needle not in out.stderr or os.path.exists(bad):
            failures.append(f"import {args}: exit {out.returncode}, '{out.stderr.strip()}' (wanted '{needle}', no file)")

    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
