"""A ``generate()`` profile in the console: time to first token, inter-token latency, the
prefill and decode rates, the KV cache, and the heaviest layers' time in each phase
(see docs/definitions.md, "Generation")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from layerprof.render.console.columns import Col, Hide, Row, Shrink, Step, print_table
from layerprof.render.generation_text import (
    PHASE_COLUMNS,
    WORK_COLUMNS,
    other_phases,
    phase_rows,
    phase_table,
    roofline_lines,
    summary_lines,
    work_rows,
)
from layerprof.units import unit_for

if TYPE_CHECKING:
    from rich.console import Console

    from layerprof.pivot.profile import Profile


def print_generation(console: Console, profile: Profile) -> None:
    g = profile.generation
    if g is None:
        return
    console.print(Text("generation (prefill and decode apart)", style="bold"))
    for line in summary_lines(g):
        console.print(Text("  " + line))
    model = profile.meta.model or "model"
    _print_phases(console, profile, model)
    rows = phase_rows(g)
    if not rows:
        return
    largest = max(max(x.total_ns for x in (a, b) if x is not None) for _, a, b in rows)
    unit = unit_for(largest)
    times = [
        Row((
            path or model,
            unit.fmt(pre.total_ns) if pre else "-",
            unit.fmt(pre.self_ns) if pre else "-",
            unit.fmt(dec.total_ns) if dec else "-",
            unit.fmt(dec.self_ns) if dec else "-",
            unit.fmt(dec.growth_ns_per_1k) if dec and dec.growth_ns_per_1k is not None else "-",
        ))
        for path, pre, dec in rows
    ]  # fmt: skip
    heads = ("Prefill total", "Prefill self", "Decode total", "Decode self",
             "Decode growth /1k pos")  # fmt: skip
    title = f"layers per forward of each phase ({unit.name}; the heaviest in decode)"
    print_table(
        console, lambda: _frame(title),
        [Col("Layer", key="name", cap=40), *(Col(h, number=True) for h in heads)], times,
        steps=_NAME_STEPS,
    )  # fmt: skip
    work = work_rows(g)
    if not work:
        return
    # the counts give way first, then the shares of the peak, before the ratios and the
    # verdicts (bound) they lead to
    columns = [Col("Layer", key="name", cap=40)] + [
        Col(h, number=True, key="count" if h.endswith("FLOPs") else "share" if "%" in h else h)
        for h in WORK_COLUMNS
    ]
    print_table(
        console,
        lambda: _frame("work per forward of each phase (counted FLOPs, FLOP per byte, roofline)"),
        columns,
        [Row((row[0] or model, *row[1:])) for row in work],
        steps=(*_NAME_STEPS, Hide(("count",)), Hide(("share",))),
    )
    for line in roofline_lines(g):
        console.print(Text("  " + line, style="dim"))


def _print_phases(console: Console, profile: Profile, model: str) -> None:
    """Every phase in one table, and each one besides prefill and decode (a named phase,
    an encoder's encode) with its heaviest layers."""
    g = profile.generation
    if g is None or not g.phases:
        return
    caps = {"Phase": ("phase", 24), "Heaviest layer": ("name", 40)}
    columns = [
        Col(h, key=caps[h][0], cap=caps[h][1]) if h in caps else Col(h, number=True)
        for h in PHASE_COLUMNS
    ]
    print_table(
        console, lambda: _frame("phases (per forward, per-layer pass)"), columns,
        [Row(r) for r in phase_table(g, model)], steps=_NAME_STEPS,
    )  # fmt: skip
    for name, layers in other_phases(g):
        unit = unit_for(max(x.total_ns for x in layers))
        # the title apart: a narrow table would wrap it inside its own width
        console.print(
            Text(f"layers per forward of {name} ({unit.name}; the heaviest)", style="bold")
        )
        print_table(
            console, lambda: Table(box=box.SIMPLE_HEAD),
            [Col("Layer", key="name", cap=40), Col("Total", number=True), Col("Self", number=True)],
            [Row((x.path or model, unit.fmt(x.total_ns), unit.fmt(x.self_ns))) for x in layers],
            steps=_NAME_STEPS,
        )  # fmt: skip


# Paths give way first (abbreviated in the middle), never a number.
_NAME_STEPS: tuple[Step, ...] = (Shrink(("name",), 28), Shrink(("name",), 16))


def _frame(title: str) -> Table:
    return Table(title=Text(title), box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
