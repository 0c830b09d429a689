"""The per-layer pass's contract: what the runner hands a mode, and what a mode is.

A mode is one way to get per-layer rows: hooks (``capture.hooks``), ops mode
(``capture.ops``), TorchScript / torch.export (``capture.scripted``) and
``--compile`` (``capture.compiled``). The runner picks the first mode in
``capture.modes`` that wants the run's options and calls, in this order:
``session()`` around the whole run, ``subject()`` for what the clean pass
times, and ``layer_pass()`` once after it. A new mode is a folder with a
``mode.py`` and one line in ``capture.modes``, not a branch in the runner.

No torch at import: the runner imports every mode to choose one.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from layerprof.capture.compilewatch import CompileWatch
    from layerprof.capture.options import RunOptions
    from layerprof.capture.progress import Progress
    from layerprof.pivot.profile import Profile


@dataclass(frozen=True)
class Pass:
    """Everything a per-layer pass needs: the model as the clean pass ran it, the
    run's options and the Profile of the clean pass (``base``) to add rows to."""

    model: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    forward: Callable[[], Any]
    sync: Callable[[], None]
    device: str
    opts: RunOptions
    progress: Progress
    base: Profile
    watch: CompileWatch
    program: Any = None  # the torch.export program behind an export model


class LayerMode(Protocol):
    """What the runner calls on the mode it chose."""

    def session(self) -> contextlib.AbstractContextManager[Any]:
        """Entered around the whole run (the clean pass included)."""
        ...

    def subject(self, model: Any, forward: Callable[[], Any]) -> tuple[Any, Callable[[], Any]]:
        """The model and forward the clean pass times (``--compile`` times the compiled one)."""
        ...

    def layer_pass(self, run: Pass) -> Profile:
        """The per-layer rows, added to ``run.base``."""
        ...


class AsGiven(abc.ABC):
    """A mode that times the model as given, with nothing around the run."""

    @classmethod
    def start(
        cls, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], opts: RunOptions
    ) -> LayerMode:
        """The mode for one run (a mode that keeps nothing per run needs no arguments)."""
        return cls()

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def subject(self, model: Any, forward: Callable[[], Any]) -> tuple[Any, Callable[[], Any]]:
        return model, forward

    @abc.abstractmethod
    def layer_pass(self, run: Pass) -> Profile:
        """The per-layer rows, added to ``run.base``."""
