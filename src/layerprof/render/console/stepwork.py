"""A trace's device work in the console: the steps whose idle time, utilization and
breakdown were measured over their work's own span on the device (it ran outside their
host span), and each device's clock check (see docs/trace.md, "A step's device work")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from layerprof.render.console.columns import Col, Row, Shrink, print_table
from layerprof.render.stepwork_text import (
    WORK_HEADERS,
    clock_lines,
    shown,
    work_rows,
    work_title,
)

if TYPE_CHECKING:
    from rich.console import Console

    from layerprof.pivot.profile import Profile


def print_device_work(profile: Profile, console: Console, most: int) -> None:
    work = profile.trace.device_work
    if work is None or not shown(work):
        return
    rows = work_rows(work, most)
    if rows:
        title = work_title(work, most)
        columns = [Col(WORK_HEADERS[0], key="name", cap=60)] + [
            Col(h, number=True) for h in WORK_HEADERS[1:]
        ]
        print_table(
            console,
            lambda: _frame(title),
            columns,
            [Row(r) for r in rows],
            steps=(Shrink(("name",), 32), Shrink(("name",), 16)),
        )
    for line in clock_lines(work):
        console.print(Text("clocks, " + line))


def _frame(title: str) -> Table:
    return Table(title=Text(title), box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
