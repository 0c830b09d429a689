"""The generation card of a ``generate()`` profile: time to first token, inter-token
latency, the prefill and decode rates and the KV cache, then each of the heaviest
layers' time per forward in prefill and in decode."""

from __future__ import annotations

from layerprof.pivot.sections.generation import Generation, PhaseLayer
from layerprof.render.generation_text import (
    PHASE_COLUMNS,
    WORK_COLUMNS,
    other_phases,
    phase_rows,
    phase_table,
    roofline_lines,
    summary_lines,
    work_rows,
)
from layerprof.render.html.charts import BarSeries, Chart, StepSeries, StepTimes, bars, in_ms
from layerprof.render.html.page import Col, Section, chart_slot, esc, table, text_col, time_col
from layerprof.render.html.subject import Subject
from layerprof.units import unit_for

_Row = tuple[str, PhaseLayer | None, PhaseLayer | None]


def generation_section(s: Subject) -> Section | None:
    g = s.profile.generation if s.profile is not None else None
    if g is None:
        return None
    body = "".join(f"<p>{esc(line)}</p>" for line in summary_lines(g))
    body += _phases(g)
    charts: dict[str, Chart] = {}
    rows = phase_rows(g)
    if rows:
        largest = max(max(x.total_ns for x in (a, b) if x is not None) for _, a, b in rows)
        unit = unit_for(largest)
        cols: list[Col[_Row]] = [
            text_col("Layer", lambda r: r[0] or "(model)", css="path"),
            time_col("Prefill total", lambda r: r[1].total_ns if r[1] else None, unit),
            time_col("Prefill self", lambda r: r[1].self_ns if r[1] else None, unit),
            time_col("Decode total", lambda r: r[2].total_ns if r[2] else None, unit),
            time_col("Decode self", lambda r: r[2].self_ns if r[2] else None, unit),
            time_col(
                "Decode growth per 1k positions",
                lambda r: r[2].growth_ns_per_1k if r[2] else None,
                unit,
            ),
        ]
        body += table("lp-generation", cols, rows)
        charts["lp-phases"] = bars(
            "Self time per forward, prefill and decode (the heaviest layers in decode)",
            [r[0] or "(model)" for r in rows],
            [
                BarSeries("prefill", in_ms([r[1].self_ns if r[1] else None for r in rows])),
                BarSeries(
                    "decode", in_ms([r[2].self_ns if r[2] else None for r in rows]), colour="info"
                ),
            ],
            axis="ms",
        )
        body = chart_slot("lp-phases") + body
    work = work_rows(g)
    if work:
        work_cols: list[Col[tuple[str, ...]]] = [
            text_col("Layer", lambda r: r[0] or "(model)", css="path"),
            *(text_col(name, lambda r, i=i: r[i]) for i, name in enumerate(WORK_COLUMNS, 1)),  # type: ignore[misc]
        ]
        body += table("lp-generation-work", work_cols, work)
        body += "".join(f'<p class="caption">{esc(line)}</p>' for line in roofline_lines(g))
    by_token = g.itl_by_token()
    if len(by_token) > 1:
        tokens = tuple(str(i + 2) for i in range(len(by_token)))
        charts["lp-itl"] = StepTimes(
            title="Inter-token latency by token (median over the timed generates)",
            series=(StepSeries("inter-token latency", tokens, in_ms(by_token)),),
        )
        body = chart_slot("lp-itl") + body
    intro = (
        "A language model's generate(), prefill and decode apart: time to first token from"
        " the call to the first token's logits, inter-token latency between tokens' logits"
        " (a clean pass with no hooks); each layer per forward of each phase (the per-layer"
        " pass), the heaviest in decode."
    )
    return Section("generation", "Generation", body, intro, charts)


def _phases(g: Generation) -> str:
    """Every phase (named ones and an encoder's encode too) in one table, then each one
    besides prefill and decode with its heaviest layers."""
    if not g.phases:
        return ""
    cols: list[Col[tuple[str, ...]]] = [
        text_col(name, lambda r, i=i: r[i], css="path" if name == "Heaviest layer" else "")  # type: ignore[misc]
        for i, name in enumerate(PHASE_COLUMNS)
    ]
    out = table("lp-generation-phases", cols, phase_table(g, "(model)"))
    for k, (name, layers) in enumerate(other_phases(g)):
        unit = unit_for(max(x.total_ns for x in layers))
        layer_cols: list[Col[PhaseLayer]] = [
            text_col("Layer", lambda x: x.path or "(model)", css="path"),
            time_col(f"{name} total", lambda x: x.total_ns, unit),
            time_col(f"{name} self", lambda x: x.self_ns, unit),
        ]
        out += table(f"lp-generation-phase-{k}", layer_cols, list(layers))
    return out
