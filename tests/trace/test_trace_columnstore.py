"""trace/batchcolumns.py: a table's columns gathered in blocks are the batches'
columns joined, whatever the block sizes (issue 47: the reader's peak memory)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerprof.errors import TraceError
from layerprof.reading import read_input
from layerprof.trace import batchcolumns
from layerprof.trace.batchcolumns import ColumnStore
from layerprof.trace.events import EventCollector, EventTables
from layerprof.trace.reader import decode

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = sorted(
    p
    for p in DATA.rglob("*.json*")
    if p.name.endswith((".json", ".json.gz")) and "profiles" not in p.parts
)


def _tables(path: Path, **kw: Any) -> EventTables:
    collector = EventCollector(**kw)
    decode(read_input(path, error=TraceError), collector.add_batch, str(path))
    return collector.finish()


def _same(a: Any, b: Any) -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name))
    else:
        assert a == b


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), max_size=12),
    first=st.integers(1, 4),
    block=st.integers(1, 5),
)
def test_blocks_join_to_the_batches_concatenated(sizes: list[int], first: int, block: int) -> None:
    dtypes = (np.int8, np.int64)
    batches = []
    start = 0
    for n in sizes:
        values = np.arange(start, start + n, dtype=np.int64)
        batches.append(((values % 7).astype(np.int8), values * 1_000_000_007))
        start += n
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batchcolumns, "FIRST_BLOCK_ROWS", first)
        patch.setattr(batchcolumns, "BLOCK_ROWS", block)
        store = ColumnStore(dtypes)
        for b in batches:
            store.append(b)
        joined = store.join()
    assert store.rows == sum(sizes) and store.blocks == []
    for i, dtype in enumerate(dtypes):
        expected = np.concatenate([b[i] for b in batches]) if batches else np.zeros(0, dtype)
        _same(joined[i], expected.astype(dtype))


@pytest.mark.parametrize("path", TRACES[:6], ids=lambda p: p.parent.name + "/" + p.name)
def test_tiny_blocks_give_the_same_tables(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _tables(path)
    monkeypatch.setattr(batchcolumns, "FIRST_BLOCK_ROWS", 3)
    monkeypatch.setattr(batchcolumns, "BLOCK_ROWS", 7)
    _same(_tables(path), whole)


def test_kept_hierarchy_and_flops_columns_follow_the_host_rows() -> None:
    def span(cat: str, ts: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1,
                "args": args}  # fmt: skip

    events = [
        span("cpu_op", 1, "aten::mm", {"Module Hierarchy": "top.fc", "flops": 64}),
        span("cpu_op", 3, "aten::relu", {}),
        span("user_annotation", 0, "step", {}),
    ]
    both = EventCollector(keep_hierarchy=True, keep_flops=True)
    both.add_batch(events)
    tables = both.finish()
    assert tables.host.hierarchy is not None and tables.host.flops is not None
    kept = [tables.names[i] if i >= 0 else None for i in tables.host.hierarchy]
    assert kept == ["top.fc", None, None]
    assert tables.host.flops.tolist() == [64, 0, 0]
    plain = EventCollector()
    plain.add_batch(events)
    bare = plain.finish()
    assert bare.host.hierarchy is None and bare.host.flops is None
    _same(bare.host.start, tables.host.start)
    only_flops = EventCollector(keep_flops=True)
    only_flops.add_batch(events)
    assert only_flops.finish().host.flops.tolist() == [64, 0, 0]  # type: ignore[union-attr]
