"""The HTML report: content and safety without a browser; behaviour in headless Chromium.

Browser tests (``-m browser``) drive Debian's ``/usr/bin/chromium`` through
Playwright's Python package (``scripts/install-browser.sh`` installs both) and
skip with the reason when either is missing. Screenshots go to
``test-artifacts/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from layerprof.errors import OutputError, UsageError
from layerprof.profile import Profile
from layerprof.records import LayerInfo, LayerSamples, Meta, OpStat, Overhead
from layerprof.render import html as html_mod
from layerprof.render.html import json_for_script, render_html, shape_text, write_html

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
ASSETS = ROOT / "src" / "layerprof" / "render" / "assets"
CHROMIUM = os.environ.get("LAYERPROF_CHROMIUM", "/usr/bin/chromium")
EVIL = "</script><script>alert(1)</script>"

# ---------------------------------------------------------------- synthetic data


def synthetic_profile(
    blocks: int = 3, per_block: int = 4, iters: int = 12, *, evil: bool = False
) -> Profile:
    """A deterministic model tree: root -> blocks.i -> blocks.i.layer_j, plus ops.

    Times are exact integers, so the tree invariant holds by construction.
    ``evil`` names one layer with a script-closing payload and ``<!--``.
    """
    layers = [LayerInfo("", "Net", None, params=10, input_shapes=[[2, 8]])]
    kids: dict[str, list[str]] = {"": []}
    for b in range(blocks):
        bp = f"blocks.{b}"
        layers.append(LayerInfo(bp, "Block", "", params=4 * per_block))
        kids[""].append(bp)
        kids[bp] = []
        for j in range(per_block):
            name = f"layer_{j}"
            if evil and b == 0 and j == 0:
                name = EVIL
            if evil and b == 0 and j == 1:
                name = "<!--x-->"
            path = f"{bp}.{name}"
            layers.append(
                LayerInfo(
                    path,
                    "Linear" if j % 2 == 0 else "ReLU",
                    bp,
                    params=4,
                    params_own=4,
                    input_shapes=[[2, 8]],
                    output_shapes=[[2, 8]],
                )
            )
            kids[bp].append(path)
            kids[path] = []
    samples: dict[str, LayerSamples] = {}

    def fill(path: str, seed: int) -> list[int]:
        total = [0] * iters
        for k, child in enumerate(kids[path]):
            for i, v in enumerate(fill(child, seed * 7 + k + 1)):
                total[i] += v
        own = [1_000 * (1 + (seed * 31 + i * 17) % 97) for i in range(iters)]
        total = [t + o for t, o in zip(total, own, strict=True)]
        samples[path] = LayerSamples(tuple(total), tuple(own), 1.0)
        return total

    whole = fill("", 1)
    ops = tuple(
        OpStat(name, 2, 5_000 * (k + 1), 9_000 * (k + 1), layer=info.path)
        for k, info in enumerate(layers[2:8])
        for name in ("aten::addmm", "aten::relu")
    )
    return Profile(
        meta=Meta(
            model="EvilNet" if evil else "SynthNet",
            torch="2.13.0",
            inputs=("2x8",),
            iters=iters,
            created="2025-01-01T00:00:00+00:00",
        ),
        layers=tuple(layers),
        samples=samples,
        latency_ns=tuple(w - 500 for w in whole),
        first_ns=max(whole) * 5,
        overhead=Overhead(2000.0, 800.0, True, len(layers), 1e6, 1.1e6),
        ops=ops,
        notes=("note <i>one</i>",),
    )


def flat_profile(n: int) -> Profile:
    """``n`` layers: a root, n//20 blocks, the rest leaves (the 500-layer size test)."""
    per = 19
    blocks = max(1, -(-(n - 1) // (per + 1)))  # ceil
    return synthetic_profile(blocks=blocks, per_block=per, iters=50)


def trace_dict(ranks: int = 2) -> dict[str, Any]:
    return {
        "schema": "layerprof.trace/1",
        "ranks": [
            {
                "rank": r,
                "file": f"rank{r}.json.gz",
                "steps": [{"name": f"ProfilerStep#{i}", "ms": 10.0 + i + r} for i in range(4)],
                "step_ms": {
                    "median": 11.5 + r,
                    "mean": 11.5 + r,
                    "p90": 12.7,
                    "min": 10,
                    "max": 13,
                },
                "step_source": "ProfilerStep",
                "devices": [
                    {
                        "device": r,
                        "busy_ms": 30.0,
                        "idle_ms": 16.0,
                        "window_ms": 46.0,
                        "utilization": 30 / 46,
                        "kernel_ms": 25.0,
                        "memcpy_ms": 4.5,
                        "memset_ms": 0.5,
                    }
                ],
                "ops": [
                    {
                        "name": "aten::mm",
                        "calls": 8,
                        "self_ms": 3.0,
                        "total_ms": 4.0,
                        "device_ms": 20,
                    }
                ],
                "kernels": [
                    {
                        "name": "void gemm<float, 128>(float*)",
                        "calls": 8,
                        "total_ms": 20.0,
                        "mean_ms": 2.5,
                        "min_ms": 2.0,
                        "max_ms": 3.0,
                    }
                ],
                "memcpy": [{"kind": "HtoD", "calls": 2, "total_ms": 4.5, "bytes": 2**20}],
                "modules": [],
            }
            for r in range(ranks)
        ],
    }


def diff_dict() -> dict[str, Any]:
    def change(base: float | None, new: float | None, status: str) -> dict[str, Any]:
        delta = (new or 0) - (base or 0)
        return {
            "base_ms": base,
            "new_ms": new,
            "delta_ms": delta,
            "delta_pct": delta / base * 100 if base else None,
            "status": status,
        }

    return {
        "schema": "layerprof.diff/1",
        "verdict": "slower: latency +20.0 %",
        "summary": {"verdict": "slower"},
        "warnings": ["dtype differs: float32 vs float16"],
        "latency": change(10.0, 12.0, "slower"),
        "steps": [{"index": 0, **change(5.0, 5.1, "same")}],
        "layers": [
            {"path": "enc.attn", "type": "Attention", **change(2.0, 4.0, "slower")},
            {"path": "enc.mlp", "type": "MLP", **change(3.0, 2.0, "faster")},
            {"path": "enc.new_layer", "type": "Linear", **change(None, 1.0, "added")},
        ],
        "ops": [{"name": "aten::mm", "input_shapes": "[[2, 8]]", **change(1.0, 1.0, "same")}],
    }


def embedded_data(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="lp-data">(.*?)</script>', page, re.S)
    assert m, "no embedded data element"
    data: dict[str, Any] = json.loads(m.group(1))
    return data


# ---------------------------------------------------------------- content


def test_profile_page_has_every_section() -> None:
    page = render_html(profile=synthetic_profile())
    for anchor in ("latency", "hierarchy", "layers", "top", "layer-ops", "findings", "notes"):
        assert f'id="{anchor}"' in page, anchor
    assert "<title>SynthNet — layerprof</title>" in page
    assert "2.13.0" in page and "2x8" in page
    assert "Instrumentation overhead" in page
    assert "first call (cold)" in page
    data = embedded_data(page)
    assert set(data) >= {"latency", "tree", "topLayers", "topOps"}
    assert data["latency"]["first"] is not None


def test_layer_table_has_one_row_per_layer_and_sortable_headers() -> None:
    prof = synthetic_profile()
    page = render_html(profile=prof)
    table = page.split('id="lp-layers"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == len(prof.layers) + 1  # + header row
    for header in ("Layer", "Type", "Calls", "Total (ms)", "Self (ms)", "% of forward", "Params"):
        assert f">{header}</th>" in table
    assert 'data-sort="num"' in table and 'data-sort="text"' in table


def test_tree_children_fit_inside_parents() -> None:
    """Plotly hides children larger than their parent with branchvalues='total'."""
    tree = embedded_data(render_html(profile=synthetic_profile()))["tree"]
    size = dict(zip(tree["ids"], tree["values"], strict=True))
    kids: dict[str, float] = {}
    for node, parent in zip(tree["ids"], tree["parents"], strict=True):
        if parent:
            kids[parent] = kids.get(parent, 0.0) + size[node]
    for parent, total in kids.items():
        assert total <= size[parent] * (1 + 1e-9), parent


def test_extra_numeric_layer_fields_become_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    prof = synthetic_profile()
    original = prof.to_dict()

    def with_flops() -> dict[str, Any]:
        for i, layer in enumerate(original["layers"]):
            layer["flops"] = 1e9 * (i + 1)
            layer["activation_bytes"] = 2**20 * (i + 1)
        return original

    monkeypatch.setattr(prof, "to_dict", with_flops)
    page = render_html(profile=prof)
    assert ">FLOPS</th>" in page and ">activation</th>" in page
    assert "1 G" in page and "1 MiB" in page


def test_formatting_helpers() -> None:
    assert shape_text([[1, 3, 224, 224]]) == "1×3×224×224"
    assert shape_text([[2, 8], None, []]) == "(2×8, ·, ())"
    assert shape_text(None) == ""
    assert html_mod.fmt_ms(0.0012345) == "0.0012"
    assert html_mod.fmt_ms(12.345) == "12.35"
    assert html_mod.fmt_ms(None) == "–"
    assert html_mod.fmt_count(1_500_000) == "1.5 M"
    assert html_mod.fmt_bytes(3 * 2**30) == "3 GiB"


def test_findings_empty_state_and_cards() -> None:
    empty = render_html(profile=synthetic_profile())
    assert "No findings." in empty
    page = render_html(
        profile=synthetic_profile(),
        findings=[
            {"severity": "warning", "title": "GPU idle", "detail": "<b>x</b>", "layer": "a.b"},
            {"message": "plain"},
        ],
    )
    assert "Findings (2)" in page and "GPU idle" in page and "plain" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page


def test_needs_something_to_render() -> None:
    with pytest.raises(UsageError):
        render_html()


# ---------------------------------------------------------------- trace and diff dicts


def test_trace_section_from_dict() -> None:
    page = render_html(trace=trace_dict())
    assert 'id="trace"' in page and "Trace analysis" in page
    assert "rank1.json.gz" in page and "ProfilerStep" in page
    assert "65.2%" in page  # utilization 30/46
    assert "void gemm&lt;float, 128&gt;(float*)" in page  # escaped in the table
    assert "HtoD" in page and "1 MiB" in page
    data = embedded_data(page)
    assert [s["name"] for s in data["steps"]] == ["rank 0", "rank 1"]
    assert data["devices"]["busy_ms"] == [30.0, 30.0]
    assert data["kernels"]["labels"] == ["void gemm&lt;float, 128&gt;(float*)"]  # plotly-safe
    assert 'id="latency"' not in page and 'id="layers"' not in page


@pytest.mark.parametrize(
    "trace",
    [
        {},
        {"ranks": []},
        {"ranks": [{}]},
        {"ranks": [{"rank": 0, "steps": [{"ms": None}], "devices": "nope", "kernels": [1, 2]}]},
        {"ranks": "x", "warnings": ["w"]},
    ],
)
def test_trace_section_tolerates_missing_or_odd_keys(trace: dict[str, Any]) -> None:
    page = render_html(trace=trace)
    assert 'id="trace"' in page


def test_diff_section_from_dict() -> None:
    page = render_html(diff=diff_dict())
    assert 'id="diff"' in page and "slower: latency +20.0 %" in page
    assert "dtype differs" in page
    assert "+20.0%" in page  # latency change %
    assert 'class="badge bad">slower' in page and 'class="badge good">faster' in page
    assert 'class="badge info">added' in page
    assert "enc.new_layer" in page and "step 0" in page and "[[2, 8]]" in page
    chart = embedded_data(page)["diffLayers"]
    assert chart["labels"][0] == "enc.attn" and chart["status"][0] == "bad"


@pytest.mark.parametrize(
    "diff",
    [{}, {"latency": {}}, {"layers": [{"path": "a"}], "ops": None}, {"latency": {"base": 1}}],
)
def test_diff_section_tolerates_missing_keys(diff: dict[str, Any]) -> None:
    assert 'id="diff"' in render_html(diff=diff)


def test_all_sources_together() -> None:
    page = render_html(
        profile=synthetic_profile(), trace=trace_dict(1), diff=diff_dict(), title="All"
    )
    for anchor in ("latency", "hierarchy", "layers", "trace", "diff", "findings"):
        assert f'id="{anchor}"' in page
    assert "<title>All</title>" in page


# ---------------------------------------------------------------- safety


_REMOTE = re.compile(
    r"""(?:\b(?:src|href|action|formaction|poster|data|srcset|background)\s*=\s*["']?\s*"""
    r"""(?:https?:)?//)|(?:url\(\s*["']?\s*(?:https?:)?//)|(?:@import)""",
    re.I,
)


def test_no_remote_resource_loads() -> None:
    """No markup or CSS loads anything remote; our own script builds no remote URL.

    The minified plotly.js holds URL strings in code (e.g. the logo link, off
    via ``displaylogo: false``), so the inlined library is not scanned for
    substrings; the browser test checks that the page requests nothing.
    """
    page = render_html(profile=synthetic_profile(), trace=trace_dict(), diff=diff_dict())
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


def test_script_closing_layer_name_is_escaped() -> None:
    prof = synthetic_profile(evil=True)
    page = render_html(profile=prof, title=EVIL)
    # exactly our three script elements: data, plotly, app; the payload opened none
    assert len(re.findall(r"<script\b", page, re.I)) == 3
    assert len(re.findall(r"</script>", page, re.I)) == 3
    assert "alert(1)</script>" not in page
    assert "<!--x-->" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page  # table and title, as text
    data = embedded_data(page)
    custom = [c[0] for c in data["tree"]["custom"]]
    # plotly labels are entity-escaped (plotly parses tags); JSON round-trips them
    assert any("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in c for c in custom)


def test_json_for_script_round_trips_hostile_strings() -> None:
    value = {"a": EVIL, "b": "<!-- & \u2028 \u2029 -->", "c": [1.5, None]}
    text = json_for_script(value)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value


# ---------------------------------------------------------------- size and speed


def test_500_layer_page_is_under_6_mb() -> None:
    prof = flat_profile(500)
    assert len(prof.layers) >= 500
    t0 = time.perf_counter()
    page = render_html(profile=prof)
    elapsed = time.perf_counter() - t0
    size = len(page.encode())
    print(f"500-layer report: {size / 1e6:.2f} MB, rendered in {elapsed * 1000:.0f} ms")
    assert size <= 6_000_000
    assert elapsed < 5.0


def test_render_module_imports_no_torch() -> None:
    code = (
        "import sys, layerprof.render.html as h; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- writing


def test_write_html_writes_the_page(tmp_path: Path) -> None:
    out = write_html(tmp_path / "sub" / "r.html", profile=synthetic_profile())
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in out.parent.iterdir()] == ["r.html"]  # no temp file left


def test_write_html_unwritable_path_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match="cannot write"):
        write_html(blocker / "r.html", profile=synthetic_profile())
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
        write_html(target, profile=synthetic_profile())
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_loaded_profile_renders_the_same_tables(tmp_path: Path) -> None:
    prof = synthetic_profile()
    loaded = Profile.load(prof.save(tmp_path / "p.json"))
    table = 'id="lp-layers"'
    a = render_html(profile=prof).split(table)[1].split("</table>")[0]
    b = render_html(profile=loaded).split(table)[1].split("</table>")[0]
    assert a == b


# ---------------------------------------------------------------- in a real browser

LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (run scripts/install-browser.sh)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (run scripts/install-browser.sh)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield b
        finally:
            b.close()


class Opened:
    """A report opened in a page, with what the page said and asked for."""

    def __init__(self, browser: Any, path: Path, width: int = 1280) -> None:
        self.errors: list[str] = []
        self.remote: list[str] = []
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.route("**/*", self._route)
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("html[data-lp-ready]", state="attached", timeout=20_000)

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(("file:", "data:", "blob:", "about:")):
            route.continue_()
        else:
            self.remote.append(url)
            route.abort()

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        out = ARTIFACTS / name
        self.page.screenshot(path=str(out), full_page=True)
        return out


@pytest.fixture(scope="module")
def full_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    findings = [{"severity": "warning", "title": "GPU idle 35%", "layer": "blocks.0"}]
    return write_html(
        path,
        profile=synthetic_profile(blocks=4, per_block=5, evil=True),
        trace=trace_dict(),
        diff=diff_dict(),
        findings=findings,
    )


@pytest.mark.browser
def test_page_loads_clean_and_offline(browser: Any, full_report: Path) -> None:
    opened = Opened(browser, full_report)
    try:
        assert opened.errors == []
        assert opened.remote == []
        assert opened.page.evaluate("typeof window.alert_called") == "undefined"
        for chart in ("lp-lat-iter", "lp-lat-hist", "lp-hier", "lp-top-layers", "lp-steps"):
            assert opened.page.locator(f"#{chart} svg.main-svg").count() >= 1, chart
        assert opened.shot("report-full.png").stat().st_size > 10_000
    finally:
        opened.page.close()


@pytest.mark.browser
def test_hierarchy_renders_and_zooms_on_click(browser: Any, full_report: Path) -> None:
    opened = Opened(browser, full_report)
    page = opened.page
    try:
        slices = page.locator("#lp-hier g.slice")
        assert slices.count() > 5
        level = "document.getElementById('lp-hier').data[0].level"
        assert page.evaluate(level) in (None, "")
        # the slice for blocks.1 (a Block with children): find it by its label
        target = page.locator("#lp-hier g.slice", has_text="1 · Block").first
        target.click()
        page.wait_for_function(f"({level} || '') !== ''", timeout=5_000)
        assert page.evaluate(level).startswith("n")
        page.wait_for_timeout(800)  # let the zoom transition finish for the screenshot
        page.locator("#hierarchy").screenshot(path=str(ARTIFACTS / "hierarchy-zoomed.png"))
        page.locator("button[data-hier=treemap]").click()
        assert page.evaluate("document.getElementById('lp-hier').data[0].type") == "treemap"
        assert opened.errors == []
    finally:
        page.close()


def _column(page: Any, table: str, index: int) -> list[str]:
    result: list[str] = page.eval_on_selector_all(
        f"#{table} tbody tr",
        f"rows => rows.filter(r => !r.hidden).map(r => r.cells[{index}].textContent)",
    )
    return result


@pytest.mark.browser
def test_layer_table_sorts_and_filters(browser: Any, full_report: Path) -> None:
    opened = Opened(browser, full_report)
    page = opened.page
    try:
        paths_before = _column(page, "lp-layers", 1)
        page.locator("#lp-layers th", has_text="Self (ms)").click()
        selfs = [float(v) for v in _column(page, "lp-layers", 5)]
        assert selfs == sorted(selfs, reverse=True)
        assert _column(page, "lp-layers", 1) != paths_before
        page.locator("#lp-layers th", has_text="Self (ms)").click()
        selfs = [float(v) for v in _column(page, "lp-layers", 5)]
        assert selfs == sorted(selfs)
        page.locator("#lp-layers th", has_text="#").first.click()
        page.locator("#lp-layers th", has_text="#").first.click()
        assert _column(page, "lp-layers", 1) == paths_before  # module order again
        page.fill("input[data-table=lp-layers]", "blocks.2")
        shown = _column(page, "lp-layers", 1)
        assert shown and all("blocks.2" in p for p in shown)
        assert "of" in page.inner_text("[data-count-for=lp-layers]")
        assert opened.errors == []
    finally:
        page.close()


@pytest.mark.browser
def test_narrow_window_has_no_page_wide_horizontal_scroll(browser: Any, full_report: Path) -> None:
    opened = Opened(browser, full_report, width=390)
    try:
        overflow = opened.page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1
        opened.shot("report-narrow.png")
        assert opened.errors == []
    finally:
        opened.page.close()


def test_trace_profile_shows_step_time_not_inference_latency() -> None:
    from dataclasses import replace

    prof = Profile(
        meta=Meta(model="rank0", source="trace", extra={"step_source": "ProfilerStep"}),
        layers=(LayerInfo("", "Net", None),),
        samples={"": LayerSamples((5_000_000, 6_000_000), (1_000_000, 1_000_000), 1)},
        latency_ns=(5_000_000, 6_000_000),
    )
    page = render_html(profile=prof)
    assert "Step time" in page and "ProfilerStep" in page
    assert "clean pass (no hooks)" not in page
    live = render_html(profile=replace(prof, meta=Meta(model="m")))
    assert "Inference latency" in live


def test_backward_ops_are_labelled_apart_from_forward_ones() -> None:
    prof = Profile(
        meta=Meta(model="m"),
        layers=(LayerInfo("", "Net", None), LayerInfo("fc", "Linear", "")),
        samples={
            "": LayerSamples((3_000,), (1_000,), 1),
            "fc": LayerSamples((2_000,), (2_000,), 1),
        },
        ops=(
            OpStat("aten::mm", 1, 1_000, 1_000, layer="fc"),
            OpStat("aten::mm", 2, 3_000, 3_000, layer="fc", phase="backward"),
        ),
    )
    page = render_html(profile=prof)
    assert "aten::mm [backward]" in page


def test_trace_launch_and_memory_tables() -> None:
    trace = {
        "schema": "layerprof.trace/1",
        "ranks": [
            {
                "rank": 0,
                "launch": {"launches": 10, "call_total_ms": 0.5, "call_us": {"median": 4.0},
                           "delay_us": {"median": 12.0, "p90": 30.0}, "sync_ms": 0.1},
                "memory": {"devices": [{"device": "cpu", "peak_allocated_bytes": 2048,
                                        "allocations": 3, "allocated_bytes": 4096}],
                           "top_ops": [{"op": "aten::empty", "allocations": 2, "bytes": 4000}]},
            }
        ],
    }  # fmt: skip
    page = render_html(trace=trace)
    assert "Launch overhead" in page and "Launch delay p90" in page
    assert "Peak allocated" in page and "aten::empty" in page
