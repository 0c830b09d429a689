"""A history in the console (``layerprof history show``): the change points found,
newest first, then a trend line per series (latency, figures, the heaviest layers),
or one series' runs in full (``--layer``)."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.history.changes import Change, HistoryView, Trend
from layerprof.history.records import iso_time
from layerprof.render.console.columns import Col, Row, Shrink, Step, print_table
from layerprof.render.terminal import escaping
from layerprof.units import fmt_share, human_time

#: Series with a trend line (the figures, then the heaviest layers).
TREND_ROWS = 15
SPARK_WIDTH = 40
_BLOCKS = "▁▂▃▄▅▆▇█"
_NAME_STEPS: tuple[Step, ...] = (Shrink(("series",), 28), Shrink(("series",), 14))


def print_history(view: HistoryView, console: Console, *, layer: str | None = None) -> None:
    with escaping(console) as out:
        out.print(_header(view))
        out.print(Text(view.method(), style="dim"))
        if view.too_short:
            out.print(
                Text.assemble(
                    ("too short to judge: ", "yellow"),
                    f"{len(view.runs)} runs; a change needs {view.detection.confirm} runs on"
                    f" each side ({view.detection.shortest} in all)",
                )
            )
        if layer is not None:
            trend = view.trend(layer)
            if trend is not None:
                _runs_table(view, trend, out)
            return
        _changes_table(view.changes, view, out)
        _trends_table(view, out)


def _header(view: HistoryView) -> Text:
    runs = view.runs
    span = f"{runs[0].short}..{runs[-1].short}" if runs else "-"
    return Text.assemble(
        ("layerprof history ", "bold"),
        (view.env.describe(), "bold cyan"),
        f"  environment {view.env.key}  newest {len(runs)} of {view.total_runs} runs"
        f" (commits {span})",
    )


def _frame(title: str) -> Table:
    return Table(title=Text(title), box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")


def _changes_table(changes: Sequence[Change], view: HistoryView, console: Console) -> None:
    if not changes:
        if not view.too_short:
            console.print(Text("no change points beyond the history's noise", style="green"))
        return
    n = len(view.runs)
    cols = (
        Col("series", key="series"),
        Col("since commit"),
        Col("run", number=True),
        Col("change", number=True),
        Col("interval", number=True),
        Col("before", number=True),
        Col("after", number=True),
        Col("p", number=True),
    )
    rows = [
        Row(
            (
                label(c.series, c.kind),
                c.run.short,
                f"{c.index + 1}/{n}",
                f"{c.percent:+.1f}%",
                f"{(c.low - 1) * 100:+.1f}..{(c.high - 1) * 100:+.1f}%",
                human_time(c.before_ns),
                human_time(c.after_ns),
                f"{c.p:.1e}",
            ),
            style="red" if c.ratio > 1 else "green",
        )
        for c in changes
    ]
    print_table(
        console, lambda: _frame("Change points (newest first)"), cols, rows, steps=_NAME_STEPS
    )


def _trends_table(view: HistoryView, console: Console) -> None:
    trends = [t for t in view.trends if t.tested][:TREND_ROWS]
    cols = (
        Col("series", key="series"),
        Col("share", number=True),
        Col("latest", number=True),
        Col("trend (oldest -> newest, | a change)"),
        Col("p", number=True),
    )
    rows = [
        Row(
            (
                label(t.series, t.kind),
                fmt_share(t.share) if t.kind == "layer" else "",
                human_time(_latest(t.values_ns)),
                sparkline(t.values_ns, t.changes),
                f"{t.p:.1e}",
            )
        )
        for t in trends
    ]
    hidden = sum(1 for t in view.trends if t.tested) - len(trends)
    print_table(
        console,
        lambda: _frame("Trends"),
        cols,
        rows,
        steps=_NAME_STEPS,
        hint=f"{hidden} more tested series: history show --layer PATH, or --json"
        if hidden
        else None,
    )


def _runs_table(view: HistoryView, trend: Trend, console: Console) -> None:
    starts = {c.index: c for c in trend.changes}
    cols = (
        Col("run", number=True),
        Col("commit"),
        Col("branch"),
        Col("when"),
        Col(label(trend.series, trend.kind), number=True),
        Col("change"),
    )
    rows = []
    for i, (run, value) in enumerate(zip(view.runs, trend.values_ns, strict=True)):
        c = starts.get(i)
        mark = f"{c.percent:+.1f}% starts here" if c is not None else ""
        rows.append(
            Row(
                (
                    str(i + 1),
                    run.short,
                    run.branch or "",
                    iso_time(run.when_ns),
                    human_time(value),
                    mark,
                ),
                style=("red" if c.ratio > 1 else "green") if c is not None else None,
            )
        )
    state = f"p {trend.p:.1e}" if trend.tested else "not tested (below --min-share)"
    print_table(console, lambda: _frame(f"{label(trend.series, trend.kind)}: {state}"), cols, rows)


def label(series: str, kind: str) -> str:
    if kind == "figure":
        return series
    return series or "(root)"


def _latest(values: Sequence[float | None]) -> float | None:
    return next((v for v in reversed(values) if v is not None), None)


def sparkline(
    values: Sequence[float | None], changes: Sequence[Change] = (), width: int = SPARK_WIDTH
) -> str:
    """Block characters from the values' minimum to maximum, each the median of its
    bin of runs (``width`` at most); ``|`` before the bin a change starts in."""
    n = len(values)
    if n == 0:
        return ""
    bins = [(i * n // min(width, n), (i + 1) * n // min(width, n)) for i in range(min(width, n))]
    meds = [_median([v for v in values[a:b] if v is not None]) for a, b in bins]
    seen = [m for m in meds if m is not None]
    low, high = (min(seen), max(seen)) if seen else (0.0, 0.0)
    marks = {c.index for c in changes}
    out = []
    for (a, b), m in zip(bins, meds, strict=True):
        if any(a <= i < b for i in marks):
            out.append("|")
        if m is None:
            out.append(" ")
        else:
            level = 0 if high <= low else int((m - low) / (high - low) * (len(_BLOCKS) - 1) + 0.5)
            out.append(_BLOCKS[level])
    return "".join(out)


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


__all__ = ["label", "print_history", "sparkline"]
