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
import functools
import itertools
import numbers
import sys
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
#: runs the forward and backward inside its step, the closure's own code (zero_grad, the
#: loss, a framework's training_step around the forward) is the closure's, and only what
#: is left of the step is the optimizer's own update. Backward before forward: a forward
#: that runs inside a backward is activation checkpointing's recompute, part of the backward.
_PRIORITY: tuple[str, ...] = ("backward", "forward", "closure", "optimizer")


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
    # calls of an optimizer step's closure (``optimizer.step(closure)``), outermost ones
    closures: list[Span] = field(default_factory=list)
    # per forward that got a backward: its backward calls, as a table (24 bytes a call;
    # LayerCall records held for every step of a long run took ~264 bytes a module)
    backward: dict[int, CallTable] = field(default_factory=dict)


def partition(step: StepMarks) -> dict[str, int]:
    """The step's wall time split into ``STEP_PARTS`` (ns; they add up to end - start).

    Data wait is time no phase covers that ends where the work on a batch starts: a
    forward, a closure, or an optimizer step that runs one (the closure runs the forward):
    the loader before the step's first forward, and before each later micro-batch's
    forward under gradient accumulation (uncovered time before a backward or a plain
    optimizer step, or after the last phase, is rest); overlaps count once
    (``_PRIORITY``).

    One sweep over the spans' ends in time order: O(n log n) in the spans (a step with
    an evaluation pass of 16k forwards took 24.8 s when each stretch looked through
    every span).
    """
    lo, hi = step.start, step.end
    spans = _spans(step)
    events: list[tuple[int, int, int]] = []  # (time, priority, +1 opens / -1 closes)
    cuts = {lo, hi}
    starts: list[tuple[int, str, bool]] = []  # (time, kind, starts a batch's work)
    batch = _closure_steps(step)
    for rank, kind in enumerate(_PRIORITY):
        for i, (a, b) in enumerate(spans[kind]):
            a, b = min(max(a, lo), hi), min(max(b, lo), hi)
            cuts.update((a, b))
            work = kind in ("forward", "closure") or (kind == "optimizer" and i in batch)
            starts.append((a, kind, work))
            if a < b:
                events += ((a, rank, 1), (b, rank, -1))
    events.sort()
    starts.sort()
    out = dict.fromkeys(STEP_PARTS, 0)
    open_ = [0] * len(_PRIORITY)  # spans of each kind covering the current stretch
    e = k = 0
    points = sorted(cuts)
    for a, b in itertools.pairwise(points):
        while e < len(events) and events[e][0] <= a:
            open_[events[e][1]] += events[e][2]
            e += 1
        rank = next((r for r, n in enumerate(open_) if n > 0), -1)
        if rank >= 0:
            out[_PRIORITY[rank]] += b - a
            continue
        while k < len(starts) and starts[k][0] < b:  # the first phase to start at b or later
            k += 1
        out["data_wait" if k < len(starts) and starts[k][2] else "rest"] += b - a
    return out


def _spans(step: StepMarks) -> dict[str, list[Span]]:
    return {
        "optimizer": step.optimizer,
        "closure": step.closures,
        "backward": step.backwards,
        "forward": step.forwards,
    }


def _closure_steps(step: StepMarks) -> set[int]:
    """The optimizer steps (indices) inside which a closure started."""
    if not step.closures:
        return set()
    starts = sorted(a for a, _ in step.closures)
    found = set()
    for k, (a, b) in enumerate(step.optimizer):
        i = bisect.bisect_left(starts, a)
        if i < len(starts) and starts[i] <= b:
            found.add(k)
    return found


class PhaseMarks:
    """Collects forward, backward, optimizer and closure spans of the current step.

    ``mark`` is the Recorder's host clock. The optimizer hooks are torch's
    global ones, so any optimizer counts; ``attach``/``detach`` add and remove
    them (the Recorder's ``__exit__`` removes them, also on errors). The
    outermost optimizer step's closure, when it gets one, is handed on inside a
    function that marks each call (``_marked_closure``).
    """

    def __init__(self, mark: Callable[[], int]) -> None:
        self.mark = mark
        self.forwards: list[Span] = []
        self.backwards: list[Span] = []
        self.optimizer: list[Span] = []
        self.closures: list[Span] = []
        self._forward_at = 0
        self._backward_at: int | None = None
        # a stack of (stack depth, start): an optimizer may wrap another, or call its
        # base class's step (both hooked); the depth tells a step that raised from these
        self._optimizer_at: list[tuple[int, int]] = []
        self._closure_depth = 0  # closures running now (one calling another counts once)
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

    def take(self) -> tuple[list[Span], list[Span], list[Span], list[Span]]:
        """This step's spans (forward, backward, optimizer, closure); starts the next step's.

        An optimizer step still open here raised (torch runs no post-hook then): it is
        forgotten, or no later step would see an optimizer end (its time is rest)."""
        out = self.forwards, self.backwards, self.optimizer, self.closures
        self.forwards, self.backwards, self.optimizer, self.closures = [], [], [], []
        self._optimizer_at.clear()
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
    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> Any:
        """Marks the step's start; returns the step's arguments with its closure marked
        (torch's pre-hooks may replace them), or None to leave them as they are."""
        depth = _depth()
        self._forget_raised(depth)
        self._optimizer_at.append((depth, self.mark()))
        if self.on_optimizer is not None:
            self.on_optimizer(optimizer)
        if len(self._optimizer_at) > 1:
            return None  # a nested step: the outermost one marked the closure already
        return _with_closure(args, kwargs, self._marked_closure)

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        depth = _depth()  # the same as its pre-hook's: torch calls both from one frame
        self._forget_raised(depth + 1)
        if not self._optimizer_at or self._optimizer_at[-1][0] != depth:
            return
        _, start = self._optimizer_at.pop()
        if not self._optimizer_at:  # the outermost optimizer: nested ones are inside
            self.optimizer.append((start, self.mark()))

    def _forget_raised(self, depth: int) -> None:
        """Steps opened at ``depth`` or deeper are over: a step starting (or ending) there
        is no step nested in them. Still open, they raised (torch runs no post-hook then),
        and kept, no later step would end the outermost one (its time is rest)."""
        while self._optimizer_at and self._optimizer_at[-1][0] >= depth:
            self._optimizer_at.pop()

    def _marked_closure(self, closure: Callable[..., Any]) -> Callable[..., Any]:
        """``closure``, its calls marked (LBFGS calls it several times a step)."""

        @functools.wraps(closure)
        def marked(*args: Any, **kwargs: Any) -> Any:
            self._closure_depth += 1
            start = self.mark()
            try:
                return closure(*args, **kwargs)
            finally:
                self._closure_depth -= 1
                if not self._closure_depth:
                    self.closures.append((start, self.mark()))

        return marked


def _depth() -> int:
    """How many frames the calling frame sits under (the optimizer hooks': one read a
    step, a few dozen frames)."""
    frame = sys._getframe(1)
    n = 0
    while frame is not None:
        n += 1
        frame = frame.f_back  # type: ignore[assignment]
    return n


def _with_closure(
    args: tuple[Any, ...], kwargs: dict[str, Any], wrap: Callable[[Any], Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """``Optimizer.step``'s arguments (``args[0]`` is the optimizer) with the closure,
    positional or ``closure=``, wrapped; None when the step got no closure."""
    closure = kwargs.get("closure")
    if callable(closure):
        return args, {**kwargs, "closure": wrap(closure)}
    if len(args) > 1 and callable(args[1]):
        return (args[0], wrap(args[1]), *args[2:]), kwargs
    return None


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
