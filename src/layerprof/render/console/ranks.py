"""The per layer × rank table of a Run: each layer's time per forward on every rank,
median, min, max, spread and the slowest rank. Reads the Run, never computes."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.profile import Profile, Run
from layerprof.render.console.columns import Cell, Col, Hide, Row, Shrink, Step, print_table
from layerprof.render.terminal import escape_controls, escaping
from layerprof.units import unit_for

#: ranks shown one column each up to this many; beyond, only the summary columns
RANK_COLUMNS = 4
#: a Run of more ranks prints one rank's whole report, not every rank's
FULL_REPORTS = 4


def reported_ranks(run: Run, console: Console) -> tuple[Profile, ...]:
    """The ranks whose whole report is printed: all of a few, else the slowest one
    (by median step; the lowest rank without steps), with a line saying so."""
    if len(run.ranks) <= FULL_REPORTS:
        return run.ranks
    slowest = run.cross.slowest_rank if run.cross is not None else None
    chosen = run.rank(slowest)
    why = "slowest median step" if slowest is not None else "lowest rank"
    with escaping(console) as out:
        out.print(
            Text(
                f"{len(run.ranks)} ranks: rank {chosen.rank}'s report ({why});"
                " every rank's is in --json and --html",
                style="dim",
            )
        )
    return (chosen,)


def print_layers_across_ranks(run: Run, console: Console, top: int = 10) -> None:
    """The layers with the largest median time (``top`` of them, module order kept)."""
    rows = run.layer_ranks
    if not rows:
        return
    chosen = sorted(rows, key=lambda r: -r.median_ns)[: max(top, 1)]
    keep = {r.path for r in chosen}
    shown = [r for r in rows if r.path in keep]
    unit = unit_for(max(r.max_ns for r in shown))
    ranks = sorted({rank for r in shown for rank, _ in r.ns_by_rank})
    per_rank = ranks if len(ranks) <= RANK_COLUMNS else []
    cols = [Col("layer", key="name", cap=60), Col("type", key="type", cap=24)]
    cols += [Col(f"rank {k} {unit.name}", number=True, key=f"rank {k}") for k in per_rank]
    cols += [
        Col(f"median {unit.name}", number=True),
        Col(f"min {unit.name}", number=True),
        Col(f"max {unit.name}", number=True),
        Col("spread", number=True),
        Col("slowest", number=True),
    ]
    table_rows = []
    for r in shown:
        by_rank = dict(r.ns_by_rank)
        cells: list[Cell] = [r.path or r.type, r.type]
        cells += [unit.fmt(by_rank.get(k)) for k in per_rank]
        spread = r.spread
        cells += [
            unit.fmt(r.median_ns),
            unit.fmt(r.min_ns),
            unit.fmt(r.max_ns),
            "-" if spread is None else f"{spread:.0%}",
            f"rank {r.slowest_rank}",
        ]
        table_rows.append(Row(tuple(cells)))
    steps: list[Step] = [
        Shrink(("name",), 24),
        Hide(("type",)),
        Hide(tuple(f"rank {k}" for k in per_rank)),
        Shrink(("name",), 12),
    ]
    title = (
        f"layers across {len(ranks)} ranks: time per forward (step)"
        + (f", top {len(shown)} of {len(rows)} by median" if len(shown) < len(rows) else "")
        + "; spread = (max - min) / median"
    )

    def frame() -> Table:
        return Table(
            title=Text(escape_controls(title)),
            box=box.SIMPLE_HEAD,
            title_justify="left",
            title_style="bold",
        )

    with escaping(console) as out:
        print_table(out, frame, cols, table_rows, steps=steps)
