"""Backward time per layer: autograd graph-node hooks (hooks mode) or autograd ops (ops mode).

Hooks mode (``profile_backward``): forward pre/post hooks give every module
call the range of autograd sequence numbers its ops took
(``torch.autograd._get_sequence_nr`` at entry and exit: numbers are handed
out per thread, in creation order). Before each ``backward()`` the graph is
walked from the loss, and every node created inside a recorded call gets a
pre-hook and a post-hook (``Node.register_prehook`` / ``register_hook``) that
mark when it starts and ends; the innermost call whose range holds the node's
sequence number owns it. A call's backward runs from the first of its
subtree's nodes to start to the last to end.

Why the intervals nest: the CPU autograd engine runs ready nodes highest
sequence number first, and running a node only makes older (lower-numbered)
nodes ready, so the nodes of one call run as one block and a child's block
lies inside its parent's. Intervals are nested by containment
(``nest_intervals``: a child that ends after its parent extends the parent),
so per iteration ``total == self + sum(children)`` and ``self >= 0`` hold
exactly. A call that created no graph node (``nn.Identity``, a layer no
gradient reaches) has a backward time of zero. Gradient accumulation into
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

import bisect
import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from layerprof.capture.clocks import Clock, HostClock, synchronizer
from layerprof.capture.device import device_of
from layerprof.capture.hooks.layertimes import build_samples
from layerprof.capture.modules import HookHandles, hookable_modules
from layerprof.capture.step import LossFn, backward_state, backward_step
from layerprof.errors import ModelRunError, UsageError
from layerprof.notes import Note
from layerprof.records import LayerCall

if TYPE_CHECKING:
    import torch

BackwardTimes = dict[str, tuple[tuple[int, ...], tuple[int, ...]]]


# ---- hooks mode: autograd graph-node hooks -----------------------------------------


class NodeHooksUnavailable(Exception):
    """This torch or this graph does not take node hooks: use ops mode instead."""


@dataclass(frozen=True)
class BackwardProfile:
    """Per layer ``path -> (backward_total_ns, backward_self_ns)``, one value per
    iteration, and how they were measured (``method``: ``node-hooks`` or ``ops``)."""

    times: BackwardTimes
    method: str
    notes: tuple[Note, ...]


@dataclass
class _Call:
    """One module call of the current iteration: its range of sequence numbers and
    the marks of its first node to start and its last node to end in backward."""

    path: str
    parent: int
    first: int
    end: int = -1
    start_mark: Any = None
    end_mark: Any = None


class NodeMarks:
    """Forward hooks that give each module call its sequence-number range, and the
    node hooks that time the graph nodes created in each call (module docstring)."""

    def __init__(self, model: torch.nn.Module, clock: Clock, *, process_wide: bool = False) -> None:
        self.model = model
        self.clock = clock
        # process-wide module hooks: torch's fast-path checks (TransformerEncoderLayer
        # refuses its fused kernel when a module carries hooks) do not see them, so the
        # model runs the code its clean forward runs (the FLOP counter uses this)
        self.process_wide = process_wide
        self.calls: list[_Call] = []
        self.failed: str | None = None  # innermost layer a forward raised in
        self._stack: list[int] = []
        self._running: list[int] = []  # owners of nodes started and not finished
        self._hooks = HookHandles()
        self._next_seq = next_sequence_nr()
        self._firsts: list[int] = []

    def __enter__(self) -> NodeMarks:
        if self.process_wide:
            return self._enter_process_wide()
        with self._hooks.registering() as hooks:
            for path, module in hookable_modules(self.model):
                hooks.add(module.register_forward_pre_hook(functools.partial(self._enter, path)))
                hooks.add(
                    module.register_forward_hook(
                        functools.partial(self._exit, path), always_call=True
                    )
                )
        return self

    def _enter_process_wide(self) -> NodeMarks:
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        paths = {id(m): p for p, m in hookable_modules(self.model)}

        def pre(module: Any, args: Any) -> None:
            path = paths.get(id(module))
            if path is not None:
                self._enter(path, module, args)

        def post(module: Any, args: Any, output: Any) -> None:
            path = paths.get(id(module))
            if path is not None:
                self._exit(path, module, args, output)

        with self._hooks.registering() as hooks:
            hooks.add(register_module_forward_pre_hook(pre))
            hooks.add(register_module_forward_hook(post, always_call=True))
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.remove()

    def _enter(self, path: str, module: Any, args: Any) -> None:
        parent = self._stack[-1] if self._stack else -1
        self.calls.append(_Call(path, parent, self._next_seq()))
        self._stack.append(len(self.calls) - 1)

    def _exit(self, path: str, module: Any, args: Any, output: Any) -> None:
        # always_call: also runs when the forward raised; the innermost unwinds first
        if self.failed is None and sys.exc_info()[0] is not None:
            self.failed = path
        while self._stack:
            call = self.calls[self._stack.pop()]
            call.end = self._next_seq()
            if call.path == path:
                break

    # ---- backward ----------------------------------------------------------------
    def hook_graph(self, loss: Any) -> int:
        """Pre- and post-hook every node that a recorded call created; returns how many.

        The hooks live on this iteration's graph, which autograd frees after
        ``backward()``: nothing stays behind on the model.
        """
        if not self.calls or loss.grad_fn is None:
            return 0
        firsts = [c.first for c in self.calls]
        seen: set[Any] = set()
        todo = [loss.grad_fn]
        hooked = 0
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            seq = node._sequence_nr()
            if seq < firsts[0]:
                continue  # made before the forward: so is everything behind it
            owner = self._owner(seq, firsts)
            if owner >= 0:
                try:
                    node.register_prehook(functools.partial(self._node_start, owner))
                    node.register_hook(functools.partial(self._node_end, owner))
                except (RuntimeError, TypeError, AttributeError) as exc:
                    raise NodeHooksUnavailable(f"{node.name()}: {exc}") from exc
                hooked += 1
            todo.extend(fn for fn, _ in node.next_functions)
        return hooked

    def current(self) -> int:
        """The innermost module call running forward now (-1: none)."""
        return self._stack[-1] if self._stack else -1

    def owner(self, seq: int) -> int:
        """The innermost recorded call whose forward created the graph node numbered ``seq``
        (-1: none, e.g. gradient accumulation or the loss); for the FLOP counter's backward."""
        if len(self._firsts) != len(self.calls):  # calls only grow during one step
            self._firsts = [c.first for c in self.calls]
        if not self._firsts or seq < self._firsts[0]:
            return -1
        return self._owner(seq, self._firsts)

    def _owner(self, seq: int, firsts: list[int]) -> int:
        """The innermost call whose sequence range holds ``seq`` (-1: none)."""
        k = bisect.bisect_right(firsts, seq) - 1
        while k >= 0 and not seq < self.calls[k].end:
            k = self.calls[k].parent
        return k

    def _node_start(self, owner: int, grad_outputs: Any) -> None:
        mark = self.clock.mark()
        call = self.calls[owner]
        if call.start_mark is None:
            call.start_mark = mark
        self._running.append(owner)

    def _node_end(self, owner: int, grad_inputs: Any, grad_outputs: Any) -> None:
        self.calls[owner].end_mark = self.clock.mark()
        if self._running:
            self._running.pop()

    def failing_path(self) -> str | None:
        """The innermost layer the last step failed in: forward, else backward node."""
        if self.failed is not None:
            return self.failed
        return self.calls[self._running[-1]].path if self._running else None

    def take(self, iteration: int) -> tuple[list[LayerCall], set[str]]:
        """This iteration's backward calls (parents before children) and the paths
        that ran forward; resets for the next iteration."""
        calls, ran = self.calls, {c.path for c in self.calls}
        timed = [i for i, c in enumerate(calls) if c.start_mark is not None]
        times = self.clock.resolve(
            [m for i in timed for m in (calls[i].start_mark, calls[i].end_mark)]
        )
        hull: list[tuple[int, int] | None] = [None] * len(calls)
        for k, i in enumerate(timed):
            hull[i] = (times[2 * k], times[2 * k + 1])
        for i in range(len(calls) - 1, -1, -1):  # children after parents: fold upwards
            p, own = calls[i].parent, hull[i]
            if p >= 0 and own is not None:
                up = hull[p]
                hull[p] = own if up is None else (min(up[0], own[0]), max(up[1], own[1]))
        spans = [(c.path, h[0], h[1]) for c, h in zip(calls, hull, strict=True) if h is not None]
        self.calls, self._stack, self._running, self.failed = [], [], [], None
        return nest_intervals(spans, iteration), ran


def next_sequence_nr() -> Callable[[], int]:
    """torch's per-thread autograd sequence counter (the number the next node gets)."""
    import torch

    peek = getattr(torch.autograd, "_get_sequence_nr", None)
    node = getattr(torch.autograd.graph, "Node", None)
    if peek is None or not hasattr(node, "register_prehook"):
        raise NodeHooksUnavailable(f"torch {torch.__version__} has no graph-node hooks")
    return cast(Callable[[], int], peek)


def profile_backward(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    iters: int,
    loss: LossFn | None,
    clock: Clock | None = None,
) -> BackwardProfile:
    """Backward total and self time of every layer that ran forward, per iteration.

    Graph-node hooks (see the module docstring); where they cannot be used,
    ops mode (torch.profiler). One untimed step runs first (autograd warm-up).
    Forward hooks are removed and ``.grad`` restored also on errors and Ctrl-C.
    """
    try:
        times = _node_hook_times(model, args, kwargs, iters, loss, clock or HostClock())
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
) -> BackwardTimes:
    device = device_of(model)
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
    times: BackwardTimes = {p: (tuple(s.total_ns), tuple(s.self_ns)) for p, s in samples.items()}
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
    from layerprof.capture.ops.profiler import OpOptions, capture_ops

    cap = capture_ops(
        model, args, kwargs, iters=iters, device=device_of(model), options=OpOptions(),
        backward=True, loss=loss,
    )  # fmt: skip
    times: BackwardTimes = {
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


def nest_intervals(spans: Sequence[tuple[str, int, int]], iteration: int) -> list[LayerCall]:
    """Containment nesting; a child ending after its parent extends the parent (and up).

    Spans that coincide nest in the order given (give parents first).
    """
    ordered = sorted(spans, key=lambda s: (s[1], -s[2]))
    rows: list[list[Any]] = []  # [path, start, end, parent]
    stack: list[int] = []
    for path, start, end in ordered:
        while stack and rows[stack[-1]][2] <= start:
            stack.pop()
        for i in stack:
            rows[i][2] = max(rows[i][2], end)
        rows.append([path, start, end, stack[-1] if stack else -1])
        stack.append(len(rows) - 1)
    return [LayerCall(p, iteration, s, e, parent) for p, s, e, parent in rows]
