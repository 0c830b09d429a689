"""Each step's wall time partitioned, per device: where the time went.

At each instant of a step the first part active there gets the time, in this
order (TensorBoard's step-time breakdown, with communication split out):

====================  ======================================================
``overlap``           a compute kernel and a communication kernel both run
``compute``           compute kernels (no communication at that instant)
``communication``     communication kernels alone: exposed communication
``memcpy``            memcpys, no kernel
``memset``            memsets, no kernel or memcpy
``runtime``           the device is idle, the host is in a runtime call
                      (launches, ``cudaDeviceSynchronize``, ``cuda_sync``)
``dataloader``        ... in a span named like data loading
                      (``enumerate(DataLoader)#...``, ``## data_load ##``)
``cpu``               ... in CPU ops (any thread)
``idle``              none of the above
====================  ======================================================

A step whose device work ran outside its host span (queued launches, a graph
replay, clocks that disagree) is partitioned on each device over that work's own
span (``trace/stepwork.py``): its ``start_ns``/``wall_ns`` are that window's.
So the parts add up to the step's wall time exactly, and ``compute +
overlap`` is the union of compute, ``overlap`` the intersection of compute
and communication. A trace without device ops gets one row per step with
``device`` None, where compute is the CPU ops on threads that run no
collective and communication the CPU backends' collectives (``gloo:*``); data
loading comes first there (it is CPU work of its own).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from layerprof.pivot.sections.distributed import Breakdown, StepBreakdown
from layerprof.pivot.sections.trace import Step, Steps
from layerprof.trace.columns import unique
from layerprof.trace.distributed.comm import comm_kernels, host_compute, host_executions
from layerprof.trace.events import (
    ANNOTATION,
    KERNEL,
    LAYER,
    MEMCPY,
    MEMSET,
    MODULE,
    OP,
    RUNTIME,
    SYNC,
    EventTables,
)
from layerprof.trace.intervals import Lane, lane, merge, partition
from layerprof.trace.nesting import Nesting

_DATALOADER = re.compile(r"DataLoader|data_?load", re.IGNORECASE)

# lane bits
_K, _C, _M, _S, _R, _D, _P = (1 << i for i in range(7))
#: (part, lanes that must all be on), first match wins; what matches none is idle.
_DEVICE_ORDER = (
    ("overlap", _K | _C), ("compute", _K), ("communication", _C), ("memcpy", _M),
    ("memset", _S), ("runtime", _R), ("dataloader", _D), ("cpu", _P),
)  # fmt: skip
_HOST_ORDER = (
    ("dataloader", _D), ("overlap", _K | _C), ("compute", _K), ("communication", _C),
    ("runtime", _R), ("cpu", _P),
)  # fmt: skip


def breakdown(
    tables: EventTables,
    nesting: Nesting,
    steps: Steps,
    per_device: Mapping[int, list[tuple[int, int]]] | None = None,
) -> Breakdown | None:
    """The partition of every complete step (all steps when none is complete), on each
    device over its window for the step in ``per_device`` where it has one (the step's
    work on the device's own timeline, ``trace/stepwork.py``; step order), else over
    the step's host span."""
    rows = steps.complete or steps.steps
    if not rows:
        return None
    windows = [(s.start_ns, s.end_ns) for s in rows]
    host = tables.host
    gloo = host_executions(tables, nesting)
    host_comm = lane(host.start[gloo], host.end[gloo])
    runtime = _spans(tables, nesting, np.isin(host.kind, (RUNTIME, SYNC)))
    loader_ids = [i for i, n in enumerate(tables.names) if _DATALOADER.search(n)]
    loader = _spans(
        tables, nesting, np.isin(host.kind, (OP, ANNOTATION)) & np.isin(host.name, loader_ids)
    )
    cpu = _spans(tables, nesting, np.isin(host.kind, (OP, MODULE, LAYER)))
    out: list[StepBreakdown] = []
    if not tables.has_device:
        compute = host_compute(tables, nesting, unique(host.thread[gloo]))
        lanes = [compute, host_comm, *_none(2), runtime, loader, _nothing()]
        table = partition(lanes, windows, [b for _, b in _HOST_ORDER])
        out += _rows(rows, None, table, _HOST_ORDER, windows)
        return Breakdown(tuple(out))
    dev = tables.device
    is_comm = comm_kernels(tables)
    for d in unique(dev.device).tolist():
        on = dev.device == d

        def pick(mask: np.ndarray, on: np.ndarray = on) -> Lane:
            return lane(dev.start[mask & on], dev.end[mask & on])

        lanes = [
            pick((dev.kind == KERNEL) & ~is_comm),
            merge(pick(is_comm), host_comm),
            pick(dev.kind == MEMCPY),
            pick(dev.kind == MEMSET),
            runtime,
            loader,
            cpu,
        ]
        own = _own_windows(rows, (per_device or {}).get(int(d)), windows)
        table = partition(lanes, own, [b for _, b in _DEVICE_ORDER])
        out += _rows(rows, int(d), table, _DEVICE_ORDER, own)
    return Breakdown(tuple(out))


def _spans(tables: EventTables, nesting: Nesting, mask: np.ndarray) -> Lane:
    host = tables.host
    mask = mask & ~nesting.detached
    return lane(host.start[mask], host.end[mask])


def _nothing() -> Lane:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


def _none(n: int) -> list[Lane]:
    return [_nothing() for _ in range(n)]


def _own_windows(
    rows: tuple[Step, ...], own: list[tuple[int, int]] | None, host: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """A device's windows for the rows (in the rows' order), or their host spans."""
    if own is None or len(own) != len(rows):
        return host
    by_start = sorted(range(len(rows)), key=lambda i: rows[i].start_ns)
    out = list(host)
    for k, i in enumerate(by_start):
        out[i] = own[k]
    return out


def _rows(
    steps: tuple[Step, ...],
    device: int | None,
    table: np.ndarray,
    order: tuple[tuple[str, int], ...],
    windows: list[tuple[int, int]],
) -> list[StepBreakdown]:
    out = []
    for w, s in enumerate(steps):
        parts = {name: int(table[w, c]) for c, (name, _) in enumerate(order)}
        lo, hi = windows[w]
        out.append(
            StepBreakdown(
                step=s.name,
                device=device,
                start_ns=lo,
                wall_ns=hi - lo,
                compute_ns=parts.get("compute", 0),
                overlap_ns=parts.get("overlap", 0),
                communication_ns=parts.get("communication", 0),
                memcpy_ns=parts.get("memcpy", 0),
                memset_ns=parts.get("memset", 0),
                runtime_ns=parts.get("runtime", 0),
                dataloader_ns=parts.get("dataloader", 0),
                cpu_ns=parts.get("cpu", 0),
                idle_ns=int(table[w, -1]),
            )
        )
    return out
