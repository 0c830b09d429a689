"""The Recorder's event log -> calls: nesting from event order, compaction, bad logs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from layerprof import Recorder
from layerprof.capture.clocks import FakeClock
from layerprof.capture.recording import recorder as recorder_module
from layerprof.capture.recording.layertimes import EXIT, RAISED, SKIP, complete_prefix, parse_events
from tests import zoo_models as zoo


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[int], list[tuple[int, int, int, int]]]:
    """A random well-nested event log (several outermost calls) with its expected calls:
    (layer, start, end, level) in start order. Times may repeat (a fake clock)."""
    log: list[int] = []
    calls: list[tuple[int, int, int, int]] = []
    clock = [0]

    def tick() -> int:
        clock[0] += draw(st.integers(0, 3))
        return clock[0]

    def emit(level: int) -> None:
        layer = draw(st.sampled_from([0, 1, 2, SKIP])) if level > 1 else draw(st.integers(0, 2))
        index = len(calls)
        start = tick()
        log.extend((layer, start))
        calls.append((layer, start, 0, level))
        if layer != SKIP and level < 4:
            for _ in range(draw(st.integers(0, 3))):
                emit(level + 1)
        end = tick()
        log.extend((draw(st.sampled_from([EXIT, RAISED])) if level > 1 else EXIT, end))
        calls[index] = (layer, start, end, level)

    for _ in range(draw(st.integers(1, 4))):
        emit(1)
    return log, calls


@settings(max_examples=200, deadline=None)
@given(logs())
def test_parse_matches_a_stack_walk(
    case: tuple[list[int], list[tuple[int, int, int, int]]],
) -> None:
    log, expected = case
    codes = np.array(log[0::2], dtype=np.int64)
    times = np.array(log[1::2], dtype=np.int64)
    assert complete_prefix(codes, 3) == len(codes)
    table = parse_events(codes, times)
    got = list(
        zip(
            table.layer.tolist(),
            table.start.tolist(),
            table.end.tolist(),
            table.level.tolist(),
            strict=True,
        )
    )
    assert got == expected
    parents = table.parents()
    for i, level in enumerate(table.level.tolist()):
        p = int(parents[i])
        assert (p == -1) == (level == 1)
        if p >= 0:  # the parent is the last call one level up that started before
            assert table.level[p] == level - 1
            assert not any(table.level[j] == level - 1 for j in range(p + 1, i))


@settings(max_examples=100, deadline=None)
@given(logs(), st.integers(0, 200))
def test_complete_prefix_stops_at_the_last_whole_call(
    case: tuple[list[int], list[tuple[int, int, int, int]]], cut: int
) -> None:
    log, _ = case
    codes = np.array(log[0::2], dtype=np.int64)[: cut % (len(log) // 2 + 1)]
    n = complete_prefix(codes, 3)
    depth = np.cumsum(np.where((codes >= 0) | (codes == SKIP), 1, -1))
    assert n == 0 or depth[n - 1] == 0
    assert not (depth[n:] == 0).any()


def test_a_misaligned_log_keeps_the_whole_forwards_before_it() -> None:
    """Ctrl-C between the two appends of an entry leaves a time where a code belongs."""
    codes = np.array([0, EXIT, 0, 123456789, EXIT], dtype=np.int64)
    assert complete_prefix(codes, 1) == 2


def record(model: nn.Module, clock: FakeClock, device: FakeClock | None, n: int) -> Any:
    with Recorder(model, clock=clock, device_clock=device) as rec:
        for _ in range(n):
            model(torch.zeros(1))
    return rec


@pytest.mark.parametrize("device", [False, True])
def test_compaction_changes_nothing(monkeypatch: pytest.MonkeyPatch, device: bool) -> None:
    def run() -> Any:
        clock, dev = FakeClock(), FakeClock(tick_ns=3) if device else None
        return record(zoo.Recursive(clock), clock, dev, 7)

    whole = run()
    monkeypatch.setattr(recorder_module, "COMPACT_AT", 8)  # compact after every forward
    chunked = run()
    assert len(chunked._tables) > 1
    a, b = whole.profile().samples, chunked.profile().samples
    assert a.keys() == b.keys()
    for path in a:
        assert a[path].total_ns == b[path].total_ns and a[path].self_ns == b[path].self_ns
        assert a[path].device_total_ns == b[path].device_total_ns
    assert whole.calls() == chunked.calls()


def test_device_marks_survive_a_failed_forward() -> None:
    host, device = FakeClock(), FakeClock(tick_ns=5)
    model = zoo.Raises()
    rec = Recorder(model, clock=host, device_clock=device)
    with rec:
        for x in (torch.zeros(2, 3), torch.zeros(2, 3)):
            with pytest.raises(RuntimeError):
                model(x)
    assert rec.iterations == 0 and rec.active_path() == "fc1"
    ok = nn.Sequential(zoo.Work(host, 10), zoo.Work(host, 20))
    rec2 = Recorder(ok, clock=host, device_clock=device)
    with rec2:
        ok(torch.zeros(1))
        with pytest.raises(TypeError):
            ok(torch.zeros(1), "unexpected")
        ok(torch.zeros(1))
    prof = rec2.profile()
    assert rec2.iterations == 2
    assert prof.row("0").device_total_ns == 5  # two marks, 5 ns apart on the fake device
    assert prof.row("1").total_ns == 20
