"""Operators (``cpu_op``): calls, host total/self and device time per name.

Host total = sum of the op's span durations; self = total minus the union
of its direct child ops on the same thread. Device time is inclusive: the
kernels, memcpys and memsets launched inside the op or any op it encloses.
``device_self`` counts only those launched by the op itself.

Like torch's ``key_averages()`` (``EventList._remove_dup_nodes``), an op
whose parent has the same name and no other child (``aten::sum`` ->
``aten::sum``: one overload dispatching to another) is merged into that
parent: one call, the parent's total, and its own self time added to the
parent's. Chains merge into their top op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from layerprof.trace.events import ANNOTATION, I64, OP, EventTables
from layerprof.trace.links import Links
from layerprof.trace.nesting import Nesting, roll_up


@dataclass(frozen=True)
class OpRow:
    name: str
    calls: int
    total_ns: int
    self_ns: int
    device_ns: int
    device_self_ns: int
    input_shapes: str | None = None


@dataclass(frozen=True)
class OpTimes:
    """Per op span (HostSpans indexing): inclusive and own device time."""

    device_total: I64
    device_self: I64


def device_times(tables: EventTables, nesting: Nesting, links: Links) -> OpTimes:
    host, dev = tables.host, tables.device
    n = len(host)
    own = np.zeros(n, dtype=np.int64)
    hit = links.op >= 0
    if hit.any():
        own = np.bincount(links.op[hit], weights=dev.dur[hit], minlength=n).astype(np.int64)
    members = np.flatnonzero(host.kind == OP)
    total = roll_up(own, nesting.parent_op, nesting.order, members)
    return OpTimes(device_total=total, device_self=own)


def merged_roots(tables: EventTables, nesting: Nesting) -> I64:
    """Per host span: the op it is merged into (itself when not merged), as torch merges.

    A span is merged when it is an op whose direct parent is an op of the
    same name with no other direct child (ops, and annotations directly
    inside it, count as children, as in torch's event tree).
    """
    host = tables.host
    n = len(host)
    root = np.arange(n, dtype=np.int64)
    ops = np.flatnonzero(host.kind == OP)
    parent = nesting.parent_op
    children = np.zeros(n, dtype=np.int64)
    under = ops[parent[ops] >= 0]
    np.add.at(children, parent[under], 1)
    # An annotation is a direct child of the innermost of its enclosing op and annotation.
    ann = np.flatnonzero((host.kind == ANNOTATION) & (parent >= 0))
    outer_ann = nesting.parent_annotation[ann]
    direct = (outer_ann < 0) | (host.start[np.clip(outer_ann, 0, None)] < host.start[parent[ann]])
    np.add.at(children, parent[ann[direct]], 1)
    same = under[host.name[under] == host.name[parent[under]]]
    merged = same[children[parent[same]] == 1]
    root[merged] = parent[merged]
    while True:  # chains (a -> a -> a): follow up to the top op
        up = root[root[merged]]
        if (up == root[merged]).all():
            return root
        root[merged] = up


def op_table(
    tables: EventTables,
    nesting: Nesting,
    times: OpTimes,
    *,
    by_shape: bool = False,
    select: npt.NDArray[np.bool_] | None = None,
) -> tuple[OpRow, ...]:
    """One row per op name (and input shapes when ``by_shape``), by total desc.

    ``select`` (a mask over host spans) keeps only those ops, e.g. the ones
    starting inside a complete step.
    """
    host = tables.host
    root = merged_roots(tables, nesting)
    is_op = host.kind == OP
    idx = np.flatnonzero(is_op if select is None else is_op & select[root])
    if len(idx) == 0:
        return ()
    # A merged op is grouped under its root's name and shapes, and adds only its self times.
    top = root[idx]
    counted = (top == idx).astype(np.int64)
    names = host.name[top]
    shapes = host.shape[top] if by_shape else np.full(len(idx), -1, dtype=np.int64)
    # One int key per (name, shape) pair keeps np.unique one-dimensional (fast path).
    width = len(tables.shapes) + 1
    uniq_keys, group = np.unique(names * width + (shapes + 1), return_inverse=True)
    uniq = np.stack([uniq_keys // width, uniq_keys % width - 1], axis=1)
    k = len(uniq)

    def total(values: I64) -> list[int]:
        sums: list[int] = np.bincount(group, weights=values, minlength=k).astype(np.int64).tolist()
        return sums

    calls = np.bincount(group, weights=counted, minlength=k).astype(np.int64).tolist()
    tot = total(host.dur[idx] * counted)
    slf = total(nesting.self_ns[idx])
    dev = total(times.device_total[idx] * counted)
    dev_self = total(times.device_self[idx])
    rows = [
        OpRow(
            name=tables.names[int(name)],
            calls=int(calls[g]),
            total_ns=int(tot[g]),
            self_ns=int(slf[g]),
            device_ns=int(dev[g]),
            device_self_ns=int(dev_self[g]),
            input_shapes=tables.shapes[int(shape)] if shape >= 0 else None,
        )
        for g, (name, shape) in enumerate(uniq.tolist())
    ]
    rows.sort(key=lambda r: (-r.total_ns, r.name))
    return tuple(rows)
