"""Which spans are steps when a trace has no ProfilerStep, and saying which rule chose."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from layerprof.pivot.notes import texts
from layerprof.pivot.sections.trace import STEP_DEFINITIONS
from layerprof.trace import analyze
from layerprof.trace.steps import FRAMEWORK_ANNOTATION
from layerprof.traceformat import STEP_PREFIX


def span(cat: str, name: str, ts: float, dur: float, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            **extra}  # fmt: skip


def write(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    return path


def train(tmp_path: Path, *, wrap: bool, with_stack: bool = False) -> Path:
    """Three SGD iterations profiled without prof.step() (so no ProfilerStep spans)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    out = tmp_path / "train.json"
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], with_stack=with_stack
    ) as prof:
        for _ in range(3):
            with torch.profiler.record_function("iteration") if wrap else _nothing():
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    prof.export_chrome_trace(str(out))
    return out


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_optimizer_spans_are_never_steps(tmp_path: Path) -> None:
    """A training loop without prof.step(): Optimizer.zero_grad / Optimizer.step
    record_function spans (0.2 ms against whole iterations) used to be the steps."""
    rank = analyze(train(tmp_path, wrap=False)).ranks[0]
    assert rank.trace.steps.source == "trace"
    assert [s.name for s in rank.trace.steps.steps] == ["trace"]
    (why,) = [n for n in rank.notes if n.kind == "framework-annotations"]
    names = why.data["names"]
    assert "Optimizer.step#SGD.step" in names and "Optimizer.zero_grad#SGD.zero_grad" in names


def test_a_user_span_around_each_iteration_is_the_step(tmp_path: Path) -> None:
    rank = analyze(train(tmp_path, wrap=True)).ranks[0]
    assert rank.trace.steps.source == "record_function"
    steps = rank.trace.steps.steps
    assert [s.name for s in steps] == ["iteration"] * 3
    (optimizer,) = [r for r in rank.trace.annotations if r.name.startswith("Optimizer.step")]
    # each step holds its iteration's optimizer step, and more
    per_step = rank.samples[optimizer.path].total_ns  # the annotation tree is the layer tree
    assert all(0 < o < s.dur_ns for o, s in zip(per_step, steps, strict=True))
    note = f"no ProfilerStep spans: steps are the {STEP_DEFINITIONS['record_function']}"
    assert note in texts(rank.notes)
    assert any(n.kind == "step-coverage" for n in rank.notes)


def test_forward_passes_say_how_much_they_cover(tmp_path: Path) -> None:
    rank = analyze(train(tmp_path, wrap=False, with_stack=True)).ranks[0]
    assert rank.trace.steps.source == "nn.Module"
    assert len(rank.trace.steps.steps) == 3
    (cover,) = [n for n in rank.notes if n.kind == "step-coverage"]
    assert 0 < cover.data["share"] < 1  # forward only: backward and the optimizer are outside


def test_spans_covering_little_are_not_steps(tmp_path: Path) -> None:
    events = [
        span("user_annotation", "data_load", 0, 5),
        span("cpu_op", "aten::mm", 10, 90),
        span("user_annotation", "data_load", 100, 5),
        span("cpu_op", "aten::mm", 110, 90),
    ]
    rank = analyze(write(tmp_path, events)).ranks[0]
    assert rank.trace.steps.source == "trace"
    (why,) = [n for n in rank.notes if n.kind == "annotations-not-steps"]
    assert why.data["names"] == "data_load" and round(why.data["share"], 2) == 0.05


@pytest.mark.parametrize(
    "name",
    [
        "Optimizer.step#Adam.step",
        "Optimizer.zero_grad#SGD.zero_grad",
        "## forward ##",
        "## PooledEmbeddingsAwaitable wait() ##",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        "DistributedDataParallel.forward",
        "nccl:all_reduce",
        "hccl:all_to_all",
        "gloo:barrier",
    ],
)
def test_framework_annotations(name: str) -> None:
    assert FRAMEWORK_ANNOTATION.match(name)


@pytest.mark.parametrize("name", ["train_step", "iteration", "[param|cuda]", "dhen_layer_0"])
def test_user_annotations(name: str) -> None:
    assert not FRAMEWORK_ANNOTATION.match(name)


def test_gpu_profiler_steps_when_they_are_the_only_markers(tmp_path: Path) -> None:
    def gpu(cat: str, name: str, ts: float, dur: float) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                "args": {"device": 0, "stream": 7}}  # fmt: skip

    events = [span("user_annotation", "Optimizer.step#SGD.step", 0, 5)]
    for i, t0 in enumerate((0, 100, 200)):
        events += [
            span("cpu_op", "aten::mm", t0 + 1, 30),
            gpu("gpu_user_annotation", f"{STEP_PREFIX}{i + 1}", t0 + 10, 80),
            gpu("kernel", "gemm", t0 + 20, 40),
        ]
    rank = analyze(write(tmp_path, events)).ranks[0]
    assert rank.trace.steps.source == "GPU ProfilerStep"
    assert [(s.name, s.dur_ns) for s in rank.trace.steps.steps] == [
        (f"ProfilerStep#{i}", 80_000) for i in (1, 2, 3)
    ]
    (device,) = rank.trace.devices
    assert device.window_ns == 240_000 and device.busy_in_window_ns == 120_000
    assert STEP_DEFINITIONS["GPU ProfilerStep"] in " ".join(texts(rank.notes))
    assert any(
        n.kind == "steps-fallback" and n.data["source"] == "GPU ProfilerStep" for n in rank.notes
    )
