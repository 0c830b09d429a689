"""How one time moved between two runs (``Change``) and the words for it that every
renderer, the gate's reasons and the diff's JSON use: one place, so the console,
Markdown, HTML and the saved verdict say the same. How a change is judged, and the
constants its verdict is read against, are ``layerprof.analysis.diffjudge``'s; what
fails the gate is ``layerprof.analysis.gate``'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from layerprof.pivot.records import Meta

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


SINGLE_RUN = "one run per side cannot separate a change from drift between processes"

HOW_TO_GATE = (
    "for a gate, compare several processes per side: layerprof diff --run 'BASE ARGS'"
    " 'NEW ARGS' --rounds 10 (interleaved), or run --repeat N on both sides"
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
