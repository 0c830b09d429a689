"""What other code sees while a Recorder is attached (its forward wrappers), and after.

docs/definitions.md ("What other code sees while recording") states each of these.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import pytest
import torch
from torch import nn

import layerprof
from layerprof import Recorder
from layerprof.capture.compilewatch import CompileWatch
from layerprof.capture.modules import ForwardWrapper
from layerprof.capture.platform.clocks import FakeClock
from layerprof.capture.recording.shapestore import ShapeCapture
from tests.support import zoo_models as zoo

_ENTRY_POINTS = ("forward", "_compiled_call_impl")


def entry_points(model: nn.Module) -> dict[str, tuple[Any, ...]]:
    """Each module's instance-level entry points (scripted and compiled modules have
    their own), by path: what a Recorder must put back exactly."""
    return {
        path: tuple(m.__dict__.get(name) for name in _ENTRY_POINTS)
        for path, m in model.named_modules()
    }


# keyed by the model itself, not id(): a collected model's id is reused by later ones
_BEFORE: weakref.WeakKeyDictionary[nn.Module, dict[str, tuple[Any, ...]]] = (
    weakref.WeakKeyDictionary()
)


def untouched(model: nn.Module) -> bool:
    """No layerprof wrapper or hook left anywhere in the model."""
    before = _BEFORE.get(model)
    plain = {p: (None, None) for p, _ in model.named_modules()}
    now = entry_points(model)
    return (before if before is not None else plain) == now and all(
        not m._forward_hooks and not m._forward_pre_hooks for m in model.modules()
    )


def remember(model: nn.Module) -> nn.Module:
    _BEFORE[model] = entry_points(model)
    return model


class Block(nn.Module):
    """A ResNet-style block: in-place residual add and in-place activation."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        out = self.fc2(self.act(self.fc1(x)))
        out += x
        return self.act(out) * scale


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, scale=0.5)
        return self.head(x)


def test_signature_and_type_unchanged_while_recording() -> None:
    model = Net()
    before = {p: inspect.signature(m.forward) for p, m in model.named_modules()}
    with Recorder(model):
        for path, m in model.named_modules():
            assert inspect.signature(m.forward) == before[path]
            assert type(m).forward is not m.forward  # an instance-level wrapper ...
            assert m.forward.__wrapped__ is not None  # ... that says what it wraps
        assert model.blocks[0].forward.__name__ == "forward"
        assert type(model) is Net
    assert untouched(model)


def test_user_hooks_fire_and_their_results_count() -> None:
    model = Net()
    seen: list[str] = []

    def pre(m: nn.Module, args: Any, kwargs: Any) -> Any:
        seen.append("pre")
        return (args[0] * 0,), kwargs  # a pre-hook that changes the input

    def post(m: nn.Module, args: Any, out: Any) -> Any:
        seen.append("post")
        return out + 1  # a forward hook that changes the output

    h1 = model.head.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.head.register_forward_hook(post)
    x = torch.randn(2, 8)
    expected = model(x)
    seen.clear()
    with Recorder(model, clock=FakeClock()) as rec:
        got = model(x)
    h1.remove()
    h2.remove()
    assert seen == ["pre", "post"]
    assert torch.equal(got, expected)
    assert rec.profile().row("head").calls == 1
    assert untouched(model)


def test_restored_after_an_error_and_after_ctrl_c() -> None:
    model = zoo.Raises()
    with pytest.raises(RuntimeError), Recorder(model):
        model(torch.zeros(2, 4))
    assert untouched(model)

    class Interrupted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.inner(x)
            raise KeyboardInterrupt

    model2 = Interrupted()
    with pytest.raises(KeyboardInterrupt), Recorder(model2) as rec:
        model2(torch.zeros(1, 2))
    assert untouched(model2)
    assert rec.iterations == 0 and rec.active_path() == ""


def test_failed_attach_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    model = Net()
    made = []
    real_init = ForwardWrapper.__init__

    def flaky(self: ForwardWrapper, module: Any, make: Any) -> None:
        if len(made) == 3:
            raise RuntimeError("boom")
        made.append(module)
        real_init(self, module, make)

    monkeypatch.setattr(ForwardWrapper, "__init__", flaky)
    with pytest.raises(RuntimeError, match="boom"), Recorder(model):
        pass
    assert untouched(model)


def test_existing_instance_forward_is_restored_exactly() -> None:
    """A tool that already replaced forward (HF accelerate does) gets its own back."""
    model = Net()
    original = model.head.forward

    def accelerate_like(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    model.head.forward = accelerate_like  # type: ignore[method-assign]
    with Recorder(model, clock=FakeClock()) as rec:
        model(torch.randn(2, 8))
        assert model.head.forward.__wrapped__ is accelerate_like
    assert model.head.__dict__["forward"] is accelerate_like
    assert rec.profile().row("head").calls == 1


def test_nested_recorders_in_and_out_of_order() -> None:
    model = Net()
    x = torch.randn(2, 8)
    outer, inner = Recorder(model, clock=FakeClock()), Recorder(model, clock=FakeClock())
    with outer, inner:
        model(x)
    assert untouched(model)
    assert outer.iterations == inner.iterations == 1

    outer.attach()
    inner.attach()
    outer.detach()  # not the last one attached: disabled, left under inner's wrappers
    model(x)
    inner.detach()
    assert untouched(model)
    assert outer.iterations == 1  # the forward after its detach was not recorded
    assert inner.iterations == 2


def test_a_wrapper_put_on_top_of_ours_is_left_and_ours_disabled() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    rec = Recorder(model, clock=FakeClock()).attach()
    ours = model[0].forward

    def theirs(*args: Any, **kwargs: Any) -> Any:
        return ours(*args, **kwargs)

    model[0].forward = theirs  # type: ignore[method-assign]
    rec.detach()
    assert model[0].forward is theirs
    model(torch.zeros(1, 2))  # still runs, through our disabled wrapper
    assert rec.iterations == 0 and rec.calls() == []


def test_inplace_residual_blocks_and_module_list() -> None:
    clock = FakeClock()
    model = Net()
    with Recorder(model, clock=clock) as rec:
        for _ in range(2):
            model(torch.randn(4, 8))
    prof = rec.profile()
    assert prof.row("blocks").calls == 0  # a ModuleList is never called
    assert all(prof.row(f"blocks.{i}").calls == 1 for i in range(3))
    assert prof.row("blocks.0.act").calls == 2  # one module called twice per forward
    assert prof.row("blocks.0").input_shapes == [[4, 8], {"scale": "float"}]
    for root in prof.tree():
        root.self_check()


def test_module_called_several_times_and_recursion_with_fake_clock() -> None:
    clock = FakeClock()
    prof = layerprof.Recorder(zoo.Reused(clock), clock=clock)
    with prof as rec:
        rec.model(torch.zeros(1))
    row = rec.profile().row("shared")
    assert (row.calls, row.total_ns) == (2, 60)


def test_torchscript_submodule_is_timed_as_one_leaf() -> None:
    class WithScripted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre = nn.Linear(8, 8)
            self.block = torch.jit.script(nn.Sequential(nn.Linear(8, 8), nn.ReLU()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.block(self.pre(x))

    model = remember(WithScripted())
    with Recorder(model) as rec:
        for _ in range(3):
            model(torch.randn(2, 8))
    prof = rec.profile(correct=False)
    assert [r.path for r in prof.rows()] == ["", "pre", "block"]
    assert prof.row("block").calls == 1 and prof.row("block").total_ns > 0
    assert untouched(model)


def _compiled_block(in_place: bool) -> nn.Module:
    class WithCompiled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre = nn.Linear(8, 8)
            block = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
            if in_place:
                block.compile(backend="eager")
                self.block = block
            else:
                self.block = torch.compile(block, backend="eager")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.block(self.pre(x))

    return WithCompiled()


@pytest.mark.parametrize("in_place", [False, True])
def test_compiled_submodule_is_a_leaf_and_never_recompiles(in_place: bool) -> None:
    torch._dynamo.reset()
    model = _compiled_block(in_place)
    x = torch.randn(2, 8)
    model(x)  # compiled here, before recording
    remember(model)
    watch = CompileWatch()
    with watch.window("recording"), Recorder(model) as rec:
        for _ in range(3):
            model(x)
    assert watch.counts == {}
    prof = rec.profile(correct=False)
    assert [r.path for r in prof.rows()] == ["", "pre", "block"]
    assert prof.row("block").calls == 1 and prof.row("block").total_ns > 0
    assert untouched(model)


def test_compiled_root_is_one_layer_and_never_recompiles() -> None:
    torch._dynamo.reset()
    model = torch.compile(Net(), backend="eager")
    x = torch.randn(2, 8)
    model(x)
    prof = layerprof.profile(model, x, warmup=1, iters=3)
    assert [r.path for r in prof.rows()] == [""]
    assert prof.row("").calls == 1
    assert not [n for n in prof.notes if n.kind == "recompile"]


def test_shape_capture_records_first_calls_and_leaves_nothing() -> None:
    model = zoo.KwargsDictOut()
    with ShapeCapture(model) as cap:
        model(torch.zeros(3, 8), mask=torch.ones(3, 8))
        model(torch.zeros(5, 8))  # a second pass keeps the first call's shapes
    assert cap.shapes[""][0] == [[3, 8], {"mask": [3, 8]}]
    assert cap.output_bytes["dec"] == 3 * 2 * 4
    assert untouched(model)


def test_shapes_are_recorded_once_and_their_cost_taken_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The forward that records shapes times the same as the others: what recording
    the shapes cost (500 ns a layer on the fake clock here) is not in any layer."""
    from layerprof.capture.recording import recorder, signatures

    clock = FakeClock()
    real = recorder.inputs_tree

    def slow_inputs_tree(args: Any, kwargs: Any) -> Any:
        clock.advance(500)
        return real(args, kwargs)

    monkeypatch.setattr(recorder, "inputs_tree", slow_inputs_tree)
    monkeypatch.setattr(signatures, "inputs_tree", slow_inputs_tree)
    model = zoo.Nested(clock)
    with Recorder(model, clock=clock) as rec:
        for _ in range(3):
            model(torch.zeros(1))
    prof = rec.profile()
    assert rec.signatures()[0].forwards == 3
    assert prof.row("a").input_shapes == [[1]]
    for path in ("", "a", "a.a1", "b"):
        assert len(set(prof.samples[path].self_ns)) == 1, path
        assert len(set(prof.samples[path].total_ns)) == 1, path
    assert prof.row("").total_ns == 365


def test_error_inside_a_caught_child_is_not_a_failed_forward() -> None:
    clock = FakeClock()
    model = zoo.Fallback(clock)
    with Recorder(model, clock=clock) as rec:
        model(torch.zeros(2, 4))
    assert rec.iterations == 1 and rec.active_path() is None
    assert rec.profile().row("risky.block2.1").calls == 1  # closed when it raised
