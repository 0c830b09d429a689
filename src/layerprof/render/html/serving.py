"""The serving card of a trace with roofline step annotations: each phase's steps, the
steps with their batch and counted FLOPs, and each layer's self time per phase."""

from __future__ import annotations

from layerprof.render.html.page import TABLE_LIMIT, Col, Section, esc, table, text_col
from layerprof.render.html.subject import Subject
from layerprof.render.serving_text import (
    PHASE_HEADERS,
    STEP_HEADERS,
    layer_rows,
    layer_title,
    phase_rows,
    step_rows,
    summary_line,
)


def serving_section(s: Subject) -> Section | None:
    serving = s.profile.trace.serving if s.profile is not None else None
    if serving is None:
        return None
    body = f"<p>{esc(summary_line(serving))}</p>"
    body += table("lp-serving-phases", _columns(PHASE_HEADERS), phase_rows(serving))
    body += table("lp-serving-steps", _columns(STEP_HEADERS), step_rows(serving, TABLE_LIMIT))
    phases, rows = layer_rows(serving, TABLE_LIMIT)
    if rows:
        body += f"<p>{esc(layer_title(serving))}</p>"
        body += table("lp-serving-layers", _columns(("layer", *phases)), rows)
    intro = (
        "A serving engine's steps read from their roofline annotations: prefill, decode or"
        " mixed by their batch, each phase's step time and throughput, and each layer's self"
        " time per step of each phase (the device's: its kernels, where the trace has device"
        " ops). FLOPs are counted from the steps' matrix products"
        " (attention and graph-replayed kernels are not)."
    )
    return Section("serving", "Serving steps by phase", body, intro)


def _columns(headers: tuple[str, ...]) -> list[Col[tuple[str, ...]]]:
    return [_column(i, h) for i, h in enumerate(headers)]


def _column(i: int, header: str) -> Col[tuple[str, ...]]:
    def cell(row: tuple[str, ...]) -> str:
        return row[i]

    return text_col(header, cell)
