"""A Run's own console sections: its header, the rule above each rank's report, the
ranks side by side (step time per rank, stragglers) and the per layer × rank table
(each layer's time per forward on every rank, median, min, max, spread and the
slowest rank). Reads the Run, never computes."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.pivot.profile import Profile, Run
from layerprof.render.console.columns import (
    Cell,
    Col,
    Hide,
    Row,
    Shrink,
    Step,
    print_named_table,
    print_table,
)
from layerprof.render.console.distributed import print_stragglers
from layerprof.render.terminal import escape_controls, escaping
from layerprof.units import MS, unit_for

#: ranks shown one column each up to this many; beyond, only the summary columns
RANK_COLUMNS = 4
#: a Run of more ranks prints one rank's whole report, not every rank's
FULL_REPORTS = 4


def print_run_header(run: Run, console: Console) -> None:
    with escaping(console) as out:
        out.print(
            Text.assemble(
                # a Run is what analyze read, or the rank profiles `report` merged
                ("layerprof ", "bold"),
                run.path,
                f"  ({len(run.ranks)} rank{'s' if len(run.ranks) != 1 else ''};"
                f" rank from {run.rank_source})",
            )
        )
        for why in run.skipped:
            out.print(Text.assemble(("skipped: ", "yellow"), why))
        for why in run.failed:
            out.print(Text.assemble(("failed: ", "red"), why))
        for note in run.notes:
            out.print(Text.assemble(("note: ", "yellow"), note.text))


def print_rank_rule(p: Profile, console: Console) -> None:
    file = p.trace.source.file if p.trace.source is not None else p.meta.model
    with escaping(console) as out:
        out.rule(Text(escape_controls(f"rank {p.rank}: {file}")))


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


def print_ranks(run: Run, console: Console, top: int) -> None:
    """Step times per rank side by side, and each rank's communication and compute."""
    cross = run.cross
    if cross is None:
        if run.stragglers is not None:  # saved live profiles: collectives, no steps
            with escaping(console) as out:
                out.rule(Text("ranks side by side"))
                print_stragglers(run, out)
        return
    with escaping(console) as out:
        out.rule(Text("ranks side by side"))
        ranks = [p.rank for p in run.ranks]
        steps: list[list[Cell]] = [
            [step.name,
             *[MS.fmt(dict(step.ns_by_rank).get(r)) if r is not None else "-" for r in ranks],
             str(step.slowest_rank), MS.fmt(step.spread_ns)]
            for step in cross.steps[: max(top, 20)]
        ]  # fmt: skip
        print_named_table(
            out,
            "step time per rank (ms)",
            ["step", *[f"rank {r}" for r in ranks], "slowest", "spread"],
            steps,
        )
        kernels = cross.kernel_time  # CPU-only traces: the step breakdown has the rest
        print_named_table(
            out,
            "per rank" + ("" if kernels else " (no device kernels: see the step breakdown)"),
            ["rank", f"median {run.step_word} ms"]
            + (["kernel communication ms", "kernel compute ms"] if kernels else []),
            [
                [str(line.rank), MS.fmt(line.median_step_ns)]
                + ([MS.fmt(line.communication_ns), MS.fmt(line.compute_ns)] if kernels else [])
                for line in cross.ranks
            ],
        )
        if cross.slowest_rank is not None:
            out.print(Text(f"slowest rank by median {run.step_word}: {cross.slowest_rank}"))
        print_stragglers(run, out)
