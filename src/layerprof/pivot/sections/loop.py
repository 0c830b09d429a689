"""A training loop's steps, as a Recorder with ``backward=True`` saw them (value objects).

Each step's wall time is partitioned exactly, in integer ns, into ``STEP_PARTS``:

* **data wait** — from the end of the previous step (``rec.step()`` returning,
  or entering the Recorder for the first step) to the model's first forward
  in the step, or to the optimizer step whose closure runs it: the loader, and
  whatever else the loop does before the forward;
* **forward** — inside the model's forward calls (every forward of the step,
  training and ``no_grad`` evaluation alike);
* **backward** — from the moment the gradient reaches the model's outputs
  (the first graph node of a layer starts) to the end of that backward pass
  (the autograd engine's final callback, gradient accumulation into
  ``.grad`` included);
* **closure** — inside the closure an ``optimizer.step(closure)`` runs
  (Lightning's automatic optimization, LBFGS), outside its forward and backward:
  ``zero_grad``, the loss, a framework's ``training_step`` and hooks around them;
* **optimizer** — inside ``Optimizer.step`` of any optimizer (torch's global
  optimizer step hooks), outside its closure: the update itself;
* **rest** — everything else: the loss and its backward, ``zero_grad``,
  logging, user code.

Where two of them overlap (a forward recomputed inside backward, a closure's
forward and backward inside the optimizer step) the time counts once, for the
first of backward, forward, closure, optimizer. The step's ``wall_ns`` is the sum of the parts.
These are host times; on CUDA a part is the host's time in it (a ``loss.item()``
that waits for the device lands in rest).

Per layer, ``LayerSteps`` holds each active step's forward and backward
total/self time, summed over the step's forwards (gradient accumulation sums).
Step-sized statistics come from :mod:`layerprof.stats` on demand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from layerprof.stats import Summary

if TYPE_CHECKING:
    from layerprof.stats import Summary

#: The parts of a step, in the order they are shown.
STEP_PARTS: tuple[str, ...] = (
    "data_wait", "forward", "backward", "closure", "optimizer", "rest",
)  # fmt: skip


@dataclass(frozen=True, slots=True)  # one per active step: 100k of them in a long run
class LoopStep:
    """One active step: when it started (ns after the first active step's start),
    its wall time and its parts (they add up to ``wall_ns``), and how many
    forward and backward passes of the model it held."""

    index: int  # the step's number counted from the first step, skipped ones included
    start_ns: int
    wall_ns: int
    data_wait_ns: int
    forward_ns: int
    backward_ns: int
    optimizer_ns: int
    rest_ns: int
    forwards: int = 0
    backwards: int = 0
    closure_ns: int = 0  # 0 without optimizer.step(closure) (and in files from before it)

    def parts(self) -> tuple[tuple[str, int], ...]:
        """(part, ns) in ``STEP_PARTS`` order."""
        return tuple((p, int(getattr(self, f"{p}_ns"))) for p in STEP_PARTS)


@dataclass(frozen=True)
class LayerSteps:
    """One layer's time in each active step (one value per step, summed over the
    step's forwards; backward None where no step ran a backward). A Recorder's
    values are ``IntValues`` (int64 or int32 arrays that compare as tuples: a long
    run's per-step values cost 4 or 8 bytes each, or nothing when they are its samples)."""

    path: str
    forward_total_ns: Sequence[int]
    forward_self_ns: Sequence[int]
    backward_total_ns: Sequence[int] | None = None
    backward_self_ns: Sequence[int] | None = None

    def summary(self, quantity: str) -> Summary | None:
        """Median, spread and the median's 95 % interval over the steps of one quantity
        (``forward_total``, ``forward_self``, ``backward_total``, ``backward_self``)."""

        values = getattr(self, f"{quantity}_ns")
        return Summary.of(values) if values is not None and len(values) else None


@dataclass(frozen=True)
class Recompute:
    """A module that activation checkpointing ran again inside the backward
    (``torch.utils.checkpoint``, reentrant or not; Hugging Face's
    ``gradient_checkpointing_enable()``): the time of those recomputed forwards in
    each active step (part of the step's backward, not a forward of the model) and
    how many ran over the active steps."""

    path: str
    per_step_ns: tuple[int, ...]
    calls: int


@dataclass(frozen=True)
class TrainingLoop:
    """The steps a Recorder counted (``schedule``: skipped, warm-up and active steps
    as torch.profiler's wait/warmup/active; only active steps are here); ``recompute``
    the modules activation checkpointing recomputed in them."""

    steps: tuple[LoopStep, ...]
    layers: tuple[LayerSteps, ...] = ()
    skip: int = 0
    warmup: int = 0
    active: int | None = None
    recompute: tuple[Recompute, ...] = ()

    def recomputed_under(self, path: str) -> str | None:
        """The recomputed module that ``path`` is (or lies inside), or None: such a
        layer's backward holds its block's recompute wherever the recompute started."""
        for r in self.recompute:
            if path == r.path or path.startswith(f"{r.path}.") or r.path == "":
                return r.path
        return None

    def shown_parts(self) -> tuple[str, ...]:
        """``STEP_PARTS`` less the closure where no step ran ``optimizer.step(closure)``
        (most loops): what a table or chart of the steps shows."""
        if any(s.closure_ns for s in self.steps):
            return STEP_PARTS
        return tuple(p for p in STEP_PARTS if p != "closure")

    def part(self, name: str) -> tuple[int, ...]:
        """One part (or ``wall``) of every step."""
        return tuple(int(getattr(s, f"{name}_ns")) for s in self.steps)

    def summary(self, name: str) -> Summary:
        """Median, spread and the median's confidence interval of one part over steps."""

        return Summary.of(self.part(name))

    def layer(self, path: str) -> LayerSteps | None:
        return next((x for x in self.layers if x.path == path), None)
