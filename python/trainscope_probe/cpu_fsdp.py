"""A CPU-only shim (`tune --runner hf` on CPU FSDP trials): let Accelerate run FSDP on Gloo ranks.

Accelerate 1.15 (accelerate/state.py, AcceleratorState.__init__) turns an FSDP plugin into
DistributedType.FSDP only for accelerator backends (MULTI_GPU, MULTI_XPU, ...); on CPU ranks the state
stays MULTI_CPU, the plugin is dropped and the Trainer wraps the model in DDP. PyTorch's FSDP itself
(FSDP 1 and fully_shard) runs on Gloo. `install()` wraps AcceleratorState.__init__: when Accelerate
left a multi-process CPU state without FSDP although FSDP was handed a plugin, the state becomes FSDP
with that plugin, as the accelerator branch would set it, and its device `cpu` (not `cpu:0`, which
FSDP 1 refuses as its device_id beside its compute device `cpu`).

The sitecustomize installs it only where the tuner set TRAINSCOPE_PROBE_CPU_FSDP=1 (CPU trials);
GPU trials never load it. Nothing else of Accelerate is changed.
"""
import inspect
import os


def install():
    if os.environ.get("TRAINSCOPE_PROBE_CPU_FSDP") != "1":
        return
    import accelerate.state as state
    import torch

    cls = state.AcceleratorState
    if getattr(cls, "_trainscope_cpu_fsdp", False):
        return
    init = cls.__init__
    signature = inspect.signature(init)

    def __init__(self, *a, **kw):
        init(self, *a, **kw)
        try:
            plugin = signature.bind(self, *a, **kw).arguments.get("fsdp_plugin")
        except TypeError:
            plugin = kw.get("fsdp_plugin")
        if (self.distributed_type == state.DistributedType.MULTI_CPU and getattr(self, "fsdp_plugin", None) is None
                and plugin is not None):
            self.distributed_type = state.DistributedType.FSDP
            if self._mixed_precision != "no":
                plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = plugin
            state.PartialState._shared_state["distributed_type"] = self.distributed_type
            # A MULTI_CPU state's device is torch.device("cpu", local index % 1) = cpu:0, which
            # Accelerate hands FSDP 1 as its device_id; FSDP 1 computes on torch.cpu.current_device(),
            # "cpu", and refuses the pair ("Inconsistent compute device and `device_id`: cpu vs
            # cpu:0", torch 2.11 _init_utils._get_compute_device). The same device, named as FSDP names it.
            if getattr(self, "device", None) is not None and self.device.type == "cpu":
                self.device = state.PartialState._shared_state["device"] = torch.device("cpu")

    cls.__init__ = __init__
    cls._trainscope_cpu_fsdp = True
