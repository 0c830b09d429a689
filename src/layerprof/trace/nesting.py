"""Who encloses whom on each CPU thread, and self times.

One sweep per thread in start order keeps a stack per span kind (ops,
modules, annotations, layerprof layer ranges). A span's parent of kind K is
the innermost open span of kind K when it starts. Self time is the span
minus the *union* of its direct children of the same kind, each clipped to
the parent, so ``0 <= self <= total`` always.

A span that ends more than ``OVERRUN_SLACK_NS`` after the parent it started
in is *detached*: an asynchronous range (``hccl:all_to_all`` lasting 2.5 s
from inside an 8.6 ms annotation), not work nested in that parent. It is kept
on its own track: no parent of its kind, never a parent of anything, not
subtracted from any self time. Smaller overruns (ts and dur rounded apart)
are clipped to the parent, which then closes on time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from layerprof.trace.columns import unique, unset
from layerprof.trace.events import ANNOTATION, I64, LAYER, MODULE, OP, RUNTIME, SYNC, HostSpans

_TRACKED = (OP, MODULE, ANNOTATION, LAYER)
OVERRUN_SLACK_NS = 1_000  # integer-µs traces round ts and dur apart: up to 1 µs
#: Levels of nesting the vectorized walks take (one numpy pass each); deeper trees
#: (a recursion thousands of calls deep) take the Python loop instead.
MAX_LEVELS = 64
#: Rounds of _nested_kind's candidate jumps before the sweep's loop takes over.
MAX_ROUNDS = 256
#: Spans whose enclosing span one vectorized walk looks for at a time: the walk holds
#: several int64 arrays per span, which for all of a 4 GB trace's ops is ~1 GB.
QUERY_CHUNK = 1 << 20


@dataclass(frozen=True)
class Nesting:
    """Per host span (same indexing as HostSpans): enclosing spans and self time.

    ``order`` is the sweep order (thread, start, longest first): a parent
    always comes before its children in it.
    """

    order: I64
    parent_op: I64
    parent_module: I64
    parent_annotation: I64
    parent_layer: I64
    self_ns: I64
    detached: npt.NDArray[np.bool_]  # overran the parent it started in (see module doc)

    def parent_of_kind(self, kind: int) -> I64:
        by_kind = {OP: self.parent_op, MODULE: self.parent_module, LAYER: self.parent_layer}
        return by_kind.get(kind, self.parent_annotation)

    def parent_any(self) -> I64:
        """Per span, the innermost span of any kind around it (-1: none): of its
        parents of each kind, the one swept last. All of them are open where the span
        starts; the one swept last started last (or as early and shorter), so it lies
        inside the others. A detached span keeps its parents of other kinds."""
        n = len(self.order)
        rank = np.empty(n, dtype=np.int64)
        rank[self.order] = np.arange(n, dtype=np.int64)
        kinds = np.stack([self.parent_op, self.parent_module, self.parent_annotation,
                          self.parent_layer])  # fmt: skip
        ranks = np.where(kinds >= 0, rank[np.clip(kinds, 0, None)], -1)
        inner: I64 = kinds[np.argmax(ranks, axis=0), np.arange(n)]  # all -1: stays -1
        return inner


def nest(host: HostSpans) -> Nesting:
    order = np.lexsort((-host.dur, host.start, host.thread)).astype(np.int64, copy=False)
    tracked = np.isin(host.kind[order], _TRACKED)
    parents, self_ns, detached = _sweep(host, order[tracked])
    # Runtime/sync calls never enclose anything that matters here: find their
    # enclosing spans with vectorized searches instead of the Python sweep.
    leaves = order[~tracked]
    nested = order[tracked]
    nested = nested[~detached[nested]]
    del tracked
    for kind in _TRACKED:
        if not parents[kind].flags.writeable:  # unset: the trace has no span of the kind
            continue
        members = nested[host.kind[nested] == kind]  # sorted by thread, then start
        for lo in range(0, len(leaves), QUERY_CHUNK):
            chunk = leaves[lo : lo + QUERY_CHUNK]
            parents[kind][chunk] = _enclosing(host, members, parents[kind], chunk)
    _runtime_is_not_self(host, parents[OP], leaves, self_ns)
    return Nesting(
        order=order,
        parent_op=parents[OP],
        parent_module=parents[MODULE],
        parent_annotation=parents[ANNOTATION],
        parent_layer=parents[LAYER],
        self_ns=self_ns,
        detached=detached,
    )


def _sweep(host: HostSpans, order: I64) -> tuple[dict[int, I64], I64, npt.NDArray[np.bool_]]:
    """Parents of every kind, self times and detached spans of the tracked spans, as one
    pass in (thread, start, longest first) order with a stack per kind would find them.

    Only a kind's own spans push, clip or detach on its stack, so each kind is swept
    alone: vectorized where its spans nest (``_nested_kind``, real traces), else by a
    Python loop (``_sweep_kind``); the other spans then find their parent of that kind
    with vectorized searches (``_open_at``). tests/trace/test_trace_nesting.py holds the
    one-pass sweep as the reference.
    """
    n = len(host)
    present = set(unique(host.kind).tolist())
    parents = {k: np.full(n, -1, dtype=np.int64) if k in present else unset(n)
               for k in _TRACKED}  # fmt: skip
    self_ns = host.dur.copy()
    detached = np.zeros(n, dtype=bool)
    ends = np.zeros(n, dtype=np.int64)  # each pushed span's end, clipped to its parent's
    kinds = host.kind[order]
    for kind in _TRACKED:
        members = order[kinds == kind]
        if len(members) == 0:
            continue
        start, dur, thread = host.start[members], host.dur[members], host.thread[members]
        swept = _nested_kind(start, dur, thread) or _sweep_kind(
            start.tolist(), dur.tolist(), thread.tolist()
        )
        parent, own, cut, clipped = swept
        local = np.asarray(parent, dtype=np.int64)
        parents[kind][members] = np.where(local >= 0, members[local], -1)
        self_ns[members] = own
        detached[members] = cut
        ends[members] = clipped
    for kind in _TRACKED:
        pushed = np.flatnonzero((kinds == kind) & ~detached[order])
        if len(pushed):
            others = np.flatnonzero(kinds != kind)
            # a chunk of queries at a time: the walk's arrays are ~8 a query
            for lo in range(0, len(others), QUERY_CHUNK):
                queries = others[lo : lo + QUERY_CHUNK]
                found = _open_at(host, order, pushed, queries, parents[kind], ends)
                parents[kind][order[queries]] = found
    return parents, self_ns, detached


def _nested_kind(start: I64, dur: I64, thread: I64) -> tuple[I64, I64, bool, I64] | None:
    """``_sweep_kind`` without a Python loop, for one kind's spans that nest (each ends
    by its parent's end; None when one does not: the sweep then clips or detaches).

    Nothing is clipped or detached then, so the stack holds every earlier span still
    open, and a span's parent is the last one before it on its thread that ends after
    it starts. Each span's candidate starts as the span before it; while it has ended,
    the span takes over the candidate's own candidate (every span in between has
    ended too), all spans at once: a run of ended siblings is crossed in
    log2(its length) rounds, a closed subtree in one round per level. Siblings do
    not overlap, so a parent's self time loses each child's whole duration.
    """
    m = len(start)
    cand = np.arange(-1, m - 1, dtype=index_type(m))  # local indices: int32 where they fit
    cand[cand < np.searchsorted(thread, thread)] = -1  # none before its thread's first
    end = start + dur
    active = np.flatnonzero(cand >= 0)
    for _ in range(MAX_ROUNDS):
        if len(active) == 0:
            break
        ended = end[cand[active]] <= start[active]
        active = active[ended]
        cand[active] = cand[cand[active]]
        active = active[cand[active] >= 0]
    else:
        return None  # deeper than MAX_ROUNDS levels: the loop is quicker
    child = np.flatnonzero(cand >= 0)
    if (end[child] > end[cand[child]]).any():
        return None
    own = dur.copy()
    np.subtract.at(own, cand[child], np.maximum(dur[child], 0))
    return cand, own, False, end


def _sweep_kind(
    starts: list[int], durs: list[int], threads: list[int]
) -> tuple[list[int], list[int], list[bool], list[int]]:
    """One kind's spans in sweep order, with one stack: each one's parent (a local
    index, -1: none), self time, whether it is detached, and its clipped end."""
    m = len(starts)
    parent = [-1] * m
    own = list(durs)
    cut = [False] * m
    ends = [0] * m
    stack: list[list[int]] = []  # frame: [end, index, covered_until]
    current = None
    for j, (s, d, t) in enumerate(zip(starts, durs, threads, strict=True)):
        e = s + d
        if t != current:
            current = t
            stack.clear()
        while stack and stack[-1][0] <= s:
            stack.pop()
        if stack:
            frame = stack[-1]
            top = frame[0]
            if e > top + OVERRUN_SLACK_NS:  # an async range: its own track
                cut[j] = True
                continue
            parent[j] = frame[1]
            if e > top:
                e = top
            lo = s if s > frame[2] else frame[2]
            if e > lo:
                own[frame[1]] -= e - lo
                frame[2] = e
        ends[j] = e
        stack.append([e, j, s])
    return parent, own, cut, ends


def _open_at(host: HostSpans, order: I64, pushed: I64, queries: I64, parent: I64, ends: I64) -> I64:
    """Innermost pushed span open on the stack when each query span is swept (positions
    in ``order``): the last one pushed before it on its thread, or the nearest of its
    ancestors whose clipped end lies after the query's start (a kind's stack holds
    exactly that chain, ends shrinking towards the top)."""
    before = np.searchsorted(pushed, queries) - 1
    cand = np.where(before >= 0, order[pushed[np.clip(before, 0, None)]], -1)
    spans = order[queries]
    thread, start = host.thread[spans], host.start[spans]
    cand[(cand >= 0) & (host.thread[np.clip(cand, 0, None)] != thread)] = -1
    active = np.flatnonzero(cand >= 0)
    while len(active):
        c = cand[active]
        closed = ends[c] <= start[active]
        active = active[closed]
        cand[active] = parent[c[closed]]
        active = active[cand[active] >= 0]
    return cand


def _runtime_is_not_self(host: HostSpans, parent_op: I64, leaves: I64, self_ns: I64) -> None:
    """A runtime call (``cudaLaunchKernel``) inside an op is not the op's own time:
    torch's ``key_averages`` lists it as an event of its own and subtracts it from
    the op's self time, and so does this (clipped to the op, never below 0)."""
    calls = leaves[np.isin(host.kind[leaves], (RUNTIME, SYNC)) & (parent_op[leaves] >= 0)]
    if len(calls) == 0:
        return
    owner = parent_op[calls]
    # the ends of these spans only (HostSpans.end would add up every span's)
    ends = np.minimum(host.start[calls] + host.dur[calls], host.start[owner] + host.dur[owner])
    inside = ends - host.start[calls]
    np.subtract.at(self_ns, owner, np.clip(inside, 0, None))
    np.maximum(self_ns, 0, out=self_ns)


def _enclosing(host: HostSpans, members: I64, parent: I64, queries: I64) -> I64:
    """Innermost of ``members`` (one kind's spans, sorted by thread, then start) open at
    each query span's start on its thread.

    The candidate is the last member that started at or before the query on the
    same thread; its ancestors are the only other spans that can contain the query,
    so walk up (all queries at once) until one is still open.
    """
    out = np.full(len(queries), -1, dtype=np.int64)
    if len(members) == 0 or len(queries) == 0:
        return out
    m_thread, m_start = host.thread[members], host.start[members]
    q_thread, q_start = host.thread[queries], host.start[queries]
    for t in unique(q_thread).tolist():
        lo, hi = np.searchsorted(m_thread, [t, t + 1])
        if lo == hi:
            continue
        q = np.flatnonzero(q_thread == t)
        pos = np.searchsorted(m_start[lo:hi], q_start[q], side="right") - 1
        cand = np.where(pos >= 0, members[lo:hi][np.clip(pos, 0, None)], -1)
        while True:
            at = np.clip(cand, 0, None)
            closed = (cand >= 0) & (host.start[at] + host.dur[at] <= q_start[q])
            if not closed.any():
                break
            cand[closed] = parent[cand[closed]]
        out[q] = cand
    return out


def roll_up(values: I64, parent: I64, order: I64, members: I64, *, in_place: bool = False) -> I64:
    """Inclusive sums: each member's value plus all its descendants' (same kind).

    ``members`` are the indices of the kind's spans; ``order`` puts parents
    first, so a reverse walk adds every child before its parent is read.
    Vectorized: a level of the tree at a time, deepest first. ``in_place``: the sums
    may go into ``values`` (an int64 column its caller has no other use for).
    """
    is_member = np.zeros(len(values), dtype=bool)
    is_member[members] = True
    seq = order[is_member[order]]
    del is_member
    index = index_type(len(seq))
    position = np.full(len(values), -1, dtype=index)
    position[seq] = np.arange(len(seq), dtype=index)
    par = parent[seq]
    up = np.where(par >= 0, position[np.clip(par, 0, None)], -1)  # a member parent's place
    del position
    depth = _depths(up)
    if depth is None or (up >= np.arange(len(seq))).any():  # a parent after its child
        return _roll_up_loop(values, parent, seq)
    total = values if in_place else values.astype(np.int64)
    for level in range(int(depth.max(initial=0)), -1, -1):
        at = seq[(depth == level) & (par >= 0)]
        np.add.at(total, parent[at], total[at])
    return total


def index_type(n: int) -> type[np.signedinteger[Any]]:
    """The dtype of a working array of indices below ``n``: int32 where they fit (a
    4 GB trace's columns of 12M spans are 48 MB so, not 95 MB)."""
    return np.int32 if n < np.iinfo(np.int32).max else np.int64


def _depths(up: I64) -> I64 | None:
    """How many steps up each node's chain of parents (``up``: a parent's index, -1:
    none) climbs; None past ``MAX_LEVELS``."""
    depth = np.zeros(len(up), dtype=np.int64)
    cur = up.copy()
    active = np.flatnonzero(cur >= 0)
    for _ in range(MAX_LEVELS):
        if len(active) == 0:
            return depth
        depth[active] += 1
        cur[active] = up[cur[active]]
        active = active[cur[active] >= 0]
    return None if len(active) else depth


def _roll_up_loop(values: I64, parent: I64, seq: I64) -> I64:
    total = values.copy()
    par = parent.tolist()
    acc = total.tolist()
    for i in reversed(seq.tolist()):
        p = par[i]
        if p >= 0:
            acc[p] += acc[i]
    return np.asarray(acc, dtype=np.int64)


def enclosing_at(host: HostSpans, nesting: Nesting, kind: int, thread: I64, ts: I64) -> I64:
    """Innermost span of ``kind`` on ``thread`` that contains each instant ``ts``."""
    out = np.full(len(ts), -1, dtype=np.int64)
    members = np.flatnonzero((host.kind == kind) & ~nesting.detached)
    if len(members) == 0 or len(ts) == 0:
        return out
    parent = nesting.parent_of_kind(kind).tolist()
    ends = host.end.tolist()
    for t in unique(thread).tolist():
        on_thread = members[host.thread[members] == t]
        if len(on_thread) == 0:
            continue
        by_start = on_thread[np.argsort(host.start[on_thread], kind="stable")]
        starts = host.start[by_start]
        queries = np.flatnonzero(thread == t)
        pos = np.searchsorted(starts, ts[queries], side="right") - 1
        cand = by_start.tolist()
        for q, p in zip(queries.tolist(), pos.tolist(), strict=True):
            j = cand[p] if p >= 0 else -1
            t_q = int(ts[q])
            while j >= 0 and ends[j] < t_q:
                j = parent[j]
            out[q] = j
    return out
