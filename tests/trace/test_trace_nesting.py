"""Spans that overrun their parent: async ranges keep to their own track, and
rounding-sized overruns are clipped to the parent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

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
    rows = {r.path: r for r in rank.trace.annotations}
    assert set(rows) == {"## sparse ##", "hccl:all_to_all", "## forward ##", "## backward ##"}
    assert rows["## forward ##"].parent is None  # was hccl:all_to_all's child
    assert rows["## backward ##"].parent is None
    assert rows["hccl:all_to_all"].parent is None  # its own track: a root...
    assert rows["hccl:all_to_all"].total_ns == 8_000_000  # ...with its real length
    # It is not work inside "## sparse ##": the parent's self time keeps that range.
    assert rows["## sparse ##"].self_ns == 20_000
    assert rows["## forward ##"].self_ns == 5_000_000
    steps = rank.trace.steps.steps
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
    rows = {r.path: r for r in rank.trace.annotations}
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
    assert rank.trace.memory is not None
    by_op = {r.op: r.bytes for r in rank.trace.memory.top_ops}
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


def _one_pass_sweep(host: Any, order: Any) -> Any:
    """The reference: one pass in sweep order with a stack per kind (what nesting._sweep
    computed before it swept each kind alone)."""
    import numpy as np

    from layerprof.trace.nesting import _TRACKED, OVERRUN_SLACK_NS

    n = len(host)
    parents: dict[int, list[int]] = {k: [-1] * n for k in _TRACKED}
    detached = [False] * n
    self_ns = host.dur.tolist()
    stacks: dict[int, list[list[int]]] = {k: [] for k in _TRACKED}
    current = None
    for i in order.tolist():
        s = int(host.start[i])
        e = s + int(host.dur[i])
        if host.thread[i] != current:
            current = host.thread[i]
            for stack in stacks.values():
                stack.clear()
        for k, stack in stacks.items():
            while stack and stack[-1][0] <= s:
                stack.pop()
            if stack:
                parents[k][i] = stack[-1][1]
        kind = int(host.kind[i])
        stack = stacks[kind]
        if stack:
            frame = stack[-1]
            if e > frame[0] + OVERRUN_SLACK_NS:
                detached[i] = True
                parents[kind][i] = -1
                continue
            e = min(e, frame[0])
            lo = max(s, frame[2])
            if e > lo:
                self_ns[frame[1]] -= e - lo
                frame[2] = e
        stack.append([e, i, s])
    arrays = {k: np.asarray(v, dtype=np.int64) for k, v in parents.items()}
    return arrays, np.asarray(self_ns, dtype=np.int64), np.asarray(detached, dtype=bool)


@st.composite
def host_spans(draw: st.DrawFn) -> Any:
    """Spans of every kind on a few threads, on a 500 ns grid: ties, empty spans, and
    overruns of 0.5, 1 (both clipped) and 1.5 µs (detached)."""
    import numpy as np

    from layerprof.trace.events import ANNOTATION, LAYER, MODULE, OP, RUNTIME, SYNC, HostSpans

    n = draw(st.integers(1, 60))
    kinds = st.sampled_from([OP, OP, OP, ANNOTATION, MODULE, LAYER, RUNTIME, SYNC])
    rows = draw(
        st.lists(
            st.tuples(kinds, st.integers(0, 2), st.integers(0, 40), st.integers(0, 24)),
            min_size=n,
            max_size=n,
        )
    )
    kind, thread, start, dur = (np.asarray(c, dtype=np.int64) for c in zip(*rows, strict=True))
    minus = np.full(n, -1, dtype=np.int64)
    return HostSpans(
        kind.astype(np.int8), thread, start * 500, dur * 500, minus, minus, minus, minus
    )


@st.composite
def nested_spans(draw: st.DrawFn) -> Any:
    """Spans that nest (brackets over time steps of 0 or 500 ns: ties and empty
    spans), of random kinds, on a few threads; some then end 0.5 or 1.5 µs late."""
    import numpy as np

    from layerprof.trace.events import ANNOTATION, LAYER, MODULE, OP, RUNTIME, HostSpans

    rows: list[list[int]] = []
    for thread in range(draw(st.integers(1, 3))):
        now, open_ = 0, []
        for step in draw(st.lists(st.tuples(st.booleans(), st.integers(0, 1)), max_size=60)):
            push, later = step
            now += later * 500
            if push or not open_:
                kind = draw(st.sampled_from([OP, OP, ANNOTATION, MODULE, LAYER, RUNTIME]))
                open_.append(len(rows))
                rows.append([kind, thread, now, 0])
            else:
                row = rows[open_.pop()]
                row[3] = now - row[2]
        for i in open_:
            rows[i][3] = now - rows[i][2]
    for i in draw(st.lists(st.integers(0, max(len(rows) - 1, 0)), max_size=2)):
        if rows:
            rows[i][3] += draw(st.sampled_from([500, 1500]))
    if not rows:
        rows = [[OP, 0, 0, 0]]
    kind, thread, start, dur = (np.asarray(c, dtype=np.int64) for c in zip(*rows, strict=True))
    minus = np.full(len(rows), -1, dtype=np.int64)
    return HostSpans(kind.astype(np.int8), thread, start, dur, minus, minus, minus, minus)


@settings(max_examples=800, deadline=None, derandomize=True)
@given(st.one_of(host_spans(), nested_spans()))
def test_sweep_per_kind_equals_the_one_pass_sweep(host: Any) -> None:
    from unittest import mock

    from layerprof.trace import nesting

    fast = nesting.nest(host)
    with mock.patch.object(nesting, "_sweep", _one_pass_sweep):
        slow = nesting.nest(host)
    for field in ("order", "parent_op", "parent_module", "parent_annotation", "parent_layer",
                  "self_ns", "detached"):  # fmt: skip
        assert getattr(fast, field).tolist() == getattr(slow, field).tolist(), field


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.one_of(host_spans(), nested_spans()), st.integers(1, 3))
def test_walks_in_chunks_equal_one_walk(host: Any, chunk: int) -> None:
    """The enclosing-span walks take QUERY_CHUNK spans at a time (issue 47: bounded
    memory); any chunk size gives the same nesting."""
    from unittest import mock

    from layerprof.trace import nesting

    whole = nesting.nest(host)
    with mock.patch.object(nesting, "QUERY_CHUNK", chunk):
        chunked = nesting.nest(host)
    for field in ("order", "parent_op", "parent_module", "parent_annotation", "parent_layer",
                  "self_ns", "detached"):  # fmt: skip
        assert getattr(chunked, field).tolist() == getattr(whole, field).tolist(), field


def test_deeper_than_the_vectorized_rounds_takes_the_loop() -> None:
    """A recursion MAX_ROUNDS + 50 ops deep, then a sibling of its root: the same
    parents and self times as the one-pass sweep."""
    from unittest import mock

    import numpy as np

    from layerprof.trace import nesting
    from layerprof.trace.events import OP, HostSpans

    depth = nesting.MAX_ROUNDS + 50
    start = np.concatenate([np.arange(depth), [4 * depth]]).astype(np.int64) * 1000
    dur = np.concatenate([4 * depth - 2 * np.arange(depth), [5]]).astype(np.int64) * 1000
    n = len(start)
    minus = np.full(n, -1, dtype=np.int64)
    host = HostSpans(np.full(n, OP, dtype=np.int8), np.zeros(n, dtype=np.int64), start, dur,
                     minus, minus, minus, minus)  # fmt: skip
    assert nesting._nested_kind(start, dur, np.zeros(n, dtype=np.int64)) is None
    fast = nesting.nest(host)
    with mock.patch.object(nesting, "_sweep", _one_pass_sweep):
        slow = nesting.nest(host)
    assert fast.parent_op.tolist() == slow.parent_op.tolist()
    assert fast.self_ns.tolist() == slow.self_ns.tolist()
    assert fast.parent_op[-1] == -1 and fast.parent_op[depth - 1] == depth - 2
