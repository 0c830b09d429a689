"""Activation checkpointing in the user's loop (issue 33, item 3): a recompute is not a
new forward. Calls stay whole, each checkpointed module's recompute is measured per
step as part of the backward, and no backward-vs-forward finding is made on layers
whose backward holds their block's recompute."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import layerprof
from layerprof.analysis.diagnose import diagnose
from layerprof.capture.platform.clocks import FakeClock
from layerprof.pivot.profile import Profile
from tests.support.fake_clock_models import FakeSpinLayer

SLEEP_S = 0.001


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 128)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(128, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(SLEEP_S)  # a forward of known, recomputed cost
        out: torch.Tensor = x + self.drop(self.fc2(self.act(self.fc1(x))))
        return out


class Net(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(32, 2)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        out: torch.Tensor = self.head(x)
        return out


def train(model: nn.Module, steps: int = 3) -> Profile:
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, requires_grad=True)  # reentrant checkpointing needs one
    with layerprof.Recorder(model, backward=True) as rec:
        for _ in range(steps):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            rec.step()
    return rec.profile()


@pytest.mark.parametrize("reentrant", [False, True])
def test_recomputes_are_backward_not_forwards(reentrant: bool) -> None:
    profile = train(Net(reentrant))
    rows = {r.path: r for r in profile.rows()}
    # Calls read 0.5 (reentrant: each recompute was a new iteration) before
    for path in ("", "blocks.0", "blocks.1.fc1", "head"):
        assert rows[path].calls == 1.0, (path, rows[path].calls)
    loop = profile.loop
    assert loop is not None
    assert [r.path for r in loop.recompute] == ["blocks.0", "blocks.1", "blocks.2"]
    for r in loop.recompute:
        assert r.calls == 3 and len(r.per_step_ns) == 3
        assert min(r.per_step_ns) >= SLEEP_S * 1e9  # the recomputed forward's sleep
    for step in loop.steps:
        assert step.forwards == 1 and step.backwards == 1
        recomputed = sum(r.per_step_ns[step.index - loop.steps[0].index] for r in loop.recompute)
        assert step.backward_ns >= recomputed  # inside the step's backward
    assert loop.recomputed_under("blocks.1.drop") == "blocks.1"
    assert loop.recomputed_under("head") is None


def test_no_backward_finding_inside_a_checkpointed_block_and_one_on_the_cost() -> None:
    profile = train(Net(reentrant=False))
    findings = diagnose(profile)
    slow = [f for f in findings if f.title == "backward far above twice the forward"]
    assert not any((f.layer or "").startswith("blocks.") for f in slow), slow
    cost = [f for f in findings if f.title.startswith("activation checkpointing recomputes")]
    assert len(cost) == 1 and "3 modules ran again" in cost[0].detail


def test_recompute_survives_the_file_and_prints() -> None:
    profile = train(Net(reentrant=False), steps=2)
    again = Profile.from_dict(profile.to_dict())
    assert again.loop is not None and profile.loop is not None
    assert again.loop.recompute == profile.loop.recompute
    text = again.render("console")
    assert "recomputed in the backward (activation checkpointing" in str(text)
    assert "blocks.2" in str(again.render("html"))


def test_hugging_face_gradient_checkpointing() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
    model = transformers.GPT2LMHeadModel(config)
    model.gradient_checkpointing_enable()
    model.train()
    ids = torch.randint(0, 64, (2, 16))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with layerprof.Recorder(model, backward=True) as rec:
        for _ in range(2):
            model(ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
            rec.step()
    profile = rec.profile()
    rows = {r.path: r for r in profile.rows()}
    assert rows["transformer.h.0"].calls == 1.0 and rows[""].calls == 1.0
    assert profile.loop is not None
    # transformers checkpoints the block class's forward (not the module call), so the
    # recompute shows as the blocks' children, each called again once per step
    recomputed = {r.path: r.calls for r in profile.loop.recompute}
    assert {p.rsplit(".", 1)[0] for p in recomputed} == {"transformer.h.0", "transformer.h.1"}
    assert set(recomputed.values()) == {2}
    assert all(s.backward_ns > 0 for s in profile.loop.steps)  # the loss is in forward


class Plain(Net):
    """The same blocks without checkpointing."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = self.head(x)
        return out


@pytest.mark.parametrize("reentrant", [False, True])
def test_memory_shows_what_is_held_not_the_recompute(reentrant: bool) -> None:
    """Activation memory counted the recompute's transient tensors as held: the same
    total with and without checkpointing. What checkpointing holds from forward to
    backward is each block's input (saved by the checkpoint, in its caller)."""

    def held(model: nn.Module) -> tuple[int, int]:
        torch.manual_seed(0)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(16, 32, requires_grad=True)
        with layerprof.Recorder(model, backward=True, memory=True) as rec:
            for _ in range(2):
                model(x).sum().backward()
                opt.step()
                opt.zero_grad()
                rec.step()
        section = rec.profile().activation_memory
        assert section is not None
        totals = {t.path: t.activations for t in section.totals()}
        return totals[""], totals["blocks.0"]

    plain_total, plain_block = held(Plain(reentrant))
    total, block = held(Net(reentrant))
    assert plain_block > 0 and block == 0
    block_input = 16 * 32 * 4
    assert total == 4 * block_input  # three checkpointed inputs and the head's input
    assert total < plain_total / 4


def test_the_report_keeps_the_case_of_recomputed_paths() -> None:
    from dataclasses import replace

    from layerprof.pivot.sections.loop import LoopStep, Recompute, TrainingLoop
    from tests.support.html_subjects import saved

    step = LoopStep(index=0, start_ns=0, wall_ns=10_000, data_wait_ns=0, forward_ns=4_000,
                    backward_ns=6_000, optimizer_ns=0, rest_ns=0, forwards=1, backwards=1)  # fmt: skip
    loop = TrainingLoop(steps=(step,), recompute=(Recompute("encoder.Block_A", (2_000,), 1),))
    page = str(replace(saved("hooks"), loop=loop).render("html"))
    assert "Recomputed in the backward" in page and "encoder.Block_A" in page


# ---- reentrant checkpointing's backward (issue 43, item 2) -------------------------------
# use_reentrant=True (still Hugging Face's default in many versions) runs the block's
# forward under no_grad: no graph node was hooked in it, the block and its layers read a
# backward of 0.0 and the root took their ~5 ms. On a fake clock the numbers are exact.


class SpinBlock(nn.Module):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.a = FakeSpinLayer(clock, 100, 3000)
        self.b = FakeSpinLayer(clock, 100, 2000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.b(self.a(x))
        return out


class SpinNet(nn.Module):
    """A stem (so the block's input needs a gradient), the checkpointed block, a head."""

    def __init__(self, clock: FakeClock, reentrant: bool) -> None:
        super().__init__()
        self.stem = FakeSpinLayer(clock, 10, 400)
        self.block = SpinBlock(clock)
        self.head = FakeSpinLayer(clock, 10, 500)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = checkpoint(self.block, self.stem(x), use_reentrant=self.reentrant)
        out: torch.Tensor = self.head(x)
        return out


#: backward per layer: the block's spins, plus what its recompute costs inside the block's
#: backward (reentrant: the whole block's forward, run before its nodes; non-reentrant:
#: ``a``'s forward, run when ``b``'s first saved tensor is unpacked, and then stopped)
EXPECTED = {
    True: {"": 6100, "stem": 400, "block": 5200, "block.a": 3000, "block.b": 2000, "head": 500},
    False: {"": 6000, "stem": 400, "block": 5100, "block.a": 3000, "block.b": 2100, "head": 500},
}


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_checkpointed_block_keeps_its_backward_in_both_modes(reentrant: bool) -> None:
    clock = FakeClock()
    model = SpinNet(clock, reentrant)
    with layerprof.Recorder(model, backward=True, clock=clock) as rec:
        for _ in range(3):
            model(torch.ones(2, 4)).sum().backward()
            rec.step()
    profile = rec.profile()
    backward = {p: s.backward_total_ns.tolist() for p, s in profile.samples.items()}  # type: ignore[union-attr]
    assert backward == {p: [ns] * 3 for p, ns in EXPECTED[reentrant].items()}
    root_self = profile.samples[""].backward_self_ns
    assert root_self is not None and root_self.tolist() == [0] * 3  # nothing of the block
    assert profile.loop is not None
    assert [s.backward_ns for s in profile.loop.steps] == [EXPECTED[reentrant][""]] * 3
    rows = {r.path: r for r in profile.rows()}
    assert all(rows[p].calls == 1.0 for p in EXPECTED[reentrant])  # a recompute is no call
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks and "forward" not in vars(m)


@pytest.mark.parametrize("reentrant", [True, False])
def test_run_backward_times_a_reentrant_block_too(reentrant: bool) -> None:
    """``layerprof run --backward`` (profile_backward) reads the same graph-node marks."""
    from layerprof.capture.hooks.backward import profile_backward

    clock = FakeClock()
    model = SpinNet(clock, reentrant)
    result = profile_backward(model, (torch.ones(2, 4),), None, iters=2, loss=None, clock=clock)
    assert result.method == "node-hooks"
    assert {p: t[0] for p, t in result.times.items()} == {
        p: (ns, ns) for p, ns in EXPECTED[reentrant].items()
    }
    assert result.times[""][1] == (0, 0)  # the root's own backward: none


def test_nested_reentrant_checkpoints_nest_their_backward() -> None:
    """A checkpoint inside a checkpointed block: the inner block's recompute runs inside
    the outer one's backward, and each keeps its own."""
    clock = FakeClock()

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = SpinBlock(clock)
            self.c = FakeSpinLayer(clock, 100, 700)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = checkpoint(self.inner, x, use_reentrant=True)
            out: torch.Tensor = self.c(x)
            return out

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = FakeSpinLayer(clock, 10, 400)
            self.outer = Outer()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = checkpoint(self.outer, self.stem(x), use_reentrant=True)
            return out

    model = Net()
    with layerprof.Recorder(model, backward=True, clock=clock) as rec:
        for _ in range(2):
            model(torch.ones(2, 4)).sum().backward()
            rec.step()
    backward = {p: s.backward_total_ns.tolist()[0] for p, s in rec.profile().samples.items()}  # type: ignore[union-attr]
    # outer: its recompute (inner's forward 200 + c's 100), c's 700, inner's 5200
    assert backward == {
        "": 400 + 6200, "stem": 400, "outer": 6200, "outer.c": 700, "outer.inner": 5200,
        "outer.inner.a": 3000, "outer.inner.b": 2000,
    }  # fmt: skip


def test_a_recompute_in_another_autograd_thread_finds_its_owners() -> None:
    """On CUDA the checkpoint's node runs on the device's autograd thread, whose sequence
    counter starts apart (low numbers): the recompute's calls and nodes are matched among
    themselves. A backward started in another thread does the same on the CPU; owners
    looked up among all calls gave block 2000, block.b 0 and stem 3400."""
    clock = FakeClock()
    model = SpinNet(clock, reentrant=True)
    with layerprof.Recorder(model, backward=True, clock=clock) as rec:
        for _ in range(2):
            loss = model(torch.ones(2, 4)).sum()
            worker = threading.Thread(target=loss.backward)
            worker.start()
            worker.join()
            rec.step()
    backward = {p: s.backward_total_ns.tolist() for p, s in rec.profile().samples.items()}  # type: ignore[union-attr]
    assert backward == {p: [ns] * 2 for p, ns in EXPECTED[True].items()}
