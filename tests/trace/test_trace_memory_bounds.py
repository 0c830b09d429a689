"""What the reducer holds per span (issue 47: a 4 GB trace in 2 GB): columns a trace
has nothing for cost no memory, and reducing a real trace stays within a budget of
bytes per host span above its tables (tracemalloc counts numpy's buffers exactly, so
the figure does not depend on the machine or its load)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerprof.trace import intervals
from layerprof.trace.attribution import attribute
from layerprof.trace.columns import unset
from layerprof.trace.events import MODULE, OP, RUNTIME, EventCollector, HostSpans
from layerprof.trace.intervals import Lane, lane
from layerprof.trace.nesting import nest
from layerprof.trace.reader import read_trace_file
from layerprof.trace.reduce import reduce

DATA = Path(__file__).resolve().parents[1] / "data"
HTA_26MB = DATA / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"
#: Peak bytes the reducer allocates per host span of that trace, on top of its tables:
#: 185 before issue 47 (per-span Python lists in the tree, parents of absent kinds,
#: the attribution held to the end), 119 after.
REDUCE_BYTES_PER_SPAN = 150


def _host(kinds: list[int]) -> HostSpans:
    n = len(kinds)
    start = np.arange(n, dtype=np.int64) * 10
    minus = np.full(n, -1, dtype=np.int64)
    dur = np.full(n, 5, dtype=np.int64)
    return HostSpans(np.asarray(kinds, dtype=np.int8), np.zeros(n, dtype=np.int64), start, dur,
                     minus, minus, minus, minus)  # fmt: skip


def test_unset_is_minus_ones_in_no_memory() -> None:
    column = unset(1_000_000)
    assert column.strides == (0,) and not column.flags.writeable
    assert column.dtype == np.int64 and len(column) == 1_000_000
    assert (column[[0, 999_999]] == -1).all()


def test_parents_of_a_kind_the_trace_lacks_are_unset() -> None:
    nesting = nest(_host([OP, RUNTIME, OP]))
    assert nesting.parent_module.strides == (0,) and nesting.parent_layer.strides == (0,)
    assert nesting.parent_module.tolist() == [-1, -1, -1]
    assert nesting.parent_op.flags.writeable  # a kind it has: a column of its own
    with_modules = nest(_host([MODULE, OP, RUNTIME]))
    assert with_modules.parent_module.flags.writeable


def test_an_attribution_without_layer_spans_holds_no_layer_column() -> None:
    collector = EventCollector()
    collector.add_batch(
        [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 1}
         for t in (0, 5)]
    )  # fmt: skip
    tables = collector.finish()
    attribution = attribute(tables, nest(tables.host))
    assert attribution.paths == () and attribution.layer.strides == (0,)
    assert attribution.layer.tolist() == [-1, -1]


def test_reducing_a_real_trace_stays_within_its_bytes_per_span() -> None:
    trace = read_trace_file(HTA_26MB)
    spans = len(trace.tables.host)
    tracemalloc.start()
    try:
        reduce(trace.tables, trace.header)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert spans > 50_000
    assert peak / spans < REDUCE_BYTES_PER_SPAN, f"{peak / spans:.0f} B per host span"


@st.composite
def _lanes_and_windows(draw: st.DrawFn) -> tuple[list[Lane], list[tuple[int, int]], list[int]]:
    """A few lanes of random intervals (ties, empty ones, overlaps), windows that may
    overlap or touch, and bit-mask classes over the lanes."""
    times = st.integers(0, 60)
    lanes = []
    for _ in range(draw(st.integers(1, 4))):
        pairs = draw(st.lists(st.tuples(times, st.integers(0, 9)), max_size=25))
        starts = np.asarray([s for s, _ in pairs], dtype=np.int64)
        ends = np.asarray([s + d for s, d in pairs], dtype=np.int64)
        lanes.append(lane(starts, ends))
    windows = [(lo, lo + d) for lo, d in draw(st.lists(st.tuples(times, st.integers(0, 30)),
                                                      min_size=1, max_size=5))]  # fmt: skip
    masks = st.integers(1, (1 << len(lanes)) - 1)
    return lanes, windows, draw(st.lists(masks, min_size=1, max_size=4))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_lanes_and_windows(), st.integers(1, 6))
def test_partition_in_ranges_equals_one_pass(
    case: tuple[list[Lane], list[tuple[int, int]], list[int]], pieces: int
) -> None:
    """partition takes the time line PIECES lane boundaries at a time (issue 47): any
    range size gives the table of one pass over all of it."""
    lanes, windows, order = case
    whole = intervals.partition(lanes, windows, order)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(intervals, "PIECES", pieces)
        ranged = intervals.partition(lanes, windows, order)
    assert ranged.tolist() == whole.tolist()


def test_partition_cuts_a_long_lane_into_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    starts = np.arange(0, 100, 10, dtype=np.int64)
    busy = lane(starts, starts + 5)
    monkeypatch.setattr(intervals, "PIECES", 4)
    assert intervals._cuts([busy], 0, 100) == [0, 20, 40, 60, 80, 100]
    table = intervals.partition([busy], [(0, 50), (50, 100)], [1])
    assert table.tolist() == [[25, 25], [25, 25]]


def test_working_index_arrays_are_int32_only_where_every_index_fits() -> None:
    from layerprof.trace.nesting import index_type

    assert index_type(12_000_000) is np.int32  # a 4 GB trace's spans
    assert index_type(2**31 - 2) is np.int32
    assert index_type(2**31 - 1) is np.int64 and index_type(2**40) is np.int64
