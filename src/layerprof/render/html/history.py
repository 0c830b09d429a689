"""A history as an offline HTML page (``layerprof history report --html``): the change
points with their commits, and a trend chart per series (latency, figures, the
heaviest layers) with each change point marked and named by its commit.

Built on the report's page machinery (``page.document``: one file, the report's
CSP, plotly inlined); the charts are the page script's ``lines`` kind.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import ClassVar

from layerprof.history.changes import Change, HistoryView, Trend
from layerprof.history.records import iso_time
from layerprof.render.html.charts import Chart
from layerprof.render.html.labels import label
from layerprof.render.html.page import Col, Section, chart_slot, document, esc, paragraph, table
from layerprof.units import NS_PER_MS, human_time

#: Series with a chart (the figures, then the heaviest layers).
CHART_ROWS = 24


@dataclass(frozen=True)
class TrendLine:
    name: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    hover: tuple[str, ...]


@dataclass(frozen=True)
class TrendChart(Chart):
    """One series over the runs: the per-run medians, the segments' levels, and one
    marker per change point (named by its commit); the script's ``lines`` kind."""

    kind: ClassVar[str] = "lines"
    title: str
    x_title: str
    y_title: str
    series: tuple[TrendLine, ...]
    log_x: bool = False
    log_y: bool = False


def render_history_html(view: HistoryView, *, title: str | None = None) -> str:
    heading = title or f"{view.env.model or 'model'} history — layerprof"
    sections = [_summary(view), _changes(view), _trends(view)]
    return document(
        [s for s in sections if s is not None], heading=heading, header=_header(view, heading)
    )


def _header(view: HistoryView, text: str) -> str:
    env = view.env
    runs = view.runs
    facts = [
        ("model", env.model),
        ("machine", env.machine),
        ("device", env.device),
        ("torch", env.torch),
        ("dtype", env.dtype),
        ("inputs", "; ".join(env.inputs)),
        ("environment", env.key),
        ("runs", f"newest {len(runs)} of {view.total_runs}"),
        ("commits", f"{runs[0].short}..{runs[-1].short}" if runs else ""),
    ]
    chips = "".join(
        f'<span class="chip"><span>{esc(k)}</span>{esc(v)}</span>' for k, v in facts if v
    )
    return (
        f'<header class="top"><div class="wrap"><p class="brand">layerprof history</p>'
        f'<h1>{esc(text)}</h1><div class="chips">{chips}</div></div></header>'
    )


def _summary(view: HistoryView) -> Section:
    body = paragraph(view.method())
    if view.too_short:
        body += paragraph(
            f"Too short to judge: {len(view.runs)} runs; a change needs"
            f" {view.detection.confirm} runs on each side.",
            "warn",
        )
    return Section("method", "How the runs were judged", body)


def _changes(view: HistoryView) -> Section:
    changes = view.changes
    if not changes:
        return Section(
            "changes", "Change points", paragraph("No change beyond the history's noise.")
        )
    n = len(view.runs)
    cols: tuple[Col[Change], ...] = (
        Col("series", lambda c: _name(c.series, c.kind), css="path"),
        Col("since commit", lambda c: c.run.commit, tip=lambda c: f"after {c.previous.commit}"),
        Col("when", lambda c: iso_time(c.run.when_ns)),
        Col("run", lambda c: f"{c.index + 1} of {n}", lambda c: c.index),
        Col("change", lambda c: f"{c.percent:+.1f}%", lambda c: c.percent),
        Col("interval", lambda c: f"{(c.low - 1) * 100:+.1f}..{(c.high - 1) * 100:+.1f}%"),
        Col("before", lambda c: human_time(c.before_ns), lambda c: c.before_ns),
        Col("after", lambda c: human_time(c.after_ns), lambda c: c.after_ns),
        Col("p", lambda c: f"{c.p:.1e}", lambda c: c.p),
    )
    return Section(
        "changes",
        "Change points",
        table("history-changes", cols, changes, filter_label="Filter"),
        intro="Newest first. A change starts at the commit named and holds for the runs after it.",
    )


def _trends(view: HistoryView) -> Section | None:
    trends = [t for t in view.trends if t.tested][:CHART_ROWS]
    if not trends:
        return None
    charts = {f"trend-{i}": _chart(view, t) for i, t in enumerate(trends)}
    body = "".join(chart_slot(slot) for slot in charts)
    hidden = sum(1 for t in view.trends if t.tested) - len(trends)
    if hidden:
        body += paragraph(f"{hidden} more tested series: layerprof history show --json.")
    return Section(
        "trends",
        "Trends",
        body,
        charts=charts,
        intro="Each run's median, the level of each segment between change points, and a"
        " marker at each change, named by its commit.",
    )


def _chart(view: HistoryView, trend: Trend) -> TrendChart:
    runs = view.runs
    xs, ys, hover = [], [], []
    for i, (run, v) in enumerate(zip(runs, trend.values_ns, strict=True)):
        if v is not None:
            xs.append(float(i + 1))
            ys.append(v / NS_PER_MS)
            hover.append(label(f"run {i + 1} · {run.short} · {human_time(v)}"))
    lines = [TrendLine("runs", tuple(xs), tuple(ys), tuple(hover))]
    if trend.changes:
        lines.append(_levels(view, trend))
    for c in trend.changes:
        text = label(f"{c.percent:+.1f}% since {c.run.short}")
        lines.append(TrendLine(text, (float(c.index + 1),), (c.after_ns / NS_PER_MS,), (text,)))
    return TrendChart(
        title=label(_name(trend.series, trend.kind)),
        x_title="run (oldest to newest)",
        y_title="ms per forward" if trend.kind == "layer" else "ms",
        series=tuple(lines),
    )


def _levels(view: HistoryView, trend: Trend) -> TrendLine:
    """The median of each segment, drawn as steps at the change points."""
    edges = [0, *(c.index for c in trend.changes), len(view.runs)]
    xs: list[float] = []
    ys: list[float] = []
    for a, b in itertools.pairwise(edges):
        seen = sorted(v for v in trend.values_ns[a:b] if v is not None)
        if not seen:
            continue
        level = seen[len(seen) // 2] / NS_PER_MS
        xs += [a + 1.0, float(b)]
        ys += [level, level]
    return TrendLine("segment level", tuple(xs), tuple(ys), tuple(f"{y:.4g} ms" for y in ys))


def _name(series: str, kind: str) -> str:
    return series if kind == "figure" else (series or "(root)")
