"""The words for a change that every renderer, the gate's reasons and the diff's JSON
use: one place, so the console, Markdown, HTML and the saved verdict say the same.
(Below the renderers on purpose: the codec writes the verdict line and the gate its
reasons, and neither may import a renderer.)"""

from __future__ import annotations

from layerprof.analysis.diffjudge import Change, gate_pct
from layerprof.pivot.records import Meta
from layerprof.units import fmt_ms, fmt_num

SINGLE_RUN = "one run per side cannot separate a change from drift between processes"

HOW_TO_GATE = (
    "for a gate, compare several processes per side: layerprof diff --run 'BASE ARGS'"
    " 'NEW ARGS' --rounds 10 (interleaved), or run --repeat N on both sides"
)


def describe(change: Change, fail_above_pct: float) -> str:
    pct = "new time" if change.delta_pct is None else f"{change.delta_pct:+.1f} %"
    noise = "" if change.p_value is None else f", p={change.p_value:.1g} between runs"
    limit = gate_pct(change, fail_above_pct)
    above = f"above {fmt_num(limit)} %"
    if limit != fail_above_pct:
        above += " (the drift allowance of a single-run comparison)"
    return (
        f"{fmt_ms(change.base_ns)} -> {fmt_ms(change.new_ns)} ms ({pct}{noise})"
        f" is beyond noise and {above}"
    )


def fmt_pct(change: Change) -> str:
    if change.status == "added":
        return "new"
    if change.status == "removed":
        return "gone"
    return "-" if change.delta_pct is None else f"{change.delta_pct:+.1f} %"


def judgement(change: Change) -> str:
    """How a change was judged, in words every renderer uses."""
    if change.significant:
        return change.status
    if change.beyond_noise:
        return "beyond noise, under threshold"
    return "within noise"


def side_label(meta: Meta) -> str:
    """``Net (cpu, float32, torch 2.4)`` for headers; what a side does not know is left out
    (a trace has no dtype, and a device only when its events name one)."""
    facts = [f for f in (meta.device, meta.dtype) if f]
    facts += [f"torch {meta.torch}"] if meta.torch else []
    model = meta.model or "?"
    return f"{model} ({', '.join(facts)})" if facts else model
