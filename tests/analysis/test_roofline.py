"""The roofline from a Profile with exact numbers: achieved rates, intensity, bounds,
findings, and its console rendering (golden files)."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from rich.console import Console

from layerprof.analysis.diagnose import checks, diagnose
from layerprof.analysis.roofline import coverage_findings, roofline, roofline_findings
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerSamples
from layerprof.pivot.sections.flops import Peak
from layerprof.render.console.flops import flops_cell, print_roofline
from layerprof.render.console.profile import print_profile
from tests.support.golden_files import check_golden
from tests.support.profiles import MS, flop_profile


def test_points_rates_intensity_and_bounds() -> None:
    line = roofline(flop_profile())
    assert line is not None
    by = {p.path: p for p in line.points}
    assert [p.path for p in line.points] == ["fc", "spectrum", "emb", "act"]  # by time
    fc, act = by["fc"], by["act"]
    assert fc.rate == pytest.approx(10e9) and fc.intensity == pytest.approx(100)
    assert fc.peak_share == pytest.approx(0.1) and fc.bound == "compute"
    assert fc.attainable_share == pytest.approx(0.1)
    assert act.intensity == pytest.approx(0.125) and act.bound == "memory"
    assert act.attainable_share == pytest.approx(1e9 / (0.125 * 10e9))
    assert fc.share == pytest.approx(10 / 14)
    assert not by["spectrum"].reliable and fc.reliable
    assert by["emb"].flops == 0 and by["emb"].label == "lookup"


def test_no_flops_no_roofline_and_no_peak_no_bound() -> None:
    assert roofline(replace(flop_profile(), flops=None)) is None
    line = roofline(flop_profile(peak=None))
    assert line is not None and all(p.bound is None for p in line.points)


def test_findings_name_slow_heavy_layers_and_coverage() -> None:
    findings = roofline_findings(flop_profile())
    titles = [f.title for f in findings]
    assert "fc runs at 10% of peak, compute-bound at intensity 100 FLOP/B" in titles
    coverage = [f.title for f in coverage_findings(flop_profile())]
    assert coverage == ["FLOPs cover 86% of the op time"]  # 12 of 14 ms counted
    # both are rules of diagnose's registry, listed as checks even when nothing is flagged
    names = checks(flop_profile())
    assert any(n.startswith("FLOP coverage") for n in names)
    assert any(n.startswith("roofline") for n in names)
    assert not any(n.startswith("roofline") for n in checks(flop_profile(peak=None)))
    assert {"FLOPs cover 86% of the op time", titles[0]} <= {
        f.title for f in diagnose(flop_profile())
    }
    fc = next(f for f in findings if f.layer == "fc")
    assert fc.severity == "warning"  # 71% of the forward
    assert "100.0M FLOPs in 10.000 ms" in fc.detail and "ridge 10.0 FLOP/B" in fc.detail
    assert all(f.layer != "act" for f in findings)  # memory-bound but near its roofline


def test_memory_bound_finding_says_what_its_intensity_allows() -> None:
    slow_act = flop_profile()
    layers = tuple(
        replace(i, flop_detail=replace(i.flop_detail, bytes=80_000_000))
        if i.path == "act" and i.flop_detail is not None else i
        for i in slow_act.layers
    )  # fmt: skip
    samples = dict(slow_act.samples)
    samples["act"] = LayerSamples([40 * MS] * 3, [40 * MS] * 3, 1.0)
    findings = roofline_findings(replace(slow_act, layers=layers, samples=samples))
    act = next(f for f in findings if f.layer == "act")
    assert act.title == "act runs at <0.1% of peak, memory-bound at intensity 0.013 FLOP/B"
    assert "of what its intensity allows" in act.detail
    assert "raise the batch size" in act.hint


def test_a_layer_above_a_measured_peak_says_the_peak_is_low() -> None:
    low = Peak(5e9, 10e9, "cached", "measured on a busy box")
    findings = roofline_findings(flop_profile(peak=low))
    assert any(f.title == "the measured peak is below what fc reached" for f in findings)
    given = roofline_findings(flop_profile(peak=replace(low, source="given")))
    assert not any("measured peak" in f.title for f in given)


def test_flops_cells_label_their_kind() -> None:
    rows = {r.path: r for r in flop_profile().rows()}
    assert flops_cell(rows["fc"]) == "100.0M"
    assert flops_cell(rows["act"]) == "1.0M ew"
    assert flops_cell(rows["emb"]) == "0 lookup"
    assert flops_cell(rows["spectrum"]) == "uncounted"


def _render(width: int) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False)
    print_profile(flop_profile(), console=console)
    return buf.getvalue()


def test_console_golden_120() -> None:
    check_golden("console_flops_120.txt", _render(120))


def test_console_golden_80_keeps_every_number() -> None:
    text = _render(80)
    check_golden("console_flops_80.txt", text)
    assert "10.000" in text  # fc's time is never cut


def test_roofline_table_only_with_flops() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=120, color_system=None)
    print_roofline(console, replace(flop_profile(), flops=None))
    assert buf.getvalue() == ""


def test_a_fused_encoder_is_not_a_leaf_beside_its_layers() -> None:
    """TransformerEncoder -> ModuleList (never runs) -> fused layers: only the layers are
    leaves, so no time is counted twice in the compute table and its findings."""
    import torch
    from torch import nn

    import layerprof
    from layerprof.analysis.roofline import roofline

    class Enc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.enc(x)

    prof = layerprof.profile(Enc().eval(), torch.randn(2, 8, 32), warmup=1, iters=3, peak="1T,10G")
    line = roofline(prof)
    assert line is not None
    paths = {p.path for p in line.points}
    assert {"enc.layers.0", "enc.layers.1"} <= paths
    assert "enc" not in paths and "" not in paths


def test_profile_json_carries_each_layers_roofline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 22.8: achieved FLOP/s, intensity, % of peak and bound were only printed."""
    prof = flop_profile()
    line = roofline(prof)
    assert line is not None and line.points
    layers = {d["path"]: d for d in prof.to_dict()["layers"]}
    for point in line.points:
        saved = layers[point.path]["roofline"]
        assert saved["flops_per_s"] == pytest.approx(point.rate)
        assert saved["intensity_flop_per_byte"] == point.intensity
        assert saved["peak_pct"] == pytest.approx(100 * point.peak_share)  # type: ignore[operator]
        assert saved["bound"] == point.bound
    on_line = {p.path for p in line.points}
    assert all("roofline" not in d for path, d in layers.items() if path not in on_line)
    # written, not read: the file loads back as before
    assert Profile.load(prof.save(tmp_path / "p.json")).rows() == prof.rows()


def test_a_fresh_peak_says_measured_once() -> None:
    """The console printed "(measured: measured on AMD EPYC: ...)"."""
    from layerprof.pivot.sections.flops import Peak
    from layerprof.render.console.flops import peak_text

    fresh = peak_text(Peak(1e11, 2e10, "measured", "measured on AMD EPYC: 1024x1024 matmul"))
    assert "(measured on AMD EPYC: 1024x1024 matmul)" in fresh
    cached = peak_text(Peak(1e11, 2e10, "cached", "measured on AMD EPYC: 1024x1024 matmul"))
    assert "(cached: measured on AMD EPYC" in cached
