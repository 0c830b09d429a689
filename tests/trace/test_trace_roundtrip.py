"""Ops-mode capture -> Chrome trace export -> ``layerprof.trace.analyze`` -> Profile.

The exported trace must analyze into the same steps and layer paths as the
live run, so ``layerprof diff live.json trace.json.gz`` aligns layer by layer.
"""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch
from torch import nn

import layerprof
from layerprof.analysis.diff import diff
from layerprof.capture.options import OpOptions, RunOptions
from layerprof.capture.runner import run_model
from layerprof.pivot.profile import Profile
from layerprof.render.chrome import write_chrome_trace
from layerprof.trace import analyze

ITERS = 3


class Block(nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.ReLU()

    def forward(self, x: Any) -> Any:
        return self.act(self.fc(x)) + x


class Net(nn.Module):  # type: ignore[misc]
    """A never-called container (ModuleList), nesting, a head called twice, an unused layer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(16, 16)
        self.unused = nn.Linear(2, 2)

    def forward(self, x: Any) -> Any:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.head(x)).softmax(-1)


def called_paths(model: nn.Module, x: Any) -> list[str]:
    """Paths whose forward runs, in first-call order (independent forward hooks)."""
    seen: list[str] = []
    handles = [
        m.register_forward_pre_hook(lambda *_, p=p: seen.append(p) if p not in seen else None)
        for p, m in model.named_modules()
    ]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def run(tmp_path: Path, **options: Any) -> tuple[nn.Module, Profile, Path, list[str]]:
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(4, 8)
    ops = OpOptions(**options.pop("ops", {}))
    live = run_model(model, (x,), None, RunOptions(ops=ops, iters=ITERS, warmup=1, **options))
    assert live.events is not None
    path = write_chrome_trace(tmp_path / "run.pt.trace.json.gz", live)
    return model, live, path, called_paths(model, x)


def called_rows(p: Profile) -> list[str]:
    """Layer paths that ran, in the profile's order (never-called containers left out)."""
    return [i.path for i in p.layers if i.path in p.samples]


def check_step_tree(p: Profile) -> None:
    """Per complete step: total == self + direct children (layer spans nest exactly)."""
    kids: dict[str | None, list[str]] = {}
    parent_of = {i.path: i.parent for i in p.layers}
    for info in p.layers:
        if info.path in p.samples:
            parent = info.parent
            while parent is not None and parent not in p.samples:  # never-called containers
                parent = parent_of.get(parent)
            kids.setdefault(parent, []).append(info.path)
    assert p.trace.steps is not None
    for path, s in p.samples.items():
        for i in range(len(p.trace.steps.complete)):
            assert 0 <= s.self_ns[i] <= s.total_ns[i], path
            children = sum(p.samples[c].total_ns[i] for c in kids.get(path, []))
            # µs floats with ns digits round to whole ns once per span end: 1 ns per child
            assert abs(s.total_ns[i] - s.self_ns[i] - children) <= len(kids.get(path, [])), (
                path,
                i,
            )


@pytest.fixture(scope="module")
def forward_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[nn.Module, Profile, Path, list[str]]:
    # The trace holds the ranges as recorded; the live run's default correction of the
    # profiler's recording cost (docs/definitions.md, "Ops mode") is not in the file.
    return run(tmp_path_factory.mktemp("fwd"), correct_overhead=False)


def test_export_keeps_steps_on_the_main_thread_and_marks_layerprof(
    forward_run: tuple[nn.Module, Profile, Path, list[str]],
) -> None:
    _, m, path, _ = forward_run
    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    assert doc["layerprof"]["version"] == layerprof.__version__
    assert doc["layerprof"]["model"] == m.meta.model
    assert list(doc["layerprof"]["module_types"]) == [i.path for i in m.layers]
    events = doc["traceEvents"]
    # The wire format spelled out on purpose (not layerprof.traceformat): other tools
    # (TensorBoard, Perfetto, HTA) read these names, so they must not drift with the constants.
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    # torch numbers its own step spans; step 0 is the discarded warm-up step
    assert [s["name"] for s in steps] == [f"ProfilerStep#{i}" for i in range(1, ITERS + 1)]
    assert all(s["cat"] == "user_annotation" and s["ph"] == "X" for s in steps)
    roots = sorted(
        (e for e in events if e.get("cat") == "layerprof_layer" and e["args"]["path"] == ""),
        key=lambda e: e["ts"],
    )
    assert len(roots) == ITERS
    for step, root in zip(steps, roots, strict=True):
        # the thread that ran the model, as torch places its own step spans
        assert (step["pid"], step["tid"]) == (
            root["args"]["source pid"],
            root["args"]["source tid"],
        )
        assert (
            step["ts"] <= root["ts"] and root["ts"] + root["dur"] <= step["ts"] + step["dur"] + 1e-3
        )
    for a, b in itertools.pairwise(steps):
        assert a["ts"] + a["dur"] <= b["ts"]


def test_analyze_builds_the_tree_from_layer_spans(
    forward_run: tuple[nn.Module, Profile, Path, list[str]],
) -> None:
    _, m, path, called = forward_run
    rank = analyze(path).rank()
    assert rank.trace.steps is not None and rank.trace.steps.source == "ProfilerStep"
    assert len(rank.trace.steps.complete) == ITERS == m.meta.iters
    assert rank.trace.source is not None and rank.trace.source.module_source == "layerprof_layer"
    assert called_rows(rank) == called  # module order, as the run's
    info = {i.path: i for i in rank.layers}
    assert info[""].type == "Net"
    assert info["blocks.0.fc"].type == "Linear" and info["blocks.0.fc"].parent == "blocks.0"
    assert info["blocks.0"].parent == "blocks"  # the never-called ModuleList keeps its row
    assert "blocks" not in rank.samples  # ... but no span, no samples
    assert rank.samples["head"].calls == 2 and not rank.samples["head"].calls_vary
    check_step_tree(rank)
    assert rank.trace.source.producer == {"version": layerprof.__version__, "model": "Net"}
    assert any(n.kind == "written-by-layerprof" for n in rank.notes)
    assert not any(n.kind == "no-module-events" for n in rank.notes)
    # the ops are unchanged by the layer lane: ProfilerStep/layers are not ops
    assert not any(o.name.startswith(("ProfilerStep", "layer:")) for o in rank.ops)


def test_trace_profile_matches_the_live_profile(
    forward_run: tuple[nn.Module, Profile, Path, list[str]],
) -> None:
    _, m, path, _ = forward_run
    live = m
    traced = analyze(path).rank()
    assert [(i.path, i.type, i.parent) for i in traced.layers] == [
        (i.path, i.type, i.parent) for i in live.layers
    ]
    assert traced.meta.model == live.meta.model and traced.meta.inputs == live.meta.inputs
    assert traced.meta.threads == live.meta.threads
    assert traced.meta.iters == ITERS
    assert traced.latency_ns is not None and len(traced.latency_ns) == ITERS
    # The same spans: per-iteration samples agree to the ns rounding of the µs floats.
    for p, s in live.samples.items():
        t = traced.samples[p]
        assert t.calls == s.calls, p
        for a, b in ((s.total_ns, t.total_ns), (s.self_ns, t.self_ns)):
            assert len(a) == len(b) == ITERS
            assert all(abs(x - y) <= 8 for x, y in zip(a, b, strict=True)), (p, a, b)
    for root in traced.tree():
        root.self_check(tolerance_ns=ITERS * 8)
    d = diff(live, traced)
    assert d.comparable
    assert not d.added_layers() and not d.removed_layers()
    assert {r.path for r in d.layers} == {i.path for i in live.layers}
    assert all(r.note is None for r in d.layers)  # no type or calls-per-forward changes
    assert {r.status for r in d.layers} == {"same"}
    # Ops are per iteration on both sides, attributed to the same layers.
    assert not d.added_ops() and not d.removed_ops()
    assert {(o.layer, o.name): o.calls for o in traced.ops} == {
        (o.layer, o.name): o.calls for o in live.ops
    }


def test_backward_run_round_trips(tmp_path: Path) -> None:
    _, m, path, called = run(tmp_path, backward=True)
    rank = analyze(path).rank()
    assert rank.trace.steps is not None
    assert rank.trace.steps.source == "ProfilerStep" and len(rank.trace.steps.complete) == ITERS
    assert called_rows(rank) == called
    check_step_tree(rank)
    names = {o.name for o in rank.ops if o.phase == "backward"}
    assert any("Backward" in n for n in names)
    # the backward of each layer, from the trace as from the live run
    assert {p for p, s in rank.samples.items() if s.backward_total_ns is not None} == {
        p for p, s in m.samples.items() if s.backward_total_ns is not None
    }
    d = diff(m, rank)
    assert not d.added_layers() and not d.removed_layers()


def test_schedule_keeps_torchs_own_step_spans(tmp_path: Path) -> None:
    _, m, path, called = run(tmp_path, ops={"schedule": (0, 1, 2, 1)})
    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert steps and not any("layerprof" in s.get("args", {}) for s in steps)  # torch's own
    rank = analyze(path).rank()
    assert rank.trace.steps is not None and rank.trace.steps.source == "ProfilerStep"
    assert len(rank.trace.steps.complete) == 2 == m.samples["head"].total_ns.n
    assert called_rows(rank) == called
    check_step_tree(rank)
    d = diff(m, rank)
    assert not d.added_layers() and not d.removed_layers()


# ---- hand-built: device time per layer, preference over nn.Module spans -------------


def _x(cat: str, name: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1) -> Any:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def _layer(path: str, ts: float, dur: float, name: str | None = None) -> dict[str, Any]:
    ev = _x("layerprof_layer", name or path, ts, dur, pid=9, tid=1)
    ev["args"] = {"path": path, "source pid": 1, "source tid": 1}
    return ev


def _with_args(ev: dict[str, Any], **args: Any) -> dict[str, Any]:
    return {**ev, "args": args}


def cuda_like_trace() -> dict[str, Any]:
    """Two steps of 100 µs; per step (µs from the step start):

    0  ProfilerStep#k           100
    5  layer ""  (Net)           60   self 60 - 40 = 20
    8    nn.Module: Net_0        55   (with_stack events: ignored for the tree)
    10   layer "fc"              40
    12     aten::addmm           30   launches gemm (rt 14..16 -> kernel 20..35, 15 µs)
    70  aten::sum (no layer)     10   launches red (rt 72..74 -> kernel 75..77, 2 µs)
    """
    ev: list[dict[str, Any]] = []
    for k in range(2):
        t = 1000.0 + 100 * k
        c = 10 + 2 * k
        ev += [
            _x("user_annotation", f"ProfilerStep#{k}", t, 100),
            _layer("", t + 5, 60, name="Net"),
            _x("python_function", "nn.Module: Net_0", t + 8, 55),
            _layer("fc", t + 10, 40),
            _with_args(_x("cpu_op", "aten::addmm", t + 12, 30), **{"External id": c}),
            _with_args(_x("cuda_runtime", "cudaLaunchKernel", t + 14, 2), correlation=c),
            _with_args(_x("kernel", "gemm", t + 20, 15, pid=0, tid=7), correlation=c, device=0),
            _with_args(_x("cpu_op", "aten::sum", t + 70, 10), **{"External id": c + 1}),
            _with_args(_x("cuda_runtime", "cudaLaunchKernel", t + 72, 2), correlation=c + 1),
            _with_args(_x("kernel", "red", t + 75, 2, pid=0, tid=7), correlation=c + 1, device=0),
        ]
    ev.append({"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "layers"}})
    return {
        "traceEvents": ev,
        "layerprof": {
            "version": "0.0.test",
            "model": "Net",
            "module_types": {"": "Net", "fc": "Linear", "unused": "Linear"},
        },
    }


def test_layer_spans_give_device_time_and_win_over_nn_module(tmp_path: Path) -> None:
    path = tmp_path / "cuda.json"
    path.write_bytes(orjson.dumps(cuda_like_trace()))
    prof = analyze(path).rank()
    assert prof.trace.source is not None and prof.trace.source.module_source == "layerprof_layer"
    assert set(prof.samples) == {"", "fc"}
    root, fc = prof.samples[""], prof.samples["fc"]
    assert root.total_ns == (60_000, 60_000) and root.self_ns == (20_000, 20_000)
    assert fc.device_total_ns == (15_000, 15_000)  # gemm, launched inside fc
    assert root.device_total_ns == (15_000, 15_000) and root.device_self_ns == (0, 0)
    assert prof.meta.model == "Net"
    assert [(i.path, i.type, i.parent) for i in prof.layers] == [
        ("", "Net", None),
        ("fc", "Linear", ""),
        ("unused", "Linear", ""),
    ]
    assert "unused" not in prof.samples
    # per-iteration ops: 1 call of each per step, attributed to their layers
    assert {(o.layer, o.name): (o.calls, o.device_ns) for o in prof.ops} == {
        ("fc", "aten::addmm"): (1, 15_000),
        ("(unattributed)", "aten::sum"): (1, 2_000),
    }


def test_old_export_without_steps_or_marker(tmp_path: Path) -> None:
    """Layer spans alone: the outermost ones are the steps; no marker, no types."""
    doc = cuda_like_trace()
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not str(e.get("name")).startswith("ProfilerStep")
    ]
    del doc["layerprof"]
    path = tmp_path / "old.json"
    path.write_bytes(orjson.dumps(doc))
    rank = analyze(path).rank()
    assert rank.trace.steps is not None and rank.trace.steps.source == "layerprof_layer"
    assert [s.name for s in rank.trace.steps.steps] == ["Net", "Net"]
    assert rank.trace.source is not None and rank.trace.source.producer is None
    assert {i.path: i.type for i in rank.layers} == {"": "Net", "fc": "layer"}
    prof = Profile.from_dict(rank.to_dict())
    assert [i.path for i in prof.layers] == ["", "fc"]
