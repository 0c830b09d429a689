"""The regression gate: whether a diff fails a CI check (``layerprof diff --fail-above``,
``layerprof.gate`` in Python).

A row fails when it is present on both sides, slower beyond noise (the judge's verdict,
``layerprof.analysis.diffjudge``) and more than ``fail_above_pct`` slower. A row judged
inside one run per side must also exceed ``DRIFT_ALLOWANCE_PCT``: no within-run
statistic sees the drift between processes. The outcome is a ``GateResult``
(``layerprof.pivot.diff``), which every renderer shows.
"""

from __future__ import annotations

import math

from layerprof.errors import UsageError
from layerprof.pivot.change import Change
from layerprof.pivot.diff import METRICS, Diff, GateResult, Metric
from layerprof.units import fmt_ms, fmt_num

DRIFT_ALLOWANCE_PCT = 50.0
"""What a row judged on one run per side must exceed to fail the gate: the same
model's separate processes differed by up to 40 % on this project's machine
(latency 17.5 -> 20.8 ms back to back), a drift no within-run statistic sees."""


def gate(d: Diff, fail_above_pct: float, metric: Metric = "any") -> GateResult:
    """Fail on a regression beyond noise larger than ``fail_above_pct`` in ``metric``.

    A non-comparable diff fails with its reason: a gate that compares two
    different models has nothing to pass on.
    """
    if metric not in METRICS:
        raise UsageError(f"unknown gate metric {metric!r}", hint="one of " + ", ".join(METRICS))
    if not math.isfinite(fail_above_pct) or fail_above_pct < 0:
        raise UsageError(f"--fail-above must be a percentage >= 0, not {fail_above_pct!r}")
    if d.comparable:
        reasons = _reasons(d, fail_above_pct, metric)
    else:
        reasons = [f"profiles are not comparable: {d.reason}"]
    return GateResult(
        failed=bool(reasons),
        reasons=tuple(reasons),
        fail_above_pct=fail_above_pct,
        metric=metric,
        evidence=d.evidence,
        drift_allowance_pct=DRIFT_ALLOWANCE_PCT,
    )


def _reasons(d: Diff, fail_above_pct: float, metric: Metric) -> list[str]:
    """One reason per row over the gate, in the report's order: latency, phases, layers, ops."""
    reasons: list[str] = []
    lat = d.latency
    if metric in ("latency", "any") and lat is not None and over_gate(lat, fail_above_pct):
        reasons.append("latency " + describe(lat, fail_above_pct))
    for row in d.changed_phases():
        wanted = "latency" if row.path is None else "layers"
        if metric in (wanted, "any") and over_gate(row.change, fail_above_pct):
            what = row.label if row.path is None else f"{row.label} self time"
            reasons.append(f"{what} " + describe(row.change, fail_above_pct))
    if metric in ("layers", "any"):
        for layer in d.changed_layers():
            if over_gate(layer.change, fail_above_pct):
                what = f"layer {layer.label} ({layer.type}) self time "
                reasons.append(what + describe(layer.change, fail_above_pct))
    if metric in ("ops", "any"):
        for op in d.changed_ops():
            # threshold-only op rows gate only when asked for by name
            if metric == "any" and op.change.basis == "threshold":
                continue
            if over_gate(op.change, fail_above_pct):
                reasons.append(f"op {op.label} " + describe(op.change, fail_above_pct))
    return reasons


def gate_pct(change: Change, fail_above_pct: float) -> float:
    """The percentage a row must exceed to fail: ``fail_above_pct`` when it was judged on
    the run-to-run spread, else no less than the drift allowance."""
    return fail_above_pct if change.between_runs else max(fail_above_pct, DRIFT_ALLOWANCE_PCT)


def over_gate(change: Change, fail_above_pct: float) -> bool:
    """Slower beyond noise and above its gate percentage (an added-time row: always)."""
    pct = change.delta_pct
    return change.regressed and (pct is None or pct > gate_pct(change, fail_above_pct))


def describe(change: Change, fail_above_pct: float) -> str:
    """A failing row's reason: its times, its change, and the limit it passed."""
    pct = "new time" if change.delta_pct is None else f"{change.delta_pct:+.1f} %"
    noise = "" if change.p_value is None else f", p={change.p_value:.1g} between runs"
    limit = gate_pct(change, fail_above_pct)
    above = f"above {fmt_num(limit)} %"
    if limit != fail_above_pct:
        # not "single-run": a gathered diff's row without per-process medians lands here too
        above += " (the drift allowance of a row judged inside the runs)"
    return (
        f"{fmt_ms(change.base_ns)} -> {fmt_ms(change.new_ns)} ms ({pct}{noise})"
        f" is beyond noise and {above}"
    )
