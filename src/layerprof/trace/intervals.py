"""Interval sets as sorted disjoint segments: coverage, lengths, partitions.

A *lane* is a set of intervals (kernels of one kind, runtime calls, ...)
merged into disjoint sorted segments (``lane``). Partitioning a window by
several lanes with a priority (``partition``) splits the time line at every
segment boundary: inside one elementary piece each lane is either on or off,
so each piece goes whole to the first lane that is on there.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from layerprof.trace.columns import unique
from layerprof.trace.events import I64
from layerprof.trace.gpu import union

Lane = tuple[I64, I64]  # disjoint sorted segments: starts, ends


def lane(starts: I64, ends: I64) -> Lane:
    """The union of the intervals as disjoint sorted segments (empty ones dropped)."""
    keep = ends > starts
    seg_s, seg_e, _ = union(starts[keep], ends[keep])
    return seg_s, seg_e


def empty_lane() -> Lane:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


def merge(*lanes: Lane) -> Lane:
    """The union of several lanes."""
    return lane(np.concatenate([s for s, _ in lanes]), np.concatenate([e for _, e in lanes]))


def length(ln: Lane) -> int:
    return int((ln[1] - ln[0]).sum())


def covered_until(ln: Lane, t: I64) -> I64:
    """Length of the lane before each time in ``t``."""
    seg_s, seg_e = ln
    if len(seg_s) == 0:
        return np.zeros(len(t), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(seg_e - seg_s)])
    k = np.searchsorted(seg_s, t, side="right")  # segments starting at or before t
    over = np.where(k > 0, np.clip(seg_e[np.clip(k - 1, 0, None)] - t, 0, None), 0)
    out: I64 = cum[k] - over
    return out


def covered(ln: Lane, lo: I64, hi: I64) -> I64:
    """Length of the lane inside each [lo, hi)."""
    out: I64 = covered_until(ln, hi) - covered_until(ln, lo)
    return out


def intersection(a: Lane, b: Lane) -> int:
    """Length of a ∩ b."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return 0
    return int(covered(b, a[0], a[1]).sum())


def active(ln: Lane, points: I64) -> np.ndarray:
    """Whether the lane covers each point (a segment [s, e) covers s, not e)."""
    seg_s, seg_e = ln
    if len(seg_s) == 0:
        return np.zeros(len(points), dtype=bool)
    k = np.searchsorted(seg_s, points, side="right") - 1
    return (k >= 0) & (seg_e[np.clip(k, 0, None)] > points)


#: Lane boundaries one pass of :func:`partition` takes at a time, about: the time line
#: is cut into ranges holding at most this many, so its working arrays (~10 int64 a
#: boundary) stay ~100 MB where a 4 GB trace's lanes have tens of millions.
PIECES = 1 << 20


def partition(
    lanes: Sequence[Lane], windows: Sequence[tuple[int, int]], order: Sequence[int]
) -> np.ndarray:
    """ns per window and class: ``out[w, c]``.

    A piece of time goes to the first bit combination in ``order`` whose
    lanes are all on there (``order`` holds bit masks over ``lanes``: lane i
    is bit ``1 << i``); a piece matching none goes to the last column (idle).
    A piece goes to the window with the latest start at or before it.

    The time line is taken a range at a time (``PIECES``): cutting a piece in two
    moves none of its time to another window or class, and the sums are integers,
    so every range size gives the same table.
    """
    out = np.zeros((len(windows), len(order) + 1), dtype=np.int64)
    if not windows:
        return out
    w_s = np.asarray([lo for lo, _ in windows], dtype=np.int64)
    w_e = np.asarray([hi for _, hi in windows], dtype=np.int64)
    sums = out.reshape(-1)
    cuts = _cuts(lanes, int(w_s.min()), int(w_e.max()))
    for a, b in pairwise(cuts):
        clipped = [_clipped(ln, a, b) for ln in lanes]
        _partition_range(sums, clipped, w_s, w_e, (a, b), order)
    return out


def _cuts(lanes: Sequence[Lane], lo: int, hi: int) -> list[int]:
    """``lo``, times between, ``hi``: each range between two holds at most about
    ``PIECES`` segment starts and ends of all lanes together (every ``step``-th start
    of each lane is a cut)."""
    step = max(PIECES // (2 * max(len(lanes), 1)), 1)
    inner = [s[::step] for s, _ in lanes if len(s) > step]
    if not inner:
        return [lo, hi]
    points = unique(np.concatenate(inner))
    return [lo, *points[(points > lo) & (points < hi)].tolist(), hi]


def _clipped(ln: Lane, a: int, b: int) -> Lane:
    """The lane's segments that overlap [a, b), cut to it."""
    seg_s, seg_e = ln
    i = int(np.searchsorted(seg_e, a, side="right"))  # ends are sorted too (disjoint)
    j = int(np.searchsorted(seg_s, b, side="left"))
    return np.maximum(seg_s[i:j], a), np.minimum(seg_e[i:j], b)


def _partition_range(
    sums: I64,
    lanes: Sequence[Lane],
    w_s: I64,
    w_e: I64,
    span: tuple[int, int],
    order: Sequence[int],
) -> None:
    """Add the pieces of [a, b] (the lanes cut to it) to ``sums`` (flat ``out``)."""
    a, b = span
    edges = np.asarray([a, b], dtype=np.int64)
    bounds = unique(
        np.concatenate([edges, w_s, w_e, *[s for s, _ in lanes], *[e for _, e in lanes]])
    )
    bounds = bounds[(bounds >= a) & (bounds <= b)]
    left, size = bounds[:-1], np.diff(bounds)
    by_start = np.argsort(w_s, kind="stable")
    k = np.searchsorted(w_s[by_start], left, side="right") - 1
    w = by_start[np.clip(k, 0, None)]
    inside = (k >= 0) & (left < w_e[w])
    bits = np.zeros(len(left), dtype=np.int64)
    for i, ln in enumerate(lanes):
        bits |= active(ln, left).astype(np.int64) << i
    klass = np.full(len(left), len(order), dtype=np.int64)
    for c in reversed(range(len(order))):
        klass[(bits & order[c]) == order[c]] = c
    flat = w[inside] * (len(order) + 1) + klass[inside]
    np.add.at(sums, flat, size[inside])  # integer sums: exact to the ns


def thin(times: I64, values: I64, most: int) -> tuple[tuple[int, int], ...]:
    """At most ``most`` points: the last value at each instant, then the maximum per bucket."""
    last = np.append(times[1:] != times[:-1], True)
    times, values = times[last], values[last]
    if len(times) > most:
        bucket = (times - times[0]) * most // max(int(times[-1] - times[0]), 1)
        keep = np.zeros(len(times), dtype=bool)
        starts = np.flatnonzero(np.append(True, bucket[1:] != bucket[:-1]))
        peaks = np.maximum.reduceat(values, starts)
        # each bucket's first point at its peak
        at_peak = np.flatnonzero(values == np.repeat(peaks, np.diff(starts, append=len(times))))
        keep[at_peak[np.searchsorted(at_peak, starts)]] = True
        keep[-1] = True
        times, values = times[keep], values[keep]
    return tuple(zip(times.tolist(), values.tolist(), strict=True))
