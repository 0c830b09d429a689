"""Recompilations of a torch.compile'd model inside the timed windows are reported."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from torch import nn

import layerprof
from layerprof.capture.compilewatch import CompileWatch, compiled_frames, dynamo_compiling
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


# ---- a compiled caller of a recorded model (issue 43, item 4) ---------------------------


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.act(self.fc1(x)))
        return out


def dynamo_counts() -> tuple[int, int]:
    """Graphs and graph breaks Dynamo made since the last reset."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"]), sum(counters["graph_break"].values())


def train_compiled(record: dict[str, bool] | None, steps: int = 4) -> tuple[tuple[int, ...], Any]:
    """``cnet = torch.compile(net)``, then ``Recorder(net, **record)`` and training
    through ``cnet``: Dynamo's graphs, breaks and the frames it compiled after the first
    step (recompiles), and the profile (None without a Recorder)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    net = Mlp()
    cnet = torch.compile(net, backend="eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    rec = layerprof.Recorder(net, **record) if record is not None else None
    first = 0
    with rec if rec is not None else contextlib.nullcontext():
        for step in range(steps):
            cnet(x).sum().backward()
            opt.step()
            opt.zero_grad()
            if rec is not None and rec.backward:
                rec.step()
            first = first if step else compiled_frames()
    for m in net.modules():  # nothing left behind
        assert "forward" not in vars(m) and not m._forward_hooks and not m._forward_pre_hooks
    counts = (*dynamo_counts(), compiled_frames() - first)
    return counts, rec.profile() if rec is not None else None


@pytest.mark.parametrize("backward", [True, False])
def test_a_compiled_caller_keeps_its_graph_and_the_profile_says_so(backward: bool) -> None:
    """Before: 37 graph breaks (the clock, the sequence number, ShapeStore), 1 -> 7 graphs
    and the recompile limit, silently."""
    bare, _ = train_compiled(None)
    counts, profile = train_compiled({"backward": backward})
    assert bare == (1, 0, 0)
    # one graph, no break, nothing compiled again after the first step: as without it (the
    # root's two NodeMarks hooks, called from eager code, may compile as frames of no op)
    assert counts == bare
    kinds = [n.kind for n in profile.notes]
    assert "compiled-caller" in kinds and "no-model-forward" not in kinds
    note = next(n for n in profile.notes if n.kind == "compiled-caller")
    assert "Mlp" in note.text and "Recorder(compiled)" in note.text
    assert profile.samples == {} or all(s.calls == 0 for s in profile.rows())


def test_activation_memory_under_a_compiled_caller_keeps_its_graph_and_says_so() -> None:
    """Recorder(memory=True): its saved-tensor pack hook and layer hooks, traced by
    Dynamo, broke the caller's graph (the storage's data_ptr, torch's graph-task id):
    7 breaks, 5 graphs. They step aside as the wrappers do, and the profile says the
    compiled forwards' activations are not counted per layer."""
    bare, _ = train_compiled(None)
    counts, profile = train_compiled({"backward": True, "memory": True})
    assert counts == bare
    kinds = [n.kind for n in profile.notes]
    assert "activation-memory-compiled" in kinds and "compiled-caller" in kinds
    assert profile.activation_memory is not None
    assert all(r.activations_self == 0 for r in profile.activation_memory.rows)


def test_eager_forwards_are_recorded_beside_compiled_ones_and_reset_forgets() -> None:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    net = Mlp()
    cnet = torch.compile(net, backend="eager")
    x = torch.randn(4, 8)
    with torch.no_grad(), layerprof.Recorder(net) as rec:
        net(x)  # eager: recorded
        cnet(x)  # compiled: not recorded, said
        cnet(x)
        net(x)
        assert rec.iterations == 2
        profile = rec.profile()
        assert "compiled-caller" in [n.kind for n in profile.notes]
        assert {r.path for r in profile.rows() if r.calls == 1.0} >= {"", "fc1", "act", "fc2"}
        rec.reset()
        net(x)
        assert "compiled-caller" not in [n.kind for n in rec.profile().notes]
        cnet(x)  # the compiled graph's replay says so again (not its compile: it is cached)
        assert "compiled-caller" in [n.kind for n in rec.profile().notes]
    assert dynamo_counts() == (1, 0)


def test_the_wrappers_test_is_false_in_eager_code() -> None:
    assert dynamo_compiling()() is False
