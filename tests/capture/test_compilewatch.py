"""Recompilations of a torch.compile'd model inside the timed windows are reported."""

from __future__ import annotations

import torch
from torch import nn

import layerprof
from layerprof.capture.compilewatch import CompileWatch, compiled_frames
from layerprof.pivot.notes import Note


class Stable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


class Drifting(Stable):
    """A Python int the graph depends on changes every call: Dynamo recompiles each
    time (until its recompile limit), in the warm-up and in the timed forwards."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fc(x) * self.calls


def compile_notes(profile: layerprof.Profile) -> list[Note]:
    return [n for n in profile.notes if n.kind == "recompile"]


def test_recompiles_in_the_latency_pass_are_reported() -> None:
    torch._dynamo.reset()
    model = torch.compile(Drifting(), backend="eager")
    prof = layerprof.profile(model, torch.randn(4, 8), warmup=1, iters=3)
    latency = [n for n in compile_notes(prof) if n.data["window"] == "timed latency forwards"]
    assert [n.data["count"] for n in latency] == [3]
    assert latency[0].text.startswith("torch.compile recompiled 3 times during the timed latency")


def test_stable_compiled_model_has_a_clean_latency_pass() -> None:
    torch._dynamo.reset()
    model = torch.compile(Stable(), backend="eager")
    prof = layerprof.profile(model, torch.randn(4, 8), warmup=2, iters=3)
    assert not [n for n in compile_notes(prof) if "latency" in n.data["window"]]


def test_eager_model_has_no_compile_notes() -> None:
    prof = layerprof.profile(Drifting(), torch.randn(4, 8), warmup=1, iters=3)
    assert compile_notes(prof) == []


def test_window_counts_only_inside() -> None:
    torch._dynamo.reset()
    fn = torch.compile(lambda x, n: x * n, backend="eager", dynamic=False)
    fn(torch.ones(2), 1)  # outside any window
    watch = CompileWatch()
    with watch.window("first"):
        fn(torch.ones(2), 1)  # cached: nothing compiles
    with watch.window("second"):
        fn(torch.ones(3), 2)  # a new shape and constant: a recompile
    assert list(watch.counts) == ["second"] and watch.counts["second"] >= 1
    (note,) = watch.notes()
    assert note.kind == "recompile" and note.data["window"] == "second"
    assert compiled_frames() > 0
