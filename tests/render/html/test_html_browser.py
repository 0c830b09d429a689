"""The HTML report in headless Chromium: it loads clean and offline, the charts render,
the icicle zooms, tables sort and filter, a phone-wide window does not scroll sideways.

These drive Debian's ``/usr/bin/chromium`` through Playwright's Python package
(``scripts/install-browser.sh`` installs both) and skip with the reason when
either is missing. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from layerprof.render.html import write_html
from tests.support.html_subjects import cpu_run, hooks_profile, hostile_profile, slow_diff
from tests.support.paths import ROOT

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("LAYERPROF_CHROMIUM", "/usr/bin/chromium")

LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.browser


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
        self.page.on("dialog", lambda d: (self.errors.append("dialog: " + d.message), d.dismiss()))
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
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("html")
    return {
        name: write_html(where / f"{name}.html", make())
        for name, make in (
            ("profile", hooks_profile),
            ("run", cpu_run),
            ("diff", slow_diff),
            ("hostile", hostile_profile),
        )
    }


@pytest.mark.parametrize("name", ["profile", "run", "diff", "hostile"])
def test_page_loads_clean_and_offline(browser: Any, pages: dict[str, Path], name: str) -> None:
    opened = Opened(browser, pages[name])
    try:
        assert opened.errors == []  # no script error, and no alert() from a layer name
        assert opened.remote == []
        slots = opened.page.eval_on_selector_all("div.chart", "els => els.map(e => e.id)")
        for slot in slots:
            assert opened.page.locator(f"#{slot} svg.main-svg").count() >= 1, slot
        assert opened.shot(f"report-{name}.png").stat().st_size > 10_000
    finally:
        opened.page.close()


def test_hierarchy_renders_and_zooms_on_click(browser: Any, pages: dict[str, Path]) -> None:
    opened = Opened(browser, pages["profile"])
    page = opened.page
    try:
        slices = page.locator("#lp-hier g.slice")
        assert slices.count() > 5
        level = "document.getElementById('lp-hier').data[0].level"
        assert page.evaluate(level) in (None, "")
        # blocks.1 (a Sequential with children): found by its label
        page.locator("#lp-hier g.slice", has_text="1 · Sequential").first.click()
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
        f"rows => rows.filter(r => !r.hidden).map(r => r.cells[{index}].getAttribute('data-v'))"
        if index >= 0
        else "rows => rows.filter(r => !r.hidden).map(r => r.cells[1].textContent)",
    )
    return result


def test_layer_table_sorts_and_filters(browser: Any, pages: dict[str, Path]) -> None:
    opened = Opened(browser, pages["profile"])
    page = opened.page
    try:
        paths_before = _column(page, "lp-layers", -1)
        page.locator("#lp-layers th", has_text="Self (").click()
        selfs = [float(v) for v in _column(page, "lp-layers", 5)]
        assert selfs == sorted(selfs, reverse=True)
        assert _column(page, "lp-layers", -1) != paths_before
        page.locator("#lp-layers th", has_text="Self (").click()
        selfs = [float(v) for v in _column(page, "lp-layers", 5)]
        assert selfs == sorted(selfs)
        page.locator("#lp-layers th", has_text="#").first.click()
        page.locator("#lp-layers th", has_text="#").first.click()
        assert _column(page, "lp-layers", -1) == paths_before  # module order again
        page.fill("input[data-table=lp-layers]", "blocks.2")
        shown = _column(page, "lp-layers", -1)
        assert shown and all("blocks.2" in p for p in shown)
        assert "of" in page.inner_text("[data-count-for=lp-layers]")
        assert opened.errors == []
    finally:
        page.close()


def test_narrow_window_has_no_page_wide_horizontal_scroll(
    browser: Any, pages: dict[str, Path]
) -> None:
    opened = Opened(browser, pages["run"], width=390)
    try:
        overflow = opened.page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1
        opened.shot("report-narrow.png")
        assert opened.errors == []
    finally:
        opened.page.close()


def test_the_policy_stops_a_request_the_page_would_make(
    browser: Any, pages: dict[str, Path]
) -> None:
    """Issue 34, item 8: code running in the page (as an escaping bug would let it) cannot
    reach the network: the page's Content-Security-Policy refuses the fetch itself."""
    opened = Opened(browser, pages["hostile"])
    try:
        outcome = opened.page.evaluate(
            """() => new Promise(done => {
                document.addEventListener('securitypolicyviolation',
                    e => done('blocked ' + e.violatedDirective));
                fetch('http://127.0.0.1:9/x').catch(() => setTimeout(() => done('failed'), 500));
            })"""
        )
        assert outcome == "blocked connect-src"
        assert opened.remote == []
    finally:
        opened.page.close()
