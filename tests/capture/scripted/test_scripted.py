"""Per-layer rows for TorchScript modules and torch.export programs."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from layerprof.capture.scripted.profiler import (
    ScriptRows,
    call_graph,
    export_capture,
    hierarchy_segments,
    instrumented_module,
    judge,
    observed_spans,
    script_capture,
)
from layerprof.errors import ModelRunError
from layerprof.load.demo import SmallCNN, TinyTransformer
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta, OpStat
from layerprof.trace.events import EventTables
from layerprof.trace.kineto import tables_from_documents
from layerprof.traceformat import LAYER_RANGE
from tests.support.real_models import ListEncoder, ResNetish, TinyGPT

Rows = tuple[tuple[LayerInfo, ...], dict[str, LayerSamples], tuple[OpStat, ...]]


def script_layer_profile(module: Any, args: tuple[Any, ...], kwargs: Any, *, iters: int) -> Rows:
    """(layers, samples, ops) of a ScriptModule: its rows as the trace engine reads them."""
    rows = script_capture(module, args, kwargs, iters=iters)
    traced = rows.raw.profile()
    return rows.layers, traced.samples, traced.ops


def export_layer_profile(program: Any, args: tuple[Any, ...], kwargs: Any, *, iters: int) -> Rows:
    layers, raw = export_capture(program, args, kwargs, iters=iters)
    traced = raw.profile()
    return layers, traced.samples, traced.ops


def ops_of(ops: tuple[OpStat, ...], layer: str) -> set[str]:
    return {o.name for o in ops if o.layer == layer}


def exact_tree(samples: dict[str, LayerSamples], iters: int) -> None:
    """Per iteration: total == self + sum(children totals), self >= 0."""
    parents = {p: _called_parent(p, samples) for p in samples if p}
    for path, s in samples.items():
        kids = [p for p, parent in parents.items() if parent == path]
        for i in range(iters):
            assert s.total_ns[i] == s.self_ns[i] + sum(samples[k].total_ns[i] for k in kids), path
            assert s.self_ns[i] >= 0


def _called_parent(path: str, samples: dict[str, LayerSamples]) -> str:
    """Nearest ancestor with samples (never-called containers such as ModuleList skipped)."""
    parent = path
    while True:
        parent = parent.rsplit(".", 1)[0] if "." in parent else ""
        if parent in samples:
            return parent


def test_hierarchy_segments() -> None:
    h = "TOP(Net)::forward.features(Sequential)::forward.0(Block)::forward.conv(Conv2d)::forward.SELF(Conv2d)::_conv_forward."
    assert hierarchy_segments(h) == [
        ("features", "Sequential", "forward"), ("0", "Block", "forward"),
        ("conv", "Conv2d", "forward"),
    ]  # fmt: skip
    assert hierarchy_segments("TOP(Net)::forward.1(ReLU)::forward.::relu.") == [
        ("1", "ReLU", "forward")
    ]
    h = "TOP(L)::forward.self_attn(MultiheadAttention)::merge_masks."
    assert hierarchy_segments(h) == [("self_attn", "MultiheadAttention", "merge_masks")]


# ---- TorchScript rows against the eager model's own calls ----------------------------

REAL: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]] = {
    "list_encoder": (ListEncoder, lambda: torch.randn(4, 16, 64)),
    "resnet": (ResNetish, lambda: torch.randn(2, 3, 16, 16)),
    "gpt_sdpa": (TinyGPT, lambda: torch.randint(0, 128, (2, 16))),
    "gpt_mha": (lambda: TinyGPT(mha=True), lambda: torch.randint(0, 128, (2, 16))),
}


def to_torchscript(model: nn.Module, x: torch.Tensor, how: str) -> Any:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarning on the GPT's python-float scale
        return torch.jit.trace(model, x) if how == "trace" else torch.jit.script(model)


def eager_calls(model: nn.Module, x: torch.Tensor) -> Counter[str]:
    """Calls per module path of one eager inference forward. A global hook, because
    a hook on a TransformerEncoderLayer turns its fused fast path off."""
    path_of = {id(m): p for p, m in model.named_modules()}
    seen: Counter[str] = Counter()
    hook = nn.modules.module.register_module_forward_hook(
        lambda m, *_: seen.update([path_of[id(m)]]) if id(m) in path_of else None
    )
    try:
        with torch.inference_mode():
            model(x)
    finally:
        hook.remove()
    return seen


def no_time_lost(rows: ScriptRows, iters: int) -> dict[str, LayerSamples]:
    """Every sampled path has a row, the tree adds up, and the rows' self times sum
    to the root's measured total in every iteration (no time on an unshown path)."""
    samples = rows.raw.profile().samples
    assert set(samples) <= {info.path for info in rows.layers}
    exact_tree(samples, iters)
    for i in range(iters):
        assert sum(s.self_ns[i] for s in samples.values()) == samples[""].total_ns[i]
    return samples


@pytest.mark.parametrize("how", ["trace", "script"])
@pytest.mark.parametrize("case", sorted(REAL))
def test_torchscript_rows_match_eager_calls(case: str, how: str) -> None:
    """ModuleList blocks, a fused TransformerEncoder, in-place residual blocks, a GPT
    stack: every layer is called as often as in eager mode, and no row is left out."""
    torch.manual_seed(0)
    make, make_input = REAL[case]
    model, x = make().eval(), make_input()
    rows = script_capture(to_torchscript(model, x, how), (x,), None, iters=2)
    samples = no_time_lost(rows, 2)
    assert [i.path for i in rows.layers] == [p for p, _ in model.named_modules()]
    expected = eager_calls(model, x)
    got = {p: s.calls for p, s in samples.items() if s.calls}
    assert got == {p: float(n) for p, n in expected.items()}
    assert [n.kind for n in rows.notes] == ["torchscript-method"]


def test_list_encoder_names_module_list_blocks() -> None:
    """The profiler names ``blocks.0`` just ``0``: rows still land on the real paths."""
    model, x = ListEncoder().eval(), torch.randn(4, 16, 64)
    rows = script_capture(to_torchscript(model, x, "trace"), (x,), None, iters=2)
    ops = rows.raw.profile().ops
    assert "aten::linear" in ops_of(ops, "blocks.1.0")
    assert "aten::_transformer_encoder_layer_fwd" in ops_of(ops, "enc.layers.0")
    assert not ops_of(ops, "enc.layers.0.self_attn")  # the fused fast path never calls it


class Twice(nn.Module):
    """One activation module applied twice back to back: the two calls run no op
    between them, so the hierarchy shows one."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.out = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.act(self.fc(x))))


class Looped(nn.Module):
    """A layer applied in a loop: its calls follow each other with nothing between."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = self.fc(x)
        return self.head(x)


@pytest.mark.parametrize(
    ("model", "dropped", "reason"),
    [(Twice(), "act", "calls run back to back"), (Looped(), "fc", "a loop")],
)
def test_calls_the_hierarchy_cannot_separate_are_left_out(
    model: nn.Module, dropped: str, reason: str
) -> None:
    rows = script_capture(torch.jit.script(model), (torch.randn(3, 8),), None, iters=2)
    assert dropped not in {i.path for i in rows.layers}
    assert {"fc", "act", "out", "head"} - {dropped} & {p for p, _ in model.named_modules()} <= {
        i.path for i in rows.layers
    }
    note = next(n for n in rows.notes if n.kind == "torchscript-no-rows")
    assert note.data["paths"] == (dropped,) and reason in note.data["why"]
    no_time_lost(rows, 2)


@pytest.mark.parametrize("saved", [False, True])
def test_frozen_module_has_only_the_root_and_says_why(saved: bool, tmp_path: Any) -> None:
    """In memory, a frozen module's ops still name the inlined modules; loaded from a
    file, they name only the root. Either way: the root row and why."""
    model, x = ResNetish().eval(), torch.randn(1, 3, 16, 16)
    frozen = torch.jit.freeze(torch.jit.script(model))
    if saved:
        torch.jit.save(frozen, tmp_path / "f.ts")
        frozen = torch.jit.load(tmp_path / "f.ts")
    rows = script_capture(frozen, (x,), None, iters=2)
    assert [i.path for i in rows.layers] == [""]
    (note,) = rows.notes
    assert note.kind == "torchscript-no-submodules" and note.data["root"] == "ResNetish"
    assert "torch.jit.freeze" in note.text
    no_time_lost(rows, 2)


def _op(name: str, start: int, end: int, hier: str) -> dict[str, Any]:
    """An op as a ``with_modules`` trace records it (times in µs)."""
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": start,
            "dur": end - start, "args": {"Module Hierarchy": "TOP(TinyGPT)::forward." + hier}}  # fmt: skip


def _one_iteration(ops: list[dict[str, Any]]) -> EventTables:
    """The ops inside one iteration's root ``layer:`` range, read by the trace engine."""
    root = {"ph": "X", "cat": "user_annotation", "name": LAYER_RANGE, "pid": 1, "tid": 1,
            "ts": 0, "dur": 1000}  # fmt: skip
    return tables_from_documents([{"traceEvents": [root, *ops]}], keep_hierarchy=True)


def test_interleaved_ops_drop_the_layer_not_the_rest() -> None:
    """An optimized graph may move a caller's op into a block's run of ops: the block
    then seems called twice; its rows go, its siblings' stay."""
    graph = call_graph(torch.jit.script(TinyGPT(depth=2).eval()))
    block = "0(GPTBlock)::forward."
    tagged = [
        _op("aten::embedding", 10, 20, "wte(Embedding)::forward."),
        _op("aten::layer_norm", 30, 40, block + "ln_1(LayerNorm)::forward."),
        _op("aten::add", 45, 50, ""),  # the root's op, hoisted into block 0
        _op("aten::linear", 60, 70, block + "mlp(MLP)::forward.c_fc(Linear)::forward."),
        _op("aten::layer_norm", 80, 90, "1(GPTBlock)::forward.ln_1(LayerNorm)::forward."),
        _op(
            "aten::linear", 91, 99, "1(GPTBlock)::forward.mlp(MLP)::forward.c_fc(Linear)::forward."
        ),
    ]
    spans, unresolved = observed_spans(_one_iteration(tagged), graph)
    assert not unresolved
    assert sorted(s.path for s in spans if s.path == "h.0") == ["h.0", "h.0"]
    verdict = judge(graph, spans, unresolved, 1)
    assert set(verdict.dropped) == {"h.0"}
    assert {"wte", "h.1", "h.1.ln_1", "h.1.mlp", "h.1.mlp.c_fc"} <= verdict.trusted
    assert not {p for p in verdict.trusted if p.startswith("h.0")}
    # layers of h.1 that ran no op here get zero-time calls, as an Identity does
    assert verdict.empty["h.1.attn"] == [1] and "h.1.attn.c_attn" in verdict.empty
    assert verdict.drops("h.0.mlp.c_fc") and not verdict.drops("h.1.mlp.c_fc")


def test_unknown_module_name_keeps_the_caller_drops_below() -> None:
    graph = call_graph(torch.jit.script(TinyGPT(depth=1).eval()))
    tagged = [
        _op("aten::layer_norm", 30, 40, "0(GPTBlock)::forward.ln_1(LayerNorm)::forward."),
        _op("aten::mul", 50, 60, "0(GPTBlock)::forward.gate(Gate)::forward."),
    ]
    spans, unresolved = observed_spans(_one_iteration(tagged), graph)
    assert set(unresolved) == {"h.0"}
    verdict = judge(graph, spans, unresolved, 1)
    assert "h.0" in verdict.trusted and "h.0" in verdict.below
    assert verdict.drops("h.0.ln_1") and not verdict.drops("h.0")


def test_scripted_cnn_has_layer_rows_with_paths() -> None:
    torch.manual_seed(0)
    scripted = torch.jit.script(SmallCNN(width=4).eval())
    layers, samples, ops = script_layer_profile(
        scripted, (torch.randn(2, 3, 32, 32),), None, iters=2
    )
    types = {info.path: info.type for info in layers}
    assert types[""] == "SmallCNN" and types["features.0.conv"] == "Conv2d"
    assert {"", "features", "features.0", "features.0.conv", "head.1"} <= set(samples)
    assert all(len(s.total_ns) == 2 for s in samples.values())
    assert ops_of(ops, "features.0.conv") & {"aten::conv2d", "aten::mkldnn_convolution"}
    assert "aten::addmm" in ops_of(ops, "head.1")
    assert "forward" not in {o.name for o in ops}
    exact_tree(samples, 2)


def test_exported_transformer_keeps_original_paths() -> None:
    torch.manual_seed(0)
    model = TinyTransformer(vocab=100, dim=32, heads=2, depth=1).eval()
    ids = torch.randint(0, 100, (2, 16))
    program = torch.export.export(model, (ids,))
    layers, samples, ops = export_layer_profile(program, (ids,), None, iters=2)
    info = {i.path: i for i in layers}
    assert info[""].type == "TinyTransformer" and info["layers.0.attn"].type == "SelfAttention"
    assert info["layers.0.attn.qkv"].params == 32 * 96 + 96
    assert {"embed", "layers.0.attn", "layers.0.attn.qkv", "head"} <= set(samples)
    assert "aten::addmm" in ops_of(ops, "layers.0.attn.qkv")
    assert "aten::softmax" in ops_of(ops, "layers.0.attn")
    assert "aten::softmax" not in ops_of(ops, "layers.0.attn.qkv")
    exact_tree(
        {p: s for p, s in samples.items() if p != "_guards_fn"}
        | {"_guards_fn": samples["_guards_fn"]}
        if "_guards_fn" in samples
        else samples,
        2,
    )


def test_instrumented_program_computes_the_same() -> None:
    model = SmallCNN(width=4).eval()
    x = torch.randn(1, 3, 32, 32)
    program = torch.export.export(model, (x,))
    gm = instrumented_module(program)
    assert "layer:features.0.conv" in gm.code
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x))


def test_scripted_model_error_is_a_model_run_error() -> None:
    scripted = torch.jit.script(SmallCNN(width=4).eval())
    with pytest.raises(ModelRunError):
        script_layer_profile(scripted, (torch.randn(2, 5, 32, 32),), None, iters=1)
    assert not torch.autograd.profiler._is_profiler_enabled


def test_torchscript_trace_export_has_layer_lanes(tmp_path) -> None:
    import orjson

    from layerprof.render.chrome import write_chrome_trace

    scripted = torch.jit.script(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    rows = script_capture(scripted, (torch.randn(2, 4),), None, iters=2)
    profile = Profile(meta=Meta(model="m"), layers=rows.layers, events=rows.raw)
    path = write_chrome_trace(tmp_path / "t.json", profile)
    events = orjson.loads(path.read_bytes())["traceEvents"]
    lanes = {e["args"]["path"] for e in events if e.get("cat") == "layerprof_layer"}
    assert {"", "0", "1", "2"} <= lanes


def test_cli_traced_list_encoder_rows(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The issue's example: a traced ModuleList + TransformerEncoder saved and run."""
    import json

    from layerprof.cli import main

    model, x = ListEncoder().eval(), torch.randn(4, 16, 64)
    torch.jit.save(to_torchscript(model, x, "trace"), tmp_path / "m.ts")
    out = tmp_path / "p.json"
    code = main(["run", str(tmp_path / "m.ts"), "--input", "4x16x64", "--warmup", "1",
                 "--iters", "3", "--json", str(out), "--samples"])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 0, err
    assert "Warning" not in err
    data = json.loads(out.read_text())
    assert any(n.startswith("FLOPs not counted: a TorchScript model") for n in data["notes"])
    rows = {layer["path"]: layer for layer in data["layers"]}
    assert {p: rows[p]["calls"] for p in ("blocks.0", "blocks.2.1", "enc", "enc.layers.1")} == {
        "blocks.0": 1, "blocks.2.1": 1, "enc": 1, "enc.layers.1": 1,
    }  # fmt: skip
    assert all(r["self_ms"] >= 0 for r in rows.values())
    # no time on a path without a row: per iteration, the rows' self times add up to
    # the root's measured total (the bug put most of it on paths like "0" and "enc.0")
    sampled = [r["samples"] for r in rows.values() if "samples" in r]
    for i, root_total in enumerate(rows[""]["samples"]["total_ms"]):
        assert sum(s["self_ms"][i] for s in sampled) == pytest.approx(root_total)
    assert not [n for n in data["notes"] if "no rows" in n]


def test_with_modules_deprecation_is_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch builds that deprecate ``with_modules`` warn on every TorchScript run; it is
    the only source of the Module Hierarchy, so the call site filters that one warning."""
    real_init = torch.profiler.profile.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("with_modules"):
            warnings.warn("`with_modules` is deprecated", FutureWarning, stacklevel=2)
        warnings.warn("another profiler warning", FutureWarning, stacklevel=2)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(torch.profiler.profile, "__init__", init)
    scripted = torch.jit.script(nn.Sequential(nn.Linear(4, 4)))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        script_capture(scripted, (torch.randn(2, 4),), None, iters=1)
    messages = [str(w.message) for w in seen if w.category is FutureWarning]
    assert messages == ["another profiler warning"]


class PastParent(nn.Module):
    """The root calls ``seq.0`` itself as well as through ``seq``, and ``only.0``, which
    the profiler names the same: ``0(Linear)``."""

    def __init__(self) -> None:
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.only = nn.Sequential(nn.Linear(8, 8))
        self.other = nn.Sequential(nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.seq(x)
        x = self.seq[0](x)
        x = self.only[0](x)
        return self.other[0](x)


def test_calls_the_tree_cannot_show_are_left_out() -> None:
    rows = script_capture(torch.jit.script(PastParent()), (torch.randn(2, 8),), None, iters=2)
    samples = no_time_lost(rows, 2)
    paths = {i.path for i in rows.layers}
    assert {"seq.0", "only.0"}.isdisjoint(paths)
    assert {"seq", "seq.1", "only", "other", "other.0"} <= paths
    # a container never called itself: its element's rows stand
    assert samples["other.0"].calls == 1 and "other" not in samples
    assert samples["seq"].calls == 1 and samples["seq.1"].calls == 1
    notes = [n for n in rows.notes if n.kind == "torchscript-no-rows"]
    assert any(n.data["paths"] == ("seq.0",) and "past seq" in n.data["why"] for n in notes)
    assert any(
        n.data["paths"] == ("only.0",) and "alike, 0(Linear)" in n.data["why"] for n in notes
    )


def test_cli_frozen_module(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A frozen module has no ``training`` attribute: the run must not trip over it."""
    from layerprof.cli import main

    frozen = torch.jit.freeze(torch.jit.script(ResNetish().eval()))
    torch.jit.save(frozen, tmp_path / "f.ts")
    code = main(["run", str(tmp_path / "f.ts"), "--input", "1x3x16x16", "--warmup", "1",
                 "--iters", "2"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "has no sub-modules left" in " ".join(out.split())


@pytest.mark.parametrize("how", ["trace", "script"])
def test_embedding_shared_by_encoder_and_decoder(how: str) -> None:
    """T5's shared embedding. Scripted, each path calls its own copy: every row stands.
    Traced, the decoder's graph gets the shared module as an argument: the rows that
    may be it go, with a note, the rest stand."""
    from tests.support.real_models import EncoderDecoder

    torch.manual_seed(0)
    model, ids = EncoderDecoder().eval(), torch.randint(0, 64, (2, 6))
    rows = script_capture(to_torchscript(model, ids, how), (ids,), None, iters=2)
    samples = no_time_lost(rows, 2)
    paths = {i.path for i in rows.layers}
    for kept in ("encoder.block.1.0", "decoder.block.0", "decoder.final_layer_norm", "lm_head"):
        assert samples[kept].calls == 1, kept
    embeds = {"shared", "encoder.embed_tokens", "decoder.embed_tokens"}
    if how == "script":
        assert samples["encoder.embed_tokens"].calls == samples["decoder.embed_tokens"].calls == 1
        assert "shared" not in samples and len(rows.notes) == 1
    else:
        (named,) = embeds & set(samples)  # the stack the tracer let name it
        assert samples[named].calls == 1
        assert embeds & paths == {named}
        (note,) = [n for n in rows.notes if n.kind.startswith("torchscript-no-rows")]
        assert "gets as an argument" in note.text and "shared" in note.text


def _run_traced_list_encoder(tmp_path: Any, *flags: str) -> Profile:
    from layerprof.cli import main

    model, x = ListEncoder().eval(), torch.randn(4, 16, 64)
    torch.jit.save(to_torchscript(model, x, "trace"), tmp_path / "m.ts")
    out = tmp_path / "p.json"
    code = main(["run", str(tmp_path / "m.ts"), "--input", "4x16x64", "--warmup", "1",
                 "--iters", "3", "--json", str(out), "--samples", "--quiet", *flags])  # fmt: skip
    assert code == 0
    return Profile.load(out)


def test_torchscript_rows_lose_the_calibrated_recording_cost(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22.7: TorchScript rows come from the profiler and carried its cost (a root
    1.3-1.5x the clean latency). The calibrated per-operator cost is removed as in ops
    mode and kept in the profile for the pass-agreement check: a calibration that
    over-estimates it (1 s per operator) clamps the self time of every layer that runs
    operators to 0."""
    from layerprof.capture.profiling.cost import OpsCorrection

    stalled = OpsCorrection(per_op_ns=1e9, range_inside_ns=5e5, range_leak_ns=5e5)
    monkeypatch.setattr("layerprof.capture.profiling.cost.calibrate_ops", lambda *a, **k: stalled)
    prof = _run_traced_list_encoder(tmp_path)
    o = prof.overhead
    assert o is not None and o.method == "ops" and o.corrected
    # sub-layer spans are read off the ops, not profiler ranges: no per-range cost
    assert o.per_op_ns == 1e9 and o.per_call_ns == 0 and o.ops_per_forward > 50
    assert o.instrumented_ns is not None and o.instrumented_ns > 0
    # the layers that run operators clamp to 0; the interpreter's time between them stays
    for path in ("blocks.0.0", "blocks.1.0", "blocks.2.0"):
        assert prof.samples[path].self_ns.tolist() == [0, 0, 0], path
    assert prof.samples[""].total_ns.median < o.instrumented_ns
    # a profile read back from JSON: its notes are text only (kind "saved")
    measured = "torchscript: the profiler's recording cost was measured"
    assert any(measured in n.text for n in prof.notes)
    plain = _run_traced_list_encoder(tmp_path, "--no-correct")
    assert plain.overhead is not None and not plain.overhead.corrected
    assert min(plain.samples[""].total_ns.tolist()) > 0
    assert any("(not corrected)" in n.text for n in plain.notes)
