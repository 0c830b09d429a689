"""One batch's raw event fields -> checked numpy columns -> blocks joined once.

``trace/events.py`` walks each batch of decoded events and appends the fields it
keeps to plain lists (:class:`BatchRows`); :class:`BatchColumns` turns those lists
into checked int64 columns (times in integer ns, what is unusable marked and
counted, see ``columns``); a :class:`ColumnStore` per table copies each batch's
columns into large preallocated blocks and joins them once, at the end.

Why blocks: a batch is ~1,400 events, so keeping each batch's columns makes tens of
thousands of small arrays that the C heap places among the batch's short-lived
objects; once joined and freed, that heap stays mapped (190 MB of a 0.82 GB
trace's 474 MB peak). Past the first block, blocks hold ``BLOCK_ROWS`` rows, so a
big trace's columns live outside the heap and go back to the system when joined.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from layerprof.trace.columns import (
    I64,
    INVALID,
    dur_from_us,
    epoch_scale,
    ints,
    ts_from_ns,
    ts_from_us,
)
from layerprof.trace.timestamps import has_fraction

#: Rows of a table's first block (a small trace's whole table), then of each next one:
#: 32 MiB an int64 column, which glibc maps on its own however its threshold moved;
#: the pages of a block's unused end are never touched, so they cost no memory.
FIRST_BLOCK_ROWS = 1 << 16
BLOCK_ROWS = 1 << 22
# Below this many epoch-scale times, a batch whose doubles all look whole may
# still have had decimals in the text (each rounds to whole with odds 1/4).
_FEW_TIMES = 64

#: The host table's columns: kind, thread, start, dur, name, ref, shape, seq; then
#: hierarchy and FLOPs, each only when the collector keeps it.
HOST_DTYPES = (np.int8, *([np.int64] * 7))
DEVICE_DTYPES = (np.int8, *([np.int64] * 8))
MEMORY_DTYPES = (np.int64,) * 5
ANNOTATION_DTYPES = (np.int64,) * 5


class BatchRows:
    """One batch's raw fields, column by column (a plain mutable helper)."""

    def __init__(self) -> None:
        # the 9th: hierarchy, the 10th: FLOPs (each only when the collector keeps it)
        self.h: tuple[list[Any], ...] = tuple([] for _ in range(10))
        self.d: tuple[list[Any], ...] = tuple([] for _ in range(9))
        self.m: tuple[list[Any], ...] = tuple([] for _ in range(5))
        self.a: tuple[list[Any], ...] = tuple([] for _ in range(5))  # device annotations
        self.window: tuple[list[Any], list[Any]] = ([], [])  # ts, dur (0 for instants)
        self.device_categories: dict[str, int] = {}
        self.runtime_categories: set[str] = set()
        self.events = 0
        self.token_shapes: dict[int, int] = {}  # host row -> shape id (shaped ops only)


class BatchColumns:
    """One batch's rows as numpy columns, times in absolute ns (a plain helper).

    ``host`` holds the 8 columns of ``HOST_DTYPES``, then the hierarchy column with
    ``keep_hierarchy`` and the FLOPs column with ``keep_flops``.
    """

    def __init__(
        self,
        rows: BatchRows,
        *,
        ts_in_ns: bool,
        keep_shapes: bool,
        keep_hierarchy: bool = False,
        keep_flops: bool = False,
    ) -> None:
        self.events = rows.events
        self.device_categories = rows.device_categories
        self.runtime_categories = rows.runtime_categories
        self.ts_in_ns = ts_in_ns
        self.lossy = False
        self.epoch_times = 0
        self.bad_durations = 0
        self.malformed = 0
        self.host = None
        if rows.h[2]:
            self.host = self._host(rows.h, keep_shapes, rows.token_shapes)
            self.host += self._extras(rows.h, keep_hierarchy, keep_flops)
        self.device = self._device(rows.d) if rows.d[3] else None
        self.memory = self._memory(rows.m) if rows.m[1] else None
        self.annotations = self._annotations(rows.a) if rows.a[2] else None
        self.window_ends = None
        w_ts, w_dur = rows.window
        if w_ts:
            starts = self._ts(w_ts)
            self.window_ends = (starts + self._dur(w_dur))[starts != INVALID]

    def _host(
        self, h: tuple[list[Any], ...], keep_shapes: bool, token_shapes: dict[int, int]
    ) -> tuple[Any, ...]:
        kind, thread, ts, dur, name, ref, shapes, seq, _, _ = h
        shape = np.asarray(shapes, dtype=np.int64)
        if not keep_shapes:
            shape = np.full(len(ts), -1, dtype=np.int64)
            if token_shapes:
                shape[list(token_shapes)] = list(token_shapes.values())
        return (
            np.asarray(kind, dtype=np.int8),
            np.asarray(thread, dtype=np.int64),
            self._ts(ts),
            self._dur(dur),
            np.asarray(name, dtype=np.int64),
            self._ids(ref),
            shape,
            self._ids(seq),
        )

    def _extras(
        self, h: tuple[list[Any], ...], keep_hierarchy: bool, keep_flops: bool
    ) -> tuple[Any, ...]:
        """The hierarchy and FLOPs columns the collector keeps (none by default: a
        column nobody reads would cost 8 bytes a row until the tables are joined)."""
        n = len(h[2])
        hierarchy, flops = h[8], h[9]
        extras: list[I64] = []
        if keep_hierarchy:
            extras.append(
                np.asarray(hierarchy, dtype=np.int64)
                if hierarchy
                else np.full(n, -1, dtype=np.int64)
            )
        if keep_flops:
            extras.append(self._ids(flops, 0) if flops else np.zeros(n, dtype=np.int64))
        return tuple(extras)

    def _device(self, d: tuple[list[Any], ...]) -> tuple[Any, ...]:
        kind, dev, stream, ts, dur, name, corr, ext, nbytes = d
        return (
            np.asarray(kind, dtype=np.int8),
            self._ids(dev),
            self._ids(stream),
            self._ts(ts),
            self._dur(dur),
            np.asarray(name, dtype=np.int64),
            self._ids(corr),
            self._ids(ext),
            self._ids(nbytes),
        )

    def _memory(self, m: tuple[list[Any], ...]) -> tuple[Any, ...]:
        thread, ts, nbytes, allocated, dev = m
        return (
            np.asarray(thread, dtype=np.int64),
            self._ts(ts),
            self._ids(nbytes, missing=0),
            self._ids(allocated),
            np.asarray(dev, dtype=np.int64),
        )

    def _annotations(self, a: tuple[list[Any], ...]) -> tuple[Any, ...]:
        dev, stream, ts, dur, name = a
        return (
            self._ids(dev),
            self._ids(stream),
            self._ts(ts),
            self._dur(dur),
            np.asarray(name, dtype=np.int64),
        )

    def loses_digits(self, text: Any) -> bool:
        """Whether decoding rounded some epoch-µs float times (see ``columns``).

        Few epoch-scale times that all decoded whole may still have had
        decimals in the text (each rounds to a whole µs with odds 1/4).
        """
        if self.lossy:
            return True
        return 0 < self.epoch_times < _FEW_TIMES and has_fraction(text)

    def _ts(self, values: list[Any]) -> I64:
        if self.ts_in_ns:
            return ts_from_ns(values)
        out, lossy = ts_from_us(values)
        self.lossy |= lossy
        self.epoch_times += epoch_scale(out)
        return out

    def _dur(self, values: list[Any]) -> I64:
        out, bad = dur_from_us(values)
        self.bad_durations += bad
        return out

    def _ids(self, values: list[Any], missing: int = -1) -> I64:
        out, bad = ints(values, missing)
        self.malformed += bad
        return out


class ColumnStore:
    """A table's columns, appended a batch at a time into blocks and joined once."""

    def __init__(self, dtypes: tuple[Any, ...]) -> None:
        self.dtypes = dtypes
        self.blocks: list[list[Any]] = []
        self.filled = 0  # rows used in the last block
        self.rows = 0

    def append(self, columns: tuple[Any, ...]) -> None:
        """Copy one batch's columns (in ``dtypes`` order) in."""
        n, done = len(columns[0]), 0
        while done < n:
            if not self.blocks or self.filled == len(self.blocks[-1][0]):
                size = BLOCK_ROWS if self.blocks else FIRST_BLOCK_ROWS
                self.blocks.append([np.empty(size, dtype=t) for t in self.dtypes])
                self.filled = 0
            take = min(n - done, len(self.blocks[-1][0]) - self.filled)
            for block, column in zip(self.blocks[-1], columns, strict=True):
                block[self.filled : self.filled + take] = column[done : done + take]
            self.filled += take
            done += take
        self.rows += n

    def join(self) -> list[Any]:
        """The columns, whole; the blocks are let go column by column as each is
        joined, so the peak is the columns plus one joined column."""
        if not self.blocks:
            return [np.zeros(0, dtype=t) for t in self.dtypes]
        blocks, self.blocks = self.blocks, []
        blocks[-1] = [b[: self.filled] for b in blocks[-1]]
        joined = []
        for i in range(len(self.dtypes)):
            parts = [b[i] for b in blocks]
            for b in blocks:
                b[i] = None
            joined.append(np.concatenate(parts))
            del parts
        return joined
