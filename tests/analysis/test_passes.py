"""The two passes of a run: the same code (fused fast paths), numbers that agree
(contention), and what the report says when they do not."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from rich.console import Console
from torch import nn

import layerprof
from layerprof.analysis.diagnose import checks, diagnose
from layerprof.analysis.passes import pass_gap
from layerprof.capture.fastpath import watch_clean_path
from layerprof.cli import main
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta, Overhead
from layerprof.render.console.profile import header_lines
from tests.support.real_models import MHA, ListEncoder
from tests.support.timing_models import SlowFirst


def fused_ops(model: nn.Module, x: torch.Tensor) -> set[str]:
    """What torch.profiler sees one inference forward run (the reference)."""
    with torch.inference_mode(), torch.profiler.profile() as prof:
        model(x)
    return {
        e.name for e in prof.events() if "_native_multi" in e.name or "_transformer_enc" in e.name
    }


# ---- 11.4: fused fast paths -------------------------------------------------------------


def test_watch_sees_the_fused_path_without_changing_it() -> None:
    model = ListEncoder(dim=32, depth=1, heads=2).eval()
    x = torch.randn(2, 8, 32)
    before = fused_ops(model, x)
    assert "aten::_transformer_encoder_layer_fwd" in before  # the clean path is fused
    with torch.inference_mode():
        seen = watch_clean_path(model, lambda: model(x))
    assert seen is not None and seen.error is None
    assert set(seen.fused) == {"enc.layers.0", "enc.layers.1"}
    assert "enc.layers.0.self_attn" not in seen.called  # the fused kernel replaced it
    assert fused_ops(model, x) == before  # and no hook was left behind
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_transformer_encoder_keeps_its_fast_path_in_the_layer_pass() -> None:
    """The Recorder wraps forward instead of hooking __call__, so TransformerEncoderLayer
    (which refuses its fast path when forward hooks sit on it) runs fused in both passes."""
    model = ListEncoder(dim=32, depth=1, heads=2)
    prof = layerprof.profile(model, torch.randn(2, 8, 32), warmup=1, iters=3)
    assert prof.passes is not None
    assert [f.layer for f in prof.passes.fused] == ["enc.layers.0", "enc.layers.1"]
    assert all(f.in_layer_pass for f in prof.passes.fused) and prof.passes.diverged == ()
    assert prof.row("enc.layers.0.linear1").calls == 0  # the fused kernel did its work
    findings = diagnose(prof)
    assert not [f for f in findings if "other code" in f.title]
    finding = next(f for f in findings if "fused fast path" in f.title)
    assert finding.layer == "enc.layers.0" and "in both passes" in finding.detail
    assert prof.row("enc.layers.0").flops and "FLOPs are counted from the fused" in finding.detail
    saved = json.loads(prof.render("json"))["passes"]
    assert [f["in_layer_pass"] for f in saved["fused"]] == [True, True]
    assert Profile.from_dict(json.loads(prof.render("json"))).passes == prof.passes


def test_rows_that_time_other_code_are_named() -> None:
    """A layer pass off the fast path (as under __call__ hooks) is named, with the cause."""
    model = ListEncoder(dim=32, depth=1, heads=2)
    prof = layerprof.profile(model, torch.randn(2, 8, 32), warmup=1, iters=3)
    assert prof.passes is not None
    off = tuple(replace(f, in_layer_pass=False) for f in prof.passes.fused)
    prof = replace(prof, passes=replace(prof.passes, fused=off))
    assert prof.passes is not None and prof.passes.diverged == ("enc.layers.0", "enc.layers.1")
    finding = next(f for f in diagnose(prof) if "other code" in f.title)
    assert finding.layer == "enc.layers.0" and "_transformer_encoder_layer_fwd" in finding.detail
    assert "forward hooks" in finding.detail
    # the fused kernel is counted by layerprof's formula (tests/capture/flops/test_flops.py checks the count)
    assert prof.row("enc.layers.0").flops and "FLOPs are counted from the fused" in finding.detail
    saved = json.loads(prof.render("json"))["passes"]
    assert saved["diverged"] == ["enc.layers.0", "enc.layers.1"]
    assert Profile.from_dict(json.loads(prof.render("json"))).passes == prof.passes


def test_multihead_attention_out_proj_zero_calls_is_explained() -> None:
    prof = layerprof.profile(MHA(32, 4), torch.randn(2, 8, 32), warmup=1, iters=3)
    assert prof.row("inner.out_proj").calls == 0
    assert prof.passes is not None and prof.passes.diverged == ()
    (fused,) = prof.passes.fused
    assert (fused.layer, fused.op, fused.skipped) == (
        "inner", "aten::_native_multi_head_attention", ("inner.out_proj",)
    )  # fmt: skip
    finding = next(f for f in diagnose(prof) if "fused fast path" in f.title)
    assert finding.layer == "inner" and "out_proj" in finding.detail
    assert "FLOPs are counted from the fused kernel" in finding.detail
    assert prof.row("inner").flops and prof.row("inner.out_proj").calls == 0
    # a file from torch's counter (0 for the fused kernel) says so, never a silent 0
    zero = tuple(
        replace(i, flops=0, flop_detail=None) if i.path == "inner" else i for i in prof.layers
    )
    old = next(f for f in diagnose(replace(prof, layers=zero)) if "fused fast path" in f.title)
    assert "FLOPs are not counted" in old.detail
    assert not [f for f in diagnose(prof) if "never ran" in f.title]  # explained, not "unused"


class PaddedEncoder(nn.Module):
    """BERT-style use: a TransformerEncoder with a padding mask takes the nested-tensor path."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 2, 64, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.enc(x, src_key_padding_mask=mask)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_padded_transformer_encoder_runs_and_is_named() -> None:
    """Nested tensors between the layers used to crash the shape capture."""
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[1, 5:] = True
    prof = layerprof.profile(
        PaddedEncoder(), torch.randn(2, 8, 32), kwargs={"mask": mask}, warmup=1, iters=3
    )
    assert prof.row("enc.layers.0").calls == 1
    assert str(prof.row("enc.layers.0").input_shapes).startswith("['nested(2x?x32)'")
    assert prof.passes is not None and prof.passes.diverged == ()  # fused in both passes
    assert {f.layer for f in prof.passes.fused} == {"enc.layers.0", "enc.layers.1"}


def test_ops_mode_is_checked_too() -> None:
    prof = layerprof.profile(ListEncoder(32, 1, 2), torch.randn(2, 8, 32), iters=2, ops=True)
    assert prof.passes is not None and prof.passes.diverged == ()
    assert [f.in_layer_pass for f in prof.passes.fused] == [True, True]


def test_no_fast_path_no_watch() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    assert watch_clean_path(model, lambda: model(torch.zeros(1, 4))) is None
    prof = layerprof.profile(model, torch.zeros(1, 4), warmup=0, iters=2)
    assert prof.passes is None and "fused fast paths and code paths" not in checks(prof)


def test_training_mode_takes_no_fast_path() -> None:
    prof = layerprof.profile(MHA(32, 4), torch.randn(2, 8, 32), warmup=0, iters=2, eval=False)
    assert prof.passes is not None and prof.passes.fused == ()
    # MultiheadAttention's slow path uses out_proj's weights, never calls the module: said so
    (finding,) = [f for f in diagnose(prof) if "never ran" in f.title]
    assert finding.layer == "inner.out_proj" and "work done by the parent" in finding.detail


def test_unused_modules_are_said_to_never_run() -> None:
    class Unused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(4, 4)
            self.spare = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    prof = layerprof.profile(Unused(), torch.zeros(1, 4), warmup=0, iters=2)
    (finding,) = [f for f in diagnose(prof) if "never ran" in f.title]
    assert finding.layer == "spare" and finding.severity == "info"


# ---- 11.5: the passes disagree (contention) ----------------------------------------------


def contended(latency_ms: float = 365.0, layers_ms: float = 63.0) -> Profile:
    """The issue's numbers, injected: a 365 ms clean pass next to a 63 ms per-layer pass."""
    ms = 1_000_000
    jitter = [-2, -1, 0, 1, 2, 0, 1, -1, 0, 0]
    meta = Meta(model="m", source="layerprof.run", threads=2, extra={"cpus": 2, "load_avg": 7.9})
    samples = {
        "": LayerSamples(
            total_ns=[int(layers_ms * ms) + j * 1000 for j in jitter],
            self_ns=[int(layers_ms * ms) + j * 1000 for j in jitter],
            calls=1,
        )
    }
    return Profile(
        meta=meta,
        layers=(LayerInfo("", "M", None),),
        samples=samples,
        latency_ns=[int(latency_ms * ms) + j * 10_000 for j in jitter],
    )


def test_disagreeing_passes_make_a_finding_with_the_cause() -> None:
    prof = contended()
    assert pass_gap(prof) == ("clean slower", pytest.approx(63 / 365, rel=1e-3))
    (finding,) = [f for f in diagnose(prof) if "unreliable" in f.title]
    assert finding.severity == "high"
    assert "load average was 7.9 on 2 CPUs" in finding.detail
    assert "--threads" in finding.hint
    assert any("disagree" in str(line) for line in header_lines(prof))


def test_passes_within_noise_agree() -> None:
    assert pass_gap(contended(latency_ms=80, layers_ms=63)) is None
    assert not [f for f in diagnose(contended(80, 63)) if "unreliable" in f.title]
    # a trace has no clean pass: nothing to compare
    trace = contended()
    trace = replace(trace, meta=replace(trace.meta, source="trace"))
    assert pass_gap(trace) is None


def test_contended_clean_pass_live(tmp_path: Path) -> None:
    """A real run whose clean pass is slowed from outside (sleeps): finding, exit code 0."""
    # 30 ms sleeps against a forward of microseconds; 12 iterations, so that one
    # iteration of the fast pass delayed by a loaded machine cannot close the gap
    iters, warmup, sleep_ms = 12, 1, 30
    model = SlowFirst(slow_calls=1 + warmup + iters, sleep_ms=sleep_ms)
    prof = layerprof.profile(model, torch.zeros(2, 16), warmup=warmup, iters=iters)
    assert prof.meta.extra.get("cpus")  # the run recorded what it ran on
    assert pass_gap(prof) is not None and pass_gap(prof)[0] == "clean slower"  # type: ignore[index]
    assert [f for f in diagnose(prof) if "unreliable" in f.title]
    out = tmp_path / "p.json"
    code = main([
        "run", "--arch", "tests.support.timing_models:SlowFirst", "--arch-kwargs",
        json.dumps({"slow_calls": 1 + warmup + iters, "sleep_ms": sleep_ms}), "--input", "2x16",
        "--warmup", str(warmup), "--iters", str(iters), "--json", str(out), "--quiet",
    ])  # fmt: skip
    assert code == 0
    saved = Profile.load(out)
    assert [f for f in diagnose(saved) if "unreliable" in f.title]  # from the saved file too
    text = io.StringIO()
    saved.print(console=Console(file=text, width=120, color_system=None))
    assert "unreliable" in text.getvalue()


# ---- 22.4 / 22.5: ops mode's agreement check, and noise named as noise ---------------------


def ops_overhead(corrected: bool = True) -> Overhead:
    """Ops mode's calibrated cost: 1.9 µs per operator x 40, 3.7 µs per range x 3."""
    return Overhead(
        per_call_ns=3700, inside_ns=2500, corrected=corrected, calls_per_forward=3,
        method="ops", per_op_ns=1900, ops_per_forward=40,
    )  # fmt: skip


def test_ops_mode_per_layer_pass_slower_than_its_cost_is_unreliable() -> None:
    """Issue 22.4: 21 ms per-layer forward against a 33 µs clean latency in ops mode got
    'the bottleneck' and nothing about the numbers; its calibrated cost is 87 µs."""
    prof = replace(contended(latency_ms=0.033, layers_ms=21.0), overhead=ops_overhead())
    assert pass_gap(prof) is not None and pass_gap(prof)[0] == "layers slower"  # type: ignore[index]
    (finding,) = [f for f in diagnose(prof) if "unreliable" in f.title]
    assert finding.severity == "high"
    assert "87.1 µs per forward: 1.9 µs per recorded operator x 40" in finding.detail
    assert "load average was 7.9 on 2 CPUs" in finding.detail
    # without ops mode's cost record (an older file) it cannot say: no claim either way
    assert pass_gap(replace(prof, overhead=None)) is None


def test_ops_mode_gap_within_its_uncorrected_cost_agrees() -> None:
    """Uncorrected, the per-layer pass carries the cost: 1.6 ms forward, 1.5 ms of it the
    profiler's (780 operators), against a 0.1 ms clean latency, is no disagreement."""
    cost = replace(ops_overhead(corrected=False), ops_per_forward=780)
    prof = replace(contended(latency_ms=0.1, layers_ms=1.6), overhead=cost)
    assert pass_gap(prof) is None
    assert not [f for f in diagnose(prof) if "unreliable" in f.title]


def gpt2_like(per_call_ns: float = 1200, calls: float = 55) -> Profile:
    """Issue 22.5's numbers: 174 ms clean forwards, 55 module calls x 1.2 µs of hooks, a
    per-layer pass of 320 ms whose forwards spread from 180 to 440 ms (a loaded machine:
    too wide for the pass-agreement check to call it a disagreement)."""
    ms = 1_000_000
    spread = [180, 200, 240, 300, 320, 320, 330, 380, 420, 440]
    prof = contended(latency_ms=174.0)
    root = LayerSamples(
        total_ns=[t * ms for t in spread], self_ns=[t * ms for t in spread], calls=1
    )
    return replace(
        prof,
        samples={"": root},
        overhead=Overhead(
            per_call_ns=per_call_ns, inside_ns=400, corrected=True, calls_per_forward=calls,
            clean_ns=174.0 * ms, instrumented_ns=320.0 * ms,
        ),
    )  # fmt: skip


def test_slow_instrumented_pass_the_hooks_cannot_explain_is_named_noise() -> None:
    """Issue 22.5: 66 µs of hooks cannot make a 174 ms forward take 320 ms."""
    prof = gpt2_like()
    assert pass_gap(prof) is None
    findings = diagnose(prof)
    assert not [f for f in findings if "slowed the forward" in f.title]
    (noise,) = [f for f in findings if "machine noise" in f.title]
    assert "66.0 µs per forward: 1.2 µs per module call x 55" in noise.detail
    assert "0.045% of that gap" in noise.detail
    assert "--threads" in noise.hint


def test_slow_instrumented_pass_the_hooks_explain_is_named_instrumentation() -> None:
    """The same gap with 55 calls of 1.5 ms hooks each: the hooks are the cause."""
    prof = gpt2_like(per_call_ns=1.5e6)
    findings = diagnose(prof)
    assert not [f for f in findings if "machine noise" in f.title]
    (slowed,) = [f for f in findings if "slowed the forward" in f.title]
    assert slowed.title.endswith("1.8x") and "82.500 ms per forward" in slowed.detail


def test_a_gross_gap_inside_a_bimodal_clean_interval_is_unreliable() -> None:
    """Found by a new user: a clean pass with 8 of 20 forwards stalled near 20 ms has a
    median of 87 µs and a 95 % CI up to 20 ms; the per-layer pass took 24 ms per forward
    (275x) and its layers were called bottlenecks with no word on the numbers."""
    ms = 1_000_000
    clean = [87_000 + 1000 * (i % 5) for i in range(12)] + [20 * ms + i for i in range(8)]
    prof = replace(contended(layers_ms=24.0), latency_ns=clean, overhead=ops_overhead())
    lat = prof.latency
    assert lat is not None and lat.ci_high is not None and lat.ci_high > 20 * ms
    assert pass_gap(prof) is not None and pass_gap(prof)[0] == "layers slower"  # type: ignore[index]
    assert [f for f in diagnose(prof) if "unreliable" in f.title]
