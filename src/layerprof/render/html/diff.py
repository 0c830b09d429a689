"""The sections of a Diff: the verdict, the latency change and the gate, then the steps,
layers, operators and kernels that were compared, each with how it was judged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from layerprof.pivot.change import Change, fmt_pct, judgement
from layerprof.pivot.diff import Diff, KernelDelta, LayerDelta, OpDelta, PhaseDelta, StepDelta
from layerprof.render.html.charts import BarSeries, bars, in_ms
from layerprof.render.html.page import (
    TOP_N,
    Col,
    Section,
    chart_slot,
    esc,
    name_col,
    paragraph,
    stat_cards,
    table,
    text_col,
)
from layerprof.render.html.subject import Subject
from layerprof.units import fmt_calls, fmt_delta_ms, fmt_ms


class Judged(Protocol):
    """A compared row: a step, a layer, an operator or a kernel."""

    @property
    def change(self) -> Change: ...

    @property
    def label(self) -> str: ...


T = TypeVar("T", bound=Judged)


def status_class(c: Change) -> str:
    """The badge colour: significant slower red, faster green, one-sided blue, the rest grey."""
    if c.status in ("added", "removed"):
        return "info"
    if c.significant:
        return "bad" if c.status == "slower" else "good"
    return "warn" if c.beyond_noise else "muted"


def status_text(c: Change) -> str:
    return c.status if c.status in ("added", "removed") else judgement(c)


# ---------------------------------------------------------------- summary


def diff_section(s: Subject) -> Section | None:
    d = s.diff
    if d is None:
        return None
    evidence = paragraph(d.evidence_note(), "warning" if d.evidence == "single-run" else "caption")
    body = evidence + "".join(paragraph(w, "warning") for w in d.warnings)
    if not d.comparable:
        body += paragraph(f"Not comparable: {d.reason or ''}", "verdict bad")
    else:
        verdict = {"slower": "bad", "faster": "good", "mixed": "bad"}.get(d.verdict, "")
        body += paragraph(d.headline(), f"verdict {verdict}".strip())
    if d.latency is not None:
        body += "<h3>Latency</h3>" + stat_cards(_change_cards(d.latency))
    gate = s.shown_gate
    if gate is not None:
        cls = "bad" if gate.failed else "good"
        text = f"FAIL: regression beyond noise above {gate.fail_above_pct:g} %"
        body += paragraph(gate.message if not gate.failed else text, f"verdict {cls}")
        if gate.failed:
            body += '<ul class="notes">' + "".join(f"<li>{esc(r)}</li>" for r in gate.reasons)
            body += "</ul>"
    body += paragraph(_settings(d), "caption") + paragraph(d.rule_text(), "caption")
    return Section("diff", "Changes between runs", body)


def _change_cards(c: Change) -> list[tuple[str, str, str]]:
    cls = status_class(c) if c.significant else ""
    cards = [
        ("base", f"{fmt_ms(c.base_ns)} ms", ""),
        ("new", f"{fmt_ms(c.new_ns)} ms", ""),
        ("change", f"{fmt_delta_ms(c.delta_ns)} ms", cls),
        ("change %", fmt_pct(c), cls),
        ("verdict", status_text(c), cls),
        ("judged by", c.basis, ""),
    ]
    if c.p_value is not None:
        cards.append(("p-value (between runs)", f"{c.p_value:.2g}", ""))
    if c.ci_ns is not None:
        cards.append(("± 95% CI of Δ", f"{fmt_ms(c.ci_ns)} ms", ""))
    if c.noise_ns is not None:
        cards.append(("noise bound", f"{fmt_ms(c.noise_ns)} ms", ""))
    return cards


def _settings(d: Diff) -> str:
    ops = "device" if d.op_metric == "device" else "self"
    key = "name and input shapes" if d.op_key == "name+shapes" else "name"
    return (
        f"Layers are compared by {d.layer_clock} self time, operators by {ops} time"
        f" (matched by {key}); the floor is {fmt_ms(d.floor_ns)} ms, the threshold"
        f" {d.threshold_pct:g} %."
    )


# ---------------------------------------------------------------- tables


def _change_columns(rows: Sequence[T]) -> list[Col[T]]:
    """Base, new, delta, delta %, and how the change was judged (``rows`` fixes the type)."""

    def get(r: T) -> Change:
        return r.change

    return [
        Col("Base (ms)", lambda r: fmt_ms(get(r).base_ns), lambda r: get(r).base_ns),
        Col("New (ms)", lambda r: fmt_ms(get(r).new_ns), lambda r: get(r).new_ns),
        Col("Δ (ms)", lambda r: fmt_delta_ms(get(r).delta_ns), lambda r: get(r).delta_ns),
        Col("Δ %", lambda r: fmt_pct(get(r)), lambda r: get(r).delta_pct),
        Col(
            "Status",
            lambda r: status_text(get(r)),
            markup=lambda r: (
                f'<span class="badge {status_class(get(r))}">{esc(status_text(get(r)))}</span>'
            ),
            tip=lambda r: _judged_tip(get(r)),
        ),
    ]


def _judged_tip(c: Change) -> str:
    parts = [f"judged by {c.basis}"]
    if c.p_value is not None:
        parts.append(f"p={c.p_value:.2g} between runs")
    if c.ci_ns is not None:
        parts.append(f"95% CI of Δ ±{fmt_ms(c.ci_ns)} ms")
    if c.noise_ns is not None:
        parts.append(f"noise bound {fmt_ms(c.noise_ns)} ms")
    return ", ".join(parts)


def _calls(base: float | None, new: float | None) -> str:
    if base is None and new is None:
        return ""
    if base is None or new is None or base == new:
        return fmt_calls(base if base is not None else new or 0)
    return f"{fmt_calls(base)} → {fmt_calls(new)}"


def _largest_first(rows: Sequence[T]) -> list[T]:
    return sorted(rows, key=lambda r: (-abs(r.change.delta_ns), r.label))


def diff_steps_section(s: Subject) -> Section | None:
    d = s.diff
    if d is None or not d.steps:
        return None
    cols: list[Col[StepDelta]] = [
        Col("Step", lambda r: r.label, lambda r: r.index),
        *_change_columns(d.steps),
    ]
    intro = "Trace steps compared by index (one sample per side: judged by the threshold)."
    return Section("diff-steps", "Steps", table("lp-diff-steps", cols, d.steps), intro)


def diff_phases_section(s: Subject) -> Section | None:
    d = s.diff
    if d is None or not d.phases:
        return None
    rows = d.changed_phases()
    cols: list[Col[PhaseDelta]] = [
        text_col("Phase", lambda r: r.phase),
        text_col("Time", lambda r: r.label.split(": ", 1)[1], css="path"),
        *_change_columns(rows),
    ]
    intro = (
        "A generate's prefill and decode compared apart: the clean pass's time to first"
        " token and inter-token latency (their samples), then each layer's self time per"
        " forward of each phase (judged on the saved medians' spread and interval)."
    )
    heading = "Generation changes"
    if d.serving_phases:
        intro = (
            "A serving trace's prefill, decode and mixed steps compared apart: each phase's"
            " step time (its steps' times), then each layer's self time per step of each"
            " phase (judged on the saved medians' spread and interval)."
        )
        heading = "Serving step changes"
    body = table("lp-diff-phases", cols, rows, filter_label="Filter layers")
    return Section("diff-phases", heading, body, intro)


def diff_layers_section(s: Subject) -> Section | None:
    d = s.diff
    if d is None or not d.layers:
        return None
    rows = _largest_first(d.layers)
    cols: list[Col[LayerDelta]] = [
        text_col("Layer", lambda r: r.label, css="path"),
        text_col("Type", lambda r: r.type if r.base_type is None else f"{r.base_type} → {r.type}"),
        text_col("Calls", lambda r: _calls(r.calls_base, r.calls_new)),
        *_change_columns(rows),
        Col("Total Δ %", lambda r: fmt_pct(r.total), lambda r: r.total.delta_pct),
    ]
    if any(r.note for r in rows):
        cols.append(text_col("Note", lambda r: r.note))
    changed = d.changed_layers(TOP_N)
    charts = {}
    body = ""
    if changed:
        charts["lp-diff-layers"] = bars(
            "Largest layer changes (new - base)",
            [r.label for r in changed],
            [
                BarSeries(
                    "Δ self",
                    in_ms([r.change.delta_ns for r in changed]),
                    colours=tuple(status_class(r.change) for r in changed),
                )
            ],
            axis="Δ ms",
        )
        body += chart_slot("lp-diff-layers")
    body += table("lp-diff-layers-table", cols, rows, filter_label="Filter layers")
    intro = (
        f"Each layer's {d.layer_clock} self time per forward, largest change first; Total Δ %"
        " is the inclusive time's change. Hover a status for how it was judged."
    )
    return Section("diff-layers", "Layer changes", body, intro, charts)


def diff_ops_section(s: Subject) -> Section | None:
    d = s.diff
    if d is None or not d.ops:
        return None
    rows = _largest_first(d.ops)
    cols: list[Col[OpDelta]] = [text_col("Operator", lambda r: r.name, css="path")]
    if any(r.input_shapes for r in rows):
        cols.append(text_col("Input shapes", lambda r: r.input_shapes, css="shape"))
    cols += [
        text_col("Calls", lambda r: _calls(r.calls_base, r.calls_new)),
        *_change_columns(rows),
    ]
    what = "device" if d.op_metric == "device" else "self"
    intro = f"Operators summed per iteration, by {what} time, largest change first."
    body = table("lp-diff-ops", cols, rows, filter_label="Filter operators")
    return Section("diff-ops", "Operator changes", body, intro)


def diff_kernels_section(s: Subject) -> Section | None:
    d = s.diff
    if d is None or not d.kernels:
        return None
    rows = _largest_first(d.kernels)
    cols: list[Col[KernelDelta]] = [
        name_col("Kernel", lambda r: r.name),
        *_change_columns(rows),
    ]
    intro = "GPU kernels by name, time per step (judged by the threshold: no per-step samples)."
    body = table("lp-diff-kernels", cols, rows, filter_label="Filter kernels")
    return Section("diff-kernels", "Kernel changes", body, intro)
