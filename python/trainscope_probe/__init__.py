"""trainscope_probe — measures a training job's steps for `trainscope tune --runner …`.

A job carries it in one of two ways:
  * a Hugging Face Trainer, DeepSpeed, Megatron-LM or torchtitan job, unmodified: the runner puts
    `trainscope_probe/site` on the trial's PYTHONPATH, whose sitecustomize registers
    `TrainscopeCallback` on every Trainer (hf.py), hooks the DeepSpeed engine's step (ds.py),
    Megatron-LM's `train_step` (megatron.py) or torchtitan's `Trainer.train_step` (titan.py);
  * any other loop adds one line around its optimizer step:

        import trainscope_probe as probe
        for batch in loader:
            with probe.step(tokens=batch["input_ids"].numel()) as s:
                loss = model(**batch).loss; loss.backward(); opt.step(); opt.zero_grad()
                s.loss = loss.item()

Each rank appends one JSON line per step to $TRAINSCOPE_PROBE_DIR/rank<R>.steps.jsonl: the step, its
wall time (start and duration in ns), the global batch's tokens (this rank's × the data-parallel
world), the loss and the peak memory so far (torch.cuda.max_memory_allocated on a GPU, the process's
peak RSS on the CPU). `trainscope tune` turns those rows, and the traces below, into the trial's run
database (steps and memory from the rows, the trace through the Kineto importer).

Environment (set by the runner; without TRAINSCOPE_PROBE_DIR the probe records nothing):
  TRAINSCOPE_PROBE_DIR            the folder of this trial's rows, traces and exit records
  TRAINSCOPE_PROBE_PROFILE_STEPS  trace this many steps with torch.profiler (from step 1; 0: none)
  TRAINSCOPE_MEM_LIMIT            bytes per rank: on the CPU the peak RSS may not pass it (checked after
                                  each step); over it is an out-of-memory error
  TRAINSCOPE_OOM_EXIT             the tuner's out-of-memory exit status (3)
  TRAINSCOPE_PROBE_INJECT         testing: crash | hang | oom in the first step
  TRAINSCOPE_THREADS_SOURCE       who set this rank's OMP_NUM_THREADS (recorded in rank<R>.threads.json)

A profile trial whose job runs its own torch.profiler leaves Kineto to it (profiler.py): the probe's
trace is skipped or cut short, and rank<R>.notice.json says so (the trial's message); steps are kept.

Out of memory (torch.OutOfMemoryError, MemoryError, the limit above) ends the rank with the OOM exit
status and writes rank<R>.exit.json saying so: torchrun reports any failed rank as its own status 1,
so the tuner reads the class there, never from a log. A fatal signal is written to rank<R>.fault by
faulthandler (a crash).
"""
import contextlib
import faulthandler
import json
import os
import resource
import signal
import sys
import time

OOM_EXIT = int(os.environ.get("TRAINSCOPE_OOM_EXIT", "3"))


def _env_int(name, default=0):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        sys.stderr.write(f"trainscope_probe: {name}={os.environ.get(name)!r} is not an integer; ignored\n")
        return default


def _rank():
    return _env_int("RANK", 0)


def _world():
    return max(1, _env_int("WORLD_SIZE", 1))


def peak_rss_bytes():
    """The process's peak resident set (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cuda():
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()


def peak_memory_bytes():
    if _cuda():
        import torch
        return int(torch.cuda.max_memory_allocated())
    return peak_rss_bytes()


def _is_oom(exc):
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return oom is not None and isinstance(exc, oom)


def write_record(path, out):
    """Write a JSON record whole (a temporary beside it, never followed through a link, then renamed
    over PATH); a record of what ran is never the job's failure, so an error is only reported."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(out, f)
        os.replace(tmp, path)
    except OSError as e:
        sys.stderr.write(f"trainscope_probe: cannot write {path}: {e}\n")


class Probe:
    """One rank's recorder. Use the module-level `step()` / `get()` rather than making one."""

    def __init__(self, folder):
        self.folder = folder
        self.rank = _rank()
        self.world = _world()
        self.profile_steps = max(0, _env_int("TRAINSCOPE_PROBE_PROFILE_STEPS", 0))
        self.mem_limit = max(0, _env_int("TRAINSCOPE_MEM_LIMIT", 0))
        self.inject = os.environ.get("TRAINSCOPE_PROBE_INJECT", "")
        self.step_index = 0
        self._profiler = None
        self._job_profilers = set()  # the job's own profilers (ids) prepared or started, not yet exited
        self._own_call = False       # inside our own profiler's calls (profiler.py's hooks: not the job's)
        self._traced = None          # why this rank's trace was skipped or cut short, once decided
        os.makedirs(folder, exist_ok=True)
        self._rows = open(os.path.join(folder, f"rank{self.rank}.steps.jsonl"), "a", buffering=1)
        self._fault = open(os.path.join(folder, f"rank{self.rank}.fault"), "w")
        faulthandler.enable(file=self._fault, all_threads=False)
        self._write_threads()
        if self.profile_steps > 0:
            try:
                from . import profiler
                profiler.install()
            except Exception as e:  # noqa: BLE001 — a torch without these profiler methods: trace anyway
                self._note(f"the probe could not watch the job's torch.profiler ({type(e).__name__}: {e}); "
                           "a profiler of the job's own may clash with the probe's trace")

    def _write_threads(self):
        """rank<R>.threads.json: the intra-op threads this rank got, OMP_NUM_THREADS as it saw it and who
        set it (TRAINSCOPE_THREADS_SOURCE: user, runner, torchrun, accelerate, none; the tuner's
        rankThreads), read into the trial's `threads` meta key."""
        torch = sys.modules.get("torch")
        record = {"rank": self.rank, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                  "source": os.environ.get("TRAINSCOPE_THREADS_SOURCE"),
                  "torch_threads": torch.get_num_threads() if torch is not None else None}
        write_record(os.path.join(self.folder, f"rank{self.rank}.threads.json"), record)

    # -- the step ---------------------------------------------------------------------------------
    def begin(self):
        self._maybe_start_profiler()
        self._t0 = time.time_ns()
        self._c0 = time.perf_counter_ns()
        if self.step_index == 0 and self.inject:
            self._injected()

    def end(self, tokens=0, loss=None, global_tokens=None, extra=None):
        """Closes the step: `tokens` is this rank's tokens in it (all micro-batches), counted for the
        data-parallel world as tokens × WORLD_SIZE; a hook that knows the global batch (Megatron's
        global_batch_size × seq_length: tensor / pipeline ranks share a batch) passes `global_tokens`.
        `extra`: a hook's own fields of the row (Megatron's "iteration" and "skipped")."""
        if _cuda():
            import torch
            torch.cuda.synchronize()
        dt = time.perf_counter_ns() - self._c0
        peak = peak_memory_bytes()
        row = {"rank": self.rank, "step": self.step_index, "start_ns": self._t0, "step_time_ns": dt,
               "tokens": int(global_tokens) if global_tokens is not None else int(tokens) * self.world,
               "loss": None if loss is None else float(loss),
               "peak_bytes": int(peak), "world": self.world}
        row.update(extra or {})
        self._rows.write(json.dumps(row) + "\n")
        self.step_index += 1
        if self._profiler is not None:
            try:
                self._own(self._profiler.step)
            except Exception as e:  # noqa: BLE001 — a profiler's error never ends the job's step
                self._profiler = None
                self._note(f"the probe's torch.profiler failed at step {self.step_index} ({type(e).__name__}: {e}): "
                           "no trace; steps and memory are measured")
            if self._profiler is not None and self.step_index >= 1 + self.profile_steps:
                self._stop_profiler()
        if self.mem_limit and not _cuda() and peak > self.mem_limit:
            raise MemoryError(f"peak RSS {peak} bytes is over the per-rank limit {self.mem_limit} "
                              "(--mem-limit)")

    # -- profile trials ----------------------------------------------------------------------------
    # Kineto allows one profiler a process: a job that runs its own torch.profiler (a `with
    # torch.profiler.profile()` around its loop, an HF callback stepping one) is left to it — the probe
    # does not trace while one is prepared or running, stops its own when the job's starts, and never
    # lets a profiler's error end the job (profiler.py; the steps and memory are measured regardless).
    def _maybe_start_profiler(self):
        if self.profile_steps <= 0 or self.step_index != 1 or self._profiler is not None or self._traced:
            return
        import torch
        enabled = getattr(torch.autograd, "_profiler_enabled", lambda: False)
        if self._job_profilers or enabled():
            return self._note("the job's own torch.profiler was active at step 1: the probe did not trace "
                              "(Kineto allows one profiler); steps and memory are measured")
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        # record_shapes: a CPU job's collectives are the gloo:<op> annotations, sized only by their
        # inputs' shapes and types (without them every imported collective had 0 bytes).
        profiler = torch.profiler.profile(activities=acts, record_shapes=True)
        try:
            self._own(profiler.__enter__)
        except Exception as e:  # noqa: BLE001 — a profiler we did not see holds Kineto: the job's
            return self._note(f"the probe's torch.profiler did not start ({type(e).__name__}: {e}): no trace; "
                              "steps and memory are measured")
        self._profiler = profiler

    def _stop_profiler(self, why=None):
        """Ends our trace: kept (rank<R>.trace.json) where at least one step was traced whole."""
        p, self._profiler = self._profiler, None
        traced = self.step_index - 1
        try:
            self._own(p.__exit__, None, None, None)
        except Exception as e:  # noqa: BLE001 — the job's profiler ended the session under ours
            return self._note(f"the probe's torch.profiler did not stop cleanly ({type(e).__name__}: {e}): "
                              "no trace; steps and memory are measured")
        if why is not None and traced < 1:
            return self._note(why + ": the probe's trace had no whole step, none kept")
        path = os.path.join(self.folder, f"rank{self.rank}.trace.json")
        try:
            p.export_chrome_trace(path + ".part")
            os.replace(path + ".part", path)
        except Exception as e:  # noqa: BLE001 — a full disk or a disturbed Kineto: no trace, never the job's end
            try:
                os.remove(path + ".part")  # our own partial file
            except OSError:
                pass
            return self._note(f"the probe's trace was not written ({type(e).__name__}: {e}); "
                              "steps and memory are measured")
        if why is not None:
            self._note(f"{why}: the probe's trace keeps step{'s 1-' if traced > 1 else ' '}{traced}")

    def job_profiler_starts(self, token):
        """The job prepares or starts a profiler of its own (profiler.py): ours gives way to it."""
        self._job_profilers.add(token)
        if self._profiler is not None:
            self._stop_profiler(f"the job started its own torch.profiler at step {self.step_index}")

    def job_profiler_ends(self, token):
        self._job_profilers.discard(token)

    def _own(self, call, *a):
        self._own_call = True
        try:
            return call(*a)
        finally:
            self._own_call = False

    def _note(self, line):
        """One line on why this rank's trace is missing or short: rank<R>.notice, which the tuner puts
        into the trial's message (job_trial.cpp)."""
        self._traced = line
        sys.stderr.write(f"trainscope_probe: rank {self.rank}: {line}\n")
        write_record(os.path.join(self.folder, f"rank{self.rank}.notice.json"), {"rank": self.rank, "notice": line})

    def finish(self):
        if self._profiler is not None:  # fewer steps than asked for: what was traced is kept
            self._stop_profiler()
        self._rows.flush()

    # -- failures ----------------------------------------------------------------------------------
    def _injected(self):
        if self.inject == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif self.inject == "hang":
            while True:
                time.sleep(3600)
        elif self.inject == "oom":
            hold = []
            limit = self.mem_limit or (1 << 62)
            while peak_rss_bytes() <= limit:
                hold.append(bytearray(64 << 20))  # touched pages: RSS grows
            raise MemoryError(f"peak RSS {peak_rss_bytes()} bytes is over the per-rank limit {limit} (--mem-limit)")

    def exit_oom(self, exc):
        """Records the out-of-memory error and ends the process with the tuner's OOM status."""
        try:
            self.finish()
            with open(os.path.join(self.folder, f"rank{self.rank}.exit.json"), "w") as f:
                json.dump({"rank": self.rank, "exit": OOM_EXIT, "class": "oom",
                           "error": f"{type(exc).__name__}: {exc}"}, f)
            sys.stderr.write(f"trainscope_probe: rank {self.rank} out of memory: {type(exc).__name__}: {exc}\n")
            sys.stderr.flush()
        finally:
            os._exit(OOM_EXIT)


_probe = None


def get():
    """This process's probe, or None when the job is not a trial (no TRAINSCOPE_PROBE_DIR)."""
    global _probe
    folder = os.environ.get("TRAINSCOPE_PROBE_DIR")
    if _probe is None and folder:
        _probe = Probe(folder)
        _install_excepthook()
        import atexit
        atexit.register(_at_exit)
    return _probe


def _at_exit():
    """The job returned: its rows flushed, and a process group it left open torn down before the
    interpreter's own teardown (Gloo's threads otherwise abort the exit: "terminate called without
    an active exception", a crash of a job that finished)."""
    if _probe is not None:
        _probe.finish()
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            # Every rank past its last collective first (a peer still in one would be cut off);
            # a peer that is gone fails the bounded barrier, and the group is left as it is.
            import datetime
            if dist.get_backend() == "gloo" and dist.get_world_size() > 1:
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
            elif dist.get_world_size() > 1:
                dist.barrier()
            dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 — the job's rows are written; its exit is its own
        sys.stderr.write(f"trainscope_probe: destroy_process_group at exit: {e}\n")
    # The job returned: a fatal signal after this (rankR.fault) is the interpreter's teardown — a
    # library's thread or finalizer (DeepSpeed 0.19's CPU path: "terminate called without an active
    # exception") — and the tuner keeps the measured steps, naming it (job_trial.cpp).
    if _probe is not None:
        with open(os.path.join(_probe.folder, f"rank{_probe.rank}.returned"), "w") as f:
            f.write("the job returned; its rows are flushed and its process group destroyed\n")
        if _probe.inject == "teardown":  # testing: a fatal signal in the exit, after the job's rows
            os.abort()


class _Step:
    def __init__(self, tokens):
        self.tokens = tokens
        self.loss = None


@contextlib.contextmanager
def step(tokens=0):
    """Measures one optimizer step of a plain or Accelerate loop (set `.tokens` / `.loss` inside)."""
    s = _Step(tokens)
    p = get()
    if p is None:
        yield s
        return
    p.begin()
    try:
        yield s
    except BaseException as e:  # noqa: B036 — only out-of-memory is ours; the rest goes on
        if _is_oom(e):
            p.exit_oom(e)
        raise
    p.end(s.tokens, s.loss)


def measure(call, global_tokens=None, loss_of=None, extra=None, extra_of=None):
    """Runs `call()` as one measured step and returns what it returns: the hooks of a framework's own
    step function (megatron.py, titan.py), where the job has no loop to wrap. `loss_of(result)` gives
    the step's loss or None (an error there records no loss, never fails the job); `extra` and
    `extra_of(result)` give the row's own fields (Probe.end); out of memory in the step ends the rank
    with the OOM status, as `step()` does."""
    p = get()
    if p is None:
        return call()
    p.begin()
    try:
        out = call()
    except BaseException as e:  # noqa: B036 — only out-of-memory is ours; the rest goes on
        if _is_oom(e):
            p.exit_oom(e)
        raise
    loss, fields = None, dict(extra or {})
    try:
        loss = loss_of(out) if loss_of is not None else None
    except Exception as e:  # noqa: BLE001 — a loss we cannot read is not the job's failure
        sys.stderr.write(f"trainscope_probe: the step's loss is not readable: {e}\n")
    try:  # apart from the loss: a refused update's "skipped" is kept where the loss is unreadable
        fields.update(extra_of(out) if extra_of is not None else {})
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(f"trainscope_probe: the step's fields are not readable: {e}\n")
    p.end(loss=loss, global_tokens=global_tokens, extra=fields)
    return out


def _install_excepthook():
    previous = sys.excepthook

    def hook(kind, value, tb):
        if _probe is not None and _is_oom(value):
            previous(kind, value, tb)
            _probe.exit_oom(value)
        previous(kind, value, tb)

    sys.excepthook = hook


def site_dir():
    """The folder whose sitecustomize injects the probe into an unmodified Trainer script."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
