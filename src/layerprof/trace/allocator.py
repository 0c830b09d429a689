"""The allocator's summary from ``[memory]`` instants (``profile_memory=True``): the
trace's ``memory`` section, not the activation memory of ``capture/memory/``.

Peak allocated per device is the largest "Total Allocated" the allocator
reported (the running sum of "Bytes" when that field is missing). Each
allocation is charged to the innermost op enclosing the instant on the
same thread, which names the ops that allocate most.
"""

from __future__ import annotations

import numpy as np

from layerprof.pivot.sections.trace import AllocatorSummary, AllocRow, DeviceMemory
from layerprof.trace.columns import unique
from layerprof.trace.events import OP, EventTables
from layerprof.trace.nesting import Nesting, enclosing_at


def allocator_summary(tables: EventTables, nesting: Nesting) -> AllocatorSummary | None:
    mem = tables.memory
    if len(mem) == 0:
        return None
    devices = []
    for d in unique(mem.device).tolist():
        on = np.flatnonzero(mem.device == d)
        on = on[np.argsort(mem.ts[on], kind="stable")]
        b = mem.bytes[on]
        alloc = mem.allocated[on]
        known = alloc >= 0
        peak = int(alloc[known].max()) if known.any() else int(np.cumsum(b).max(initial=0))
        devices.append(
            DeviceMemory(
                device=tables.memory_devices[d],
                peak_allocated=peak,
                allocations=int((b > 0).sum()),
                allocated_bytes=int(b[b > 0].sum()),
                freed_bytes=int(-b[b < 0].sum()),
            )
        )
    owner = enclosing_at(tables.host, nesting, OP, mem.thread, mem.ts)
    positive = mem.bytes > 0
    acc: dict[str, list[int]] = {}
    name_ids = tables.host.name
    for o, nbytes in zip(owner[positive].tolist(), mem.bytes[positive].tolist(), strict=True):
        label = tables.names[int(name_ids[o])] if o >= 0 else "(outside ops)"
        a = acc.setdefault(label, [0, 0])
        a[0] += 1
        a[1] += nbytes
    rows = sorted((AllocRow(k, c, b) for k, (c, b) in acc.items()), key=lambda r: -r.bytes)
    return AllocatorSummary(devices=tuple(devices), top_ops=tuple(rows))
