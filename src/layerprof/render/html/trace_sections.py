"""The trace-analysis section: steps per rank, devices, kernels, copies, launches, memory."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from layerprof.render.html.page import (
    TABLE_LIMIT,
    TOP_N,
    Row,
    _aggregate,
    _chart,
    _Col,
    _e,
    _getter,
    _label,
    _mapping,
    _num,
    _Page,
    _pick,
    _rows,
    _short,
    _table,
    fmt_bytes,
    fmt_calls,
    fmt_ms,
    fmt_pct,
)
from layerprof.render.html.ranks import layers_across_ranks

# ---------------------------------------------------------------- trace section


def _trace_section(page: _Page, trace: Mapping[str, Any]) -> None:
    ranks = _rows(trace.get("ranks"))
    if not ranks:
        page.add("trace", "Trace", '<p class="empty">The trace analysis has no ranks.</p>')
        return
    body = _trace_steps(page, ranks) + _trace_devices(page, ranks) + _trace_kernels(page, ranks)
    body += _trace_memcpy(ranks) + _trace_launch(ranks) + _trace_memory(ranks) + _trace_ops(ranks)
    body += layers_across_ranks(trace)
    warnings = [str(w) for w in trace.get("warnings") or [] if w]
    for i, rank in enumerate(ranks):
        warnings += [f"{_rank_name(rank, i)}: {n}" for n in rank.get("notes") or [] if n]
    if warnings:
        body = "".join(f'<p class="warning">{_e(w)}</p>' for w in warnings) + body
    page.add(
        "trace", "Trace analysis", body or '<p class="empty">No step, device or kernel data.</p>'
    )


def per_rank(ranks: list[Row], rows_of: Callable[[Row], Any]) -> list[Row]:
    """Every rank's rows of one kind in one list, each tagged with its rank's name."""
    return [
        {"rank": _rank_name(r, i), **row} for i, r in enumerate(ranks) for row in _rows(rows_of(r))
    ]


def _rank_name(rank: Row, i: int) -> str:
    r = rank.get("rank")
    return f"rank {r}" if r is not None else f"file {i}"


def _trace_steps(page: _Page, ranks: list[Row]) -> str:
    series = []
    for i, rank in enumerate(ranks):
        steps = _rows(rank.get("steps"))
        ms = [_num(s.get("ms")) for s in steps]
        if steps:
            series.append(
                {
                    "name": _label(_rank_name(rank, i)),
                    "steps": [_label(s.get("name") or f"step {j}") for j, s in enumerate(steps)],
                    "ms": ms,
                }
            )
    stats_rows = [
        {
            "rank": _rank_name(r, i),
            "file": r.get("file"),
            "source": r.get("step_source"),
            "n": len(_rows(r.get("steps"))),
            **_mapping(r.get("step_ms")),
        }
        for i, r in enumerate(ranks)
    ]
    if not series and not any("median" in r for r in stats_rows):
        return ""
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("File", lambda r: r.get("file"), css="path"),
        _Col("Step definition", lambda r: r.get("source")),
        _Col("Steps", lambda r: r.get("n"), fmt_calls, num=True),
        *[
            _Col(f"{k} (ms)", _getter(k), fmt_ms, num=True)
            for k in ("median", "mean", "p90", "min", "max")
        ],
    ]
    chart = ""
    if series:
        page.charts["steps"] = series
        chart = _chart("lp-steps")
    return "<h3>Step times per rank</h3>" + chart + _table("lp-trace-steps", cols, stats_rows)


_DEVICE_FIELDS = ("window_ms", "busy_ms", "idle_ms", "kernel_ms", "memcpy_ms", "memset_ms")


def _trace_devices(page: _Page, ranks: list[Row]) -> str:
    rows = []
    for i, rank in enumerate(ranks):
        for dev in _rows(rank.get("devices")):
            rows.append({"rank": _rank_name(rank, i), **dev})
    if not rows:
        return '<p class="empty">No GPU activity in this trace (CPU only).</p>'
    labels = [_label(f"{r['rank']} · dev {r.get('device', '?')}") for r in rows]
    page.charts["devices"] = {
        "labels": labels,
        **{f: [_num(r.get(f)) or 0.0 for r in rows] for f in _DEVICE_FIELDS},
        # busy inside the step window, so that busy + idle = window
        "busy_ms": [_num(_pick(r, "busy_in_window_ms", "busy_ms")) or 0.0 for r in rows],
        "utilization": [_num(r.get("utilization")) for r in rows],
    }
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("Device", lambda r: r.get("device")),
        *[
            _Col(
                f.removesuffix("_ms").capitalize() + " (ms)",
                _getter(f),
                fmt_ms,
                num=True,
            )
            for f in _DEVICE_FIELDS
        ],
        _Col("Utilization", lambda r: r.get("utilization"), fmt_pct, num=True),
    ]
    charts = f'<div class="grid2">{_chart("lp-busy")}{_chart("lp-breakdown")}</div>'
    intro = (
        '<p class="intro">Busy = union of kernel, memcpy and memset intervals; idle = step'
        " window minus busy.</p>"
    )
    return "<h3>GPU busy and idle</h3>" + intro + charts + _table("lp-trace-devices", cols, rows)


def _trace_kernels(page: _Page, ranks: list[Row]) -> str:
    kernels = per_rank(ranks, lambda r: r.get("kernels"))
    if not kernels:
        return ""
    totals = _aggregate(kernels, "name", ("total_ms",))
    top = sorted(totals.items(), key=lambda kv: kv[1].get("total_ms", 0.0), reverse=True)[:TOP_N]
    page.charts["kernels"] = {
        "labels": [_label(_short(n)) for n, _ in top],
        "hover": [_label(n) for n, _ in top],
        "ms": [v.get("total_ms", 0.0) for _, v in top],
        "ranks": len(ranks),
    }
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("Kernel", lambda r: r.get("name"), css="path"),
        _Col("Calls", lambda r: r.get("calls"), fmt_calls, num=True),
        *[
            _Col(
                f"{k.removesuffix('_ms').capitalize()} (ms)",
                _getter(k),
                fmt_ms,
                num=True,
            )
            for k in ("total_ms", "mean_ms", "min_ms", "max_ms")
        ],
    ]
    shown = _top_per_rank(kernels, "total_ms")
    caption = _cap_text(len(shown), len(kernels))
    return (
        "<h3>Kernels</h3>"
        + _chart("lp-kernels", tall=len(top) > 10)
        + _table("lp-trace-kernels", cols, shown, filter_label="Filter kernels", caption=caption)
    )


def _trace_launch(ranks: list[Row]) -> str:
    """Launch overhead per rank: runtime calls that launched GPU work, and the delay."""
    rows = []
    for i, r in enumerate(ranks):
        launch = _mapping(r.get("launch"))
        if not launch:
            continue
        call, delay = _mapping(launch.get("call_us")), _mapping(launch.get("delay_us"))
        rows.append(
            {
                "rank": _rank_name(r, i),
                "launches": launch.get("launches"),
                "call_total_ms": launch.get("call_total_ms"),
                "call_median_us": call.get("median"),
                "delay_median_us": delay.get("median"),
                "delay_p90_us": delay.get("p90"),
                "sync_ms": launch.get("sync_ms"),
            }
        )
    if not rows:
        return ""
    cols = [
        _Col("Rank", _getter("rank")),
        _Col("Launches", _getter("launches"), fmt_calls, num=True),
        _Col("Launch calls (ms)", _getter("call_total_ms"), fmt_ms, num=True),
        _Col("Call median (µs)", _getter("call_median_us"), _fmt_us, num=True),
        _Col("Launch delay median (µs)", _getter("delay_median_us"), _fmt_us, num=True),
        _Col("Launch delay p90 (µs)", _getter("delay_p90_us"), _fmt_us, num=True),
        _Col("Synchronize (ms)", _getter("sync_ms"), fmt_ms, num=True),
    ]
    return (
        '<h3>Launch overhead</h3><p class="note">Runtime calls that launched GPU work'
        " (kernels, copies, memsets) and the delay from a launch's end to its kernel's start.</p>"
        + _table("lp-trace-launch", cols, rows)
    )


def _fmt_us(value: Any) -> str:
    v = _num(value)
    return f"{v:,.1f}" if v is not None else "–"


def _trace_memory(ranks: list[Row]) -> str:
    """Peak allocated memory per device and the operators that allocated most."""
    devices = per_rank(ranks, lambda r: _mapping(r.get("memory")).get("devices"))
    tops = per_rank(ranks, lambda r: _mapping(r.get("memory")).get("top_ops"))
    if not devices:
        return ""
    dev_cols = [
        _Col("Rank", _getter("rank")),
        _Col("Device", _getter("device")),
        _Col("Peak allocated", _getter("peak_allocated_bytes"), fmt_bytes, num=True),
        _Col("Allocations", _getter("allocations"), fmt_calls, num=True),
        _Col("Allocated", _getter("allocated_bytes"), fmt_bytes, num=True),
    ]
    op_cols = [
        _Col("Rank", _getter("rank")),
        _Col("Operator", _getter("op"), css="path"),
        _Col("Allocations", _getter("allocations"), fmt_calls, num=True),
        _Col("Bytes", _getter("bytes"), fmt_bytes, num=True),
    ]
    out = "<h3>Memory</h3>" + _table("lp-trace-memory", dev_cols, devices)
    if tops:
        out += _table("lp-trace-memory-ops", op_cols, tops)
    return out


def _trace_memcpy(ranks: list[Row]) -> str:
    rows = per_rank(ranks, lambda r: r.get("memcpy"))
    if not rows:
        return ""
    cols = [
        _Col("Rank", _getter("rank")),
        _Col("Kind", _getter("kind")),
        _Col("Calls", _getter("calls"), fmt_calls, num=True),
        _Col("Total (ms)", _getter("total_ms"), fmt_ms, num=True),
        _Col("Bytes", _getter("bytes"), fmt_bytes, num=True),
        _Col(
            "GB/s",
            _getter("gb_per_s"),
            lambda v: f"{v:.1f}" if _num(v) is not None else "–",
            num=True,
        ),
    ]
    return "<h3>Memory copies and sets</h3>" + _table("lp-trace-memcpy", cols, rows)


def _trace_ops(ranks: list[Row]) -> str:
    ops = per_rank(ranks, lambda r: r.get("ops"))
    if not ops:
        return ""
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("Operator", lambda r: r.get("name"), css="path"),
        _Col("Calls", lambda r: r.get("calls"), fmt_calls, num=True),
        _Col("Self (ms)", lambda r: r.get("self_ms"), fmt_ms, num=True),
        _Col("Total (ms)", lambda r: r.get("total_ms"), fmt_ms, num=True),
        _Col("Device (ms)", lambda r: r.get("device_ms"), fmt_ms, num=True),
    ]
    shown = _top_per_rank(ops, "self_ms")
    caption = _cap_text(len(shown), len(ops))
    return "<h3>Operators (host)</h3>" + _table(
        "lp-trace-ops", cols, shown, filter_label="Filter operators", caption=caption
    )


def _top_per_rank(rows: Sequence[Row], key: str) -> list[Row]:
    by_rank: dict[str, list[Row]] = {}
    for row in rows:
        by_rank.setdefault(str(row.get("rank")), []).append(row)
    out: list[Row] = []
    for group in by_rank.values():
        group.sort(key=lambda r: _num(r.get(key)) or 0.0, reverse=True)
        out.extend(group[:TABLE_LIMIT])
    return out


def _cap_text(shown: int, total: int) -> str:
    return f"Showing the top {TABLE_LIMIT} per rank ({shown} of {total})." if shown < total else ""
