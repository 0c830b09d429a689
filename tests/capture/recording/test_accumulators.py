"""The Recorder's three accumulators behind one protocol (capture/recording/accumulators.py,
training.py): the same forwards on the fake clock give the same samples whether the
calls are kept, streamed, or a training loop's before its first step; each answers the
Recorder's questions (summed, calls, reset) as its record allows."""

from __future__ import annotations

import pytest
import torch

from layerprof import Recorder
from layerprof.capture.platform.clocks import FakeClock
from layerprof.capture.recording.accumulators import Accumulator, KeptTables, StreamSums
from layerprof.capture.recording.forwardlog import ForwardLog
from layerprof.capture.recording.loop import StepSchedule
from layerprof.capture.recording.training import TrainingSteps
from layerprof.errors import UsageError
from tests.support import zoo_models as zoo

FORWARDS = 3


def _recorded(*, stream: bool = False, backward: bool = False) -> Recorder:
    clock = FakeClock()
    model = zoo.Nested(clock)
    rec = Recorder(model, clock=clock, backward=backward, record_shapes=False)
    with rec:
        if stream:
            rec.stream(FORWARDS)
        for _ in range(FORWARDS):
            model(torch.zeros(1))
    return rec


def test_each_accumulator_is_one() -> None:
    """The type checker holds each to the protocol; this names the three."""
    log = ForwardLog([], None)
    kept: Accumulator = KeptTables(log, [], lambda correct: None)
    loop: Accumulator = TrainingSteps(
        torch.nn.Linear(1, 1), clock=FakeClock(), backward_clock=None,
        schedule=StepSchedule(), memory=False, log=log, paths=[], index={},
        decide=lambda correct: None,
    )  # fmt: skip
    assert kept.plain and loop.plain  # a loop before its first step: a plain record
    assert kept.summed() == loop.summed() == (0, 0)


@pytest.mark.parametrize("kind", ["stream", "loop before a step"])
def test_the_same_forwards_give_the_same_samples(kind: str) -> None:
    kept = _recorded().profile(correct=False)
    other = _recorded(stream=kind == "stream", backward=kind != "stream").profile(correct=False)
    assert kept.samples.keys() == other.samples.keys()
    for path, s in kept.samples.items():
        o = other.samples[path]
        assert list(s.total_ns) == list(o.total_ns), path
        assert list(s.self_ns) == list(o.self_ns), path
        assert s.calls == o.calls
    assert kept.row("").total_ns == 365  # root 10 + a (5 + 100 + 200) + b 50


def test_streamed_sums_are_counted_and_cannot_be_listed() -> None:
    rec = _recorded(stream=True)
    assert isinstance(rec._record, StreamSums)
    assert (rec.iterations, rec.call_count) == (FORWARDS, 5 * FORWARDS)  # 5 layers a forward
    assert rec._record.summed() == (FORWARDS, 5 * FORWARDS)  # all of it summed (compacted)
    assert not rec._record.plain
    with pytest.raises(UsageError, match="summed per layer as they were recorded"):
        rec.calls()
    rec.reset()
    assert rec._record.summed() == (0, 0) and rec.calls() == []


def test_kept_tables_are_listed_and_reset() -> None:
    rec = _recorded()
    assert isinstance(rec._record, KeptTables)
    assert len(rec.calls()) == 5 * FORWARDS
    rec.reset()
    assert (rec.iterations, rec.call_count) == (0, 0)
