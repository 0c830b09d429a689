"""Allocated bytes over time per device, from ``[memory]`` instants (``profile_memory=True``).

The allocator writes ``Total Allocated`` after each allocation and free; a
trace without it gets the running sum of ``Bytes`` (which starts from zero,
so memory allocated before the profiler started is not in it: the note says
so). The peak is the largest value; it is attributed to the innermost op
around the allocation that reached it (same thread), the innermost layer
(layerprof's layer spans, else ``nn.Module`` spans) and the step it fell in.
"""

from __future__ import annotations

import numpy as np

from layerprof.pivot.sections.distributed import DeviceTimeline, MemoryTimeline
from layerprof.pivot.sections.trace import Steps
from layerprof.trace.columns import unique
from layerprof.trace.distributed.queue import MAX_POINTS
from layerprof.trace.events import LAYER, MODULE, OP, EventTables
from layerprof.trace.intervals import thin
from layerprof.trace.nesting import Nesting, enclosing_at


def memory_timeline(tables: EventTables, nesting: Nesting, steps: Steps) -> MemoryTimeline | None:
    mem = tables.memory
    if len(mem) == 0:
        return None
    out = []
    for d in unique(mem.device).tolist():
        on = np.flatnonzero(mem.device == d)
        on = on[np.argsort(mem.ts[on], kind="stable")]
        known = mem.allocated[on]
        values = known if (known >= 0).all() else np.cumsum(mem.bytes[on])
        k = int(np.argmax(values))
        peak = on[k : k + 1]
        out.append(
            DeviceTimeline(
                device=tables.memory_devices[d],
                points=thin(mem.ts[on], values, MAX_POINTS),
                events=len(on),
                peak_bytes=int(values[k]),
                peak_ns=int(mem.ts[on[k]]),
                peak_op=_name(tables, enclosing_at(tables.host, nesting, OP, mem.thread[peak], mem.ts[peak])),
                peak_layer=_layer(tables, nesting, peak),
                peak_step=_step(steps, int(mem.ts[on[k]])),
            )
        )  # fmt: skip
    return MemoryTimeline(tuple(out))


def _name(tables: EventTables, found: np.ndarray) -> str | None:
    i = int(found[0])
    return tables.names[int(tables.host.name[i])] if i >= 0 else None


def _layer(tables: EventTables, nesting: Nesting, at: np.ndarray) -> str | None:
    mem = tables.memory
    for kind in (LAYER, MODULE):
        found = enclosing_at(tables.host, nesting, kind, mem.thread[at], mem.ts[at])
        name = _name(tables, found)
        if name is not None:
            return tables.layer_labels.get(name, name) if name == "" else name
    return None


def _step(steps: Steps, t: int) -> str | None:
    for s in steps.steps:
        if s.start_ns <= t < s.end_ns:
            return s.name
    return None
