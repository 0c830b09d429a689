"""The per layer × rank card: each layer's time per forward (step) on every rank, with
median, min, max, spread and the slowest rank (``Run.layer_ranks``)."""

from __future__ import annotations

from collections.abc import Callable

from layerprof.pivot.sections.ranks import LayerAcrossRanks
from layerprof.render.html.page import Col, Section, table, text_col, time_col
from layerprof.render.html.subject import Subject
from layerprof.units import fmt_share, unit_for

#: ranks shown one column each up to this many; beyond, only the summary columns
RANK_COLUMNS = 8


def layer_ranks_section(s: Subject) -> Section | None:
    run = s.run
    if run is None or not run.layer_ranks:
        return None
    rows = run.layer_ranks
    unit = unit_for(max(r.max_ns for r in rows))
    ranks = sorted({rank for r in rows for rank, _ in r.ns_by_rank})
    cols: list[Col[LayerAcrossRanks]] = [
        text_col("Layer", lambda r: r.path or r.type, css="path"),
        text_col("Type", lambda r: r.type),
    ]
    if len(ranks) <= RANK_COLUMNS:
        cols += [time_col(f"rank {k}", _on(k), unit) for k in ranks]
    cols += [
        time_col("Median", lambda r: r.median_ns, unit),
        time_col("Min", lambda r: r.min_ns, unit),
        time_col("Max", lambda r: r.max_ns, unit),
        Col(
            "Spread",
            lambda r: fmt_share(r.spread),
            lambda r: r.spread,
            title="(max - min) / median",
        ),
        Col("Slowest rank", lambda r: str(r.slowest_rank), lambda r: r.slowest_rank),
    ]
    intro = (
        f"Each layer's time per forward (per step for a trace) on each of {len(ranks)} ranks;"
        " spread = (max - min) / median."
    )
    body = table("lp-layer-ranks", cols, rows, filter_label="filter layers")
    return Section("layer-ranks", f"Layers across {len(ranks)} ranks", body, intro)


def _on(rank: int) -> Callable[[LayerAcrossRanks], float | None]:
    return lambda r: dict(r.ns_by_rank).get(rank)
