"""A serving trace's steps by phase in the console: each phase's steps (time, tokens/s,
time per prefill token and per decode request), the steps with their batch and counted
FLOPs, and each layer's self time per phase (see docs/trace.md, "Serving steps by phase")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from layerprof.render.console.columns import Col, Row, Shrink, print_table
from layerprof.render.serving_text import (
    PHASE_HEADERS,
    STEP_HEADERS,
    layer_rows,
    layer_title,
    phase_rows,
    step_rows,
    summary_line,
)

if TYPE_CHECKING:
    from rich.console import Console

    from layerprof.pivot.profile import Profile


def print_serving(profile: Profile, console: Console, most: int) -> None:
    s = profile.trace.serving
    if s is None:
        return
    console.print(Text("serving steps by phase (roofline annotations)", style="bold"))
    console.print(Text("  " + summary_line(s)))
    _table(console, "phases (medians over each phase's steps)", PHASE_HEADERS, phase_rows(s))
    shown = min(most, len(s.steps))
    title = f"steps ({shown} of {len(s.steps)}; FLOPs counted from matrix products' shapes)"
    _table(console, title, STEP_HEADERS, step_rows(s, most))
    phases, rows = layer_rows(s, most)
    if rows:
        _table(console, layer_title(s), ("layer", *phases), rows)


def _table(
    console: Console, title: str, headers: tuple[str, ...], rows: list[tuple[str, ...]]
) -> None:
    columns = [Col(headers[0], key="name", cap=48)] + [Col(h, number=True) for h in headers[1:]]
    print_table(
        console,
        lambda: Table(
            title=Text(title), box=box.SIMPLE_HEAD, title_justify="left", title_style="bold"
        ),
        columns,
        [Row(r) for r in rows],
        steps=(Shrink(("name",), 24), Shrink(("name",), 12)),
    )
