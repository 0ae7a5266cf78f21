#!/usr/bin/env python3
"""`trainscope tune --runner deepspeed` with real jobs, and DeepSpeed's own parser on the exports
(docs/tuner.md, "Tuning your own job"); the helpers are hf_runner_test.py's.

    hf_deepspeed_test.py TRAINSCOPE CASE WORKDIR

  deepspeed    --runner deepspeed: examples/deepspeed_train.py on 2 CPU ranks, ZeRO 0-3 x micro-batch,
               each engine built from its trial's exported ds_config.json (DeepSpeedConfig parses it);
               each rank given one intra-op thread (the runner's, as torchrun does), a user's value kept;
               the preset's fitted deepspeed host constants price its trials closer than the built-in
  ds_llama_exports  DeepSpeedConfig on every DeepSpeed export of the Llama-family presets' studies
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_runner_test import (PY, REPO, check, check_threads, exported, fail, run_case, steps_of,  # noqa: E402
                            trial_dir, tune)


class DataParallel:
    """What DeepSpeedConfig asks of an mpu: the data-parallel world size."""

    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp


def case_deepspeed(ts, work):
    """--runner deepspeed on 2 CPU ranks (DS_ACCELERATOR=cpu, the deepspeed launcher): ZeRO 0-3 x
    micro-batch; each trial's engine was built from the trial's exported ds_config.json."""
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        print("SKIP: deepspeed is not installed in", PY, "(run scripts/setup)")
        sys.exit(77)
    import deepspeed.runtime.config as dsc
    from deepspeed.runtime.config import DeepSpeedConfig
    dsc.dist.get_rank = lambda *a, **k: 0  # no process group in this process: rank 0, the mpu gives dp
    script = os.path.join(REPO, "examples", "deepspeed_train.py")
    study, r = tune(ts, work, "ds", ["--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "2", "--mbs", "1,2",
                                     "--ckpt", "none", "--zero", "0,1,2,3", "--exhaustive", "--trial-steps", "2",
                                     "--mem-limit", "3G", "--entry", script + " --model gpt2 --seq 32"],
                    runner="deepspeed")
    trials = r["trials"]
    check(all(t["status"] == "ok" for t in trials), f"trials {trials}")
    seen = set()
    for t in trials:
        d = trial_dir(t)
        exported_cfg = json.load(open(os.path.join(d, "ds_config.json")))
        for rank in (0, 1):
            built = json.load(open(os.path.join(d, "probe", f"rank{rank}.ds_config.json")))
            check(built == exported_cfg, f"{d}: rank {rank}'s engine was built from {built}, not {exported_cfg}")
        parsed = DeepSpeedConfig(exported_cfg, mpu=DataParallel(2))
        seen.add((parsed.zero_optimization_stage, parsed.train_micro_batch_size_per_gpu,
                  parsed.gradient_accumulation_steps))
        rows, meta, _ = steps_of(t["db"])
        check(meta["world_size"] == "2" and len(rows) == 2 * t["steps"], f"{t['db']}: {rows}")
        # The deepspeed launcher sets no OMP_NUM_THREADS: the runner gives its 2 ranks torchrun's 1.
        check_threads(t, 2, "1", 1, "runner")
    check(seen == {(z, m, 2 // m) for z in range(4) for m in (1, 2)}, f"measured {sorted(seen)}")
    # A value the user set is theirs: kept, and recorded as the user's.
    _, mine = tune(ts, work, "ds-user", ["--workload", "tiny", "--gbs", "4", "--seq", "32", "--ranks", "2", "--mbs", "2",
                                         "--ckpt", "none", "--zero", "1", "--exhaustive", "--trial-steps", "1",
                                         "--mem-limit", "3G", "--entry", script + " --model gpt2 --seq 32"],
                   runner="deepspeed", env=dict(os.environ, OMP_NUM_THREADS="2"))
    check([t["status"] for t in mine["trials"]] == ["ok"], f"trials {mine['trials']}")
    check_threads(mine["trials"][0], 2, "2", 2, "user")
    print(f"deepspeed: {len(trials)} trials, ZeRO/mbs/ga {sorted(seen)}, pick {r['recommended']}")
    # The preset's fitted deepspeed host constants (cpu-local.json) price these trials closer than the
    # built-in profile, which has no host cost on a CPU (every trial ~90% under, 2026-12-06).
    preset = os.path.join(REPO, "models", "clusters", "cpu-local.json")
    builtin = json.load(open(preset))
    builtin["name"] = "cpu-local-builtin-deepspeed"
    builtin["frameworks"].pop("deepspeed", None)
    builtin_path = os.path.join(work, "cpu-local-builtin-deepspeed.json")
    with open(builtin_path, "w") as f:
        json.dump(builtin, f)
    errors = {}
    for name, cluster in (("built-in", builtin_path), ("preset", "cpu-local")):
        p = subprocess.run([ts, "calibrate", "--cluster", cluster, "--from", study, "--evaluate", "--json"],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"calibrate --evaluate on {name}: {p.stdout[-1000:]} {p.stderr[-1000:]}")
        errors[name] = json.loads(p.stdout.strip().splitlines()[-1])
        check(errors[name]["rows"] == len(trials), f"{name}: rows {errors[name]} for {len(trials)} trials")
    before, after = errors["built-in"], errors["preset"]
    print(f"deepspeed profile on the study: MAPE {before['mape'] * 100:.1f}% -> {after['mape'] * 100:.1f}%, "
          f"within-group Spearman {before['spearman_within_group_median']:.2f} -> "
          f"{after['spearman_within_group_median']:.2f}")
    check(after["mape"] < before["mape"], f"the fitted deepspeed profile prices the trials no better: {errors}")


def case_ds_llama_exports(ts, work):
    """DeepSpeed's own config parser on the DeepSpeed exports of the Llama-family presets (issue 32's
    gap): every valid candidate of a study of each, DeepSpeedConfig(config, mpu=dp) (batch arithmetic,
    the pydantic models of zero_optimization / bf16 / fp16 refusing unknown keys)."""
    try:
        import deepspeed.runtime.config as dsc
    except ImportError:
        print("SKIP: deepspeed is not installed in", PY, "(run scripts/setup)")
        sys.exit(77)
    dsc.dist.get_rank = lambda *a, **k: 0
    presets = [("tiny-llama", "cpu-local", "8"), ("small-llama", "cpu-local", "8"),
               ("llama3-8b", "h100-80gb-x8", "64"), ("mistral-7b", "h100-80gb-x8", "64"),
               ("qwen2.5-7b", "h100-80gb-x8", "64")]
    checked = 0
    for workload, cluster, gbs in presets:
        study = os.path.join(work, f"ds-{workload}.db")
        for p in (study, study + ".lock"):
            if os.path.exists(p):
                os.remove(p)
        subprocess.run(["rm", "-rf", study + ".trials"], check=True)
        # One trial (it may fail here: no GPU); the study keeps every candidate's config.
        p = subprocess.run([ts, "tune", "--workload", workload, "--cluster", cluster, "--gbs", gbs, "--seq", "128",
                            "--study", study, "--max-trials", "1", "--trial-steps", "2", "--json"],
                           capture_output=True, text=True, timeout=600)
        check(p.stdout.strip(), f"{workload}: tune printed nothing: {p.stderr[-2000:]}")
        ranked = json.loads(p.stdout.strip().splitlines()[-1])["ranked"]
        valid = [c for c in ranked if not c["rejected"]]
        check(valid, f"{workload}: no valid candidate")
        for c in valid:
            text = exported(ts, study, c["id"], "deepspeed")
            cfg = json.loads(text)
            dp = int(c["plan"].split()[0][2:])
            try:
                parsed = dsc.DeepSpeedConfig(cfg, mpu=DataParallel(dp))
            except Exception as e:  # noqa: BLE001 — the parser's refusal is the finding
                fail(f"{workload} candidate {c['id']} ({c['plan']}): DeepSpeedConfig refused it: {e}\n{text}")
            check(parsed.train_batch_size == int(gbs) and parsed.train_micro_batch_size_per_gpu == cfg[
                "train_micro_batch_size_per_gpu"], f"{workload} {c['plan']}: parsed batch {parsed.train_batch_size}")
            checked += 1
        print(f"{workload} on {cluster}: {len(valid)} DeepSpeed exports parsed")
    print(f"ds_llama_exports: {checked} configs parsed by DeepSpeedConfig")


def main():
    ts, case, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ.pop("OMP_NUM_THREADS", None)  # the runners' own thread rule decides (check_threads)
    run_case({"deepspeed": case_deepspeed, "ds_llama_exports": case_ds_llama_exports}, ts, case, work)


if __name__ == "__main__":
    main()
