"""The comparison section of a diff document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerprof.render.html.page import (
    TOP_N,
    Row,
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
    _stat_cards,
    _table,
    fmt_ms,
    fmt_pct,
)

# ---------------------------------------------------------------- diff section

_BAD = ("regress", "slower", "worse", "fail")
_GOOD = ("improv", "faster", "better")
_DIFF_TABLES = (
    ("steps", "Steps"),
    ("layers", "Layers"),
    ("ops", "Operators"),
    ("kernels", "Kernels"),
)


def _status_class(status: Any) -> str:
    s = str(status or "").lower()
    if any(w in s for w in _BAD):
        return "bad"
    if any(w in s for w in _GOOD):
        return "good"
    if s in ("added", "removed", "new", "gone", "missing"):
        return "info"
    return "muted"


def _side_ms(row: Row, side: str) -> Any:
    value = _pick(row, f"{side}_ms", side)
    if isinstance(value, Mapping):
        value = _pick(value, "median", "ms", "total_ms", "self_ms", "value")
    return value


def _delta_ms(row: Row) -> Any:
    d = _pick(row, "delta_ms", "delta")
    if isinstance(d, Mapping):
        d = _pick(d, "ms", "median")
    if (
        d is None
        and _num(_side_ms(row, "base")) is not None
        and _num(_side_ms(row, "new")) is not None
    ):
        d = _num(_side_ms(row, "new")) - _num(_side_ms(row, "base"))  # type: ignore[operator]
    return d


def _delta_pct(row: Row) -> float | None:
    """Relative change as a fraction; ``*_pct`` fields are percentages."""
    pct = _num(_pick(row, "delta_pct", "pct", "percent"))
    if pct is not None:
        return pct / 100
    rel = _num(_pick(row, "delta_rel", "rel", "ratio_change"))
    if rel is not None:
        return rel
    base, d = _num(_side_ms(row, "base")), _num(_delta_ms(row))
    return d / base if base and d is not None else None


def _row_name(row: Row) -> str:
    if "path" not in row and "name" not in row and _num(row.get("index")) is not None:
        return f"step {row['index']}"
    value = _pick(row, "path", "name", "key", "step", "index")
    return "(root)" if value == "" else str(value if value is not None else "")


def _diff_section(page: _Page, diff: Mapping[str, Any]) -> None:
    body = ""
    for w in diff.get("warnings") or []:
        body += f'<p class="warning">{_e(w)}</p>'
    message = _pick(diff, "verdict", "message")
    verdict = _pick(_mapping(diff.get("summary")), "verdict")
    if isinstance(message, str):
        body += f'<p class="verdict {_status_class(verdict)}">{_e(message)}</p>'
    if diff.get("comparable") is False and diff.get("reason"):
        body += f'<p class="warning">{_e(diff["reason"])}</p>'
    lat = diff.get("latency")
    if isinstance(lat, Mapping):
        body += _diff_latency(lat)
    for key, heading in _DIFF_TABLES:
        rows = _rows(diff.get(key))
        if rows:
            body += _diff_table(page, key, heading, rows)
    metric = _pick(_mapping(diff.get("settings")), "layer_metric")
    if metric and _rows(diff.get("layers")):
        body += f'<p class="caption">Layers are compared by {_e(metric)} time.</p>'
    page.add("diff", "Changes between runs", body or '<p class="empty">The diff is empty.</p>')


def _diff_latency(lat: Row) -> str:
    status = lat.get("status")
    cls = _status_class(status)
    cards = [
        ("base", fmt_ms(_side_ms(lat, "base")) + " ms", ""),
        ("new", fmt_ms(_side_ms(lat, "new")) + " ms", ""),
        (
            "change",
            ("+" if (_num(_delta_ms(lat)) or 0) > 0 else "") + fmt_ms(_delta_ms(lat)) + " ms",
            cls,
        ),
        ("change %", fmt_pct(_delta_pct(lat), signed=True), cls),
    ]
    if status is not None:
        cards.append(("verdict", str(status), cls))
    return "<h3>Latency</h3>" + _stat_cards(cards)


def _diff_table(page: _Page, key: str, heading: str, rows: list[Row]) -> str:
    cols = [
        _Col(heading.rstrip("s") if key != "ops" else "Operator", _row_name, css="path"),
    ]
    if any("type" in r for r in rows):
        cols.append(_Col("Type", _getter("type")))
    if any(r.get("input_shapes") for r in rows):
        cols.append(_Col("Input shapes", _getter("input_shapes"), css="shape"))
    cols += [
        _Col("Base (ms)", lambda r: _side_ms(r, "base"), fmt_ms, num=True),
        _Col("New (ms)", lambda r: _side_ms(r, "new"), fmt_ms, num=True),
        _Col(
            "Δ (ms)", _delta_ms, lambda v: ("+" if (_num(v) or 0) > 0 else "") + fmt_ms(v), num=True
        ),
        _Col("Δ %", _delta_pct, lambda v: fmt_pct(v, signed=True), num=True),
        _Col("Status", _getter("status")),
    ]
    if any(r.get("note") for r in rows):
        cols.append(_Col("Note", _getter("note")))

    def cell(col: _Col, row: Row) -> str:
        if col.header == "Status":
            status = row.get("status")
            return f'<td><span class="badge {_status_class(status)}">{_e(status or "")}</span></td>'
        return col.td(row)

    if key == "layers":
        ranked = sorted(
            (r for r in rows if _num(_delta_ms(r)) is not None),
            key=lambda r: abs(_num(_delta_ms(r)) or 0.0),
            reverse=True,
        )[:TOP_N]
        if ranked:
            page.charts["diffLayers"] = {
                "labels": [_label(_short(_row_name(r))) for r in ranked],
                "delta": [_num(_delta_ms(r)) for r in ranked],
                "status": [_status_class(r.get("status")) for r in ranked],
            }
    chart = _chart("lp-diff-layers") if key == "layers" and "diffLayers" in page.charts else ""
    table = _table(
        f"lp-difftable-{key}", cols, rows, cell=cell, filter_label=f"Filter {heading.lower()}"
    )
    return f"<h3>{_e(heading)}</h3>{chart}{table}"
