#!/usr/bin/env python3
"""Predictions for an external runner's trials (issue 34; docs/tuner.md, "Tuning your own job").

    hf_predict_test.py TRAINSCOPE WORKDIR [ddp|fsdp]

A real, small `tune --runner hf` (examples/hf_trainer.py, tiny GPT-2, synthetic tokens, Gloo CPU
ranks; the setup of runner.hf_tune_gpt2) priced under the fsdp framework profile:
  - every trial's recorded prediction is the fsdp profile's (host work per op, hook and micro-batch
    added on the CPU), and the study's prediction check covers the external trials;
  - after the study's refit from its trials (the profile's host constants with the CPU's rates), the
    predicted ranking of the measured candidates correlates positively with the measured one;
  - each trial's run database carries the plan it ran and its framework, so `trainscope calibrate`
    accepts the study, refits the fsdp profile's host constants from it, and fits it better than
    the preset.
The fsdp case (runner.hf_predict_fsdp) tunes 2 ranks, DDP and FSDP SHARD_GRAD_OP / FULL_SHARD (the
probe's CPU-only cpu_fsdp shim) x micro-batch 1 and 4, and asserts what FSDP's pricing adds, against the
preset's prediction at launch: each FSDP trial predicted slower than DDP's, and the step FSDP adds to
DDP's at the same micro-batch, over DDP's measured step, within RATIO_BOUND of the measured one (the
FSDP terms add to DDP's priced step; DDP's own error, -30 to -52% at micro-batch 4, is not FSDP's and
would otherwise multiply the predicted ratio); then the refitted ranking and calibrate as for DDP.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_runner_test import PY, SCRIPT, check, steps_of, tune  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from common import spearman  # noqa: E402  (bench/common.py: tie-aware, nan for a constant list)

# The bound asserted on the refitted ranking: well under the 0.92 and 0.73 two runs gave (2026-12-06), and
# above 0 — the unprofiled models ranked an HF tune at rho -0.14 (note-33.md).
MIN_RHO = 0.3


# FSDP's measured cost over DDP's at the same micro-batch (2 Gloo ranks) against the preset's, as
# 1 + (predicted FSDP - predicted DDP) / measured DDP: the predicted ratio may differ from the measured
# one by at most this factor either way. Measured 2026-12-07 on the loaded 2-core machine
# (docs/framework-profiles.md, "FSDP on CPU ranks"): the measured ratio of one FSDP/DDP pair of trials
# moved 1.1-2.0 (SHARD_GRAD_OP 4 x 1), 1.8-3.0 (FULL_SHARD 1 x 4) and 2.1-4.1 (FULL_SHARD 4 x 1) between
# repeated runs of the same pair: the bound is that noise's size. Ten runs of this test passed, the
# preset's five at x0.95-1.25.
RATIO_BOUND = 2.0


def fsdp_against_ddp(r):
    """At launch (the preset, nothing refitted): per micro-batch, each FSDP candidate's step over DDP's,
    predicted as 1 + (its predicted step - DDP's predicted step) / DDP's measured step, and measured.
    Returns [(zero, mbs, predicted ratio, measured ratio, DDP's measured step)]."""
    by = {}
    for c in r["ranked"]:
        if c.get("measured_step_s"):
            mbs = int(c["plan"].split("mbs")[1].split()[0])
            by[(c.get("zero", 0), mbs)] = c
    out = []
    for (zero, mbs), c in sorted(by.items()):
        ddp = by.get((0, mbs))
        if zero == 0 or ddp is None:
            continue
        # predicted_step_s_analytic: the preset's own (the ranked predicted_step_s is after the refit).
        added = c["predicted_step_s_analytic"] - ddp["predicted_step_s_analytic"]
        out.append((zero, mbs, 1 + added / ddp["measured_step_s"], c["measured_step_s"] / ddp["measured_step_s"],
                    ddp["measured_step_s"]))
    return out


def main():
    ts, work = sys.argv[1], sys.argv[2]
    case = sys.argv[3] if len(sys.argv) > 3 else "ddp"
    os.makedirs(work, exist_ok=True)
    try:
        import accelerate  # noqa: F401
    except ImportError:
        print("SKIP: accelerate is not installed in", PY, "(run scripts/setup)")
        sys.exit(77)
    if case == "ddp":
        space = ["--ranks", "1,2", "--mbs", "1,2,4", "--zero", "0"]
    else:  # FSDP beside DDP on 2 ranks (the probe's cpu_fsdp shim)
        space = ["--ranks", "2", "--mbs", "1,4", "--zero", "0,2,3"]
    # The FSDP/DDP ratios compare two trials: a median over 7 steps (the first is left out) is moved
    # less by a neighbour's burst than one over 3, for under a second more a trial.
    steps = "8" if case == "fsdp" else "4"
    study, r = tune(ts, work, "hf-predict-" + case, ["--workload", "tiny", "--gbs", "8", "--seq", "32", *space,
                                                     "--ckpt", "none", "--exhaustive",
                                                     "--trial-steps", steps, "--mem-limit", "3G",
                                                     "--entry", SCRIPT + " --model gpt2 --seq 32"])
    trials = r["trials"]
    if case == "fsdp":
        ratios = fsdp_against_ddp(r)
        check(len(ratios) == 4, f"FSDP candidates beside DDP's: {ratios} of {r['ranked']}")
        for zero, mbs, pr, ms, ddp_s in ratios:
            print(f"zero {zero} mbs {mbs}: FSDP/DDP predicted {pr:.2f}, measured {ms:.2f} (DDP {ddp_s * 1e3:.1f} ms)")
            check(pr > 1.0, f"zero {zero} mbs {mbs}: FSDP predicted no slower than DDP ({pr:.2f}; measured {ms:.2f})")
            check(1 / RATIO_BOUND <= pr / ms <= RATIO_BOUND,
                  f"zero {zero} mbs {mbs}: FSDP/DDP predicted {pr:.2f}, measured {ms:.2f} (bound x{RATIO_BOUND})")
    check(all(t["status"] == "ok" for t in trials), f"trials {trials}")
    check(all(t["predicted_step_s"] > 0 for t in trials), f"a trial without its prediction: {trials}")
    # The trial's database: the plan it ran and the framework it is priced under.
    for t in trials:
        _, meta, _ = steps_of(t["db"])
        cfg = json.loads(meta["config"])
        check(meta.get("framework") == "fsdp" and meta.get("device") == "cpu", f"{t['db']}: meta {meta}")
        check(cfg.get("mbs", 0) >= 1 and cfg.get("gbs") == 8, f"{t['db']}: config {cfg}")
    check(r["prediction_check"]["candidates"] == len({t["candidate"] for t in trials}),
          f"the prediction check leaves external trials out: {r['prediction_check']}")
    # The refitted ranking against the measured one, over every measured candidate.
    measured = [(c["predicted_step_s"], c["measured_step_s"]) for c in r["ranked"] if c.get("measured_step_s")]
    check(len(measured) >= 6, f"{len(measured)} measured candidates: {r['ranked']}")
    check(all(c.get("predicted_step_s_analytic") for c in r["ranked"] if c.get("measured_step_s")),
          "a measured candidate without the preset's prediction")
    rho = spearman([m[0] for m in measured], [m[1] for m in measured])
    print(f"refitted ranking: Spearman {rho:.2f} over {len(measured)} candidates "
          f"(at launch: {r['prediction_check']['spearman']}); fitted {r.get('fitted_constants')}")
    check(rho >= MIN_RHO, f"the refitted models rank the HF trials at rho {rho:.2f} < {MIN_RHO}: {measured}")
    # calibrate accepts the study: the fsdp profile's host constants refitted from the external trials.
    out = os.path.join(work, "hf-calibrated.json")
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.run([ts, "calibrate", "--cluster", "cpu-local", "--from", study, "-o", out, "--folds", "0",
                        "--json"], capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"calibrate on the HF study: {p.returncode} {p.stdout[-2000:]} {p.stderr[-2000:]}")
    cal = json.loads(p.stdout.strip().splitlines()[-1])
    fitted = cal["fitted"]
    check(any(k.startswith("frameworks.fsdp.") for k in fitted), f"no fsdp constant refitted: {sorted(fitted)}")
    check(cal["rows"][0]["rows"] == len(trials), f"rows {cal['rows']} for {len(trials)} trials")
    before, after = cal["base_residuals"]["mape"], cal["residuals"]["mape"]
    check(after < 0.25, f"the refit prices the study's trials at MAPE {after:.3f} (from {before:.3f})")
    print(f"calibrate: {len(trials)} rows, fitted {sorted(fitted)}, MAPE {before * 100:.1f}% -> {after * 100:.1f}%")
    print("PASS hf_predict", case)


if __name__ == "__main__":
    main()
