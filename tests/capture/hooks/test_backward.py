"""Backward per layer from autograd graph-node hooks (hooks mode), and its fallback."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from layerprof.capture.hooks.backward import (
    BackwardProfile,
    NodeHooksUnavailable,
    NodeMarks,
    nest_intervals,
    profile_backward,
)
from layerprof.capture.platform.clocks import FakeClock
from layerprof.capture.recording.layertimes import build_samples
from layerprof.capture.recording.nodes import _Call
from layerprof.capture.step import default_loss
from layerprof.errors import ModelRunError, UsageError
from layerprof.load.demo import SmallCNN, TinyTransformer
from tests.support import zoo_models as zoo
from tests.support.paths import ROOT
from tests.support.real_models import InPlaceAdd, ListEncoder, ResNetish, TinyGPT

Times = dict[str, tuple[tuple[int, ...], tuple[int, ...]]]


def children_of(paths: set[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in paths:
        if path:
            parent = path.rsplit(".", 1)[0] if "." in path else ""
            while parent not in paths:
                parent = parent.rsplit(".", 1)[0] if "." in parent else ""
            out.setdefault(parent, []).append(path)
    return out


def assert_invariant(times: Times, iters: int) -> None:
    """Per iteration, exactly: total == self + sum(children totals), self >= 0."""
    kids = children_of(set(times))
    for path, (total, self_t) in times.items():
        for i in range(iters):
            assert total[i] == self_t[i] + sum(times[c][0][i] for c in kids.get(path, [])), path
            assert self_t[i] >= 0, (path, i, self_t[i])


def layers_with_params(model: nn.Module) -> set[str]:
    return {p for p, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))}


def assert_untouched(model: nn.Module, grads: dict[str, Any] | None = None) -> None:
    """No hook left on any module, ``.grad`` as the user had it."""
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
        assert not m._backward_hooks and not m._backward_pre_hooks
    for name, p in model.named_parameters():
        assert p.grad is (grads or {}).get(name), name


def node_hook_times(model: nn.Module, x: Any, iters: int = 2, **kw: Any) -> Times:
    result = profile_backward(model, (x,), None, iters=iters, loss=kw.pop("loss", None), **kw)
    assert result.method == "node-hooks"
    assert [(n.kind, n.data["method"]) for n in result.notes] == [("backward-method", "node-hooks")]
    return result.times


# ---- the models the issue names: in-place residual adds and activations -----------


def test_resnet_block_with_inplace_residual_and_relu() -> None:
    """``out += identity`` and ``ReLU(inplace=True)``: full backward hooks refused these
    (``Output 0 of BackwardHookFunction is a view and is being modified inplace``)."""
    torch.manual_seed(0)
    model = ResNetish()
    flags = [m.inplace for m in model.modules() if isinstance(m, nn.ReLU)]
    times = node_hook_times(model, torch.randn(2, 3, 16, 16))
    assert layers_with_params(model) <= set(times)
    assert_invariant(times, 2)
    assert all(t > 0 for p in layers_with_params(model) for t in times[p][1]), "no own work"
    # the relu of a block is called twice: both calls count
    assert times["layer1.0.relu"][0][0] > 0
    # the Identity downsample ran forward and made no graph node: zero, not missing
    assert times["layer1.0.downsample"] == ((0, 0), (0, 0))
    assert [m.inplace for m in model.modules() if isinstance(m, nn.ReLU)] == flags == [True] * 5
    assert_untouched(model)


def test_inplace_add_on_a_layer_output() -> None:
    model = InPlaceAdd()
    times = node_hook_times(model, torch.randn(4, 16))
    assert {"", "fc1", "act", "fc2"} <= set(times)
    assert_invariant(times, 2)
    assert_untouched(model)


@pytest.mark.parametrize(
    "model", [ListEncoder(), TinyGPT(), TinyGPT(mha=True)], ids=["encoder", "gpt", "gpt_mha"]
)
def test_transformers(model: nn.Module) -> None:
    """TransformerEncoder over a ModuleList, GPT blocks with SDPA or MultiheadAttention
    and a tied LM head."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 64) if isinstance(model, ListEncoder) else torch.randint(0, 128, (2, 8))
    times = node_hook_times(model, x)
    # MultiheadAttention uses its out_proj's weight and never calls it
    called = {p for p in layers_with_params(model) if not p.endswith("out_proj")}
    assert called <= set(times)
    assert_invariant(times, 2)
    assert_untouched(model)


def test_transformer_backward_rows_and_invariant() -> None:
    torch.manual_seed(0)
    model = TinyTransformer(vocab=100, dim=32, heads=2, depth=1)
    times = node_hook_times(model, torch.randint(0, 100, (2, 16)), iters=3)
    assert layers_with_params(model) <= set(times)
    assert "" in times and all(len(t) == 3 and len(s) == 3 for t, s in times.values())
    assert_invariant(times, 3)
    # the embedding's input (token ids) needs no grad; its weight gradient is its own work
    assert min(times["embed"][0]) > 0
    assert_untouched(model)


def test_cnn_with_inplace_relu() -> None:
    torch.manual_seed(0)
    model = SmallCNN(width=4)
    times = node_hook_times(model, torch.randn(2, 3, 32, 32))
    assert layers_with_params(model) <= set(times)
    assert_invariant(times, 2)


def test_shared_layer_called_twice() -> None:
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.tanh(self.fc(x)))

    times = node_hook_times(Shared(), torch.randn(4, 8))
    assert set(times) == {"", "fc"}
    assert_invariant(times, 2)


def test_wrapper_with_nothing_of_its_own_has_zero_self() -> None:
    """A module whose only work is one sub-layer: equal intervals nest parent first."""

    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    model = nn.Sequential(nn.Linear(8, 8), Wrap())
    times = node_hook_times(model, torch.randn(4, 8), iters=3)
    assert times["1"][1] == (0, 0, 0)
    assert times["1"][0] == times["1.inner"][0]


def test_custom_loss_grads_restored_and_tied_weights() -> None:
    model = zoo.Tied()
    before = torch.ones_like(model.embed.weight)
    model.embed.weight.grad = before
    seen: list[torch.Size] = []

    def loss(out: torch.Tensor) -> torch.Tensor:
        seen.append(out.shape)
        return out.logsumexp(-1).mean()

    times = node_hook_times(model, torch.randint(0, 50, (2, 5)), loss=loss)
    assert seen and seen[0] == (2, 5, 50)
    assert {"", "embed", "out"} <= set(times)
    assert_invariant(times, 2)
    assert_untouched(model, {"embed.weight": before})


def test_no_floating_output_is_a_usage_error() -> None:
    class Argmax(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).argmax(-1)

    with pytest.raises(UsageError, match="no floating-point tensor"):
        profile_backward(Argmax(), (torch.randn(2, 4),), None, iters=1, loss=None)
    assert default_loss({"a": (torch.ones(2, requires_grad=True),)}).item() == 2.0


def test_runs_inside_inference_mode() -> None:
    """The runner's pass may hold inference_mode: backward must still work."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    x = torch.randn(2, 4)
    with torch.inference_mode():
        times = node_hook_times(model, x, iters=1)
    assert {"", "0", "2"} <= set(times)


# ---- errors: the innermost failing layer, the model left as it was -----------------


class _Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom in backward")


class _Interrupt(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt


class FailsInBackward(nn.Module):
    def __init__(self, fn: type[torch.autograd.Function]) -> None:
        super().__init__()
        self.fn = fn
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn.apply(self.proj(x))


def failing_model(fn: type[torch.autograd.Function]) -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.ReLU(), FailsInBackward(fn)))


def test_error_in_backward_names_the_innermost_layer() -> None:
    model = failing_model(_Boom)
    grads = {"0.weight": torch.ones(8, 8)}
    model[0].weight.grad = grads["0.weight"]
    with pytest.raises(ModelRunError, match=r"^1\.1 \(FailsInBackward\): boom in backward") as err:
        profile_backward(model, (torch.randn(2, 8),), None, iters=1, loss=None)
    assert err.value.layer == "1.1"
    assert_untouched(model, grads)


def test_error_in_forward_names_the_innermost_layer() -> None:
    model = zoo.Raises()
    with pytest.raises(ModelRunError, match="mat1 and mat2") as err:
        profile_backward(model, (torch.zeros(2, 4),), None, iters=1, loss=None)
    assert err.value.layer == "block2.1"
    assert_untouched(model)


def test_ctrl_c_in_backward_leaves_the_model_as_it_was() -> None:
    model = failing_model(_Interrupt)
    with pytest.raises(KeyboardInterrupt):
        profile_backward(model, (torch.randn(2, 8),), None, iters=1, loss=None)
    assert_untouched(model)


# ---- the fallback: ops mode when node hooks cannot be used --------------------------


def test_falls_back_to_ops_mode_and_says_so() -> None:
    def unavailable() -> Any:
        raise NodeHooksUnavailable("torch 1.13 has no graph-node hooks")

    model = ResNetish()
    x = torch.randn(2, 3, 16, 16)
    result = profile_backward(model, (x,), None, iters=2, loss=None, sequence_counter=unavailable)
    assert isinstance(result, BackwardProfile) and result.method == "ops"
    (note,) = result.notes
    assert note.kind == "backward-method" and note.data["method"] == "ops"
    assert "torch 1.13 has no graph-node hooks" in note.data["why"]
    assert layers_with_params(model) <= set(result.times)
    assert_invariant(result.times, 2)
    assert_untouched(model)


# ---- interval logic with exact numbers ---------------------------------------------


def test_take_folds_children_into_parents_and_nests() -> None:
    """root -> [a -> [a.x], b (no node)]: a's own nodes end after a.x's; the root has
    none of its own; b made no graph node."""
    marks = NodeMarks(nn.Linear(1, 1), FakeClock())
    marks.calls = [
        _Call("", -1, 0, 10),
        _Call("a", 0, 0, 6, start_mark=100, end_mark=180),
        _Call("a.x", 1, 2, 5, start_mark=120, end_mark=150),
        _Call("b", 0, 6, 6),
    ]
    calls, ran = marks.take(0)
    assert ran == {"", "a", "a.x", "b"}
    assert [(c.path, c.start_ns, c.end_ns, c.parent) for c in calls] == [
        ("", 100, 180, -1),  # the hull of its subtree
        ("a", 100, 180, 0),  # coincides with the root: nested under it, not above
        ("a.x", 120, 150, 1),
    ]
    s = build_samples(calls, 1)
    assert s[""].self_ns == (0,) and s["a"].self_ns == (50,) and s["a.x"].total_ns == (30,)
    assert marks.calls == []  # reset for the next iteration


def test_owner_is_the_innermost_call_holding_the_number() -> None:
    marks = NodeMarks(nn.Linear(1, 1), FakeClock())
    marks.calls = [_Call("", -1, 0, 10), _Call("a", 0, 1, 4), _Call("a.x", 1, 2, 3)]
    marks.calls.append(_Call("b", 0, 5, 8))
    firsts = [c.first for c in marks.calls]
    owners = [marks._owner(seq, firsts) for seq in range(11)]
    assert owners == [0, 1, 2, 1, 0, 3, 3, 3, 0, 0, -1]


def test_nest_intervals_extends_parents_over_overrunning_children() -> None:
    calls = nest_intervals([("", 0, 100), ("a", 10, 40), ("a.x", 20, 50), ("b", 60, 90)], 0)
    assert [(c.path, c.start_ns, c.end_ns, c.parent) for c in calls] == [
        ("", 0, 100, -1),
        ("a", 10, 50, 0),  # extended to cover a.x
        ("a.x", 20, 50, 1),
        ("b", 60, 90, 0),
    ]
    s = build_samples(calls, 1)
    assert s[""].total_ns == (100,) and s[""].self_ns == (100 - 40 - 30,)
    assert s["a"].self_ns == (10,)


def test_cli_backward_on_a_resnet(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``layerprof run --arch ...:ResNetish --backward``: the crash of issue 11.3."""
    import json

    from layerprof.cli import main

    root = ROOT
    out = tmp_path / "p.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # --arch tests.support.real_models:... imports from the current directory
        code = main(["run", "--arch", "tests.support.real_models:ResNetish", "--input", "2x3x16x16",
                     "--backward", "--warmup", "1", "--iters", "2", "--json", str(out)])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 0, err
    assert "Warning" not in err
    data = json.loads(out.read_text())
    rows = {layer["path"]: layer for layer in data["layers"]}
    assert all("backward_total_ms" in rows[p] for p in layers_with_params(ResNetish()))
    assert any("graph-node hooks" in n for n in data["notes"])
