"""Backward per layer with full backward hooks (hooks mode)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from layerprof.backward import (
    BackwardMarks,
    _Open,
    backward_calls,
    default_loss,
    nest_intervals,
    owned_parameters,
    profile_backward,
)
from layerprof.clocks import FakeClock
from layerprof.demo import SmallCNN, TinyTransformer
from layerprof.errors import ModelRunError, UsageError
from layerprof.layertimes import build_samples
from tests import zoo_models as zoo


def children_of(paths: set[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in paths:
        if path:
            parent = path.rsplit(".", 1)[0] if "." in path else ""
            while parent not in paths:
                parent = parent.rsplit(".", 1)[0] if "." in parent else ""
            out.setdefault(parent, []).append(path)
    return out


def assert_invariant(times: dict[str, tuple[tuple[int, ...], tuple[int, ...]]], iters: int) -> None:
    """Per iteration, exactly: total == self + sum(children totals), self >= 0."""
    kids = children_of(set(times))
    for path, (total, self_t) in times.items():
        for i in range(iters):
            assert total[i] == self_t[i] + sum(times[c][0][i] for c in kids.get(path, [])), path
            assert self_t[i] >= 0, (path, i, self_t[i])


def layers_with_params(model: nn.Module) -> set[str]:
    return {p for p, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))}


def test_transformer_backward_rows_and_invariant() -> None:
    torch.manual_seed(0)
    model = TinyTransformer(vocab=100, dim=32, heads=2, depth=1)
    times = profile_backward(model, (torch.randint(0, 100, (2, 16)),), None, iters=3, loss=None)
    assert layers_with_params(model) <= set(times)
    assert "" in times and all(len(t) == 3 and len(s) == 3 for t, s in times.values())
    assert_invariant(times, 3)
    # the embedding's input (token ids) needs no grad: its end comes from its weight's
    # gradient accumulation, so it is not an empty interval
    assert min(times["embed"][0]) > 0
    assert all(not m._backward_hooks and not m._backward_pre_hooks for m in model.modules())
    assert all(p.grad is None for p in model.parameters())


def test_cnn_with_inplace_relu() -> None:
    torch.manual_seed(0)
    model = SmallCNN(width=4)
    flags = [m.inplace for m in model.modules() if isinstance(m, nn.ReLU)]
    times = profile_backward(model, (torch.randn(2, 3, 32, 32),), None, iters=2, loss=None)
    assert layers_with_params(model) <= set(times)
    assert_invariant(times, 2)
    assert [m.inplace for m in model.modules() if isinstance(m, nn.ReLU)] == flags


def test_shared_layer_called_twice() -> None:
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.tanh(self.fc(x)))

    times = profile_backward(Shared(), (torch.randn(4, 8),), None, iters=2, loss=None)
    assert set(times) == {"", "fc"}
    assert_invariant(times, 2)


def test_custom_loss_grads_restored_and_tied_weights() -> None:
    model = zoo.Tied()
    before = torch.ones_like(model.embed.weight)
    model.embed.weight.grad = before
    seen: list[torch.Size] = []

    def loss(out: torch.Tensor) -> torch.Tensor:
        seen.append(out.shape)
        return out.logsumexp(-1).mean()

    times = profile_backward(model, (torch.randint(0, 50, (2, 5)),), None, iters=2, loss=loss)
    assert seen and seen[0] == (2, 5, 50)
    assert {"", "embed", "out"} <= set(times)
    assert_invariant(times, 2)
    assert model.embed.weight.grad is before
    assert owned_parameters(model) == []  # the tied weight has two owners


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


def test_model_error_in_backward_mode() -> None:
    model = zoo.Raises()
    with pytest.raises(ModelRunError, match="mat1 and mat2"):
        profile_backward(model, (torch.zeros(2, 4),), None, iters=1, loss=None)
    assert all(not m._backward_hooks and not m._backward_pre_hooks for m in model.modules())


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


def test_early_hook_ends_at_last_accumulation() -> None:
    """A layer whose inputs need no grad: its hook fires before the weight-grad work."""
    clock = FakeClock()
    done = [
        _Open("", 0, 20, early=True),
        _Open("head", 30, 60),
        _Open("embed", 300, 310, early=True),
    ]
    calls = backward_calls(done, [("embed", 450), ("head", 50)], 0, clock)
    assert [(c.path, c.start_ns, c.end_ns, c.parent) for c in calls] == [
        ("", 0, 450, -1),  # root: to its children's ends
        ("head", 30, 60, 0),
        ("embed", 300, 450, 0),  # embed: to its weight's accumulation
    ]


def test_marks_detach_on_error() -> None:
    model = nn.Linear(2, 2)
    marks = BackwardMarks(model, FakeClock())
    with marks:
        assert model._backward_hooks
    assert not model._backward_hooks and not model._backward_pre_hooks


def test_runs_inside_inference_mode() -> None:
    """The runner's pass may hold inference_mode: backward must still work."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    x = torch.randn(2, 4)
    with torch.inference_mode():
        times = profile_backward(model, (x,), None, iters=1, loss=None)
    assert {"", "0", "2"} <= set(times)
