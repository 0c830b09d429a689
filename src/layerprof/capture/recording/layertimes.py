"""The Recorder's event log -> a table of calls -> per-iteration, per-layer total and self.

Pure numpy, no torch: the Recorder only appends ``(code, time)`` pairs to a
list (a layer's index when its forward starts, ``EXIT`` or ``RAISED`` when it
ends); everything else happens here, vectorized, so that the tree and
self-time logic is tested with a fake clock and exact numbers, and a run of
millions of calls keeps 24 bytes per call while it records (``CallTable``)
and 8 bytes per sample and quantity after (``LayerSamples``).

Nesting comes from the order of the events, never from comparing times (a
fake clock may give a parent and its child the same time): the events form a
well-parenthesized sequence, a call's level is its depth, and its parent is
the last call one level up that started before it.

Overhead correction (see docs/definitions.md): a recorded call costs
``inside_ns`` inside its own measured interval and ``leak = per_call_ns -
inside_ns`` in its parent's (the wrapper's work before the first and after
the second clock read). A call's measured self time thus holds ``inside_ns``
plus ``leak`` per direct child call; both are subtracted (never below zero)
and totals are rebuilt bottom-up as self + children, which keeps
``total == self + sum(children)`` exact.

``SKIP`` pseudo-calls are time the recorder spent on itself inside a layer
(recording shapes): subtracted from the enclosing call's self time, never a
layer, never a child for the correction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from layerprof.pivot.records import LayerCall, LayerSamples

I64 = npt.NDArray[np.int64]
_I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]

EXIT = -1  #: a call ended normally
RAISED = -2  #: a call ended by raising
SKIP = -3  #: starts a pseudo-call: the recorder's own work, excluded from layers


@dataclass(frozen=True)
class Correction:
    """Per-call instrumentation cost to remove from host times (ns)."""

    per_call_ns: float = 0.0
    inside_ns: float = 0.0

    @property
    def measured(self) -> bool:
        """Whether the calibration found a cost (a busy machine's noise can swallow it)."""
        return self.per_call_ns > 0

    @property
    def leak_ns(self) -> float:
        """The part of a call's cost that lands in its parent's interval."""
        return max(self.per_call_ns - self.inside_ns, 0.0)


@dataclass(frozen=True)
class CallTable:
    """Calls in start order as parallel arrays (24 bytes a call, 40 with device times).

    ``layer`` indexes the recorder's path list (``SKIP`` for a pseudo-call);
    ``level`` is 1 for an outermost call (one iteration each), 2 for its
    children, and so on. ``iteration`` overrides the iteration numbers that
    ``level`` implies (records built by hand).
    """

    layer: _I32
    start: I64
    end: I64
    level: _I32
    device_start: I64 | None = None
    device_end: I64 | None = None
    iteration: I64 | None = None

    def __len__(self) -> int:
        return len(self.layer)

    @property
    def nbytes(self) -> int:
        arrays = (self.layer, self.start, self.end, self.level, self.device_start, self.device_end)
        return sum(a.nbytes for a in arrays if a is not None)

    @classmethod
    def empty(cls, device: bool = False) -> CallTable:
        i64 = np.zeros(0, dtype=np.int64)
        i32 = np.zeros(0, dtype=np.int32)
        return cls(i32, i64, i64, i32, i64 if device else None, i64 if device else None)

    @classmethod
    def concat(cls, tables: Sequence[CallTable]) -> CallTable:
        if not tables:
            return cls.empty()
        if len(tables) == 1:
            return tables[0]
        device = all(t.device_start is not None for t in tables)

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(t, name) for t in tables])

        return cls(
            layer=cat("layer"),
            start=cat("start"),
            end=cat("end"),
            level=cat("level"),
            device_start=cat("device_start") if device else None,
            device_end=cat("device_end") if device else None,
        )

    def parents(self) -> I64:
        """Index of each call's enclosing call, -1 for an outermost one."""
        parent = np.full(len(self), -1, dtype=np.int64)
        level = self.level
        if len(level) == 0:
            return parent
        by_level = np.argsort(level, kind="stable")  # positions grouped by level, in order
        bounds = np.searchsorted(level[by_level], np.arange(1, int(level.max()) + 2))
        for lv in range(2, int(level.max()) + 1):
            above = by_level[bounds[lv - 2] : bounds[lv - 1]]
            here = by_level[bounds[lv - 1] : bounds[lv]]
            parent[here] = above[np.searchsorted(above, here) - 1]
        return parent

    def iterations(self) -> I64:
        """The iteration of each call: the number of outermost calls before it started."""
        if self.iteration is not None:
            return self.iteration
        return np.cumsum(self.level == 1, dtype=np.int64) - 1

    @classmethod
    def of_calls(cls, calls: Sequence[LayerCall], paths: list[str]) -> CallTable:
        """A table of LayerCall records (which name their parent); ``paths`` grows with
        every path not in it yet."""
        index = {p: i for i, p in enumerate(paths)}
        level = [0] * len(calls)
        for i, c in enumerate(calls):
            level[i] = level[c.parent] + 1 if c.parent >= 0 else 1
            if c.path not in index:
                index[c.path] = len(paths)
                paths.append(c.path)
        device = bool(calls) and all(c.device_start_ns is not None for c in calls)
        return cls(
            layer=np.array([index[c.path] for c in calls], dtype=np.int32),
            start=np.array([c.start_ns for c in calls], dtype=np.int64),
            end=np.array([c.end_ns for c in calls], dtype=np.int64),
            level=np.array(level, dtype=np.int32),
            device_start=np.array([c.device_start_ns for c in calls], dtype=np.int64)
            if device
            else None,
            device_end=np.array([c.device_end_ns for c in calls], dtype=np.int64)
            if device
            else None,
            iteration=np.array([c.iteration for c in calls], dtype=np.int64),
        )

    def records(self, paths: Sequence[str]) -> list[LayerCall]:
        """The calls as LayerCall records (pseudo-calls left out, parents re-indexed)."""
        parent = self.parents()
        iteration = self.iterations()
        keep = np.flatnonzero(self.layer >= 0)
        new_index = np.full(len(self) + 1, -1, dtype=np.int64)
        new_index[keep] = np.arange(len(keep))
        # A pseudo-call never has children, so no real call's parent is dropped.
        dev = self.device_start is not None and self.device_end is not None
        return [
            LayerCall(
                path=paths[int(self.layer[i])],
                iteration=int(iteration[i]),
                start_ns=int(self.start[i]),
                end_ns=int(self.end[i]),
                parent=int(new_index[parent[i]]),
                device_start_ns=int(self.device_start[i]) if dev else None,  # type: ignore[index]
                device_end_ns=int(self.device_end[i]) if dev else None,  # type: ignore[index]
            )
            for i in keep.tolist()
        ]


def is_entry(codes: I64) -> npt.NDArray[np.bool_]:
    entry: npt.NDArray[np.bool_] = (codes >= 0) | (codes == SKIP)
    return entry


def complete_prefix(codes: I64, n_layers: int) -> int:
    """How many leading pairs of the log form whole outermost calls (depth back at 0).

    A pair whose code is no known layer or end marker (the log misaligned by a
    KeyboardInterrupt between two appends) ends the usable part.
    """
    valid = (codes >= SKIP) & (codes < n_layers)
    bad = np.flatnonzero(~valid)
    usable = codes[: bad[0]] if len(bad) else codes
    depth = np.cumsum(np.where(is_entry(usable), 1, -1))
    negative = np.flatnonzero(depth < 0)
    if len(negative):
        depth = depth[: negative[0]]
    zeros = np.flatnonzero(depth == 0)
    return int(zeros[-1]) + 1 if len(zeros) else 0


def parse_events(codes: I64, times: I64, device: I64 | None = None) -> CallTable:
    """Pairs ``(code, time)`` forming whole outermost calls -> their CallTable.

    Within one level the events alternate entry, exit, entry, exit (the
    sequence is well parenthesized), so the k-th entry at a level is closed by
    the k-th exit at that level.
    """
    entry = is_entry(codes)
    depth = np.cumsum(np.where(entry, 1, -1))
    level = np.where(entry, depth, depth + 1)
    by_level = np.argsort(level, kind="stable")
    starts = by_level[entry[by_level]]
    ends = by_level[~entry[by_level]]
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    return CallTable(
        layer=codes[starts].astype(np.int32),
        start=times[starts],
        end=times[ends],
        level=level[starts].astype(np.int32),
        device_start=device[starts] if device is not None else None,
        device_end=device[ends] if device is not None else None,
    )


def call_times(
    calls: CallTable | Sequence[LayerCall], correction: Correction | None = None
) -> tuple[F64, F64]:
    """Corrected (total, self) host time of every call, in start order.

    Totals are rebuilt bottom-up from self times (they equal the measured
    durations when nothing is corrected or skipped).
    """
    table = calls if isinstance(calls, CallTable) else CallTable.of_calls(calls, [])
    parent = table.parents()
    total, self_t = _times(table, parent, correction)
    return total, self_t


def _times(table: CallTable, parent: I64, correction: Correction | None) -> tuple[F64, F64]:
    n = len(table)
    dur = (table.end - table.start).astype(np.float64)
    real = table.layer >= 0
    has = parent >= 0
    child_sum = np.bincount(parent[has], weights=dur[has], minlength=n)
    self_t = dur - child_sum
    if correction is not None and correction.measured:
        kids = np.bincount(parent[has & real], minlength=n)
        self_t = np.maximum(self_t - correction.inside_ns - kids * correction.leak_ns, 0.0)
    self_t[~real] = 0.0
    return _roll_up(self_t, parent, table.level), self_t


def _roll_up(own: F64, parent: I64, level: _I32) -> F64:
    """Inclusive sums: each call's own value plus its descendants', deepest level first."""
    total: F64 = own.copy()
    if len(level) == 0:
        return total
    for lv in range(int(level.max()), 1, -1):
        here = np.flatnonzero(level == lv)
        np.add.at(total, parent[here], total[here])
    return total


def _past_int32(a: F64) -> bool:
    info = np.iinfo(np.int32)
    return a.size > 0 and bool(a.max() > info.max or a.min() < info.min)


def _nested_in_same(table: CallTable, parent: I64) -> npt.NDArray[np.bool_]:
    """True for a call inside another call of the same layer (recursion): its total is
    already in the outer call's, so it counts only for self time and calls."""
    nested = np.zeros(len(table), dtype=bool)
    anc = parent.copy()
    layer = table.layer
    while True:
        up = np.flatnonzero(anc >= 0)
        if len(up) == 0:
            return nested
        nested[up] |= layer[anc[up]] == layer[up]
        anc[up] = parent[anc[up]]


def device_times(table: CallTable, parent: I64) -> tuple[F64, F64] | None:
    """(total, self) device time of every call; None without device times."""
    if table.device_start is None or table.device_end is None:
        return None
    total = (table.device_end - table.device_start).astype(np.float64)
    total[table.layer < 0] = 0.0
    has = parent >= 0
    self_t = total - np.bincount(parent[has], weights=total[has], minlength=len(table))
    return total, self_t


def build_samples(
    calls: CallTable | Sequence[CallTable] | Sequence[LayerCall],
    iterations: int,
    correction: Correction | None = None,
    paths: list[str] | None = None,
) -> dict[str, LayerSamples]:
    """Sum each layer's calls per iteration; a layer absent from an iteration gets 0 there.

    ``calls`` is one table, or the Recorder's tables (each holding whole
    iterations, reduced one at a time so the work arrays stay the size of a
    table), or LayerCall records; ``paths`` names the tables' layer indices
    (LayerCall records name themselves). The samples are int64 rows of one
    matrix per quantity: 8 bytes per layer, iteration and quantity.
    """
    paths = list(paths or [])
    tables = _tables_of(calls, paths)
    if iterations <= 0 or not any(len(t) for t in tables):
        return {}
    device = all(t.device_start is not None for t in tables)
    sums = SampleSums(len(paths), iterations, device)
    for table in tables:
        sums.add(table, correction, iterations if table.iteration is not None else None)
    return sums.samples(paths)


def _tables_of(
    calls: CallTable | Sequence[CallTable] | Sequence[LayerCall], paths: list[str]
) -> list[CallTable]:
    if isinstance(calls, CallTable):
        return [calls]
    items = list(calls)
    if items and isinstance(items[0], CallTable):
        return [c for c in items if isinstance(c, CallTable)]
    return [CallTable.of_calls([c for c in items if isinstance(c, LayerCall)], paths)]


class SampleSums:
    """Per-layer, per-iteration sums, filled one table (a run of whole iterations) at a time.

    The int64 matrices are the samples' final storage (their rows become the
    LayerSamples as they are), so a record reduced table by table as it grows
    (``Recorder.stream``) never holds more than the result and one table:
    8 bytes per layer, iteration and quantity. ``iterations`` is the room made
    at first; more iterations than that grow the matrices (a copy). ``narrow``
    (a training loop's steps, 100k of them): 4 bytes while every sum fits int32
    (a layer's part of one step under 2.1 s); the first that does not widens the
    matrices to int64 for good.
    """

    def __init__(self, n_paths: int, iterations: int, device: bool, narrow: bool = False) -> None:
        self.n_paths = n_paths
        self.dtype: type[np.signedinteger[Any]] = np.int32 if narrow else np.int64
        self.filled = 0  # iterations summed so far (the next table's first column)
        self.total, self.self_ = self._matrix(iterations), self._matrix(iterations)
        self.device = (self._matrix(iterations), self._matrix(iterations)) if device else None
        self.calls = np.zeros(n_paths, dtype=np.int64)
        self.fewest = np.full(n_paths, np.iinfo(np.int64).max, dtype=np.int64)
        self.most = np.zeros(n_paths, dtype=np.int64)

    def _matrix(self, iterations: int) -> I64:
        return np.zeros((self.n_paths, max(iterations, 0)), dtype=self.dtype)

    def _widen_dtype(self) -> None:
        """int64 from now on: a sum did not fit int32 (copies the matrices once)."""
        self.dtype = np.int64
        self.total, self.self_ = self.total.astype(np.int64), self.self_.astype(np.int64)
        if self.device is not None:
            self.device = (self.device[0].astype(np.int64), self.device[1].astype(np.int64))

    @property
    def call_count(self) -> int:
        return int(self.calls.sum())

    def widen(self, n_paths: int) -> None:
        """Room for ``n_paths`` layers (rows of zeros for the new ones)."""
        if n_paths <= self.n_paths:
            return
        extra = n_paths - self.n_paths

        def grown(old: I64) -> I64:
            return np.vstack([old, np.zeros((extra, old.shape[1]), dtype=old.dtype)])

        self.total, self.self_ = grown(self.total), grown(self.self_)
        if self.device is not None:
            self.device = (grown(self.device[0]), grown(self.device[1]))
        self.calls = np.concatenate([self.calls, np.zeros(extra, dtype=np.int64)])
        self.fewest = np.concatenate(
            [self.fewest, np.full(extra, np.iinfo(np.int64).max, dtype=np.int64)]
        )
        self.most = np.concatenate([self.most, np.zeros(extra, dtype=np.int64)])
        self.n_paths = n_paths

    def _reserve(self, iterations: int) -> None:
        room = self.total.shape[1]
        if iterations <= room and self.total.flags.writeable:
            return
        # by half again: the unused room stays with the samples (their rows are views)
        room = max(iterations, room + room // 2) if iterations > room else room

        def grown(old: I64) -> I64:
            new = self._matrix(room)
            new[:, : self.filled] = old[:, : self.filled]
            return new

        self.total, self.self_ = grown(self.total), grown(self.self_)
        if self.device is not None:
            self.device = (grown(self.device[0]), grown(self.device[1]))

    def add(
        self, table: CallTable, correction: Correction | None, width: int | None = None
    ) -> None:
        """Sum one table of whole iterations into the next ``width`` columns (default: its
        outermost calls; a table with explicit iteration numbers says how many)."""
        if width is None:
            width = int((table.level == 1).sum())
        offset = self.filled
        # grows the matrices, or copies them when samples() handed their rows out
        self._reserve(offset + width)
        self.filled += width
        if len(table) == 0:
            return
        n_paths = self.n_paths
        parent = table.parents()
        total, self_t = _times(table, parent, correction)
        dev = device_times(table, parent)
        key = table.layer.astype(np.int64) * width + table.iterations()
        real = table.layer >= 0
        outer = real & ~_nested_in_same(table, parent)
        cols = slice(offset, offset + width)

        def per_layer(mask: npt.NDArray[np.bool_], weights: F64 | None) -> np.ndarray:
            w = weights[mask] if weights is not None else None
            out = np.bincount(key[mask], weights=w, minlength=n_paths * width)
            return out.reshape(n_paths, width)

        counts = per_layer(real, None)
        self.calls += counts.sum(axis=1)
        np.minimum(self.fewest, counts.min(axis=1, initial=np.iinfo(np.int64).max), out=self.fewest)
        np.maximum(self.most, counts.max(axis=1, initial=0), out=self.most)
        sums = [np.rint(per_layer(outer, total)), np.rint(per_layer(real, self_t))]
        if self.device is not None and dev is not None:
            sums += [np.rint(per_layer(outer, dev[0])), np.rint(per_layer(real, dev[1]))]
        if self.dtype is np.int32 and any(_past_int32(a) for a in sums):
            self._widen_dtype()
        self.total[:, cols], self.self_[:, cols] = sums[0], sums[1]
        if self.device is not None and len(sums) == 4:
            self.device[0][:, cols], self.device[1][:, cols] = sums[2], sums[3]

    def samples(self, paths: Sequence[str]) -> dict[str, LayerSamples]:
        """Each layer with a call: its rows over the iterations summed so far (views, no
        copy; the matrices become read-only)."""
        n = self.filled
        if n == 0:
            return {}
        for a in (self.total, self.self_, *(self.device or ())):
            # the rows become Series as they are (no copy): read-only before the views
            # are taken, which keep the flag they were made with
            a.flags.writeable = False
        cols = slice(0, n)
        total, self_ = self.total[:, cols], self.self_[:, cols]
        dev = (self.device[0][:, cols], self.device[1][:, cols]) if self.device else None
        return {
            paths[i]: LayerSamples(
                total_ns=total[i],
                self_ns=self_[i],
                calls=float(self.calls[i]) / n,
                calls_vary=bool(self.fewest[i] != self.most[i]),
                device_total_ns=dev[0][i] if dev is not None else None,
                device_self_ns=dev[1][i] if dev is not None else None,
            )
            for i in np.flatnonzero(self.calls).tolist()
        }
