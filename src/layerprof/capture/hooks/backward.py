"""Backward time per layer: autograd graph-node hooks (hooks mode) or autograd ops (ops mode).

Hooks mode (``profile_backward``): graph-node marks
(layerprof.capture.recording.nodes: each module call's range of autograd sequence
numbers, and a pre- and post-hook on every graph node made inside it), walked
from the loss before each ``backward()``. A call that created no graph node
(``nn.Identity``, a layer no gradient reaches) has a backward time of zero. Gradient accumulation into
``.grad`` (``AccumulateGrad``, no sequence number) and the loss's own
backward belong to no layer.

Unlike full backward hooks (``register_full_backward_hook``), these hooks put
nothing into the graph: full backward hooks wrap each module's inputs and
outputs in ``BackwardHookFunction`` views, and every in-place op on such a
view (a ResNet's ``out += identity``, ``nn.ReLU(inplace=True)``, ``x.add_()``)
fails. Where node hooks cannot be used (a torch without them, a node that
refuses a hook) the times come from ops mode instead, and the profile says so.

Ops mode attributes backward in the trace engine instead
(``layerprof.trace.attribution``): an ``autograd::engine::evaluate_function:
XBackward0`` span carries the sequence number of the forward op that created
the node; its time belongs to that op's layer. Nodes with no forward op
(``AccumulateGrad``, the loss) go to ``(unattributed)``, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from layerprof.capture.options import OpOptions
from layerprof.capture.platform.clocks import Clock, HostClock, synchronizer
from layerprof.capture.platform.device import device_of
from layerprof.capture.recording.layertimes import build_samples
from layerprof.capture.recording.nodes import (
    NodeHooksUnavailable,
    NodeMarks,
    nest_intervals,
    next_sequence_nr,
)
from layerprof.capture.step import LossFn, backward_state, backward_step
from layerprof.errors import ModelRunError, UsageError
from layerprof.pivot.notes import Note
from layerprof.pivot.records import LayerCall

if TYPE_CHECKING:
    import torch

__all__ = [
    "BackwardProfile",
    "NodeHooksUnavailable",
    "NodeMarks",
    "nest_intervals",
    "profile_backward",
]

_BackwardTimes = dict[str, tuple[tuple[int, ...], tuple[int, ...]]]

SequenceCounter = Callable[[], Callable[[], int]]
"""torch's autograd sequence counter, or ``NodeHooksUnavailable`` where graph-node hooks
cannot be used (``layerprof.capture.recording.nodes.next_sequence_nr``)."""


@dataclass(frozen=True)
class BackwardProfile:
    """Per layer ``path -> (backward_total_ns, backward_self_ns)``, one value per
    iteration, and how they were measured (``method``: ``node-hooks`` or ``ops``)."""

    times: _BackwardTimes
    method: str
    notes: tuple[Note, ...]


def profile_backward(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    iters: int,
    loss: LossFn | None,
    clock: Clock | None = None,
    sequence_counter: SequenceCounter = next_sequence_nr,
) -> BackwardProfile:
    """Backward total and self time of every layer that ran forward, per iteration.

    Graph-node hooks (see the module docstring); where they cannot be used,
    ops mode (torch.profiler). One untimed step runs first (autograd warm-up).
    Forward hooks are removed and ``.grad`` restored also on errors and Ctrl-C.
    ``sequence_counter`` is asked first whether torch offers graph-node hooks (a test
    passes one that says no, as a torch without them does).
    """
    try:
        times = _node_hook_times(
            model, args, kwargs, iters, loss, clock or HostClock(), sequence_counter
        )
    except NodeHooksUnavailable as why:
        return _ops_backward(model, args, kwargs, iters, loss, str(why))
    note = Note(
        "backward-method",
        "backward: per-layer times from autograd graph-node hooks - a layer's backward"
        " runs from the first to the last graph node its forward created; gradient"
        " accumulation into .grad and the loss's own backward are in no layer",
        {"method": "node-hooks"},
    )
    return BackwardProfile(times, "node-hooks", (note,))


def _node_hook_times(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    iters: int,
    loss: LossFn | None,
    clock: Clock,
    sequence_counter: SequenceCounter,
) -> _BackwardTimes:
    device = device_of(model)
    sequence_counter()  # NodeHooksUnavailable on a torch without graph-node hooks
    with backward_state(model), NodeMarks(model, clock) as marks:
        step = backward_step(
            model, args, kwargs or {}, loss, synchronizer(device), before_backward=marks.hook_graph
        )
        _run(model, step, marks)
        marks.take(0)
        calls: list[LayerCall] = []
        ran: set[str] = set()
        for it in range(iters):
            _run(model, step, marks)
            done, paths = marks.take(it)
            ran |= paths
            base = len(calls)
            calls += [replace(c, parent=c.parent + base if c.parent >= 0 else -1) for c in done]
    samples = build_samples(calls, iters)
    zeros = (0,) * iters
    times: _BackwardTimes = {p: (tuple(s.total_ns), tuple(s.self_ns)) for p, s in samples.items()}
    # a layer that made no graph node (an Identity, no gradient reaching it): no backward work
    return times | {p: (zeros, zeros) for p in ran - set(times)}


def _ops_backward(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    iters: int,
    loss: LossFn | None,
    why: str,
) -> BackwardProfile:
    """The fallback: autograd nodes from torch.profiler, attributed by sequence number."""
    from layerprof.capture.profiling.profiler import capture_ops

    cap = capture_ops(
        model, args, kwargs, iters=iters, device=device_of(model), options=OpOptions(),
        backward=True, loss=loss,
    )  # fmt: skip
    times: _BackwardTimes = {
        p: (tuple(s.backward_total_ns), tuple(s.backward_self_ns))
        for p, s in cap.profile().samples.items()
        if s.backward_total_ns is not None and s.backward_self_ns is not None
    }
    note = Note(
        "backward-method",
        f"backward: per-layer times from torch.profiler's autograd nodes (ops mode), as"
        f" graph-node hooks could not be used ({why}); a layer's backward self time is"
        f" the time of the nodes its forward ops created",
        {"method": "ops", "why": why},
    )
    return BackwardProfile(times, "ops", (note,))


def _run(model: torch.nn.Module, step: Callable[[], None], marks: NodeMarks) -> None:
    from layerprof.capture.failures import model_error

    try:
        step()
    except (KeyboardInterrupt, ModelRunError, UsageError, NodeHooksUnavailable):
        raise
    except Exception as exc:
        raise model_error(model, marks.failing_path(), exc) from exc
