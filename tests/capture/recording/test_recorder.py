"""Tree and self-time logic with a fake clock: exact numbers."""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from layerprof import Recorder
from layerprof.capture.platform.clocks import FakeClock
from layerprof.capture.recording.layertimes import Correction, build_samples
from layerprof.pivot.records import LayerCall, Meta
from tests.support import zoo_models as zoo


def record(model: nn.Module, clock: FakeClock, *inputs: object, iters: int = 2, **kw: object):
    with Recorder(model, clock=clock) as rec:
        for _ in range(iters):
            model(*inputs, **kw)
    prof = rec.profile()
    for root in prof.tree():
        root.self_check()
    return prof


def test_nested_exact_totals_and_self() -> None:
    clock = FakeClock()
    prof = record(zoo.Nested(clock), clock, torch.zeros(1))
    got = {r.path: (r.calls, r.total_ns, r.self_ns) for r in prof.rows()}
    assert got == {
        "": (1, 365, 10),
        "a": (1, 305, 5),
        "a.a1": (1, 100, 100),
        "a.a2": (1, 200, 200),
        "b": (1, 50, 50),
    }
    assert prof.row("a").share == pytest.approx(305 / 365)


def test_reused_module_sums_calls() -> None:
    clock = FakeClock()
    prof = record(zoo.Reused(clock), clock, torch.zeros(1))
    shared = prof.row("shared")
    assert (shared.calls, shared.total_ns, shared.self_ns) == (2, 60, 60)
    assert prof.row("").total_ns == 67


def test_recursion_counts_nested_time_once() -> None:
    clock = FakeClock()
    prof = record(zoo.Recursive(clock), clock, torch.zeros(1))
    root, leaf = prof.row(""), prof.row("leaf")
    assert root.calls == 3 and leaf.calls == 3
    assert root.total_ns == 39  # 3 x (10 + 3)
    assert root.self_ns == 30
    assert leaf.total_ns == 9


def test_containers_never_called_show_children_sum() -> None:
    clock = FakeClock()
    prof = record(zoo.Containers(clock), clock, torch.zeros(1))
    blocks, heads = prof.row("blocks"), prof.row("heads")
    assert blocks.calls == 0 and blocks.total_ns == 60
    assert heads.calls == 0 and heads.total_ns == 10
    assert prof.row("").total_ns == 70


def test_iterations_are_outermost_calls() -> None:
    clock = FakeClock()
    model = zoo.Nested(clock)
    with Recorder(model, clock=clock) as rec:
        for _ in range(5):
            model(torch.zeros(1))
    assert rec.iterations == 5
    assert len(rec.profile().samples[""].total_ns) == 5


def test_hooks_removed_after_exit_and_after_error() -> None:
    model = zoo.Raises()
    with pytest.raises(RuntimeError), Recorder(model) as rec:
        model(torch.zeros(2, 4))
    assert rec.active_path() == "block2.1"
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks


def test_shapes_kwargs_and_dict_outputs() -> None:
    model = zoo.KwargsDictOut()
    with Recorder(model) as rec:
        model(torch.zeros(3, 8), mask=torch.ones(3, 8))
    prof = rec.profile()
    root = prof.row("")
    assert root.input_shapes == [[3, 8], {"mask": [3, 8]}]
    assert root.output_shapes == {"logits": [3, 2], "pair": [[3, 8], []]}
    assert prof.row("dec").output_shapes == [3, 2]


def test_tied_weights_counted_once() -> None:
    model = zoo.Tied()
    with Recorder(model) as rec:
        model(torch.zeros(2, 3, dtype=torch.long))
    prof = rec.profile()
    assert prof.row("").params == 50 * 8
    assert prof.row("out").params == 50 * 8


def test_inplace_and_functional_models_record() -> None:
    for model, x in ((zoo.InPlace(), torch.zeros(2, 8)), (zoo.Functional(), torch.zeros(4, 16))):
        with Recorder(model) as rec:
            model(x)
        prof = rec.profile()
        assert all(r.calls == 1 for r in prof.rows())
        for root in prof.tree():
            root.self_check(tolerance_ns=1)


def call(path: str, it: int, start: int, end: int, parent: int) -> LayerCall:
    return LayerCall(path=path, iteration=it, start_ns=start, end_ns=end, parent=parent)


def test_overhead_correction_keeps_invariant() -> None:
    # root [0, 100] with children a [10, 40] and b [50, 90]; b has child c [60, 70]
    calls = [
        call("", 0, 0, 100, -1),
        call("a", 0, 10, 40, 0),
        call("b", 0, 50, 90, 0),
        call("b.c", 0, 60, 70, 2),
    ]
    s = build_samples(calls, 1, Correction(per_call_ns=4, inside_ns=1))
    # self: root 100-30-40=30 -> 30-1-2*3=23; a 30-1=29; b 40-10=30 -> 30-1-3=26; c 10-1=9
    assert s[""].self_ns == (23,)
    assert s["a"].self_ns == (29,)
    assert s["b"].self_ns == (26,)
    assert s["b.c"].self_ns == (9,)
    assert s["b"].total_ns == (35,)
    assert s[""].total_ns == (23 + 29 + 35,)


@st.composite
def call_trees(draw: st.DrawFn) -> list[LayerCall]:
    """Random well-nested call lists over a few paths."""
    calls: list[LayerCall] = []
    clock = [0]

    def emit(parent: int, depth: int) -> None:
        idx = len(calls)
        path = draw(st.sampled_from(["", "a", "b", "a.x", "b.y"]))
        calls.append(call(path, 0, 0, 0, parent))
        start = clock[0]
        clock[0] += draw(st.integers(0, 50))
        for _ in range(draw(st.integers(0, 3)) if depth < 3 else 0):
            emit(idx, depth + 1)
            clock[0] += draw(st.integers(0, 50))
        calls[idx] = call(path, 0, start, clock[0], parent)

    emit(-1, 0)
    return calls


@settings(max_examples=200, deadline=None)
@given(call_trees(), st.floats(0, 20), st.floats(0, 1))
def test_self_never_negative_and_totals_add_up(
    calls: list[LayerCall], per: float, frac: float
) -> None:
    from layerprof.capture.recording.layertimes import call_times

    total, self_t = call_times(calls, Correction(per_call_ns=per, inside_ns=per * frac))
    assert all(v >= 0 for v in self_t)
    for i in range(len(calls)):
        kids = sum(total[j] for j, c in enumerate(calls) if c.parent == i)
        assert total[i] == pytest.approx(self_t[i] + kids)


def test_device_clock_gives_device_columns() -> None:
    """The CUDA-event clock path, exercised with a fake device clock."""
    host, device = FakeClock(), FakeClock()

    class Both(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = zoo.Work(host, 5)

        def forward(self, x: object) -> object:
            device.advance(40)  # the GPU work this layer enqueues
            return self.inner(x)

    model = Both()
    with Recorder(model, clock=host, device_clock=device) as rec:
        model(torch.zeros(1))
        model(torch.zeros(1))
    prof = rec.profile()
    root = prof.row("")
    assert root.device_total_ns == 40 and root.device_self_ns == 40
    assert prof.row("inner").device_total_ns == 0
    assert root.total_ns == 5


def test_keyboard_interrupt_leaves_model_clean() -> None:
    import layerprof

    class Interrupts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            if self.calls > 3:
                raise KeyboardInterrupt
            return self.fc(x)

    model = Interrupts().train()
    with pytest.raises(KeyboardInterrupt):
        layerprof.profile(model, torch.zeros(1, 2), warmup=1, iters=5)
    assert model.training
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_caught_failure_in_user_loop_drops_only_that_iteration() -> None:
    clock = FakeClock()
    model = zoo.Nested(clock)
    fail = {"now": False}

    def boom(module: nn.Module, args: object) -> None:
        if fail["now"]:
            raise ValueError("bad batch")

    with Recorder(model, clock=clock) as rec:
        handle = model.a.a2.register_forward_pre_hook(boom)
        for bad in (False, True, False, False):
            fail["now"] = bad
            with contextlib.suppress(ValueError):
                model(torch.zeros(1))
    handle.remove()
    # Hooks run outside a layer's timed forward (the Recorder wraps ``forward``):
    # a.a2's pre-hook raised before a.a2's forward started, inside a's forward.
    assert rec.active_path() == "a"
    prof = rec.profile()
    assert rec.iterations == 3
    assert prof.row("").total_ns == 365 and prof.row("a.a2").calls == 1
    for root in prof.tree():
        root.self_check()


def test_error_caught_inside_forward_keeps_stack_aligned() -> None:
    clock = FakeClock()
    model = zoo.Fallback(clock)
    with Recorder(model, clock=clock) as rec:
        model(torch.zeros(2, 4))
        model(torch.zeros(2, 4))
    prof = rec.profile()
    assert rec.iterations == 2
    assert prof.row("safe").calls == 1 and prof.row("safe").total_ns == 40
    assert prof.row("").total_ns == 40


def test_layer_called_in_some_iterations_reports_mean() -> None:
    clock = FakeClock()

    class Sometimes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.always = zoo.Work(clock, 10)
            self.rare = zoo.Work(clock, 90)
            self.n = 0

        def forward(self, x: object) -> object:
            self.n += 1
            x = self.always(x)
            return self.rare(x) if self.n % 3 == 0 else x

    model = Sometimes()
    prof = record(model, clock, torch.zeros(1), iters=6)
    rare = prof.row("rare")
    assert rare.calls == pytest.approx(1 / 3) and rare.calls_vary
    assert rare.self_ns == pytest.approx(30)  # mean of (0, 0, 90) per forward
    assert prof.row("always").self_ns == 10 and not prof.row("always").calls_vary
    assert prof.row("").total_ns == pytest.approx(40)


def test_rows_in_any_order_and_orphans_add_up() -> None:
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.records import LayerInfo, LayerSamples

    layers = (
        LayerInfo("a.x", "Leaf", "a"),
        LayerInfo("a", "Block", ""),
        LayerInfo("", "Net", None),
        LayerInfo("lost.y", "Leaf", "lost"),  # its parent is not in the profile
    )
    samples = {
        "": LayerSamples((30,), (5,), 1),
        "a": LayerSamples((25,), (10,), 1),
        "a.x": LayerSamples((15,), (15,), 1),
        "lost.y": LayerSamples((10,), (10,), 1),
    }
    prof = Profile(meta=Meta(model="m"), layers=layers, samples=samples)
    rows = {r.path: r for r in prof.rows()}
    assert rows[""].total_ns == 30 and rows["a"].total_ns == 25
    assert rows["lost.y"].share == pytest.approx(10 / 40)
    for root in prof.tree():
        root.self_check()


def test_active_path_names_the_latest_failure() -> None:
    model = zoo.Raises()
    with Recorder(model) as rec:
        for x in (torch.zeros(2, 4), torch.zeros(2, 3)):
            with contextlib.suppress(RuntimeError):
                model(x)
    assert rec.active_path() == "fc1"  # the second forward failed earlier, in fc1
