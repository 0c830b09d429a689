"""Ops mode: a ``torch.profiler`` run whose operators are attributed to module paths.

Mechanism (see docs/ops.md): the Recorder's forward wrappers open and close
a profiler range named ``layer:{path}`` (``_RecordFunctionFast``, the cheapest
record function torch has) around every module's forward. After the run, the
profiler's own event list (``kineto_results.events()``: about 1 ms per
thousand events, against 10 ms for the Chrome export + orjson) becomes the
same event tables a trace file gives (``layerprof.trace.kineto``), and the
one trace engine attributes them (``layerprof.trace.reduce``): every op to
the innermost ``layer:`` range, i.e. the exact module path; kernels to their
op by correlation id; backward nodes to their forward op's layer by sequence
number; per-layer memory peaks from the allocator events.

This module only runs the profiler: ``capture_ops`` returns a
:class:`RawTrace` (the results of every profiler cycle), which
``RawTrace.profile()`` reduces to a Profile and the Chrome/TensorBoard
exports read.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from layerprof.capture.modules import ForwardWrapper, HookHandles, wrappable_modules
from layerprof.capture.options import OpOptions
from layerprof.capture.platform.clocks import synchronizer
from layerprof.capture.quiet import kineto_quiet
from layerprof.capture.recording.layerinfo import default_meta, layer_infos
from layerprof.capture.step import backward_state, backward_step
from layerprof.errors import ModelRunError, UsageError
from layerprof.trace.attribution import BACKWARD_NODE, UNATTRIBUTED, layer_peaks
from layerprof.trace.events import EventTables
from layerprof.trace.kineto import tables_from_documents, tables_from_results
from layerprof.trace.reader import requoted
from layerprof.trace.reduce import reduce
from layerprof.traceformat import (
    CPU_OP,
    CUDA_DRIVER,
    CUDA_RUNTIME,
    EVENTS_KEY,
    GPU_MEMCPY,
    GPU_MEMSET,
    KERNEL_CATEGORY,
    LAYER_RANGE,
    USER_ANNOTATION,
)

if TYPE_CHECKING:
    import torch

    from layerprof.pivot.profile import Profile
    from layerprof.pivot.records import Meta

__all__ = ["BACKWARD_NODE", "UNATTRIBUTED", "RawTrace", "capture_ops"]
_HOST_ACTIVITIES = frozenset({CPU_OP, USER_ANNOTATION, CUDA_RUNTIME, CUDA_DRIVER})
_DEVICE_ACTIVITIES = frozenset(
    {KERNEL_CATEGORY, GPU_MEMCPY, GPU_MEMSET, "Kernel", "Memcpy", "Memset"}
)


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
class RawTrace:
    """What one ops-mode capture recorded: every profiler cycle's results.

    ``tables()`` builds the trace engine's event tables from the in-memory
    events; ``cycles`` give the Chrome trace of each cycle on demand (for
    ``--trace`` / ``--tensorboard``). ``keep_shapes`` and ``profile_memory``
    echo the options the profiler ran with; ``extra_layers`` are synthetic
    layer spans (TorchScript) added to the recorded ones.
    """

    results: tuple[Any, ...]
    device: str
    cycles: tuple[TraceCycle, ...] = ()
    keep_shapes: bool = False
    profile_memory: bool = False
    _tables: EventTables | None = field(default=None, repr=False)

    def tables(self) -> EventTables:
        if self._tables is None:
            if events_carry_kinds():
                self._tables = tables_from_results(self.results, keep_shapes=self.keep_shapes)
            else:
                # torch 2.11's events have no activity_type() (seen on a real GPU); the
                # Chrome export says the same, about 10x slower, so only where needed. It
                # writes no FLOP estimates: each cycle's own events give them by op id
                doc = {**self.trace_metadata(), EVENTS_KEY: self._events_with_flops()}
                self._tables = tables_from_documents(
                    [doc], keep_shapes=self.keep_shapes, keep_flops=True
                )
        return self._tables

    def _events_with_flops(self) -> list[dict[str, Any]]:
        """``trace_events``, each op given its ``flops`` from its cycle's in-memory event
        (an op's External id is that event's correlation id; ids restart each cycle)."""
        events: list[dict[str, Any]] = []
        for result, part in zip(self.results, self._cycle_events(), strict=True):
            flops = {
                int(e.correlation_id()): int(e.flops())
                for e in result.events()
                if hasattr(e, "flops") and e.flops() > 0
            }
            for ev in part:
                args = ev.get("args")
                if flops and ev.get("cat") == CPU_OP and isinstance(args, dict):
                    f = flops.get(args.get("External id"))  # type: ignore[arg-type]
                    if f:
                        ev = {**ev, "args": {**args, "flops": f}}
                events.append(ev)
        return events

    @classmethod
    def of_document(cls, doc: dict[str, Any], tables: EventTables, device: str) -> RawTrace:
        """A capture known by its Chrome trace (TorchScript), with the tables to attribute."""
        return cls(
            results=(), device=device, cycles=(TraceCycle(lambda: doc, doc),), _tables=tables
        )

    def profile(self, *, group_by_shape: bool | None = None) -> Profile:
        """The per-layer Profile of the capture (layers from its spans, ops, device, memory)."""
        shapes = self.keep_shapes if group_by_shape is None else group_by_shape
        return reduce(self.tables(), group_by_shape=shapes, whole_steps=True)

    def peak_bytes(self) -> dict[str, int] | None:
        """Per layer path: the peak memory rise inside it, on the run's device (with
        ``profile_memory``; None without allocator events)."""
        if not self.profile_memory:
            return None
        return layer_peaks(self.tables(), on_device=self.device.startswith("cuda"))

    # ---- trace -----------------------------------------------------------------------
    @property
    def trace_events(self) -> list[dict[str, Any]]:
        """Kineto Chrome-trace events of all cycles, on the first cycle's time base."""
        return [ev for part in self._cycle_events() for ev in part]

    def _cycle_events(self) -> list[list[dict[str, Any]]]:
        """Each cycle's Chrome-trace events, on the first cycle's time base."""
        parts: list[list[dict[str, Any]]] = []
        base0: int | None = None
        for cycle in self.cycles:
            data = cycle.data()
            base = int(data.get("baseTimeNanoseconds") or 0)
            base0 = base if base0 is None else base0
            shift_us = (base - base0) / 1000
            parts.append([
                {**ev, "ts": ev["ts"] + shift_us} if shift_us and "ts" in ev else ev
                for ev in data.get(EVENTS_KEY) or ()
            ])  # fmt: skip
        return parts

    def trace_metadata(self) -> dict[str, Any]:
        """The first cycle's top-level keys other than ``traceEvents``."""
        if not self.cycles:
            return {}
        return {k: v for k, v in self.cycles[0].data().items() if k != EVENTS_KEY}


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
) -> RawTrace:
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
    marks = _LayerMarks(model)
    with _grad_state(model, backward, grad_ctx_factory), marks, warnings.catch_warnings():
        # "Profiler clears events at the end of each cycle": we keep each cycle's results
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        prof = torch.profiler.profile(**kw)
        with kineto_quiet(), prof:
            for _ in range(steps):
                marks.run(step)
                prof.step()
    results = [c.kineto_results for c in cycles] or [_results_of(prof)]
    return RawTrace(
        results=tuple(results),
        device=device,
        cycles=tuple(TraceCycle(trace_loader(r)) for r in results),
        keep_shapes=options.record_shapes,
        profile_memory=options.profile_memory,
    )


def events_carry_kinds() -> bool:
    """Whether this torch's in-memory profiler events say their activity type."""
    import torch

    return hasattr(torch._C._autograd._KinetoEvent, "activity_type")


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
        kw["schedule"] = _make_schedule(options.schedule, iters)
    return kw


def supported_profiler_args() -> set[str]:
    """Keyword arguments this torch's ``torch.profiler.profile`` accepts."""
    import torch

    return set(inspect.signature(torch.profiler.profile.__init__).parameters)


def _make_schedule(spec: tuple[int, int, int, int], iters: int) -> Any:
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

    sync = synchronizer(device)
    if not backward:
        return lambda: model(*args, **kwargs)

    return backward_step(model, args, kwargs, loss, sync)


class _LayerMarks:
    """A profiler range ``layer:{path}`` around every module's forward.

    The ranges are opened by the same instance-level forward wrappers the
    Recorder uses (``layerprof.capture.modules.ForwardWrapper``): a layer's
    range is its ``forward``, as a layer's time is in hooks mode, scripted and
    compiled modules are one range each, and no ``__call__`` hook slows every
    call down. On an error the ranges close as the error passes (``with``)
    and the error names the innermost layer it came from, as hooks mode does.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._wrappers = HookHandles()
        self._failed: str | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> _LayerMarks:
        with self._wrappers.registering() as wrappers:
            for path, module in wrappable_modules(self.model):
                wrappers.add(ForwardWrapper(module, functools.partial(self._ranged, path)))
        return self

    def _ranged(self, path: str, inner: Callable[..., Any]) -> Callable[..., Any]:
        span = _range_context()
        name = LAYER_RANGE + path

        def ranged(*args: Any, **kwargs: Any) -> Any:
            with span(name):
                try:
                    return inner(*args, **kwargs) if kwargs else inner(*args)
                except BaseException as exc:
                    if exc is not self._error:  # the innermost layer sees it first
                        self._error, self._failed = exc, path
                    raise

        return ranged

    def __exit__(self, *exc: object) -> None:
        self._wrappers.remove()

    def run(self, step: Callable[[], Any]) -> Any:
        self._failed = self._error = None
        try:
            return step()
        except (KeyboardInterrupt, ModelRunError):
            raise
        except Exception as exc:
            from layerprof.capture.failures import model_error

            path = self._failed if exc is self._error else None
            raise model_error(self.model, path, exc) from exc


def _range_context() -> Callable[[str], contextlib.AbstractContextManager[Any]]:
    """``with span(name):`` a profiler range: the fast C++ one when torch has it."""
    import torch

    fast = getattr(torch._C._profiler, "_RecordFunctionFast", None)
    if fast is not None:
        return fast  # type: ignore[no-any-return]
    return torch.profiler.record_function  # type: ignore[no-any-return]


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


# ---- the Chrome trace of a cycle ----------------------------------------------------


def trace_loader(results: Any) -> Callable[[], dict[str, Any]]:
    def load() -> dict[str, Any]:
        fd, tmp = tempfile.mkstemp(suffix=".pt.trace.json")
        os.close(fd)
        try:
            results.save(tmp)
            with open(tmp, "rb") as handle:
                return exported_trace(handle.read())
        finally:
            os.unlink(tmp)

    return load


def exported_trace(raw: bytes) -> dict[str, Any]:
    """The Chrome trace torch exported, read tolerantly: when it is not valid JSON,
    quotes torch left unescaped in names are escaped and it is read again
    (``trace.reader.requoted``)."""
    try:
        data: dict[str, Any] = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = orjson.loads(requoted(raw))
    return data


def profile_from_capture(
    model: torch.nn.Module, raw: RawTrace, meta: Meta | None = None
) -> Profile:
    """A Profile of the capture alone: the model's layers, the per-layer times, ops and
    device sections the trace engine attributes, and the recorded trace (for exports).

    The runner builds the full one (latency pass, shapes, FLOPs, meta); this is
    the ops-mode equivalent of ``Recorder.profile``, for tests and the API.
    """
    from dataclasses import replace

    traced = raw.profile()
    iterations = len(traced.trace.steps.complete) if traced.trace.steps is not None else 0
    return replace(
        traced.with_trace(source=None, steps=None),
        meta=meta or replace(default_meta(model, iterations), source="layerprof.ops"),
        layers=layer_infos(model),
        notes=(),
        latency_ns=None,
        events=raw,
    )
