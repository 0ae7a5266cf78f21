#!/usr/bin/env python3
"""`trainscope tune --runner hf` with real jobs (docs/tuner.md, "Tuning your own job").

    hf_runner_test.py TRAINSCOPE CASE WORKDIR

Each case runs examples/hf_trainer.py (a plain Transformers Trainer script, synthetic tokens, no
download) under torchrun on Gloo CPU ranks, measured by python/trainscope_probe:
  probe        the probe alone in a plain loop: its rows, an out-of-memory exit under the limit (3)
               with its record, a crash's fault record
  tune_gpt2    tiny GPT-2 on 1-2 ranks, DDP and FSDP SHARD_GRAD_OP / FULL_SHARD (2 ranks) x micro-batch
               x accumulation x gradient checkpointing, exhaustively; every trial's run database has the
               probe's steps, each rank stepped the wrapper its layout names (FSDP holding its shard),
               FSDP's losses are DDP's at the same batch; the pick is the fastest measured; the winner's
               trial ran the exports `trainscope export` gives for it
  cpu_fsdp     FSDP 1 FULL_SHARD / SHARD_GRAD_OP and FSDP 2 FULL_SHARD on 2 Gloo ranks through the
               probe's cpu_fsdp shim (Accelerate alone runs DDP there): FSDP in Accelerate's state and
               the stepped module, half the parameter bytes per rank, DDP's losses within LOSS_RTOL
  tune_llama   the tiny Llama on one rank: micro-batch x accumulation x gradient checkpointing, a
               profile trial's Kineto trace imported into its database and opened in the viewer; on 2 ranks (micro-batch 2, no
               checkpointing): DDP and FSDP SHARD_GRAD_OP / FULL_SHARD, checked as tune_gpt2's trials are
  failures     one trial each out of memory under --mem-limit, crashed, hung (killed by the trial
               timeout, no process left behind), a bad script path: each classified, the tune goes on;
               a job that returned and then aborted in its interpreter's teardown is measured (ok),
               the death named in the trial's message
The DeepSpeed cases (runner.hf_deepspeed, runner.hf_ds_llama_exports) are hf_deepspeed_test.py's; the
helpers here (tune, steps_of, check_threads, exported, …) are shared by the runner tests beside it.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROBE = os.path.join(REPO, "python")
SCRIPT = os.path.join(REPO, "examples", "hf_trainer.py")
PY = sys.executable


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def tune(ts, work, name, args, timeout=900, runner="hf", env=None):
    study = os.path.join(work, name + ".db")
    for p in (study, study + ".lock"):
        if os.path.exists(p):
            os.remove(p)
    if os.path.isdir(study + ".trials"):
        subprocess.run(["rm", "-rf", study + ".trials"], check=True)
    cmd = [ts, "tune", "--runner", runner, "--python", PY, "--probe", PROBE, "--cluster", "cpu-local",
           "--study", study, "--json"] + args
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        fail(f"tune exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return study, json.loads(p.stdout.strip().splitlines()[-1])


def trial_dir(trial):
    return trial["db"][: -len(".db")] + ".job"


def check_threads(trial, world, omp, threads, source):
    """Each rank's intra-op threads as its probe recorded them (rankR.threads.json) and as the trial's
    database keeps them (meta `threads`): OMP_NUM_THREADS `omp`, torch's `threads` (None: its default),
    set by `source`."""
    meta = steps_of(trial["db"])[1]
    kept = json.loads(meta.get("threads", "[]"))
    check(len(kept) == world, f"{trial['db']}: threads meta {kept} for {world} ranks")
    for rank in range(world):
        rec = json.load(open(os.path.join(trial_dir(trial), "probe", f"rank{rank}.threads.json")))
        want = {"rank": rank, "OMP_NUM_THREADS": omp, "source": source,
                "torch_threads": rec.get("torch_threads") if threads is None else threads}
        check(rec == want and kept[rank] == want, f"{trial_dir(trial)}: rank {rank} got {rec} (kept {kept[rank]}), not {want}")


def steps_of(db):
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT rank, step, tokens, step_time_ns, peak_bytes FROM steps ORDER BY rank, step").fetchall()
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        host_ops = con.execute("SELECT COUNT(*) FROM host_ops").fetchone()[0]
    finally:
        con.close()
    return rows, meta, host_ops


def case_probe(ts, work):
    folder = os.path.join(work, "probe-rows")
    for suffix in ("", "-oom", "-oom2", "-crash", "-ddp"):  # this case's own folders, from an earlier run
        shutil.rmtree(folder + suffix, ignore_errors=True)
    loop = ("import torch, trainscope_probe as probe\n"
            "w = torch.nn.Linear(64, 64)\n"
            "for i in range(4):\n"
            "    with probe.step(tokens=32) as s:\n"
            "        loss = w(torch.randn(32, 64)).square().mean(); loss.backward(); s.loss = loss.item()\n")
    env = dict(os.environ, PYTHONPATH=PROBE, TRAINSCOPE_PROBE_DIR=folder, WORLD_SIZE="2", RANK="1")
    p = subprocess.run([PY, "-c", loop], env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"plain loop: {p.returncode} {p.stderr[-2000:]}")
    rows = [json.loads(x) for x in open(os.path.join(folder, "rank1.steps.jsonl"))]
    check([r["step"] for r in rows] == [0, 1, 2, 3], f"steps {rows}")
    check(all(r["tokens"] == 64 and r["rank"] == 1 and r["peak_bytes"] > 0 and r["step_time_ns"] > 0 and
              r["loss"] is not None for r in rows), f"rows {rows}")
    # Out of memory under the limit: exit 3, and the rank's record says so.
    env = dict(os.environ, PYTHONPATH=PROBE, TRAINSCOPE_PROBE_DIR=folder + "-oom", TRAINSCOPE_MEM_LIMIT=str(1 << 30),
               TRAINSCOPE_PROBE_INJECT="oom")
    p = subprocess.run([PY, "-c", loop], env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode == 3, f"oom exit {p.returncode} {p.stderr[-2000:]}")
    rec = json.load(open(os.path.join(folder + "-oom", "rank0.exit.json")))
    check(rec["class"] == "oom" and "--mem-limit" in rec["error"], f"oom record {rec}")
    # A torch.OutOfMemoryError raised by the job itself ends the same way.
    env = dict(os.environ, PYTHONPATH=PROBE, TRAINSCOPE_PROBE_DIR=folder + "-oom2")
    p = subprocess.run([PY, "-c", "import torch, trainscope_probe as probe\nwith probe.step():\n"
                        "    raise torch.OutOfMemoryError('CUDA out of memory (test)')\n"],
                       env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode == 3, f"torch.OutOfMemoryError exit {p.returncode} {p.stderr[-2000:]}")
    # A fatal signal: faulthandler's record.
    env = dict(os.environ, PYTHONPATH=PROBE, TRAINSCOPE_PROBE_DIR=folder + "-crash", TRAINSCOPE_PROBE_INJECT="crash")
    p = subprocess.run([PY, "-c", loop], env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode < 0 or p.returncode > 128, f"crash exit {p.returncode}")
    check(os.path.getsize(os.path.join(folder + "-crash", "rank0.fault")) > 0, "no fault record")
    # A profile trial's trace of a 2-rank DDP loop on Gloo: its collectives (the gloo:<op> annotations,
    # sized by their inputs' shapes) carry their bytes, and each rank's k-th call is the same call.
    # Before, the probe traced without record_shapes and every imported collective had 0 bytes.
    ddp = ("import torch, torch.distributed as dist, trainscope_probe as probe\n"
           "dist.init_process_group('gloo')\n"
           "m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))\n"
           "for i in range(4):\n"
           "    with probe.step(tokens=32) as s:\n"
           "        loss = m(torch.randn(32, 64)).square().mean(); loss.backward(); s.loss = loss.item()\n"
           "dist.destroy_process_group()\n")
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    traced = folder + "-ddp"
    procs = [subprocess.Popen([PY, "-c", ddp], env=dict(os.environ, PYTHONPATH=PROBE, TRAINSCOPE_PROBE_DIR=traced,
                                                          TRAINSCOPE_PROBE_PROFILE_STEPS="2", WORLD_SIZE="2",
                                                          RANK=str(r), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                                                          OMP_NUM_THREADS="1"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    check(all(p.returncode == 0 for p in procs), f"2-rank DDP loop: {[p.returncode for p in procs]} {outs}")
    db = os.path.join(traced, "trace.db")
    p = subprocess.run([ts, "import", os.path.join(traced, "rank0.trace.json"), os.path.join(traced, "rank1.trace.json"),
                        "-o", db], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"import: {p.stderr}")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    calls = [con.execute("SELECT op, bytes FROM collectives WHERE rank = ? ORDER BY seq", (r,)).fetchall() for r in (0, 1)]
    con.close()
    check(calls[0] and all(b > 0 for _, b in calls[0] + calls[1]), f"collectives without bytes: {calls}")
    check(calls[0] == calls[1], f"the ranks' calls differ in order: {calls}")


def exported(ts, study, candidate, fmt):
    p = subprocess.run([ts, "export", study, "--format", fmt, "--trial", str(candidate)],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"export {fmt}: {p.stderr}")
    return p.stdout


def model_bytes(model):
    """The parameter bytes of examples/hf_trainer.py's whole `model` (gpt2 | llama), as one DDP rank holds them."""
    sys.path.insert(0, os.path.dirname(SCRIPT))
    from tiny_models import model_of
    return sum(t.numel() * t.element_size() for t in model_of(model).parameters())


def layout_of(training_args):
    """A trial's data-parallel layout from its TrainingArguments: "ddp", or FSDP's reshard_after_forward
    ("full_shard", "shard_grad_op")."""
    ta = training_args
    return "ddp" if not ta.get("fsdp") else ta["fsdp_config"]["reshard_after_forward"]


def layouts_measured(trials, full, mbs_choices):
    """Each trial's run database and probe records (gbs 4, seq 32): the probe's steps on every rank, and
    the module each rank stepped and its intra-op threads — DDP holding the whole model (at 1 rank too: torchrun's LOCAL_RANK makes
    Accelerate's state MULTI_CPU), or FSDP in Accelerate's state holding its shard (under 0.6 of the
    model's `full` parameter bytes). Returns the set of (ranks, layout, micro-batch, checkpointing)
    measured and each one's per-rank losses per step."""
    seen, runs = set(), {}
    for t in trials:
        rows, meta, _ = steps_of(t["db"])
        check(meta.get("source") == "probe", f"{t['db']}: source {meta.get('source')}")
        ta = json.load(open(os.path.join(trial_dir(t), "training_args.json")))
        world = int(meta["world_size"])
        check(len({row[0] for row in rows}) == world, f"{t['db']}: ranks {rows}")
        check(all(row[2] == 4 * 32 for row in rows), f"{t['db']}: tokens per step {rows}")
        mbs = ta["per_device_train_batch_size"]
        check(mbs in mbs_choices and ta["gradient_accumulation_steps"] == 4 // (mbs * world), f"training args {ta}")
        layout = layout_of(ta)
        seen.add((world, layout, mbs, ta["gradient_checkpointing"]))
        for rank in range(world):
            m = json.load(open(os.path.join(trial_dir(t), "probe", f"rank{rank}.model.json")))
            state = json.load(open(os.path.join(trial_dir(t), "probe", f"rank{rank}.accelerate.json")))
            if layout == "ddp":
                check(m["wrapper"].endswith("DistributedDataParallel") and m["param_bytes"] == full,
                      f"{t['db']}: rank {rank} stepped {m}")
            else:
                # The wrapper shards by the candidate's strategy (Accelerate's plugin would say FULL_SHARD
                # for SHARD_GRAD_OP without the trial's FSDP_SHARDING_STRATEGY: job.cpp).
                check(state["distributed_type"] == "FSDP" and m["wrapper"].endswith("FullyShardedDataParallel")
                      and m["param_bytes"] < 0.6 * full and m["sharding_strategy"].endswith(layout.upper()),
                      f"{t['db']}: {layout} rank {rank}: {state} {m}")
        check(t["step_s"] > 0 and t["peak_bytes"] > 0, f"figures {t}")
        # torchrun gives each of 2 ranks a node one intra-op thread; one rank keeps torch's default.
        if world > 1:
            check_threads(t, world, "1", 1, "torchrun")
        else:
            check_threads(t, world, None, None, "none")
        folder = os.path.join(trial_dir(t), "probe")
        runs[(world, layout, mbs, ta["gradient_checkpointing"])] = {
            rank: [json.loads(x)["loss"] for x in open(os.path.join(folder, f"rank{rank}.steps.jsonl"))]
            for rank in range(world)}
    return seen, runs


def same_as_ddp(runs):
    """The same global batch gives the same losses under DDP and either FSDP (fp32, LOSS_RTOL)."""
    for (world, layout, mbs, ckpt), losses in runs.items():
        if layout != "ddp":
            same_losses(f"{world} ranks {layout} mbs {mbs} ckpt {ckpt}", losses, runs[(world, "ddp", mbs, ckpt)])


def fastest_measured(r):
    """The pick is the fastest measured candidate. Returns (measured step seconds by candidate, pick)."""
    measured = {c["id"]: c["measured_step_s"] for c in r["ranked"] if c.get("measured_step_s")}
    best = min(measured, key=measured.get)
    check(r["recommended"] == best, f"recommended {r['recommended']}, fastest measured {best}: {measured}")
    return measured, best


def case_tune_gpt2(ts, work):
    full = model_bytes("gpt2")
    study, r = tune(ts, work, "hf-gpt2", ["--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "1,2",
                                          "--mbs", "1,2", "--ckpt", "none,full", "--zero", "0,2,3", "--exhaustive",
                                          "--trial-steps", "4", "--mem-limit", "3G",
                                          "--entry", SCRIPT + " --model gpt2 --seq 32"])
    trials = r["trials"]
    check(len(trials) >= 12, f"{len(trials)} trials: {trials}")
    # FSDP runs on Gloo CPU ranks (the probe's cpu_fsdp shim): no ZeRO-2/3 candidate is refused for it.
    refused = [c for c in r["ranked"] if c["rejected"] and "FSDP only on GPUs" in c["rejected"]]
    check(not refused, f"FSDP refused on CPU: {refused}")
    bad = [t for t in trials if t["status"] != "ok"]
    check(not bad, f"trials failed: {bad}")
    seen, runs = layouts_measured(trials, full, (1, 2))
    layouts = {(w, l) for w, l, _, _ in seen}
    check(layouts == {(1, "ddp"), (2, "ddp"), (2, "shard_grad_op"), (2, "full_shard")}, f"layouts measured: {sorted(seen)}")
    check({(m, c) for _, _, m, c in seen} == {(1, False), (1, True), (2, False), (2, True)}, f"measured {sorted(seen)}")
    same_as_ddp(runs)
    measured, best = fastest_measured(r)
    # The winner's exports are the configuration its trials ran.
    win = [t for t in trials if t["candidate"] == r["recommended"]][-1]
    ran = json.load(open(os.path.join(trial_dir(win), "training_args.json")))
    out = json.loads(exported(ts, study, r["recommended"], "training-args"))
    for k in ("per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing", "fsdp",
              "fsdp_config", "optim", "learning_rate", "use_cpu"):
        check(ran.get(k) == out.get(k), f"export {k}: trial ran {ran.get(k)}, export says {out.get(k)}")
    # export prints the prediction for the target's framework on this CPU cluster beside this runtime's,
    # named by the winner's layout (whichever measured fastest: DDP on a quiet machine, FSDP on a busy one).
    layout = layout_of(ran)
    framework = {"full_shard": "Hugging Face Trainer (FSDP FULL_SHARD)",
                 "shard_grad_op": "Hugging Face Trainer (FSDP SHARD_GRAD_OP)"}.get(layout, "Hugging Face Trainer/Accelerate (DDP)")
    p = subprocess.run([ts, "export", study, "--format", "training-args", "--trial", str(r["recommended"])],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and f"note: predicted on cpu-local: {framework} " in p.stderr
          and "this runtime " in p.stderr, f"export's prediction note (winner's layout {layout}): {p.stderr}")
    print([line for line in p.stderr.splitlines() if "predicted on" in line][0])
    print(f"tune_gpt2: {len(trials)} trials, layouts {sorted(layouts)}, pick {r['recommended']} "
          f"{measured[r['recommended']] * 1e3:.1f} ms/step")


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


# The equivalence bound: FSDP's and DDP's per-rank losses, step by step, in fp32 (relative). The two
# reduce the same gradients in another order (reduce-scatter of flat shards against DDP's buckets),
# so they differ in the last bits; measured 2026-12-07 (4 steps, tiny GPT-2): see docs/tuner.md.
LOSS_RTOL = 1e-5


def run_direct(work, name, fsdp_config, shim=True):
    """examples/hf_trainer.py on 2 Gloo ranks as a trial runs it (torchrun, the probe's sitecustomize,
    the candidate's TrainingArguments): 4 steps of micro-batch 2. Returns (per-rank losses per step,
    per-rank probe records)."""
    folder = os.path.join(work, name)
    subprocess.run(["rm", "-rf", folder], check=True)
    os.makedirs(folder)
    ta = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "use_cpu": True, "max_steps": 4,
          "learning_rate": 1e-3}
    if fsdp_config:
        ta.update(fsdp=True, fsdp_config=fsdp_config)
    with open(os.path.join(folder, "training_args.json"), "w") as f:
        json.dump(ta, f)
    env = dict(os.environ, PYTHONPATH=os.path.join(PROBE, "trainscope_probe", "site") + ":" + PROBE,
               TRAINSCOPE_PROBE_DIR=os.path.join(folder, "probe"), TRAINSCOPE_OUTPUT_DIR=os.path.join(folder, "out"),
               TRAINSCOPE_TRAINING_ARGS=os.path.join(folder, "training_args.json"), OMP_NUM_THREADS="1",
               TRAINSCOPE_PROBE_CPU_FSDP="1" if shim else "0")
    if fsdp_config and fsdp_config.get("version") == 1:  # as a trial's (job.cpp): Accelerate's FSDP 1 plugin reads it
        env["FSDP_SHARDING_STRATEGY"] = fsdp_config["reshard_after_forward"].upper()
    cmd = [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           SCRIPT, "--model", "gpt2", "--seq", "32", "--steps", "4"]
    p = subprocess.run(cmd, env=env, cwd=folder, capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"{name} on 2 CPU ranks exited {p.returncode}: {p.stderr[-3000:]}")
    losses, records = {}, {}
    for rank in (0, 1):
        d = os.path.join(folder, "probe")
        losses[rank] = [json.loads(x)["loss"] for x in open(os.path.join(d, f"rank{rank}.steps.jsonl"))]
        records[rank] = (json.load(open(os.path.join(d, f"rank{rank}.accelerate.json"))),
                         json.load(open(os.path.join(d, f"rank{rank}.model.json"))))
    return losses, records


def same_losses(name, got, want, rtol=LOSS_RTOL):
    worst = 0.0
    for rank in want:
        check(len(got[rank]) == len(want[rank]) > 0, f"{name}: rank {rank} steps {got[rank]} / {want[rank]}")
        for a, b in zip(got[rank], want[rank]):
            worst = max(worst, abs(a - b) / abs(b))
    check(worst <= rtol, f"{name}: losses {got} differ from DDP's {want} by {worst:.2e} (relative; bound {rtol:g})")
    return worst


def case_cpu_fsdp(ts, work):
    """FSDP through the Trainer on 2 Gloo CPU ranks, as a --runner hf trial runs it (the probe's
    cpu_fsdp shim lifts Accelerate's accelerator-only FSDP gate): the exported FULL_SHARD and
    SHARD_GRAD_OP (FSDP 1), and FULL_SHARD as FSDP 2 (fully_shard), each (a) is FSDP in Accelerate's
    state and in the module the Trainer steps, (b) holds about half the model's parameter bytes per
    rank (FULL_SHARD; SHARD_GRAD_OP's are sharded between steps too), and (c) gives DDP's losses, per
    rank and step, within LOSS_RTOL (fp32, the same global batch). Without the shim the FULL_SHARD run
    is DDP (Accelerate's MULTI_CPU), so (a) and (b) fail on the code before it."""
    import torch
    import transformers
    full = model_bytes("gpt2")
    versions = f"accelerate {__import__('accelerate').__version__}, transformers {transformers.__version__}, torch {torch.__version__}"
    ddp, recs = run_direct(work, "cpu-ddp", None)
    for rank, (state, model) in recs.items():
        check(state["distributed_type"] == "MULTI_CPU" and model["wrapper"].endswith("DistributedDataParallel")
              and model["param_bytes"] == full, f"DDP rank {rank}: {state} {model}")

    def fsdp1(strategy):
        return {"version": 1, "reshard_after_forward": strategy, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "transformer_layer_cls_to_wrap": ["GPT2Block"], "use_orig_params": True, "sync_module_states": False}

    cases = [("fsdp1-full", fsdp1("full_shard"), "FullyShardedDataParallel"),
             ("fsdp1-grad", fsdp1("shard_grad_op"), "FullyShardedDataParallel"),
             ("fsdp2-full", dict(fsdp1(True), version=2), "FSDPGPT2LMHeadModel")]
    for name, config, wrapper in cases:
        losses, recs = run_direct(work, "cpu-" + name, config)
        held = 0
        for rank, (state, model) in recs.items():
            check(state["distributed_type"] == "FSDP" and state["fsdp_sharding_strategy"] is not None,
                  f"{name} rank {rank}: Accelerate's state {state} ({versions})")
            check(model["wrapper"].endswith(wrapper), f"{name} rank {rank} stepped {model}")
            if config["version"] == 1:  # the strategy the wrapper shards by is the candidate's
                check(model["sharding_strategy"].endswith(config["reshard_after_forward"].upper()),
                      f"{name} rank {rank} shards by {model.get('sharding_strategy')}")
            check(model["param_bytes"] < 0.6 * full, f"{name} rank {rank} holds {model['param_bytes']} of {full} bytes")
            held += model["param_bytes"]
        check(held >= full, f"{name}: the ranks hold {held} bytes together, the model {full}")
        worst = same_losses(name, losses, ddp)
        print(f"{name}: FSDP on both ranks, {[r[1]['param_bytes'] for r in recs.values()]} of {full} parameter "
              f"bytes; losses within {worst:.1e} of DDP's ({versions})")


def case_tune_llama(ts, work):
    study, r = tune(ts, work, "hf-llama", ["--workload", "tiny-llama", "--gbs", "4", "--seq", "32", "--ranks", "1",
                                           "--mbs", "1,2", "--ckpt", "none,full", "--exhaustive",
                                           "--trial-steps", "4", "--mem-limit", "3G",
                                           "--entry", SCRIPT + " --model llama --seq 32"])
    trials = r["trials"]
    check(len(trials) >= 4 and all(t["status"] == "ok" for t in trials), f"trials {trials}")
    combos = set()
    for t in trials:
        ta = json.load(open(os.path.join(trial_dir(t), "training_args.json")))
        combos.add((ta["per_device_train_batch_size"], ta["gradient_accumulation_steps"], ta["gradient_checkpointing"]))
    check(combos == {(1, 4, False), (1, 4, True), (2, 2, False), (2, 2, True)}, f"combinations {combos}")
    profiled = [t for t in trials if t["profile"]]
    check(profiled, "no profile trial")
    rows, meta, host_ops = steps_of(profiled[0]["db"])
    check(host_ops > 0, f"{profiled[0]['db']}: the trace was not imported")
    check(len(rows) == profiled[0]["steps"] and len(rows) > 2,
          f"{profiled[0]['db']}: the probe's {profiled[0]['steps']} steps replace the trace's 2: {rows}")
    p = subprocess.run([ts, "report", profiled[0]["db"]], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"report on an external trial: {p.stderr}")
    # ... and opens in the viewer (headless, an Xvfb of its own): the probe's steps and the trace's host
    # ops drawn on the rank's rows (the viewer's --layout record of what it drew).
    viewer = os.path.join(os.path.dirname(ts), "trainscope-viewer")
    png, drawn = os.path.join(work, "hf-llama-trial.png"), os.path.join(work, "hf-llama-trial.json")
    for f in (png, drawn):
        if os.path.exists(f):
            os.remove(f)
    p = subprocess.run(["xvfb-run", "-a", viewer, profiled[0]["db"], "--size", "1200x800", "--frames", "2",
                        "--screenshot", png, "--layout", drawn], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and os.path.getsize(png) > 0, f"viewer on an external trial: rc {p.returncode} {p.stderr}")
    kinds = {b["kind"] for b in json.load(open(drawn))["boxes"]}
    check({"step", "op"} <= kinds or {"step", "range"} <= kinds, f"the viewer drew {sorted(kinds)} of the external trial")
    print(f"tune_llama: 1 rank, {len(trials)} trials, pick {r['recommended']}")
    # On 2 Gloo ranks: DDP and FSDP SHARD_GRAD_OP / FULL_SHARD (the probe's cpu_fsdp shim), one micro-batch
    # without checkpointing (the 1-rank study above covers those axes) — each rank stepped the wrapper its
    # layout names, an FSDP rank holding its shard; FSDP's losses are DDP's; the pick is the fastest measured.
    full = model_bytes("llama")
    study, r = tune(ts, work, "hf-llama-2r", ["--workload", "tiny-llama", "--gbs", "4", "--seq", "32", "--ranks", "2",
                                              "--mbs", "2", "--ckpt", "none", "--zero", "0,2,3", "--exhaustive",
                                              "--trial-steps", "4", "--mem-limit", "3G",
                                              "--entry", SCRIPT + " --model llama --seq 32"])
    trials = r["trials"]
    check(all(t["status"] == "ok" for t in trials), f"trials failed: {[t for t in trials if t['status'] != 'ok']}")
    seen, runs = layouts_measured(trials, full, (2,))
    check(seen == {(2, "ddp", 2, False), (2, "shard_grad_op", 2, False), (2, "full_shard", 2, False)},
          f"layouts measured: {sorted(seen)}")
    same_as_ddp(runs)
    measured, best = fastest_measured(r)
    print(f"tune_llama: 2 ranks, {len(trials)} trials, layouts {sorted(seen)}, pick {best} "
          f"{measured[best] * 1e3:.1f} ms/step")


def leftover(marker):
    """Processes whose environment names `marker` (a trial's folder)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def case_failures(ts, work):
    base = ["--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "1", "--mbs", "1,2,4", "--ckpt", "none,full",
            "--mem-limit", "3G"]
    probe = subprocess.run([ts, "tune", "--runner", "hf", "--entry", SCRIPT, "--predict-only", "--json",
                            "--cluster", "cpu-local", "--study", os.path.join(work, "ids.db")] + base,
                           capture_output=True, text=True, timeout=120)
    check(probe.returncode == 0, f"predict-only: {probe.stderr}")
    ids = [c["id"] for c in json.loads(probe.stdout.strip().splitlines()[-1])["ranked"] if not c["rejected"]]
    check(len(ids) >= 6, f"valid candidates {ids}")
    faults = {ids[0]: "oom", ids[1]: "crash", ids[2]: "hang", ids[3]: "badpath", ids[4]: "teardown"}
    inject = ",".join(f"{k}:{v}" for k, v in faults.items())
    study, r = tune(ts, work, "hf-failures", base + ["--entry", SCRIPT + " --seq 32", "--exhaustive", "--trial-steps", "3",
                                                     "--trial-timeout", "45", "--inject", inject])
    status = {t["candidate"]: t for t in r["trials"]}
    # teardown: the job returned, then its interpreter aborted at exit (as DeepSpeed 0.19's CPU path
    # does now and then): measured, kept, and the death named.
    want = {"oom": "oom", "crash": "crash", "hang": "hang", "badpath": "invalid", "teardown": "ok"}
    for cand, fault in faults.items():
        check(cand in status, f"candidate {cand} ({fault}) has no trial")
        check(status[cand]["status"] == want[fault], f"{fault}: {status[cand]}")
    late = status[[k for k, v in faults.items() if v == "teardown"][0]]
    check("teardown" in late["message"] and "rank0: Fatal Python error: Aborted" in late["message"] and
          late["step_s"] > 0 and steps_of(late["db"])[0], f"teardown: {late}")
    failed = [k for k, v in faults.items() if v != "teardown"]
    ok = [t for t in r["trials"] if t["candidate"] not in failed]
    check(ok and all(t["status"] == "ok" for t in ok), f"the others: {ok}")
    check(r["recommended"] not in failed, f"recommended a failed candidate {r['recommended']}")
    hung = trial_dir(status[[k for k, v in faults.items() if v == "hang"][0]])
    deadline = time.time() + 30
    while leftover(hung) and time.time() < deadline:
        time.sleep(0.5)
    check(not leftover(hung), f"processes of the hung trial remain: {leftover(hung)}")
    print("failures:", {faults[c]: status[c]["status"] for c in faults}, "others ok:", len(ok))


def run_case(cases, ts, case, work):
    """Runs one named case in WORK; exit 77 (ctest's skip) without accelerate, which the Trainer needs."""
    os.makedirs(work, exist_ok=True)
    try:
        import accelerate  # noqa: F401  (Transformers' Trainer needs it; scripts/setup installs it)
    except ImportError:
        print("SKIP: accelerate is not installed in", PY, "(run scripts/setup)")
        sys.exit(77)
    cases[case](ts, work)
    print("PASS", case)


def main():
    ts, case, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ.pop("OMP_NUM_THREADS", None)  # the runners' own thread rule decides (check_threads)
    run_case({"probe": case_probe, "tune_gpt2": case_tune_gpt2, "cpu_fsdp": case_cpu_fsdp,
              "tune_llama": case_tune_llama, "failures": case_failures}, ts, case, work)


if __name__ == "__main__":
    main()
