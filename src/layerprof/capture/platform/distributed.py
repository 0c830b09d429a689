"""Running under ``torchrun``: which process this is, DDP for ``--ddp``, wrappers unwrapped.

torchrun sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` for every process.
Each rank profiles its own replica; output files get the rank in their name
(``p.rank-1.json``, the pattern ``layerprof analyze`` reads ranks from), only
rank 0 prints its report, and ``--device cuda`` means the rank's own GPU
(``cuda:LOCAL_RANK``). A process group is needed only for ``--ddp``, which
wraps the model in ``DistributedDataParallel`` (gloo on CPU, NCCL on CUDA) so
that ``--train --backward`` steps all-reduce gradients as a training job does.

Layer paths are the user's model's, whatever wraps it: the wrappers that hold
the real module under one attribute (``DistributedDataParallel.module``,
``DataParallel.module``, FSDP's ``_fsdp_wrapped_module``, activation
checkpointing's ``_checkpoint_wrapped_module``) are left out of the layer list
and their attribute is dropped from the paths below them, so
``module.encoder.layers.0`` is reported as ``encoder.layers.0``. Hooks sit on
the user's modules, which the wrapper calls: the wrapper's own work (DDP's
buffer broadcast, FSDP's all-gathers before a unit runs) falls outside the
layer it wraps: in its parent's self time, or for the root wrapper, in the
latency only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layerprof.errors import UsageError
from layerprof.pivot.notes import Note

if TYPE_CHECKING:
    import torch

#: wrapper class name -> the attribute that holds the module it wraps
_WRAPPERS = {
    "DistributedDataParallel": "module",
    "DataParallel": "module",
    "FullyShardedDataParallel": "_fsdp_wrapped_module",
    "CheckpointWrapper": "_checkpoint_wrapped_module",
    "OffloadWrapper": "_checkpoint_wrapped_module",
}


@dataclass(frozen=True)
class _RankInfo:
    rank: int
    local_rank: int
    world_size: int

    @property
    def suffix(self) -> str:
        return f"rank-{self.rank}"


def rank_info() -> _RankInfo | None:
    """This process's rank when launched with more than one process, else None."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        return None
    if world <= 1:
        return None
    return _RankInfo(rank=rank, local_rank=local, world_size=world)


def _wrapped_attr(module: Any) -> str | None:
    """The attribute holding the module a DDP/FSDP/checkpoint wrapper wraps, else None."""
    attr = _WRAPPERS.get(type(module).__name__)
    if attr is None or not hasattr(module, "_modules"):
        return None
    return attr if attr in module._modules else None


def unwrap(model: Any) -> Any:
    """The user's model inside any wrappers around the root."""
    while (attr := _wrapped_attr(model)) is not None:
        model = model._modules[attr]
    return model


def user_modules(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """``named_modules()`` with wrappers left out and paths as in the user's model.

    ``named_modules`` yields a wrapper before what it wraps, so the attribute
    to drop is known by the time the paths below it come.
    """
    held: set[str] = set()  # full paths of modules a wrapper holds
    for path, module in model.named_modules():
        attr = _wrapped_attr(module)
        if attr is not None:
            held.add(f"{path}.{attr}" if path else attr)
            continue
        yield _user_path(path, held), module


def _user_path(path: str, held: set[str]) -> str:
    if not held or not path:
        return path
    kept: list[str] = []
    prefix = ""
    for part in path.split("."):
        prefix = f"{prefix}.{part}" if prefix else part
        if prefix not in held:
            kept.append(part)
    return ".".join(kept)


def wrapper_note(model: Any) -> Note | None:
    """What the layer rows of a wrapped model leave out, for the profile's notes."""
    names = []
    while (attr := _wrapped_attr(model)) is not None:
        names.append(type(model).__name__)
        model = model._modules[attr]
    if not names:
        return None
    return Note(
        "wrapper",
        f"{' > '.join(names)}: layer paths are those of the wrapped {type(model).__name__};"
        " the wrapper's own work (buffer broadcast, gradient hooks set-up) is in the latency,"
        " outside the layer rows",
        {"wrappers": tuple(names), "wrapped": type(model).__name__},
    )


def _wrap_ddp(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """``--ddp``: join torchrun's process group (gloo on CPU, NCCL on CUDA) and wrap the model."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    info = rank_info()
    if info is None or "MASTER_ADDR" not in os.environ:
        raise UsageError(
            "--ddp needs torchrun's environment (RANK, WORLD_SIZE > 1, MASTER_ADDR)",
            hint="torchrun --nproc-per-node 2 -m layerprof run ... --ddp",
        )
    if not dist.is_available():
        raise UsageError("--ddp: this torch build has no torch.distributed")
    cuda = device.startswith("cuda")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    if cuda:
        index = int(device.split(":", 1)[1]) if ":" in device else info.local_rank
        return DistributedDataParallel(model, device_ids=[index])
    return DistributedDataParallel(model)


@contextlib.contextmanager
def ddp_wrapped(model: torch.nn.Module, device: str, *, enabled: bool) -> Iterator[torch.nn.Module]:
    """The model, wrapped for ``--ddp`` when ``enabled``; the process group it
    joined is left afterwards (a clean exit, no NCCL warnings), also on errors."""
    if not enabled:
        yield model
        return
    import torch.distributed as dist

    joined = not dist.is_initialized()
    wrapped = _wrap_ddp(model, device)
    try:
        yield wrapped
    finally:
        if joined and dist.is_initialized():
            dist.destroy_process_group()
