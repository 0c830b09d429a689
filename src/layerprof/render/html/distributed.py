"""The distributed section: each step's time as a stacked bar per rank, communication,
queues, the memory peak, and stragglers across ranks.

Reads the ``layerprof.trace/2`` document (as the other trace sections do). The
stacked bars are plain HTML (a row of sized spans), so they show with scripts
off and need nothing from the chart bundle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerprof.render.html.page import (
    Row,
    _Col,
    _e,
    _num,
    _Page,
    _rows,
    _table,
    fmt_bytes,
    fmt_calls,
    fmt_ms,
    fmt_pct,
)
from layerprof.render.html.trace_sections import _rank_name
from layerprof.sections import BREAKDOWN_PARTS

_COLORS = {
    "compute": "#3b82f6", "overlap": "#8b5cf6", "communication": "#ef4444",
    "memcpy": "#f59e0b", "memset": "#eab308", "runtime": "#14b8a6",
    "dataloader": "#ec4899", "cpu": "#64748b", "idle": "#e5e7eb",
}  # fmt: skip
_MAX_BARS = 40  # steps x devices per rank drawn as bars


def _distributed_section(page: _Page, trace: Mapping[str, Any]) -> None:
    ranks = _rows(trace.get("ranks"))
    body = _breakdown(ranks) + _communication(ranks) + _queues(ranks)
    body += _stragglers(trace.get("stragglers"))
    if body:
        page.add("distributed", "Steps, communication and stragglers", body)


def _legend() -> str:
    items = "".join(
        f'<span style="margin-right:1em"><span style="display:inline-block;width:.9em;'
        f'height:.9em;background:{_COLORS[p]};margin-right:.3em"></span>{_e(p)}</span>'
        for p in BREAKDOWN_PARTS
    )
    return f'<p class="caption">{items}</p>'


def _bar(label: str, step: Row) -> str:
    wall = _num(step.get("wall_ms")) or 0.0
    segments = []
    for part in BREAKDOWN_PARTS:
        ms = _num(step.get(f"{part}_ms")) or 0.0
        if wall > 0 and ms > 0:
            segments.append(
                f'<span title="{_e(part)} {_e(fmt_ms(ms))} ms" style="display:inline-block;'
                f'height:1.1em;width:{100 * ms / wall:.3f}%;background:{_COLORS[part]}"></span>'
            )
    return (
        f'<div style="display:flex;align-items:center;gap:.5em"><span style="width:16em;'
        f'overflow:hidden;white-space:nowrap">{_e(label)}</span><span style="flex:1;'
        f'display:flex">{"".join(segments)}</span><span class="num">{_e(fmt_ms(wall))} ms'
        "</span></div>"
    )


def _breakdown(ranks: list[Row]) -> str:
    bars, totals = [], []
    for i, rank in enumerate(ranks):
        steps = _rows(_mapping(rank.get("breakdown")).get("steps"))
        for s in steps[:_MAX_BARS]:
            dev = s.get("device")
            where = "" if dev is None else f" · device {dev}"
            bars.append(_bar(f"{_rank_name(rank, i)}{where} · {s.get('step')}", s))
        if steps:
            wall = sum(_num(s.get("wall_ms")) or 0.0 for s in steps)
            row: dict[str, Any] = {"rank": _rank_name(rank, i), "wall_ms": wall}
            for part in BREAKDOWN_PARTS:
                part_ms = sum(_num(s.get(f"{part}_ms")) or 0.0 for s in steps)
                row[part] = part_ms / wall if wall > 0 else None
            totals.append(row)
    if not bars:
        return ""
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("Steps (ms)", lambda r: r.get("wall_ms"), fmt_ms, num=True),
        *[_Col(p, _getter(p), fmt_pct, num=True) for p in BREAKDOWN_PARTS],
    ]
    return (
        "<h3>Step time breakdown</h3>"
        '<p class="caption">Each step\'s wall time partitioned: at each instant the first'
        " part active gets the time (overlap = compute and communication together).</p>"
        + _legend()
        + "".join(bars)
        + _table("lp-breakdown", cols, totals)
    )


def _getter(key: str) -> Any:
    return lambda r: r.get(key)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _communication(ranks: list[Row]) -> str:
    rows = []
    for i, rank in enumerate(ranks):
        c = _mapping(rank.get("communication"))
        if not c:
            continue
        collectives = _rows(c.get("collectives"))
        pct = _num(c.get("overlap_pct"))
        rows.append(
            {
                "rank": _rank_name(rank, i),
                "n": len(collectives),
                "comm_ms": c.get("comm_ms"),
                "exposed_ms": c.get("exposed_ms"),
                "overlap": None if pct is None else pct / 100,
                "bytes": sum(int(_num(x.get("bytes")) or 0) for x in collectives),
            }
        )
    if not rows:
        return ""
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("Collectives", lambda r: r.get("n"), fmt_calls, num=True),
        _Col("Communication (ms)", lambda r: r.get("comm_ms"), fmt_ms, num=True),
        _Col("Exposed (ms)", lambda r: r.get("exposed_ms"), fmt_ms, num=True),
        _Col("Overlapped by compute", lambda r: r.get("overlap"), fmt_pct, num=True),
        _Col("Bytes", lambda r: r.get("bytes"), fmt_bytes, num=True),
    ]
    return "<h3>Communication</h3>" + _table("lp-comm", cols, rows)


def _queues(ranks: list[Row]) -> str:
    rows = []
    for i, rank in enumerate(ranks):
        q = _mapping(rank.get("queues"))
        mem = _rows(_mapping(rank.get("memory_timeline")).get("devices"))
        if not q and not mem:
            continue
        streams = _rows(q.get("streams"))
        peak = max(mem, key=lambda d: _num(d.get("peak_bytes")) or 0) if mem else {}
        rows.append(
            {
                "rank": _rank_name(rank, i),
                "max_queue": max((_num(s.get("max_length")) or 0 for s in streams), default=None),
                "blocked_ms": q.get("blocked_ms"),
                "short": q.get("short_kernels"),
                "outliers": q.get("delay_outliers"),
                "peak": peak.get("peak_bytes"),
                "where": " · ".join(
                    str(peak[k]) for k in ("peak_op", "peak_layer", "peak_step") if peak.get(k)
                ),
            }
        )
    if not rows:
        return ""
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("Max queue", lambda r: r.get("max_queue"), fmt_calls, num=True),
        _Col("Host blocked (ms)", lambda r: r.get("blocked_ms"), fmt_ms, num=True),
        _Col("Ops shorter than launch", lambda r: r.get("short"), fmt_calls, num=True),
        _Col("Launch-delay outliers", lambda r: r.get("outliers"), fmt_calls, num=True),
        _Col("Memory peak", lambda r: r.get("peak"), fmt_bytes, num=True),
        _Col("Peak in", lambda r: r.get("where")),
    ]
    return "<h3>Queues, launches and memory peak</h3>" + _table("lp-queues", cols, rows)


def _stragglers(value: Any) -> str:
    s = _mapping(value)
    if not s:
        return ""
    head = f"{s.get('matched', 0)} collectives matched across ranks"
    if s.get("median_skew_ms") is not None:
        head += f"; median arrival skew {fmt_ms(s.get('median_skew_ms'))} ms"
    if s.get("straggler") is not None:
        head += f"; rank {s.get('straggler')} arrives last most often"
    cols = [
        _Col("Rank", lambda r: r.get("rank"), num=True),
        _Col("Collectives", lambda r: r.get("collectives"), fmt_calls, num=True),
        _Col("Unmatched", lambda r: r.get("unmatched"), fmt_calls, num=True),
        _Col("Last", lambda r: r.get("last"), fmt_calls, num=True),
        _Col("Median late (ms)", lambda r: r.get("median_late_ms"), fmt_ms, num=True),
        _Col("Compute before (ms)", lambda r: r.get("prior_compute_ms"), fmt_ms, num=True),
        _Col("Median step (ms)", lambda r: r.get("median_step_ms"), fmt_ms, num=True),
    ]
    notes = "".join(f'<p class="warning">{_e(n)}</p>' for n in s.get("notes") or [] if n)
    return f"<h3>Stragglers</h3><p>{_e(head)}</p>{notes}" + _table(
        "lp-stragglers", cols, _rows(s.get("ranks"))
    )
