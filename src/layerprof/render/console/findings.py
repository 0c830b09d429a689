"""Findings for the terminal, most severe first (``layerprof.analysis.diagnose``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.render.terminal import escape_text, escaping

if TYPE_CHECKING:
    from collections.abc import Sequence

    from layerprof.analysis.diagnose import Finding

_FINDING_INDENT = 10


def print_findings(
    findings: Sequence[Finding], console: Console, *, checks: Sequence[str] = ()
) -> None:
    """Findings from layerprof.analysis.diagnose, most severe first; with none, the
    ``checks`` that ran (so "nothing to flag" says what was looked at)."""
    if not findings:
        if checks:
            with escaping(console) as out:
                out.print(Text.assemble(("findings", "bold"), ": nothing to flag"))
                out.print(Text("  checked: " + "; ".join(checks), style="dim"))
        return
    style = {"high": "bold red", "warning": "yellow", "info": "cyan"}
    # a grid, so wrapped lines stay under the text and the severity stands out
    grid = Table.grid()
    grid.add_column(width=_FINDING_INDENT, no_wrap=True)
    grid.add_column()
    for f in findings:  # a grid's cells are not the console's to escape: escaped here
        where = f" [{f.layer}]" if f.layer else ""
        grid.add_row(
            Text(f"  {f.severity}", style[f.severity]),
            escape_text(Text.assemble((f.title, "bold"), where)),
        )
        grid.add_row("", escape_text(Text(f.detail)))
        if f.hint:
            grid.add_row("", escape_text(Text(f"try: {f.hint}", style="dim")))
    with escaping(console) as out:
        out.print(Text("findings", style="bold"))
        out.print(grid)
