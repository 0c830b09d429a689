"""torch.compile (re)compilations inside the measured windows of a run.

A compiled model that recompiles while it is being timed (a guard fails: a new
shape, a Python attribute that changes every call, hooks added) spends that
forward in Dynamo, and the time lands silently in the latency or in a layer.
:class:`CompileWatch` counts the frames Dynamo compiled inside named windows,
from ``torch._dynamo.utils.counters["frames"]["total"]`` (one per frame
Dynamo converts, i.e. per compile or recompile), so the profile can say so.

Nothing is imported: when Dynamo was never loaded nothing was compiled, and a
model that compiles lazily loads it inside the window, where the count starts
at zero.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import cast

from layerprof.pivot.notes import Note

__all__ = ["CompileWatch", "dynamo_compiling"]


class CompileWatch:
    """Counts of compilations per window name, in the order the windows ran."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    @contextlib.contextmanager
    def window(self, name: str) -> Iterator[None]:
        before = compiled_frames()
        try:
            yield
        finally:
            added = compiled_frames() - before
            if added > 0:
                self.counts[name] = self.counts.get(name, 0) + added

    def notes(self) -> list[Note]:
        """One note per window that compiled, or none."""
        return [
            Note(
                "recompile",
                f"torch.compile recompiled {n} time{'s' if n != 1 else ''} during the {name}:"
                " those forwards include compile time, so their times are too high"
                " (TORCH_LOGS=recompiles says why; more --warmup helps if it settles)",
                {"window": name, "count": n},
            )
            for name, n in self.counts.items()
        ]


def compiled_frames() -> int:
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return 0
    return int(counters["frames"]["total"])


def dynamo_compiling() -> Callable[[], bool]:
    """A test that is true only while Dynamo traces the code that calls it.

    ``torch.compiler.is_dynamo_compiling``: Dynamo folds it to True where it inlines a
    Recorder's wrapper or hook into a compiled caller's graph (``torch.compile(model)``
    called while ``model`` is recorded), so the wrapper's timing code is left out of the
    graph instead of breaking it; in eager code it returns False, at ~22 ns a call
    (``is_compiling`` costs ~73: it asks TorchScript first).
    """
    import torch

    test = getattr(torch.compiler, "is_dynamo_compiling", None) or torch.compiler.is_compiling
    return cast(Callable[[], bool], test)
