"""Which modules take hooks, and hook handles that are removed together.

Every pass that hooks a model (timing, shapes, memory, ops ranges, backward)
registers through ``HookHandles.registering()``: if registering fails half
way, what was added is removed, and ``remove()`` takes every hook off again -
a model is never left with hooks on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class HookHandles:
    """Handles of hooks registered together, removed together."""

    def __init__(self) -> None:
        self._items: list[Any] = []

    def add(self, handle: Any) -> None:
        self._items.append(handle)

    def remove(self) -> None:
        for handle in self._items:
            handle.remove()
        self._items.clear()

    def __bool__(self) -> bool:
        return bool(self._items)

    @contextlib.contextmanager
    def registering(self) -> Iterator[HookHandles]:
        """Register inside the block; on any error, remove what it added."""
        try:
            yield self
        except BaseException:
            self.remove()
            raise


def visible_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``named_modules()`` without the insides of ``torch.jit.script``-ed submodules.

    A scripted submodule inside an eager model refuses Python hooks, and its own
    submodules run inside TorchScript where hooks never fire: it is one leaf
    layer (its time shows in its parent's self time), not a tree. A
    ``torch.compile``-d submodule is one leaf too, timed around the compiled
    call: hooks inside it would be traced by dynamo, break its graph and
    trigger recompiles, i.e. change what is measured.
    """
    from layerprof.capture.distributed import user_modules

    out: list[tuple[str, torch.nn.Module]] = []
    opaque: list[str] = []
    for path, module in user_modules(model):  # DDP/FSDP wrappers left out of the paths
        if any(path.startswith(o + ".") for o in opaque):
            continue
        if path and (_is_script(module) or _is_compiled(module)):
            opaque.append(path)
        out.append((path, module))
    return out


def hookable_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The visible modules that take forward hooks (not scripted ones)."""
    if _is_script(model):
        return []  # a whole scripted model: runner.py's TorchScript path handles it
    return [(p, m) for p, m in visible_modules(model) if not _is_script(m)]


def _is_compiled(module: Any) -> bool:
    return type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")


def _is_script(module: Any) -> bool:
    import torch

    return isinstance(module, torch.jit.ScriptModule)
