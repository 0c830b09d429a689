"""Activation memory per layer: what each layer's forward saves for backward, and the
bytes of its parameters, gradients and optimizer state (docs/definitions.md).

Value objects only (no torch). ``layerprof.capture.memory.activations`` fills them,
the codec saves them, ``layerprof.analysis.memory`` reads them for its finding,
renderers show them.

Every row holds a layer's *own* bytes (``*_self``): the storages saved by ops that
ran in the layer's forward and in no child's, and the parameters registered on the
layer itself. Totals (a layer and everything below it) are derived, so the tree
adds up exactly: ``total == self + sum(children totals)`` for every kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

#: The phases of one training step whose allocator peak is kept (CUDA only).
PHASES = ("forward", "backward", "optimizer")

#: The kinds of bytes of a row, in the order tables show them.
KINDS = ("activations", "params", "grads", "optimizer")


@dataclass(frozen=True)
class MemoryRow:
    """One layer's own bytes. ``grads_self`` is None when no backward ran;
    ``optimizer_self`` is None when no optimizer was given. ``input_bytes`` is what the
    tensors passed to the layer's calls take (None: the layer did not run), what
    activation checkpointing it would keep."""

    path: str
    parent: str | None
    activations_self: int = 0
    params_self: int = 0
    grads_self: int | None = None
    optimizer_self: int | None = None
    input_bytes: int | None = None

    def own(self, kind: str) -> int | None:
        value: int | None = getattr(self, f"{kind}_self")
        return value


@dataclass(frozen=True)
class MemoryTotals:
    """One layer's bytes including its children's (derived from the rows)."""

    path: str
    parent: str | None
    activations_self: int
    activations: int
    params: int
    grads: int | None
    optimizer: int | None

    def total(self, kind: str) -> int | None:
        value: int | None = getattr(self, kind)
        return value


@dataclass(frozen=True)
class PhasePeak:
    """The allocator's highest allocated bytes during one phase of the step
    (``peak_bytes``), and the allocated bytes when the phase began (``start_bytes``)."""

    phase: str
    start_bytes: int
    peak_bytes: int

    @property
    def rise_bytes(self) -> int:
        return max(self.peak_bytes - self.start_bytes, 0)


@dataclass(frozen=True)
class ActivationMemory:
    """Saved-for-backward bytes per layer (counted once per storage, parameters and
    buffers excluded, a storage belonging to the innermost layer that saved it first),
    with parameter, gradient and optimizer-state bytes.

    ``outside_bytes`` were saved by ops outside every layer (the loss);
    ``forwards`` is how many forwards the step ran (the rows are those of the forward
    that saved the most; gradient accumulation runs several); ``peaks`` the
    allocator's peak per phase (CUDA only, empty elsewhere).
    """

    rows: tuple[MemoryRow, ...]
    outside_bytes: int = 0
    forwards: int = 1
    peaks: tuple[PhasePeak, ...] = ()

    @property
    def saved_bytes(self) -> int:
        """All bytes saved for backward in the step's largest forward, loss included."""
        return sum(r.activations_self for r in self.rows) + self.outside_bytes

    def totals(self) -> list[MemoryTotals]:
        """Every layer's totals (self plus its children's), in row order."""
        index = {r.path: r for r in self.rows}
        kids: dict[str, list[str]] = {}
        for r in self.rows:
            if r.parent is not None and r.parent in index and r.parent != r.path:
                kids.setdefault(r.parent, []).append(r.path)
        done: dict[str, MemoryTotals] = {}
        for path in _children_first(list(index), kids):
            r = index[path]
            below = [done[k] for k in kids.get(path, ())]
            done[path] = MemoryTotals(
                path=path,
                parent=r.parent,
                activations_self=r.activations_self,
                activations=r.activations_self + sum(b.activations for b in below),
                params=r.params_self + sum(b.params for b in below),
                grads=_add(r.grads_self, [b.grads for b in below]),
                optimizer=_add(r.optimizer_self, [b.optimizer for b in below]),
            )
        return [done[r.path] for r in self.rows]

    def total(self, path: str) -> MemoryTotals:
        for t in self.totals():
            if t.path == path:
                return t
        raise KeyError(path)

    def peak(self, phase: str) -> PhasePeak | None:
        return next((p for p in self.peaks if p.phase == phase), None)

    @property
    def has_grads(self) -> bool:
        return any(r.grads_self is not None for r in self.rows)

    @property
    def has_optimizer(self) -> bool:
        return any(r.optimizer_self is not None for r in self.rows)


def _add(own: int | None, children: list[int | None]) -> int | None:
    values = [v for v in (own, *children) if v is not None]
    return sum(values) if values else None


def _children_first(paths: list[str], kids: dict[str, list[str]]) -> Iterator[str]:
    """Paths in post-order (children before their parent); each visited once."""
    seen: set[str] = set()
    for start in paths:
        stack = [(start, False)]
        while stack:
            path, expanded = stack.pop()
            if expanded:
                yield path
                continue
            if path in seen:
                continue
            seen.add(path)
            stack.append((path, True))
            stack.extend((k, False) for k in kids.get(path, ()) if k not in seen)
