"""A profiler's in-memory results -> the same EventTables a trace file gives.

Ops mode (``layerprof.capture.profiling.profiler``) records with torch.profiler; its results
(``prof.profiler.kineto_results``, one per profiler cycle) hold every event
with integer-ns times. Building the tables from them directly (about 1 ms per
thousand events) skips the Chrome export and its JSON decode (about 10x
that), and then ops mode and ``layerprof analyze`` share one attribution
engine: nesting, links, steps, layer trees, op tables.

The results objects are read duck-typed (``events()``, and per event
``name()``, ``activity_type()``, ``start_ns()``, ...); nothing here imports
torch. A ``layer:{path}`` range opened by layerprof's hooks becomes a LAYER
span named by the path, as the reader does for layerprof's exported lanes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from layerprof.trace.events import (
    DEVICE_CATEGORIES,
    HOST_CATEGORIES,
    LAYER,
    MODULE,
    MODULE_PREFIX,
    OP,
    DeviceOps,
    EventCollector,
    EventTables,
    HostSpans,
    Interner,
    MemoryEvents,
    memory_device,
    shape_text,
)
from layerprof.traceformat import EVENTS_KEY, LAYER_RANGE

_MEMORY = "[memory]"


def tables_from_results(results: Iterable[Any], *, keep_shapes: bool = False) -> EventTables:
    """One EventTables over the events of every cycle's results (times are absolute ns)."""
    b = _Builder(keep_shapes)
    for result in results:
        for e in result.events():
            b.add(e)
    return b.finish()


def tables_from_documents(
    documents: Iterable[dict[str, Any]],
    *,
    keep_shapes: bool = False,
    keep_hierarchy: bool = False,
    keep_flops: bool = False,
) -> EventTables:
    """One EventTables over Chrome-trace documents already in memory (TorchScript runs;
    ``keep_hierarchy``: each op's Module Hierarchy, see ``HostSpans.hierarchy``;
    ``keep_flops``: each op's ``flops`` argument, see ``RawTrace.tables``)."""
    collector = EventCollector(
        keep_shapes=keep_shapes, keep_hierarchy=keep_hierarchy, keep_flops=keep_flops
    )
    for doc in documents:
        collector.add_batch(doc.get(EVENTS_KEY) or [])
    return collector.finish()


class _Builder:
    """Column lists filled one event at a time, then turned into numpy arrays."""

    def __init__(self, keep_shapes: bool) -> None:
        self.keep_shapes = keep_shapes
        self.names = Interner()
        self.threads = Interner()
        self.shapes = Interner()
        self.mem_devices = Interner()
        self.events = 0
        self.host: list[tuple[int, int, int, int, int, int, int, int]] = []
        self.flops: list[int] = []  # per host row: the profiler's estimate (with_flops)
        self.device: list[tuple[int, int, int, int, int, int, int, int, int]] = []
        self.memory: list[tuple[int, int, int, int]] = []

    def add(self, e: Any) -> None:
        self.events += 1
        kind_name = e.activity_type()
        name = e.name()
        if name == _MEMORY:
            device = memory_device(int(e.device_type()), int(e.device_index()))
            self.memory.append(
                (
                    self.threads.add((0, int(e.start_thread_id()))),
                    int(e.start_ns()),
                    int(e.nbytes()),
                    self.mem_devices.add(device),
                )
            )
            return
        kind = HOST_CATEGORIES.get(kind_name)
        if kind is not None:
            self._host(e, kind, name)
            return
        dkind = DEVICE_CATEGORIES.get(kind_name)
        if dkind is not None:
            self.device.append(
                (
                    dkind,
                    int(e.device_index()),
                    int(e.device_resource_id()),
                    int(e.start_ns()),
                    max(int(e.duration_ns()), 0),
                    self.names.add(name),
                    int(e.correlation_id()),
                    int(e.linked_correlation_id()),
                    -1,
                )
            )

    def _host(self, e: Any, kind: int, name: str) -> None:
        if kind == MODULE and not name.startswith(MODULE_PREFIX):
            return
        if name.startswith(LAYER_RANGE):
            kind, name = LAYER, name[len(LAYER_RANGE) :]
        shape = -1
        if self.keep_shapes and kind == OP:
            dims = e.shapes()
            if dims and any(dims):
                shape = self.shapes.add(shape_text(list(dims)))
        seq = int(e.sequence_nr()) if kind == OP else -1
        self.flops.append(int(e.flops()) if kind == OP and hasattr(e, "flops") else 0)
        self.host.append(
            (
                kind,
                self.threads.add((0, int(e.start_thread_id()))),
                int(e.start_ns()),
                max(int(e.duration_ns()), 0),
                self.names.add(name),
                # an op's id is its External id; a runtime call's, its CUDA correlation
                int(e.correlation_id()),
                shape,
                seq,
            )
        )

    def finish(self) -> EventTables:
        host = _columns(self.host, 8)
        device = _columns(self.device, 9)
        memory = _columns(self.memory, 4)
        starts = [c.min() for c in (host[2], device[3], memory[1]) if len(c)]
        origin_ns = int(min(starts)) if starts else 0
        origin_us = origin_ns // 1000
        base = origin_us * 1000  # times relative to a whole µs, as the file reader does
        return EventTables(
            names=tuple(self.names.values),
            threads=tuple((str(p), str(t)) for p, t in self.threads.values),
            shapes=tuple(self.shapes.values),
            memory_devices=tuple(self.mem_devices.values),
            host=HostSpans.of(
                host, base, np.asarray(self.flops, dtype=np.int64) if any(self.flops) else None
            ),
            device=DeviceOps.of(device, base),
            memory=MemoryEvents.of(
                memory[0],
                memory[1],
                memory[2],
                np.full(len(memory[1]), -1, dtype=np.int64),
                memory[3],
                base=base,
            ),
            origin_us=origin_us,
            window_end_ns=None,
            events=self.events,
            dropped_ts0=0,
            skipped=0,
        )


def _columns(rows: Sequence[tuple[int, ...]], width: int) -> list[Any]:
    if not rows:
        return [np.zeros(0, dtype=np.int64) for _ in range(width)]
    array = np.asarray(rows, dtype=np.int64)
    return [np.ascontiguousarray(array[:, i]) for i in range(width)]
