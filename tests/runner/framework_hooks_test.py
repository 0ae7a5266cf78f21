#!/usr/bin/env python3
"""The probe's Megatron-LM and torchtitan hooks (python/trainscope_probe/megatron.py, titan.py): an
unmodified pretrain_gpt.py / torchtitan.train job is measured through them (docs/tuner.md).

    framework_hooks_test.py

1. The installed sources (megatron-core 0.19.2, torchtitan 0.3.0 under the venv's
   trainscope-parsers/, scripts/setup), read with `ast` (neither imports here: Python 3.12, a newer
   torch): the functions the hooks replace exist with the parameters and returns the hooks assume,
   and the training loop calls them through the name that is patched (the module global `train_step`
   inside Megatron's `train`, `self.train_step` inside torchtitan's `Trainer.train`); the fields the
   token count reads exist. A version that renames them fails here instead of recording nothing.
2. Stand-ins of those modules with the real signatures, imported by a job through the import system
   with the probe's site folder on PYTHONPATH and TRAINSCOPE_PROBE_DIR set (as a trial runs it,
   tuner/src/job.cpp): N steps give N rows with the global batch's tokens and (Megatron) the loss;
   torch.OutOfMemoryError raised inside a step ends the job with the OOM status and its exit record.
   Megatron's --iterations-to-skip path (checked in the source: a dummy_train_step and `continue`
   before the train_step call) leaves no row for a skipped iteration; the rows' `iteration` has the
   gap, and a train_step whose update was skipped (skipped_iter 1) gives a row with "skipped": true.
   A job's own torchtitan Trainer subclasses, made after the probe is installed, that override
   train_step (calling super().train_step, replacing it, two overrides deep, or inheriting one):
   N steps give N rows (one per step, not one per override level), and the base's __init_subclass__
   chain (torchtitan's Configurable wiring the subclass's Config) still runs.
Exit 77 (skipped) without the installed sources.
"""
import ast
import json
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROBE = os.path.join(REPO, "python")
SITE = os.path.join(PROBE, "trainscope_probe", "site")
PARSERS = os.path.join(sys.prefix, "trainscope-parsers")
MEGATRON = os.path.join(PARSERS, "megatron-core-0.19.2")
TITAN = os.path.join(PARSERS, "torchtitan-0.3.0")
OOM_EXIT = 3
SKIP = 77


def parse(folder, rel):
    with open(os.path.join(folder, rel)) as f:
        return ast.parse(f.read(), rel)


def top(tree, kind, name):
    found = [n for n in tree.body if isinstance(n, kind) and n.name == name]
    assert found, f"no top-level {kind.__name__} {name}"
    return found[0]


def params(fn):
    return [a.arg for a in fn.args.posonlyargs + fn.args.args]


def calls(fn, match):
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and match(n.func)]


def bound_names(fn):
    """Names a function binds locally (assignments, imports, parameters): a call through one of them
    would not see the patched module global."""
    out = set(params(fn))
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
    return out


def check_megatron_source():
    tree = parse(MEGATRON, "megatron/training/training.py")
    step = top(tree, ast.FunctionDef, "train_step")
    assert params(step)[:7] == ["forward_step_func", "data_iterator", "model", "optimizer", "opt_param_scheduler",
                                "config", "forward_backward_func"], params(step)
    # every return is the 8-tuple train() unpacks, its first entry the loss dict (_loss reads out[0])
    returns = [n for n in ast.walk(step) if isinstance(n, ast.Return)]
    assert returns and all(isinstance(r.value, ast.Tuple) and len(r.value.elts) == 8 for r in returns), \
        "train_step's returns are not the 8-tuple (loss_dict, skipped_iter, ...)"
    firsts = {ast.unparse(r.value.elts[0]) for r in returns}
    assert firsts <= {"{}", "loss_reduced"}, firsts
    train = top(tree, ast.FunctionDef, "train")
    through_global = calls(train, lambda f: isinstance(f, ast.Name) and f.id == "train_step")
    assert len(through_global) == 1, "train() no longer calls the module global train_step once per iteration"
    # --iterations-to-skip goes around train_step: `if (iteration + 1) in args.iterations_to_skip:` runs
    # dummy_train_step (which draws the batches and calls no train_step) and `continue`s, before the call.
    skips = [n for n in ast.walk(train) if isinstance(n, ast.If) and "iterations_to_skip" in ast.unparse(n.test)]
    assert len(skips) == 1, "train() no longer has one --iterations-to-skip branch"
    body = ast.Module(body=skips[0].body, type_ignores=[])
    assert calls(body, lambda f: isinstance(f, ast.Name) and f.id == "dummy_train_step"), "the skip runs no dummy_train_step"
    assert any(isinstance(n, ast.Continue) for n in ast.walk(body)), "the skip branch does not continue"
    assert not calls(body, lambda f: isinstance(f, ast.Name) and f.id == "train_step"), "a skipped iteration calls train_step"
    assert skips[0].lineno < through_global[0].lineno, "the skip branch is no longer before train_step"
    assert not calls(top(tree, ast.FunctionDef, "dummy_train_step"),
                     lambda f: isinstance(f, ast.Name) and f.id == "train_step"), "dummy_train_step calls train_step"
    # the second return is skipped_iter (True where the rerun state machine ends the run: no update)
    seconds = {ast.unparse(r.value.elts[1]) for r in returns}
    assert seconds == {"skipped_iter", "True"}, f"train_step's second return is {seconds}, not skipped_iter"
    assert "train_step" not in bound_names(train), "train() binds train_step locally: the hook would be bypassed"
    init = parse(MEGATRON, "megatron/training/__init__.py")
    assert any(isinstance(n, ast.ImportFrom) and any(a.name == "get_args" for a in n.names) for n in init.body)
    calc = parse(MEGATRON, "megatron/core/num_microbatches_calculator.py")
    top(calc, ast.FunctionDef, "get_current_global_batch_size")
    with open(os.path.join(MEGATRON, "megatron/training/arguments.py")) as f:
        text = f.read()
    for field in ("args.seq_length", "args.global_batch_size"):  # what _global_tokens reads
        assert field in text, f"megatron/training/arguments.py no longer sets {field}"
    print("megatron-core 0.19.2: train_step(forward_step_func, ...) -> 8-tuple, called as train_step( in train()")


def method(cls, name):
    found = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"{cls.name} has no method {name}"
    return found[0]


def check_titan_source():
    entry = parse(TITAN, "torchtitan/train.py")
    assert any(isinstance(n, ast.ImportFrom) and n.module == "torchtitan.trainer" and
               any(a.name == "Trainer" for a in n.names) for n in entry.body), \
        "torchtitan/train.py does not take its Trainer from torchtitan.trainer (the hooked module)"
    tree = parse(TITAN, "torchtitan/trainer.py")
    trainer = top(tree, ast.ClassDef, "Trainer")
    assert params(method(trainer, "train_step")) == ["self", "data_iterator"]
    train = method(trainer, "train")
    through_self = calls(train, lambda f: isinstance(f, ast.Attribute) and f.attr == "train_step" and
                         isinstance(f.value, ast.Name) and f.value.id == "self")
    assert len(through_self) == 1, "Trainer.train() no longer calls self.train_step once per step"
    assigned = {ast.unparse(t) for n in ast.walk(method(trainer, "__init__")) if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])}
    for field in ("self.gradient_accumulation_steps", "self.parallel_dims", "self.config"):
        assert any(field in a for a in assigned), f"Trainer.__init__ no longer sets {field}"
    # Subclasses: install() wraps Trainer's __init_subclass__, which type() calls for every subclass made
    # (no metaclass of Trainer's own stands in the way); torchtitan's own trainers override train_step,
    # one of them calling super().train_step (the nesting counted once).
    assert not any(k.arg == "metaclass" for k in trainer.keywords), "Trainer has a metaclass of its own"
    overrides = {}
    for rel in ("torchtitan/experiments/graph_trainer/trainer.py", "torchtitan/experiments/torchft/trainer.py"):
        for cls in parse(TITAN, rel).body:
            if isinstance(cls, ast.ClassDef) and any(ast.unparse(b) == "Trainer" for b in cls.bases):
                step = method(cls, "train_step")
                overrides[cls.name] = bool(calls(step, lambda f: isinstance(f, ast.Attribute) and f.attr == "train_step"
                                                 and ast.unparse(f.value) == "super()"))
    assert overrides == {"GraphTrainer": True, "FaultTolerantTrainer": False}, overrides
    dims = top(parse(TITAN, "torchtitan/distributed/parallel_dims.py"), ast.ClassDef, "ParallelDims")
    fields = {n.target.id for n in dims.body if isinstance(n, ast.AnnAssign)}
    assert {"dp_replicate", "dp_shard"} <= fields, fields
    configs = parse(TITAN, "torchtitan/config/configs.py")
    training = top(configs, ast.ClassDef, "TrainingConfig")  # Trainer.Config.training
    fields = {n.target.id for n in training.body if isinstance(n, ast.AnnAssign)}
    assert {"local_batch_size", "seq_len"} <= fields, fields
    print("torchtitan 0.3.0: Trainer.train_step(self, data_iterator), called as self.train_step( in Trainer.train(); "
          f"its own subclasses override it (calling super(): {overrides})")


STANDINS = {
    "megatron/__init__.py": "",
    "megatron/training/__init__.py": """
        import os
        import types
        _ARGS = types.SimpleNamespace(global_batch_size=8, seq_length=16, iterations_to_skip=[
            int(i) for i in os.environ.get("STANDIN_SKIP", "").split(",") if i])
        def get_args():
            return _ARGS
        from .training import train
    """,
    "megatron/training/training.py": """
        import os
        import torch
        def train_step(forward_step_func, data_iterator, model, optimizer, opt_param_scheduler, config,
                       forward_backward_func, iteration=None, pg_collection=None, p2p_communicator=None):
            next(data_iterator)
            if iteration == int(os.environ.get("STANDIN_OOM_AT", "-1")):
                raise torch.OutOfMemoryError("CUDA out of memory (stand-in)")
            # the optimizer refused the update (a non-finite gradient): skipped_iter 1
            skipped_iter = int(iteration + 1 == int(os.environ.get("STANDIN_NAN_AT", "-1")))
            return {"lm loss": torch.tensor(2.5 + iteration)}, skipped_iter, False, False, 0, 1.0, 0, 0
        def dummy_train_step(data_iterator):  # --iterations-to-skip: the iteration's batch drawn, no step
            next(data_iterator)
        def train(n):
            from megatron.training import get_args
            args = get_args()
            data, iteration = iter(range(1000)), 0
            while iteration < n:
                if (iteration + 1) in args.iterations_to_skip:  # megatron-core 0.19.2's train()
                    dummy_train_step(data)
                    iteration += 1
                    continue
                (loss_dict, skipped_iter, should_checkpoint, should_exit, exit_code, grad_norm, num_zeros_in_grad,
                 max_attention_logit) = train_step(None, data, [], None, None, None, None, iteration=iteration)
                iteration += 1
    """,
    "pretrain_standin.py": """
        import sys
        from megatron.training import train
        train(int(sys.argv[1]))
    """,
    "torchtitan/__init__.py": "",
    "torchtitan/trainer.py": """
        import os
        import types
        import torch
        class Configurable:  # torchtitan.config.Configurable: __init_subclass__ wires a subclass's Config
            class Config:
                _owner = None
            def __init_subclass__(cls, **kwargs):
                super().__init_subclass__(**kwargs)
                if "Config" in cls.__dict__:
                    cls.__dict__["Config"]._owner = cls
        class Trainer(Configurable):
            class Config(Configurable.Config):
                pass
            def __init__(self):
                self.config = types.SimpleNamespace(training=types.SimpleNamespace(local_batch_size=2, seq_len=16))
                self.parallel_dims = types.SimpleNamespace(dp_replicate=1, dp_shard=2)
                self.gradient_accumulation_steps = 2
                self.step = 0
            def train_step(self, data_iterator):
                if self.step - 1 == int(os.environ.get("STANDIN_OOM_AT", "-1")):  # train() counts from 1
                    raise torch.OutOfMemoryError("CUDA out of memory (stand-in)")
            def train(self, n):
                while self.step < n:
                    self.step += 1
                    self.train_step(iter(()))
    """,
    "torchtitan/train.py": """
        import sys
        from torchtitan.trainer import Trainer
        if __name__ == "__main__":
            Trainer().train(int(sys.argv[1]))
    """,
    # A job's own Trainers (as torchtitan's GraphTrainer, FluxTrainer, FaultTolerantTrainer are),
    # made after the probe is installed: each counts its train_step calls.
    "my_trainers.py": """
        import os
        import torch
        from torchtitan.trainer import Trainer
        class SuperTrainer(Trainer):  # an override that calls super().train_step
            class Config(Trainer.Config):
                pass
            calls = 0
            def train_step(self, data_iterator):
                self.calls += 1
                super().train_step(data_iterator)
        class OwnTrainer(Trainer):  # an override that replaces it (its own step, its own OOM)
            calls = 0
            def train_step(self, data_iterator):
                self.calls += 1
                if self.step - 1 == int(os.environ.get("STANDIN_OOM_AT", "-1")):
                    raise torch.OutOfMemoryError("CUDA out of memory (stand-in subclass)")
        class DeepTrainer(SuperTrainer):  # two overrides deep, each calling super()
            def train_step(self, data_iterator):
                self.calls += 1
                super().train_step(data_iterator)
        class NoOverride(SuperTrainer):  # inherits SuperTrainer's
            pass
    """,
    "titan_subclass.py": """
        import sys
        import my_trainers
        cls = getattr(my_trainers, sys.argv[1])
        t = cls()
        t.train(int(sys.argv[2]))
        # Configurable's own __init_subclass__ still ran (the probe's wraps it): SuperTrainer's Config
        # is wired to SuperTrainer; train_step ran once per step at each override level.
        assert my_trainers.SuperTrainer.Config._owner is my_trainers.SuperTrainer, my_trainers.SuperTrainer.Config._owner
        print("calls", t.calls)
    """,
}


def run_job(root, folder, argv, **env):
    full = dict(os.environ, PYTHONPATH=f"{SITE}:{PROBE}:{root}", TRAINSCOPE_PROBE_DIR=folder, RANK="0",
                WORLD_SIZE="2", TRAINSCOPE_OOM_EXIT=str(OOM_EXIT), **env)
    full.pop("TRAINSCOPE_PROBE_PROFILE_STEPS", None)
    return subprocess.run([sys.executable, *argv], cwd=root, env=full, capture_output=True, text=True, timeout=120)


def rows(folder):
    with open(os.path.join(folder, "rank0.steps.jsonl")) as f:
        return [json.loads(line) for line in f]


def check_job(root, name, argv, tokens, losses, says=None):
    folder = os.path.join(root, name)
    r = run_job(root, folder, argv + ["3"])
    assert r.returncode == 0, f"{name}: exit {r.returncode}: {r.stderr[-2000:]}"
    assert says is None or says in r.stdout, f"{name}: printed {r.stdout!r}, want {says!r}"
    got = rows(folder)
    assert [g["step"] for g in got] == [0, 1, 2], got
    assert all(g["tokens"] == tokens for g in got), f"{name}: tokens {[g['tokens'] for g in got]}, want {tokens}"
    assert [g["loss"] for g in got] == losses, f"{name}: losses {[g['loss'] for g in got]}, want {losses}"
    assert all(g["step_time_ns"] > 0 and g["peak_bytes"] > 0 for g in got), got
    oom = os.path.join(root, name + "-oom")
    r = run_job(root, oom, argv + ["3"], STANDIN_OOM_AT="1")
    assert r.returncode == OOM_EXIT, f"{name}: OOM in a step exited {r.returncode}, want {OOM_EXIT}: {r.stderr[-2000:]}"
    with open(os.path.join(oom, "rank0.exit.json")) as f:
        record = json.load(f)
    assert record["class"] == "oom" and "OutOfMemoryError" in record["error"], record
    assert len(rows(oom)) == 1, rows(oom)  # the step before the OOM
    print(f"{name}: 3 steps -> 3 rows of {tokens} tokens, losses {losses}; OOM in step 1 -> exit {OOM_EXIT}, 1 row")


def check_megatron_skips(root):
    """--iterations-to-skip 1,3 over 5 iterations: iterations 1 and 3 never reach train_step (no row);
    iteration 4's update is refused (skipped_iter 1): its row says skipped, with its loss."""
    folder = os.path.join(root, "megatron-skip")
    r = run_job(root, folder, ["pretrain_standin.py", "5"], STANDIN_SKIP="1,3", STANDIN_NAN_AT="4")
    assert r.returncode == 0, f"megatron-skip: exit {r.returncode}: {r.stderr[-2000:]}"
    got = rows(folder)
    seen = [(g["step"], g["iteration"], g.get("skipped", False), g["loss"]) for g in got]
    assert seen == [(0, 2, False, 3.5), (1, 4, True, 5.5), (2, 5, False, 6.5)], seen
    print(f"megatron --iterations-to-skip 1,3 of 5: rows (step, iteration, skipped, loss) {seen}")


def check_standins():
    with tempfile.TemporaryDirectory(prefix="framework_hooks.") as root:
        for rel, text in STANDINS.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(textwrap.dedent(text))
        # global batch 8 x seq 16 (not x WORLD_SIZE 2); the loss dict's "lm loss"
        check_job(root, "megatron", ["pretrain_standin.py"], 128, [2.5, 3.5, 4.5])
        check_megatron_skips(root)
        # accumulation 2 x local batch 2 x dp 1x2 x seq 16; torchtitan's train_step returns no loss
        check_job(root, "titan", ["-m", "torchtitan.train"], 128, [None, None, None])
        # A job's Trainer subclass: its own train_step measured, once per step however deep the
        # super() chain (each override counts its own calls: `calls` levels x 3 steps).
        for cls, levels in (("SuperTrainer", 1), ("OwnTrainer", 1), ("DeepTrainer", 2), ("NoOverride", 1)):
            check_job(root, "titan-" + cls, ["titan_subclass.py", cls], 128, [None, None, None], f"calls {3 * levels}")


def main():
    for d in (MEGATRON, TITAN):
        if not os.path.exists(os.path.join(d, ".complete")):
            print(f"skip: {d} is not installed (scripts/setup installs it)")
            return SKIP
    check_megatron_source()
    check_titan_source()
    check_standins()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
