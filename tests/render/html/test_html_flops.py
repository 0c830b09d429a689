"""The HTML report's compute section (roofline) and the sweep page: their numbers are in
the page as text, and the page's script draws their charts."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from layerprof import sinks
from layerprof.render.html import render_html
from tests.support.html_subjects import chart_data, section_ids
from tests.support.paths import DATA
from tests.support.profiles import flop_profile, synthetic

JS_HARNESS = DATA / "html_script_harness.js"


def draw(page_path: Path) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    done = subprocess.run(
        [node, str(JS_HARNESS), str(page_path)], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_compute_section_numbers() -> None:
    page = render_html(flop_profile())
    assert "compute" in section_ids(page)
    # the stat cards, the peak and the uncounted operator with its reason
    for text in ("101.0M", "85.7%", "100 GFLOP/s", "10 GB/s", "aten._fft_r2c", "no formula",
                 "1 multiply-accumulate = 2 FLOPs"):  # fmt: skip
        assert text in page, text
    chart = chart_data(page)["chart-roofline"]
    assert chart["kind"] == "roofline"
    assert chart["names"] == ["fc", "act"]  # the layers a log-log plot can place
    assert chart["intensity"] == pytest.approx([100.0, 0.125])
    assert chart["rate"] == pytest.approx([10e9, 1e9])
    assert chart["bound"] == ["compute", "memory"]
    assert chart["peak_flops"] == 100e9 and chart["peak_bytes"] == 10e9
    assert chart["hover"][0].startswith("fc (Linear)<br>100.0M FLOPs")  # lines, not "&lt;br&gt;"


def test_hostile_layer_names_are_escaped_in_chart_hover() -> None:
    from dataclasses import replace

    prof = flop_profile()
    layers = tuple(replace(i, path="<b>fc") if i.path == "fc" else i for i in prof.layers)
    samples = {("<b>fc" if k == "fc" else k): v for k, v in prof.samples.items()}
    page = render_html(replace(prof, layers=layers, samples=samples))
    chart = chart_data(page)["chart-roofline"]
    assert chart["names"][0] == "&lt;b&gt;fc"
    assert chart["hover"][0].startswith("&lt;b&gt;fc (Linear)<br>")


def test_layers_table_has_the_uncounted_share() -> None:
    page = render_html(flop_profile())
    assert ">Uncounted<" in page


def test_no_flops_no_compute_section() -> None:
    from dataclasses import replace

    assert "compute" not in section_ids(render_html(replace(flop_profile(), flops=None)))


def test_script_draws_the_roofline(tmp_path: Path) -> None:
    path = sinks.write(flop_profile(), tmp_path / "p.html")
    result = draw(path)
    assert result["errors"] == []
    assert any(slot == "chart-roofline" for slot, *_ in result["plotted"])


def test_sweep_page(tmp_path: Path) -> None:
    path = sinks.write(synthetic(), tmp_path / "s.html")
    page = path.read_text()
    assert section_ids(page)[:2] == ["sweep-charts", "sweep-points"]
    for text in ("2,000.0", "out of memory", "batches 128 not tried", "8.0 MiB", "fc1"):
        assert text in page, text
    charts = chart_data(page)
    assert set(charts) == {"sweep-latency", "sweep-throughput", "sweep-memory"}
    latency = charts["sweep-latency"]["series"][0]
    assert latency["x"] == [1.0, 8.0] and latency["y"] == pytest.approx([1.0, 4.0])
    result = draw(path)
    assert result["errors"] == []
    assert {slot for slot, *_ in result["plotted"]} == set(charts)


def test_report_rerenders_a_saved_sweep_as_html(tmp_path: Path) -> None:
    from layerprof.cli import main

    saved = sinks.write(synthetic(), tmp_path / "s.json")
    out = tmp_path / "again.html"
    assert main(["report", str(saved), "--html", str(out), "--quiet"]) == 0
    assert "sweep-points" in out.read_text()


def test_roofline_findings_with_a_less_than_sign_are_on_the_page() -> None:
    from dataclasses import replace

    from layerprof.analysis.diagnose import diagnose
    from layerprof.pivot.records import LayerSamples

    slow = flop_profile()
    samples = dict(slow.samples)
    samples["act"] = LayerSamples([400_000_000] * 3, [400_000_000] * 3, 1.0)
    prof = replace(slow, samples=samples)
    titles = [f.title for f in diagnose(prof) if "<0.1% of peak" in f.title]
    assert titles  # 'act runs at <0.1% of peak, ...'
    page = render_html(prof)
    assert all(html.escape(t) in page for t in titles)
