"""Fuzzing: any field of any event kind (and the header) turned into any JSON value, or
into a number JSON cannot hold, ends in a report or a one-line TraceError, never in
another exception, and never in numpy's overflow warnings (an int64 cast of 1e300 is
garbage, not a number to report).

Runs derandomized under CI (tests/conftest.py) and in a few seconds.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerprof import codec
from layerprof.analysis.diagnose import diagnose_run
from layerprof.errors import TraceError
from layerprof.pivot.notes import texts
from layerprof.sinks import render
from layerprof.trace import analyze
from layerprof.traceformat import LAYER_CATEGORY, STEP_PREFIX

T0 = 1_712_195_495_519_689  # epoch µs; times are written with ns digits (exact-digit path)


class Raw:
    """A number token written as is (ns digits, NaN, 1e400, 40 digits)."""

    def __init__(self, token: str) -> None:
        self.token = token


def at(us: int) -> Raw:
    return Raw(f"{T0 + us}.047")


def span(cat: str, name: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1,
         **args: Any) -> dict[str, Any]:  # fmt: skip
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": at(ts),
            "dur": dur, "args": args}  # fmt: skip


def gpu(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return span(cat, name, ts, dur, pid=0, tid=7, device=0, stream=7, **args)


BASE: list[dict[str, Any]] = [
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    span("user_annotation", f"{STEP_PREFIX}1", 0, 100, **{"External id": 1}),
    span("python_function", "nn.Module: Net_0", 2, 90),
    span(LAYER_CATEGORY, "Net", 2, 90, path="", **{"source pid": 1, "source tid": 1}),
    span("user_annotation", "fwd", 3, 80, **{"External id": 2}),
    span("cpu_op", "aten::linear", 5, 40, **{"External id": 3, "Input Dims": [[4, 8], [8]]}),
    span("cpu_op", "aten::addmm", 6, 30, **{"External id": 4}),
    span("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=11, **{"External id": 4}),
    span("cuda_sync", "cudaDeviceSynchronize", 50, 5, correlation=12),
    span("mtia_runtime", "runFunction", 55, 5, correlation=13),
    gpu("kernel", "gemm", 20, 10, correlation=11, **{"External id": 4}),
    gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 35, 2, correlation=12, bytes=4096),
    gpu("gpu_memset", "Memset (Device)", 38, 1, correlation=12, bytes=64),
    gpu("gpu_user_annotation", f"{STEP_PREFIX}1", 20, 20),
    span("mtia_ccp_events", "dma_request", 60, 3, pid=9, tid=801, size=16, stream=3),
    span("npu_op", "npu_kernel", 62, 3, pid=5, tid=5, device=5),
    span("Trace", "PyTorch Profiler (0)", 0, 200, pid="Spans", tid="PyTorch Profiler"),
    span("user_annotation", f"{STEP_PREFIX}2", 100, 60, **{"External id": 5}),
    span("cpu_op", "aten::relu", 110, 20, **{"External id": 6}),
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": at(7),
     "args": {"Bytes": 512, "Total Allocated": 512, "Device Type": 1, "Device Id": 0}},
    {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": at(170)},
    {"ph": "s", "id": 11, "pid": 1, "tid": 1, "ts": at(10), "cat": "ac2g", "name": "ac2g"},
    {"ph": "f", "id": 11, "pid": 0, "tid": 7, "ts": at(20), "cat": "ac2g", "name": "ac2g",
     "bp": "e"},
    {"ph": "C", "name": "counter", "pid": 1, "ts": at(30), "args": {"value": 3}},
]  # fmt: skip
HEADER: dict[str, Any] = {
    "distributedInfo": {"rank": 0},
    "deviceProperties": [{"id": 0, "name": "GPU"}],
    "baseTimeNanoseconds": 1,
    "layerprof": {"version": "0", "model": "Net", "run": {"dtype": "float32"},
                  "module_types": {"": "Net"}, "module_paths": {"Net_0": ""}},
}  # fmt: skip


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, -1, 1, 2**53 + 1, 2**63, -(2**70), 10**30]),
    st.sampled_from([1e300, -1e300, 1.5, -0.0, 5e-324, 1e15, 1.7e15 + 0.25, -float(T0)]),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "x", "123", "1e999", "nan", "\x00\x1b[2J", "ProfilerStep#x", "a" * 300]),
    st.sampled_from([[], [1], [[1, 2]], {}, {"a": 1}, {"rank": 0}, [{"x": []}]]),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" * 40]).map(Raw),
)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    events = copy.deepcopy(BASE)
    header = copy.deepcopy(HEADER)
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 9)) == 0:  # the header now and then
            key = draw(st.sampled_from(sorted(header)))
            header[key] = draw(HOSTILE)
            continue
        event = draw(st.sampled_from(events))
        args = event.get("args")
        keys = [("top", k) for k in sorted(event)]
        if isinstance(args, dict):
            keys += [("args", k) for k in sorted(args)]
        where, key = draw(st.sampled_from(keys))
        target = event if where == "top" else args
        assert isinstance(target, dict)
        if draw(st.integers(0, 7)) == 0:
            del target[key]
        else:
            target[key] = draw(HOSTILE)
    return events, header


def big_ints_raw(value: Any) -> Any:
    """orjson writes no int beyond 64 bits: such ints go in as raw tokens."""
    if isinstance(value, dict):
        return {k: big_ints_raw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [big_ints_raw(v) for v in value]
    if type(value) is int and abs(value) >= 2**63:
        return Raw(str(value))
    return value


def dumps(doc: Any) -> bytes:
    raws: list[str] = []

    def raw(value: Any) -> str:
        if isinstance(value, Raw):
            raws.append(value.token)
            return f"@@raw{len(raws) - 1}@@"
        raise TypeError

    text = orjson.dumps(big_ints_raw(doc), default=raw)
    for i, token in enumerate(raws):
        text = text.replace(f'"@@raw{i}@@"'.encode(), token.encode())
    return text


def analyze_or_refuse(events: list[dict[str, Any]], header: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.json"
        path.write_bytes(dumps({"traceEvents": events, **header}))
        try:
            report = analyze(path, group_by_shape=True)
        except TraceError as exc:
            assert "\n" not in str(exc)
            return
        data = report.to_dict(samples=True)
        orjson.dumps(data)
        codec.from_dict(data, source="fuzz")  # what was written loads back
        diagnose_run(report)
        render(report, "console")  # every section renders
        for rank in report.ranks:
            for row in rank.ops:
                assert row.samples is not None
                for s, t in zip(row.samples.self_ns, row.samples.total_ns, strict=True):
                    assert 0 <= s <= t


def test_the_unmutated_trace_is_fine() -> None:
    analyze_or_refuse(copy.deepcopy(BASE), copy.deepcopy(HEADER))


def test_malformed_fields_are_skipped_with_notes(tmp_path: Path) -> None:
    events = copy.deepcopy(BASE)
    by_name = {e.get("name"): e for e in events}
    by_name["aten::linear"]["ts"] = 1e300
    by_name["aten::linear"]["args"]["External id"] = False
    by_name["aten::addmm"]["dur"] = 1e300
    by_name["cudaLaunchKernel"]["args"]["correlation"] = [11]
    by_name["gemm"]["args"]["device"] = {"id": 0}
    by_name["gemm"]["args"]["stream"] = True
    by_name["Memset (Device)"]["args"]["bytes"] = "64 bytes"
    by_name["aten::relu"]["ts"] = -5
    path = tmp_path / "bad.json"
    path.write_bytes(dumps({"traceEvents": events, **HEADER}))
    notes = analyze(path).ranks[0].notes
    counts = {n.kind: n.data["count"] for n in notes if "count" in n.data}
    assert counts["skipped-no-ts"] == 1 and counts["bad-durations"] == 1
    assert counts["malformed-fields"] == 5 and counts["dropped-ts0"] == 1
    # the wording is what the user reads: one pinned
    assert "5 id, device, stream or byte fields were not integers: read as unknown" in texts(notes)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_any_field_of_any_event(case: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    analyze_or_refuse(*case)
