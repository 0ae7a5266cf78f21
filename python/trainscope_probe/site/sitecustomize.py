"""Put on a trial's PYTHONPATH by `trainscope tune --runner hf|accelerate|deepspeed`: when the job
imports transformers' Trainer or DeepSpeed's engine, the probe is installed there
(trainscope_probe.hf.install, trainscope_probe.ds.install). Only in a
process with TRAINSCOPE_PROBE_DIR set; the launcher's own process (torchrun, accelerate launch) runs
no Trainer and is left alone. A sitecustomize already on the path after this one still runs."""
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


_HOOKS = {"transformers.trainer": "trainscope_probe.hf", "deepspeed.runtime.engine": "trainscope_probe.ds"}


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


if os.environ.get("TRAINSCOPE_PROBE_DIR"):
    _die_with_parent()
    sys.meta_path.insert(0, _AfterImport())
_chain_next_sitecustomize()
