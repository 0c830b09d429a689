"""The history page: one offline file under the report's CSP, every series' chart data
escaped, change points named by their commits; and, in headless Chromium (the
``browser`` marker: skipped without one), it loads clean and draws every chart."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from layerprof.history.changes import HistoryView, analyze
from layerprof.history.store import HistoryStore
from layerprof.render.html.history import render_history_html
from tests.support.history_runs import ENV, Shape, entries

HOSTILE = "</script><script>alert(1)</script>"
CHROMIUM = os.environ.get("LAYERPROF_CHROMIUM", "/usr/bin/chromium")


def hostile_view(tmp_path: Path) -> HistoryView:
    """40 runs; block1 30 % slower from c020 on, renamed to a path that closes a script."""
    runs = []
    for run in entries(Shape(runs=40, step_layer="block1", step_at=20, step=1.3), 0):
        layers = tuple(replace(x, path=HOSTILE) if x.path == "block1" else x for x in run.layers)
        runs.append(replace(run, layers=layers, commit=run.commit + "<b>"))
    with HistoryStore(tmp_path / "h.db", create=True) as store:
        store.add(runs)
        return analyze(store.window(ENV, 100))


def test_the_page_escapes_names_and_names_the_commits(tmp_path: Path) -> None:
    view = hostile_view(tmp_path)
    assert [c.series for c in view.changes] == [HOSTILE]
    page = render_history_html(view)
    assert HOSTILE not in page and "c020<b>" not in page  # escaped in HTML and in the JSON
    assert "c020&lt;b&gt;" in page
    data = json.loads(page.split('id="lp-data">')[1].split("</script>")[0])
    titles = [chart["title"] for chart in data.values()]
    assert titles[0] == "latency" and len(titles) == view.tested
    hostile = next(c for c in data.values() if "alert" in c["title"])
    marks = [s["name"] for s in hostile["series"]]
    assert (
        marks[:2] == ["runs", "segment level"] and "since c020&lt;b&gt;" in marks[2]
    )  # plotly-escaped
    assert len(hostile["series"][0]["y"]) == 40


def test_a_short_history_says_so(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.db", create=True) as store:
        store.add(entries(Shape(runs=4), 0))
        page = render_history_html(analyze(store.window(ENV, 100)))
    assert "Too short to judge: 4 runs" in page and "No change beyond" in page


@pytest.mark.browser
def test_the_page_loads_clean_offline_and_draws_every_chart(tmp_path: Path) -> None:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (run scripts/install-browser.sh)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (run scripts/install-browser.sh)")
    view = hostile_view(tmp_path)
    path = tmp_path / "history.html"
    path.write_text(render_history_html(view))
    errors: list[str] = []
    remote: list[str] = []

    def route(r: Any) -> None:
        if r.request.url.startswith(("file:", "data:", "blob:", "about:")):
            r.continue_()
        else:
            remote.append(r.request.url)
            r.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: (errors.append("dialog: " + d.message), d.dismiss()))
            page.route("**/*", route)
            page.goto(path.as_uri())
            page.wait_for_selector("html[data-lp-ready]", state="attached", timeout=20_000)
            drawn = page.locator("div.chart svg.main-svg").count()
        finally:
            browser.close()
    assert errors == [] and remote == []
    assert drawn >= view.tested  # one chart per tested series (plotly draws 2+ svgs each)
