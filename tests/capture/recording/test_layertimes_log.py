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
from layerprof.capture.platform.clocks import FakeClock
from layerprof.capture.recording import recorder as recorder_module
from layerprof.capture.recording.accumulators import StreamSums
from layerprof.capture.recording.layertimes import EXIT, RAISED, SKIP, complete_prefix, parse_events
from layerprof.errors import UsageError
from tests.support import zoo_models as zoo


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
    assert len(chunked._log.tables) > 1
    a, b = whole.profile().samples, chunked.profile().samples
    assert a.keys() == b.keys()
    for path in a:
        assert a[path].total_ns == b[path].total_ns and a[path].self_ns == b[path].self_ns
        assert a[path].device_total_ns == b[path].device_total_ns
    assert whole.calls() == chunked.calls()


class _Varying(nn.Module):
    """Each forward takes 1 ns more than the last, and a reused leaf runs 1 to 3 times:
    every iteration's numbers differ, so a column summed in the wrong place shows."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.leaf = zoo.Work(clock, 3)
        self.other = zoo.Work(clock, 5)
        self.n = 0

    def forward(self, x: Any) -> Any:
        self.n += 1
        self.clock.advance(self.n)
        for _ in range(1 + self.n % 3):
            x = self.leaf(x)
        return self.other(x) if self.n % 2 else x


def _streamed(
    n: int, expect: int, device: bool, *, warm: int = 0, correct: bool | None = None
) -> tuple[Any, Any]:
    """(recorded whole, recorded with stream(expect)) of the same forwards."""
    out = []
    for stream in (False, True):
        clock, dev = FakeClock(), FakeClock(tick_ns=3) if device else None
        model = _Varying(clock)
        with Recorder(model, clock=clock, device_clock=dev) as rec:
            for _ in range(warm):
                model(torch.zeros(1))
            rec.reset()
            if stream:
                rec.stream(expect, correct=correct)
            for _ in range(n):
                model(torch.zeros(1))
        out.append(rec)
    return out[0], out[1]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 25), st.integers(0, 30), st.booleans(), st.sampled_from([8, 40, 1 << 17]))
def test_streaming_sums_what_the_whole_record_sums(
    n: int, expect: int, device: bool, compact_at: int
) -> None:
    """Summed chunk by chunk into matrices made for ``expect`` forwards (fewer grow them,
    more are left unfilled): the same samples, calls and counts as the whole record."""
    old = recorder_module.COMPACT_AT
    recorder_module.COMPACT_AT = compact_at
    try:
        whole, streamed = _streamed(n, expect, device, warm=2)
    finally:
        recorder_module.COMPACT_AT = old
    assert streamed._log.tables == []  # nothing kept per call
    assert (streamed.iterations, streamed.call_count) == (whole.iterations, whole.call_count)
    a, b = whole.profile().samples, streamed.profile().samples
    assert a.keys() == b.keys()
    for path in a:
        x, y = a[path], b[path]
        assert x.total_ns == y.total_ns and x.self_ns == y.self_ns
        assert x.device_total_ns == y.device_total_ns and x.device_self_ns == y.device_self_ns
        assert (x.calls, x.calls_vary) == (y.calls, y.calls_vary)
        assert len(y.total_ns) == n


def test_streaming_holds_one_matrix_per_quantity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder_module, "COMPACT_AT", 8)
    _, rec = _streamed(50, 50, device=False)
    assert isinstance(rec._record, StreamSums)
    sums = rec._record.sums
    assert rec._log.tables == [] and sums.filled == 50
    assert sums.total.shape == sums.self_.shape == (len(rec._paths), 50)
    assert sums.total.dtype == np.int64


def test_streaming_refuses_what_it_cannot_give() -> None:
    _, rec = _streamed(3, 3, device=False, correct=False)
    with pytest.raises(UsageError, match="summed per layer"):
        rec.calls()
    with pytest.raises(UsageError, match="correct=False"):
        rec.profile(correct=True)
    assert rec.profile(correct=False).samples[""].total_ns.tolist() == [12, 11, 11]
    with pytest.raises(UsageError, match="backward=True"):
        Recorder(nn.Linear(1, 1), backward=True).stream(3)
    with pytest.raises(UsageError, match="entered Recorder"):
        Recorder(nn.Linear(1, 1)).stream(3)
    with pytest.raises(UsageError, match="called already"):
        rec.stream(3)


def test_streaming_keeps_its_correction_decision() -> None:
    """stream() decides at once, by default as profile() would (a test clock: no
    correction); a profile() that asks for the other is refused, never ignored."""
    _, rec = _streamed(3, 3, device=False)
    with pytest.raises(UsageError, match="correct=False"):
        rec.profile(correct=True)
    assert rec.profile().overhead is None


def test_streaming_goes_on_after_a_profile_and_a_reset() -> None:
    """profile() hands the matrices' rows out read-only: recording on copies them (the
    first profile's numbers stay), and reset() starts the sums again."""
    clock = FakeClock()
    model = _Varying(clock)
    with Recorder(model, clock=clock) as rec:
        rec.stream(2)
        model(torch.zeros(1))
        first = rec.profile().samples[""].total_ns.tolist()
        model(torch.zeros(1))
        model(torch.zeros(1))
        second = rec.profile().samples[""].total_ns.tolist()
        rec.reset()
        model(torch.zeros(1))
        third = rec.profile().samples[""].total_ns.tolist()
    assert first == second[:1] and len(second) == 3
    assert rec.profile().samples[""].total_ns.tolist() == third and len(third) == 1


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
