"""A serving replay's report: the device-work and serving sections in the console and the
HTML page, with the numbers the trace gives (tests/data/serving, a vLLM decode replay)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from layerprof.pivot.profile import Profile
from layerprof.render.console import print_report
from layerprof.render.html import render_html
from layerprof.trace import analyze
from tests.support.kineto_docs import gpu_op, span, write
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


def test_many_steps_on_the_device_are_cut_to_the_top_rows(tmp_path: Path) -> None:
    """12 steps whose kernels run past their host spans: the console lists 10 of them and
    says so; the HTML page lists all 12 (its table limit is 50)."""
    events = []
    for n in range(1, 13):
        t = 100.0 * n
        events += [
            span("user_annotation", f"ProfilerStep#{n}", t, 100),
            span("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=n),
            gpu_op("kernel", "gemm", t + 70, 80, n, 0, 7),
        ]
    p = analyze(write(tmp_path, {"traceEvents": events})).rank()
    buf = io.StringIO()
    print_report(p, Console(file=buf, width=160, color_system=None), top=10)
    assert "steps measured on the device's own timeline (10 of 12)" in buf.getvalue()
    page = render_html(p)
    assert "ProfilerStep#12" in page and "(10 of 12)" not in page


def test_the_serving_tables_of_a_replay_read_through_its_capture_fit_100_columns() -> None:
    """The SGLang pair at 100 columns: the steps table (with its counted FLOPs) and the
    phase tables fit, the layer table names its clock, and the queue line counts the
    graph launch once."""
    p = analyze(DATA / "serving" / "sglang_decode").rank()
    buf = io.StringIO()
    print_report(p, Console(file=buf, width=100, color_system=None))
    text = buf.getvalue()
    serving = text[text.index("serving steps by phase") : text.index("graph replay read")]
    assert "columns wide" not in serving
    assert "0/0" in serving and "484 G" in serving and "83.8 T" in serving
    assert "layers' device self time per step of each phase" in serving
    assert "RadixAttention" in serving  # a captured layer, not only the replay's Sampler
    assert "1 graph launch counted once against its 544 replayed ops summed" in " ".join(
        text.split()
    )
    page = render_html(p)
    assert "device self time per step of each phase" in page
