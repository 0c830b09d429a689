"""Per-layer rows for TorchScript modules and torch.export programs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from layerprof.demo import SmallCNN, TinyTransformer
from layerprof.errors import ModelRunError
from layerprof.records import LayerSamples, OpStat
from layerprof.scripted import (
    export_layer_profile,
    hierarchy_path,
    instrumented_module,
    script_layer_profile,
)


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


def test_hierarchy_path() -> None:
    h = "TOP(Net)::forward.features(Sequential)::forward.0(Block)::forward.conv(Conv2d)::forward.SELF(Conv2d)::_conv_forward."
    assert hierarchy_path(h) == [
        ("features", "Sequential"), ("features.0", "Block"), ("features.0.conv", "Conv2d"),
    ]  # fmt: skip


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
    from layerprof.scripted import script_capture

    scripted = torch.jit.script(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    _, cap = script_capture(scripted, (torch.randn(2, 4),), None, iters=2)
    path = write_chrome_trace(tmp_path / "t.json", cap)
    events = orjson.loads(path.read_bytes())["traceEvents"]
    lanes = {e["args"]["path"] for e in events if e.get("cat") == "layerprof_layer"}
    assert {"", "0", "1", "2"} <= lanes
