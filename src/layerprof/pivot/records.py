"""Frozen value objects that every source produces and every sink reads.

No torch import here: a saved profile is re-rendered, diffed and diagnosed
without torch. Times are integer nanoseconds inside; they become milliseconds
only at the edges (JSON, CSV, the console).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from layerprof.stats import Series, SeriesLike, as_series

#: Rows a compiled profile adds next to the module paths, children of the root (see
#: ``sections/compiled.py``): here, so that a test of a row needs no compiled types.
OVERHEAD_ROW = "<compiled overhead>"
OUTSIDE_ROW = "<outside compiled region>"
BUCKET_ROWS = (OVERHEAD_ROW, OUTSIDE_ROW)
BUCKET_TYPE = "(compiled)"

if TYPE_CHECKING:
    from layerprof.pivot.sections.flops import LayerFlops

Shape = tuple[int, ...]
_ShapeTree = Any  # nested lists of shapes / None for non-tensors, as the hooks saw them


@dataclass(frozen=True)
class LayerCall:
    """One call of one module's forward, as the Recorder saw it.

    ``parent`` is the index (in the same record list) of the enclosing call,
    or -1 for a call with no enclosing recorded call. Device times are
    CUDA-event times relative to the first event of the same forward (only
    differences within one forward are meaningful), ``None`` on CPU.
    """

    path: str
    iteration: int
    start_ns: int
    end_ns: int
    parent: int
    device_start_ns: int | None = None
    device_end_ns: int | None = None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def device_duration_ns(self) -> int | None:
        if self.device_start_ns is None or self.device_end_ns is None:
            return None
        return self.device_end_ns - self.device_start_ns


@dataclass(frozen=True)
class LayerInfo:
    """What a layer is, independent of any timing.

    ``flops`` counts the FLOPs of one forward inclusively (None when not
    counted; ``flop_detail`` has the elementwise part, bytes moved, the share
    of op time in uncounted ops and, with ``--backward``, the backward's: see
    layerprof.pivot.sections.flops); ``output_bytes`` is the size of the tensors the
    layer's first call returned (its activation memory); ``peak_bytes`` (CUDA
    only) how far allocated device memory rose above its level at the layer's
    entry, at the peak (see layerprof.capture.memory.allocator).
    """

    path: str
    type: str
    parent: str | None
    params: int = 0
    params_own: int = 0
    input_shapes: _ShapeTree = None
    output_shapes: _ShapeTree = None
    flops: int | None = None  # inclusive, per forward (layerprof.capture.flops.counter)
    flop_detail: LayerFlops | None = None
    output_bytes: int | None = None  # tensors returned by the first call
    peak_bytes: int | None = None  # CUDA: allocated memory's rise above entry, at its peak


@dataclass(frozen=True, init=False)
class LayerSamples:
    """Per-iteration times of one layer, summed over its calls in that iteration.

    Each time is a :class:`~layerprof.stats.Series`: sample ``i`` belongs to
    iteration ``i`` (samples may be absent in a profile loaded from a
    summary-only file; the summary is always there). Sequences passed in are
    turned into Series. ``calls`` is the mean number of calls per iteration,
    and ``calls_vary`` says whether that number changed between iterations
    (a branch taken only sometimes). Self is total minus the totals of the
    layer's direct child-module calls.
    """

    total_ns: Series
    self_ns: Series
    calls: float
    calls_vary: bool = False
    device_total_ns: Series | None = None
    device_self_ns: Series | None = None
    backward_total_ns: Series | None = None
    backward_self_ns: Series | None = None

    def __init__(
        self,
        total_ns: SeriesLike,
        self_ns: SeriesLike,
        calls: float,
        calls_vary: bool = False,
        device_total_ns: SeriesLike | None = None,
        device_self_ns: SeriesLike | None = None,
        backward_total_ns: SeriesLike | None = None,
        backward_self_ns: SeriesLike | None = None,
    ) -> None:
        total, self_ = as_series(total_ns), as_series(self_ns)
        if total is None or self_ is None:
            raise ValueError("a layer's samples need total and self times")
        setattr_ = object.__setattr__
        setattr_(self, "total_ns", total)
        setattr_(self, "self_ns", self_)
        setattr_(self, "calls", calls)
        setattr_(self, "calls_vary", calls_vary)
        setattr_(self, "device_total_ns", as_series(device_total_ns))
        setattr_(self, "device_self_ns", as_series(device_self_ns))
        setattr_(self, "backward_total_ns", as_series(backward_total_ns))
        setattr_(self, "backward_self_ns", as_series(backward_self_ns))


@dataclass(frozen=True)
class OpSamples:
    """Per-iteration sums of one operator row (iteration ``i`` -> sample ``i``)."""

    calls: Series
    self_ns: Series
    total_ns: Series
    device_ns: Series | None = None


@dataclass(frozen=True)
class OpStat:
    """One operator (optionally per input shapes, optionally per layer), per iteration.

    ``calls`` is the mean number of calls per iteration; ``self_ns``,
    ``total_ns`` and ``device_ns`` are medians over iterations of the
    per-iteration sums (the same statistic as the layer rows). ``samples``
    keeps the per-iteration values when they were recorded (ops mode,
    traces with steps), for the noise test of ``diff``. ``device_ns`` is None
    where there is no device data (CPU runs), never 0; ``phase`` is
    ``forward`` or ``backward``.

    With ``--profile-memory``: ``cpu_mem_bytes`` / ``self_cpu_mem_bytes`` (and the
    device's) are bytes allocated minus freed while the op (and its children, or
    only itself) ran, per iteration, as torch's ``key_averages()`` "CPU Mem" /
    "Self CPU Mem"; with ``--with-flops``, ``flops`` is the profiler's estimate
    per iteration. None where not recorded.
    """

    name: str
    calls: float
    self_ns: float
    total_ns: float
    device_ns: float | None = None
    layer: str | None = None
    input_shapes: str | None = None
    phase: str = "forward"
    samples: OpSamples | None = None
    cpu_mem_bytes: float | None = None
    self_cpu_mem_bytes: float | None = None
    device_mem_bytes: float | None = None
    self_device_mem_bytes: float | None = None
    flops: float | None = None

    @property
    def self_ms(self) -> float:
        """``self_ns`` in milliseconds, as the JSON's ``self_ms``."""
        return self.self_ns / 1_000_000

    @property
    def total_ms(self) -> float:
        """``total_ns`` in milliseconds, as the JSON's ``total_ms``."""
        return self.total_ns / 1_000_000

    @property
    def device_ms(self) -> float | None:
        """``device_ns`` in milliseconds (None without device data), as the JSON's."""
        return None if self.device_ns is None else self.device_ns / 1_000_000

    def with_columns(self, per_iteration: dict[str, Any]) -> OpStat:
        """The row with optional columns (field -> per-iteration values) set to the
        same statistic as its times (median; mean where the calls vary)."""
        calls = self.samples.calls.values if self.samples is not None else None
        vary = calls is not None and bool((calls != calls[0]).any())
        mid = statistics.fmean if vary else statistics.median
        changes: dict[str, Any] = {k: float(mid(list(v))) for k, v in per_iteration.items()}
        return replace(self, **changes)

    @property
    def columns(self) -> dict[str, float]:
        """The optional columns this row has (memory, FLOPs)."""
        return {k: v for k in OP_COLUMNS if (v := getattr(self, k)) is not None}

    @classmethod
    def of(
        cls,
        name: str,
        samples: OpSamples,
        *,
        layer: str | None = None,
        input_shapes: str | None = None,
        phase: str = "forward",
    ) -> OpStat:
        """The row of per-iteration samples: mean calls, median times (the mean where the
        number of calls varies between iterations, as for layers: a median of mostly
        zeros would hide an op that runs in some iterations only)."""
        calls = samples.calls
        vary = calls.values is not None and bool((calls.values != calls.values[0]).any())

        def mid(series: Series) -> float:
            return series.mean if vary else series.median

        return cls(
            name=name,
            calls=calls.mean,
            self_ns=mid(samples.self_ns),
            total_ns=mid(samples.total_ns),
            device_ns=mid(samples.device_ns) if samples.device_ns is not None else None,
            layer=layer,
            input_shapes=input_shapes,
            phase=phase,
            samples=samples,
        )


#: OpStat's optional columns, in table order.
OP_COLUMNS = (
    "flops",
    "cpu_mem_bytes",
    "self_cpu_mem_bytes",
    "device_mem_bytes",
    "self_device_mem_bytes",
)


@dataclass(frozen=True)
class Overhead:
    """Measured cost of the instrumentation itself (see docs/definitions.md).

    ``per_call_ns`` is the whole extra cost one hooked module call adds to a
    forward; ``inside_ns`` is the part of it that falls inside the call's own
    measured interval. ``corrected`` says whether layer times had it removed.
    ``instrumented_ns`` / ``clean_ns`` are median whole-forward times of the
    instrumented and the clean pass. ``method`` is ``hooks`` (forward wrappers)
    or ``ops`` (torch.profiler: ``per_call_ns`` is then a layer range's cost,
    and each recorded operator adds ``per_op_ns``, ``ops_per_forward`` of them).
    """

    per_call_ns: float
    inside_ns: float
    corrected: bool
    calls_per_forward: float = 0.0
    clean_ns: float | None = None
    instrumented_ns: float | None = None
    method: str = "hooks"
    per_op_ns: float = 0.0
    ops_per_forward: float = 0.0

    @property
    def measured(self) -> bool:
        """Whether the calibration found a cost per hooked call (on a busy machine it can
        read 0 twice: then nothing was corrected, and the profile's notes say so)."""
        return self.method == "ops" or self.per_call_ns > 0

    @property
    def per_forward_ns(self) -> float:
        """What the instrumentation adds to one forward, by its calibration."""
        return self.per_call_ns * self.calls_per_forward + self.per_op_ns * self.ops_per_forward


@dataclass(frozen=True)
class Meta:
    """Where a profile came from."""

    model: str
    device: str = "cpu"
    dtype: str = "float32"
    torch: str = ""
    inputs: tuple[str, ...] = ()
    warmup: int = 0
    iters: int = 0
    threads: int | None = None
    mode: str = "eval"
    grad: bool = False
    source: str = "recorder"
    created: str = ""
    host: str = ""
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# ---- rows of ops merged (shared by the console and the HTML report) ----


def merge_shapes(ops: Sequence[OpStat]) -> tuple[OpStat, ...]:
    """Ops summed over input shapes, per (layer, name, phase). Rows recorded with shapes
    keep the shapes that took the most self time, and say how many others were merged
    (``[8, 64], [64] (+2 more)``): ``--record-shapes`` shows shapes without
    ``--group-by-shape`` splitting the rows."""
    return tuple(_merged(ops, lambda o: (o.layer, o.name, o.phase), keep_layer=True))


def merge_layers(ops: Sequence[OpStat], *, by_shape: bool = True) -> list[OpStat]:
    """Ops summed over layers per (name, input shapes), or per name (shapes merged as
    in ``merge_shapes``) when not ``by_shape``."""
    if by_shape:
        return _merged(ops, lambda o: (o.name, o.input_shapes), keep_layer=False, shapes=False)
    return _merged(ops, lambda o: (o.name, None), keep_layer=False)


def _merged(
    ops: Sequence[OpStat],
    key: Callable[[OpStat], tuple[str | None, ...]],
    *,
    keep_layer: bool,
    shapes: bool = True,
) -> list[OpStat]:
    acc: dict[tuple[str | None, ...], OpStat] = {}
    seen: dict[tuple[str | None, ...], list[tuple[float, str]]] = {}
    for o in ops:
        k = key(o)
        prev = acc.get(k)
        if prev is None:
            first = replace(o, samples=None, layer=o.layer if keep_layer else None)
            acc[k] = replace(first, input_shapes=None) if shapes else first
        else:
            acc[k] = _sum(prev, o)
        if shapes and o.input_shapes is not None:
            seen.setdefault(k, []).append((o.self_ns, o.input_shapes))
    for k, texts in seen.items():
        by_time: dict[str, float] = {}
        for t, text in texts:
            by_time[text] = by_time.get(text, 0.0) + t
        top = max(by_time, key=lambda text: by_time[text])
        more = len(by_time) - 1
        acc[k] = replace(acc[k], input_shapes=top + (f" (+{more} more)" if more else ""))
    return list(acc.values())


def _sum(a: OpStat, b: OpStat) -> OpStat:
    """Two rows of one op added (per-iteration values add); the samples are dropped."""
    keys = {**a.columns, **b.columns}
    columns: dict[str, Any] = {k: a.columns.get(k, 0) + b.columns.get(k, 0) for k in keys}
    return replace(
        a,
        calls=a.calls + b.calls,
        self_ns=a.self_ns + b.self_ns,
        total_ns=a.total_ns + b.total_ns,
        device_ns=None if a.device_ns is None else a.device_ns + (b.device_ns or 0),
        samples=None,
        **columns,
    )
