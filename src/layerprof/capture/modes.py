"""The capture modes, in the order the runner asks them: the first that wants the run's
options measures its layers (``capture.layerpass`` says what a mode is)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from layerprof.capture.compiled.mode import CompiledMode
from layerprof.capture.hooks.mode import HooksMode
from layerprof.capture.ops.mode import OpsMode
from layerprof.capture.scripted.mode import ScriptedMode

if TYPE_CHECKING:
    from layerprof.capture.layerpass import LayerMode
    from layerprof.capture.options import RunOptions


class _ModeKind(Protocol):
    """A mode's class: whether it measures a run, and its instance for one run."""

    @staticmethod
    def wants(opts: RunOptions) -> bool: ...

    @classmethod
    def start(
        cls, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], opts: RunOptions
    ) -> LayerMode: ...


# --compile and the scripted kinds first: each refuses --ops in RunOptions; hooks last.
MODES: tuple[_ModeKind, ...] = (CompiledMode, ScriptedMode, OpsMode, HooksMode)


def choose(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], opts: RunOptions
) -> LayerMode:
    """The mode that measures this run's layers."""
    kind = next(m for m in MODES if m.wants(opts))
    return kind.start(model, args, kwargs, opts)
