"""The step anatomy of a user's training loop: marks per phase, the schedule, the partition.

A Recorder with ``backward=True`` owns one ``PhaseMarks``. The Recorder's root
wrapper marks each forward; the first graph node of a backward pass marks its
start and an autograd-engine callback its end; torch's global optimizer step
hooks mark every ``Optimizer.step``. ``rec.step()`` closes a step into a
``StepMarks`` and ``partition`` splits its wall time into the parts of
:mod:`layerprof.pivot.sections.loop`, exactly (integer ns, they add up).
"""

from __future__ import annotations

import bisect
import itertools
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from layerprof.capture.modules import HookHandles
from layerprof.errors import UsageError
from layerprof.pivot.sections.loop import STEP_PARTS, LoopStep

if TYPE_CHECKING:
    from layerprof.capture.recording.layertimes import CallTable

Phase = Literal["skip", "warmup", "active", "done"]
Span = tuple[int, int]

#: Which part an instant counts for where phases overlap (first wins). The optimizer
#: comes last: ``optimizer.step(closure)`` (Lightning's automatic optimization, LBFGS)
#: runs the forward and backward inside its step, and only what is left of the step is
#: the optimizer's own update. Backward before forward: a forward that runs inside a
#: backward is activation checkpointing's recompute, part of the backward.
_PRIORITY: tuple[str, ...] = ("backward", "forward", "optimizer")


@dataclass(frozen=True)
class StepSchedule:
    """Which steps count, as ``torch.profiler.schedule`` (wait/warmup/active): the first
    ``skip`` steps are ignored, the next ``warmup`` recorded and thrown away, the next
    ``active`` (None: all the rest) kept."""

    skip: int = 0
    warmup: int = 0
    active: int | None = None

    def __post_init__(self) -> None:
        # checked here, at the boundary: a bad value would otherwise fail steps later, as a
        # bare comparison error, or pass (1.5 and True compare like numbers)
        _whole("skip", self.skip, 0)
        _whole("warmup", self.warmup, 0)
        if self.active is not None:
            _whole("active", self.active, 1)

    def phase(self, step: int) -> Phase:
        if step < self.skip:
            return "skip"
        if step < self.skip + self.warmup:
            return "warmup"
        if self.active is None or step < self.skip + self.warmup + self.active:
            return "active"
        return "done"


def _whole(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        more = " (or None: every step after the warm-up)" if name == "active" else ""
        raise UsageError(
            f"StepSchedule({name}={value!r}): {name} must be a whole number >= {low}{more}"
        )


@dataclass
class StepMarks:
    """One step's raw host marks and what it ran; ``iterations`` are the numbers of the
    step's forwards of the model, ``backward`` the layers' backward calls per forward
    that got a backward (reduced with the forwards' calls by ``LoopRecord``)."""

    index: int
    start: int
    end: int = 0
    forwards: list[Span] = field(default_factory=list)
    backwards: list[Span] = field(default_factory=list)
    optimizer: list[Span] = field(default_factory=list)
    iterations: Sequence[int] = range(0)
    # per forward that got a backward: its backward calls, as a table (24 bytes a call;
    # LayerCall records held for every step of a long run took ~264 bytes a module)
    backward: dict[int, CallTable] = field(default_factory=dict)


def partition(step: StepMarks) -> dict[str, int]:
    """The step's wall time split into ``STEP_PARTS`` (ns; they add up to end - start).

    Data wait is time no phase covers that ends where a forward starts: the loader
    before the step's first forward, and before each later micro-batch's forward
    under gradient accumulation (uncovered time before a backward or an optimizer
    step, or after the last phase, is rest); overlaps count once (``_PRIORITY``).
    """
    lo, hi = step.start, step.end
    spans: dict[str, list[Span]] = {
        "optimizer": step.optimizer,
        "backward": step.backwards,
        "forward": step.forwards,
    }
    cuts = {lo, hi}
    for kind in _PRIORITY:
        for a, b in spans[kind]:
            cuts.update(min(max(t, lo), hi) for t in (a, b))
    # where each phase starts, in time order: what follows an uncovered stretch
    starts = sorted((min(max(a, lo), hi), kind) for kind in _PRIORITY for a, _ in spans[kind])
    at = [t for t, _ in starts]
    out = dict.fromkeys(STEP_PARTS, 0)
    points = sorted(cuts)
    for a, b in itertools.pairwise(points):
        out[_cover(a, b, spans, starts, at)] += b - a
    return out


def _cover(
    a: int, b: int, spans: dict[str, list[Span]], starts: list[tuple[int, str]], at: list[int]
) -> str:
    for kind in _PRIORITY:
        if any(s <= a and b <= e for s, e in spans[kind]):
            return kind
    k = bisect.bisect_left(at, b)
    return "data_wait" if k < len(starts) and starts[k][1] == "forward" else "rest"


class PhaseMarks:
    """Collects forward, backward and optimizer spans of the current step.

    ``mark`` is the Recorder's host clock. The optimizer hooks are torch's
    global ones, so any optimizer counts; ``attach``/``detach`` add and remove
    them (the Recorder's ``__exit__`` removes them, also on errors).
    """

    def __init__(self, mark: Callable[[], int]) -> None:
        self.mark = mark
        self.forwards: list[Span] = []
        self.backwards: list[Span] = []
        self.optimizer: list[Span] = []
        self._forward_at = 0
        self._backward_at: int | None = None
        self._optimizer_at: list[int] = []  # a stack: an optimizer may wrap another
        self._hooks = HookHandles()
        self.on_backward_end: Callable[[], None] | None = None
        # called with each optimizer as its step starts (the Recorder's memory mode)
        self.on_optimizer: Callable[[Any], None] | None = None

    def attach(self) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        with self._hooks.registering() as hooks:
            hooks.add(register_optimizer_step_pre_hook(self._optimizer_pre))
            hooks.add(register_optimizer_step_post_hook(self._optimizer_post))

    def detach(self) -> None:
        self._hooks.remove()

    def take(self) -> tuple[list[Span], list[Span], list[Span]]:
        """This step's spans (forward, backward, optimizer); starts the next step's."""
        out = self.forwards, self.backwards, self.optimizer
        self.forwards, self.backwards, self.optimizer = [], [], []
        return out

    # ---- forward (the Recorder's root wrapper) ------------------------------------
    def forward_start(self) -> None:
        self._forward_at = self.mark()

    def forward_end(self) -> None:
        self.forwards.append((self._forward_at, self.mark()))

    # ---- backward (NodeMarks' first node, then the engine's final callback) --------
    def backward_start(self) -> None:
        import torch

        self._backward_at = self.mark()
        # runs when this backward pass has finished, in the thread that ran it
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_end)  # type: ignore[attr-defined]

    def _backward_end(self) -> None:
        if self._backward_at is not None:
            self.backwards.append((self._backward_at, self.mark()))
            self._backward_at = None
        if self.on_backward_end is not None:
            self.on_backward_end()

    # ---- optimizer (global step hooks) ------------------------------------------------
    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_at.append(self.mark())
        if self.on_optimizer is not None:
            self.on_optimizer(optimizer)

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer_at:
            start = self._optimizer_at.pop()
            if not self._optimizer_at:  # the outermost optimizer: nested ones are inside
                self.optimizer.append((start, self.mark()))


def step_row(st: StepMarks, origin: int) -> LoopStep:
    """The step's row: its start after ``origin`` (the first active step's), wall and parts."""
    parts = partition(st)
    return LoopStep(
        index=st.index,
        start_ns=st.start - origin,
        wall_ns=st.end - st.start,
        **{f"{p}_ns": v for p, v in parts.items()},
        forwards=len(st.forwards),
        backwards=len(st.backwards),
    )
