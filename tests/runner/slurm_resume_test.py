#!/usr/bin/env python3
"""`tune --launcher slurm` under the local Slurm of tests/slurm/local_slurm.sh (SLURM_CONF set): a tuner
killed with -9, a tuner inside an allocation, a trial across two nodes.

    slurm_resume_test.py TRAINSCOPE CASE WORKDIR       (run by tests/slurm/slurm_runner_test.sh)

  slurm_kill9      an HF study's second trial holds (its job loops for ever once entered, as a job stuck
                   in a collective; the test's marker in every task's argv), the tuner is killed with -9:
                   srun dies with it, the step's tasks stay (checked). The running trial's Slurm job was
                   recorded in the study by id before the kill; a copy of the study, resumed, takes a new
                   id and cancels nothing of the original's. `tune --resume` of the original cancels the
                   recorded ids before its first trial: the first trial is kept as it was, the killed one run again once (cN-rR.2), every
                   trial ok, no task or job of the study left, and another study's job (held, pending)
                   untouched.
  slurm_alloc      the tuner run inside an allocation (salloc -n 2 TRAINSCOPE tune …): every trial a step
                   of that job; a trial that hangs (deaf to SIGTERM) is cancelled as a step found by
                   squeue --steps (no job bears its name), and the next trial's step gets the CPUs.
  slurm_two_nodes  two nodes on this host (SLURM_TEST_NODES=2, one CPU each): a 2-rank trial is one
                   step of one task per node, its Gloo ranks meeting at the first node's address.
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ext_runner_test import HANG_JOB, resume_kept, study_rows, wait_for, with_marker  # noqa: E402
from hf_runner_test import PROBE, PY, SCRIPT, check, trial_dir, tune  # noqa: E402

# The job of slurm_kill9: examples/hf_trainer.py, except that while WORK/hold exists a trial started
# after another trial of the study has written its steps loops for ever, deaf to SIGTERM (each task
# says so in WORK/held.RANK first): slurmstepd sends SIGTERM to the tasks of an srun that dies, which
# ends a job that keeps SIGTERM's default, but not one stuck in a collective or catching it; and the
# job srun made stays RUNNING either way. argv[1] is the test's marker.
HOLD_JOB = """import glob, os, runpy, signal, sys, time
probe = os.environ["TRAINSCOPE_PROBE_DIR"]
work = %r
others = [p for p in glob.glob(os.path.join(os.path.dirname(os.path.dirname(probe)), "*.job", "probe",
                                            "rank0.steps.jsonl")) if not p.startswith(probe + os.sep)]
if os.path.exists(os.path.join(work, "hold")) and others:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(os.path.join(work, "held." + os.environ.get("SLURM_PROCID", "0")), "w").close()
    while True:
        time.sleep(0.2)
sys.argv = [%r] + sys.argv[2:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def squeue(*args):
    q = subprocess.run(["squeue", "--noheader"] + list(args), capture_output=True, text=True, timeout=60)
    check(q.returncode == 0, f"squeue {args}: {q.stderr}")
    return q.stdout.split()


def study_id(study):
    con = sqlite3.connect(f"file:{study}?mode=ro", uri=True, timeout=5)
    try:
        row = con.execute("SELECT value FROM study WHERE key = 'study_id'").fetchone()
    finally:
        con.close()
    check(row and len(row[0]) == 16, f"{study}: no study_id: {row}")
    return row[0]


def launches(study):
    """The study's records of what its trials' srun started (tuner/slurm.h): key → JSON."""
    con = sqlite3.connect(f"file:{study}?mode=ro", uri=True, timeout=5)
    try:
        rows = con.execute("SELECT key, value FROM study WHERE key LIKE 'slurm_launch:%'").fetchall()
    finally:
        con.close()
    return {k: json.loads(v) for k, v in rows}


def tasks(marker):
    """The live processes with `marker` in their argv that are not srun (the step's tasks)."""
    out = []
    for pid in with_marker(marker):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "srun":
                    out.append(pid)
        except OSError:
            pass
    return out


def case_slurm_kill9(ts, work):
    study = os.path.join(work, "kill9.db")
    subprocess.run(["rm", "-rf", study, study + "-wal", study + "-shm", study + ".lock", study + ".trials",
                    os.path.join(work, "hold")] + [os.path.join(work, f"held.{r}") for r in (0, 1)], check=True)
    job = os.path.join(work, "hold_job.py")
    with open(job, "w") as f:
        f.write(HOLD_JOB % (work, SCRIPT))
    open(os.path.join(work, "hold"), "w").close()
    marker = f"ts-kill9-marker-{os.getpid()}-{int(time.time())}"
    args = ["--runner", "hf", "--python", PY, "--probe", PROBE, "--cluster", "cpu-local", "--study", study, "--json",
            "--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "2", "--mbs", "1,2", "--ckpt", "none",
            "--zero", "0", "--exhaustive", "--trial-steps", "3", "--mem-limit", "3G", "--launcher", "slurm",
            "--trial-timeout", "300", "--entry", f"{job} {marker} --model gpt2 --seq 32"]
    # Another study's job (held: pending, holding nothing): never ours to cancel.
    other = "trainscope-study-" + ("f" * 16)
    sb = subprocess.run(["sbatch", "--hold", "--job-name=" + other, "--output=/dev/null", "--wrap=true"],
                        capture_output=True, text=True, timeout=60)
    check(sb.returncode == 0, f"sbatch: {sb.stderr}")
    other_id = sb.stdout.split()[-1]
    tuner = subprocess.Popen([ts, "tune"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        # The second trial's tasks hold, and Slurm lists its step under the study's name.
        def second_held():
            check(tuner.poll() is None, f"tune ended before it was killed: {tuner.returncode}")
            rows = study_rows(study)
            check(all(x[3] in ("ok", "running") for x in rows), f"a trial failed before the kill: {rows}")
            if not (len(rows) >= 2 and rows[0][3] == "ok" and rows[1][3] == "running"):
                return None
            if not all(os.path.exists(os.path.join(work, f"held.{r}")) for r in (0, 1)):
                return None
            name = "trainscope-study-" + study_id(study)
            # (a step of the job srun made is named after its command; the job bears the study's name)
            if name not in squeue("--states=RUNNING", "--format=%j") + squeue("--steps", "--format=%j"):
                return None
            # The running trial's launch is recorded in the study by id while it runs (kill -9 keeps it).
            rec = launches(study).get(f"slurm_launch:{rows[1][1]}:{rows[1][2]}")
            return rows if rec and rec["name"] == name and (rec["jobs"] or rec["steps"]) else None
        before = wait_for("the second trial's step holding", second_held)
        name = "trainscope-study-" + study_id(study)
        rec = launches(study)[f"slurm_launch:{before[1][1]}:{before[1][2]}"]
        check(set(rec["jobs"]) <= set(squeue("--format=%i")), f"the recorded jobs are Slurm's: {rec}")
        print(f"recorded before the kill: {rec}", flush=True)
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait(timeout=60)
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
    check(tuner.returncode == -signal.SIGKILL, f"tune's status {tuner.returncode}")
    # srun goes with the tuner (its death signal); the step's tasks and Slurm's job do not.
    wait_for("srun to die with the tuner", lambda: len(with_marker(marker)) == len(tasks(marker)), timeout=60)
    # Seen on Slurm 22.05.8: the tasks ended with srun here, even deaf to SIGTERM (not what the hang
    # case saw); what is left (tasks, srun's job) is recorded, and --resume must leave nothing.
    left_tasks, left_job = tasks(marker), name in squeue("--format=%j")
    print(f"after kill -9: {len(left_tasks)} task(s) of the killed trial, its job listed: {left_job}", flush=True)
    os.remove(os.path.join(work, "hold"))  # the trial run again trains; the killed tasks hold for ever
    # A copy of the study (cp of the file with its -wal, as cp -r of its folder), resumed (a budget that
    # runs no trial: the killed job holds the CPUs): it takes a new id, says so, and cancels nothing of
    # the original's — before, it cancelled every step of the name they shared.
    copy = os.path.join(work, "kill9-copy.db")
    subprocess.run(["rm", "-rf"] + [copy + x for x in ("", "-wal", "-shm", ".lock", ".trials")], check=True)
    for x in ("", "-wal", "-shm"):
        if os.path.exists(study + x):
            subprocess.run(["cp", study + x, copy + x], check=True)
    listed_before = set(squeue("--format=%i")) & set(rec["jobs"])
    cargs = [copy if a == study else a for a in args] + ["--budget", "0.001s"]
    p = subprocess.run([ts, "tune", "--resume"] + cargs, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"the copy's resume exited {p.returncode}: {p.stderr[-3000:]}")
    check("is a copy of the study file" in p.stderr and "left alone" in p.stderr, f"the copy's notes: {p.stderr}")
    check(study_id(copy) != name[len("trainscope-study-"):], "the copy kept the original's id")
    check(set(squeue("--format=%i")) & set(rec["jobs"]) == listed_before,
          f"the copy's resume cancelled the original's job {rec['jobs']}")
    print(f"the copy resumed: new id {study_id(copy)}, the original's jobs {sorted(listed_before)} still listed",
          flush=True)
    finished = {(r[1], r[2]): r for r in study_rows(study) if r[3] == "ok"}
    mtimes = {k: os.path.getmtime(r[5]) for k, r in finished.items()}
    r, after = resume_kept(ts, args, study, finished, mtimes, before[1], 2, 600)
    check(study_id(study) == name[len("trainscope-study-"):], "the study's id changed on --resume")
    # No task of the killed trial and no job or step of the study is left; the other study's job is.
    wait_for("the killed trial's tasks to end", lambda: not tasks(marker), timeout=60)
    wait_for("Slurm to drop the study's jobs and steps",
             lambda: name not in squeue("--format=%j") + squeue("--steps", "--format=%j"), timeout=60)
    check(not set(rec["jobs"]) & set(squeue("--format=%i")), f"the recorded jobs {rec['jobs']} are still listed")
    check(other_id in squeue("--format=%i"), f"another study's job {other_id} was cancelled")
    subprocess.run(["scancel", other_id], timeout=60)
    print(f"slurm_kill9: killed in trial {before[1][1]}-r{before[1][2]} ({len(left_tasks)} task(s) left, job listed: "
          f"{left_job}); --resume cancelled "
          f"{name}, kept {len(finished)} trial(s), {len(after)} rows, pick {r['recommended']}")


def case_slurm_alloc(ts, work):
    job = os.path.join(work, "hang_job.py")
    with open(job, "w") as f:
        f.write(HANG_JOB % SCRIPT)
    marker = f"ts-alloc-marker-{os.getpid()}-{int(time.time())}"
    study = os.path.join(work, "alloc.db")
    subprocess.run(["rm", "-rf", study, study + "-wal", study + "-shm", study + ".lock", study + ".trials"], check=True)
    alloc_name = f"ts-alloc-{os.getpid()}"
    cmd = ["salloc", "--ntasks=2", "--job-name=" + alloc_name, ts, "tune", "--runner", "hf", "--python", PY,
           "--probe", PROBE, "--cluster", "cpu-local", "--study", study, "--json", "--workload", "tiny", "--gbs", "4",
           "--seq", "32", "--ranks", "2", "--mbs", "1,2", "--ckpt", "none", "--zero", "0", "--exhaustive",
           "--trial-steps", "3", "--mem-limit", "3G", "--launcher", "slurm", "--trial-timeout", "60",
           "--entry", f"{job} {marker} --model gpt2 --seq 32"]
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"salloc … tune exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    by_mbs = {}
    for t in r["trials"]:
        cfg = json.load(open(os.path.join(trial_dir(t), "training_args.json")))
        by_mbs.setdefault(cfg["per_device_train_batch_size"], []).append(t)
    check(set(by_mbs) == {1, 2}, f"trials by micro-batch: {sorted(by_mbs)}")
    check(all(t["status"] == "hang" and "scancel" not in t.get("message", "") and
              "still lists" not in t.get("message", "") for t in by_mbs[2]), f"the hung trial: {by_mbs[2]}")
    check(all(t["status"] == "ok" for t in by_mbs[1]), f"the trial beside the hung one: {by_mbs[1]}")
    # Every rank of the ok trial ran as a step of the allocation (one job id: the allocation's).
    jobs = set()
    for t in by_mbs[1]:
        for rank in (0, 1):
            rec = json.load(open(os.path.join(trial_dir(t), "probe", f"rank{rank}.launch.json")))
            check(rec["RANK"] == str(rank) and rec["WORLD_SIZE"] == "2", f"rank {rank}: {rec}")
            # 2 tasks on this node: torchrun's rule, one intra-op thread each, set by the probe.
            check(rec["LOCAL_WORLD_SIZE"] == "2" and rec["OMP_NUM_THREADS"] == "1" and
                  rec["TRAINSCOPE_THREADS_SOURCE"] == "runner", f"rank {rank}'s threads: {rec}")
            jobs.add((rec["SLURM_JOB_ID"], rec["SLURM_STEP_ID"]))
    check(len({j for j, _ in jobs}) == 1, f"the trial's ranks are steps of the allocation: {jobs}")
    wait_for("the hung trial's tasks to end", lambda: not tasks(marker), timeout=60)
    name = "trainscope-study-" + study_id(study)
    wait_for("Slurm to drop the study's steps and the allocation",
             lambda: name not in squeue("--steps", "--format=%j") and alloc_name not in squeue("--format=%j"),
             timeout=60)
    print(f"slurm_alloc: inside allocation {sorted(jobs)[0][0]}: hung trial cancelled as a step, "
          f"{len(by_mbs[1])} ok, pick {r['recommended']}")


def case_slurm_two_nodes(ts, work):
    nodes = set(subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True,
                               timeout=60).stdout.split())
    check(len(nodes) == 2, f"two nodes (SLURM_TEST_NODES=2): {nodes}")
    study, r = tune(ts, work, "two-nodes", ["--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "2",
                                            "--mbs", "2", "--ckpt", "none", "--zero", "0", "--mem-limit", "3G",
                                            "--exhaustive", "--trial-steps", "3", "--launcher", "slurm",
                                            "--trial-timeout", "240",
                                            "--entry", SCRIPT + " --model gpt2 --seq 32"], timeout=600)
    check(r["trials"] and all(t["status"] == "ok" for t in r["trials"]), f"trials {r['trials']}")
    for t in r["trials"]:
        recs = [json.load(open(os.path.join(trial_dir(t), "probe", f"rank{k}.launch.json"))) for k in (0, 1)]
        check({x["SLURMD_NODENAME"] for x in recs} == nodes, f"{trial_dir(t)}: one rank per node: {recs}")
        check(len({x["SLURM_JOB_ID"] for x in recs}) == 1 and all(x["LOCAL_RANK"] == "0" for x in recs) and
              recs[0]["MASTER_ADDR"] == recs[1]["MASTER_ADDR"] in nodes, f"{trial_dir(t)}: {recs}")
        # One task a node: no thread rule (torch's default), as torchrun leaves one process a node.
        check(all(x["LOCAL_WORLD_SIZE"] == "1" and x["OMP_NUM_THREADS"] is None and
                  x["TRAINSCOPE_THREADS_SOURCE"] == "none" for x in recs), f"{trial_dir(t)}: threads {recs}")
    print(f"slurm_two_nodes: {len(r['trials'])} trial(s) of 2 ranks on nodes {sorted(nodes)}, pick {r['recommended']}")


def main():
    ts, case, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ.pop("OMP_NUM_THREADS", None)  # each task's thread rule is the probe's (sitecustomize)
    os.makedirs(work, exist_ok=True)
    check(os.environ.get("SLURM_CONF"), "no SLURM_CONF: run through tests/slurm/slurm_runner_test.sh")
    try:
        import accelerate  # noqa: F401
    except ImportError:
        print("SKIP: accelerate is not installed in", PY, "(run scripts/setup)")
        sys.exit(77)
    {"slurm_kill9": case_slurm_kill9, "slurm_alloc": case_slurm_alloc,
     "slurm_two_nodes": case_slurm_two_nodes}[case](ts, work)
    print("PASS", case)


if __name__ == "__main__":
    main()
