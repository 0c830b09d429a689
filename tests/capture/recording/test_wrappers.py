"""The Recorder's hot path (capture/recording/wrappers.py): what a layer call costs is
what its closure does, so the closures are pinned here by their bytecode, which is
exact (no timing): they read no attribute, and they log one entry and one exit per
call; ``disable()`` makes them pass through."""

from __future__ import annotations

import dis
from collections.abc import Callable
from typing import Any

import pytest

from layerprof.capture.platform.clocks import FakeClock
from layerprof.capture.recording.forwardlog import ForwardLog
from layerprof.capture.recording.layertimes import EXIT
from layerprof.capture.recording.wrappers import timed

ATTRIBUTE_READS = {"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "LOAD_SUPER_ATTR"}


def _made(device: bool) -> tuple[Callable[..., Any], ForwardLog, FakeClock]:
    clock = FakeClock(tick_ns=10)
    log = ForwardLog(["layer"], FakeClock() if device else None)
    raised: list[int] = []
    wrapper = timed(0, lambda x: x + 1, log, clock.mark, lambda: raised.append(1), lambda: False)
    return wrapper, log, clock


@pytest.mark.parametrize("device", [False, True], ids=["host", "device"])
def test_a_layer_call_reads_no_attribute(device: bool) -> None:
    """Every name the closure uses per call is a local of its closure (a cell), bound
    when the wrapper was made: ``log.pairs.append`` or ``self.clock.mark`` inside it
    would be attribute lookups paid twice per layer call."""
    wrapper, _, _ = _made(device)
    ops = {i.opname for i in dis.get_instructions(wrapper)}
    assert not ops & ATTRIBUTE_READS, sorted(ops & ATTRIBUTE_READS)
    assert "LOAD_DEREF" in ops  # the captured locals


@pytest.mark.parametrize("device", [False, True], ids=["host", "device"])
def test_a_layer_call_logs_its_entry_and_exit(device: bool) -> None:
    wrapper, log, _ = _made(device)
    assert wrapper(1) == 2
    assert log.pairs == [0, 0, EXIT, 10]  # (layer, start), (EXIT, end) on the fake clock
    if device:
        assert log.dev == [0, 0] and log.open == [0]  # resolved when the call ended


@pytest.mark.parametrize("device", [False, True], ids=["host", "device"])
def test_a_disabled_wrapper_passes_through(device: bool) -> None:
    wrapper, log, clock = _made(device)
    wrapper.disable()  # type: ignore[attr-defined]
    assert wrapper(1) == 2
    assert log.pairs == [] and log.pending == [] and clock.now_ns == 0
