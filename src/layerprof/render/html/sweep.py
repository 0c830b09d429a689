"""The HTML page of a Sweep: latency, throughput and peak memory against the batch (one
line per dtype and thread count), every point's numbers, and the layers' shares.

The same offline page as a profile's report (template, CSS, plotly, script), with
its own sections: a Sweep is not a Profile, so it does not go through the
``Subject`` sections of ``sections.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from layerprof.pivot.sections.sweep import (
    BATCH_PAYS,
    OK,
    Sweep,
    SweepPoint,
    decode_scaling,
    top_layers,
)
from layerprof.render.html.charts import Chart
from layerprof.render.html.labels import label
from layerprof.render.html.page import (
    Col,
    Section,
    bytes_col,
    chart_slot,
    document,
    esc,
    heading,
    paragraph,
    share_col,
    table,
    text_col,
    time_col,
)
from layerprof.units import NS_PER_MS, human_bytes, human_si, unit_for

SHARE_LAYERS = 8


@dataclass(frozen=True)
class _LineSeries:
    name: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    hover: tuple[str, ...]


@dataclass(frozen=True)
class Lines(Chart):
    """Lines over a numeric x (the batch), one per series."""

    kind: ClassVar[str] = "lines"
    title: str
    x_title: str
    y_title: str
    series: tuple[_LineSeries, ...]
    log_x: bool = False
    log_y: bool = False


def render_sweep_html(sweep: Sweep, *, title: str | None = None) -> str:
    parts = (_charts(sweep), _points(sweep), _generation(sweep), *_shares(sweep), _notes(sweep))
    sections = [s for s in parts if s]
    heading_text = title or f"{sweep.model} sweep — layerprof"
    return document(sections, heading=heading_text, header=_header(sweep, heading_text))


def _header(sweep: Sweep, text: str) -> str:
    facts = [
        ("model", sweep.model), ("device", sweep.device), ("torch", sweep.torch),
        ("inputs", "; ".join(sweep.inputs)), ("batch dimension", str(sweep.batch_dim)),
        ("per point", sweep.timed),
        ("date", sweep.created),
    ]  # fmt: skip
    chips = "".join(
        f'<span class="chip"><span>{esc(k)}</span>{esc(v)}</span>' for k, v in facts if v
    )
    return (
        f'<header class="top"><div class="wrap"><p class="brand">layerprof sweep</p>'
        f'<h1>{esc(text)}</h1><div class="chips">{chips}</div></div></header>'
    )


def _group_name(dtype: str, threads: int | None) -> str:
    return dtype + (f", {threads} thread{'s' if threads != 1 else ''}" if threads else "")


def _series(sweep: Sweep, value: str) -> tuple[_LineSeries, ...]:
    out: list[_LineSeries] = []
    for (dtype, threads), points in sweep.groups.items():
        ok = [p for p in points if p.status == OK and p.batch is not None and _value(p, value)]
        if ok:
            out.append(
                _LineSeries(
                    name=label(_group_name(dtype, threads)),
                    x=tuple(float(p.batch or 0) for p in ok),
                    y=tuple(_value(p, value) or 0.0 for p in ok),
                    hover=tuple(_hover(p) for p in ok),
                )
            )
    return tuple(out)


def _value(p: SweepPoint, value: str) -> float | None:
    if value == "latency":
        return p.latency.median / NS_PER_MS if p.latency is not None else None
    if value == "throughput":
        return p.samples_per_s
    return float(p.peak_bytes) if p.peak_bytes is not None else None


def _hover(p: SweepPoint) -> str:
    parts = [p.label]
    if p.latency is not None:
        lat = p.latency
        parts.append(
            f"p50 {lat.median / NS_PER_MS:.3f} ms, p90 {lat.p90 / NS_PER_MS:.3f} ms,"
            f" p99 {lat.p99 / NS_PER_MS:.3f} ms"
        )
    if p.samples_per_s is not None:
        parts.append(f"{p.samples_per_s:,.1f} samples/s")
    if p.flops_per_s is not None:
        parts.append(human_si(p.flops_per_s, "FLOP/s"))
    if p.peak_bytes is not None:
        parts.append(f"peak memory {human_bytes(p.peak_bytes)}")
    return "<br>".join(label(part) for part in parts)  # each part escaped for plotly


def _charts(sweep: Sweep) -> Section | None:
    if not any(p.batch is not None for p in sweep.points):
        return None
    specs = (
        ("sweep-latency", "Median latency against the batch", "latency (ms)", "latency"),
        ("sweep-throughput", "Throughput against the batch", "samples/s", "throughput"),
        ("sweep-memory", "Peak memory of one forward against the batch", "bytes", "memory"),
    )
    charts: dict[str, Chart] = {}
    for slot, title, axis, value in specs:
        series = _series(sweep, value)
        if series:
            charts[slot] = Lines(title, "batch", axis, series, log_x=True)
    if not charts:
        return None
    body = "".join(chart_slot(slot) for slot in charts)
    intro = "One line per dtype and thread count; points that ran out of memory are left out."
    return Section("sweep-charts", "Latency and throughput", body, intro, charts)


def _points(sweep: Sweep) -> Section:
    points = sweep.points
    unit = unit_for(max((p.latency.p99 for p in points if p.latency is not None), default=0.0))

    def lat(get: str) -> Col[SweepPoint]:
        return time_col(
            get, lambda p: getattr(p.latency, get) if p.latency is not None else None, unit
        )

    cols: list[Col[SweepPoint]] = []
    if any(p.prompt is not None for p in points):
        cols.append(Col("Prompt", lambda p: str(p.prompt or "-"), lambda p: p.prompt))
    if any(p.batch is not None for p in points):
        cols.append(Col("Batch", lambda p: str(p.batch) if p.batch else "-", lambda p: p.batch))
    cols.append(text_col("Dtype", lambda p: p.dtype))
    if any(p.threads is not None for p in points):
        cols.append(Col("Threads", lambda p: str(p.threads or "-"), lambda p: p.threads))
    cols += [
        time_col("p50", lambda p: p.latency.median if p.latency else None, unit),
        lat("p90"),
        lat("p99"),
        Col("samples/s", lambda p: _num(p.samples_per_s), lambda p: p.samples_per_s),
        Col("FLOP/s", lambda p: human_si(p.flops_per_s, "FLOP/s") if p.flops_per_s else "-",
            lambda p: p.flops_per_s),
        bytes_col("Peak memory", lambda p: p.peak_bytes),
        text_col("Status", lambda p: p.status),
        text_col("Why", lambda p: p.reason),
    ]  # fmt: skip
    return Section("sweep-points", "Every point", table("sweep-table", cols, points))


def _generation(sweep: Sweep) -> Section | None:
    """A sweep of generate(): first token, inter-token latency and the rates per point,
    and where batching stops raising decode tokens/s."""
    if sweep.generate is None:
        return None
    points = [p for p in sweep.points if p.status == OK]
    unit = unit_for(max((p.itl.p90 for p in points if p.itl is not None), default=0.0))
    cols: list[Col[SweepPoint]] = [
        text_col("Point", lambda p: p.label),
        time_col("TTFT p50", lambda p: p.ttft.median if p.ttft else None, unit),
        time_col("ITL p50", lambda p: p.itl.median if p.itl else None, unit),
        time_col("ITL p90", lambda p: p.itl.p90 if p.itl else None, unit),
        Col("prefill tok/s", lambda p: _num(p.prefill_tokens_per_s),
            lambda p: p.prefill_tokens_per_s),
        Col("decode tok/s", lambda p: _num(p.decode_tokens_per_s),
            lambda p: p.decode_tokens_per_s),
    ]  # fmt: skip
    body = table("sweep-generation", cols, points)
    for group in sweep.batch_rows:
        _, pays = decode_scaling(group)
        if pays is not None:
            body += paragraph(
                f"{group[0].row_label}: batching raises decode tokens/s by at least {BATCH_PAYS:g}x per"
                f" doubling up to batch {pays}",
                "caption",
            )
    intro = (
        f"Each point times generate() of {sweep.generate} new tokens: the time to first"
        " token (TTFT), the inter-token latency (ITL) and prefill and decode tokens/s."
    )
    return Section("sweep-generation", "Generation", body, intro)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _shares(sweep: Sweep) -> list[Section]:
    out: list[Section] = []
    for (dtype, threads), points in sweep.groups.items():
        measured, layers = top_layers(points, SHARE_LAYERS)
        if not measured:
            continue
        cols: list[Col[str]] = [text_col("Layer (self time)", lambda path: path or sweep.model)]
        for p in measured:
            shares = dict(p.shares)
            name = p.in_group
            cols.append(share_col(name, lambda path, s=shares: s.get(path, 0.0)))  # type: ignore[misc]
        anchor = f"sweep-shares-{len(out)}"
        name = _group_name(dtype, threads)
        body = table(f"{anchor}-table", cols, layers)
        out.append(Section(anchor, f"Layer shares, {name}", body))
    return out


def _notes(sweep: Sweep) -> Section | None:
    lines: Sequence[str] = [n.text for n in sweep.notes]
    if not lines:
        return None
    body = heading("What the numbers depend on") + "".join(paragraph(n) for n in lines)
    return Section("sweep-notes", "Notes", body)
