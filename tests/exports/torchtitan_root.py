"""tests/exports/torchtitan_root.py — the config torchtitan 0.3's ConfigManager parses in the tests.

`torchtitan/train.py --module llama3 --config llama3_8b` loads the registry function's
Trainer.Config; torchtitan.trainer imports torchtitan's distributed stack, which needs a torch newer
than this venv's 2.11 (torch.distributed.fsdp.DataParallelMeshDims). ConfigManager takes a fully
qualified module path as --module as well (its documented form for configs outside torchtitan), so
the tests pass `--module torchtitan_root --config root`: a root holding torchtitan's own sections
that trainscope's flags set, as the Trainer.Config has them (field names and types), with the
registry's optimizer (default_adamw: one catch-all AdamW group) and LR scheduler.
"""
from dataclasses import dataclass, field

from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer, default_adamw
from torchtitan.config import ParallelismConfig, TrainingConfig


@dataclass(kw_only=True)
class Root:
    hf_assets_path: str = "."
    optimizer: OptimizersContainer.Config = field(default_factory=OptimizersContainer.Config)
    lr_scheduler: LRSchedulersContainer.Config = field(default_factory=LRSchedulersContainer.Config)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)


def root():
    return Root(optimizer=default_adamw(lr=8e-4))
