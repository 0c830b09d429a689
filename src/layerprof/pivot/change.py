"""How one time moved between two runs (``Change``), the constants its verdict is read
against, and the words for it that every renderer, the gate's reasons and the diff's
JSON use: one place, so the console, Markdown, HTML and the saved verdict say the same.
How a change is judged is ``layerprof.analysis.diffjudge``'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from layerprof.pivot.records import Meta
from layerprof.units import fmt_ms, fmt_num

ALPHA = 0.001
"""Two-sided significance level of the rank test, per row."""

FLOOR_MIN_NS = 1_000
"""Smallest absolute change that can count: 1 µs."""

FLOOR_SHARE = 0.005
"""Or 0.5 % of the whole forward, when that is larger."""

BETWEEN_FLOOR_FACTOR = 0.5
"""Rows judged between runs need only half the floor (0.25 % of the forward): the
t-test already carries the run-to-run spread, and a 10 % slower layer that takes
5 % of the forward changes it by 0.5 %, which the full floor would not let pass."""


def between_floor(floor_ns: int) -> int:
    """The floor for rows judged on the spread between runs."""
    return max(FLOOR_MIN_NS, round(floor_ns * BETWEEN_FLOOR_FACTOR))


DRIFT_ALLOWANCE_PCT = 50.0
"""What a row judged on one run per side must exceed to fail the gate: the same
model's separate processes differed by up to 40 % on this project's machine
(latency 17.5 -> 20.8 ms back to back), a drift no within-run statistic sees."""

Status = Literal["slower", "faster", "same", "added", "removed"]

Basis = Literal["rounds", "repeats", "rank-test", "separation", "summary", "threshold"]

Evidence = Literal["rounds", "repeats", "single-run"]

BETWEEN_RUNS: tuple[Basis, ...] = ("rounds", "repeats")
"""Bases whose verdict rests on the run-to-run spread (several processes per side)."""

STATUSES: tuple[Status, ...] = get_args(Status)

BASES: tuple[Basis, ...] = get_args(Basis)

EVIDENCES: tuple[Evidence, ...] = get_args(Evidence)


@dataclass(frozen=True)
class Change:
    """How one time moved between base and new (medians, integer ns).

    ``base_ns`` is ``None`` for an added row, ``new_ns`` for a removed one.
    ``delta_pct`` is ``None`` when there is no base time to divide by.
    ``p_value`` is the between-run t-test's (``basis`` ``rounds`` or
    ``repeats``) and ``None`` otherwise: a within-run test cannot see the
    drift between processes, so its p-value is not a p-value for the change.
    ``noise_ns`` is the spread bound (between runs: one run-to-run standard
    deviation of the difference) and ``ci_ns`` the half-width of the
    difference's confidence interval the change had to exceed; ``None`` where
    the row was judged without them (``basis == "threshold"``).
    """

    base_ns: int | None
    new_ns: int | None
    delta_ns: int
    delta_pct: float | None
    beyond_noise: bool
    significant: bool
    status: Status
    basis: Basis
    p_value: float | None = None
    noise_ns: int | None = None
    ci_ns: int | None = None

    @property
    def regressed(self) -> bool:
        """Slower beyond noise (the threshold aside), on a row present on both sides."""
        return self.status not in ("added", "removed") and self.beyond_noise and self.delta_ns > 0

    @property
    def between_runs(self) -> bool:
        """Judged on the run-to-run spread (several processes per side)."""
        return self.basis in BETWEEN_RUNS


def gate_pct(change: Change, fail_above_pct: float) -> float:
    """The percentage a row must exceed to fail: ``fail_above_pct`` when it was judged on
    the run-to-run spread, else no less than the drift allowance."""
    return fail_above_pct if change.between_runs else max(fail_above_pct, DRIFT_ALLOWANCE_PCT)


def over_gate(change: Change, fail_above_pct: float) -> bool:
    pct = change.delta_pct
    return change.regressed and (pct is None or pct > gate_pct(change, fail_above_pct))


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
        # not "single-run": a gathered diff's row without per-process medians lands here too
        above += " (the drift allowance of a row judged inside the runs)"
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
