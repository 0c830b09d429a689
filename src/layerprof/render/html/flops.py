"""The report's compute section: counted FLOPs, coverage, the peak, and a roofline chart.

Reads ``Profile.flops`` and the roofline of ``layerprof.analysis.roofline``:
stat cards (FLOPs forward and backward, the elementwise part, coverage, the
peak), the uncounted operators with why, the layers as points on a log-log
roofline (intensity against achieved FLOP/s, sized by time, coloured by
bound) under the device's roof, and the same numbers as a sortable table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from layerprof.analysis.roofline import RooflinePoint, intensity_text, roofline
from layerprof.pivot.sections.flops import CONVENTION, FlopSummary, Peak, UncountedOp
from layerprof.render.html.charts import Chart
from layerprof.render.html.labels import label
from layerprof.render.html.page import (
    Col,
    Section,
    bytes_col,
    chart_slot,
    count_col,
    heading,
    name_col,
    paragraph,
    share_col,
    stat_cards,
    table,
    text_col,
    time_col,
)
from layerprof.render.html.subject import Subject
from layerprof.units import NS_PER_MS, human_count, human_si, human_time, unit_for

LABELS = {"elementwise": "elementwise", "lookup": "lookup", "data movement": "moves data"}


@dataclass(frozen=True)
class _RooflineChart(Chart):
    """Layers at (FLOP/B, FLOP/s), marker area by time, under the device's roof."""

    kind: ClassVar[str] = "roofline"
    title: str
    names: tuple[str, ...]
    intensity: tuple[float, ...]
    rate: tuple[float, ...]
    time_ms: tuple[float, ...]
    bound: tuple[str, ...]
    hover: tuple[str, ...]
    peak_flops: float | None
    peak_bytes: float | None


def roofline_section(s: Subject) -> Section | None:
    p = s.profile
    if p is None or p.flops is None:
        return None
    summary = p.flops
    line = roofline(p)
    points = line.points if line is not None else ()
    body = [stat_cards(_stats(summary)), paragraph(f"{CONVENTION}.")]
    if summary.peak is not None:
        body.append(paragraph(f"Peak ({summary.peak.source}): {summary.peak.detail}."))
    charts: dict[str, Chart] = {}
    chart = _chart(points, summary.peak)
    if chart is not None:
        charts["chart-roofline"] = chart
        body.append(chart_slot("chart-roofline", tall=True))
    if points:
        body += [
            heading("Layers on the roofline"),
            _points_table(points, line.device_time if line else False),
        ]
    if summary.uncounted_ops:
        body += [
            heading("Operators without a usable formula"),
            _uncounted_table(summary.uncounted_ops),
        ]
    intro = (
        "FLOPs counted per operator in one forward, bytes each operator reads and writes,"
        " and the rate each leaf layer reached against the device's peak."
    )
    return Section("compute", "Compute and roofline", "".join(body), intro, charts)


def _stats(s: FlopSummary) -> list[tuple[str, str, str]]:
    items = [("FLOPs, forward", human_count(s.forward), "")]
    if s.backward is not None:
        items.append(("FLOPs, backward", human_count(s.backward), ""))
    if s.forward:
        items.append(("elementwise", f"{100 * s.elementwise / s.forward:.1f}%", ""))
    if s.coverage is not None:
        items.append(
            ("coverage (op time)", f"{100 * s.coverage:.1f}%", "" if s.coverage >= 0.9 else "bad")
        )
    peak = s.peak
    if peak is not None:
        items.append(
            ("peak", human_si(peak.flops_per_s, "FLOP/s") if peak.flops_per_s else "unknown", "")
        )
        if peak.bytes_per_s:
            items.append(("bandwidth", human_si(peak.bytes_per_s, "B/s"), ""))
    return items


def _chart(points: tuple[RooflinePoint, ...], peak: Peak | None) -> _RooflineChart | None:
    """Points that a log-log plot can place (some FLOPs, some bytes)."""
    placed = [p for p in points if p.flops > 0 and p.intensity]
    if not placed:
        return None
    return _RooflineChart(
        title="Roofline: achieved FLOP/s against arithmetic intensity (marker area: time)",
        names=tuple(label(p.name) for p in placed),
        intensity=tuple(p.intensity or 0.0 for p in placed),
        rate=tuple(p.rate for p in placed),
        time_ms=tuple(p.time_ns / NS_PER_MS for p in placed),
        bound=tuple(p.bound or "unknown" for p in placed),
        hover=tuple(_hover(p) for p in placed),
        peak_flops=peak.flops_per_s if peak is not None else None,
        peak_bytes=peak.bytes_per_s if peak is not None else None,
    )


def _hover(p: RooflinePoint) -> str:
    """Hover text for plotly: lines joined by ``<br>``, each line escaped."""
    parts = [
        f"{p.name} ({p.type})",
        f"{human_count(p.flops)} FLOPs in {human_time(p.time_ns)}: {human_si(p.rate, 'FLOP/s')}",
        f"intensity {intensity_text(p.intensity)} FLOP/B",
    ]
    if p.peak_share is not None:
        parts.append(f"{100 * p.peak_share:.1f}% of peak, {p.bound or '?'}-bound")
    if not p.reliable and p.uncounted_share is not None:
        parts.append(f"{100 * p.uncounted_share:.0f}% of its op time uncounted: a lower bound")
    return "<br>".join(label(part) for part in parts)  # each part escaped for plotly


def _points_table(points: tuple[RooflinePoint, ...], device: bool) -> str:
    unit = unit_for(max(p.time_ns for p in points))
    cols: list[Col[RooflinePoint]] = [
        name_col("Layer", lambda p: p.name),
        text_col("Type", lambda p: p.type),
        time_col("Device time" if device else "Time", lambda p: p.time_ns, unit),
        share_col("% of forward", lambda p: p.share),
        Col("FLOPs", _flops_text, lambda p: p.flops),
        Col("FLOP/s", lambda p: human_si(p.rate, "FLOP/s") if p.flops else "-", lambda p: p.rate),
        share_col("% of peak", lambda p: p.peak_share),
        bytes_col("Bytes", lambda p: p.bytes),
        Col("FLOP/B", lambda p: intensity_text(p.intensity) if p.intensity else "-", lambda p: p.intensity),
        text_col("Bound", lambda p: p.bound or "-"),
        share_col("Uncounted", lambda p: p.uncounted_share),
    ]  # fmt: skip
    return table("roofline-table", cols, points, filter_label="Filter layers")


def _flops_text(p: RooflinePoint) -> str:
    kind = LABELS.get(p.label or "")
    return f"{human_count(p.flops)} ({kind})" if kind else human_count(p.flops)


def _uncounted_table(ops: tuple[UncountedOp, ...]) -> str:
    unit = unit_for(max(op.time_ns for op in ops))
    cols: list[Col[UncountedOp]] = [
        name_col("Operator", lambda op: op.name),
        time_col("Time", lambda op: op.time_ns, unit),
        count_col("Calls", lambda op: op.calls),
        text_col("Why", lambda op: op.reason),
    ]
    return table("uncounted-table", cols, ops)
