"""A user's own training loop through ``Recorder(model, backward=True)``: per-layer
forward and backward, the step anatomy, the schedule, and hooks that leave nothing behind."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.optim.optimizer as optim_module
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import layerprof
from layerprof.capture.platform.clocks import FakeClock
from layerprof.capture.recording.loop import StepMarks, StepSchedule, partition
from layerprof.errors import UsageError
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.loop import STEP_PARTS
from tests.support.fake_clock_models import FakeSpinLayer

MS = 1_000_000


# ---- models built here ----------------------------------------------------------------


class Block(nn.Module):
    """A ResNet basic block: in-place residual add and in-place ReLU."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNetLike(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.block = Block(width)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.block(self.stem(x))), 1))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(1))


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def check_tree(profile: Profile) -> None:
    for node in profile.tree():
        node.self_check(tolerance_ns=1.0)


def check_partition(profile: Profile) -> None:
    assert profile.loop is not None and profile.loop.steps
    for step in profile.loop.steps:
        assert sum(ns for _, ns in step.parts()) == step.wall_ns
        assert all(ns >= 0 for _, ns in step.parts())


def train(
    model: nn.Module, batch: Any, opt: torch.optim.Optimizer, steps: int, **kw: Any
) -> Profile:
    x, y = batch
    rec = layerprof.Recorder(model, backward=True, **kw)
    with rec:
        for _ in range(steps):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.step()
    return rec.profile()


# ---- real models in a real loop -----------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "shape", "optimizer"),
    [
        (ResNetLike, (4, 3, 8, 8), torch.optim.SGD),
        (Encoder, (4, 6, 16), torch.optim.Adam),
        (Recurrent, (4, 5, 8), torch.optim.Adam),
    ],
)
def test_real_models_train_with_backward_per_layer(
    make: type[nn.Module], shape: tuple[int, ...], optimizer: type[torch.optim.Optimizer]
) -> None:
    torch.manual_seed(0)
    model = make()
    opt = optimizer(model.parameters(), lr=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    prof = train(model, (torch.randn(*shape), torch.randint(0, 10, (shape[0],))), opt, 3)
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert prof.loop is not None and len(prof.loop.steps) == 3
    check_partition(prof)
    check_tree(prof)
    rows = {r.path: r for r in prof.rows()}
    assert rows[""].backward_total_ns and rows[""].backward_total_ns > 0
    for step in prof.loop.steps:
        assert step.forwards == 1 and step.backwards == 1
        assert step.forward_ns > 0 and step.backward_ns > 0 and step.optimizer_ns > 0
    leaves = [r for r in rows.values() if r.path and not any(
        p.startswith(r.path + ".") for p in rows)]  # fmt: skip
    # every leaf called with parameters did backward work (in-place adds and ReLUs
    # included; MultiheadAttention's out_proj is never called, only its weight read)
    for r in leaves:
        if (
            r.path in prof.samples
            and next(model.get_submodule(r.path).parameters(), None) is not None
        ):
            assert r.backward_total_ns is not None and r.backward_total_ns > 0, r.path
    assert_no_hooks(model)


def test_resnet_block_inplace_add_gets_its_backward() -> None:
    torch.manual_seed(0)
    model = ResNetLike()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    prof = train(model, (torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))), opt, 2)
    rows = {r.path: r for r in prof.rows()}
    block = rows["block"]
    assert block.backward_total_ns is not None and block.backward_self_ns is not None
    kids = sum(
        rows[p].backward_total_ns or 0 for p in rows if p.count(".") == 1 and p.startswith("block.")
    )
    assert block.backward_total_ns == pytest.approx(block.backward_self_ns + kids, abs=1)


# ---- the loop's variations ---------------------------------------------------------------


def test_gradient_accumulation_sums_within_the_step() -> None:
    clock = FakeClock()
    model = Costed(clock, forward_ns=100, backward_ns=1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = layerprof.Recorder(model, backward=True, clock=clock)
    with rec:
        for _ in range(2):
            for _ in range(3):
                model(torch.ones(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            rec.step()
    prof = rec.profile()
    assert prof.loop is not None
    for step in prof.loop.steps:
        assert (step.forwards, step.backwards) == (3, 3)
        assert step.forward_ns == 300 and step.backward_ns == 3000
    layer = prof.loop.layer("spin")
    assert layer is not None
    assert layer.forward_total_ns == (300, 300)
    assert layer.backward_total_ns == (3000, 3000)
    assert prof.samples["spin"].backward_total_ns.tolist() == [1000] * 6  # type: ignore[union-attr]


def test_no_grad_evaluation_in_the_loop_records_forward_only() -> None:
    clock = FakeClock()
    model = Costed(clock, forward_ns=100, backward_ns=1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = layerprof.Recorder(model, backward=True, clock=clock)
    with rec:
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        with torch.no_grad():
            model(torch.ones(2, 4))
        rec.step()
        with torch.no_grad():  # an evaluation-only step
            model(torch.ones(2, 4))
        rec.step()
    prof = rec.profile()
    assert prof.loop is not None
    first, second = prof.loop.steps
    assert (first.forwards, first.backwards, first.forward_ns, first.backward_ns) == (
        2,
        1,
        200,
        1000,
    )
    assert (second.forwards, second.backwards, second.backward_ns) == (1, 0, 0)
    assert prof.samples["spin"].total_ns.tolist() == [100, 100, 100]
    assert prof.samples["spin"].backward_total_ns.tolist() == [1000]  # type: ignore[union-attr]


def test_schedule_keeps_only_active_steps() -> None:
    clock = FakeClock()
    model = Costed(clock, forward_ns=100, backward_ns=1000)
    rec = layerprof.Recorder(
        model, backward=True, clock=clock, schedule=StepSchedule(skip=1, warmup=2, active=3)
    )
    with rec:
        for i in range(8):
            clock.advance(i)  # step i's data wait is i ns
            model(torch.ones(2, 4)).sum().backward()
            rec.step()
    prof = rec.profile()
    assert prof.loop is not None
    assert [s.index for s in prof.loop.steps] == [3, 4, 5]
    assert [s.data_wait_ns for s in prof.loop.steps] == [3, 4, 5]
    assert prof.meta.iters == 3 and len(prof.samples["spin"].total_ns) == 3
    assert (prof.loop.skip, prof.loop.warmup, prof.loop.active) == (1, 2, 3)


def test_schedule_with_no_active_step_says_so() -> None:
    model = nn.Linear(4, 4)
    rec = layerprof.Recorder(model, backward=True, schedule=StepSchedule(skip=5))
    with rec:
        model(torch.ones(1, 4)).sum().backward()
        rec.step()
    with pytest.raises(UsageError, match="no step was active"):
        rec.profile()


def test_step_needs_backward_mode() -> None:
    rec = layerprof.Recorder(nn.Linear(2, 2))
    with rec, pytest.raises(UsageError, match="backward=True"):
        rec.step()


def test_ddp_model_is_unwrapped(tmp_path: Path) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("no gloo backend")
    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        net = ResNetLike()
        ddp = DistributedDataParallel(net)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        prof = train(ddp, (torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))), opt, 2)
    finally:
        dist.destroy_process_group()
    assert prof.meta.model == "ResNetLike"
    assert {"stem", "block.conv1", "fc"} <= set(prof.samples)
    assert prof.samples["block.conv1"].backward_total_ns is not None
    check_partition(prof)


# ---- exact partition with a fake clock ---------------------------------------------------


class Costed(nn.Module):
    def __init__(self, clock: FakeClock, forward_ns: int, backward_ns: int) -> None:
        super().__init__()
        self.spin = FakeSpinLayer(clock, forward_ns, backward_ns)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.spin(x)


class FakeSlowSGD(torch.optim.SGD):
    def __init__(self, params: Any, clock: FakeClock, cost: int) -> None:
        super().__init__(params, lr=0.01)
        self.clock, self.cost = clock, cost

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        self.clock.advance(self.cost)
        return super().step(closure)


def test_parts_sum_to_the_step_exactly_with_known_costs() -> None:
    clock = FakeClock()
    model = Costed(clock, forward_ns=1000, backward_ns=2000)
    opt = FakeSlowSGD(model.parameters(), clock, 300)
    rec = layerprof.Recorder(model, backward=True, clock=clock)
    with rec:
        for _ in range(3):
            clock.advance(100)  # the loader
            loss = model(torch.ones(2, 4)).sum()
            clock.advance(50)  # the loss, logging
            loss.backward()
            opt.step()
            opt.zero_grad()
            clock.advance(7)
            rec.step()
    prof = rec.profile()
    assert prof.loop is not None
    for step in prof.loop.steps:
        assert step.parts() == (
            ("data_wait", 100), ("forward", 1000), ("backward", 2000), ("closure", 0),
            ("optimizer", 300), ("rest", 57),
        )  # fmt: skip
        assert step.wall_ns == 3457
    assert prof.samples["spin"].total_ns.tolist() == [1000] * 3
    assert prof.samples["spin"].backward_total_ns.tolist() == [2000] * 3  # type: ignore[union-attr]


def test_partition_counts_overlaps_once() -> None:
    step = StepMarks(
        index=0, start=0, end=100, forwards=[(10, 30), (60, 70)], backwards=[(40, 90)],
        optimizer=[(80, 95)],
    )  # fmt: skip
    parts = partition(step)
    # the forward inside backward counts as backward, the backward inside the optimizer
    # step (a closure) as backward; 30-40 and 95-100 are rest
    assert parts == {
        "data_wait": 10, "forward": 20, "backward": 50, "closure": 0, "optimizer": 5, "rest": 15,
    }  # fmt: skip
    assert sum(parts.values()) == 100
    assert partition(StepMarks(index=0, start=5, end=9)) == dict.fromkeys(STEP_PARTS, 0) | {
        "rest": 4
    }


# ---- nothing left behind --------------------------------------------------------------------


def assert_no_hooks(model: nn.Module) -> None:
    assert not optim_module._global_optimizer_pre_hooks
    assert not optim_module._global_optimizer_post_hooks
    for m in model.modules():
        assert not m._forward_pre_hooks and not m._forward_hooks
        assert "forward" not in m.__dict__


def test_hooks_removed_on_exit_and_on_error() -> None:
    model = ResNetLike()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = layerprof.Recorder(model, backward=True)
    with pytest.raises(RuntimeError, match="boom"), rec:
        model(torch.randn(1, 3, 8, 8)).sum().backward()
        opt.step()
        rec.step()
        raise RuntimeError("boom")
    assert_no_hooks(model)
    opt.step()  # the optimizer works without the hooks


# ---- known costs: busy-waits, within 5 % -------------------------------------------------------
#
# A busy-wait ends at its deadline or, when the thread was descheduled at that moment,
# at its first look at the clock after it: on a loaded machine a 3 ms wait can take 10 ms.
# The truth is therefore what each wait took (its own two clock reads), logged per step.

SPUN: dict[str, int] = {}


def spin(ns: int, label: str) -> None:
    start = time.perf_counter_ns()
    end = start + ns
    while (now := time.perf_counter_ns()) < end:
        pass
    SPUN[label] = SPUN.get(label, 0) + now - start


class Spin(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, label: str, fwd: int, bwd: int) -> torch.Tensor:  # type: ignore[override]
        spin(fwd, f"{label}.forward")
        ctx.label, ctx.bwd = label, bwd
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        spin(ctx.bwd, f"{ctx.label}.backward")
        return grad, None, None, None


class SpinLayer(nn.Module):
    def __init__(self, label: str, forward_ns: int, backward_ns: int) -> None:
        super().__init__()
        self.label, self.fwd, self.bwd = label, forward_ns, backward_ns
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Spin.apply(x * self.w, self.label, self.fwd, self.bwd)


class SlowSGD(torch.optim.SGD):
    def __init__(self, params: Any, cost: int) -> None:
        super().__init__(params, lr=0.01)
        self.cost = cost

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        spin(self.cost, "optimizer")
        return super().step(closure)


def slow_loader(n: int, cost: int) -> Iterator[torch.Tensor]:
    for _ in range(n):
        spin(cost, "data_wait")
        yield torch.ones(2, 4)


def spin_loop(scale: int, steps: int = 12) -> tuple[Profile, list[dict[str, int]]]:
    """The known-cost loop with every busy-wait ``scale`` times its base cost (0: none),
    and what each active step's waits took."""
    model = nn.Sequential(
        SpinLayer("0", 8 * scale, 10 * scale), SpinLayer("1", 12 * scale, 14 * scale)
    )
    opt = SlowSGD(model.parameters(), 10 * scale)
    truth: list[dict[str, int]] = []
    rec = layerprof.Recorder(model, backward=True, schedule=StepSchedule(warmup=1))
    with rec:
        SPUN.clear()
        for x in slow_loader(steps, 10 * scale):
            loss = model(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            spin(10 * scale, "rest")  # logging
            truth.append(dict(SPUN))
            SPUN.clear()
            rec.step()
    for t in truth:
        t["forward"] = t["0.forward"] + t["1.forward"]
        t["backward"] = t["0.backward"] + t["1.backward"]
    return rec.profile(), truth[1:]  # the warm-up step is not kept


def measured(prof: Profile) -> dict[str, tuple[int, ...]]:
    loop = prof.loop
    assert loop is not None
    assert not any(loop.part("closure"))  # no opt.step(closure) here
    out: dict[str, tuple[int, ...]] = {p: loop.part(p) for p in STEP_PARTS if p != "closure"}
    for path in ("0", "1"):
        layer = loop.layer(path)
        assert layer is not None and layer.backward_total_ns is not None
        out[f"{path}.forward"] = layer.forward_total_ns
        out[f"{path}.backward"] = layer.backward_total_ns
    return out


# Real busy-waits against the host clock: on a loaded machine a descheduled wait or hook
# moves a part by more than 5 % (issue 43), so the real-clock check runs in the slow set
# (a quiet machine); test_parts_sum_to_the_step_exactly_with_known_costs is its fake-clock twin.
@pytest.mark.slow
def test_known_costs_within_five_percent() -> None:
    """Busy-waits of 16 to 28 ms in the loader, each layer's forward and backward, the
    optimizer and the loop's own code: each part of the step and each layer's forward
    and backward is the waits' time within 5 % (medians over 11 steps). The parts also
    hold the loop's own code (the loss, zero_grad, the hooks): a loop without waits,
    run just before, measures it, and it is taken out."""
    base = {k: statistics.median(v) for k, v in measured(spin_loop(0)[0]).items()}
    prof, truth = spin_loop(2 * MS)
    assert prof.loop is not None and len(prof.loop.steps) == len(truth) == 11
    errors = {
        k: statistics.median((m - base[k]) / t[k] - 1 for m, t in zip(v, truth, strict=True))
        for k, v in measured(prof).items()
    }
    print("known-cost loop, median error per part:", {k: f"{v:+.2%}" for k, v in errors.items()})
    assert all(abs(v) < 0.05 for v in errors.values()), errors


# ---- JSON ------------------------------------------------------------------------------------


def test_loop_section_round_trips_through_json(tmp_path: Path) -> None:
    clock = FakeClock()
    model = Costed(clock, forward_ns=1000, backward_ns=2000)
    opt = FakeSlowSGD(model.parameters(), clock, 300)
    rec = layerprof.Recorder(model, backward=True, clock=clock, schedule=StepSchedule(skip=1))
    with rec:
        for _ in range(3):
            clock.advance(123_457)
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
            rec.step()
    prof = rec.profile()
    path = prof.save(tmp_path / "p.json")
    back = Profile.load(path)
    assert back.loop == prof.loop
    assert back.loop is not None and back.loop.skip == 1 and len(back.loop.steps) == 2
    data = json.loads(path.read_text())
    assert data["loop"]["steps"][0]["data_wait_ms"] == pytest.approx(0.123457)
    assert data["loop"]["summary_ms"]["backward"]["median"] == pytest.approx(0.002)


def test_files_without_a_loop_still_load(tmp_path: Path) -> None:
    prof = layerprof.Recorder(nn.Linear(2, 2))
    with prof:
        prof.model(torch.ones(1, 2))
    path = prof.profile().save(tmp_path / "p.json")
    assert "loop" not in json.loads(path.read_text())
    assert Profile.load(path).loop is None


# ---- rendering ----------------------------------------------------------------------------------


def known_profile(steps: int = 3) -> Profile:
    clock = FakeClock()
    model = Costed(clock, forward_ns=1 * MS, backward_ns=2 * MS)
    opt = FakeSlowSGD(model.parameters(), clock, MS // 2)
    rec = layerprof.Recorder(model, backward=True, clock=clock)
    with rec:
        for _ in range(steps):
            clock.advance(3 * MS)
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
            rec.step()
    return rec.profile()


def test_console_shows_the_steps_table() -> None:
    from rich.console import Console

    from layerprof.render.console import print_report

    console = Console(record=True, width=120)
    print_report(known_profile(), console)
    text = console.export_text()
    assert "training steps (ms" in text
    for header in ("Data wait", "Forward", "Backward", "Optimizer", "Rest", "Total"):
        assert header in text
    assert "3.000     1.000      2.000       0.500   0.000   6.500" in text
    assert "Bwd total" in text


def test_html_draws_stacked_bars_per_step(tmp_path: Path) -> None:
    page = known_profile().write(tmp_path / "p.html").read_text()
    assert 'id="loop"' in page and "Training steps" in page
    assert '"lp-loop":{"kind":"bars"' in page and '"stack":true' in page


# ---- findings ------------------------------------------------------------------------------------


def fake_loop(waits: list[int], forward_ns: int = MS, backward_ns: int = 2 * MS) -> Profile:
    clock = FakeClock()
    model = Costed(clock, forward_ns=forward_ns, backward_ns=backward_ns)
    rec = layerprof.Recorder(model, backward=True, clock=clock)
    with rec:
        for wait in waits:
            clock.advance(wait)
            model(torch.ones(2, 4)).sum().backward()
            clock.advance(MS // 2)
            rec.step()
    return rec.profile()


def titles(profile: Profile) -> list[str]:
    from layerprof.analysis.diagnose import diagnose

    return [f"{f.severity}: {f.title} [{f.layer}] {f.detail}" for f in diagnose(profile)]


def test_data_bound_steps_are_found_with_their_share() -> None:
    found = [t for t in titles(fake_loop([3 * MS] * 6)) if "data" in t]
    assert len(found) == 1 and found[0].startswith("high: data-bound steps")
    assert "the loader holds 46.2% of each step" in found[0], found[0]
    assert not [t for t in titles(fake_loop([0] * 6)) if "data" in t]


def test_data_wait_too_noisy_to_tell_says_so() -> None:
    found = [t for t in titles(fake_loop([0, 5 * MS, 5 * MS, 5 * MS])) if "data" in t]
    assert len(found) == 1 and found[0].startswith("info: data wait: cannot tell"), found


def test_backward_far_above_twice_the_forward() -> None:
    slow = [t for t in titles(fake_loop([0] * 6, MS, 5 * MS)) if "backward" in t]
    assert len(slow) == 1 and "[spin]" in slow[0] and "5.0x" in slow[0], slow
    assert not [t for t in titles(fake_loop([0] * 6, MS, 2 * MS)) if "backward far" in t]


def test_amp_autocast_and_grad_scaler_in_the_loop() -> None:
    torch.manual_seed(0)
    model = ResNetLike()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        scaler = torch.amp.GradScaler("cpu")
    except (RuntimeError, TypeError, AttributeError):
        pytest.skip("no GradScaler for CPU in this torch")
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))
    rec = layerprof.Recorder(model, backward=True)
    with rec:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            rec.step()
    prof = rec.profile()
    check_partition(prof)
    assert prof.loop is not None and all(s.optimizer_ns > 0 for s in prof.loop.steps)
    assert prof.samples["block.conv1"].backward_total_ns is not None


def test_backward_without_step_calls_says_so() -> None:
    """On the host clock profile() calibrates the hooks' cost, and on a loaded machine that
    calibration can read 0 and add its own note (``overhead-unmeasured``): a fake clock
    (no correction, no calibration) makes the set of notes this test is about exact."""
    model = nn.Linear(4, 4)
    clock = FakeClock()
    rec = layerprof.Recorder(model, backward=True, clock=clock)
    with rec:
        clock.advance(MS)
        model(torch.ones(1, 4)).sum().backward()
    prof = rec.profile()
    assert prof.loop is None and [n.kind for n in prof.notes] == ["no-training-steps"]
    assert "rec.step() was never called" in prof.notes[0].text


def test_a_loop_that_never_runs_the_recorded_models_forward_says_so() -> None:
    """A LightningModule whose training_step calls ``self.net(x)``: the wrapper's own
    forward never runs, so no step sees a forward; the profile says what to record."""

    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    model = Wrapper()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with layerprof.Recorder(model, backward=True) as rec:
        for _ in range(2):
            model.net(torch.randn(2, 4)).sum().backward()
            opt.step()
            rec.step()
    assert "no-model-forward" in [n.kind for n in rec.profile().notes]
    with layerprof.Recorder(model.net, backward=True) as rec:
        for _ in range(2):
            model.net(torch.randn(2, 4)).sum().backward()
            opt.step()
            rec.step()
    prof = rec.profile()
    assert "no-model-forward" not in [n.kind for n in prof.notes]
    assert prof.loop is not None and all(s.forwards == 1 for s in prof.loop.steps)


# ---- issue 43, item 11: a step with many forwards is linear -------------------------------------


def _reference_partition(step: StepMarks) -> dict[str, int]:
    """The partition as it was (each stretch looked through every span: quadratic), the
    specification the sweep must match on steps without a closure."""
    import bisect
    import itertools

    priority = ("backward", "forward", "optimizer")
    lo, hi = step.start, step.end
    spans = {"optimizer": step.optimizer, "backward": step.backwards, "forward": step.forwards}
    cuts = {lo, hi}
    for kind in priority:
        for a, b in spans[kind]:
            cuts.update(min(max(t, lo), hi) for t in (a, b))
    starts = sorted((min(max(a, lo), hi), kind) for kind in priority for a, _ in spans[kind])
    at = [t for t, _ in starts]
    out = dict.fromkeys(STEP_PARTS, 0)
    for a, b in itertools.pairwise(sorted(cuts)):
        kind = next((k for k in priority if any(s <= a and b <= e for s, e in spans[k])), None)
        if kind is None:
            k = bisect.bisect_left(at, b)
            kind = "data_wait" if k < len(starts) and starts[k][1] == "forward" else "rest"
        out[kind] += b - a
    return out


_spans = st.lists(st.tuples(st.integers(-5, 105), st.integers(-5, 105)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    forwards=_spans, backwards=_spans, optimizer=_spans,
    lo=st.integers(0, 20), length=st.integers(0, 90),
)  # fmt: skip
def test_the_sweep_partitions_as_before(
    forwards: list[tuple[int, int]],
    backwards: list[tuple[int, int]],
    optimizer: list[tuple[int, int]],
    lo: int,
    length: int,
) -> None:
    step = StepMarks(
        index=0, start=lo, end=lo + length, forwards=forwards, backwards=backwards,
        optimizer=optimizer,
    )  # fmt: skip
    parts = partition(step)
    assert parts == _reference_partition(step)
    assert sum(parts.values()) == length


def _lines_run(fn: Any, *args: Any) -> int:
    """Python lines executed by ``fn(*args)``: a count of work, the same on any machine."""
    import sys

    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn(*args)
    finally:
        sys.settrace(previous)
    return count


def _step_with_an_evaluation(n: int) -> StepMarks:
    """A training forward, backward and update, then ``n`` evaluation forwards."""
    evals = [(1000 + 10 * i, 1005 + 10 * i) for i in range(n)]
    return StepMarks(
        index=0, start=0, end=2000 + 10 * n, forwards=[(10, 100), *evals],
        backwards=[(150, 400)], optimizer=[(500, 600)],
    )  # fmt: skip


def test_partition_of_a_step_with_many_forwards_is_linear() -> None:
    """An evaluation pass of 8k forwards between two optimizer steps took 6.5 s in
    partition (16k: 24.8 s): each stretch between two marks looked through every span.
    Four times the forwards now cost about four times the lines (before: 15)."""
    small, large = (_lines_run(partition, _step_with_an_evaluation(n)) for n in (400, 1600))
    assert large < 4.5 * small, (small, large)
    parts = partition(_step_with_an_evaluation(1600))
    assert parts == _reference_partition(_step_with_an_evaluation(1600))
    assert parts["forward"] == 90 + 5 * 1600 and parts["backward"] == 250


def test_a_recorded_step_with_many_forwards_is_linear() -> None:
    """The same through the Recorder: a step whose evaluation forwards run with gradients
    on (each forward's graph hooked: the calls' first numbers were listed again per
    forward) and without, reduced by profile(). Linear work gives a ratio under 4 (the
    fixed part shrinks); before, it was 7.9."""

    def record(n: int) -> Profile:
        clock = FakeClock()
        model = Costed(clock, forward_ns=100, backward_ns=1000)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.ones(2, 4)
        with layerprof.Recorder(model, backward=True, clock=clock) as rec:
            model(x).sum().backward()
            opt.step()
            for i in range(n):
                with torch.set_grad_enabled(i % 2 == 0):
                    model(x)
            rec.step()
            return rec.profile()

    record(5)  # what the first recording does once (imports, torch's first calls)
    counts = []
    for n in (200, 800):
        found: list[Profile] = []
        counts.append(_lines_run(lambda n=n, found=found: found.append(record(n))))
        loop = found[0].loop
        assert loop is not None and loop.steps[0].forwards == n + 1
        assert loop.steps[0].forward_ns == 100 * (n + 1) and loop.steps[0].backward_ns == 1000
    assert counts[1] < 4.5 * counts[0], counts
