#!/usr/bin/env python3
"""`trainscope tune` over external jobs: Accelerate's launcher, Slurm, and a study killed with -9.

    ext_runner_test.py TRAINSCOPE CASE WORKDIR

  accelerate_tune  --runner accelerate on 1-2 Gloo CPU ranks (torchrun around `accelerate launch` for
                   DDP, one free port per trial handed to both; accelerate launch alone for FSDP): DDP,
                   FSDP SHARD_GRAD_OP and FULL_SHARD (the probe's cpu_fsdp shim) exhaustively, every trial
                   ok, the pick the fastest measured, each rank ran the trial's own accelerate.yaml
                   (Accelerate's state and launch variables, recorded by the probe; FSDP's plugin built
                   from the file's fsdp_config, half the parameters per rank, DDP's losses)
  slurm            --runner hf --launcher slurm under the local Slurm of tests/slurm/local_slurm.sh
                   (SLURM_CONF set): each trial one srun step of the candidate's world size, its ranks'
                   torch.distributed variables Slurm's; an out-of-memory trial classified by its status
  slurm_hang       under the same Slurm, a trial whose job hangs (a loop waiting on a file nobody writes,
                   SIGTERM ignored) is killed by the trial timeout: it is classified hang, no task of its
                   srun step survives (the process table polled for the entry's marker argument, with a
                   bound), Slurm holds no job of the study, and the next trial runs
  kill9_resume     an HF tune killed with SIGKILL while a trial's ranks run (the study's second trial
                   row, its ranks' first step written), then resumed: the finished trials kept and not
                   run again, no process of the killed trial left, the study finished and the pick made
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_runner_test import (PROBE, PY, SCRIPT, check, exported, leftover, model_bytes, same_losses,  # noqa: E402
                            steps_of, trial_dir, tune)


def wait_for(what, cond, timeout=600, every=0.2):
    """Polls cond() until it is true (returns its value); fails naming `what` after `timeout` s."""
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(every)
    check(False, f"timed out after {timeout} s waiting for {what}")


def yaml_fields(path):
    """The top-level `key: value` lines of an exported accelerate.yaml."""
    out = {}
    for line in open(path):
        if line[:1] not in (" ", "\n") and ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip().strip("'")
    return out


def yaml_block(path, name):
    """The `key: value` lines of the nested mapping `name:` of an exported accelerate.yaml."""
    out, inside = {}, False
    for line in open(path):
        if not line.startswith(" "):
            inside = line.strip() == name + ":"
        elif inside and ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip().strip("'")
    return out


def fsdp_env_name(key):
    """The variable accelerate launch sets for an fsdp_config key (accelerate/utils/launch.py)."""
    name = key[len("fsdp_"):].upper()
    return "FSDP_" + ("TRANSFORMER_CLS_TO_WRAP" if name == "TRANSFORMER_LAYER_CLS_TO_WRAP" else name)


def fsdp_trial_checks(ts, study, t, d, world, full):
    """An FSDP trial of --runner accelerate on CPU ranks (the probe's cpu_fsdp shim): each rank's
    Accelerate state is FSDP with the plugin built from the launch's config file — every fsdp_config
    key of the trial's accelerate.yaml reached the rank as accelerate launch's FSDP_* variable, the
    plugin's state_dict_type is the file's (the Trainer's own default would be FULL_STATE_DICT), the
    Trainer was handed no fsdp fields — the module it stepped is FSDP's holding its shard, and the
    file is `trainscope export --format accelerate-config` of the candidate. Returns the strategy."""
    path = os.path.join(d, "accelerate.yaml")
    fsdp = yaml_block(path, "fsdp_config")
    ta = json.load(open(os.path.join(d, "training_args.json")))
    check("fsdp" not in ta and "fsdp_config" not in ta, f"{d}: the Trainer was handed FSDP fields: {ta}")
    held = 0
    for rank in range(world):
        ran = json.load(open(os.path.join(d, "probe", f"rank{rank}.accelerate.json")))
        env = ran["env"]
        for k, v in fsdp.items():
            check(str(env.get(fsdp_env_name(k))).lower() == v.lower(), f"{d} rank {rank}: {k} {v}, launch {env}")
        check(ran["distributed_type"] == "FSDP" and ran["fsdp_sharding_strategy"].endswith(fsdp["fsdp_sharding_strategy"])
              and ran["fsdp_plugin"]["state_dict_type"].endswith(fsdp["fsdp_state_dict_type"]),
              f"{d} rank {rank}: Accelerate's state {ran} (file {fsdp})")
        m = json.load(open(os.path.join(d, "probe", f"rank{rank}.model.json")))
        check(m["wrapper"].endswith("FullyShardedDataParallel") and m["param_bytes"] < 0.6 * full and
              m["sharding_strategy"].endswith(fsdp["fsdp_sharding_strategy"]),
              f"{d} rank {rank} stepped {m} (the model {full} bytes)")
        held += m["param_bytes"]
    check(held >= full, f"{d}: the ranks hold {held} bytes together, the model {full}")
    check(open(path).read() == exported(ts, study, t["candidate"], "accelerate-config"),
          f"{path} is not the candidate's export")
    return fsdp["fsdp_sharding_strategy"]


def case_accelerate_tune(ts, work):
    full = model_bytes("gpt2")
    study, r = tune(ts, work, "accelerate", ["--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "1,2",
                                             "--mbs", "2", "--ckpt", "none", "--zero", "0,2,3", "--exhaustive",
                                             "--trial-steps", "3", "--mem-limit", "3G", "--trial-timeout", "240",
                                             "--entry", SCRIPT + " --model gpt2 --seq 32"], runner="accelerate")
    trials = r["trials"]
    check(len(trials) >= 4 and all(t["status"] == "ok" for t in trials), f"trials {trials}")
    # FSDP runs on CPU ranks (the probe's cpu_fsdp shim): no ZeRO-2/3 candidate is refused for it.
    refused = [c for c in r["ranked"] if c["rejected"] and c.get("zero", 0) >= 2 and c["plan"].startswith("dp2 tp1 pp1")]
    check(not refused, f"FSDP refused on CPU ranks: {refused}")
    ports, kinds, two, strategies, losses = set(), set(), 0, set(), {}
    for t in trials:
        d = trial_dir(t)
        cfg = yaml_fields(os.path.join(d, "accelerate.yaml"))
        rows, meta, _ = steps_of(t["db"])
        world = int(meta["world_size"])
        check(int(cfg["num_processes"]) == world and len({row[0] for row in rows}) == world, f"{d}: {cfg} {rows}")
        for rank in range(world):
            ran = json.load(open(os.path.join(d, "probe", f"rank{rank}.accelerate.json")))
            env = ran["env"]
            # What accelerate launch read from the trial's file: the precision, the processes, and the
            # CPU (its own launch of a MULTI_CPU or one-process config) or FSDP's block (its launch of
            # an FSDP config through torch.distributed.run, checked in fsdp_trial_checks).
            check(env["ACCELERATE_MIXED_PRECISION"] == cfg["mixed_precision"], f"{d} rank {rank}: {ran} {cfg}")
            if cfg["distributed_type"] == "FSDP":
                check(env["ACCELERATE_USE_FSDP"] == "true", f"{d} rank {rank}: {ran}")
            else:
                check(env["ACCELERATE_USE_CPU"] == "True" and cfg["use_cpu"] == "true", f"{d} rank {rank}: {ran} {cfg}")
                check(ran["distributed_type"] == ("MULTI_CPU" if world > 1 else ran["distributed_type"]) and
                      ran["fsdp_sharding_strategy"] is None, f"{d} rank {rank}: Accelerate's state {ran}")
            check(ran["num_processes"] == world, f"{d} rank {rank}: {ran}")
            if world > 1:
                two += rank == 0
                ports.add(env["MASTER_PORT"])
        if world > 1:
            kinds.add(cfg["distributed_type"])
            layout = "ddp"
            if cfg["distributed_type"] == "FSDP":
                layout = fsdp_trial_checks(ts, study, t, d, world, full)
                strategies.add(layout)
            folder = os.path.join(d, "probe")
            losses[layout] = {rank: [json.loads(x)["loss"] for x in open(os.path.join(folder, f"rank{rank}.steps.jsonl"))]
                              for rank in range(world)}
    check(kinds == {"MULTI_CPU", "FSDP"} and strategies == {"SHARD_GRAD_OP", "FULL_SHARD"},
          f"layouts measured on 2 ranks: {kinds} {strategies}")
    for layout in strategies:  # the same global batch: DDP's losses, per rank and step (fp32)
        worst = same_losses(f"accelerate 2 ranks {layout}", losses[layout], losses["ddp"])
        print(f"accelerate {layout}: FSDP on both ranks, losses within {worst:.1e} of DDP's")
    check("29500" not in ports and len(ports) == two,
          f"each 2-rank trial its own port: {ports}")
    measured = {c["id"]: c["measured_step_s"] for c in r["ranked"] if c.get("measured_step_s")}
    best = min(measured, key=measured.get)
    check(r["recommended"] == best, f"recommended {r['recommended']}, fastest measured {best}: {measured}")
    print(f"accelerate_tune: {len(trials)} trials ok, {sorted(kinds)} on 2 ranks, pick {r['recommended']} "
          f"{measured[best] * 1e3:.1f} ms/step; measured " +
          ", ".join(f"{k}: {v * 1e3:.1f} ms" for k, v in sorted(measured.items())))


def case_slurm(ts, work):
    check(os.environ.get("SLURM_CONF"), "no SLURM_CONF: run through tests/slurm/slurm_runner_test.sh")
    space = ["--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "1,2", "--mbs", "1,2", "--ckpt", "none",
             "--zero", "0", "--mem-limit", "3G"]
    probe = subprocess.run([ts, "tune", "--runner", "hf", "--entry", SCRIPT, "--predict-only", "--json", "--cluster",
                            "cpu-local", "--study", os.path.join(work, "slurm-ids.db")] + space,
                           capture_output=True, text=True, timeout=120)
    check(probe.returncode == 0, f"predict-only: {probe.stderr}")
    ids = [c["id"] for c in json.loads(probe.stdout.strip().splitlines()[-1])["ranked"] if not c["rejected"]]
    oom = ids[-1]
    study, r = tune(ts, work, "slurm", space + ["--exhaustive", "--trial-steps", "3", "--launcher", "slurm",
                                                "--trial-timeout", "240", "--inject", f"{oom}:oom",
                                                "--entry", SCRIPT + " --model gpt2 --seq 32"])
    by = {t["candidate"]: t for t in r["trials"]}
    check(by[oom]["status"] == "oom", f"the injected out-of-memory trial: {by[oom]}")
    ok = [t for t in r["trials"] if t["candidate"] != oom]
    check(ok and all(t["status"] == "ok" for t in ok), f"trials {r['trials']}")
    worlds = set()
    for t in ok:
        rows, meta, _ = steps_of(t["db"])
        world = int(meta["world_size"])
        worlds.add(world)
        jobs = set()
        for rank in range(world):
            rec = json.load(open(os.path.join(trial_dir(t), "probe", f"rank{rank}.launch.json")))
            check(rec["launcher"] == "slurm" and rec["RANK"] == str(rank) and rec["WORLD_SIZE"] == str(world) and
                  rec["SLURM_JOB_ID"], f"{trial_dir(t)} rank {rank}: {rec}")
            jobs.add(rec["SLURM_JOB_ID"])
        check(len(jobs) == 1 and len({row[0] for row in rows}) == world, f"{t['db']}: one step, {world} ranks: {jobs}")
    check(worlds == {1, 2}, f"worlds run under srun: {worlds}")
    check(r["recommended"] != oom, f"recommended the failed candidate {oom}")
    print(f"slurm: {len(ok)} trials as srun steps (worlds {sorted(worlds)}), oom classified, pick {r['recommended']}")


# The job of slurm_hang: examples/hf_trainer.py, except that the candidate of micro-batch 2 hangs as a
# job stuck in a collective does, deaf to SIGTERM. argv[1] is the test's marker (in every task's argv).
HANG_JOB = """import json, os, runpy, signal, sys, time
args = json.load(open(os.environ["TRAINSCOPE_TRAINING_ARGS"]))
if args["per_device_train_batch_size"] == 2:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    never = os.path.join(os.environ["TRAINSCOPE_PROBE_DIR"], "never-written")
    while not os.path.exists(never):
        time.sleep(0.2)
sys.argv = [%r] + sys.argv[2:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def with_marker(marker):
    """Pids whose command line has `marker` as an argument."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def case_slurm_hang(ts, work):
    check(os.environ.get("SLURM_CONF"), "no SLURM_CONF: run through tests/slurm/slurm_runner_test.sh")
    job = os.path.join(work, "hang_job.py")
    with open(job, "w") as f:
        f.write(HANG_JOB % SCRIPT)
    marker = f"ts-hang-marker-{os.getpid()}-{int(time.time())}"
    study, r = tune(ts, work, "slurm-hang", ["--workload", "tiny", "--gbs", "8", "--seq", "32", "--ranks", "2",
                                             "--mbs", "1,2,4", "--ckpt", "none", "--zero", "0", "--mem-limit", "3G",
                                             "--exhaustive", "--trial-steps", "3", "--launcher", "slurm",
                                             "--trial-timeout", "90",
                                             "--entry", f"{job} {marker} --model gpt2 --seq 32"])
    by_mbs = {}
    for t in r["trials"]:
        cfg = json.load(open(os.path.join(trial_dir(t), "training_args.json")))
        by_mbs.setdefault(cfg["per_device_train_batch_size"], []).append(t)
    check(set(by_mbs) == {1, 2, 4}, f"trials by micro-batch: {sorted(by_mbs)}")
    hung = by_mbs[2]
    check(all(t["status"] == "hang" and "scancel" not in t.get("message", "") for t in hung),
          f"the hung trial: {hung}")
    ok = by_mbs[1] + by_mbs[4]
    check(all(t["status"] == "ok" for t in ok), f"the trials beside the hung one (the study goes on): {ok}")
    check(r["recommended"] is not None and all(r["recommended"] != t["candidate"] for t in hung),
          f"pick {r['recommended']}")
    # No task of the hung step survives it, and Slurm holds no job of the study (bounded polls).
    deadline = time.time() + 60
    while with_marker(marker) and time.time() < deadline:
        time.sleep(0.2)
    left = with_marker(marker)
    check(not left, f"tasks of the hung trial survive it: pids {left}")

    def study_jobs():
        q = subprocess.run(["squeue", "--noheader", "--format=%j"], capture_output=True, text=True, timeout=60)
        check(q.returncode == 0, f"squeue: {q.stderr}")
        return [n for n in q.stdout.split() if n.startswith("trainscope-study-")]
    while study_jobs() and time.time() < deadline:
        time.sleep(0.2)
    check(not study_jobs(), f"Slurm still holds the study's jobs: {study_jobs()}")
    print(f"slurm_hang: {len(hung)} hung trial(s) classified hang, {len(ok)} ok, no task or job left, "
          f"pick {r['recommended']}")


def study_rows(study):
    try:
        con = sqlite3.connect(f"file:{study}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT rowid, candidate, round, status, step_s, db_path FROM trials ORDER BY rowid"
                               ).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []


def resume_kept(ts, args, study, finished, mtimes, killed, candidates, timeout):
    """`tune --resume` of a study killed in trial `killed` (its row): every finished trial kept as it
    was (row and database untouched), the killed one run again once into its own paths (.2.db), all
    `candidates` ok, the pick the fastest measured. Returns (the resumed JSON, the rows after)."""
    p = subprocess.run([ts, "tune", "--resume"] + args, capture_output=True, text=True, timeout=timeout)
    check(p.returncode == 0, f"resumed tune exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    after = study_rows(study)
    for key, row in finished.items():
        again = [a for a in after if (a[1], a[2]) == key]
        check(again == [row], f"finished trial {key} was touched or run again: {row} -> {again}")
        check(os.path.getmtime(row[5]) == mtimes[key], f"{row[5]} was rewritten")
    redone = [a for a in after if a[5].endswith(".2.db")]
    check(len(redone) == 1 and redone[0][3] == "ok" and (redone[0][1], redone[0][2]) == (killed[1], killed[2]),
          f"the killed trial is run again once, into its own paths: {after}")
    check(len({a[1] for a in after}) == candidates and all(a[3] == "ok" for a in after),
          f"the study finished its {candidates} candidates: {after}")
    measured = {c["id"]: c["measured_step_s"] for c in r["ranked"] if c.get("measured_step_s")}
    check(r["recommended"] == min(measured, key=measured.get), f"pick {r['recommended']} of {measured}")
    return r, after


def case_kill9_resume(ts, work):
    study = os.path.join(work, "kill9.db")
    subprocess.run(["rm", "-rf", study, study + "-wal", study + "-shm", study + ".lock", study + ".trials"], check=True)
    args = ["--runner", "hf", "--python", PY, "--probe", PROBE, "--cluster", "cpu-local", "--study", study, "--json",
            "--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "1", "--mbs", "1,2", "--ckpt", "none,full",
            "--exhaustive", "--trial-steps", "6", "--mem-limit", "3G", "--entry", SCRIPT + " --model gpt2 --seq 32"]
    tuner = subprocess.Popen([ts, "tune"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        # The second trial's ranks are running: its row says so and its rank 0 has written a step.
        def second_running():
            rows = study_rows(study)
            if len(rows) >= 2 and rows[1][3] == "running" and rows[0][3] == "ok":
                steps = os.path.join(rows[1][5][: -len(".db")] + ".job", "probe", "rank0.steps.jsonl")
                if os.path.exists(steps) and os.path.getsize(steps) > 0:
                    return rows
            check(tuner.poll() is None, f"tune ended before it was killed: {tuner.returncode}")
            return None
        before = wait_for("the second trial's first step", second_running)
        killed_dir = before[1][5][: -len(".db")] + ".job"
        check(leftover(killed_dir), f"no process of the running trial {killed_dir} before the kill")
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait(timeout=60)
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
    check(tuner.returncode == -signal.SIGKILL, f"tune's status {tuner.returncode}")
    # The killed trial's ranks go with it (the launcher dies with the tuner, its ranks with the launcher).
    wait_for(f"the killed trial's processes to end ({killed_dir})", lambda: not leftover(killed_dir), timeout=60)
    finished = {(r[1], r[2]): r for r in study_rows(study) if r[3] == "ok"}
    check(finished, f"no finished trial before the kill: {study_rows(study)}")
    mtimes = {k: os.path.getmtime(r[5]) for k, r in finished.items()}
    r, after = resume_kept(ts, args, study, finished, mtimes, before[1], 4, 900)
    print(f"kill9_resume: killed in trial {before[1][1]}-r{before[1][2]}; {len(finished)} finished trial(s) kept, "
          f"{len(after)} rows after the resume, pick {r['recommended']}")


def main():
    ts, case, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    try:
        import accelerate  # noqa: F401
    except ImportError:
        print("SKIP: accelerate is not installed in", PY, "(run scripts/setup)")
        sys.exit(77)
    {"accelerate_tune": case_accelerate_tune, "slurm": case_slurm, "slurm_hang": case_slurm_hang,
     "kill9_resume": case_kill9_resume}[case](ts, work)
    print("PASS", case)


if __name__ == "__main__":
    main()
