"""Optional per-operator columns beside time: memory (``--profile-memory``) and FLOPs
(``--with-flops``), as torch's ``key_averages()`` table shows them.

* **CPU Mem / Self CPU Mem** (and the device's): bytes allocated minus bytes
  freed by ``[memory]`` events on the op's thread while it ran. Self counts the
  events whose innermost enclosing op is this op; the inclusive value adds its
  child ops' (torch: ``cpu_memory_usage`` / ``self_cpu_memory_usage``).
* **FLOPs**: the profiler's estimate for matmul/conv ops (``with_flops``), the
  op's own (ops mode only: the trace-file reader does not read it).

Each column is one value per host span (HostSpans indexing) plus whether it is
inclusive (summed over counted top ops, like total time) or own (summed over
all merged members, like self time).
"""

from __future__ import annotations

import numpy as np

from layerprof.trace.events import I64, OP, EventTables
from layerprof.trace.nesting import Nesting, enclosing_at, roll_up

#: OpStat field -> (values per host span, inclusive?)
_OpColumns = dict[str, tuple[I64, bool]]


def op_columns(tables: EventTables, nesting: Nesting) -> _OpColumns:
    """The columns this trace has data for (none without memory events or FLOPs)."""
    out: _OpColumns = {}
    host = tables.host
    flops = host.flops
    if flops is not None and flops.any():
        out["flops"] = (flops, False)
    mem = tables.memory
    if len(mem) == 0:
        return out
    owner = enclosing_at(host, nesting, OP, mem.thread, mem.ts)
    kinds = np.asarray([not d.startswith("cpu") for d in tables.memory_devices], dtype=bool)
    on_device = kinds[mem.device] if len(kinds) else np.zeros(len(mem), dtype=bool)
    ops = np.flatnonzero(host.kind == OP)
    for prefix, chosen in (("cpu", ~on_device), ("device", on_device)):
        if not chosen.any():
            continue
        hit = chosen & (owner >= 0)
        own = np.bincount(owner[hit], weights=mem.bytes[hit], minlength=len(host))
        own = np.rint(own).astype(np.int64)
        out[f"self_{prefix}_mem_bytes"] = (own, False)
        out[f"{prefix}_mem_bytes"] = (roll_up(own, nesting.parent_op, nesting.order, ops), True)
    return out
