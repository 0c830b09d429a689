"""The per layer x rank card of the HTML page (``render/html/ranks.py``), read back from
the page: every layer of ``Run.layer_ranks`` with its per-rank times, median, min,
max, spread and slowest rank; per-rank columns only up to ``RANK_COLUMNS`` ranks."""

from __future__ import annotations

from dataclasses import replace

from layerprof.pivot.sections.ranks import LayerAcrossRanks
from layerprof.render.html import render_html
from layerprof.render.html.ranks import RANK_COLUMNS
from layerprof.units import fmt_share
from tests.support.html_subjects import assert_times, cpu_run, one_rank_run, section_ids, tables


def test_two_ranks_layer_table() -> None:
    run = cpu_run()
    rows = run.layer_ranks
    assert len(rows) > 1
    page = render_html(run)
    assert "layer-ranks" in section_ids(page)
    assert "Layers across 2 ranks" in page
    t = tables(page)["lp-layer-ranks"]
    assert [c.text for c in t.column("Layer")] == [r.path for r in rows]
    for rank in (0, 1):
        assert_times(t, f"rank {rank} (", [dict(r.ns_by_rank).get(rank) for r in rows])
    assert_times(t, "Median (", [r.median_ns for r in rows])
    assert_times(t, "Min (", [r.min_ns for r in rows])
    assert_times(t, "Max (", [r.max_ns for r in rows])
    assert [c.text for c in t.column("Spread")] == [fmt_share(r.spread) for r in rows]
    assert [c.text for c in t.column("Slowest rank")] == [str(r.slowest_rank) for r in rows]


def test_one_rank_has_no_layer_table() -> None:
    page = render_html(one_rank_run())
    assert "layer-ranks" not in section_ids(page)


def test_many_ranks_show_only_the_summary_columns() -> None:
    """Beyond RANK_COLUMNS ranks a column per rank would not fit: median/min/max/slowest."""
    n = RANK_COLUMNS + 1
    row = LayerAcrossRanks(
        path="encoder.0",
        type="Linear",
        ns_by_rank=tuple((k, 1_000.0 * (k + 1)) for k in range(n)),
        median_ns=5_000.0,
        min_ns=1_000.0,
        max_ns=1_000.0 * n,
        slowest_rank=n - 1,
    )
    page = render_html(replace(cpu_run(), layer_ranks=(row,)))
    assert f"Layers across {n} ranks" in page
    t = tables(page)["lp-layer-ranks"]
    assert not [h for h in t.headers if h.startswith("rank ")]
    assert [c.text for c in t.column("Slowest rank")] == [str(n - 1)]
    assert_times(t, "Max (", [1_000.0 * n])
