"""Operators and kernels per layer: a ``torch.profiler`` run attributed to module paths.

Mechanism (see docs/ops.md): per-module forward pre/post hooks open and close
a profiler range named ``layer:{path}`` (``_RecordFunctionFast``, the cheapest
record function torch has). After the run, the profiler's own event list
(``kineto_results.events()``: about 1 ms per thousand events, against 10 ms
for the Chrome export + orjson and 80 ms for ``prof.events()``) is swept once
per thread in start order: every ``cpu_op`` belongs to the innermost open
``layer:`` range, which is the exact module path, not the ``Linear_3``
instance counter of ``with_stack=True``. Kernels, memcpys and memsets are
attributed to the op that launched them by correlation id.

Backward ops (``--backward``) are attributed by autograd sequence number: an
``autograd::engine::evaluate_function: XBackward0`` node carries the sequence
number and forward thread of the forward op that created it (see
``layerprof.backward``).

Numbers in ``OpStat`` rows are **per iteration** (sums over the profiled
iterations divided by their number), like the layer rows.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson

from layerprof.errors import ModelRunError, UsageError
from layerprof.hooks import HookHandles, hookable_modules
from layerprof.layertimes import build_samples
from layerprof.quiet import kineto_quiet
from layerprof.records import LayerCall, LayerSamples, Meta, OpStat
from layerprof.stats import Series

if TYPE_CHECKING:
    import torch

    from layerprof.profile import Profile

LAYER_PREFIX = "layer:"
UNATTRIBUTED = "(unattributed)"
BACKWARD_NODE = "autograd::engine::evaluate_function: "
HOST_ACTIVITIES = frozenset({"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"})
DEVICE_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
STEP_PREFIX = "ProfilerStep#"


@dataclass(frozen=True)
class OpOptions:
    """What ``torch.profiler`` records besides op names and times.

    ``record_shapes``: input shapes per op (and group-by-shape tables);
    ``profile_memory``: allocator events; ``with_stack``: Python stacks in the
    trace; ``with_flops``: FLOP estimates of matmul/conv ops in the trace;
    ``schedule``: ``(wait, warmup, active, repeat)`` as for
    ``torch.profiler.schedule``: only active steps are recorded.
    """

    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    schedule: tuple[int, int, int, int] | None = None


@dataclass(frozen=True)
class HostEvent:
    """One host span from the profiler, times in ns on the profiler's clock."""

    name: str
    tid: int
    start: int
    end: int
    seq: int = -1
    fwd_tid: int = 0
    corr: int = 0
    shapes: str | None = None


@dataclass(frozen=True)
class DeviceEvent:
    """One kernel / memcpy / memset; ``linked`` is the launching op's correlation id."""

    name: str
    start: int
    end: int
    linked: int


@dataclass(frozen=True)
class MemoryEvent:
    """One allocator event (``profile_memory``): +bytes allocated, -bytes freed."""

    tid: int
    ts: int
    nbytes: int
    on_device: bool  # a CUDA allocation, not a host one


@dataclass(frozen=True)
class OpRecord:
    """One op call after attribution (``phase`` is ``forward`` or ``backward``)."""

    name: str
    layer: str
    iteration: int
    self_ns: int
    total_ns: int
    device_ns: int | None
    shapes: str | None
    phase: str
    top_backward: bool = False  # an autograd node not nested in another one
    outer: bool = True  # no enclosing op: its inclusive device time is counted once


@dataclass
class TraceCycle:
    """The Chrome-trace side of one profiler cycle, decoded only when asked for."""

    loader: Callable[[], dict[str, Any]]
    _data: dict[str, Any] | None = None

    def data(self) -> dict[str, Any]:
        if self._data is None:
            self._data = self.loader()
        return self._data


@dataclass
class OpCapture:
    """Result of ``capture_ops``: attributed ops, layer ranges and the raw trace."""

    records: tuple[OpRecord, ...]
    calls: tuple[LayerCall, ...]
    iterations: int
    device: str
    cycles: tuple[TraceCycle, ...] = ()
    has_device: bool = False
    peak_bytes: dict[str, int] | None = None  # with profile_memory: see layer_peaks
    _ops: tuple[OpStat, ...] | None = field(default=None, repr=False)

    # ---- op tables ----------------------------------------------------------------
    @property
    def ops(self) -> tuple[OpStat, ...]:
        """Forward ops per (layer, name[, input shapes]), per iteration, by self time."""
        if self._ops is None:
            self._ops = _aggregate(self._of("forward"), self.iterations, self.has_device)
        return self._ops

    @property
    def backward_ops(self) -> tuple[OpStat, ...]:
        """Backward ops per (layer, name[, shapes]); unattributed ones under ``(unattributed)``."""
        return _aggregate(self._of("backward"), self.iterations, self.has_device)

    def flat_ops(self, group_by_shape: bool = False) -> tuple[OpStat, ...]:
        """Forward ops over all layers, like ``key_averages()`` (``layer`` is None)."""
        rows = [replace(r, layer="") for r in self._of("forward")]
        if not group_by_shape:
            rows = [replace(r, shapes=None) for r in rows]
        return tuple(
            replace(o, layer=None) for o in _aggregate(rows, self.iterations, self.has_device)
        )

    def _of(self, phase: str) -> list[OpRecord]:
        return [r for r in self.records if r.phase == phase]

    # ---- layers -------------------------------------------------------------------
    def layer_samples(self) -> dict[str, LayerSamples]:
        """Per-layer host totals from the ``layer:`` ranges (+ device, + backward)."""
        samples = build_samples(list(self.calls), self.iterations)
        if self.has_device:
            samples = _with_device(samples, self._of("forward"), self.iterations)
        if any(r.phase == "backward" for r in self.records):
            from layerprof.backward import backward_samples_from_ops

            bwd = backward_samples_from_ops(self._of("backward"), list(samples), self.iterations)
            samples = {
                p: replace(
                    s, backward_total_ns=Series(bwd[p][0]), backward_self_ns=Series(bwd[p][1])
                )
                if p in bwd
                else s
                for p, s in samples.items()
            }
        return samples

    # ---- trace -----------------------------------------------------------------------
    @property
    def trace_events(self) -> list[dict[str, Any]]:
        """Kineto Chrome-trace events of all cycles, on the first cycle's time base."""
        events: list[dict[str, Any]] = []
        base0: int | None = None
        for cycle in self.cycles:
            data = cycle.data()
            base = int(data.get("baseTimeNanoseconds") or 0)
            base0 = base if base0 is None else base0
            shift_us = (base - base0) / 1000
            for ev in data.get("traceEvents") or ():
                if shift_us and "ts" in ev:
                    ev = {**ev, "ts": ev["ts"] + shift_us}
                events.append(ev)
        return events

    def trace_metadata(self) -> dict[str, Any]:
        """The first cycle's top-level keys other than ``traceEvents``."""
        if not self.cycles:
            return {}
        return {k: v for k, v in self.cycles[0].data().items() if k != "traceEvents"}


# ---- capture ------------------------------------------------------------------------


def capture_ops(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    iters: int,
    device: str,
    options: OpOptions,
    grad_ctx_factory: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    backward: bool = False,
    loss: Callable[[Any], Any] | None = None,
) -> OpCapture:
    """Profile ``iters`` forwards (and backwards when ``backward``) with ops per layer.

    ``grad_ctx_factory`` gives the grad mode of the forwards (e.g.
    ``torch.inference_mode``); with ``backward`` the forwards run under
    ``torch.enable_grad()`` and ``loss`` (default: sum of all floating
    outputs) is back-propagated each iteration, gradients zeroed between.
    Hooks and profiler are removed/stopped also when the model raises.
    """
    import torch

    if iters < 1:
        raise UsageError("--iters must be at least 1 for --ops")
    kwargs = kwargs or {}
    kw = profiler_kwargs(options, device, iters)
    steps = iters
    if "schedule" not in kw:
        # One recorded-but-discarded step first: the first profiled step pays the
        # profiler's and the ranges' start-up cost, which would inflate the means.
        kw["schedule"] = torch.profiler.schedule(wait=0, warmup=1, active=iters, repeat=1)
        steps = iters + 1
    cycles: list[Any] = []
    # Take each cycle's results when it ends: the profiler object is reused, so
    # reading it after the loop would give the last cycle's results every time.
    kw["on_trace_ready"] = lambda p: cycles.append(p.profiler)
    step = _step_fn(model, args, kwargs, backward, loss, device)
    marks = LayerMarks(model)
    with _grad_state(model, backward, grad_ctx_factory), marks, warnings.catch_warnings():
        # "Profiler clears events at the end of each cycle": we keep each cycle's results
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        prof = torch.profiler.profile(**kw)
        with kineto_quiet(), prof:
            for _ in range(steps):
                marks.run(step)
                prof.step()
    results = [c.kineto_results for c in cycles] or [_results_of(prof)]
    memory = [memory_events(r) for r in results] if options.profile_memory else None
    return build_capture([_host_device(r) for r in results], results, device, memory)


def _results_of(prof: Any) -> Any:
    """The finished cycle's Kineto results (private API, present since torch 1.8)."""
    return prof.profiler.kineto_results


def profiler_kwargs(options: OpOptions, device: str, iters: int) -> dict[str, Any]:
    """``torch.profiler.profile`` arguments; unsupported options -> UsageError."""
    import torch
    from torch.profiler import ProfilerActivity

    supported = supported_profiler_args()
    wanted = {
        "record_shapes": options.record_shapes,
        "profile_memory": options.profile_memory,
        "with_stack": options.with_stack,
        "with_flops": options.with_flops,
    }
    for name, on in wanted.items():
        if on and name not in supported:
            flag = "--" + name.replace("_", "-")
            raise UsageError(
                f"{flag} is not supported by torch {torch.__version__}'s profiler",
                hint="upgrade torch or drop the option",
            )
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    kw: dict[str, Any] = {"activities": activities, **{k: v for k, v in wanted.items() if v}}
    if options.schedule is not None:
        kw["schedule"] = make_schedule(options.schedule, iters)
    return kw


def supported_profiler_args() -> set[str]:
    """Keyword arguments this torch's ``torch.profiler.profile`` accepts."""
    import torch

    return set(inspect.signature(torch.profiler.profile.__init__).parameters)


def make_schedule(spec: tuple[int, int, int, int], iters: int) -> Any:
    import torch

    wait, warmup, active, repeat = spec
    if min(wait, warmup, repeat) < 0 or active < 1:
        raise UsageError(
            f"--schedule {wait},{warmup},{active},{repeat}: need wait, warmup, repeat >= 0"
            " and active >= 1"
        )
    if wait + warmup + active > iters:
        raise UsageError(
            f"--schedule {wait},{warmup},{active},{repeat} needs at least"
            f" {wait + warmup + active} iterations, --iters is {iters}",
            hint=f"use --iters {wait + warmup + active} or more",
        )
    return torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)


def _grad_state(
    model: Any,
    backward: bool,
    factory: Callable[[], contextlib.AbstractContextManager[Any]] | None,
) -> contextlib.AbstractContextManager[Any]:
    import torch

    if backward:
        from layerprof.backward import backward_state

        return backward_state(model)
    return (factory or torch.no_grad)()


def _step_fn(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    backward: bool,
    loss: Callable[[Any], Any] | None,
    device: str,
) -> Callable[[], Any]:
    from layerprof.clocks import synchronizer

    sync = synchronizer(device)
    if not backward:
        return lambda: model(*args, **kwargs)
    from layerprof.backward import backward_step

    return backward_step(model, args, kwargs, loss, sync)


class LayerMarks:
    """Forward hooks opening/closing a profiler range ``layer:{path}`` per module call.

    On an error inside a forward, the ranges left open are closed innermost
    first (the profiler would otherwise see unbalanced ranges) and the error
    names the innermost open layer, as the hooks mode does.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._hooks = HookHandles()
        self._open: list[tuple[str, Any]] = []
        self._failed: str | None = None

    def __enter__(self) -> LayerMarks:
        enter, leave = range_api()
        opened = self._open
        with self._hooks.registering() as hooks:
            for path, module in hookable_modules(self.model):
                name = LAYER_PREFIX + path

                def pre(mod: Any, a: Any, name: str = name, path: str = path) -> None:
                    opened.append((path, enter(name)))

                def post(mod: Any, a: Any, out: Any, path: str = path) -> None:
                    # always_call: also runs when the forward raised, so a child
                    # whose error its parent catches closes its range in time.
                    if self._failed is None and sys.exc_info()[0] is not None:
                        self._failed = path  # the innermost layer unwinds first
                    while opened and opened[-1][0] != path:
                        leave(opened.pop()[1])
                    if opened:
                        leave(opened.pop()[1])

                hooks.add(module.register_forward_pre_hook(pre))
                hooks.add(module.register_forward_hook(post, always_call=True))
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_open()
        self._hooks.remove()

    def close_open(self) -> None:
        _, leave = range_api()
        while self._open:
            leave(self._open.pop()[1])

    def run(self, step: Callable[[], Any]) -> Any:
        self._failed = None
        try:
            return step()
        except (KeyboardInterrupt, ModelRunError):
            self.close_open()
            raise
        except Exception as exc:
            from layerprof.runner import model_error

            path = self._failed or (self._open[-1][0] if self._open else None)
            self.close_open()
            raise model_error(self.model, path, exc) from exc


def range_api() -> tuple[Callable[[str], Any], Callable[[Any], None]]:
    """(enter(name) -> handle, leave(handle)): the fast C++ range when torch has it."""
    import torch

    fast = getattr(torch._C._profiler, "_RecordFunctionFast", None)
    if fast is not None:

        def enter(name: str) -> Any:
            rf = fast(name)
            rf.__enter__()
            return rf

        def leave(rf: Any) -> None:
            rf.__exit__(None, None, None)

        return enter, leave
    ops = torch.ops.profiler
    return (
        lambda name: ops._record_function_enter_new(name, None),
        lambda handle: ops._record_function_exit._RecordFunction(handle),
    )


# ---- events -> records ---------------------------------------------------------------


def _host_device(results: Any) -> tuple[list[HostEvent], list[DeviceEvent]]:
    """Host spans and device spans of one profiler cycle (python/memory events skipped)."""
    host: list[HostEvent] = []
    dev: list[DeviceEvent] = []
    for e in results.events():
        kind = e.activity_type()
        if kind in HOST_ACTIVITIES:
            shapes = e.shapes()
            host.append(
                HostEvent(
                    name=e.name(),
                    tid=int(e.start_thread_id()),
                    start=int(e.start_ns()),
                    end=int(e.end_ns()),
                    seq=int(e.sequence_nr()),
                    fwd_tid=int(e.fwd_thread_id()),
                    corr=int(e.correlation_id()),
                    shapes=str(shapes) if shapes and any(shapes) else None,
                )
            )
        elif kind in DEVICE_ACTIVITIES:
            dev.append(
                DeviceEvent(
                    e.name(), int(e.start_ns()), int(e.end_ns()), int(e.linked_correlation_id())
                )
            )
    return host, dev


def trace_loader(results: Any) -> Callable[[], dict[str, Any]]:
    def load() -> dict[str, Any]:
        fd, tmp = tempfile.mkstemp(suffix=".pt.trace.json")
        os.close(fd)
        try:
            results.save(tmp)
            with open(tmp, "rb") as handle:
                data: dict[str, Any] = orjson.loads(handle.read())
            return data
        finally:
            os.unlink(tmp)

    return load


def build_capture(
    cycles: Sequence[tuple[list[HostEvent], list[DeviceEvent]]],
    results: Sequence[Any] = (),
    device: str = "cpu",
    memory: Sequence[list[MemoryEvent]] | None = None,
) -> OpCapture:
    """Attribute every cycle's events and join them (iterations numbered across cycles).

    ``memory`` (one list per cycle, with ``profile_memory``) gives each layer's
    peak memory rise, on the run's device.
    """
    records: list[OpRecord] = []
    calls: list[LayerCall] = []
    iterations = 0
    has_device = device.startswith("cuda")
    peaks: dict[str, int] | None = {} if memory is not None else None
    for n_cycle, (host, dev) in enumerate(cycles):
        recs, cls, n = attribute(host, dev if has_device else None, first_iteration=iterations)
        base = len(calls)
        calls += [replace(c, parent=c.parent + base if c.parent >= 0 else -1) for c in cls]
        records += recs
        iterations += n
        if memory is not None and peaks is not None:
            for path, rise in layer_peaks(host, memory[n_cycle], on_device=has_device).items():
                peaks[path] = max(peaks.get(path, 0), rise)
    return OpCapture(
        records=tuple(records),
        calls=tuple(calls),
        iterations=max(iterations, 1),
        device=device,
        cycles=tuple(TraceCycle(trace_loader(r)) for r in results),
        has_device=has_device,
        peak_bytes=peaks,
    )


def memory_events(results: Any) -> list[MemoryEvent]:
    """The allocator events of one profiler cycle (present with ``profile_memory``)."""
    out = []
    for e in results.events():
        if e.name() == "[memory]":
            out.append(
                MemoryEvent(
                    tid=int(e.start_thread_id()),
                    ts=int(e.start_ns()),
                    nbytes=int(e.nbytes()),
                    on_device=int(e.device_type()) != 0,
                )
            )
    return out


def layer_peaks(
    host: Sequence[HostEvent], memory: Sequence[MemoryEvent], *, on_device: bool
) -> dict[str, int]:
    """Per layer path: how far allocated memory rose above its level at the layer's
    entry, at the highest point inside the layer (max over calls) - the same
    quantity layerprof.memory measures with CUDA's counters, here from the
    profiler's allocator events on the layer's own thread."""
    import numpy as np

    by_tid: dict[int, tuple[Any, Any]] = {}
    for tid in {m.tid for m in memory if m.on_device == on_device}:
        events = sorted(
            (m.ts, m.nbytes) for m in memory if m.tid == tid and m.on_device == on_device
        )
        ts = np.array([t for t, _ in events], dtype=np.int64)
        level = np.concatenate([[0], np.cumsum([b for _, b in events])])  # level[k]: before event k
        by_tid[tid] = (ts, level)
    peaks: dict[str, int] = {}
    for e in host:
        if not e.name.startswith(LAYER_PREFIX) or e.tid not in by_tid:
            continue
        ts, level = by_tid[e.tid]
        i, j = np.searchsorted(ts, e.start, "left"), np.searchsorted(ts, e.end, "left")
        if j <= i:
            continue
        rise = int(level[i + 1 : j + 1].max() - level[i])
        path = e.name[len(LAYER_PREFIX) :]
        peaks[path] = max(peaks.get(path, 0), rise, 0)
    return peaks


@dataclass
class _Frame:
    """An open op span during the sweep."""

    event: HostEvent
    layer: str
    iteration: int
    child_ns: int = 0
    device_ns: int = 0
    outer: bool = True
    bwd_key: tuple[int, int] | None = None  # (fwd thread, seq) of the enclosing autograd node
    top_backward: bool = False


def attribute(
    host: Sequence[HostEvent],
    device: Sequence[DeviceEvent] | None,
    *,
    first_iteration: int = 0,
) -> tuple[list[OpRecord], list[LayerCall], int]:
    """Sweep host spans per thread: ops -> innermost layer range; layer ranges -> calls.

    Returns op records, layer calls (start order, ``parent`` indices) and the
    number of iterations (root-level layer ranges). ``device`` None = CPU run.
    """
    own_device = _device_by_corr(device) if device is not None else None
    ordered = sorted(host, key=lambda e: (e.tid, e.start, -e.end))
    layer_spans = [e for e in ordered if e.name.startswith(LAYER_PREFIX)]
    calls, span_iter = _layer_calls(layer_spans, first_iteration)
    n_iters = len({c.iteration for c in calls})
    iteration_of = dict(zip((id(e) for e in layer_spans), span_iter, strict=True))
    raw: list[tuple[_Frame, int]] = []
    fwd: dict[tuple[int, int], tuple[str, int]] = {}
    layer_stack: list[HostEvent] = []
    op_stack: list[_Frame] = []
    thread = None
    last_iter = first_iteration
    for e in ordered:
        if e.tid != thread:
            thread, layer_stack, op_stack = e.tid, [], []
        while layer_stack and layer_stack[-1].end <= e.start:
            layer_stack.pop()
        while op_stack and op_stack[-1].event.end <= e.start:
            raw.append(_close(op_stack.pop(), op_stack))
        if e.name.startswith(LAYER_PREFIX):
            layer_stack.append(e)
            last_iter = iteration_of[id(e)]
            continue
        if e.name.startswith(STEP_PREFIX):
            continue
        frame = _open(e, layer_stack, op_stack, last_iter, own_device)
        if frame.bwd_key is None and e.seq >= 0 and layer_stack:
            fwd.setdefault((e.tid, e.seq), (frame.layer, frame.iteration))
        op_stack.append(frame)
    while op_stack:
        raw.append(_close(op_stack.pop(), op_stack))
    records = [_record(f, dev, fwd, own_device is not None) for f, dev in raw]
    return records, calls, n_iters


def _open(
    e: HostEvent,
    layers: list[HostEvent],
    ops: list[_Frame],
    iteration: int,
    own_device: dict[int, int] | None,
) -> _Frame:
    layer = layers[-1].name[len(LAYER_PREFIX) :] if layers else UNATTRIBUTED
    parent = ops[-1] if ops else None
    bwd_key = parent.bwd_key if parent is not None else None
    top = False
    if e.name.startswith(BACKWARD_NODE) and bwd_key is None:
        bwd_key, top = (e.fwd_tid, e.seq), True
    dev = own_device.get(e.corr, 0) if own_device is not None else 0
    return _Frame(
        e, layer, iteration, device_ns=dev, outer=parent is None, bwd_key=bwd_key, top_backward=top
    )


def _close(frame: _Frame, stack: list[_Frame]) -> tuple[_Frame, int]:
    """Finish a span: credit its (clipped) duration and device time to its parent op."""
    if stack:
        parent = stack[-1]
        end = min(frame.event.end, parent.event.end)
        parent.child_ns += max(end - frame.event.start, 0)
        parent.device_ns += frame.device_ns
    return frame, frame.device_ns


def _record(
    frame: _Frame, device_ns: int, fwd: dict[tuple[int, int], tuple[str, int]], on_device: bool
) -> OpRecord:
    e = frame.event
    total = e.end - e.start
    layer, iteration, phase = frame.layer, frame.iteration, "forward"
    if frame.bwd_key is not None:
        phase = "backward"
        layer, iteration = fwd.get(frame.bwd_key, (UNATTRIBUTED, frame.iteration))
    return OpRecord(
        name=e.name,
        layer=layer,
        iteration=iteration,
        self_ns=max(total - frame.child_ns, 0),
        total_ns=total,
        device_ns=device_ns if on_device else None,
        shapes=e.shapes,
        phase=phase,
        top_backward=frame.top_backward,
        outer=frame.outer,
    )


def _device_by_corr(device: Sequence[DeviceEvent]) -> dict[int, int]:
    own: dict[int, int] = {}
    for d in device:
        if d.linked > 0:
            own[d.linked] = own.get(d.linked, 0) + (d.end - d.start)
    return own


def _layer_calls(
    spans: Sequence[HostEvent], first_iteration: int
) -> tuple[list[LayerCall], list[int]]:
    """LayerCall records (parent by containment per thread); a root-level range = an iteration."""
    calls: list[LayerCall] = []
    iters: list[int] = []
    stack: list[int] = []
    thread = None
    iteration = first_iteration - 1
    for e in spans:
        if e.tid != thread:
            thread, stack = e.tid, []
        while stack and calls[stack[-1]].end_ns <= e.start:
            stack.pop()
        if not stack:
            iteration += 1
        parent = stack[-1] if stack else -1
        calls.append(
            # iterations are numbered across cycles, like the op records
            LayerCall(e.name[len(LAYER_PREFIX) :], iteration, e.start, e.end, parent)
        )
        iters.append(iteration)
        stack.append(len(calls) - 1)
    return calls, iters


# ---- aggregation ---------------------------------------------------------------------


def _aggregate(records: Sequence[OpRecord], iterations: int, on_device: bool) -> tuple[OpStat, ...]:
    """Sum per (layer, name, shapes), divide by iterations; largest self time first."""
    acc: dict[tuple[str, str, str | None, str], list[int]] = {}
    for r in records:
        a = acc.setdefault((r.layer, r.name, r.shapes, r.phase), [0, 0, 0, 0])
        a[0] += 1
        a[1] += r.self_ns
        a[2] += r.total_ns
        a[3] += r.device_ns or 0
    n = max(iterations, 1)
    out = [
        OpStat(
            name=name,
            calls=round(a[0] / n),
            self_ns=round(a[1] / n),
            total_ns=round(a[2] / n),
            device_ns=round(a[3] / n) if on_device else None,
            layer=layer,
            input_shapes=shapes,
            phase=phase,
        )
        for (layer, name, shapes, phase), a in acc.items()
    ]
    out.sort(key=lambda o: (-o.self_ns, o.layer or "", o.name))
    return tuple(out)


def _with_device(
    samples: dict[str, LayerSamples], records: Sequence[OpRecord], iterations: int
) -> dict[str, LayerSamples]:
    """Device self of a layer = device time of ops launched directly in it; total adds children."""
    self_dev: dict[str, list[int]] = {p: [0] * iterations for p in samples}
    for r in records:
        if r.layer in self_dev and r.device_ns and r.outer:
            self_dev[r.layer][r.iteration] += r.device_ns
    total = _roll_up(self_dev)
    return {
        p: replace(s, device_self_ns=Series(self_dev[p]), device_total_ns=Series(total[p]))
        for p, s in samples.items()
    }


def _roll_up(self_values: dict[str, list[int]]) -> dict[str, list[int]]:
    """Inclusive per-path sums over the module-path tree (``a.b`` is a child of ``a``)."""
    total = {p: list(v) for p, v in self_values.items()}
    for path, values in self_values.items():
        for anc in ancestors(path):
            if anc in total:
                total[anc] = [x + y for x, y in zip(total[anc], values, strict=True)]
    return total


def ancestors(path: str) -> Iterator[str]:
    """``a.b.c`` -> ``a.b``, ``a``, ``""``; the root has none."""
    while path:
        path = path.rsplit(".", 1)[0] if "." in path else ""
        yield path


def profile_from_capture(
    model: torch.nn.Module, capture: OpCapture, meta: Meta | None = None, *, backward: bool = True
) -> Profile:
    """A Profile of the capture alone (layer rows from the ranges, ops, backward ops).

    The runner builds the real one (latency pass, shapes, meta); this is the
    ops-mode equivalent of ``Recorder.profile``, used by tests and the API.
    """
    from layerprof.profile import Profile
    from layerprof.recorder import default_meta, layer_infos

    return Profile(
        meta=meta or replace(default_meta(model, capture.iterations), source="layerprof.ops"),
        layers=layer_infos(model),
        samples=capture.layer_samples(),
        ops=capture.ops + (capture.backward_ops if backward else ()),
    )
