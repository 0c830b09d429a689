"""Times keep every ns digit the trace wrote, also where a double cannot hold them."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from layerprof.trace import reader as reader_mod
from layerprof.trace.reader import read_trace_file

EPOCH_US = 1712195495519689  # µs since 1970: 1.7e15, where doubles are 0.25 µs apart


def event(ts: str, name: str = "aten::add", cat: str = "cpu_op", extra: str = "") -> str:
    return (
        f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 1, "tid": 1,'
        f' "ts": {ts}, "dur": 1.5, "args": {{"External id": 1{extra}}}}}'
    )


def write(tmp_path: Path, events: list[str], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text('{"traceEvents": [\n' + ",\n".join(events) + '\n], "schemaVersion": 1}')
    return path


def absolute_starts(path: Path) -> list[int]:
    tables = read_trace_file(path).tables
    order = np.argsort(tables.host.start, kind="stable")
    return (tables.host.start[order] + tables.origin_us * 1000).tolist()


def ns(text: str) -> int:
    return int(Decimal(text) * 1000)


def epoch_times(n: int, step_ns: int = 1_037) -> list[str]:
    """Kineto's form, ``digits.ddd``: sub-µs steps a double would round away."""
    return [f"{EPOCH_US + (i * step_ns) // 1000}.{(i * step_ns) % 1000:03d}" for i in range(n)]


def test_epoch_float_times_keep_their_ns_digits(tmp_path: Path) -> None:
    times = epoch_times(500)
    assert any(round(Decimal(float(t)) * 1000) != ns(t) for t in times)  # doubles lose them
    path = write(tmp_path, [event(t) for t in times])
    assert absolute_starts(path) == [ns(t) for t in times]
    assert read_trace_file(path).tables.exact_ts


@pytest.mark.parametrize("batch", [64, 300, 5000])
def test_exact_times_do_not_depend_on_batches(tmp_path: Path, batch: int) -> None:
    times = epoch_times(300, step_ns=7_777)
    path = write(tmp_path, [event(t) for t in times])
    with mock.patch.object(reader_mod, "BATCH_BYTES", batch):
        assert absolute_starts(path) == [ns(t) for t in times]


def test_other_number_forms_and_nested_ts_keys(tmp_path: Path) -> None:
    """Exponents, 1-6 decimals, whole µs, and a "ts" key inside args: matched one by one."""
    times = [
        f"{EPOCH_US}.1",
        f"{EPOCH_US + 1}.25",
        f"{EPOCH_US + 2}.123456",
        f"{EPOCH_US + 3}",
        "1.712195495519693047e15",
        f"{EPOCH_US + 5}.0625",
    ]
    events = [event(t) for t in times]
    events.insert(2, event(f"{EPOCH_US + 1}.5", extra=', "ts": 12.5'))
    times.insert(2, f"{EPOCH_US + 1}.5")
    path = write(tmp_path, events)
    expected = [round(Decimal(t) * 1000) for t in times]
    assert absolute_starts(path) == sorted(expected)


def test_few_epoch_times_that_decode_whole(tmp_path: Path) -> None:
    """.1 and .9 round to whole doubles at 1.7e15: the text still decides."""
    times = [f"{EPOCH_US}.100", f"{EPOCH_US + 5}.900"]
    assert all(float(t) == int(float(t)) for t in times)
    path = write(tmp_path, [event(t) for t in times])
    assert absolute_starts(path) == [ns(t) for t in times]


def test_integer_and_relative_times_need_no_text(tmp_path: Path) -> None:
    """Whole epoch µs and relative floats (< 2^43 µs) are exact from their doubles."""
    whole = write(tmp_path, [event(str(EPOCH_US + i)) for i in range(3)], "whole.json")
    assert absolute_starts(whole) == [(EPOCH_US + i) * 1000 for i in range(3)]
    assert not read_trace_file(whole).tables.exact_ts
    relative = [f"{4458676522690 + i}.{(i * 389) % 1000:03d}" for i in range(200)]
    path = write(tmp_path, [event(t) for t in relative], "relative.json")
    assert absolute_starts(path) == [ns(t) for t in relative]
    assert not read_trace_file(path).tables.exact_ts


def test_torch_profiler_times_are_exact(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    out = tmp_path / "torch.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.randn(8, 8).mm(torch.randn(8, 8)).relu()
    prof.export_chrome_trace(str(out))
    doc = json.loads(out.read_text(), parse_float=Decimal)  # the exact digits
    ops = [e["ts"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert ops
    tables = read_trace_file(out).tables
    got = sorted((tables.host.start[tables.host.kind == 0] + tables.origin_us * 1000).tolist())
    assert got == sorted(round(t * 1000) for t in ops)
