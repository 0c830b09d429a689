"""The terminal view of a Diff: warnings, latency, then the largest layer and op changes."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.diff import (
    Change,
    Diff,
    GateResult,
    LayerDelta,
    OpDelta,
    StepDelta,
    fmt_delta_ms,
    fmt_ms,
    fmt_pct,
    judgement,
    side_label,
)

_STATUS_STYLE = {
    "slower": "bold red",
    "faster": "bold green",
    "same": "dim",
    "added": "yellow",
    "removed": "yellow",
}


def print_diff(
    diff: Diff, console: Console, *, top: int = 20, gate: GateResult | None = None
) -> None:
    """Print ``diff``: the ``top`` largest changes per table, significant ones highlighted."""
    console.print(
        Text.assemble(
            ("layerprof diff  ", "bold"),
            ("base ", "dim"),
            (side_label(diff.base_meta), "cyan"),
            ("  →  new ", "dim"),
            (side_label(diff.new_meta), "cyan"),
        )
    )
    for warning in diff.warnings:
        console.print(Text.assemble(("warning: ", "bold yellow"), warning))
    if not diff.comparable:
        console.print(Text.assemble(("not comparable: ", "bold red"), diff.reason or ""))
        if diff.latency is not None:
            console.print(_latency_line(diff.latency, note="latency of two different models"))
        _print_gate(console, gate)
        return
    verdict_style = _STATUS_STYLE.get(diff.verdict, "bold")
    console.print(Text(diff.headline(), style=verdict_style if diff.verdict != "same" else "bold"))
    if diff.latency is not None:
        console.print(_latency_line(diff.latency))
    if diff.steps:
        steps = sorted(diff.steps, key=lambda s: -abs(s.change.delta_ns))[:top]
        console.print(_table("Steps", steps, len(diff.steps)))
    changed_layers = diff.changed_layers()
    if changed_layers:
        title = f"Layers (self time, {diff.layer_clock})"
        console.print(_table(title, changed_layers[:top], len(changed_layers)))
    _print_one_sided(console, "layers", diff.added_layers(), diff.removed_layers())
    changed_ops = diff.changed_ops()
    if changed_ops:
        title = "Operators (device time)" if diff.op_metric == "device" else "Operators (self time)"
        console.print(_table(title, changed_ops[:top], len(changed_ops)))
    _print_one_sided(console, "ops", diff.added_ops(), diff.removed_ops())
    console.print(Text(diff.rule_text(), style="dim"))
    _print_gate(console, gate)


def _latency_line(change: Change, *, note: str | None = None) -> Text:
    style = _STATUS_STYLE[change.status]
    text = Text.assemble(
        ("latency  ", "bold"),
        f"{fmt_ms(change.base_ns)} ms → {fmt_ms(change.new_ns)} ms  ",
        (f"{fmt_delta_ms(change.delta_ns)} ms  {fmt_pct(change)}  ", style),
        (_judgement(change), style),
    )
    if note:
        text.append(f"  ({note})", style="dim")
    return text


def _judgement(change: Change) -> str:
    word = judgement(change)
    if change.p_value is not None:
        word += f" (p={change.p_value:.2g})"
    return word


def _table(title: str, rows: Sequence[LayerDelta | OpDelta | StepDelta], total: int) -> Table:
    layers = bool(rows) and isinstance(rows[0], LayerDelta)
    caption = f"{len(rows)} of {total}, largest change first" if len(rows) < total else None
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    table.add_column("Layer" if layers else "Name", overflow="fold")
    if layers:
        table.add_column("Type")
    for header in ("Base ms", "New ms", "Δ ms", "Δ %"):
        table.add_column(header, justify="right")
    if layers:
        table.add_column("Total Δ %", justify="right")
    table.add_column("Status")
    for row in rows:
        c = row.change
        style = _STATUS_STYLE[c.status] if c.significant else None
        cells = [row.label]
        if isinstance(row, LayerDelta):
            cells.append(row.type if row.base_type is None else f"{row.base_type} → {row.type}")
        cells += [fmt_ms(c.base_ns), fmt_ms(c.new_ns), fmt_delta_ms(c.delta_ns), fmt_pct(c)]
        status: str = c.status
        if isinstance(row, LayerDelta):
            cells.append(fmt_pct(row.total))
            if row.note:
                status += f" ({row.note})"
        table.add_row(*cells, status, style=style)
    return table


def _print_one_sided(
    console: Console,
    what: str,
    added: Sequence[LayerDelta | OpDelta],
    removed: Sequence[LayerDelta | OpDelta],
) -> None:
    for word, rows in (("added", added), ("removed", removed)):
        if not rows:
            continue
        items = ", ".join(
            f"{r.label} ({fmt_ms(r.change.new_ns if word == 'added' else r.change.base_ns)} ms)"
            for r in sorted(rows, key=lambda r: -abs(r.change.delta_ns))
        )
        console.print(Text.assemble((f"{word} {what} ({len(rows)}): ", "yellow"), items))


def _print_gate(console: Console, gate: GateResult | None) -> None:
    if gate is None:
        return
    console.print(Text(gate.message, style="bold red" if gate.failed else "bold green"))
