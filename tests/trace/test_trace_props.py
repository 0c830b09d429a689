"""Property tests: random but valid event sets never crash the reader and keep
0 <= self <= total, idle + busy == window, and batch size never changes a number."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from layerprof import codec
from layerprof.errors import TraceError
from layerprof.pivot.profile import Run
from layerprof.trace import analyze
from layerprof.trace import reader as reader_mod

HOST_CATS = ["cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_sync",
             "layerprof_layer"]  # fmt: skip
NAMES = ["aten::mm", "aten::add", "ProfilerStep#1", "ProfilerStep#2", "nn.Module: Linear_0",
         "nn.Module: Net_0", "fwd", "cudaLaunchKernel", "weird\x02name"]  # fmt: skip
time_us = st.one_of(
    st.integers(min_value=0, max_value=2000),
    st.floats(min_value=0, max_value=2000, allow_nan=False).map(lambda v: round(v, 3)),
)


@st.composite
def host_event(draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = {
        "ph": "X",
        "cat": draw(st.sampled_from(HOST_CATS)),
        "name": draw(st.sampled_from(NAMES)),
        "pid": draw(st.sampled_from([1, "1"])),
        "tid": draw(st.sampled_from([1, 2, "thread a"])),
        "ts": draw(time_us),
        "args": {"External id": draw(st.integers(0, 5)), "correlation": draw(st.integers(0, 8))},
    }
    if draw(st.booleans()):  # some events have no dur at all
        event["dur"] = draw(time_us)
    if event["cat"] == "layerprof_layer" and draw(st.booleans()):  # layerprof's layer lane
        event["args"]["path"] = draw(st.sampled_from(["", "a", "a.b", 3]))
        event["args"]["source tid"] = draw(st.sampled_from([1, 2, [1]]))
    return event


@st.composite
def device_event(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": draw(st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "Kernel"])),
        "name": draw(st.sampled_from(["gemm", "ncclKernel_x", "Memcpy HtoD (Pinned -> Device)"])),
        "pid": 0,
        "tid": 7,
        "ts": draw(time_us),
        "dur": draw(time_us),
        "args": {
            "device": draw(st.integers(0, 1)),
            "stream": draw(st.integers(7, 8)),
            "correlation": draw(st.integers(0, 8)),
            "bytes": draw(st.integers(0, 10_000)),
        },
    }


memory_event = st.builds(
    lambda ts, b: {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                   "args": {"Bytes": b, "Total Allocated": abs(b), "Device Type": 0}},
    time_us, st.integers(-1000, 1000),
)  # fmt: skip

events = st.lists(
    st.one_of(host_event(), device_event(), memory_event), min_size=1, max_size=40
).filter(lambda evs: any(e["ph"] == "X" for e in evs))


def run(evs: list[dict[str, Any]], *, batch: int | None = None) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        path.write_bytes(orjson.dumps({"traceEvents": evs, "distributedInfo": {"rank": 0}}))
        try:
            with mock.patch.object(reader_mod, "BATCH_BYTES", batch or reader_mod.BATCH_BYTES):
                return analyze(path, group_by_shape=True)
        except TraceError as exc:  # only python frames kept nothing: a valid refusal
            assert "empty trace" in str(exc)
            assume(False)
            raise


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_random_traces_keep_invariants(evs: list[dict[str, Any]]) -> None:
    rank = run(evs).rank()
    for op in rank.ops:
        assert op.samples is not None
        for self_ns, total_ns in zip(op.samples.self_ns, op.samples.total_ns, strict=True):
            assert 0 <= self_ns <= total_ns
    for a in rank.trace.annotations:
        assert 0 <= a.self_ns <= a.total_ns
    for root in rank.tree():
        root.self_check(tolerance_ns=1e-6)
    for d in rank.trace.devices:
        assert 0 <= d.busy_in_window_ns <= d.window_ns
        assert d.idle_ns >= 0
        assert 0.0 <= d.utilization <= 1.0
        assert d.host_wait_ns + d.short_gap_ns + d.other_idle_ns == d.idle_ns
    assert rank.trace.steps is not None
    assert all(s.dur_ns >= 0 for s in rank.trace.steps.steps)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events, st.integers(min_value=1, max_value=300))
def test_batch_size_changes_nothing(evs: list[dict[str, Any]], batch: int) -> None:
    def where_free(run: Run) -> dict[str, Any]:  # temp paths differ per run
        d = codec.to_dict(run, samples=True)
        ranks = [
            {**r, "source": {**r["source"], "file": ""}, "meta": {**r["meta"], "extra": {}}}
            for r in d["ranks"]
        ]
        return {**d, "path": "", "ranks": ranks}

    assert where_free(run(evs, batch=batch)) == where_free(run(evs))
