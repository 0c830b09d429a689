"""Compact typed event tables built in one pass over decoded trace events.

A Kineto trace decodes into one dict per event; keeping those dicts costs
about four times the JSON text. The collector below reads each batch of
dicts once, keeps only the fields the analyses need in flat lists, turns
them into numpy columns at the end of the batch and lets the dicts go.

Times stay in the file's microseconds until ``finish``; there they become
integer nanoseconds relative to ``origin_us`` (an integer number of µs).
Subtracting the integer origin before scaling keeps float traces' ns digits:
epoch-µs floats near 1.7e15 would lose them in a direct ``* 1000``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

_MAX_US = 2.0**62 / 1000.0  # largest duration that fits int64 nanoseconds

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
I8 = npt.NDArray[np.int8]

# Host span kinds (one thread each).
OP = 0  # cpu_op (legacy: Operator)
ANNOTATION = 1  # user_annotation / record_function, incl. ProfilerStep#N
MODULE = 2  # python_function "nn.Module: Class_k"
RUNTIME = 3  # cuda_runtime / cuda_driver (legacy: Runtime)
SYNC = 4  # cuda_sync
LAYER = 5  # layerprof_layer: a module call from layerprof's hooks, named by its path

# Device op kinds (one device/stream each).
KERNEL = 0
MEMCPY = 1
MEMSET = 2

HOST_CATEGORIES: dict[str, int] = {
    "cpu_op": OP,
    "Operator": OP,
    "user_annotation": ANNOTATION,
    "python_function": MODULE,
    "cuda_runtime": RUNTIME,
    "cuda_driver": RUNTIME,
    "Runtime": RUNTIME,
    "cuda_sync": SYNC,
    "layerprof_layer": LAYER,
}
DEVICE_CATEGORIES: dict[str, int] = {
    "kernel": KERNEL,
    "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "Memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "Memset": MEMSET,
}
MODULE_PREFIX = "nn.Module: "
LAYER_RANGE = "layer:"  # the record_function range layerprof's hooks open around a module call
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class HostSpans:
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

    @property
    def end(self) -> I64:
        return self.start + self.dur

    def __len__(self) -> int:
        return len(self.start)


@dataclass(frozen=True)
class DeviceOps:
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

    @property
    def end(self) -> I64:
        return self.start + self.dur

    def __len__(self) -> int:
        return len(self.start)


@dataclass(frozen=True)
class MemoryEvents:
    """``[memory]`` instants: allocations (+bytes) and frees (-bytes)."""

    thread: I64
    ts: I64
    bytes: I64
    allocated: I64  # "Total Allocated" after the event, -1 when absent
    device: I64  # index into EventTables.memory_devices

    def __len__(self) -> int:
        return len(self.ts)


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
    dropped_ts0: int
    skipped: int
    # LAYER spans' display names where they differ from the path (the root: its class).
    layer_labels: dict[str, str] = field(default_factory=dict)

    @property
    def has_device(self) -> bool:
        return len(self.device) > 0

    def extent(self) -> tuple[int, int]:
        """First start and last end (ns) over all host spans and device ops."""
        starts = [a.min() for a in (self.host.start, self.device.start) if len(a)]
        ends = [a.max() for a in (self.host.end, self.device.end) if len(a)]
        if not starts:
            return (0, 0)
        return (int(min(starts)), int(max(ends)))


class _Interner:
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


def _floats(values: list[Any]) -> F64:
    """A float64 column; non-numeric entries become NaN instead of raising."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return np.asarray([_num(v) for v in values], dtype=np.float64)


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return math.nan
    try:
        return float(value)
    except (ValueError, OverflowError):
        return math.nan


def _ids(values: list[Any]) -> I64:
    """An int64 id column; missing or non-numeric ids become -1."""
    f = _floats(values)
    out = np.full(len(f), -1, dtype=np.int64)
    ok = np.isfinite(f) & (np.abs(f) < 2.0**62)
    out[ok] = f[ok].astype(np.int64)
    return out


class EventCollector:
    """Reads batches of decoded events; ``finish`` returns the tables."""

    def __init__(self, *, keep_shapes: bool = False) -> None:
        self.keep_shapes = keep_shapes
        self.names = _Interner()
        self.threads = _Interner()
        self.shapes = _Interner()
        self.mem_devices = _Interner()
        self.events = 0
        self.window_ends: list[float] = []
        self.layer_labels: dict[str, str] = {}
        self._host: list[tuple[Any, ...]] = []
        self._device: list[tuple[Any, ...]] = []
        self._memory: list[tuple[Any, ...]] = []

    # One pass over a batch. Kept flat and branchy on purpose: it runs once
    # per event (100k+ per file), so every attribute lookup is hoisted.
    def add_batch(self, batch: Iterable[Any]) -> None:
        h_kind: list[int] = []
        h_thread: list[int] = []
        h_ts: list[Any] = []
        h_dur: list[Any] = []
        h_name: list[int] = []
        h_ref: list[Any] = []
        h_shape: list[int] = []
        h_seq: list[Any] = []
        d_kind: list[int] = []
        d_dev: list[Any] = []
        d_stream: list[Any] = []
        d_ts: list[Any] = []
        d_dur: list[Any] = []
        d_name: list[int] = []
        d_corr: list[Any] = []
        d_ext: list[Any] = []
        d_bytes: list[Any] = []
        m_thread: list[int] = []
        m_ts: list[Any] = []
        m_bytes: list[Any] = []
        m_alloc: list[Any] = []
        m_dev: list[int] = []
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
                    h_name.append(name_id(name) if nid is None else nid)
                    if kind >= RUNTIME:
                        h_ref.append(args.get("correlation"))
                        h_seq.append(None)
                    else:
                        ref = args.get("External id")
                        h_ref.append(args.get("external id") if ref is None else ref)
                        h_seq.append(args.get("Sequence number"))
                    if keep_shapes:
                        dims = args.get("Input Dims") if kind == OP else None
                        h_shape.append(-1 if dims is None else shape_id(_shape_text(dims)))
                    continue
                dkind = dev_cat(cat)
                if dkind is not None:
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
                    d_name.append(name_id(name) if nid is None else nid)
                    d_corr.append(args.get("correlation"))
                    ref = args.get("External id")
                    d_ext.append(args.get("external id") if ref is None else ref)
                    d_bytes.append(args.get("bytes"))
                elif cat == "Trace":
                    ts, dur = e.get("ts"), e.get("dur")
                    if isinstance(ts, (int, float)) and isinstance(dur, (int, float)):
                        self.window_ends.append(float(ts) + float(dur))
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
                            _memory_device(args.get("Device Type"), args.get("Device Id"))
                        )
                    )
                elif name == "Record Window End":
                    ts = e.get("ts")
                    if isinstance(ts, (int, float)):
                        self.window_ends.append(float(ts))
        self.events += n
        if h_ts:
            self._host.append(
                (
                    np.asarray(h_kind, dtype=np.int8),
                    np.asarray(h_thread, dtype=np.int64),
                    _floats(h_ts),
                    _floats(h_dur),
                    np.asarray(h_name, dtype=np.int64),
                    _ids(h_ref),
                    np.asarray(h_shape, dtype=np.int64)
                    if keep_shapes
                    else np.full(len(h_ts), -1, dtype=np.int64),
                    _ids(h_seq),
                )
            )
        if d_ts:
            self._device.append(
                (
                    np.asarray(d_kind, dtype=np.int8),
                    _ids(d_dev),
                    _ids(d_stream),
                    _floats(d_ts),
                    _floats(d_dur),
                    np.asarray(d_name, dtype=np.int64),
                    _ids(d_corr),
                    _ids(d_ext),
                    _ids(d_bytes),
                )
            )
        if m_ts:
            self._memory.append(
                (
                    np.asarray(m_thread, dtype=np.int64),
                    _floats(m_ts),
                    _ids(m_bytes),
                    _ids(m_alloc),
                    np.asarray(m_dev, dtype=np.int64),
                )
            )

    def _layer(self, e: dict[str, Any], name: str) -> tuple[str, Any, Any]:
        args = e.get("args")
        if type(args) is not dict:
            args = {}
        path = args.get("path")
        if type(path) is str:
            if name != path:
                self.layer_labels.setdefault(path, name)
            name = path
        pid = args.get("source pid", e.get("pid"))
        tid = args.get("source tid", e.get("tid"))
        return name, pid, tid

    def finish(self) -> EventTables:
        host = _concat(self._host, 8)
        device = _concat(self._device, 9)
        memory = _concat(self._memory, 5)
        self._host, self._device, self._memory = [], [], []
        h_ts, d_ts, m_ts = host[2], device[3], memory[1]
        skipped = 0
        # Drop rows whose time is missing or not a number.
        keep_h = np.isfinite(h_ts)
        keep_d = np.isfinite(d_ts)
        keep_m = np.isfinite(m_ts)
        skipped += int((~keep_h).sum() + (~keep_d).sum() + (~keep_m).sum())
        # "ts == 0 blocks": Kineto sometimes writes a few events at ts 0 in an
        # otherwise epoch-based file; they would stretch every window to 1970.
        positive = np.concatenate([h_ts[keep_h & (h_ts > 0)], d_ts[keep_d & (d_ts > 0)]])
        dropped_ts0 = 0
        if len(positive) and positive.min() > 1e6:
            zero_h, zero_d = h_ts == 0, d_ts == 0
            dropped_ts0 = int(zero_h.sum() + zero_d.sum())
            keep_h &= ~zero_h
            keep_d &= ~zero_d
        host = tuple(col[keep_h] for col in host)
        device = tuple(col[keep_d] for col in device)
        memory = tuple(col[keep_m] for col in memory)
        all_ts = np.concatenate([host[2], device[3], memory[1]])
        origin = math.floor(float(all_ts.min())) if len(all_ts) else 0

        def ns(us: F64) -> I64:
            return np.rint((us - origin) * 1000.0).astype(np.int64)

        def dur_ns(us: F64) -> I64:
            # absurd durations (beyond ~146 years) would overflow int64 ns: drop them
            d = np.where(np.isfinite(us) & (us > 0) & (us < _MAX_US), us, 0.0)
            return np.rint(d * 1000.0).astype(np.int64)

        window_end = None
        if self.window_ends:
            window_end = round((max(self.window_ends) - origin) * 1000.0)
        names = tuple(_CONTROL.sub("?", s) for s in self.names.values)
        return EventTables(
            names=names,
            threads=tuple((str(p), str(t)) for p, t in self.threads.values),
            shapes=tuple(self.shapes.values),
            memory_devices=tuple(self.mem_devices.values),
            host=HostSpans(
                kind=host[0],
                thread=host[1],
                start=ns(host[2]),
                dur=dur_ns(host[3]),
                name=host[4],
                ref=host[5],
                shape=host[6],
                seq=host[7],
            ),
            device=DeviceOps(
                kind=device[0],
                device=device[1],
                stream=device[2],
                start=ns(device[3]),
                dur=dur_ns(device[4]),
                name=device[5],
                corr=device[6],
                ext=device[7],
                bytes=device[8],
            ),
            memory=MemoryEvents(
                thread=memory[0],
                ts=ns(memory[1]),
                bytes=memory[2],
                allocated=memory[3],
                device=memory[4],
            ),
            origin_us=origin,
            window_end_ns=window_end,
            events=self.events,
            dropped_ts0=dropped_ts0,
            skipped=skipped,
            layer_labels=dict(self.layer_labels),
        )


_EMPTY_DTYPES = {
    8: (np.int8, np.int64, np.float64, np.float64, np.int64, np.int64, np.int64, np.int64),
    9: (
        np.int8,
        np.int64,
        np.int64,
        np.float64,
        np.float64,
        np.int64,
        np.int64,
        np.int64,
        np.int64,
    ),
    5: (np.int64, np.float64, np.int64, np.int64, np.int64),
}


def _concat(chunks: list[tuple[Any, ...]], width: int) -> tuple[Any, ...]:
    if not chunks:
        return tuple(np.zeros(0, dtype=t) for t in _EMPTY_DTYPES[width])
    if len(chunks) == 1:
        return chunks[0]
    return tuple(np.concatenate([c[i] for c in chunks]) for i in range(width))


def _shape_text(dims: Any) -> str:
    """``[[5, 128], [], [128]]`` -> ``"[5, 128], [], [128]"`` (stable, compact)."""
    if isinstance(dims, list):
        return ", ".join(str(d) for d in dims)
    return str(dims)


def _memory_device(kind: Any, index: Any) -> str:
    # Kineto's c10::DeviceType numbering: 0 CPU, 1 CUDA; others are kept by number.
    if kind == 0 or index == -1:
        return "cpu"
    label = "cuda" if kind == 1 else f"device{kind}"
    return f"{label}:{index}"
