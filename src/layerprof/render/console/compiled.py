"""The console part of a ``--compile`` profile: row marks and the compiled summary.

The layer table itself is the usual one (the compiled times are in the usual
fields); rows whose time is partly an estimate (a fused kernel split among
layers) get a mark. Under the table: what was compiled, where the forward's
time went (kernels, wrapper overhead, outside), graph breaks and recompiles,
and the kernels with the layers their time went to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from layerprof.render.console.columns import Col, Hide, Row, Shrink, print_table
from layerprof.units import fmt_calls, human_time, unit_for

if TYPE_CHECKING:
    from rich.console import Console

    from layerprof.pivot.profile import Profile
    from layerprof.pivot.sections.compiled import CompiledKernel, CompiledSection

ESTIMATE_MARK = "*"
TOP_KERNELS = 10
_SPLIT_SHOWN = 3


def row_marks(profile: Profile) -> dict[str, str]:
    """`` *`` after the name of each layer whose compiled time is partly an estimate."""
    c = profile.compiled
    if c is None:
        return {}
    return {p.path: " " + ESTIMATE_MARK for p in c.paths if p.estimated_ns > 0}


def print_compiled(console: Console, profile: Profile) -> None:
    """The compiled summary under the layer table (nothing for other profiles)."""
    c = profile.compiled
    if c is None:
        return
    for line in summary_lines(c):
        console.print(line)
    if c.kernels:
        _kernel_table(console, c)


def summary_lines(c: CompiledSection) -> list[Text]:
    regions = ", ".join(r or "the whole model" for r in c.regions)
    again = " (again: it came compiled)" if c.recompiled else ""
    lines = [
        Text.assemble(
            ("compiled ", "bold"),
            f"{regions}{again}: mode {c.mode}{', dynamic' if c.dynamic else ''}, split {c.split},"
            f" torch {c.torch}; compiling took {human_time(c.compile_ns)}",
        ),
    ]
    cov = c.coverage
    if cov.forward_ns > 0:
        where = "GPU kernels" if c.device_time else "kernels"
        lines.append(
            Text(
                # means: the tree below shows medians, which need not add up to these
                f"mean profiled forward {human_time(cov.forward_ns)}"
                f" = {where} {human_time(cov.attributed_ns)}"
                f" ({human_time(cov.shared_ns)} of it split by {c.split})"
                f" + compiled overhead {human_time(cov.overhead_ns)}"
                f" + outside compiled regions {human_time(cov.outside_ns)};"
                f" {100 * cov.attributed_share:.1f}% of the compiled regions' time attributed"
            )
        )
    graphs = sum(1 for g in c.graphs if g.phase == "forward")
    backward = len(c.graphs) - graphs
    lines.append(
        Text(
            f"graphs {graphs} forward{f', {backward} backward' if backward else ''}"
            f"  graph breaks {sum(b.count for b in c.breaks)}  recompiles {len(c.recompiles)}"
        )
    )
    lines += [Text(f"  break: {b.reason} (x{b.count})", style="dim") for b in c.breaks]
    lines += [Text(f"  recompile: {r.frame}: {r.reason}", style="dim") for r in c.recompiles]
    if any(p.estimated_ns > 0 for p in c.paths):
        lines.append(
            Text(
                f"{ESTIMATE_MARK} part of the layer's time is a fused kernel split among layers"
                f" by {c.split} (an estimate)",
                style="dim",
            )
        )
    return lines


def _kernel_table(console: Console, c: CompiledSection) -> None:
    kernels = c.kernels[:TOP_KERNELS]
    unit = unit_for(max(k.time_ns for k in kernels))
    columns = [
        Col("Kernel" + (f" (top {TOP_KERNELS})" if len(c.kernels) > TOP_KERNELS else ""),
            key="Kernel"),
        Col("Kind"),
        Col("Calls", number=True),
        Col(f"{'GPU ' if c.device_time else ''}Time {unit.name}", number=True, key="time"),
        Col("Layers", ellipsis="end"),
    ]  # fmt: skip
    rows = [
        Row((k.name, _kind(k), fmt_calls(k.calls), unit.fmt(k.time_ns), _split(k))) for k in kernels
    ]
    steps = (Shrink(("Layers",), 30), Shrink(("Kernel",), 30), Hide(("Kind",)),
             Shrink(("Layers",), 16), Shrink(("Kernel",), 16))  # fmt: skip
    print_table(console, _frame, columns, rows, steps=steps)


def _frame() -> Table:
    return Table(show_edge=False, pad_edge=False, header_style="bold")


def _kind(k: CompiledKernel) -> str:
    kind = "extern" if k.extern else "fused"
    return f"{kind} bwd" if k.phase == "backward" else kind


def _split(k: CompiledKernel) -> str:
    shown = [f"{s.path or '(root)'} {100 * s.share:.0f}%" for s in k.split[:_SPLIT_SHOWN]]
    more = len(k.split) - _SPLIT_SHOWN
    return ", ".join(shown) + (f", +{more} more" if more > 0 else "")
