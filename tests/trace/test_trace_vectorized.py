"""The vectorized walks of the reducer give what the Python loops they replaced gave:
inclusive sums up a tree (nesting.roll_up), the outermost backward node around each op
(attribution._outermost), the idle split of a device (gpu._classify_idle) and the
thinned queue series (intervals.thin)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from layerprof.trace.attribution import _outermost, _outermost_loop
from layerprof.trace.gpu import SHORT_GAP_NS, _classify_idle, union
from layerprof.trace.nesting import MAX_LEVELS, _roll_up_loop, roll_up


@st.composite
def forests(draw: st.DrawFn) -> tuple[Any, Any]:
    """Parent links (-1: a root) with parents before children in ``order``."""
    n = draw(st.integers(1, 80))
    parent = [-1] + [draw(st.integers(-1, i - 1)) for i in range(1, n)]
    perm = draw(st.permutations(range(n)))  # relabel: order is no longer 0..n-1
    label = np.empty(n, dtype=np.int64)
    label[np.asarray(perm, dtype=np.int64)] = np.arange(n)
    relabeled = np.full(n, -1, dtype=np.int64)
    for i, p in enumerate(parent):
        relabeled[label[i]] = label[p] if p >= 0 else -1
    return relabeled, label  # label[i] is the i-th span in order


def chain(n: int) -> tuple[Any, Any]:
    return np.arange(-1, n - 1, dtype=np.int64), np.arange(n, dtype=np.int64)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(forests(), st.data())
def test_roll_up_is_the_reverse_walk(forest: tuple[Any, Any], data: st.DataObject) -> None:
    parent, order = forest
    n = len(parent)
    values = np.asarray(data.draw(st.lists(st.integers(0, 10**12), min_size=n, max_size=n)))
    members = np.flatnonzero(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    seq = order[np.isin(order, members)]
    expected = _roll_up_loop(values, parent, seq)
    assert roll_up(values, parent, order, members).tolist() == expected.tolist()


def test_roll_up_of_a_deep_chain_and_of_a_parent_after_its_child() -> None:
    parent, order = chain(3 * MAX_LEVELS)
    values = np.arange(len(parent), dtype=np.int64)
    assert roll_up(values, parent, order, order).tolist() == (
        _roll_up_loop(values, parent, order).tolist()
    )
    backwards = order[::-1].copy()  # children first: the walk's own quirks, kept
    assert roll_up(values, parent, backwards, order).tolist() == (
        _roll_up_loop(values, parent, backwards).tolist()
    )


@settings(max_examples=400, deadline=None, derandomize=True)
@given(forests(), st.data())
def test_outermost_is_the_one_pass_walk(forest: tuple[Any, Any], data: st.DataObject) -> None:
    parent, order = forest
    n = len(parent)
    members = np.ones(n, dtype=bool)
    marked = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    expected = _outermost_loop(parent, order, members, marked)
    assert _outermost(parent, order, members, marked).tolist() == expected.tolist()


def test_outermost_on_a_deep_chain() -> None:
    parent, order = chain(3 * MAX_LEVELS)
    members = np.ones(len(parent), dtype=bool)
    marked = (np.arange(len(parent)) % 7 == 3) & (np.arange(len(parent)) > 10)
    assert _outermost(parent, order, members, marked).tolist() == (
        _outermost_loop(parent, order, members, marked).tolist()
    )


def _classify_idle_loop(
    seg_s: Any, seg_e: Any, launched: Any, windows: list[tuple[int, int]]
) -> tuple[int, int, int]:
    """The per-segment loop gpu._classify_idle replaced."""
    wait = short = other = 0
    for lo, hi in windows:
        inside = np.flatnonzero((seg_e > lo) & (seg_s < hi))
        prev_end = lo
        for k in inside.tolist():
            start = max(int(seg_s[k]), lo)
            gap = start - prev_end
            if gap > 0:
                if launched[k] > prev_end:
                    wait += gap
                elif gap <= SHORT_GAP_NS:
                    short += gap
                else:
                    other += gap
            prev_end = max(prev_end, min(int(seg_e[k]), hi))
        other += max(0, hi - prev_end)
    return wait, short, other


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 30)), max_size=40),
    st.lists(st.tuples(st.integers(-10, 220), st.integers(0, 120)), max_size=4),
    st.data(),
)
def test_classify_idle_is_the_segment_loop(
    ops: list[tuple[int, int]], windows: list[tuple[int, int]], data: st.DataObject
) -> None:
    grid = 1_000  # gaps on both sides of SHORT_GAP_NS
    starts = np.asarray([s * grid for s, _ in ops], dtype=np.int64)
    ends = starts + np.asarray([d * grid for _, d in ops], dtype=np.int64)
    seg_s, seg_e, _ = union(starts, ends)
    launched = (
        np.asarray(
            data.draw(st.lists(st.integers(-1, 230), min_size=len(seg_s), max_size=len(seg_s))),
            dtype=np.int64,
        )
        * grid
    )
    spans = sorted((lo * grid, (lo + d) * grid) for lo, d in windows)
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:  # the windows device_use passes: disjoint, sorted
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    assert _classify_idle(seg_s, seg_e, launched, merged) == (
        _classify_idle_loop(seg_s, seg_e, launched, merged)
    )


def _thin_loop(times: Any, values: Any, most: int) -> tuple[tuple[int, int], ...]:
    """intervals.thin as it was: each bucket's first peak found by a loop."""
    last = np.append(times[1:] != times[:-1], True)
    times, values = times[last], values[last]
    if len(times) > most:
        bucket = (times - times[0]) * most // max(int(times[-1] - times[0]), 1)
        keep = np.zeros(len(times), dtype=bool)
        starts = np.flatnonzero(np.append(True, bucket[1:] != bucket[:-1]))
        peaks = np.maximum.reduceat(values, starts)
        for b, (a, peak) in enumerate(zip(starts.tolist(), peaks.tolist(), strict=True)):
            end = starts[b + 1] if b + 1 < len(starts) else len(times)
            keep[a + int(np.argmax(values[a:end] == peak))] = True
        keep[-1] = True
        times, values = times[keep], values[keep]
    return tuple(zip(times.tolist(), values.tolist(), strict=True))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 3)), min_size=1, max_size=120),
    st.integers(1, 12),
)
def test_thin_keeps_each_buckets_first_peak(steps: list[tuple[int, int]], most: int) -> None:
    from layerprof.trace.intervals import thin

    times = np.cumsum([t for t, _ in steps]).astype(np.int64)
    values = np.cumsum([v for _, v in steps]).astype(np.int64)
    assert thin(times, values, most) == _thin_loop(times, values, most)
