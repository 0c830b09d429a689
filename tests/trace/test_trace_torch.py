"""Traces written by torch.profiler itself (CPU): module tree, steps, backward."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from layerprof.trace import analyze

torch = pytest.importorskip("torch")
nn = torch.nn


class Net(nn.Module):  # type: ignore[misc]
    """Sequential inside, and a head module called twice per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        return self.head(self.head(self.body(x)))


# named by structure (class, and place among same-class siblings), not by the trace's
# instance counters (Net_0.Sequential_0.Linear_1, Net_0.Linear_2)
EXPECTED_PATHS = {
    "Net",
    "Net.Sequential",
    "Net.Sequential.Linear[0]",
    "Net.Sequential.ReLU",
    "Net.Sequential.Linear[1]",
    "Net.Linear",
}


def record(tmp_path: Path, *, with_stack: bool, steps: bool, backward: bool, **kw: Any) -> Path:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(4, 8)
    out = tmp_path / "net.pt.trace.json"
    on_ready: Callable[[Any], None] = lambda p: p.export_chrome_trace(str(out))  # noqa: E731
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=3) if steps else None
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=with_stack,
        schedule=schedule,
        on_trace_ready=on_ready if steps else None,
        **kw,
    ) as prof:
        for _ in range(4 if steps else 2):
            y = model(x)
            if backward:
                y.sum().backward()
            if steps:
                prof.step()
    if not steps:
        prof.export_chrome_trace(str(out))
    assert out.exists()
    return out


@pytest.fixture(scope="module")
def stack_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(
        tmp_path_factory.mktemp("stack"),
        with_stack=True,
        steps=True,
        backward=True,
        profile_memory=True,
        record_shapes=True,
    )


def test_steps_from_schedule(stack_trace: Path) -> None:
    rank = analyze(stack_trace).rank()
    assert rank.trace.steps is not None and rank.trace.steps.source == "ProfilerStep"
    assert len(rank.trace.steps.steps) == 3
    assert all(s.name.startswith("ProfilerStep#") for s in rank.trace.steps.steps)
    assert all(s.dur_ns > 0 for s in rank.trace.steps.steps)
    assert rank.trace.source is not None and rank.trace.source.has_device is False


def test_module_tree(stack_trace: Path) -> None:
    prof = analyze(stack_trace).rank()
    assert prof.trace.source is not None and prof.trace.source.module_source == "nn.Module"
    assert prof.trace.steps is not None
    rows = {r.path: r for r in prof.rows()}
    assert set(rows) == EXPECTED_PATHS
    n_steps = len(prof.trace.steps.complete)
    assert rows["Net.Linear"].calls == 2  # head runs twice per forward (per step)
    assert rows["Net"].calls == 1
    assert rows["Net.Sequential.ReLU"].type == "ReLU"
    children: dict[str | None, list[str]] = {}
    for row in rows.values():
        children.setdefault(row.parent, []).append(row.path)
    for path, s in prof.samples.items():
        # Per step, exactly: total = self + direct children (well-nested spans).
        for i in range(n_steps):
            kids = sum(prof.samples[c].total_ns[i] for c in children.get(path, []))
            assert s.total_ns[i] == s.self_ns[i] + kids
            assert 0 <= s.self_ns[i] <= s.total_ns[i]
    assert prof.layers[0].path == "Net"
    assert prof.samples["Net.Linear"].calls == 2.0
    assert prof.latency_ns is not None and len(prof.latency_ns) == n_steps
    assert prof.meta.model == "net"
    # Ops run inside the module spans, so every module's total covers its ops.
    for root in prof.tree():
        assert root.row.total_ns > 0


def test_backward_and_memory(stack_trace: Path) -> None:
    rank = analyze(stack_trace, group_by_shape=True).rank()
    names = {o.name for o in rank.ops}
    assert any("Backward" in n for n in names)
    assert any(o.input_shapes for o in rank.ops)
    memory = rank.trace.memory
    assert memory is not None
    assert memory.devices[0].device == "cpu"
    assert memory.devices[0].peak_allocated > 0
    assert memory.top_ops


def test_without_stack_uses_steps(tmp_path: Path) -> None:
    path = record(tmp_path, with_stack=False, steps=True, backward=False)
    prof = analyze(path).rank()
    assert prof.trace.source is not None and prof.trace.source.module_source is None
    assert prof.meta.mode == ""  # forward only, and the trace does not say which mode
    assert any(n.kind == "no-module-events" for n in prof.notes)
    (layer,) = prof.layers
    assert layer.path == "ProfilerStep"
    assert prof.samples["ProfilerStep"].total_ns == prof.latency_ns


def test_no_schedule_uses_outermost_modules(tmp_path: Path) -> None:
    path = record(tmp_path, with_stack=True, steps=False, backward=True)
    rank = analyze(path).rank()
    assert rank.trace.steps is not None and rank.trace.steps.source == "nn.Module"
    assert [s.name for s in rank.trace.steps.steps] == ["nn.Module: Net_0"] * 2
    assert {r.path for r in rank.rows()} == EXPECTED_PATHS


class SmallCNN(nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten()
        )
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: Any) -> Any:
        return self.head(self.body(x))


@pytest.fixture(scope="module")
def training_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """Two SGD steps of a CNN with BatchNorm (L2 term: sum -> sum dispatches), the
    optimizer's step inside the profiled region, then a TransformerEncoder forward."""
    torch.manual_seed(0)
    cnn = SmallCNN()
    opt = torch.optim.SGD(cnn.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x, y, seq = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)), torch.randn(2, 5, 32)
    out = tmp_path_factory.mktemp("train") / "train.pt.trace.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(cnn(x), y)
            loss = loss + 1e-4 * sum(p.pow(2).sum() for p in cnn.parameters()) / 2.0
            loss.backward()
            opt.step()
        with torch.no_grad():
            encoder(seq)
    prof.export_chrome_trace(str(out))
    return out, prof.key_averages()


def test_operator_table_equals_key_averages(training_trace: tuple[Path, Any]) -> None:
    path, averages = training_trace
    rank = analyze(path).ranks[0]
    ours: dict[str, list[int]] = {}  # over the whole trace, forward and backward, like torch
    for o in rank.ops:
        assert o.samples is not None
        acc = ours.setdefault(o.name, [0, 0, 0])
        acc[0] += sum(o.samples.calls)
        acc[1] += sum(o.samples.total_ns)
        acc[2] += sum(o.samples.self_ns)
    theirs = {e.key: e for e in averages if e.key.startswith("aten::")}
    assert len(theirs) > 30
    for name, e in theirs.items():
        calls, total_ns, self_ns = ours[name]
        assert calls == e.count, name
        assert total_ns / 1e3 == pytest.approx(e.cpu_time_total, rel=0.01, abs=0.002), name
        assert self_ns / 1e3 == pytest.approx(e.self_cpu_time_total, rel=0.01, abs=0.002), name
    # The case that needs torch's merge rule is really in this trace: an op whose
    # only child op has its own name (aten::sum -> aten::sum).
    raw = orjson.loads(path.read_bytes())["traceEvents"]
    ops = sorted(
        (e for e in raw if e.get("cat") == "cpu_op"), key=lambda e: (e["tid"], e["ts"], -e["dur"])
    )
    spans = [(e["tid"], e["ts"], e["ts"] + e["dur"], e["name"]) for e in ops]
    nested_same = sum(
        1
        for i, (tid, s, end, name) in enumerate(spans[1:], 1)
        if (spans[i - 1][0], spans[i - 1][3]) == (tid, name) and spans[i - 1][2] >= end
    )
    assert nested_same >= 4


class Block(nn.Module):  # type: ignore[misc]
    """A ResNet basic block: two convolutions of one class side by side, a residual."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: Any) -> Any:
        return torch.relu(self.conv2(torch.relu(self.bn(self.conv1(x)))) + x)


class TinyResNet(nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.layer1 = nn.Sequential(Block(4), Block(4))
        self.layer2 = nn.Sequential(Block(4))
        self.fc = nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.fc(self.layer2(self.layer1(self.stem(x))).mean((2, 3)))


def _train_trace(out: Path, *, augment: bool) -> Path:
    """A training loop traced with_stack=True; ``augment`` runs a Conv2d-in-Sequential
    of its own before the model each step, which shifts every Conv2d_k and
    Sequential_k counter of the model's spans."""
    torch.manual_seed(0)
    model, x = TinyResNet(), torch.randn(2, 3, 8, 8)
    pre = nn.Sequential(nn.Conv2d(3, 3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=2)
    with torch.profiler.profile(
        with_stack=True, schedule=schedule, on_trace_ready=lambda p: p.export_chrome_trace(str(out))
    ) as prof:
        for _ in range(3):
            with torch.no_grad():
                inp = pre(x) if augment else x
            with torch.profiler.record_function("loss.fn"):
                loss = model(inp).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return out


def test_two_traces_of_one_model_diff_as_the_same_model(tmp_path: Path) -> None:
    """Issue 22.9: the instance counters differ between the traces (Conv2d_1 in one is
    Conv2d_2 in the other); layers are matched by structure, every one on both sides."""
    from layerprof.analysis.diff import diff

    a = analyze(_train_trace(tmp_path / "a.json", augment=False)).rank()
    b = analyze(_train_trace(tmp_path / "b.json", augment=True)).rank()
    raw = orjson.loads((tmp_path / "b.json").read_bytes())["traceEvents"]
    assert "nn.Module: Conv2d_1" in {e.get("name") for e in raw}  # the model's stem here
    model_paths = {r.path for r in a.rows()}
    assert "Net" not in model_paths and "TinyResNet.Sequential[0].Block[1].Conv2d[1]" in model_paths
    assert "TinyResNet.Conv2d" in model_paths and "TinyResNet.Sequential[1].Block.BatchNorm2d" in (
        model_paths
    )
    assert model_paths <= {r.path for r in b.rows()}  # b also has the augment's Sequential
    d = diff(a, b)
    assert d.comparable
    matched = {x.path for x in d.layers if x.change.base_ns and x.change.new_ns}
    assert model_paths <= matched
    # a training trace is not said to have run in eval mode (issue 22.8)
    assert a.meta.mode == "train" and b.meta.mode == "train"
    # the optimizer's and the user's record_function spans keep their real names
    names = {x.name for x in a.trace.annotations}
    assert "Optimizer.step#SGD.step" in names and "loss.fn" in names
