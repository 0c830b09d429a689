"""A long training loop is summed as it runs (``LoopRecord``): the same profile however
the steps are chunked, nothing kept outside the schedule's active window."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.checkpoint import checkpoint

import layerprof
from layerprof.capture.platform.clocks import FakeClock
from layerprof.capture.recording import training as training_module
from layerprof.capture.recording.loop import StepSchedule
from layerprof.errors import UsageError
from layerprof.pivot.profile import Profile
from layerprof.stats import IntValues
from tests.support.fake_clock_models import FakeSpinLayer


class Net(nn.Module):
    """Two known-cost layers, the second behind activation checkpointing when asked."""

    def __init__(self, clock: FakeClock, checkpointed: bool) -> None:
        super().__init__()
        self.a = FakeSpinLayer(clock, 100, 1000)
        self.b = FakeSpinLayer(clock, 30, 70)
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        if self.checkpointed and torch.is_grad_enabled():
            # reentrant: the whole forward runs again (the non-reentrant one stops early,
            # here before the known cost)
            return checkpoint(self.b, x, use_reentrant=True)  # type: ignore[no-any-return]
        return self.b(x)


Step = tuple[int, bool, int]  # micro-batches with a backward, an eval forward, the loader's ns


def _run(steps: list[Step], schedule: StepSchedule, checkpointed: bool, *, midway: bool) -> Profile:
    clock = FakeClock()
    model = Net(clock, checkpointed)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    rec = layerprof.Recorder(model, backward=True, clock=clock, schedule=schedule)
    with rec:
        for i, (micro, evaluate, wait) in enumerate(steps):
            clock.advance(wait)
            for _ in range(micro):
                model(torch.ones(2, 4)).sum().backward()
            if evaluate:
                with torch.no_grad():
                    model(torch.ones(2, 4))
            opt.step()
            if midway and i == len(steps) // 2 and i > schedule.skip + schedule.warmup:
                rec.profile()  # a look in the middle of a step: its calls stay for the step
            rec.step()
    return rec.profile()


def _same(a: Profile, b: Profile) -> None:
    assert a.loop == b.loop
    assert a.samples.keys() == b.samples.keys()
    for path, x in a.samples.items():
        y = b.samples[path]
        assert x.total_ns.tolist() == y.total_ns.tolist(), path
        assert x.self_ns.tolist() == y.self_ns.tolist(), path
        assert x.calls == y.calls and x.calls_vary == y.calls_vary, path
        for name in ("backward_total_ns", "backward_self_ns"):
            u, v = getattr(x, name), getattr(y, name)
            assert (u is None) == (v is None), (path, name)
            if u is not None:
                assert u.tolist() == v.tolist(), (path, name)
    assert a.meta.iters == b.meta.iters


steps_strategy = st.lists(
    st.tuples(st.integers(0, 3), st.booleans(), st.integers(0, 50)), min_size=1, max_size=8
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=steps_strategy,
    skip=st.integers(0, 2),
    warmup=st.integers(0, 2),
    chunk=st.integers(1, 40),
    checkpointed=st.booleans(),
    midway=st.booleans(),
)
def test_chunked_sums_equal_one_sum_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
    steps: list[Step],
    skip: int,
    warmup: int,
    chunk: int,
    checkpointed: bool,
    midway: bool,
) -> None:
    schedule = StepSchedule(skip=skip, warmup=warmup)
    if len(steps) <= skip + warmup:
        steps = steps + [(1, False, 5)] * (skip + warmup + 1 - len(steps))
    with monkeypatch.context() as m:
        m.setattr(training_module, "LOOP_CHUNK", 1 << 40)
        whole = _run(steps, schedule, checkpointed, midway=False)
    with monkeypatch.context() as m:
        m.setattr(training_module, "LOOP_CHUNK", chunk)
        chunked = _run(steps, schedule, checkpointed, midway=midway)
    _same(whole, chunked)


def test_known_costs_survive_the_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(training_module, "LOOP_CHUNK", 7)
    prof = _run([(2, True, 10)] * 30, StepSchedule(), checkpointed=True, midway=True)
    assert prof.loop is not None and len(prof.loop.steps) == 30
    a = prof.loop.layer("a")
    assert a is not None and isinstance(a.forward_total_ns, IntValues)
    assert a.forward_total_ns == (300,) * 30  # two micro-batches and an evaluation
    assert a.backward_total_ns == (2000,) * 30
    assert [r.path for r in prof.loop.recompute] == ["b"]
    assert prof.loop.recompute[0].per_step_ns == (60,) * 30  # b's forward again, twice a step
    assert prof.samples["b"].calls == 1  # the recompute is no new forward


def test_steps_outside_the_window_keep_no_calls() -> None:
    clock = FakeClock()
    model = Net(clock, checkpointed=False)
    rec = layerprof.Recorder(
        model, backward=True, clock=clock, schedule=StepSchedule(skip=40, warmup=10, active=3)
    )
    with rec:
        for i in range(50):
            model(torch.ones(2, 4)).sum().backward()
            rec.step()
            assert rec.call_count == 0, i  # skipped and warm-up steps: nothing held
        for _ in range(5):  # 3 active, then the window is over
            model(torch.ones(2, 4)).sum().backward()
            rec.step()
    prof = rec.profile()
    assert prof.loop is not None and [s.index for s in prof.loop.steps] == [50, 51, 52]
    assert rec.call_count == 9  # the root and its two layers in each active step


def _chunked(monkeypatch: pytest.MonkeyPatch, chunk: int) -> tuple[Net, layerprof.Recorder]:
    """A two-layer loop model on a fake clock and its Recorder, summing every ``chunk`` calls."""
    monkeypatch.setattr(training_module, "LOOP_CHUNK", chunk)
    clock = FakeClock()
    model = Net(clock, checkpointed=False)
    return model, layerprof.Recorder(model, backward=True, clock=clock)


def test_correct_is_decided_before_the_first_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    model, rec = _chunked(monkeypatch, 1)
    with rec:
        for _ in range(3):
            model(torch.ones(2, 4)).sum().backward()
            rec.step()
    with pytest.raises(UsageError, match=r"Recorder\(\.\.\., correct=True\)"):
        rec.profile(correct=True)
    with pytest.raises(UsageError, match="only profile"):
        rec.calls()
    assert rec.profile(correct=False).loop is not None


def test_samples_are_four_bytes_until_a_step_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop's per-step sums are int32 (16 bytes per module and step, all four) while a
    layer's part of a step fits; the first that does not (2.1 s) widens them, exactly."""
    import numpy as np

    model, rec = _chunked(monkeypatch, 5)
    with rec:
        for i in range(12):
            if i == 8:  # a slow step, after some chunks were summed narrow
                model.a.fwd, model.a.bwd = 3_000_000_000, 2_500_000_000
            model(torch.ones(2, 4)).sum().backward()
            rec.step()
            if i == 4:
                narrow = rec.profile()
                s = narrow.samples["a"]
                assert s.total_ns.stored.dtype == np.int32
                assert s.backward_total_ns is not None
                assert s.backward_total_ns.stored.dtype == np.int32
                assert s.total_ns.values.dtype == np.int64  # read as int64
                assert s.total_ns.tolist() == [100] * 5
    a = rec.profile().samples["a"]
    assert a.total_ns.stored.dtype == np.int64
    assert a.total_ns.tolist() == [100] * 8 + [3_000_000_000] * 4
    assert a.backward_total_ns is not None
    assert a.backward_total_ns.tolist() == [1000] * 8 + [2_500_000_000] * 4
    assert narrow.samples["a"].total_ns.tolist() == [100] * 5  # the earlier look is intact
    steps = rec.profile().loop
    assert steps is not None and steps.layer("a") is not None
    assert np.asarray(steps.layer("a").forward_total_ns).dtype == np.int64  # type: ignore[union-attr]
