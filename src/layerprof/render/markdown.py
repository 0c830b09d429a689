"""Markdown for a pull-request comment: a verdict line, latency, top changes, the rest folded."""

from __future__ import annotations

from collections.abc import Sequence

from layerprof.pivot.change import Change, fmt_pct, judgement, side_label
from layerprof.pivot.diff import Diff, GateResult, LayerDelta, OpDelta, PhaseDelta, StepDelta
from layerprof.render.terminal import escape_controls
from layerprof.units import fmt_delta_ms, fmt_ms

_ICON = {
    "slower": "🔴",
    "faster": "🟢",
    "mixed": "🟡",
    "same": "⚪",
    "not comparable": "⚠️",
}


def diff_to_markdown(diff: Diff, *, top: int = 20, gate: GateResult | None = None) -> str:
    """GitHub-flavoured Markdown of ``diff``; ``top`` rows per table, the rest in ``<details>``."""
    out = [f"### {_ICON.get(diff.verdict, '')} layerprof diff: {_escape(diff.headline())}", ""]
    if gate is not None:
        out += [f"**Gate:** {_escape(gate.message)}", ""]
    out += [
        f"base `{_code(side_label(diff.base_meta))}` → new `{_code(side_label(diff.new_meta))}`",
        "",
    ]
    mark = "⚠️ " if diff.evidence == "single-run" else ""
    out += [f"**Evidence:** {mark}{_escape(diff.evidence_note())}", ""]
    out += [f"> ⚠️ {_escape(w)}" for w in diff.warnings]
    if diff.warnings:
        out.append("")
    if not diff.comparable:
        out += [f"**Not comparable:** {_escape(diff.reason or '')}", ""]
        return "\n".join(out).rstrip() + "\n"
    if diff.latency is not None:
        out += [_latency(diff.latency), ""]
    out += _steps(diff.steps)
    out += _section(diff.phases_title, diff.changed_phases(), top)
    out += _section(f"Layers (self time, {diff.layer_clock})", diff.changed_layers(), top)
    out += _one_sided("layers", diff.added_layers(), diff.removed_layers())
    ops_title = "Operators (device time)" if diff.op_metric == "device" else "Operators (self time)"
    out += _section(ops_title, diff.changed_ops(), top)
    out += _one_sided("operators", diff.added_ops(), diff.removed_ops())
    out.append(f"<sub>{_escape(diff.rule_text())}</sub>")
    return "\n".join(out).rstrip() + "\n"


def _steps(steps: Sequence[StepDelta]) -> list[str]:
    """Trace steps by index (each side has one sample per step)."""
    if not steps:
        return []
    out = ["#### Steps", "", "| Step | Base ms | New ms | Δ ms | Δ % | Status |"]
    out.append("| --- | ---: | ---: | ---: | ---: | --- |")
    for step in steps:
        c = step.change
        out.append(
            f"| {step.index} | {fmt_ms(c.base_ns)} | {fmt_ms(c.new_ns)} |"
            f" {fmt_delta_ms(c.delta_ns)} | {fmt_pct(c)} | {_escape(c.status)} |"
        )
    return [*out, ""]


def _latency(c: Change) -> str:
    judged = judgement(c)
    pct = fmt_pct(c)
    if c.significant:
        pct = f"**{pct}**"
    return (
        f"**Latency:** {fmt_ms(c.base_ns)} ms → {fmt_ms(c.new_ns)} ms"
        f" ({fmt_delta_ms(c.delta_ns)} ms, {pct}, {judged})"
    )


def _section(title: str, rows: Sequence[LayerDelta | OpDelta | PhaseDelta], top: int) -> list[str]:
    if not rows:
        return []
    head, rest = list(rows[: max(top, 0)]), list(rows[max(top, 0) :])
    out = [f"#### {title}", ""]
    if head:
        out += [*_table(head), ""]
    if rest:
        out += [
            f"<details><summary>{len(rest)} more (smaller changes)</summary>",
            "",
            *_table(rest),
            "",
            "</details>",
            "",
        ]
    return out


def _table(rows: Sequence[LayerDelta | OpDelta | PhaseDelta]) -> list[str]:
    layers = isinstance(rows[0], LayerDelta)
    name = "Phase" if isinstance(rows[0], PhaseDelta) else "Operator"
    header = ["", "Layer" if layers else name]
    header += ["Type"] if layers else []
    header += ["Base ms", "New ms", "Δ ms", "Δ %"]
    header += ["Total Δ %"] if layers else []
    header += ["Status"]
    align = ["---", "---"] + (["---"] if layers else []) + ["---:"] * (5 if layers else 4)
    align += ["---"]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    for row in rows:
        c = row.change
        mark = {"slower": "🔴", "faster": "🟢"}.get(c.status, "") if c.significant else ""
        cells = [mark, f"`{_code(row.label)}`"]
        status: str = c.status
        if isinstance(row, LayerDelta):
            cells.append(
                _escape(row.type if row.base_type is None else f"{row.base_type} → {row.type}")
            )
            if row.note:
                status += f" ({row.note})"
        pct = fmt_pct(c)
        cells += [
            fmt_ms(c.base_ns),
            fmt_ms(c.new_ns),
            fmt_delta_ms(c.delta_ns),
            f"**{pct}**" if c.significant else pct,
        ]
        if isinstance(row, LayerDelta):
            cells.append(fmt_pct(row.total))
        cells.append(_escape(status))
        out.append("| " + " | ".join(cells) + " |")
    return out


def _one_sided(
    what: str, added: Sequence[LayerDelta | OpDelta], removed: Sequence[LayerDelta | OpDelta]
) -> list[str]:
    out = []
    for word, rows in (("Added", added), ("Removed", removed)):
        if not rows:
            continue
        items = ", ".join(
            f"`{_code(r.label)}` ({fmt_ms(_one_side_ns(r.change))} ms)"
            for r in sorted(rows, key=lambda r: -abs(r.change.delta_ns))
        )
        out += [f"**{word} {what} ({len(rows)}):** {items}", ""]
    return out


def _one_side_ns(c: Change) -> int | None:
    return c.new_ns if c.base_ns is None else c.base_ns


def _escape(text: str) -> str:
    """Plain text that cannot break a table row or open HTML; a newline or any other
    control character in a name shows as its escape (``\\n``), not as a new line."""
    return escape_controls(text).replace("|", "\\|").replace("<", "&lt;")


def _code(text: str) -> str:
    """Text inside a code span: no backticks, pipes escaped for tables."""
    return escape_controls(text).replace("`", "'").replace("|", "\\|")
