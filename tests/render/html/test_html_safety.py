"""The HTML report is one safe, offline file: hostile names stay text, nothing loads from
the network, the page's script draws every chart, the size stays bounded, the file is
written whole or not at all, and a page of known times matches its golden file."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import layerprof
from layerprof.errors import OutputError
from layerprof.render.html import json_for_script, render_html, write_html
from layerprof.render.terminal import escape_controls
from tests.support.html_subjects import (
    EVIL,
    HOSTILE_NAMES,
    chart_data,
    cpu_run,
    hooks_profile,
    hostile_profile,
    slow_diff,
    tables,
)
from tests.support.paths import DATA, GOLDEN, ROOT
from tests.support.profiles import fake_profile

ASSETS = ROOT / "src" / "layerprof" / "render" / "assets"
JS_HARNESS = DATA / "html_script_harness.js"

# ---------------------------------------------------------------- escaping


def test_hostile_layer_names_stay_text() -> None:
    prof = hostile_profile()
    page = render_html(prof, title=EVIL)
    # exactly our three script elements: data, plotly, app; the payload opened none
    assert len(re.findall(r"<script\b", page, re.I)) == 3
    assert len(re.findall(r"</script>", page, re.I)) == 3
    assert "alert(1)</script>" not in page and "<!--x" not in page
    assert "\x07" not in page and "\x1b" not in page  # control characters written out
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page  # table and title
    assert "say&quot;hi&#x27;" in page  # quotes cannot end an attribute
    shown = [c.text for c in tables(page)["lp-layers"].column("Layer")]
    assert shown == ["(root)", *(escape_controls(n) for n in HOSTILE_NAMES)]
    # the chart data round-trips; plotly labels are entity-escaped (plotly parses tags)
    tree = chart_data(page)["lp-hier"]
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in tree["labels"]
    assert "gemm&lt;float, 128&gt;" in tree["labels"]
    # operator rows name their layer in the per-layer blocks, escaped too
    assert "<code>&lt;/script&gt;" in page


def test_hostile_names_in_a_diff_and_findings() -> None:
    prof = hostile_profile()
    page = render_html(layerprof.diff(prof, prof))
    assert "alert(1)</script>" not in page and "<!--x" not in page
    assert len(re.findall(r"<script\b", page, re.I)) == 3


@given(st.text())
def test_json_for_script_never_closes_its_element(text: str) -> None:
    value = {"label": text, "list": [text, 1.5, None]}
    encoded = json_for_script(value)
    assert "<" not in encoded and ">" not in encoded and "&" not in encoded
    assert "\u2028" not in encoded and "\u2029" not in encoded
    assert json.loads(encoded) == value


def test_json_for_script_round_trips_hostile_strings() -> None:
    value = {"a": EVIL, "b": "<!-- & \u2028 \u2029 -->", "c": [1.5, None]}
    assert json.loads(json_for_script(value)) == value


# ---------------------------------------------------------------- offline


_REMOTE = re.compile(
    r"""(?:\b(?:src|href|action|formaction|poster|data|srcset|background)\s*=\s*["']?\s*"""
    r"""(?:https?:)?//)|(?:url\(\s*["']?\s*(?:https?:)?//)|(?:@import)""",
    re.I,
)


@pytest.mark.parametrize("make", [hooks_profile, cpu_run, slow_diff])
def test_no_remote_resource_loads(make: Any) -> None:
    """No markup or CSS loads anything remote; our own script builds no remote URL.

    The minified plotly.js holds URL strings in code (e.g. the logo link, off
    via ``displaylogo: false``), so the inlined library is not scanned for
    substrings; the browser test checks that the page requests nothing.
    """
    page = render_html(make())
    markup = re.sub(r"(<script\b[^>]*>).*?(</script>)", r"\1\2", page, flags=re.S | re.I)
    assert len(markup) < len(page) // 2  # the scripts really were cut out
    assert not _REMOTE.findall(markup)
    assert not re.search(r"https?://", (ASSETS / "report.js").read_text())
    assert not re.search(r"https?://", (ASSETS / "report.css").read_text())
    assert not re.search(r"<(?:link|iframe|img|object|embed)\b", page, re.I)
    assert not re.search(r"<script\b[^>]*\bsrc\s*=", page, re.I)


def test_inlined_assets_cannot_close_their_script_element() -> None:
    for name in ("plotly-layerprof.min.js", "report.js"):
        text = (ASSETS / name).read_text(encoding="utf-8")
        assert "</script" not in text.lower() and "<!--" not in text, name
    assert (ASSETS / "plotly.LICENSE").read_text().startswith("MIT License")


# ---------------------------------------------------------------- the page's script


@pytest.mark.parametrize("make", [hooks_profile, cpu_run, slow_diff, hostile_profile])
def test_script_draws_every_chart(make: Any, tmp_path: Path) -> None:
    """report.js, run by node against a stub DOM and a stub Plotly, draws every chart slot
    of the embedded data with the drawing function of its kind, without an error."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    page = write_html(tmp_path / "r.html", make())
    done = subprocess.run(
        [node, str(JS_HARNESS), str(page)], capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["errors"] == []
    drawn = {p[0] for p in result["plotted"]}
    for slot, chart in chart_data(page.read_text(encoding="utf-8")).items():
        want = {f"{slot}-iter", f"{slot}-hist"} if chart["kind"] == "latency" else {slot}
        assert want <= drawn, slot


# ---------------------------------------------------------------- size, speed, imports


class Wide(nn.Module):
    """``blocks`` Sequentials of ``per`` Identity layers: 1 + blocks * (per + 1) layers."""

    def __init__(self, blocks: int = 25, per: int = 19) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(*(nn.Identity() for _ in range(per))) for _ in range(blocks)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_500_layer_page_is_under_6_mb() -> None:
    prof = layerprof.profile(Wide(), torch.zeros(2), warmup=1, iters=5)
    assert len(prof.layers) >= 500
    t0 = time.perf_counter()
    page = render_html(prof)
    elapsed = time.perf_counter() - t0
    size = len(page.encode())
    print(f"500-layer report: {size / 1e6:.2f} MB, rendered in {elapsed * 1000:.0f} ms")
    assert size <= 6_000_000
    assert len(tables(page)["lp-layers"].rows) == len(prof.layers)


def test_render_module_imports_no_torch() -> None:
    code = (
        "import sys, layerprof.render.html as h; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- writing


def test_write_html_writes_the_page(tmp_path: Path) -> None:
    out = write_html(tmp_path / "sub" / "r.html", hooks_profile())
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in out.parent.iterdir()] == ["r.html"]  # no temp file left


def test_write_html_unwritable_path_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match="cannot write"):
        write_html(blocker / "r.html", hooks_profile())
    assert blocker.read_text() == "x"


def test_write_html_failure_leaves_old_file_and_no_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.html"
    target.write_text("old")

    def boom(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OutputError, match="No space left"):
        write_html(target, hooks_profile())
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


# ---------------------------------------------------------------- golden


def test_page_of_known_times_matches_golden() -> None:
    """Everything but the inlined assets; ``LAYERPROF_UPDATE_GOLDEN=1`` rewrites it."""
    page = render_html(fake_profile())
    body = page[page.index("<header") : page.index("<footer>")]
    text = body.replace("><", ">\n<") + "\n" + json.dumps(chart_data(page), indent=1) + "\n"
    path = GOLDEN / "html_containers.html"
    if os.environ.get("LAYERPROF_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_share_format() -> None:
    from layerprof.units import fmt_share

    assert (fmt_share(0.1234), fmt_share(1.0), fmt_share(0.0), fmt_share(None)) == (
        "12.3%",
        "100.0%",
        "0.0%",
        "-",
    )


@pytest.mark.parametrize("make", [hooks_profile, cpu_run, slow_diff, hostile_profile])
def test_the_page_forbids_every_network_request(make: Any) -> None:
    """Defence in depth (issue 34, item 8): a Content-Security-Policy ahead of every script
    forbids fetch, XHR, beacons, images and fonts from anywhere but the page itself, so a
    future escaping bug could run code but not phone home. The notebook frame's page is
    the same page."""
    for page in (render_html(make()), html.unescape(make()._repr_html_())):
        csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
        assert csp is not None
        assert csp.start() < page.lower().index("<script")
        rules = dict(r.strip().split(" ", 1) for r in csp.group(1).split(";"))
        assert rules["default-src"] == "'none'" and rules["connect-src"] == "'none'"
        assert rules["form-action"] == "'none'" and rules["base-uri"] == "'none'"
        assert "http" not in csp.group(1) and "*" not in csp.group(1)
        assert "unsafe-eval" not in rules["script-src"]
