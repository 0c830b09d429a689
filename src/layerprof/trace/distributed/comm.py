"""Collectives of one rank: what each was, how long it ran, how much compute hid it.

A collective's *execution* is a communication kernel on the device (NCCL,
RCCL) or, for CPU backends, the ``gloo:*`` / ``mpi:*`` / ``ucc:*`` span on the
backend's worker thread. Its *issue* is the host call that launched it (the
runtime launch call, else the outermost ``c10d::`` / ``record_param_comms``
op around it). What it was comes from the trace's args where present (the
kernel's own, else those of the ops and annotations under its ``c10d::`` op),
else from the op's or the kernel's name (see trace/commargs.py).

Compute is the union of the compute kernels on the same device; on a trace
without device ops, the CPU ops on threads that run no collective.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerprof.pivot.sections.distributed import Collective, Communication
from layerprof.pivot.sections.trace import Steps
from layerprof.trace.columns import unique
from layerprof.trace.commargs import COMM_HOST, HOST_EXECUTION, CommArgs, world_size
from layerprof.trace.events import (
    ANNOTATION,
    I64,
    KERNEL,
    LAYER,
    MODULE,
    OP,
    EventTables,
)
from layerprof.trace.gpu import kernel_kind
from layerprof.trace.intervals import Lane, covered, empty_lane, intersection, lane, length, merge
from layerprof.trace.links import Links
from layerprof.trace.nesting import Nesting

# Substrings of a name with everything but letters removed, most specific first.
_KINDS = (
    ("allreduce", "all_reduce"), ("reducescatter", "reduce_scatter"), ("allgather", "all_gather"),
    ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"),
    ("barrier", "barrier"), ("send", "send"), ("recv", "recv"), ("reduce", "reduce"),
    ("gather", "gather"), ("scatter", "scatter"),
)  # fmt: skip
_NOT_LETTERS = re.compile(r"[^a-z]")
_PREFIX = re.compile(r"^(?:c10d::|(?:nccl|rccl|gloo|mpi|ucc|xccl|hccl):|nccl(?:Dev)?Kernel_)", re.I)


def collective_kind(name: str | None) -> str | None:
    """``all_reduce``, ``all_gather``, ... from a collective's, op's or kernel's name."""
    if not name:
        return None
    letters = _NOT_LETTERS.sub("", _PREFIX.sub("", name).lower())
    for key, kind in _KINDS:
        if key in letters:
            return kind
    return None


def comm_kernels(tables: EventTables) -> np.ndarray:
    """Which device ops are communication kernels (by name, as the kernel table says)."""
    dev = tables.device
    verdict = np.zeros(len(tables.names), dtype=bool)
    for i in unique(dev.name[dev.kind == KERNEL]).tolist():
        verdict[i] = kernel_kind(tables.names[i], KERNEL) == "communication"
    out: np.ndarray = (dev.kind == KERNEL) & verdict[dev.name]
    return out


def host_executions(tables: EventTables, nesting: Nesting) -> I64:
    """Host spans that run a CPU backend's collective (``gloo:all_reduce``, ...)."""
    host = tables.host
    ids = [i for i, n in enumerate(tables.names) if HOST_EXECUTION.match(n)]
    mask = np.isin(host.kind, (OP, ANNOTATION)) & np.isin(host.name, ids)
    # A gloo range nested in another (its own sub-steps) is the same collective.
    mask &= ~_inside_same_kind(host.name, nesting.parent_annotation, mask)
    return np.flatnonzero(mask)


def _inside_same_kind(names: I64, parent: I64, mask: np.ndarray) -> np.ndarray:
    has = parent >= 0
    out = np.zeros(len(mask), dtype=bool)
    out[has] = mask[parent[has]]
    inside: np.ndarray = out & mask
    return inside


def host_compute(tables: EventTables, nesting: Nesting, comm_threads: I64) -> Lane:
    """CPU ops, modules and layers on threads that run no collective (a host-only trace's compute)."""
    host = tables.host
    mask = np.isin(host.kind, (OP, MODULE, LAYER)) & ~nesting.detached
    mask &= ~np.isin(host.thread, comm_threads)
    return lane(host.start[mask], host.end[mask])


@dataclass(frozen=True)
class _Exec:
    """One execution found, before the per-lane passes fill in the rest."""

    name: str
    args: CommArgs
    kind: str
    issue: int | None
    start: int
    dur: int
    device: int | None
    stream: int | None
    lane_key: tuple[int, int]


def communication(
    tables: EventTables,
    nesting: Nesting,
    links: Links,
    steps: Steps,
    header: dict[str, Any] | None = None,
) -> Communication | None:
    """The rank's collectives and its communication/compute overlap; None without any."""
    dev, host = tables.device, tables.host
    is_comm = comm_kernels(tables)
    gloo = host_executions(tables, nesting)
    if not is_comm.any() and len(gloo) == 0:
        return None
    roots = _roots(tables, nesting)
    root_args = _root_args(tables, nesting, roots)
    execs: list[_Exec] = []
    for j in np.flatnonzero(is_comm).tolist():
        execs.append(_kernel_exec(tables, links, roots, root_args, j))
    for i in gloo.tolist():
        name = tables.names[int(host.name[i])]
        args = tables.comm_args.get((int(host.name[i]), int(host.ref[i]))) or CommArgs()
        kind = collective_kind(args.collective) or collective_kind(name) or "other"
        execs.append(
            _Exec(name, args, kind, None, int(host.start[i]), int(host.dur[i]), None, None,
                  (-1, int(host.thread[i])))
        )  # fmt: skip
    compute = _compute_lanes(tables, nesting, is_comm, host.thread[gloo])
    collectives = _collectives(tables, execs, compute, steps, _group_sizes(header or {}))
    comm_lane = merge(
        lane(dev.start[is_comm], dev.end[is_comm]), lane(host.start[gloo], host.end[gloo])
    )
    all_compute = merge(*compute.values()) if compute else empty_lane()
    return Communication(
        collectives=collectives,
        comm_ns=length(comm_lane),
        overlap_ns=intersection(comm_lane, all_compute),
        compute_ns=length(all_compute),
        origin_ns=tables.origin_us * 1000,
        on_device=bool(is_comm.any()),
    )


def _roots(tables: EventTables, nesting: Nesting) -> I64:
    """Per host span: the outermost collective op it belongs to, -1 for none."""
    host = tables.host
    comm_ids = [i for i, n in enumerate(tables.names) if COMM_HOST.match(n)]
    is_comm = np.isin(host.name, comm_ids) & np.isin(host.kind, (OP, ANNOTATION))
    is_comm_op = is_comm & (host.kind == OP)
    root = np.full(len(host), -1, dtype=np.int64)
    for i in np.flatnonzero(is_comm).tolist():
        r, up = -1, i if is_comm_op[i] else int(nesting.parent_op[i])
        while up >= 0 and is_comm_op[up]:
            r, up = up, int(nesting.parent_op[up])
        root[i] = r
    return root


def _root_args(tables: EventTables, nesting: Nesting, roots: I64) -> dict[int, CommArgs]:
    """Args of every span under one collective op, merged (record_param_comms first)."""
    host = tables.host
    out: dict[int, CommArgs] = {}
    idx = np.flatnonzero(roots >= 0)
    # record_param_comms (an op) before the annotations that only have shapes
    idx = idx[np.argsort(host.kind[idx], kind="stable")]
    for i in idx.tolist():
        found = tables.comm_args.get((int(host.name[i]), int(host.ref[i])))
        if found is not None:
            r = int(roots[i])
            out[r] = out[r].merged(found) if r in out else found
    return out


def _kernel_exec(
    tables: EventTables, links: Links, roots: I64, root_args: dict[int, CommArgs], j: int
) -> _Exec:
    dev, host = tables.device, tables.host
    name = tables.names[int(dev.name[j])]
    args = tables.comm_args.get((int(dev.name[j]), int(dev.corr[j]))) or CommArgs()
    op = int(links.op[j])
    root = int(roots[op]) if op >= 0 else -1
    if root >= 0 and root in root_args:
        args = args.merged(root_args[root])
    root_name = tables.names[int(host.name[root])] if root >= 0 else None
    kind = (
        collective_kind(args.collective)
        or collective_kind(root_name)
        or collective_kind(name)
        or "other"
    )
    rt = int(links.runtime[j])
    issue = int(host.start[rt]) if rt >= 0 else (int(host.start[root]) if root >= 0 else None)
    return _Exec(
        name, args, kind, issue, int(dev.start[j]), int(dev.dur[j]), int(dev.device[j]),
        int(dev.stream[j]), (int(dev.device[j]), int(dev.stream[j])),
    )  # fmt: skip


def _compute_lanes(
    tables: EventTables, nesting: Nesting, is_comm: np.ndarray, comm_threads: I64
) -> dict[int | None, Lane]:
    """Compute per device (compute kernels), and ``None``: the CPU ops of a host-only trace."""
    dev = tables.device
    out: dict[int | None, Lane] = {}
    compute = (dev.kind == KERNEL) & ~is_comm
    for d in unique(dev.device).tolist():
        on = compute & (dev.device == d)
        out[int(d)] = lane(dev.start[on], dev.end[on])
    if not tables.has_device:
        out[None] = host_compute(tables, nesting, unique(comm_threads))
    return out


def _group_sizes(header: dict[str, Any]) -> dict[str, int]:
    """Process group sizes from ``distributedInfo`` (``""``: the default group)."""
    info = header.get("distributedInfo")
    if not isinstance(info, dict):
        return {}
    out: dict[str, int] = {}
    world = world_size(info.get("world_size"))
    if world is not None:
        out[""] = world
    configs = info.get("pg_config")
    for pg in configs if isinstance(configs, list) else []:
        size = world_size(pg.get("pg_size")) if isinstance(pg, dict) else None
        if size is not None:
            out[str(pg.get("pg_name"))[:200]] = size
    return out


def _collectives(
    tables: EventTables,
    execs: list[_Exec],
    compute: dict[int | None, Lane],
    steps: Steps,
    sizes: dict[str, int],
) -> tuple[Collective, ...]:
    if not execs:
        return ()
    execs.sort(key=lambda x: (x.issue if x.issue is not None else x.start, x.start))
    starts = np.asarray([x.start for x in execs], dtype=np.int64)
    ends = starts + np.asarray([x.dur for x in execs], dtype=np.int64)
    prior_from = _previous_ends(execs, starts, ends)
    # compute under each execution and before it, one vectorized pass per device
    under = np.zeros(len(execs), dtype=np.int64)
    prior_ns = np.zeros(len(execs), dtype=np.int64)
    devices = np.asarray([-2 if x.device is None else x.device for x in execs])
    for d in unique(devices).tolist():
        on = np.flatnonzero(devices == d)
        ln = compute.get(None if d == -2 else d) or empty_lane()
        under[on] = covered(ln, starts[on], ends[on])
        prior_ns[on] = covered(ln, prior_from[on], starts[on])
    tops = _TopCompute(tables, compute)
    done = steps.complete
    step_s = np.asarray([s.start_ns for s in done], dtype=np.int64)
    counters: dict[tuple[str, str, str | None], int] = {}
    out = []
    for k, x in enumerate(execs):
        when = x.issue if x.issue is not None else x.start
        step = _step_at(done, step_s, when)
        group = x.args.group or ""
        key = (group, x.kind, step)
        counters[key] = index = counters.get(key, -1) + 1
        lo = int(prior_from[k])
        out.append(
            Collective(
                kind=x.kind,
                name=x.name,
                group=group,
                group_size=x.args.group_size or sizes.get(group) or sizes.get(""),
                step=step,
                index=index,
                seq=x.args.seq,
                issue_ns=x.issue,
                start_ns=x.start,
                dur_ns=x.dur,
                bytes=x.args.bytes,
                device=x.device,
                stream=x.stream,
                exposed_ns=x.dur - int(under[k]),
                prior_compute_ns=int(prior_ns[k]),
                prior_top=tops.top(x.device, lo, x.start),
            )
        )
    return tuple(out)


def _previous_ends(execs: Sequence[_Exec], starts: I64, ends: I64) -> I64:
    """Per execution: the end of the previous one on its lane (stream or thread);
    the trace's origin (or its first start, if earlier) for the first."""
    out = np.full(len(execs), min(0, int(starts.min())), dtype=np.int64)
    last: dict[tuple[int, int], int] = {}
    for k in np.argsort(starts, kind="stable").tolist():
        key = execs[k].lane_key
        if key in last:
            out[k] = min(last[key], int(starts[k]))
        last[key] = max(last.get(key, int(ends[k])), int(ends[k]))
    return out


def _step_at(done: Sequence[Any], step_s: I64, t: int) -> str | None:
    k = int(np.searchsorted(step_s, t, side="right")) - 1
    if k >= 0 and t < done[k].end_ns:
        return str(done[k].name)
    return None


class _TopCompute:
    """The kernel (or, on a host-only trace, top-level op) with most time in a span."""

    def __init__(self, tables: EventTables, compute: dict[int | None, Lane]) -> None:
        self.names = tables.names
        self.items: dict[int | None, tuple[I64, I64, I64]] = {}
        dev, host = tables.device, tables.host
        is_comm = comm_kernels(tables)
        for d in compute:
            if d is None:
                on = np.flatnonzero((host.kind == OP) & (host.dur > 0))
                start, dur, name = host.start[on], host.dur[on], host.name[on]
            else:
                on = np.flatnonzero((dev.kind == KERNEL) & ~is_comm & (dev.device == d))
                start, dur, name = dev.start[on], dev.dur[on], dev.name[on]
            order = np.argsort(start, kind="stable")
            self.items[d] = (start[order], dur[order], name[order])

    def top(self, device: int | None, lo: int, hi: int) -> str | None:
        found = self.items.get(device)
        if found is None:
            return None
        start, dur, name = found
        a, b = np.searchsorted(start, [lo, hi])
        if a >= b:
            return None
        uniq, group = np.unique(name[a:b], return_inverse=True)
        sums = np.bincount(group, weights=dur[a:b])
        return self.names[int(uniq[int(np.argmax(sums))])]
