"""A ``generate()`` profile in the console: time to first token, inter-token latency, the
prefill and decode rates, the KV cache, and the heaviest layers' time in each phase
(see docs/definitions.md, "Generation")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from layerprof.render.generation_text import (
    WORK_COLUMNS,
    peak_line,
    phase_rows,
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
    rows = phase_rows(g)
    if not rows:
        return
    largest = max(max(x.total_ns for x in (a, b) if x is not None) for _, a, b in rows)
    unit = unit_for(largest)
    table = Table(
        title=Text(f"layers per forward of each phase ({unit.name}; the heaviest in decode)"),
        box=box.SIMPLE_HEAD, title_justify="left", title_style="bold",
    )  # fmt: skip
    for name in ("Layer", "Prefill total", "Prefill self", "Decode total", "Decode self",
                 "Decode growth /1k pos"):  # fmt: skip
        table.add_column(name, justify="left" if name == "Layer" else "right")
    for path, pre, dec in rows:
        table.add_row(
            path or profile.meta.model or "model",
            unit.fmt(pre.total_ns) if pre else "-",
            unit.fmt(pre.self_ns) if pre else "-",
            unit.fmt(dec.total_ns) if dec else "-",
            unit.fmt(dec.self_ns) if dec else "-",
            unit.fmt(dec.growth_ns_per_1k) if dec and dec.growth_ns_per_1k is not None else "-",
        )
    console.print(table)
    work = work_rows(g)
    if not work:
        return
    table = Table(
        title=Text("work per forward of each phase (counted FLOPs, FLOP per byte, roofline)"),
        box=box.SIMPLE_HEAD, title_justify="left", title_style="bold",
    )  # fmt: skip
    table.add_column("Layer", overflow="fold")  # a path folds rather than lose its end
    for name in WORK_COLUMNS:
        table.add_column(name, justify="right")
    for row in work:
        table.add_row(row[0] or profile.meta.model or "model", *row[1:])
    console.print(table)
    ridge = peak_line(g)
    if ridge is not None:
        console.print(Text("  " + ridge, style="dim"))
