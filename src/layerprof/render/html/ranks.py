"""The per layer × rank table of a Run in the HTML report (from its JSON document)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerprof.render.html.page import Row, _Col, _num, _rows, _table, fmt_ms, fmt_pct

#: ranks shown one column each up to this many; beyond, only the summary columns
RANK_COLUMNS = 8


def layers_across_ranks(trace: Mapping[str, Any]) -> str:
    """Each layer's time per forward (step) on every rank, with median, min, max,
    spread and the slowest rank; sortable like the other tables."""
    rows = _rows(trace.get("layers_across_ranks"))
    if not rows:
        return ""
    ranks = sorted({int(k) for r in rows for k in (r.get("ms_by_rank") or {})})
    cols = [
        _Col("Layer", lambda r: r.get("path") or r.get("type"), css="path"),
        _Col("Type", lambda r: r.get("type")),
    ]
    if len(ranks) <= RANK_COLUMNS:
        cols += [_Col(f"rank {k} (ms)", _rank_ms(k), fmt_ms, num=True) for k in ranks]
    cols += [
        _Col("median (ms)", lambda r: r.get("median_ms"), fmt_ms, num=True),
        _Col("min (ms)", lambda r: r.get("min_ms"), fmt_ms, num=True),
        _Col("max (ms)", lambda r: r.get("max_ms"), fmt_ms, num=True),
        _Col("spread", _spread, fmt_pct, num=True, title="(max - min) / median"),
        _Col("slowest rank", lambda r: r.get("slowest_rank"), num=True),
    ]
    return f"<h3>Layers across {len(ranks)} ranks (time per forward or step)</h3>" + _table(
        "lp-layer-ranks", cols, rows, filter_label="filter layers"
    )


def _rank_ms(rank: int) -> Any:
    return lambda r: (r.get("ms_by_rank") or {}).get(str(rank))


def _spread(r: Row) -> float | None:
    median, low, high = _num(r.get("median_ms")), _num(r.get("min_ms")), _num(r.get("max_ms"))
    if median is None or low is None or high is None or median <= 0:
        return None
    return (high - low) / median
