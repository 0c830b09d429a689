"""Device op -> launching runtime call -> enclosing op and module.

A kernel (or memcpy/memset) names its launch by ``args.correlation``; the
launch call sits inside the op that issued it on the same thread, so time
containment gives the innermost op and module. Some traces (HTA's A100
samples) reuse the correlation as the runtime's ``External id``, so the
op's ``External id`` on the kernel is only a fallback for kernels whose
launch call is missing from the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layerprof.trace.events import I64, OP, RUNTIME, EventTables
from layerprof.trace.nesting import Nesting


@dataclass(frozen=True)
class Links:
    runtime: I64  # host index of the launch call per device op, -1 when unknown
    op: I64  # innermost op that launched it, -1 when unknown
    module: I64  # innermost nn.Module span around the launch, -1 when unknown


def link(tables: EventTables, nesting: Nesting) -> Links:
    host, dev = tables.host, tables.device
    n = len(dev)
    runtime = np.full(n, -1, dtype=np.int64)
    rt = np.flatnonzero((host.kind == RUNTIME) & (host.ref >= 0))
    if n and len(rt):
        rt = rt[np.argsort(host.ref[rt], kind="stable")]
        keys = host.ref[rt]
        pos = np.clip(np.searchsorted(keys, dev.corr), 0, len(keys) - 1)
        hit = (keys[pos] == dev.corr) & (dev.corr >= 0)
        runtime[hit] = rt[pos[hit]]
    op = np.full(n, -1, dtype=np.int64)
    module = np.full(n, -1, dtype=np.int64)
    has_rt = runtime >= 0
    op[has_rt] = nesting.parent_op[runtime[has_rt]]
    module[has_rt] = nesting.parent_module[runtime[has_rt]]
    # Fallback: the op's External id carried by the device op itself.
    missing = np.flatnonzero((op < 0) & (dev.ext >= 0))
    ops = np.flatnonzero((host.kind == OP) & (host.ref >= 0))
    if len(missing) and len(ops):
        ops = ops[np.argsort(host.ref[ops], kind="stable")]
        keys = host.ref[ops]
        pos = np.clip(np.searchsorted(keys, dev.ext[missing]), 0, len(keys) - 1)
        hit = keys[pos] == dev.ext[missing]
        found = ops[pos[hit]]
        op[missing[hit]] = found
        no_module = missing[hit][module[missing[hit]] < 0]
        module[no_module] = nesting.parent_module[op[no_module]]
    return Links(runtime=runtime, op=op, module=module)
