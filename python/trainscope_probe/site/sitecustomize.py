"""Put on a trial's PYTHONPATH by `trainscope tune --runner …` (every external runner): when the job
imports transformers' Trainer, DeepSpeed's engine, Megatron-LM's training module or torchtitan's
Trainer, the probe is installed there (trainscope_probe.hf / ds / megatron / titan .install). Only in a
process with TRAINSCOPE_PROBE_DIR set; the launcher's own process (torchrun, accelerate launch) runs
no Trainer and is left alone. Under --launcher slurm it also sets each srun task's
torch.distributed variables from Slurm's, and one intra-op thread per task where a node runs several
(_ranks_from_slurm). A sitecustomize already on the path after this one still runs."""
import importlib.abc
import importlib.util
import os
import sys


def _chain_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        path = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_trainscope_next_sitecustomize", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_HOOKS = {"transformers.trainer": "trainscope_probe.hf", "deepspeed.runtime.engine": "trainscope_probe.ds",
          "megatron.training.training": "trainscope_probe.megatron", "torchtitan.trainer": "trainscope_probe.titan"}
if os.environ.get("TRAINSCOPE_PROBE_CPU_FSDP") == "1":  # CPU trials only: Accelerate's FSDP on Gloo ranks
    _HOOKS["accelerate.state"] = "trainscope_probe.cpu_fsdp"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs the probe's install() right after the module it hooks has been executed."""

    def __init__(self):
        self.pending = set(_HOOKS)

    def find_spec(self, name, path=None, target=None):
        if name not in self.pending:
            return None
        self.pending.discard(name)
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)  # the finders after this one (it no longer answers `name`)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_install(module):
            exec_module(module)
            importlib.import_module(_HOOKS[name]).install()

        spec.loader.exec_module = exec_and_install
        return spec


def _die_with_parent():
    """Every process of a trial dies with the one that started it: torchrun starts its ranks in
    sessions of their own, out of the trial's process group that the tuner kills on a hang."""
    try:
        import ctypes
        import signal
        libc = ctypes.CDLL(None, use_errno=True)
        parent = os.getppid()
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the call: nothing would signal us
            os._exit(1)
    except (OSError, AttributeError):
        pass


def _first_host(nodelist):
    """The first host of a Slurm host list: "n1", "n[01-04,07]x,m2" -> "n01x"."""
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            end = i
            break
    item = nodelist[:end]
    if "[" not in item:
        return item
    head, rest = item.split("[", 1)
    inner, tail = rest.split("]", 1)
    return head + inner.split(",")[0].split("-")[0] + tail


def _tasks_on_node(spec, node):
    """This node's count in Slurm's tasks-per-node list: "2(x3),1" is 2 on nodes 0-2, 1 on node 3."""
    first = node
    for item in spec.split(","):
        count, _, times = item.partition("(x")
        try:
            n = int(times.rstrip(")")) if times else 1
            if first < n:
                return int(count)
        except ValueError:
            return 1
        first -= n
    return 1


def _ranks_from_slurm():
    """--launcher slurm (TRAINSCOPE_PROBE_SLURM): each srun task is one rank; torch.distributed's
    variables are Slurm's (MASTER_PORT is the trial's, set by the tuner). Recorded per rank in
    probe/rankR.launch.json. A process whose RANK is set (a launch's child) keeps it."""
    env = os.environ
    if not env.get("TRAINSCOPE_PROBE_SLURM") or "SLURM_PROCID" not in env or "RANK" in env:
        return
    tasks = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_NTASKS", "1")
    try:
        node = int(env.get("SLURM_NODEID", "0"))
    except ValueError:
        node = 0
    local = _tasks_on_node(tasks, node)
    env.update({"RANK": env["SLURM_PROCID"], "WORLD_SIZE": env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1")),
                "LOCAL_RANK": env.get("SLURM_LOCALID", "0"), "LOCAL_WORLD_SIZE": str(local),
                "MASTER_ADDR": _first_host(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "127.0.0.1"))})
    # torchrun's rule for the tasks of one node (job.cpp, rankThreads): one intra-op thread each where
    # the node runs more than one and the user set none (set before torch is imported: libgomp reads
    # it when it loads).
    if env.get("TRAINSCOPE_THREADS_SOURCE") == "per-node":
        if local > 1 and not env.get("OMP_NUM_THREADS"):
            env.update({"OMP_NUM_THREADS": "1", "TRAINSCOPE_THREADS_SOURCE": "runner"})
        else:
            env["TRAINSCOPE_THREADS_SOURCE"] = "none"
    try:
        import json
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID",
                "SLURM_STEP_ID", "SLURMD_NODENAME", "SLURM_STEP_NODELIST", "OMP_NUM_THREADS", "TRAINSCOPE_THREADS_SOURCE")
        path = os.path.join(env["TRAINSCOPE_PROBE_DIR"], "rank%s.launch.json" % env["RANK"])
        with open(path + ".tmp", "w") as f:
            json.dump(dict({k: env.get(k) for k in keys}, launcher="slurm"), f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


if os.environ.get("TRAINSCOPE_PROBE_DIR"):
    _die_with_parent()
    _ranks_from_slurm()
    sys.meta_path.insert(0, _AfterImport())
_chain_next_sitecustomize()
