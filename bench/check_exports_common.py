"""bench/check_exports_common.py — what bench/check_exports.py's checks share: the failures so far and
how a check is reported, comparisons, captured output, where the workload file and the entry script are,
the learning-rate schedule a run asks for, a free port and a launched process group.
"""

import contextlib
import io
import json
import math
import os
import socket
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "check_exports.py")  # the entry, also of the helper processes (--ds-rank, …)

failures = []


def check(problems, what):
    print(("ok    " if not problems else "FAIL  ") + what + ("" if not problems else ": " + "; ".join(problems)),
          flush=True)
    if problems:
        failures.append(what)


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def want(problems, name, got, expected):
    ok = close(got, expected) if isinstance(expected, float) and isinstance(got, (int, float)) else got == expected
    if not ok:
        problems.append(f"{name} {got!r} != {expected!r}")


class Captured(contextlib.ExitStack):
    """The targets' banners (stdout) and warnings (stderr) around a call, kept for the report."""

    def __enter__(self):
        super().__enter__()
        self.out, self.err = io.StringIO(), io.StringIO()
        self.enter_context(contextlib.redirect_stdout(self.out))
        self.enter_context(contextlib.redirect_stderr(self.err))
        return self


def version(dist):
    from importlib.metadata import version as v, PackageNotFoundError
    try:
        return v(dist)
    except PackageNotFoundError:
        return None


def importable(mod):
    import importlib.util
    return importlib.util.find_spec(mod) is not None


def workload_file(run):
    spec = run.get("workload_spec") or ""
    return spec if spec.endswith(".json") and os.path.exists(spec) else os.path.join(ROOT, "workloads",
                                                                                      run["workload"] + ".json")


def runtime_lr(step, run):
    """This runtime's schedule (runtime/src/optim/optim.cpp, learningRate) for 0-based step."""
    lr, total, warmup, min_lr = run["lr"], run["steps"], run["warmup"], run["lr"] * run["min_lr_ratio"]
    if step < warmup:
        return lr * (step + 1) / warmup
    if total - warmup <= 1:
        return lr
    return min_lr + 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup - 1))) * (lr - min_lr)


def schedule_problems(name, applied, run):
    """applied[s]: the lr the target's scheduler gives step s (0-based), applied[steps]: after the last.
    The same shape as this runtime's: a peak of lr after the warm-up, cos_min_ratio x lr at the end,
    and at most two warm-up increments (lr/warmup each) off this runtime's lr at any step (the
    targets' warm-ups start from 0, this runtime's from lr/warmup)."""
    p = []
    lr, steps = run["lr"], run["steps"]
    peak = max(applied[:steps])
    if not lr * (1 - 1e-3) <= peak <= lr * (1 + 1e-12):
        p.append(f"{name}: peak lr {peak} is not lr {lr}")
    if not close(applied[steps], lr * run["min_lr_ratio"], 1e-9):
        p.append(f"{name}: lr after the last step {applied[steps]} != {lr * run['min_lr_ratio']}")
    off = max(abs(applied[s] - runtime_lr(s, run)) for s in range(steps))
    if off > 2 * lr / max(1, run["warmup"]) * (1 + 1e-9):
        p.append(f"{name}: {off:.3g} off this runtime's lr at some step (more than two warm-up increments)")
    return p


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launched(cmd, folder, timeout=300):
    """Runs a launcher in its own process group (a timeout ends all of it); its probes' reports."""
    pr = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"), start_new_session=True)
    try:
        out, err = pr.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(pr.pid, 9)
        out, err = pr.communicate()
        err += f"\ntimed out after {timeout} s"
    probes = [json.loads(line[6:]) for line in out.splitlines() if line.startswith("PROBE ")]
    tail = [x for x in (out + err).strip().splitlines() if x.strip()][-3:]
    return pr.returncode, sorted(probes, key=lambda q: q["rank"]), tail
