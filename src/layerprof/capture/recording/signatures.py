"""The distinct input signatures a Recorder saw: each one's inputs, forwards and layer shapes.

A signature is the shapes of the model's inputs (``inputs_tree``); the first
forward with a new one records the layers' shapes into its ``ShapeStore``,
the forwards after it only count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from layerprof.capture.modules import ForwardWrapper
from layerprof.capture.recording.shapestore import ShapeStore, shape_wrapper
from layerprof.capture.shapes import describe_inputs, inputs_tree
from layerprof.pivot.sections.inputs import InputSignature


@dataclass
class Signature:
    """One distinct input signature: its description, forwards and shapes."""

    inputs: tuple[str, ...]
    forwards: int = 0
    store: ShapeStore = field(default_factory=ShapeStore)


class Signatures:
    """Input signatures by their shapes, in the order they were first seen."""

    def __init__(self) -> None:
        self._by_key: dict[str, Signature] = {}

    def of(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Signature:
        """The signature of a forward's inputs (a new one the first time)."""
        key = repr(inputs_tree(args, kwargs))
        sig = self._by_key.get(key)
        if sig is None:
            sig = self._by_key[key] = Signature(inputs=describe_inputs(args, kwargs))
        return sig

    def main(self) -> Signature | None:
        """The signature with the most forwards."""
        sigs = [s for s in self._by_key.values() if s.forwards]
        return max(sigs, key=lambda s: s.forwards) if sigs else None

    def sections(self) -> tuple[InputSignature, ...]:
        """Each signature with a forward: its inputs, forwards and layer shapes."""
        return tuple(
            InputSignature(inputs=s.inputs, forwards=s.forwards, shapes=dict(s.store.shapes))
            for s in self._by_key.values()
            if s.forwards
        )

    def restart(self) -> None:
        """Forward counts from 0 (the shapes recorded are kept)."""
        for sig in self._by_key.values():
            sig.forwards = 0


def overlay_shapes(
    wrapped: Mapping[str, ForwardWrapper],
    store: ShapeStore,
    skip: Callable[[int], None],
    mark: Callable[[], int],
) -> None:
    """Overlay shape-recording wrappers on every non-root module (``wrapped``: path ->
    its wrapper) for one forward; ``skip(t0)`` logs the time they take as the recorder's."""
    for path, wrapper in wrapped.items():
        if path:
            wrapper.overlay(shape_wrapper(path, store, wrapper.wrapper, skip, mark))


def clear_overlays(wrapped: Mapping[str, ForwardWrapper]) -> None:
    for wrapper in wrapped.values():
        wrapper.clear_overlay()
