"""Activation memory in the console: one table per layer (saved for backward, parameters,
gradients, optimizer state) and the allocator's peak per phase, when the profile has
the section (``run --backward``; see docs/definitions.md, "Activation memory")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from layerprof.render.console.columns import Cell, Col, Label, Row, Shrink, Step, print_table
from layerprof.units import human_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from layerprof.pivot.profile import Profile
    from layerprof.pivot.sections.memory import ActivationMemory, MemoryTotals

#: At most this many layers: the heaviest by saved bytes, shown in module order.
_MEMORY_ROWS = 30
_STEPS: tuple[Step, ...] = (Shrink(("name",), 24), Shrink(("name",), 12))


def print_activation_memory(
    console: Console, profile: Profile, *, rows: int = _MEMORY_ROWS
) -> None:
    """The memory table and its peak line; nothing when the profile has no section."""
    section = profile.activation_memory
    if section is None:
        return
    totals = section.totals()
    shown = _heaviest(totals, rows)
    columns = [Col("Layer", key="name", cap=48), Col("Activations", number=True),
               Col("Self", number=True), Col("Params", number=True)]  # fmt: skip
    if section.has_grads:
        columns.append(Col("Grads", number=True))
    if section.has_optimizer:
        columns.append(Col("Optimizer", number=True))
    names = {r.path: r.path or profile.meta.model or "model" for r in section.rows}
    table_rows = [Row(_cells(t, names[t.path], section)) for t in shown]

    def frame() -> Table:
        return Table(
            title=Text("memory per layer (bytes saved for backward, and held)"),
            box=box.SIMPLE_HEAD,
            title_justify="left",
            title_style="bold",
        )

    print_table(console, frame, columns, table_rows, steps=_STEPS)
    for line in _memory_lines(section, hidden=len(totals) - len(shown)):
        console.print(Text(line, style="dim"))


def _cells(t: MemoryTotals, name: str, section: ActivationMemory) -> tuple[Cell, ...]:
    depth = 0 if not t.path else t.path.count(".") + 1  # indented by depth, full paths
    cells: list[Cell] = [
        Label("  " * depth, name),
        human_bytes(t.activations),
        human_bytes(t.activations_self),
        human_bytes(t.params),
    ]
    if section.has_grads:
        cells.append(human_bytes(t.grads) if t.grads is not None else "-")
    if section.has_optimizer:
        cells.append(human_bytes(t.optimizer) if t.optimizer is not None else "-")
    return tuple(cells)


def _heaviest(totals: list[MemoryTotals], rows: int) -> list[MemoryTotals]:
    if len(totals) <= rows:
        return totals
    keep = {t.path for t in sorted(totals, key=lambda t: -t.activations)[:rows]}
    return [t for t in totals if t.path in keep]


def _memory_lines(section: ActivationMemory, *, hidden: int = 0) -> list[str]:
    """What the table's numbers are, the loss's share, the peaks per phase."""
    lines = [
        f"saved for backward: {human_bytes(section.saved_bytes)} in the step's largest forward"
        f" (of {section.forwards}); once per storage, parameters excluded, a tensor belongs"
        " to the innermost layer that saved it first"
    ]
    if section.outside_bytes:
        lines.append(f"saved outside every layer (the loss): {human_bytes(section.outside_bytes)}")
    if section.peaks:
        peaks = ", ".join(
            f"{p.phase} {human_bytes(p.peak_bytes)} (+{human_bytes(p.rise_bytes)})"
            for p in section.peaks
        )
        lines.append(f"allocator peak per phase: {peaks}")
    if hidden > 0:
        lines.append(f"{hidden} lighter layers not shown (all are in --json)")
    return lines
