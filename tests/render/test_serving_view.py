"""A serving replay's report: the device-work and serving sections in the console and the
HTML page, with the numbers the trace gives (tests/data/serving, a vLLM decode replay)."""

from __future__ import annotations

import io

from rich.console import Console

from layerprof.pivot.profile import Profile
from layerprof.render.console import print_report
from layerprof.render.html import render_html
from layerprof.trace import analyze
from tests.support.paths import DATA


def vllm() -> Profile:
    return analyze(DATA / "serving" / "vllm_decode_full" / "graph_execution.json.gz").rank()


def test_console_shows_the_step_measured_on_the_device_and_its_phase() -> None:
    buf = io.StringIO()
    print_report(vllm(), Console(file=buf, width=160, color_system=None))
    text = buf.getvalue()
    assert "steps measured on the device's own timeline" in text
    assert "99.8%" in text  # utilization over the work's own span, not 0.0 %
    assert "serving steps by phase" in text
    assert "1 annotated steps (1 decode)" in text
    assert "335.7 µs" in text  # per decode request: 10.743 ms / 32
    assert "2,979" in text  # tokens/s
    assert "clocks, device 2:" in text and "7.826 ms" in text  # idle with work waiting


def test_html_has_the_device_work_and_serving_cards() -> None:
    page = render_html(vllm())
    assert 'id="device-work"' in page and 'id="serving"' in page
    assert "55,086" in page  # KV positions
    assert "device&#x27;s own" in page
