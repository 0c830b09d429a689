"""What the reducer holds per span (issue 47: a 4 GB trace in 2 GB): columns a trace
has nothing for cost no memory, and reducing a real trace stays within a budget of
bytes per host span above its tables (tracemalloc counts numpy's buffers exactly, so
the figure does not depend on the machine or its load)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np

from layerprof.trace.attribution import attribute
from layerprof.trace.columns import unset
from layerprof.trace.events import MODULE, OP, RUNTIME, EventCollector, HostSpans
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
