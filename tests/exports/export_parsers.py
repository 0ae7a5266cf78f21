"""tests/exports/export_parsers.py — what the export parser tests share.

The parsers' folders (scripts/setup installs them under $VENV/trainscope-parsers), studies whose
candidates are exported (`tune --max-trials 0`: the whole space, no trial), a spread of their
layouts, and the argument vectors a `tune --runner megatron|torchtitan` trial really started
(tests/exports/record_argv.py as the entry).
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests

sys.path.insert(0, os.path.join(ROOT, "bench"))
import check_exports  # noqa: E402  (the bench's query of a study's valid candidates)


def parser_folder(name):
    """Put $VENV/trainscope-parsers/NAME first on the path, or exit SKIP saying how to install it."""
    d = os.path.join(sys.prefix, "trainscope-parsers", name)
    if not os.path.exists(os.path.join(d, ".complete")):
        print(f"skip: {d} is not installed (scripts/setup installs it)")
        sys.exit(SKIP)
    sys.path.insert(0, d)
    return d


def trainscope(bin_, *args, ok=(0,), notes=False):
    """stdout (and, with notes, the `note: ` lines of stderr) of a trainscope command."""
    r = subprocess.run([bin_, *args], capture_output=True, text=True)
    if r.returncode not in ok:
        raise RuntimeError(f"trainscope {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-1500:]}")
    if notes:
        return r.stdout, [line[len("note: "):] for line in r.stderr.splitlines() if line.startswith("note: ")]
    return r.stdout


def space(bin_, folder, name, flags):
    """A study holding every candidate of `flags` and no trial (tune --max-trials 0)."""
    study = os.path.join(folder, name + ".db")
    trainscope(bin_, "tune", *flags, "--max-trials", "0", "--study", study, ok=(0, 1))
    return study


def candidates(study):
    """The study's valid candidates, (id, plan): bench/check_exports.py's query."""
    return check_exports.valid_candidates(study)


def main(doc, run_checks):
    """A parser test's entry: `NAME.py TRAINSCOPE_BINARY WORK_FOLDER`, run_checks(binary, folder) in a
    temporary folder of WORK_FOLDER (this run's studies, removed after it)."""
    if len(sys.argv) != 3:
        sys.exit(doc.split("\n\n")[1])
    bin_, parent = sys.argv[1:]
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent) as folder:
        run_checks(bin_, folder)


_LAYOUT = re.compile(r"^((dp|tp|pp|cp|ep|v)\d+|zero\d|sp|interleaved|gpipe|fp32|bf16|fp16|fp8|none|selective|full)$")


def spread(study, limit, keep=lambda plan: True):
    """The first candidate of each distinct layout (parallel sizes, ZeRO, SP, schedule, precision,
    checkpointing), up to `limit`: (id, plan) pairs."""
    seen, out = set(), []
    for cid, plan in candidates(study):
        key = tuple(t for t in plan.split() if _LAYOUT.match(t))
        if key in seen or not keep(plan):
            continue
        seen.add(key)
        out.append((cid, plan))
        if len(out) == limit:
            break
    if not out:
        raise RuntimeError(f"{study}: no valid candidate to export")
    return out


def export(bin_, study, fmt, trial, notes=False):
    return trainscope(bin_, "export", study, "--format", fmt, "--trial", str(trial), notes=notes)


def runner_trials(bin_, folder, runner, entry_args, flags, trials=2):
    """Run `tune --runner RUNNER` with record_argv.py (and entry_args) as the entry for `trials`
    trials; return (study, [(candidate id, argv, env, the trial's cN-rR.json) for each rank of each
    trial])."""
    argv_dir = os.path.join(folder, runner + "-argv")
    os.makedirs(argv_dir, exist_ok=True)
    study = os.path.join(folder, runner + "-runner.db")
    entry = " ".join([os.path.join(HERE, "record_argv.py"), *entry_args])
    r = subprocess.run([bin_, "tune", "--runner", runner, "--entry", entry, "--python", sys.executable, *flags,
                        "--max-trials", str(trials), "--first-round", str(trials), "--final-rounds", "0",
                        "--study", study], capture_output=True, text=True,
                       env=dict(os.environ, TRAINSCOPE_TEST_ARGV_DIR=argv_dir))
    recorded = []
    for path in sorted(glob.glob(os.path.join(argv_dir, "*.json"))):
        with open(path) as f:
            rec = json.load(f)
        job = os.path.dirname(rec["env"].get("TRAINSCOPE_PROBE_DIR") or "")  # the trial's cN-rR.job/probe
        m = re.match(r"c(\d+)-r\d+\.job$", os.path.basename(job))
        if not m:
            raise RuntimeError(f"{path}: the entry's TRAINSCOPE_PROBE_DIR is not in a trial's cN-rR.job folder")
        with open(job[:-len(".job")] + ".json") as f:  # the trial's own run (its steps and schedule)
            trial = json.load(f)
        recorded.append((int(m.group(1)), rec["argv"], rec["env"], trial))
    if not recorded:
        raise RuntimeError(f"tune --runner {runner} started no entry (exit {r.returncode}): {r.stderr.strip()[-1500:]}")
    return study, recorded


def trial_run(exported_run, trial):
    """What a trial ran: the candidate's run (`export --format run`, a training run's schedule) with
    the trial's own steps and schedule (a trial runs a few steps at a constant rate)."""
    run = dict(exported_run)
    for k in ("steps", "warmup", "min_lr_ratio", "lr"):
        run[k] = trial[k]
    return run


class Checks:
    """One line per check (ok / FAIL); exit status 1 on any FAIL."""

    def __init__(self):
        self.failed = []
        self.count = 0

    def report(self, what, problems):
        self.count += 1
        print(("ok    " if not problems else "FAIL  ") + what + ("" if not problems else ": " + "; ".join(problems)),
              flush=True)
        if problems:
            self.failed.append(what)

    def exit(self):
        print(f"{self.count - len(self.failed)} of {self.count} checks passed")
        sys.exit(1 if self.failed or not self.count else 0)


def want(problems, name, got, expected, rel=1e-9):
    if isinstance(expected, float) and isinstance(got, (int, float)):
        ok = abs(got - expected) <= rel * max(abs(got), abs(expected), 1e-30)
    else:
        ok = got == expected
    if not ok:
        problems.append(f"{name} {got!r} != {expected!r}")
