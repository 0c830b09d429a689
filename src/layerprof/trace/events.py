"""Compact typed event tables built in one pass over decoded trace events.

A Kineto trace decodes into one dict per event; keeping those dicts costs
about four times the JSON text. The collector below reads each batch of
dicts once, keeps only the fields the analyses need in flat lists, turns
them into checked numpy columns at the end of the batch (``columns``) and
lets the dicts go.

Times become integer ns per batch: absolute ns while collecting, then
relative to ``origin_us`` (an integer number of µs, the file's first) in
``finish``. Epoch-µs floats whose ns digits a double cannot hold are read
exactly from the batch's JSON text (``timestamps``).

Categories: every host category Kineto writes for ops, annotations,
python functions and runtime calls (CUDA, ROCm, MTIA, XPU, HPU,
PrivateUse1) and every device category with busy time: ``kernel``,
``gpu_memcpy``/``gpu_memset`` and other ``gpu_*`` ops, MTIA's
``mtia_ccp_events`` (its DMA requests as memcpys), and any other category
whose event names a device (``args.device``). Device events without busy
time (``gpu_user_annotation``, ``cuda_event``, ...) are counted per
category, so a trace with device events is never taken for a CPU-only one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from layerprof.trace.batchcolumns import (
    ANNOTATION_DTYPES,
    DEVICE_DTYPES,
    HOST_DTYPES,
    MEMORY_DTYPES,
    BatchColumns,
    BatchRows,
    ColumnStore,
)
from layerprof.trace.columns import F64 as F64  # the column types, for the analyses
from layerprof.trace.columns import I64 as I64
from layerprof.trace.columns import INVALID
from layerprof.trace.commargs import COMM_HOST, CommArgs, comm_args
from layerprof.trace.timestamps import rewrite_exact
from layerprof.traceformat import (
    CPU_OP,
    CUDA_DRIVER,
    CUDA_RUNTIME,
    GPU_MEMCPY,
    GPU_MEMSET,
    KERNEL_CATEGORY,
    LAYER_CATEGORY,
    LAYER_RANGE,
    SOURCE_PID,
    SOURCE_TID,
    USER_ANNOTATION,
)

I8 = npt.NDArray[np.int8]

# Host span kinds (one thread each).
OP = 0  # cpu_op (legacy: Operator)
ANNOTATION = 1  # user_annotation / record_function, incl. ProfilerStep#N
MODULE = 2  # python_function "nn.Module: Class_k"
RUNTIME = 3  # runtime / driver calls that launch device work
SYNC = 4  # cuda_sync / xpu_sync
LAYER = 5  # layerprof_layer: a module call from layerprof's hooks, named by its path

# Device op kinds (one device/stream each).
KERNEL = 0
MEMCPY = 1
MEMSET = 2

HOST_CATEGORIES: dict[str, int] = {
    CPU_OP: OP,
    "Operator": OP,
    USER_ANNOTATION: ANNOTATION,
    "python_function": MODULE,
    CUDA_RUNTIME: RUNTIME,
    CUDA_DRIVER: RUNTIME,
    "Runtime": RUNTIME,
    "mtia_runtime": RUNTIME,
    "xpu_runtime": RUNTIME,
    "xpu_driver": RUNTIME,
    "hpu_op": RUNTIME,
    "privateuse1_runtime": RUNTIME,
    "privateuse1_driver": RUNTIME,
    "glow_runtime": RUNTIME,
    "cuda_sync": SYNC,
    "xpu_sync": SYNC,
    LAYER_CATEGORY: LAYER,
}
DEVICE_CATEGORIES: dict[str, int] = {
    KERNEL_CATEGORY: KERNEL,
    "Kernel": KERNEL,
    GPU_MEMCPY: MEMCPY,
    "Memcpy": MEMCPY,
    GPU_MEMSET: MEMSET,
    "Memset": MEMSET,
}
_GPU_ANNOTATION = "gpu_user_annotation"
_MTIA_DEVICE = "mtia_ccp_events"
# Device-side categories that carry no busy time (markers, counters, ranges).
_DEVICE_MARKERS = frozenset(
    {_GPU_ANNOTATION, "cuda_event", "cuda_profiler_range", "mtia_insight", "mtia_counters",
     "xpu_scope_profiler"}
)  # fmt: skip
# Which accelerator a runtime (or device) category belongs to.
_PLATFORMS: dict[str, str] = {
    CUDA_RUNTIME: "cuda",
    CUDA_DRIVER: "cuda",
    "Runtime": "cuda",
    "mtia_runtime": "mtia",
    _MTIA_DEVICE: "mtia",
    "xpu_runtime": "xpu",
    "xpu_driver": "xpu",
    "hpu_op": "hpu",
}
MODULE_PREFIX = "nn.Module: "
#: The operator that takes a language model's token ids: its input shapes are kept even
#: when shapes are not (a batch x tokens second input tells a prefill from a decode step).
TOKEN_OP = "aten::embedding"
#: Matrix products whose input shapes are kept too: a serving step's FLOPs are counted
#: from them (``trace/batch.py``).
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
_SHAPED_OPS = MATMUL_OPS | {TOKEN_OP}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class _Spans:
    """Rows with a start and a duration (ns): their ends and their count."""

    start: I64
    dur: I64

    @property
    def end(self) -> I64:
        return self.start + self.dur

    def __len__(self) -> int:
        return len(self.start)


@dataclass(frozen=True)
class HostSpans(_Spans):
    """CPU-side spans: ``kind``/``thread``/``name`` are small ints (see tables)."""

    kind: I8
    thread: I64
    start: I64
    dur: I64
    name: I64
    # The one id each kind is looked up by, -1 when absent: "correlation" for
    # runtime/sync calls, "External id" (legacy "external id") for the rest.
    ref: I64
    shape: I64  # index into EventTables.shapes, -1 when absent
    # autograd sequence number of an op ("Sequence number"), -1 when absent: a backward
    # node carries the number of the forward op that created it (see trace/attribution.py)
    seq: I64
    # the profiler's FLOP estimate of an op (with_flops; ops mode only), else None
    flops: I64 | None = None
    # an op's "Module Hierarchy" (with_modules: TorchScript) as a name id, -1 when
    # absent; None unless the collector was asked to keep it
    hierarchy: I64 | None = None

    @classmethod
    def of(
        cls,
        cols: Sequence[Any],
        base: int,
        flops: I64 | None = None,
        hierarchy: I64 | None = None,
    ) -> HostSpans:
        """Spans from columns in field order, absolute start times shifted by ``base`` ns."""
        kind, thread, start, dur, name, ref, shape, seq = cols
        return cls(
            np.asarray(kind, dtype=np.int8),
            thread,
            start - base,
            dur,
            name,
            ref,
            shape,
            seq,
            flops,
            hierarchy,
        )


@dataclass(frozen=True)
class DeviceOps(_Spans):
    """GPU-side kernels, memcpys and memsets."""

    kind: I8
    device: I64
    stream: I64
    start: I64
    dur: I64
    name: I64
    corr: I64
    ext: I64
    bytes: I64  # -1 when absent

    @classmethod
    def of(cls, cols: Sequence[Any], base: int) -> DeviceOps:
        """Device ops from columns in field order, start times shifted by ``base`` ns."""
        kind, device, stream, start, dur, name, corr, ext, nbytes = cols
        return cls(
            np.asarray(kind, dtype=np.int8),
            device,
            stream,
            start - base,
            dur,
            name,
            corr,
            ext,
            nbytes,
        )


@dataclass(frozen=True)
class MemoryEvents:
    """``[memory]`` instants: allocations (+bytes) and frees (-bytes)."""

    thread: I64
    ts: I64
    bytes: I64
    allocated: I64  # "Total Allocated" after the event, -1 when absent
    device: I64  # index into EventTables.memory_devices

    @classmethod
    def of(
        cls, thread: I64, ts: I64, nbytes: I64, allocated: I64, device: I64, base: int
    ) -> MemoryEvents:
        """Memory events with absolute times shifted by ``base`` ns."""
        return cls(thread, ts - base, nbytes, allocated, device)

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(frozen=True)
class _DeviceAnnotations(_Spans):
    """``gpu_user_annotation`` spans: annotations on a device's timeline (no busy time)."""

    device: I64
    stream: I64
    start: I64
    dur: I64
    name: I64


@dataclass(frozen=True)
class EventTables:
    """Everything the analyses read from one trace file."""

    names: tuple[str, ...]
    threads: tuple[tuple[str, str], ...]
    shapes: tuple[str, ...]
    memory_devices: tuple[str, ...]
    host: HostSpans
    device: DeviceOps
    memory: MemoryEvents
    origin_us: int
    window_end_ns: int | None  # profiler window end ("Record Window End" / Trace span)
    events: int
    dropped_ts0: int  # events at ts <= 0 in a file whose other times are epoch-scale
    skipped: int  # events whose ts is missing or unusable
    # LAYER spans' display names where they differ from the path (the root: its class).
    layer_labels: dict[str, str] = field(default_factory=dict)
    device_annotations: _DeviceAnnotations | None = None
    # Device-side events per category, those without busy time included.
    device_categories: dict[str, int] = field(default_factory=dict)
    runtime_categories: frozenset[str] = frozenset()
    bad_durations: int = 0  # spans whose dur was unusable (kept with duration 0)
    malformed_fields: int = 0  # ids, devices, streams, bytes that were not integers
    exact_ts: bool = False  # ns digits were read from the text (epoch-µs floats)
    # What collectives' args say, by (name id, id): a host span's External id, a
    # device op's correlation (see trace/commargs.py).
    comm_args: dict[tuple[int, int], CommArgs] = field(default_factory=dict)

    @property
    def has_device(self) -> bool:
        return len(self.device) > 0

    @property
    def device_events(self) -> int:
        """Device-side events of any category (ops, annotations, markers)."""
        return sum(self.device_categories.values())

    @property
    def platform(self) -> str | None:
        """``cuda``, ``mtia``, ``xpu``, ``hpu``; ``cpu`` without device events; None: unknown."""
        if not self.device_categories:
            return "cpu"
        for category in (*sorted(self.runtime_categories), *sorted(self.device_categories)):
            if category in _PLATFORMS:
                return _PLATFORMS[category]
        return None

    def extent(self) -> tuple[int, int]:
        """First start and last end (ns) over all host spans and device ops."""
        starts = [a.min() for a in (self.host.start, self.device.start) if len(a)]
        ends = [a.max() for a in (self.host.end, self.device.end) if len(a)]
        if not starts:
            return (0, 0)
        return (int(min(starts)), int(max(ends)))


class Interner:
    """Small ints for repeated strings (names, threads, shapes)."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []

    def add(self, value: Any) -> int:
        ids = self.ids
        i = ids.get(value)
        if i is None:
            i = ids[value] = len(self.values)
            self.values.append(value)
        return i


class EventCollector:
    """Reads batches of decoded events; ``finish`` returns the tables."""

    def __init__(
        self,
        *,
        keep_shapes: bool = False,
        keep_hierarchy: bool = False,
        keep_flops: bool = False,
        keep_launch_kernels: bool = False,
    ) -> None:
        self.keep_shapes = keep_shapes
        # a launch call's ``args.kernel`` by its correlation id (ROCm writes it): a graph
        # capture's launches name the kernels they recorded (trace/capturepair.py)
        self.launch_kernels: dict[Any, Any] | None = {} if keep_launch_kernels else None
        self.keep_hierarchy = keep_hierarchy
        # an op's "flops" argument: torch writes none, ops mode adds the in-memory
        # events' estimates where it reads its own export (RawTrace.tables)
        self.keep_flops = keep_flops
        self.names = Interner()
        self.threads = Interner()
        self.shapes = Interner()
        self.mem_devices = Interner()
        self.events = 0
        self.layer_labels: dict[str, str] = {}
        self.device_categories: dict[str, int] = {}
        self.runtime_categories: set[str] = set()
        self.bad_durations = 0
        self.malformed = 0
        # Sticky: once a batch needed its ns digits from the text, all later ones do.
        self.exact = False
        extras = (np.int64,) * (keep_hierarchy + keep_flops)
        self._host = ColumnStore((*HOST_DTYPES, *extras))
        self._device = ColumnStore(DEVICE_DTYPES)
        self._memory = ColumnStore(MEMORY_DTYPES)
        self._annotations = ColumnStore(ANNOTATION_DTYPES)
        self._window: list[I64] = []
        self.comm_args: dict[tuple[int, int], CommArgs] = {}

    def add_batch(self, batch: list[Any], text: Any = None) -> None:
        """Collect one batch; ``text`` is its JSON (for exact ns digits when needed)."""
        if self.exact and text is not None:
            rewrite_exact(batch, text)
            self._keep(self._columns(batch, ts_in_ns=True))
            return
        columns = self._columns(batch, ts_in_ns=False)
        if text is not None and columns.loses_digits(text):
            self.exact = True
            rewrite_exact(batch, text)
            columns = self._columns(batch, ts_in_ns=True)
        self._keep(columns)

    def _columns(self, batch: list[Any], *, ts_in_ns: bool) -> BatchColumns:
        return BatchColumns(
            self._collect(batch),
            ts_in_ns=ts_in_ns,
            keep_shapes=self.keep_shapes,
            keep_hierarchy=self.keep_hierarchy,
            keep_flops=self.keep_flops,
        )

    # One pass over a batch. Kept flat and branchy on purpose: it runs once
    # per event (100k+ per file), so every attribute lookup is hoisted.
    def _collect(self, batch: Iterable[Any]) -> BatchRows:
        rows = BatchRows()
        h_kind, h_thread, h_ts, h_dur, h_name, h_ref, h_shape, h_seq, h_hierarchy, h_flops = rows.h
        d_kind, d_dev, d_stream, d_ts, d_dur, d_name, d_corr, d_ext, d_bytes = rows.d
        m_thread, m_ts, m_bytes, m_alloc, m_dev = rows.m
        runtime_categories = rows.runtime_categories
        host_cat = HOST_CATEGORIES.get
        dev_cat = DEVICE_CATEGORIES.get
        name_id = self.names.add
        name_known = self.names.ids.get
        thread_id = self.threads.add
        # Consecutive events mostly share a thread: skip the tuple + lookup then.
        last_pid: Any = object()
        last_tid: Any = object()
        last_thread = -1
        shape_id = self.shapes.add
        keep_shapes = self.keep_shapes
        token_shapes = rows.token_shapes
        keep_hierarchy = self.keep_hierarchy
        keep_flops = self.keep_flops
        comm_host = COMM_HOST.match
        launch_kernels = self.launch_kernels
        n = 0
        for e in batch:
            n += 1
            if type(e) is not dict:
                continue
            ph = e.get("ph")
            if ph == "X":
                cat = e.get("cat")
                if type(cat) is not str:
                    continue
                kind = host_cat(cat)
                if kind is not None:
                    name = e.get("name")
                    if type(name) is not str:
                        name = "" if name is None else str(name)
                    if kind == MODULE and not name.startswith(MODULE_PREFIX):
                        continue  # other python_function frames: not needed
                    if kind == LAYER:
                        # Lane events of layerprof's export: back onto the thread
                        # that ran the module, named by the path (see render/chrome.py).
                        name, pid, tid = self._layer(e, name)
                    else:
                        if kind <= ANNOTATION and name.startswith(LAYER_RANGE):
                            # a layerprof range as torch itself exported it (the fast
                            # record function is written as a cpu_op)
                            kind, name = LAYER, name[len(LAYER_RANGE) :]
                        pid, tid = e.get("pid"), e.get("tid")
                    if pid != last_pid or tid != last_tid:
                        try:
                            last_thread = thread_id((pid, tid))
                        except TypeError:  # unhashable pid/tid: not a usable event
                            continue
                        last_pid, last_tid = pid, tid
                    args = e.get("args")
                    if type(args) is not dict:
                        args = {}
                    h_kind.append(kind)
                    h_thread.append(last_thread)
                    h_ts.append(e.get("ts"))
                    h_dur.append(e.get("dur", 0))
                    nid = name_known(name)
                    if nid is None:
                        nid = name_id(name)
                    h_name.append(nid)
                    if kind <= ANNOTATION and comm_host(name) is not None:
                        self._comm(nid, args.get("External id"), args)
                    if kind >= RUNTIME:
                        h_ref.append(args.get("correlation"))
                        h_seq.append(None)
                        runtime_categories.add(cat)
                        if launch_kernels is not None and "kernel" in args:
                            launch_kernels[args.get("correlation")] = args["kernel"]
                    else:
                        ref = args.get("External id")
                        h_ref.append(args.get("external id") if ref is None else ref)
                        h_seq.append(args.get("Sequence number"))
                    if keep_shapes:
                        dims = args.get("Input Dims") if kind == OP else None
                        h_shape.append(-1 if dims is None else shape_id(shape_text(dims)))
                    elif kind == OP and name in _SHAPED_OPS:
                        dims = args.get("Input Dims")
                        if dims is not None:
                            token_shapes[len(h_name) - 1] = shape_id(shape_text(dims))
                    if keep_hierarchy:
                        tag = args.get("Module Hierarchy") if kind == OP else None
                        h_hierarchy.append(name_id(str(tag)) if tag else -1)
                    if keep_flops:
                        h_flops.append(args.get("flops", 0) if kind == OP else 0)
                    continue
                dkind = dev_cat(cat)
                if dkind is None:
                    dkind = self._other_category(e, cat, rows)
                    if dkind is None:
                        continue
                name = e.get("name")
                if type(name) is not str:
                    name = "" if name is None else str(name)
                args = e.get("args")
                if type(args) is not dict:
                    args = {}
                d_kind.append(dkind)
                dev = args.get("device")
                d_dev.append(e.get("pid") if dev is None else dev)
                stream = args.get("stream")
                d_stream.append(e.get("tid") if stream is None else stream)
                d_ts.append(e.get("ts"))
                d_dur.append(e.get("dur", 0))
                nid = name_known(name)
                if nid is None:
                    nid = name_id(name)
                d_name.append(nid)
                d_corr.append(args.get("correlation"))
                if "Collective name" in args:
                    self._comm(nid, args.get("correlation"), args)
                ref = args.get("External id")
                d_ext.append(args.get("external id") if ref is None else ref)
                d_bytes.append(args.get("bytes"))
                rows.device_categories[cat] = rows.device_categories.get(cat, 0) + 1
            elif ph == "i" or ph == "I":
                name = e.get("name")
                if name == "[memory]":
                    args = e.get("args")
                    if type(args) is not dict:
                        continue
                    try:
                        thread = thread_id((e.get("pid"), e.get("tid")))
                    except TypeError:
                        continue
                    m_thread.append(thread)
                    m_ts.append(e.get("ts"))
                    m_bytes.append(args.get("Bytes"))
                    m_alloc.append(args.get("Total Allocated"))
                    m_dev.append(
                        self.mem_devices.add(
                            memory_device(args.get("Device Type"), args.get("Device Id"))
                        )
                    )
                elif name == "Record Window End":
                    rows.window[0].append(e.get("ts"))
                    rows.window[1].append(0)
        rows.events = n
        return rows

    def _comm(self, name: int, ref: Any, args: dict[str, Any]) -> None:
        """Keep a collective's args by (name, id); events without an integer id cannot
        be looked up again and are left out."""
        if type(ref) is int:
            found = comm_args(args)
            if found is not None:
                self.comm_args[(name, ref)] = found

    def _other_category(self, e: dict[str, Any], cat: str, rows: BatchRows) -> int | None:
        """The device op kind of a rarer category, or None (then it is not a device op).

        Also keeps the profiler window (``Trace`` spans) and device annotations.
        """
        if cat == "Trace":
            rows.window[0].append(e.get("ts"))
            rows.window[1].append(e.get("dur", 0))
            return None
        args = e.get("args")
        if type(args) is not dict:
            args = {}
        if cat in _DEVICE_MARKERS:
            rows.device_categories[cat] = rows.device_categories.get(cat, 0) + 1
            if cat == _GPU_ANNOTATION:
                self._device_annotation(e, args, rows)
            return None
        if cat == _MTIA_DEVICE:
            name = e.get("name")
            return MEMCPY if type(name) is str and "dma" in name.lower() else KERNEL
        if cat.startswith("gpu_"):  # ROCm and other gpu_* device ops
            return KERNEL
        device = args.get("device")
        if type(device) is int:  # an unknown category that names a device
            return KERNEL
        return None

    def _device_annotation(self, e: dict[str, Any], args: dict[str, Any], rows: BatchRows) -> None:
        name = e.get("name")
        if type(name) is not str:
            name = "" if name is None else str(name)
        device, stream = args.get("device"), args.get("stream")
        a_dev, a_stream, a_ts, a_dur, a_name = rows.a
        a_dev.append(e.get("pid") if device is None else device)
        a_stream.append(e.get("tid") if stream is None else stream)
        a_ts.append(e.get("ts"))
        a_dur.append(e.get("dur", 0))
        a_name.append(self.names.add(name))

    def _keep(self, columns: BatchColumns) -> None:
        self.events += columns.events
        for cat, count in columns.device_categories.items():
            self.device_categories[cat] = self.device_categories.get(cat, 0) + count
        self.runtime_categories |= columns.runtime_categories
        self.bad_durations += columns.bad_durations
        self.malformed += columns.malformed
        for kept, table in (
            (self._host, columns.host),
            (self._device, columns.device),
            (self._memory, columns.memory),
            (self._annotations, columns.annotations),
        ):
            if table is not None:
                kept.append(table)
        if columns.window_ends is not None:
            self._window.append(columns.window_ends)

    def _layer(self, e: dict[str, Any], name: str) -> tuple[str, Any, Any]:
        args = e.get("args")
        if type(args) is not dict:
            args = {}
        path = args.get("path")
        if type(path) is str:
            if name != path:
                self.layer_labels.setdefault(path, name)
            name = path
        pid = args.get(SOURCE_PID, e.get("pid"))
        tid = args.get(SOURCE_TID, e.get("tid"))
        return name, pid, tid

    def finish(self) -> EventTables:
        host = self._host.join()
        device = self._device.join()
        memory = self._memory.join()
        notes = self._annotations.join()
        h_ts, d_ts, m_ts, a_ts = host[2], device[3], memory[1], notes[2]
        # Drop rows whose time is missing or not a usable number.
        keep_h, keep_d, keep_m, keep_a = (ts != INVALID for ts in (h_ts, d_ts, m_ts, a_ts))
        skipped = int(sum((~k).sum() for k in (keep_h, keep_d, keep_m, keep_a)))
        # "ts == 0 blocks": Kineto sometimes writes a few events at ts 0 in an
        # otherwise epoch-based file; they (and negative times there) would
        # stretch every window to 1970.
        positive = np.concatenate([h_ts[keep_h & (h_ts > 0)], d_ts[keep_d & (d_ts > 0)]])
        dropped_ts0 = 0
        if len(positive) and positive.min() > 1_000_000_000:
            early = [keep & (ts <= 0) for keep, ts in ((keep_h, h_ts), (keep_d, d_ts))]
            dropped_ts0 = int(sum(e.sum() for e in early))
            keep_h &= ~early[0]
            keep_d &= ~early[1]
            keep_m &= m_ts > 0
            keep_a &= a_ts > 0
        del h_ts, d_ts, m_ts, a_ts, positive  # so that _keep_rows frees each column it cuts
        _keep_rows(host, keep_h)
        _keep_rows(device, keep_d)
        _keep_rows(memory, keep_m)
        _keep_rows(notes, keep_a)
        firsts = [int(ts.min()) for ts in (host[2], device[3], memory[1], notes[2]) if len(ts)]
        origin_us = min(firsts) // 1000 if firsts else 0
        origin = origin_us * 1000
        window_end = None
        ends = np.concatenate(self._window) if self._window else np.zeros(0, dtype=np.int64)
        if len(ends):
            window_end = int(ends.max()) - origin
        names = tuple(_CONTROL.sub("?", s) for s in self.names.values)
        return EventTables(
            names=names,
            threads=tuple((str(p), str(t)) for p, t in self.threads.values),
            shapes=tuple(self.shapes.values),
            memory_devices=tuple(self.mem_devices.values),
            host=HostSpans.of(
                host[:8],
                origin,
                flops=_kept_flops(host[-1]) if self.keep_flops else None,
                hierarchy=host[8] if self.keep_hierarchy else None,
            ),
            device=DeviceOps.of(device, origin),
            memory=MemoryEvents.of(
                memory[0], memory[1], memory[2], memory[3], memory[4], base=origin
            ),
            origin_us=origin_us,
            window_end_ns=window_end,
            events=self.events,
            dropped_ts0=dropped_ts0,
            skipped=skipped,
            layer_labels=dict(self.layer_labels),
            device_annotations=_DeviceAnnotations(
                device=notes[0],
                stream=notes[1],
                start=notes[2] - origin,
                dur=notes[3],
                name=notes[4],
            ),
            device_categories=dict(self.device_categories),
            runtime_categories=frozenset(self.runtime_categories),
            bad_durations=self.bad_durations,
            malformed_fields=self.malformed,
            exact_ts=self.exact,
            comm_args=self.comm_args,
        )


def _kept_flops(column: I64) -> I64 | None:
    """FLOPs per host row as the in-memory events give them: None when no op has any."""
    flops = np.maximum(column, 0)  # an unusable value reads as none
    return flops if flops.any() else None


def _keep_rows(columns: list[Any], keep: npt.NDArray[np.bool_]) -> None:
    """Only the rows ``keep`` marks, one column at a time (each replaced as it is cut);
    nothing copied when it marks them all."""
    if keep.all():
        return
    for i, column in enumerate(columns):
        columns[i] = column[keep]
        del column


def shape_text(dims: Any) -> str:
    """``[[5, 128], [], [128]]`` -> ``"[5, 128], [], [128]"`` (stable, compact)."""
    if isinstance(dims, list):
        return ", ".join(str(d) for d in dims)
    return str(dims)


def memory_device(kind: Any, index: Any) -> str:
    # Kineto's c10::DeviceType numbering: 0 CPU, 1 CUDA; others are kept by number.
    if kind == 0 or index == -1:
        return "cpu"
    label = "cuda" if kind == 1 else f"device{kind}"
    return f"{label}:{index}"
