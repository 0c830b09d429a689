"""Ops mode: torch.profiler ops attributed to exact layer paths, on real models."""

from __future__ import annotations

import contextlib
import re
import statistics
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from rich.console import Console
from torch import nn

from layerprof.capture.options import OpOptions
from layerprof.capture.profiling import profiler as opcapture
from layerprof.capture.profiling.profiler import UNATTRIBUTED, capture_ops, profile_from_capture
from layerprof.errors import ModelRunError, UsageError
from layerprof.load.demo import SmallCNN, TinyTransformer
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import OpStat, merge_layers
from layerprof.render.console.ops import render_ops
from layerprof.trace.kineto import tables_from_documents
from layerprof.trace.reduce import reduce
from layerprof.traceformat import STEP_PREFIX
from tests.support import zoo_models as zoo


def capture(model: nn.Module, *args: Any, iters: int = 2, **kw: Any) -> Profile:
    """An ops-mode capture, as the trace engine attributes it (layers, ops, samples)."""
    options = kw.pop("options", OpOptions())
    raw = capture_ops(
        model.eval(), args, None, iters=iters, device="cpu", options=options,
        grad_ctx_factory=torch.inference_mode, **kw,
    )  # fmt: skip
    return profile_from_capture(model, raw)


def names(ops: tuple[OpStat, ...], layer: str, phase: str = "forward") -> set[str]:
    return {o.name for o in ops if o.layer == layer and o.phase == phase}


def iterations(p: Profile) -> int:
    return max(s.total_ns.n for s in p.samples.values())


@pytest.fixture(scope="module")
def transformer_capture() -> tuple[nn.Module, Profile]:
    torch.manual_seed(0)
    model = TinyTransformer(vocab=100, dim=32, heads=2, depth=1)
    return model, capture(model, torch.randint(0, 100, (2, 16)), iters=3)


def test_ops_listed_under_a_layer_are_the_ops_it_runs(
    transformer_capture: tuple[nn.Module, Profile],
) -> None:
    _, cap = transformer_capture
    qkv = names(cap.ops, "layers.0.attn.qkv")
    assert {"aten::linear", "aten::addmm"} <= qkv
    # softmax is called functionally in SelfAttention.forward: the parent's op
    attn = names(cap.ops, "layers.0.attn")
    assert "aten::softmax" in attn and "aten::bmm" in attn
    assert "aten::softmax" not in qkv | names(cap.ops, "layers.0.attn.proj")
    assert "aten::addmm" not in attn  # the projections' matmuls belong to the children
    assert "aten::native_layer_norm" in names(cap.ops, "layers.0.norm1")
    assert "aten::embedding" in names(cap.ops, "embed")
    assert "aten::mean" in names(cap.ops, "")  # functional op in the root's forward
    assert iterations(cap) == 3
    assert all(o.device_ns is None for o in cap.ops)  # CPU: no device column, not zero


def test_cnn_ops_by_layer() -> None:
    torch.manual_seed(0)
    cap = capture(SmallCNN(width=4), torch.randn(2, 3, 32, 32))
    assert "aten::conv2d" in names(cap.ops, "features.0.conv")
    assert "aten::batch_norm" in names(cap.ops, "features.0.bn")
    assert names(cap.ops, "features.0.act") & {"aten::relu_", "aten::relu"}
    assert "aten::max_pool2d" in names(cap.ops, "features.0.pool")
    assert "aten::addmm" in names(cap.ops, "head.1")


def test_layer_self_time_is_its_ops_plus_python_gap(
    transformer_capture: tuple[nn.Module, Profile],
) -> None:
    """Exact: ops' self times in a layer sum to at most the layer's self time (same
    clock, ops lie inside the layer range). Tolerance for the rest, the Python gap
    (hooks, attribute lookups, view bookkeeping): at most 100 µs per call + 50 %."""
    _, cap = transformer_capture
    samples = cap.samples
    checked = 0
    for path, s in samples.items():
        gaps, selfs = [], []
        for i in range(iterations(cap)):
            ops_self = sum(
                o.samples.self_ns[i] for o in cap.ops if o.layer == path and o.samples is not None
            )
            layer_self = s.self_ns[i]
            assert ops_self <= layer_self, (path, i)  # the same clock, per iteration: exact
            gaps.append(layer_self - ops_self)
            selfs.append(layer_self)
        if path.endswith(("qkv", "proj", "norm1", "norm2")) or path == "head":
            # the Python between operators is small: on the median iteration, as one
            # stall of a loaded machine may land between two operators of any one
            gap, layer_self = statistics.median(gaps), statistics.median(selfs)
            assert gap <= 100_000 * s.calls + 0.5 * layer_self, (path, gaps, selfs)
            checked += 1
    assert checked >= 5


def test_layer_samples_keep_the_tree_invariant(
    transformer_capture: tuple[nn.Module, Profile],
) -> None:
    """Per iteration, exactly: total == self + sum(children totals) and self >= 0.
    (Medians over iterations need not add up; the runner's tests cover those.)"""
    _, cap = transformer_capture
    samples = cap.samples
    assert {r.path for r in cap.rows() if r.calls} == set(samples)
    children: dict[str, list[str]] = {}
    for path in samples:
        if path:
            parent = path.rsplit(".", 1)[0] if "." in path else ""
            while parent not in samples:  # skip never-called containers (ModuleList)
                parent = parent.rsplit(".", 1)[0] if "." in parent else ""
            children.setdefault(parent, []).append(path)
    for path, s in samples.items():
        for i in range(iterations(cap)):
            kids = sum(samples[c].total_ns[i] for c in children.get(path, []))
            assert s.total_ns[i] == s.self_ns[i] + kids, (path, i)
            assert s.self_ns[i] >= 0


def test_flat_ops_like_key_averages(transformer_capture: tuple[nn.Module, Profile]) -> None:
    _, cap = transformer_capture
    merged = {o.name: o for o in merge_layers([o for o in cap.ops if o.phase == "forward"])}
    per_layer_addmm = [o for o in cap.ops if o.name == "aten::addmm"]
    assert merged["aten::addmm"].calls == sum(o.calls for o in per_layer_addmm) == 5
    assert all(o.layer is None and o.input_shapes is None for o in merged.values())


def test_shared_layer_and_functional_model() -> None:
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.fc(x)))

    cap = capture(Shared(), torch.randn(2, 8))
    addmm = [o for o in cap.ops if o.name == "aten::addmm"]
    assert [(o.layer, o.calls) for o in addmm] == [("fc", 2)]
    assert "aten::relu" in names(cap.ops, "")
    assert cap.samples["fc"].calls == 2

    cap = capture(zoo.Functional(), torch.randn(2, 4, 16))
    assert {"aten::softmax", "aten::matmul"} <= names(cap.ops, "")
    assert "aten::softmax" not in names(cap.ops, "fc")


def test_record_shapes_groups_by_shape() -> None:
    cap = capture(
        nn.Sequential(nn.Linear(4, 6)), torch.randn(3, 4), options=OpOptions(record_shapes=True)
    )
    addmm = [o for o in merge_layers(cap.ops) if o.name == "aten::addmm"]
    assert addmm and addmm[0].input_shapes is not None and "[3, 4]" in addmm[0].input_shapes


def test_schedule_records_active_steps_only() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    cap = capture(model, torch.randn(1, 4), iters=5, options=OpOptions(schedule=(1, 1, 2, 1)))
    assert iterations(cap) == 2
    assert cap.samples["0"].calls == 1
    with pytest.raises(UsageError, match="at least 6 iterations"):
        capture(model, torch.randn(1, 4), iters=5, options=OpOptions(schedule=(2, 2, 2, 1)))
    with pytest.raises(UsageError, match="active >= 1"):
        capture(model, torch.randn(1, 4), iters=5, options=OpOptions(schedule=(0, 0, 0, 1)))


def test_unsupported_option_is_a_clear_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opcapture, "supported_profiler_args", lambda: {"activities", "schedule"})
    with pytest.raises(UsageError, match="--with-flops is not supported by torch"):
        capture(nn.Linear(2, 2), torch.randn(1, 2), options=OpOptions(with_flops=True))


def test_model_error_names_layer_stops_profiler_and_removes_hooks() -> None:
    model = zoo.Raises().train()
    with pytest.raises(ModelRunError) as info:
        capture(model, torch.zeros(2, 4))
    assert info.value.layer == "block2.1"
    # (torch 2.15 names the op first: "addmm: mat1 and mat2 ...")
    assert re.match(
        r"block2\.1 \(Linear\): (addmm: )?mat1 and mat2 shapes cannot be multiplied",
        str(info.value),
    )
    assert not torch.autograd.profiler._is_profiler_enabled
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    # a later capture works: no range was left open
    cap = capture(nn.Linear(4, 2), torch.zeros(1, 4))
    assert "aten::addmm" in names(cap.ops, "")


def test_all_options_together_run() -> None:
    opts = OpOptions(record_shapes=True, profile_memory=True, with_stack=True, with_flops=True)
    cap = capture(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4), options=opts)
    assert {"aten::linear", "aten::addmm"} <= names(cap.ops, "0")
    assert not any(o.name.startswith(("[memory]", "nn.Module:")) for o in cap.ops)
    assert cap.events is not None
    assert any(ev.get("name") == "[memory]" for ev in cap.events.trace_events)


def test_backward_ops_by_sequence_number(transformer_capture: tuple[nn.Module, Profile]) -> None:
    model, _ = transformer_capture
    cap = capture(model.train(), torch.randint(0, 100, (2, 16)), backward=True)
    bwd = [o for o in cap.ops if o.phase == "backward"]
    assert any(
        o.name == "autograd::engine::evaluate_function: AddmmBackward0"
        for o in bwd
        if o.layer == "layers.0.attn.qkv"
    )
    assert any("SoftmaxBackward" in o.name for o in bwd if o.layer == "layers.0.attn")
    assert any(o.layer == UNATTRIBUTED and "AccumulateGrad" in o.name for o in bwd)
    for path, module in model.named_modules():
        if any(True for _ in module.parameters(recurse=False)):
            s = cap.samples[path]
            assert s.backward_self_ns is not None and max(s.backward_self_ns) > 0, path
    # grads the user had are back, and forward ops are unchanged by --backward
    assert all(p.grad is None for p in model.parameters())
    assert "aten::addmm" in names(cap.ops, "layers.0.attn.qkv")


class MaskedEmbedding(nn.Module):
    """Token ids in, as BERT: a padding mask is made from the ids before the lookup, so
    ops that create no graph node record the number the embedding's node gets."""

    def __init__(self) -> None:
        super().__init__()
        self.word = nn.Embedding(100, 16)
        self.fc = nn.Linear(16, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = (ids != 0).unsqueeze(-1)
        return self.fc(self.word(ids)) * mask


def test_embedding_fed_the_model_input_keeps_its_backward() -> None:
    """Issue 22.6: the embedding's backward node shares its sequence number with the
    mask's ops (no grad-requiring input) in the root; it was left unattributed."""
    model = MaskedEmbedding()
    cap = capture(model.train(), torch.randint(1, 100, (2, 8)), backward=True)
    word = names(cap.ops, "word", "backward")
    assert "autograd::engine::evaluate_function: EmbeddingBackward0" in word
    assert not any("EmbeddingBackward" in n for n in names(cap.ops, UNATTRIBUTED, "backward"))
    s = cap.samples["word"]
    assert s.backward_self_ns is not None and min(s.backward_self_ns) > 0
    # the mask's MulBackward0 is the root's own, the loss's SumBackward0 nobody's
    assert "autograd::engine::evaluate_function: MulBackward0" in names(cap.ops, "", "backward")
    assert "autograd::engine::evaluate_function: SumBackward0" in names(
        cap.ops, UNATTRIBUTED, "backward"
    )


def _span(cat: str, name: str, ts_ns: int, dur_ns: int, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1,
            "ts": ts_ns / 1000, "dur": dur_ns / 1000, "args": args}  # fmt: skip


def test_device_times_attributed_by_correlation() -> None:
    """A synthetic CUDA step: kernels link to their launch by correlation id, or to
    their op by External id when the launch call is missing."""
    doc = {
        "traceEvents": [
            _span("user_annotation", f"{STEP_PREFIX}1", 0, 1000),
            _span("cpu_op", "layer:", 0, 1000),
            _span("cpu_op", "layer:fc", 100, 800),
            _span("cpu_op", "aten::linear", 200, 600, **{"External id": 7}),
            _span("cpu_op", "aten::addmm", 300, 400, **{"External id": 8}),
            _span("cuda_runtime", "cudaLaunchKernel", 400, 50, correlation=9),
            {**_span("kernel", "gemm", 5000, 300, correlation=9, device=0, stream=7), "pid": 0},
            {**_span("kernel", "bias", 5300, 50, device=0, stream=7, **{"External id": 7}),
             "pid": 0},
        ]
    }  # fmt: skip
    p = reduce(tables_from_documents([doc]), whole_steps=True)
    ops = {o.name: o for o in p.ops}
    assert ops["aten::addmm"].device_ns == 300
    assert ops["aten::linear"].device_ns == 350  # inclusive, like key_averages' device total
    # the launch call is the runtime's time, not addmm's own (as in key_averages)
    assert ops["aten::addmm"].self_ns == 350 and ops["aten::linear"].self_ns == 200
    assert ops["aten::addmm"].layer == "fc"
    assert p.samples["fc"].device_self_ns == [350] and p.samples[""].device_total_ns == [350]
    assert p.samples[""].device_self_ns == [0]


def test_render_ops(transformer_capture: tuple[nn.Module, Profile]) -> None:
    _, cap = transformer_capture
    console = Console(width=140, record=True)
    render_ops(cap.ops, console, top=3, sort="self", layers=2)
    text = console.export_text()
    assert "operators (all layers)" in text and text.count("operators in ") == 2
    assert "Device" not in text


@contextlib.contextmanager
def no_fast_range(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delattr(torch._C._profiler, "_RecordFunctionFast", raising=False)
    yield


def test_fallback_record_function(monkeypatch: pytest.MonkeyPatch) -> None:
    with no_fast_range(monkeypatch):
        cap = capture(nn.Sequential(nn.Linear(4, 4)), torch.randn(1, 4))
    assert "aten::addmm" in names(cap.ops, "0")


@pytest.mark.cuda
def test_cuda_kernels_per_layer() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU()).cuda()
    cap = profile_from_capture(model, capture_ops(
        model, (torch.randn(8, 64, device="cuda"),), None, iters=2, device="cuda",
        options=OpOptions(), grad_ctx_factory=torch.inference_mode,
    ))  # fmt: skip
    linear = [o for o in cap.ops if o.layer == "0" and o.name == "aten::addmm"]
    assert linear and (linear[0].device_ns or 0) > 0
    assert (cap.samples["0"].device_total_ns or (0,))[0] > 0


def test_schedule_with_repeats_keeps_every_cycle(tmp_path) -> None:
    from layerprof.render.chrome import write_chrome_trace, write_tensorboard_dir

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    cap = capture(model, torch.randn(1, 4), iters=8, options=OpOptions(schedule=(1, 1, 2, 2)))
    assert iterations(cap) == 4  # two cycles of two active steps
    samples = cap.samples
    assert samples["0"].calls == 1 and not samples["0"].calls_vary
    assert all(t > 0 for t in samples["0"].total_ns)
    write_chrome_trace(tmp_path / "t.json", cap)  # both exports read the cycles' results
    write_tensorboard_dir(tmp_path / "tb", cap)


def test_error_caught_inside_forward_keeps_ops_with_the_right_layer() -> None:
    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("nope")

    class Caught(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bad = Bad()
            self.b = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with contextlib.suppress(RuntimeError):
                x = self.bad(x)
            return self.b(torch.softmax(x, -1))

    cap = capture(Caught(), torch.randn(2, 8), iters=3)
    layer_of = {o.name: o.layer for o in cap.ops}
    assert layer_of["aten::softmax"] == ""
    assert layer_of["aten::addmm"] == "b"
    assert cap.samples["b"].calls == 1 and cap.samples["bad"].calls == 1
    for root in cap.tree():  # the failed call closed its range: b is the root's child
        root.self_check(tolerance_ns=1e-6)
        assert {c.row.path for c in root.children} == {"bad", "b"}


def test_torch_without_event_kinds_reads_the_chrome_export(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch 2.11's profiler events have no activity_type() (found on a real GPU): the
    capture then reads its cycles' Chrome export, and attributes the same ops and times."""
    torch.manual_seed(0)
    model = TinyTransformer(vocab=100, dim=32, heads=2, depth=1).train()
    options = OpOptions(
        record_shapes=True, profile_memory=True, with_flops=True, schedule=(0, 1, 2, 2)
    )
    raw = capture_ops(
        model, (torch.randint(0, 100, (2, 16)),), None, iters=6, device="cpu",
        options=options, backward=True,
    )  # fmt: skip
    direct = profile_from_capture(model, raw)
    monkeypatch.setattr(opcapture, "events_carry_kinds", lambda: False)
    exported = profile_from_capture(model, opcapture.RawTrace(
        results=raw.results, device="cpu", cycles=raw.cycles,
        keep_shapes=raw.keep_shapes, profile_memory=raw.profile_memory,
    ))  # fmt: skip

    def ops(p: Profile) -> list[tuple[str, str, str, float, float | None]]:
        return sorted((o.layer or "", o.phase, o.name, o.calls, o.flops) for o in p.ops)

    def shaped(p: Profile) -> set[tuple[str, str, str, str]]:
        return {(o.layer or "", o.phase, o.name, o.input_shapes) for o in p.ops if o.input_shapes}

    assert ops(exported) == ops(direct) and len(direct.ops) > 10
    assert sum(o.flops or 0 for o in direct.ops) > 0  # the estimates came through
    # the export also writes shapes the in-memory events leave out (all-scalar inputs,
    # tensor lists): every shape those give is there
    assert shaped(direct) <= shaped(exported) and len(shaped(direct)) > 10
    assert exported.samples.keys() == direct.samples.keys()
    for path, s in direct.samples.items():
        e = exported.samples[path]
        assert (e.calls, e.total_ns.n) == (s.calls, s.total_ns.n) == (e.calls, 4)
        # the export writes microseconds with 3 decimals: a nanosecond of rounding each end
        assert all(abs(a - b) <= 2 for a, b in zip(e.total_ns, s.total_ns, strict=True))
        assert all(abs(a - b) <= 2 for a, b in zip(e.self_ns, s.self_ns, strict=True))
    assert raw.peak_bytes() is not None
