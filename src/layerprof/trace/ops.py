"""Operators (``cpu_op``): device time per op span and key_averages-style merging.

The per-layer, per-step operator rows are built in :mod:`layerprof.trace.attribution`
from these. Host total = sum of the op's span durations; self = total minus the union
of its direct child ops on the same thread. Device time is inclusive: the
kernels, memcpys and memsets launched inside the op or any op it encloses.

Like torch's ``key_averages()`` (``EventList._remove_dup_nodes``), an op
whose parent has the same name and no other child (``aten::sum`` ->
``aten::sum``: one overload dispatching to another) is merged into that
parent: one call, the parent's total, and its own self time added to the
parent's. Chains merge into their top op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layerprof.trace.events import ANNOTATION, I64, OP, EventTables
from layerprof.trace.links import Links
from layerprof.trace.nesting import Nesting, roll_up


@dataclass(frozen=True)
class OpTimes:
    """Per op span (HostSpans indexing): inclusive device time (its own kernels' and
    those of the ops it encloses)."""

    device_total: I64


def device_times(tables: EventTables, nesting: Nesting, links: Links) -> OpTimes:
    host, dev = tables.host, tables.device
    n = len(host)
    own = np.zeros(n, dtype=np.int64)
    hit = links.op >= 0
    if hit.any():  # in int64 at once: a float64 bincount would be a second column
        np.add.at(own, links.op[hit], dev.dur[hit])
    members = np.flatnonzero(host.kind == OP)
    total = roll_up(own, nesting.parent_op, nesting.order, members, in_place=True)
    return OpTimes(device_total=total)


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
    children = np.zeros(n, dtype=np.int32)  # only "one child" matters: a count fits
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
