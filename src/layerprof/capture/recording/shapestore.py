"""Shapes of each layer's inputs and outputs, kept once per layer: the store the Recorder
fills on its first forward, and ``ShapeCapture``, one forward's worth for the runner."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layerprof.capture.modules import ForwardWrapper, HookHandles, wrappable_modules
from layerprof.capture.shapes import inputs_tree, shape_tree, tensor_bytes

if TYPE_CHECKING:
    import torch


@dataclass
class ShapeStore:
    """Input/output shapes and output bytes of each layer's first call."""

    shapes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    output_bytes: dict[str, int] = field(default_factory=dict)
    _claimed: set[str] = field(default_factory=set)

    def claim(self, path: str) -> bool:
        """True for the first call of ``path`` (the one whose shapes are kept)."""
        if path in self._claimed:
            return False
        self._claimed.add(path)
        return True

    def keep(self, path: str, ins: Any, output: Any) -> None:
        self.shapes[path] = (ins, shape_tree(output))
        self.output_bytes[path] = tensor_bytes(output)


def shape_wrapper(
    path: str,
    store: ShapeStore,
    inner: Callable[..., Any],
    skip: Callable[[int], None] | None = None,
    mark: Callable[[], int] = time.perf_counter_ns,
) -> Callable[..., Any]:
    """A wrapper recording the shapes of ``path``'s first call around ``inner``.

    With ``skip``, the time spent on the shapes is logged as pseudo-calls
    (``skip(start)``), so a Recorder takes it out of the enclosing layer.
    """

    def shaped(*args: Any, **kwargs: Any) -> Any:
        if not store.claim(path):
            return inner(*args, **kwargs)
        t0 = mark()
        ins = inputs_tree(args, kwargs)
        if skip is not None:
            skip(t0)
        out = inner(*args, **kwargs)
        t0 = mark()
        store.keep(path, ins, out)
        if skip is not None:
            skip(t0)
        return out

    return shaped


class ShapeCapture:
    """Records input/output shapes of each module's first call, for one pass.

    Wrappers like the Recorder's (scripted and compiled modules as leaves);
    all removed on exit.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._store = ShapeStore()
        self._wrappers = HookHandles()

    @property
    def shapes(self) -> dict[str, tuple[Any, Any]]:
        return self._store.shapes

    @property
    def output_bytes(self) -> dict[str, int]:
        return self._store.output_bytes

    def attach(self) -> ShapeCapture:
        with self._wrappers.registering() as wrappers:
            for path, module in wrappable_modules(self.model):
                wrappers.add(
                    ForwardWrapper(module, functools.partial(shape_wrapper, path, self._store))
                )
        return self

    def detach(self) -> None:
        self._wrappers.remove()

    def __enter__(self) -> ShapeCapture:
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.detach()
