"""The terminal view of a Diff: warnings, latency, then the largest layer and op changes."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.pivot.change import Change, fmt_pct, judgement, side_label
from layerprof.pivot.diff import Diff, GateResult, LayerDelta, OpDelta, PhaseDelta, StepDelta
from layerprof.render.console.columns import Col, Hide, Row, Shrink, Step, print_table
from layerprof.render.terminal import escaping
from layerprof.units import fmt_delta_ms, fmt_ms

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
    with escaping(console) as out:
        _print_diff(diff, out, top, gate)


def _print_diff(diff: Diff, console: Console, top: int, gate: GateResult | None) -> None:
    console.print(
        Text.assemble(
            ("layerprof diff  ", "bold"),
            ("base ", "dim"),
            (side_label(diff.base_meta), "cyan"),
            ("  →  new ", "dim"),
            (side_label(diff.new_meta), "cyan"),
        )
    )
    evidence_style = "bold yellow" if diff.evidence == "single-run" else "bold"
    console.print(Text.assemble(("evidence: ", evidence_style), diff.evidence_note()))
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
        _print_table(console, "Steps", steps, len(diff.steps))
    if diff.phases:
        phases = diff.changed_phases()
        _print_table(console, diff.phases_title, phases[:top], len(phases))
    changed_layers = diff.changed_layers()
    if changed_layers:
        title = f"Layers (self time, {diff.layer_clock})"
        _print_table(console, title, changed_layers[:top], len(changed_layers))
    _print_one_sided(console, "layers", diff.added_layers(), diff.removed_layers())
    changed_ops = diff.changed_ops()
    if changed_ops:
        title = "Operators (device time)" if diff.op_metric == "device" else "Operators (self time)"
        _print_table(console, title, changed_ops[:top], len(changed_ops))
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
        word += f" (p={change.p_value:.2g} between runs)"
    return word


# Names give way to the numbers: notes, types and names shorten, then the type goes.
_DIFF_STEPS: tuple[Step, ...] = (
    Shrink(("Status",), 16),
    Shrink(("Type",), 16),
    Shrink(("name",), 32),
    Shrink(("Status",), 10),
    Hide(("Type",)),
    Shrink(("name",), 16),
    Shrink(("Status",), 7),
    Shrink(("name",), 12),
)


def _print_table(
    console: Console,
    title: str,
    rows: Sequence[LayerDelta | OpDelta | StepDelta | PhaseDelta],
    total: int,
) -> None:
    layers = bool(rows) and isinstance(rows[0], LayerDelta)
    caption = f"{len(rows)} of {total}, largest change first" if len(rows) < total else None
    columns = [Col("Layer" if layers else "Name", key="name")]
    if layers:
        columns.append(Col("Type"))
    columns += [Col(h, number=True) for h in ("Base ms", "New ms", "Δ ms", "Δ %")]
    if layers:
        columns.append(Col("Total Δ %", number=True))
    columns.append(Col("Status", ellipsis="end"))
    cells: list[Row] = []
    for row in rows:
        c = row.change
        line = [row.label]
        if isinstance(row, LayerDelta):
            line.append(row.type if row.base_type is None else f"{row.base_type} → {row.type}")
        line += [fmt_ms(c.base_ns), fmt_ms(c.new_ns), fmt_delta_ms(c.delta_ns), fmt_pct(c)]
        status: str = c.status
        if isinstance(row, LayerDelta):
            line.append(fmt_pct(row.total))
            if row.note:
                status += f" ({row.note})"
        line.append(status)
        cells.append(Row(tuple(line), style=_STATUS_STYLE[c.status] if c.significant else None))

    def frame() -> Table:
        return Table(
            title=Text(title),
            title_justify="left",
            caption=Text(caption) if caption else None,
            caption_justify="left",
        )

    print_table(console, frame, columns, cells, steps=_DIFF_STEPS)


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
