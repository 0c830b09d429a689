"""Spans that overrun their parent: async ranges keep to their own track, and
rounding-sized overruns are clipped to the parent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from layerprof.trace import analyze
from layerprof.traceformat import STEP_PREFIX


def span(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    return path


def test_async_annotation_does_not_adopt_what_follows_its_parent(tmp_path: Path) -> None:
    """HTA's MTIA trace: hccl:all_to_all starts inside an 8.6 ms annotation and lasts
    2.5 s; ``## forward ##`` starts after that annotation closed."""
    events = [
        span("user_annotation", f"{STEP_PREFIX}1", 0, 10_000),
        span("user_annotation", "## sparse ##", 10, 20),
        span("cpu_op", "aten::cat", 12, 4),
        span("user_annotation", "hccl:all_to_all", 15, 8_000),
        span("user_annotation", "## forward ##", 40, 5_000),
        span("cpu_op", "aten::mm", 50, 100),
        span("cuda_runtime", "cudaLaunchKernel", 6_000, 5, correlation=1),
        span("user_annotation", "## backward ##", 5_100, 2_000),
    ]
    rank = analyze(write(tmp_path, events)).ranks[0]
    rows = {r.path: r for r in rank.annotations}
    assert set(rows) == {"## sparse ##", "hccl:all_to_all", "## forward ##", "## backward ##"}
    assert rows["## forward ##"].parent is None  # was hccl:all_to_all's child
    assert rows["## backward ##"].parent is None
    assert rows["hccl:all_to_all"].parent is None  # its own track: a root...
    assert rows["hccl:all_to_all"].total_ns == 8_000_000  # ...with its real length
    # It is not work inside "## sparse ##": the parent's self time keeps that range.
    assert rows["## sparse ##"].self_ns == 20_000
    assert rows["## forward ##"].self_ns == 5_000_000
    steps = rank.steps.steps
    assert [s.name for s in steps] == ["ProfilerStep#1"]


def test_rounding_overrun_is_clipped_to_the_parent(tmp_path: Path) -> None:
    """Integer-µs traces round ts and dur apart: a child may end 1 µs late."""
    events = [
        span("user_annotation", "outer", 0, 100),
        span("user_annotation", "inner", 50, 51),  # ends at 101, 1 µs after outer
        span("user_annotation", "next", 100.5, 10),  # after outer: not inner's child
        span("cpu_op", "aten::add", 0, 30),
        span("cpu_op", "aten::mul", 10, 20.5),  # 0.5 µs past aten::add
    ]
    rank = analyze(write(tmp_path, events)).ranks[0]
    rows = {r.path: r for r in rank.annotations}
    assert rows["outer.inner"].parent == "outer"
    assert rows["outer"].self_ns == 50_000  # inner clipped to outer's end
    assert rows["next"].parent is None
    ops = {o.name: o for o in rank.ops}  # per step: "outer" and "next" are the steps
    assert ops["aten::add"].samples is not None
    assert ops["aten::add"].samples.self_ns == [10_000, 0]


def test_overrunning_op_is_not_subtracted_and_adopts_nothing(tmp_path: Path) -> None:
    events = [
        span("cpu_op", "aten::outer", 0, 100),
        span("cpu_op", "aten::async", 90, 500),  # 490 µs past its parent's end
        span("cpu_op", "aten::later", 200, 10),
        {
            "ph": "i",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "ts": 205,
            "args": {"Bytes": 64, "Total Allocated": 64, "Device Type": 0},
        },
        {
            "ph": "i",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "ts": 300,
            "args": {"Bytes": 32, "Total Allocated": 96, "Device Type": 0},
        },
    ]
    rank = analyze(write(tmp_path, events)).ranks[0]
    ops = {o.name: o for o in rank.ops}
    assert ops["aten::outer"].self_ns == 100_000
    assert ops["aten::async"].self_ns == 500_000  # aten::later is not its child
    assert rank.memory is not None
    by_op = {r.op: r.bytes for r in rank.memory.top_ops}
    assert by_op == {"aten::later": 64, "(outside ops)": 32}


def test_parent_any_is_the_innermost_of_every_kind() -> None:
    """The innermost enclosing span of any kind: an op in an annotation in a layer range
    has the annotation; the op in that op has the op; a range that overruns its parent
    annotation keeps its layer, and is nobody's parent."""
    from layerprof.trace.kineto import tables_from_documents
    from layerprof.trace.nesting import nest

    events = [
        span("user_annotation", "layer:", 0, 100),  # 0: a layer range
        span("user_annotation", "## region ##", 10, 50),  # 1
        span("cpu_op", "aten::linear", 20, 20),  # 2
        span("cpu_op", "aten::addmm", 22, 10),  # 3
        span("user_annotation", "async", 45, 45),  # 4: ends 30 µs after the region
        span("cpu_op", "aten::add", 70, 5),  # 5: after the region, inside async's time
    ]
    tables = tables_from_documents([{"traceEvents": events}])
    assert nest(tables.host).parent_any().tolist() == [-1, 0, 1, 2, 0, 0]
