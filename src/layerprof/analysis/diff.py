"""Compare two profiles: latency, steps, layers, operators and a generate's phases,
with noise taken into account.

``diff(base, new)`` aligns the two sides and returns a :class:`Diff` of rows,
each saying how much a time moved and whether the move is real:

* **Latency**: the median of the clean-pass latency samples (``latency_ns``).
* **Steps** (both sides analyzed from traces, ``meta.source == "trace"``): the
  latency samples compared one by one, by index.
* **Layers**, aligned by module path. The judged time is the layer's *self*
  time per forward, so that a slower leaf is flagged alone instead of
  together with every ancestor whose inclusive time it also raised; the
  inclusive (total) change is carried beside it. A path whose module type
  changed is still compared and carries a note. On CUDA, device times are used
  when both sides have them for every common layer, host times otherwise.
* **Operators** (``OpStat`` rows are per iteration), aligned by
  ``(name, input_shapes)`` when both sides recorded shapes, by name otherwise;
  rows of one key (e.g. one per layer) are summed.
  Device time when every op on both sides has it, host self time otherwise.

Rows present on one side only are ``added``/``removed``, never dropped. When
one whole side has no layer (or no operator) records at all, that kind is not
compared and a warning says so, instead of listing every row as added.

What a verdict rests on
-----------------------
Timings drift between processes (10-40 % here) by far more than inside one,
so only several processes per side can separate a change from drift. When both
profiles carry ``repeats`` (``run --repeat N``; ``diff --run`` in interleaved
rounds) a row with per-run medians on both sides is judged on them: a paired
t-test on the per-round log ratios when the sides come from one interleaved
session (``basis == "rounds"``), Welch's t-test on the logs of the per-process
medians otherwise (``"repeats"``); beyond noise = ``p < ALPHA`` in the
direction of the change, outside its 95 % interval and above half the floor.
In rounds, a layer row is tested on its self time relative to the rest of its
own forward (``RunMedians.rest_ratio``), so the speed of each process cancels.
Every other row, and every row of a single-run comparison, is judged inside
the runs by the rule below, carries no p-value (it would ignore drift), and
fails the gate only above ``DRIFT_ALLOWANCE_PCT`` (``Diff.evidence`` says which
case a diff is).

Noise rule inside runs
----------------------
A change is **beyond noise** when

1. a two-sided Mann-Whitney rank test on the two sides' per-iteration samples
   rejects "same distribution" at ``p < ALPHA`` (0.001), with the direction of
   the ranks agreeing with the sign of the median change. The test is exact
   (no ties, up to 2,500 sample pairs) or uses the tie-corrected normal
   approximation. It needs no scale estimate and holds for any distribution,
   including the skewed, outlier-prone ones timings have;
2. the change of the medians exceeds the iterations' own spread:
   ``NOISE_K * 1.4826 * sqrt(MAD_base**2 + MAD_new**2)``, one robust standard
   deviation of (a new iteration - a base iteration). Unlike the test, this
   bound does not shrink with more iterations, so a drift between two runs
   that is small next to the jitter inside each run is not called a change;
3. the absolute change exceeds the half-width of the confidence interval of
   the difference of the medians, ``sqrt(h_base**2 + h_new**2)`` from the two
   medians' 95 % intervals (order statistics, see ``layerprof.stats``), so
   that "slower" never rests on a difference inside the interval;
4. the absolute change exceeds a floor of ``max(1 µs, 0.5 % of the whole
   forward)`` (the larger side's median latency, else its root layers'
   total), so that microsecond layers do not flap.

When a side was saved without its per-iteration samples (the default of
``--json``), the rank test cannot run: rules 2 to 4 decide on the saved
summaries alone (``basis == "summary"``).

A change is **significant** (status ``slower``/``faster``, highlighted) when it
is beyond noise *and* ``|delta %| > threshold_pct`` (5 % by default); anything
else is ``same``. When a side has too few samples for the rank test to ever
reach ``p < ALPHA`` (fewer than about 7 per side), the test's smallest
possible p stands in for ALPHA: the two sides' samples must not overlap
(``basis == "separation"``); with one sample per side the threshold and the
floor alone decide (``basis == "threshold"``). The diff says so in a warning.
Operators without per-iteration samples on both sides, kernels and single
steps are always judged by the threshold and the floor; such rows are shown
but do not decide the verdict or the default (``any``) gate.

The regression gate (:meth:`Diff.gate`) fails on a row that is beyond noise,
slower, and more than ``fail_above_pct`` slower. Added and removed layers or
operators never fail the gate by themselves: the latency row judges what they
cost.

No torch import here: a diff runs on saved profiles. Times are integer
nanoseconds inside and milliseconds in JSON.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from layerprof import sinks
from layerprof.errors import UsageError
from layerprof.profile import Profile
from layerprof.records import LayerSamples, Meta, OpStat
from layerprof.sections import Repeats
from layerprof.stats import (
    CI_LEVEL,
    Series,
    Summary,
    TTest,
    median,
    min_p_value,
    paired_t_test,
    rank_test,
    welch_t_test,
)
from layerprof.units import fmt_ms

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


NOISE_K = 1.0
"""The change must exceed NOISE_K robust standard deviations of (new iteration - base iteration)."""
MAD_TO_SIGMA = 1.4826
"""MAD times this estimates the standard deviation of a normal distribution."""
DRIFT_ALLOWANCE_PCT = 50.0
"""What a row judged on one run per side must exceed to fail the gate: the same
model's separate processes differed by up to 40 % on this project's machine
(latency 17.5 -> 20.8 ms back to back), a drift no within-run statistic sees."""


Status = Literal["slower", "faster", "same", "added", "removed"]
Basis = Literal["rounds", "repeats", "rank-test", "separation", "summary", "threshold"]
Evidence = Literal["rounds", "repeats", "single-run"]
BETWEEN_RUNS: tuple[Basis, ...] = ("rounds", "repeats")
"""Bases whose verdict rests on the run-to-run spread (several processes per side)."""
Metric = Literal["latency", "layers", "ops", "any"]
Verdict = Literal["slower", "faster", "mixed", "same", "not comparable"]
METRICS: tuple[Metric, ...] = get_args(Metric)
STATUSES: tuple[Status, ...] = get_args(Status)
BASES: tuple[Basis, ...] = get_args(Basis)
EVIDENCES: tuple[Evidence, ...] = get_args(Evidence)


# ---- value objects ----------------------------------------------------------


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


class _Judged:
    """Status and significance of a row, read from its ``change``."""

    change: Change

    @property
    def status(self) -> Status:
        return self.change.status

    @property
    def significant(self) -> bool:
        return self.change.significant


@dataclass(frozen=True)
class LayerDelta(_Judged):
    """One layer path: ``change`` is its self time, ``total`` its inclusive time."""

    path: str
    type: str
    change: Change
    total: Change
    base_type: str | None = None
    calls_base: float | None = None
    calls_new: float | None = None
    note: str | None = None

    @property
    def label(self) -> str:
        """The path, or the model's class for the root."""
        return self.path if self.path else self.type


@dataclass(frozen=True)
class OpDelta(_Judged):
    """One operator key (name, plus input shapes when both sides recorded them)."""

    name: str
    change: Change
    input_shapes: str | None = None
    calls_base: float | None = None
    calls_new: float | None = None

    @property
    def label(self) -> str:
        return f"{self.name} {self.input_shapes}" if self.input_shapes else self.name


@dataclass(frozen=True)
class StepDelta(_Judged):
    """One trace step, compared by index."""

    index: int
    change: Change

    @property
    def label(self) -> str:
        return f"step {self.index}"


@dataclass(frozen=True)
class PhaseDelta(_Judged):
    """One phase of a ``generate()``: its own time (``path`` None: the time to first
    token for prefill, the inter-token latency for decode, from the clean pass's
    samples) or one layer's self time per forward of that phase (judged on the saved
    medians' spread and interval: phases keep no per-forward samples)."""

    phase: str
    path: str | None
    change: Change

    @property
    def label(self) -> str:
        if self.path is None:
            what = "time to first token" if self.phase == "prefill" else "inter-token latency"
            return f"{self.phase}: {what}"
        return f"{self.phase}: {self.path or '(model)'}"


@dataclass(frozen=True)
class KernelDelta(_Judged):
    """One GPU kernel by name: its time per step (threshold-judged: no per-step samples)."""

    name: str
    change: Change

    @property
    def label(self) -> str:
        return self.name


@dataclass(frozen=True)
class GateResult:
    """Outcome of :meth:`Diff.gate`: ``failed`` with one reason per offending row."""

    failed: bool
    reasons: tuple[str, ...]
    fail_above_pct: float = 0.0
    metric: Metric = "any"
    evidence: Evidence = "rounds"

    @property
    def message(self) -> str:
        """One line for a terminal or a CI log; says when one run per side was all it had."""
        what = "any compared time" if self.metric == "any" else self.metric
        caveat = ""
        if self.evidence == "single-run":
            caveat = (
                f" ({SINGLE_RUN}: gated only above the {_fmt_num(DRIFT_ALLOWANCE_PCT)} %"
                f" drift allowance; {HOW_TO_GATE})"
            )
        if not self.failed:
            return (
                f"pass: no regression beyond noise above {_fmt_num(self.fail_above_pct)} %"
                f" in {what}{caveat}"
            )
        return "FAIL: " + "; ".join(self.reasons) + caveat

    def to_dict(self) -> dict[str, Any]:
        return {
            "failed": self.failed,
            "metric": self.metric,
            "fail_above_pct": self.fail_above_pct,
            "evidence": self.evidence,
            "reasons": list(self.reasons),
        }


SINGLE_RUN = "one run per side cannot separate a change from drift between processes"
HOW_TO_GATE = (
    "for a gate, compare several processes per side: layerprof diff --run 'BASE ARGS'"
    " 'NEW ARGS' --rounds 10 (interleaved), or run --repeat N on both sides"
)


@dataclass(frozen=True)
class Diff(sinks.Output):
    """Two profiles compared; build with :func:`diff`, never by hand.

    ``comparable`` is ``False`` (with ``reason``) when the two sides have no
    layer paths in common: they profile different models, and renderers say
    so instead of listing every layer as added and removed.
    """

    base_meta: Meta
    new_meta: Meta
    latency: Change | None
    steps: tuple[StepDelta, ...] = ()
    layers: tuple[LayerDelta, ...] = ()
    ops: tuple[OpDelta, ...] = ()
    kernels: tuple[KernelDelta, ...] = ()
    phases: tuple[PhaseDelta, ...] = ()  # prefill and decode apart (both sides generated)
    warnings: tuple[str, ...] = ()
    comparable: bool = True
    reason: str | None = None
    threshold_pct: float = 5.0
    floor_ns: int = FLOOR_MIN_NS
    alpha: float = ALPHA
    layer_clock: Literal["host", "device"] = "host"
    op_metric: Literal["self", "device"] = "self"
    op_key: Literal["name", "name+shapes"] = "name"
    gate_result: GateResult | None = None  # the gate a saved diff was written with
    evidence: Evidence = "single-run"
    runs_base: int = 1  # separate processes behind each side
    runs_new: int = 1

    def __repr__(self) -> str:
        return f"<Diff {self.base_meta.model or '?'} -> {self.new_meta.model or '?'}: {self.headline()}>"

    # ---- sinks (through layerprof.sinks) ------------------------------------
    def to_markdown(self, **options: Any) -> str:
        """A Markdown report for a pull-request comment."""
        return str(sinks.render(self, "md", **options))

    def to_dict(self, top: int | None = None, *, gate: GateResult | None = None) -> dict[str, Any]:
        """The ``layerprof.diff/1`` document (see ``layerprof.codec``)."""
        return sinks.to_dict(self, top=top, gate=gate)

    def save(self, path: str | os.PathLike[str]) -> Path:
        return sinks.save(self, path)

    # ---- views ----------------------------------------------------------
    def changed_layers(self, top: int | None = None) -> list[LayerDelta]:
        """Layers on both sides, largest absolute self-time change first."""
        rows = [r for r in self.layers if r.status not in ("added", "removed")]
        return _top(rows, top)

    def changed_ops(self, top: int | None = None) -> list[OpDelta]:
        rows = [r for r in self.ops if r.status not in ("added", "removed")]
        return _top(rows, top)

    def changed_kernels(self, top: int | None = None) -> list[KernelDelta]:
        rows = [r for r in self.kernels if r.status not in ("added", "removed")]
        return _top(rows, top)

    def changed_phases(self, top: int | None = None) -> list[PhaseDelta]:
        """Each phase's own time first (time to first token, inter-token latency), then
        its layers, largest absolute change first."""
        own = [r for r in self.phases if r.path is None]
        rows = [
            r for r in self.phases if r.path is not None and r.status not in ("added", "removed")
        ]
        return own + _top(rows, top)

    def added_layers(self) -> list[LayerDelta]:
        return [r for r in self.layers if r.status == "added"]

    def removed_layers(self) -> list[LayerDelta]:
        return [r for r in self.layers if r.status == "removed"]

    def added_ops(self) -> list[OpDelta]:
        return [r for r in self.ops if r.status == "added"]

    def removed_ops(self) -> list[OpDelta]:
        return [r for r in self.ops if r.status == "removed"]

    @property
    def verdict(self) -> Verdict:
        """``slower``/``faster`` when every significant change points one way."""
        if not self.comparable:
            return "not comparable"
        changes = [r.change for r in self.layers] + [r.change for r in self.ops]
        changes += [r.change for r in self.phases]
        if self.latency is not None:
            changes.append(self.latency)
        # Rows judged on threshold alone (ops without per-iteration samples, single
        # steps) would flip the verdict on noise; only noise-tested rows count.
        changes = [c for c in changes if c.basis != "threshold"]
        slower = any(c.status == "slower" for c in changes)
        faster = any(c.status == "faster" for c in changes)
        if slower and faster:
            return "mixed"
        return "slower" if slower else "faster" if faster else "same"

    def headline(self) -> str:
        """One plain line: the verdict, the latency change, and how many rows moved."""
        if not self.comparable:
            return f"not comparable: {self.reason}"
        words = {
            "slower": "slower",
            "faster": "faster",
            "mixed": "mixed: some times slower, some faster",
            "same": "no change beyond noise",
        }
        parts = [words.get(self.verdict, self.verdict)]
        if self.evidence == "single-run":
            parts[0] += f" ({SINGLE_RUN})"
        lat = self.latency
        if lat is not None:
            parts.append(
                f"latency {fmt_ms(lat.base_ns)} → {fmt_ms(lat.new_ns)} ms ({fmt_pct(lat)})"
            )
        c = self.counts()
        for name in ("layers", "ops"):
            if c[name]["total"]:
                parts.append(f"{name}: {c[name]['slower']} slower, {c[name]['faster']} faster")
        return "; ".join(parts)

    def counts(self) -> dict[str, dict[str, int]]:
        """Rows per status, for layers and for ops."""
        out: dict[str, dict[str, int]] = {}
        for name, rows in (("layers", self.layers), ("ops", self.ops)):
            c = dict.fromkeys(get_args(Status), 0)
            for r in rows:
                c[r.status] += 1
            c["total"] = len(rows)
            out[name] = c
        return out

    def rule_text(self) -> str:
        """The significance rule in one plain sentence, for every renderer."""
        if self.evidence == "single-run":
            judged = (
                f"significant = beyond the noise inside each run (Mann-Whitney rank test"
                f" p < {self.alpha:g} on the per-iteration samples, |Δ| above the iterations'"
                f" spread and above {fmt_ms(self.floor_ns)} ms, outside the"
                f" {100 * CI_LEVEL:g} % confidence interval of the difference) and"
                f" |Δ %| > {self.threshold_pct:g} %. {SINGLE_RUN[0].upper()}{SINGLE_RUN[1:]},"
                " so no p-value is given and the gate fails only on changes above the"
                f" {_fmt_num(DRIFT_ALLOWANCE_PCT)} % drift allowance."
            )
        else:
            design = (
                "paired t-test on the per-round log ratios of the interleaved runs"
                if self.evidence == "rounds"
                else "Welch t-test on the per-process medians"
            )
            judged = (
                f"significant = beyond the run-to-run noise of {self.runs_base} vs"
                f" {self.runs_new} processes ({design}, p < {self.alpha:g}, |Δ| outside its"
                f" {100 * CI_LEVEL:g} % confidence interval and above"
                f" {fmt_ms(between_floor(self.floor_ns))} ms; layers: their time relative to"
                " the rest of the same forward, so a process slower throughout cancels)"
                f" and |Δ %| > {self.threshold_pct:g} %."
                " Rows without per-process medians are judged inside each run, without a"
                f" p-value, and fail the gate only above the {_fmt_num(DRIFT_ALLOWANCE_PCT)} %"
                " drift allowance."
            )
        return (
            judged + " Operators without per-iteration samples, kernels and single steps are"
            " judged by the threshold and the floor only, and do not decide the verdict or the"
            " default gate."
        )

    def evidence_note(self) -> str:
        """What the verdicts rest on, in one plain line."""
        if self.evidence == "single-run":
            return f"{SINGLE_RUN}; {HOW_TO_GATE}"
        how = "interleaved rounds" if self.evidence == "rounds" else "separate processes"
        return f"judged on the run-to-run spread: {self.runs_base} vs {self.runs_new} {how}" + (
            " (drift between the sides is not paired away)" if self.evidence == "repeats" else ""
        )

    # ---- the gate ---------------------------------------------------------
    def gate(self, fail_above_pct: float, metric: Metric = "any") -> GateResult:
        """Fail on a regression beyond noise larger than ``fail_above_pct`` in ``metric``.

        A non-comparable diff fails with its reason: a gate that compares two
        different models has nothing to pass on.
        """
        if metric not in METRICS:
            raise UsageError(f"unknown gate metric {metric!r}", hint="one of " + ", ".join(METRICS))
        if not math.isfinite(fail_above_pct) or fail_above_pct < 0:
            raise UsageError(f"--fail-above must be a percentage >= 0, not {fail_above_pct!r}")
        reasons: list[str] = []
        if not self.comparable:
            reasons.append(f"profiles are not comparable: {self.reason}")
        else:
            lat = self.latency
            if metric in ("latency", "any") and lat is not None and _over(lat, fail_above_pct):
                reasons.append("latency " + _describe(lat, fail_above_pct))
            for row in self.changed_phases():
                wanted = "latency" if row.path is None else "layers"
                if metric in (wanted, "any") and _over(row.change, fail_above_pct):
                    what = row.label if row.path is None else f"{row.label} self time"
                    reasons.append(f"{what} " + _describe(row.change, fail_above_pct))
            if metric in ("layers", "any"):
                for layer in self.changed_layers():
                    if _over(layer.change, fail_above_pct):
                        what = f"layer {layer.label} ({layer.type}) self time "
                        reasons.append(what + _describe(layer.change, fail_above_pct))
            if metric in ("ops", "any"):
                for op in self.changed_ops():
                    # threshold-only op rows gate only when asked for by name
                    if metric == "any" and op.change.basis == "threshold":
                        continue
                    if _over(op.change, fail_above_pct):
                        reasons.append(f"op {op.label} " + _describe(op.change, fail_above_pct))
        return GateResult(
            failed=bool(reasons),
            reasons=tuple(reasons),
            fail_above_pct=fail_above_pct,
            metric=metric,
            evidence=self.evidence,
        )


# ---- percent strings ----------------------------------------------------------


def parse_percent(text: str) -> float:
    """``'5%'``, ``'5'``, ``'0.5 %'`` -> a percentage as a float; UsageError otherwise."""
    cleaned = text.strip().removesuffix("%").strip()
    try:
        value = float(cleaned)
    except ValueError:
        value = math.nan
    if not cleaned or not math.isfinite(value) or value < 0:
        raise UsageError(
            f"{text!r} is not a percentage",
            hint="write a number >= 0, with or without '%', e.g. 5% or 0.5",
        )
    return value


# ---- the comparison ------------------------------------------------------------


def diff(base: Profile, new: Profile, *, threshold_pct: float = 5.0) -> Diff:
    """Compare ``new`` against ``base``; see the module docstring for the rules."""
    if not math.isfinite(threshold_pct) or threshold_pct < 0:
        raise UsageError(f"threshold must be a percentage >= 0, not {threshold_pct!r}")
    floor_ns = max(FLOOR_MIN_NS, round(FLOOR_SHARE * max(_whole_ns(base), _whole_ns(new))))
    evidence = _evidence(base.repeats, new.repeats)
    judge = _Judge(
        threshold_pct=threshold_pct,
        floor_ns=floor_ns,
        paired=evidence == "rounds",
        base_runs=base.repeats if evidence != "single-run" else None,
        new_runs=new.repeats if evidence != "single-run" else None,
    )
    comparable, reason = _comparability(base, new)
    warnings = _meta_warnings(base.meta, new.meta)
    if comparable and base.layers and new.layers:
        warnings += _overlap_warning(base, new)
    warnings += _runs_warnings(evidence, base.repeats, new.repeats)

    latency = None
    if base.latency_ns is not None and new.latency_ns is not None:
        latency = judge.compare(
            base.latency_ns, new.latency_ns, what="latency", runs=judge.latency_runs()
        )
    elif base.latency_ns is not None or new.latency_ns is not None:
        side = "base" if base.latency_ns is None else "new"
        warnings.append(f"the {side} profile has no latency samples: latency is not compared")

    steps: tuple[StepDelta, ...] = ()
    if base.meta.source == "trace" and new.meta.source == "trace":
        steps = _steps(base.latency_ns, new.latency_ns, judge)

    layers, layer_clock = _layers(base, new, judge)
    ops, op_metric, op_key = _ops(base, new, judge)
    phases = _phases(base, new, judge)
    if (base.generation is None) != (new.generation is None):
        side = "base" if base.generation is None else "new"
        warnings.append(
            f"the {side} profile has no generation section: prefill and decode are not compared"
        )
    for what, b_has, n_has in (
        ("layer", bool(base.layers), bool(new.layers)),
        ("operator", bool(base.ops), bool(new.ops)),
    ):
        if b_has != n_has:
            side = "new" if b_has else "base"
            warnings.append(f"the {side} profile has no {what} records: {what}s are not compared")
            if what == "layer":
                layers = ()
            else:
                ops = ()
    return Diff(
        base_meta=base.meta,
        new_meta=new.meta,
        latency=latency,
        steps=steps,
        layers=layers,
        ops=ops,
        kernels=_kernels(base, new, judge),
        phases=phases,
        warnings=(*warnings, *judge.warnings()),
        comparable=comparable,
        reason=reason,
        threshold_pct=threshold_pct,
        floor_ns=floor_ns,
        alpha=ALPHA,
        layer_clock=layer_clock,
        op_metric=op_metric,
        op_key=op_key,
        evidence=evidence,
        runs_base=base.repeats.n if base.repeats is not None else 1,
        runs_new=new.repeats.n if new.repeats is not None else 1,
    )


def _evidence(base: Repeats | None, new: Repeats | None) -> Evidence:
    """Between-run evidence needs at least two processes on each side."""
    if base is None or new is None or base.n < 2 or new.n < 2:
        return "single-run"
    return "rounds" if base.pairs_with(new) else "repeats"


RATIO_MAX = 1.0
"""Layers judged against the rest of their forward must take at most half of it
(a self-to-rest ratio of 1) in the base runs; larger ones keep their medians."""


def _leak_source(base: Repeats, new: Repeats) -> str | None:
    """The layer whose change moves the rest of every other layer's forward most.

    A layer that changes changes the rest of the forward of every other layer:
    one taking a quarter of it made 2x faster makes the others read 14 % slower
    against their rest. The layer whose change (against its rest, beyond noise)
    times its share of the forward is largest is taken out of the others' rest.
    """
    best, worst = None, 0.0
    paths = set().union(*(r.rest_ratio or {} for r in base.runs))
    for path in paths:
        b, n = base.layer_ratio(path), new.layer_ratio(path)
        keys = sorted(b.keys() & n.keys())
        if len(keys) < 2 or any(b[k] <= 0 or n[k] <= 0 for k in keys):
            continue
        test = paired_t_test([math.log(n[k] / b[k]) for k in keys])
        share = median([b[k] / (1 + b[k]) for k in keys])
        moved = abs(math.expm1(test.estimate)) * share
        if test.p_value < ALPHA and moved > worst:
            best, worst = path, moved
    return best


def _without(runs: Repeats, path: str, leak: str) -> dict[int, float]:
    """``path``'s time over the rest of its forward less ``leak``'s time, per run."""
    out = {}
    for i, r in enumerate(runs.runs):
        ratios = r.rest_ratio
        if ratios is None or path not in ratios or leak not in ratios:
            continue
        own, other = (ratios[p] / (1 + ratios[p]) for p in (path, leak))
        if own + other < 1:
            out[runs.key(i)] = own / (1 - own - other)
    return out


RUNS_ADVISED = 5
"""Fewer processes per side than this rarely reach p < ALPHA on a t-test."""


def _runs_warnings(evidence: Evidence, base: Repeats | None, new: Repeats | None) -> list[str]:
    out = []
    if evidence == "single-run":
        one = [side for side, r in (("base", base), ("new", new)) if r is not None and r.n >= 2]
        if one:
            out.append(
                f"only the {one[0]} side has several runs: the comparison is judged as one run"
                " per side"
            )
        return out
    assert base is not None and new is not None
    if evidence == "repeats":
        out.append(
            "the two sides' processes were not interleaved: a drift of the machine between"
            " the two sessions that is larger than the spread inside each is not told apart"
            " from a change; layerprof diff --run interleaves them"
        )
    if min(base.n, new.n) < RUNS_ADVISED:
        out.append(
            f"{base.n} vs {new.n} runs: with fewer than {RUNS_ADVISED} per side a change"
            f" reaches p < {ALPHA:g} only when the runs agree very closely; use more rounds"
        )
    return out


@dataclass
class _Judge:
    """Applies the noise rule; remembers which kinds of rows fell back to weaker rules.

    With ``base_runs``/``new_runs`` (several processes per side) rows that have
    per-run medians are judged on the run-to-run spread; ``paired``: by round.
    """

    threshold_pct: float
    floor_ns: int
    paired: bool = False
    base_runs: Repeats | None = None
    new_runs: Repeats | None = None
    fallbacks: dict[str, tuple[int, int]] = field(default_factory=dict)
    summary_only: set[str] = field(default_factory=set)
    leak: str | None = None

    def latency_runs(self) -> tuple[dict[int, int], dict[int, int]] | None:
        if self.base_runs is None or self.new_runs is None:
            return None
        return self.base_runs.latencies(), self.new_runs.latencies()

    def layer_runs(self, path: str, clock: str) -> tuple[dict[int, int], dict[int, int]] | None:
        if self.base_runs is None or self.new_runs is None:
            return None
        return self.base_runs.layer(path, clock), self.new_runs.layer(path, clock)

    def total_runs(self, path: str, clock: str) -> tuple[dict[int, int], dict[int, int]] | None:
        """Per-run totals of ``path`` (its subtree's self medians summed), so that the
        total column rests on the same between-run evidence as the self column."""
        if self.base_runs is None or self.new_runs is None:
            return None
        return self.base_runs.subtree(path, clock), self.new_runs.subtree(path, clock)

    def layer_ratios(
        self, path: str, clock: str
    ) -> tuple[dict[int, float], dict[int, float]] | None:
        """Per-round self time over the rest of the forward (host clock, paired rounds
        only: independent repeats keep their medians), or None."""
        if self.base_runs is None or self.new_runs is None or clock != "host" or not self.paired:
            return None
        base = self.base_runs.layer_ratio(path)
        # a layer taking most of the forward is compared against a small, noisy rest:
        # its medians are the steadier measure then (chosen on the base side alone)
        if not base or median(list(base.values())) > RATIO_MAX:
            return None
        new = self.new_runs.layer_ratio(path)
        if self.leak is None:
            self.leak = _leak_source(self.base_runs, self.new_runs) or ""
        if self.leak and self.leak != path:
            return _without(self.base_runs, path, self.leak), _without(
                self.new_runs, path, self.leak
            )
        return base, new

    def compare(
        self,
        base: Series | None,
        new: Series | None,
        *,
        what: str | None = None,
        runs: tuple[dict[int, int], dict[int, int]] | None = None,
        ratios: tuple[dict[int, float], dict[int, float]] | None = None,
    ) -> Change:
        """``what`` names the row kind for the small-sample warning; ``None``: expected.
        ``runs``: the row's per-run medians by run key, base and new; ``ratios``: its
        per-run time relative to the rest of the forward, tested instead where usable."""
        if base is None and new is None:
            return _change(0, 0, beyond=False, significant=False, basis="threshold")
        if base is None:
            return self._one_sided(round(cast(Series, new).median), "added")
        if new is None:
            return self._one_sided(round(base.median), "removed")
        between = self._between(*runs, ratios=ratios) if runs is not None else None
        if between is not None:
            return between
        b, n = round(base.median), round(new.median)
        delta = n - b
        pct = delta / b * 100 if b > 0 else None
        if base.n == 1 and new.n == 1:
            if what is not None and what not in self.fallbacks:
                self.fallbacks[what] = (1, 1)
            beyond = abs(delta) > self.floor_ns
            return self._judged(b, n, beyond, pct, "threshold")
        noise_ns = _noise(base.summary, new.summary)
        ci_ns = _ci(base.summary, new.summary)
        outside = abs(delta) > noise_ns and (ci_ns is None or abs(delta) > ci_ns)
        if base.values is None or new.values is None:
            if what is not None:
                self.summary_only.add(what)
            beyond = outside and abs(delta) > self.floor_ns
            return self._judged(b, n, beyond, pct, "summary", noise_ns=noise_ns, ci_ns=ci_ns)
        floor_p = min_p_value(base.n, new.n)
        basis: Basis = "rank-test" if floor_p < ALPHA else "separation"
        if basis == "separation" and what is not None and what not in self.fallbacks:
            self.fallbacks[what] = (base.n, new.n)
        p_value, direction = rank_test(base.values, new.values)
        level = max(ALPHA, floor_p) * (1 + 1e-9)
        tested = p_value <= level and direction * delta > 0 and outside
        beyond = tested and abs(delta) > self.floor_ns
        # The within-run p-value is not kept: it ignores the drift between processes,
        # so it would claim a certainty about the change that the data do not give.
        return self._judged(b, n, beyond, pct, basis, noise_ns=noise_ns, ci_ns=ci_ns)

    def _between(
        self,
        base: dict[int, int],
        new: dict[int, int],
        *,
        ratios: tuple[dict[int, float], dict[int, float]] | None = None,
    ) -> Change | None:
        """Judged on the per-run medians: a paired t-test over rounds, or Welch's over
        two sets of processes; ``None`` when a side has fewer than two runs of the row.

        The tests run on the logarithms of the medians, so that a machine running
        20 % slower in one round scales both of its processes alike and cancels
        from their ratio (on differences it would scale the change itself); a row
        with a zero median in some run is tested on plain differences instead.
        With ``ratios`` (a layer's time over the rest of its own forward, per run)
        the test runs on those instead: the speed of each process cancels too,
        which a pair of processes of one round does not share (measured here: a
        layer's per-round log ratio of medians scattered by 20-35 %, of these
        ratios by 3-5 %). The change is then the base median times the mean ratio.
        """
        b_vals, n_vals = self._values(base, new)
        if len(b_vals) < 2 or len(n_vals) < 2:
            return None
        b = round(median(b_vals))
        rb, rn = self._values(*ratios) if ratios is not None else ([], [])
        relative = (
            min(len(rb), len(rn)) >= 2
            and len(rb) == len(b_vals)
            and len(rn) == len(n_vals)
            and all(v > 0 for v in (*rb, *rn))
        )
        if relative:
            bx, nx, log = [math.log(v) for v in rb], [math.log(v) for v in rn], True
        else:
            log = all(v > 0 for v in (*b_vals, *n_vals))
            bx = [math.log(v) if log else float(v) for v in b_vals]
            nx = [math.log(v) if log else float(v) for v in n_vals]
        test: TTest
        if self.paired:
            test = paired_t_test([n - b for b, n in zip(bx, nx, strict=True)])
            spread = test.se * math.sqrt(len(bx))
            basis: Basis = "rounds"
        else:
            test = welch_t_test(bx, nx)
            spread = math.hypot(_sd(bx), _sd(nx))
            basis = "repeats"

        def as_ns(x: float) -> float:
            return b * math.expm1(x) if log else x

        # Paired rounds or ratios: the change is the test's estimate (the mean log
        # ratio), since the medians of each side carry the drift between processes.
        estimated = self.paired or relative
        n = b + round(as_ns(test.estimate)) if estimated else round(median(n_vals))
        delta = n - b
        ci_ns = round(abs(as_ns(test.half_width())))
        beyond = (
            test.p_value < ALPHA
            and test.estimate * delta > 0
            and abs(delta) > max(ci_ns, between_floor(self.floor_ns))
        )
        pct = delta / b * 100 if b > 0 else None
        return self._judged(
            b,
            n,
            beyond,
            pct,
            basis,
            p_value=test.p_value,
            noise_ns=round(abs(as_ns(spread))),
            ci_ns=ci_ns,
        )

    def _values(
        self, base: Mapping[int, float], new: Mapping[int, float]
    ) -> tuple[list[float], list[float]]:
        """The two sides' per-run values: by common round when paired, else all."""
        if self.paired:
            keys = sorted(base.keys() & new.keys())
            return [base[k] for k in keys], [new[k] for k in keys]
        return list(base.values()), list(new.values())

    def _judged(
        self,
        b: int,
        n: int,
        beyond: bool,
        pct: float | None,
        basis: Basis,
        *,
        p_value: float | None = None,
        noise_ns: int | None = None,
        ci_ns: int | None = None,
    ) -> Change:
        significant = beyond and (pct is None or abs(pct) > self.threshold_pct)
        return _change(
            b,
            n,
            beyond=beyond,
            significant=significant,
            basis=basis,
            p_value=p_value,
            noise_ns=noise_ns,
            ci_ns=ci_ns,
        )

    def _one_sided(self, value: int, status: Status) -> Change:
        beyond = value > self.floor_ns
        base, new = (None, value) if status == "added" else (value, None)
        delta = value if status == "added" else -value
        return Change(
            base_ns=base,
            new_ns=new,
            delta_ns=delta,
            delta_pct=None,
            beyond_noise=beyond,
            significant=beyond,
            status=status,
            basis="threshold",
        )

    def warnings(self) -> list[str]:
        by_counts: dict[tuple[int, int], list[str]] = {}
        for what, counts in self.fallbacks.items():
            by_counts.setdefault(counts, []).append(what)
        out = []
        for (nb, nn), whats in by_counts.items():
            if nb == nn == 1:
                rule = f"by the {_fmt_num(self.threshold_pct)} % threshold and the floor only"
            else:
                rule = "beyond noise only where the two sides' samples do not overlap"
            out.append(
                f"{' and '.join(whats)}: n={nb} vs {nn} samples, too few for the rank test"
                f" (about 7 per side reach p < {ALPHA:g}): changes are judged {rule};"
                " profile more iterations"
            )
        if self.summary_only:
            out.append(
                f"{' and '.join(sorted(self.summary_only))}: a side was saved without its"
                " per-iteration samples, so changes are judged on the saved summaries (spread"
                " and confidence interval), without the rank test; save with --samples to keep them"
            )
        return out


def _sd(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _noise(base: Summary, new: Summary) -> int:
    """NOISE_K robust standard deviations of (a new iteration - a base iteration)."""
    return round(NOISE_K * MAD_TO_SIGMA * math.hypot(base.mad or 0.0, new.mad or 0.0))


def _ci(base: Summary, new: Summary) -> int | None:
    """Half-width of the difference of the medians' confidence interval (None if unknown)."""
    hb, hn = base.ci_half_width, new.ci_half_width
    if hb is None or hn is None:
        return None
    return round(math.hypot(hb, hn))


def _change(
    base: int,
    new: int,
    *,
    beyond: bool,
    significant: bool,
    basis: Basis,
    p_value: float | None = None,
    noise_ns: int | None = None,
    ci_ns: int | None = None,
) -> Change:
    delta = new - base
    status: Status = "same"
    if significant:
        status = "slower" if delta > 0 else "faster"
    return Change(
        base_ns=base,
        new_ns=new,
        delta_ns=delta,
        delta_pct=delta / base * 100 if base > 0 else None,
        beyond_noise=beyond,
        significant=significant,
        status=status,
        basis=basis,
        p_value=p_value,
        noise_ns=noise_ns,
        ci_ns=ci_ns,
    )


def _whole_ns(p: Profile) -> float:
    """One whole forward: median latency, else the root layers' summed median totals."""
    if p.latency_ns is not None:
        return p.latency_ns.median
    roots = (p.samples.get(info.path) for info in p.layers if info.parent is None)
    return sum(s.total_ns.median for s in roots if s is not None)


def _steps(base: Series | None, new: Series | None, judge: _Judge) -> tuple[StepDelta, ...]:
    """Steps by index, one sample each (needs the step samples on both sides)."""
    if base is None or new is None or base.values is None or new.values is None:
        return ()
    b, n = base.tolist() or [], new.tolist() or []
    out = []
    for i in range(max(len(b), len(n))):
        bs = Series([b[i]]) if i < len(b) else None
        ns = Series([n[i]]) if i < len(n) else None
        out.append(StepDelta(index=i, change=judge.compare(bs, ns)))
    return tuple(out)


_NEVER_CALLED = Series([0])


def _layer_times(s: LayerSamples | None, clock: str) -> tuple[Series, Series]:
    """(self, total) of one layer; a zero sample for a layer that was never called."""
    if s is None:
        return _NEVER_CALLED, _NEVER_CALLED
    if clock == "device" and s.device_self_ns is not None and s.device_total_ns is not None:
        return s.device_self_ns, s.device_total_ns
    return s.self_ns, s.total_ns


def _layers(
    base: Profile, new: Profile, judge: _Judge
) -> tuple[tuple[LayerDelta, ...], Literal["host", "device"]]:
    b_info = {i.path: i for i in base.layers}
    n_info = {i.path: i for i in new.layers}
    common = [p for p in b_info if p in n_info]
    sampled = [
        (bs, ns)
        for p in common
        if (bs := base.samples.get(p)) is not None and (ns := new.samples.get(p)) is not None
    ]
    device = bool(sampled) and all(
        s.device_self_ns is not None and s.device_total_ns is not None
        for pair in sampled
        for s in pair
    )
    clock: Literal["host", "device"] = "device" if device else "host"
    what = f"layers ({clock} time)"
    parents = {i.parent for i in (*b_info.values(), *n_info.values()) if i.parent is not None}
    rows: list[LayerDelta] = []
    for path, info in b_info.items():
        bs = base.samples.get(path)
        b_self, b_total = _layer_times(bs, clock)
        other = n_info.get(path)
        if other is None:
            rows.append(
                LayerDelta(
                    path=path,
                    type=info.type,
                    change=judge.compare(b_self, None),
                    total=judge.compare(b_total, None),
                    calls_base=bs.calls if bs else 0.0,
                )
            )
            continue
        ns = new.samples.get(path)
        n_self, n_total = _layer_times(ns, clock)
        ran = bs is not None and ns is not None
        notes = []
        if other.type != info.type:
            notes.append(f"type changed: {info.type} -> {other.type}")
        calls_b, calls_n = (bs.calls if bs else 0.0), (ns.calls if ns else 0.0)
        if calls_b != calls_n:
            notes.append(f"calls per forward {_fmt_num(calls_b)} -> {_fmt_num(calls_n)}")
        fused = _fused_container(base, new, path, b_self, n_self)
        if fused is not None:
            notes.append(fused)
        change = (
            _not_compared(b_self, n_self)
            if fused is not None
            else judge.compare(
                b_self,
                n_self,
                what=what if ran else None,
                runs=judge.layer_runs(path, clock),
                ratios=judge.layer_ratios(path, clock),
            )
        )
        rows.append(
            LayerDelta(
                path=path,
                type=other.type,
                base_type=info.type if other.type != info.type else None,
                change=change,
                # A leaf's total is its self time: one judgement for both columns. Other
                # inclusive times are shown, never gated (no small-sample warning for them
                # when the self time was judged between runs); between runs they are judged
                # on the per-run totals, as the self time is (a rank test over one
                # process's iterations beside a between-run self column contradicted it).
                total=change
                if fused is None and path not in parents
                else judge.compare(
                    b_total,
                    n_total,
                    what=what if ran and judge.base_runs is None else None,
                    runs=judge.total_runs(path, clock),
                ),
                calls_base=calls_b,
                calls_new=calls_n,
                note="; ".join(notes) or None,
            )
        )
    for path, info in n_info.items():
        if path in b_info:
            continue
        ns = new.samples.get(path)
        n_self, n_total = _layer_times(ns, clock)
        rows.append(
            LayerDelta(
                path=path,
                type=info.type,
                change=judge.compare(None, n_self),
                total=judge.compare(None, n_total),
                calls_new=ns.calls if ns else 0.0,
            )
        )
    return tuple(rows), clock


def _fused_container(
    base: Profile, new: Profile, path: str, b_self: Series, n_self: Series
) -> str | None:
    """Why a container's self time is not compared, or None.

    In a ``--compile`` profile a module's self time is the kernel time credited
    to it; a container (a block, a Sequential) whose own code inductor fused
    into its children's kernels has none. Against an eager side, where its self
    time is its Python glue, that would read as -100 % (or as a new time): a
    change of accounting, not of speed. Its total is compared as usual."""
    for side, own, eager in ((new, n_self, b_self), (base, b_self, n_self)):
        other = base if side is new else new
        if side.compiled is None or other.compiled is not None:
            continue
        if own.summary.max <= 0 < eager.median and _has_children(side, path):
            return (
                "compiled: no kernel of its own (its work was fused into its children's"
                " kernels), so its self time is not compared; see its total"
            )
    return None


def _has_children(p: Profile, path: str) -> bool:
    return any(i.parent == path and not i.path.startswith("<") for i in p.layers)


def _not_compared(base: Series, new: Series) -> Change:
    """A row whose times are shown but not judged: no percentage, never a change."""
    b, n = round(base.median), round(new.median)
    return Change(
        base_ns=b,
        new_ns=n,
        delta_ns=n - b,
        delta_pct=None,
        beyond_noise=False,
        significant=False,
        status="same",
        basis="threshold",
    )


@dataclass(frozen=True)
class _OpSum:
    """One op key's rows summed: per-iteration samples when every row had them."""

    calls: float
    time: Series
    sampled: bool


def _ops(
    base: Profile, new: Profile, judge: _Judge
) -> tuple[tuple[OpDelta, ...], Literal["self", "device"], Literal["name", "name+shapes"]]:
    shapes = any(o.input_shapes for o in base.ops) and any(o.input_shapes for o in new.ops)
    device = bool(base.ops and new.ops) and all(
        o.device_ns is not None for o in (*base.ops, *new.ops)
    )
    b, n = _sum_ops(base.ops, shapes, device), _sum_ops(new.ops, shapes, device)
    rows = []
    for key in [*b, *(k for k in n if k not in b)]:
        bo, no = b.get(key), n.get(key)
        tested = bo is not None and no is not None and bo.sampled and no.sampled
        rows.append(
            OpDelta(
                name=key[0],
                input_shapes=key[1],
                change=judge.compare(
                    bo.time if bo else None, no.time if no else None, what="ops" if tested else None
                ),
                calls_base=bo.calls if bo else None,
                calls_new=no.calls if no else None,
            )
        )
    return tuple(rows), "device" if device else "self", "name+shapes" if shapes else "name"


def _sum_ops(
    ops: Iterable[OpStat], shapes: bool, device: bool
) -> dict[tuple[str, str | None], _OpSum]:
    """Rows of one key (e.g. one per layer) summed; per iteration when all have samples
    of the same length, else their medians as one sample (judged by the threshold)."""
    groups: dict[tuple[str, str | None], list[OpStat]] = {}
    for o in ops:
        groups.setdefault((o.name, o.input_shapes if shapes else None), []).append(o)
    out: dict[tuple[str, str | None], _OpSum] = {}
    for key, rows in groups.items():
        series = [_op_series(o, device) for o in rows]
        lengths = {s.n for s in series if s is not None and s.values is not None}
        calls = sum(o.calls for o in rows)
        if all(s is not None and s.values is not None for s in series) and len(lengths) == 1:
            total = sum(cast(Series, s).values for s in series)
            out[key] = _OpSum(calls, Series(total), True)
        else:
            value = sum((o.device_ns if device else o.self_ns) or 0.0 for o in rows)
            out[key] = _OpSum(calls, Series([value]), False)
    return out


def _op_series(o: OpStat, device: bool) -> Series | None:
    if o.samples is None:
        return None
    return o.samples.device_ns if device else o.samples.self_ns


def _phases(base: Profile, new: Profile, judge: _Judge) -> tuple[PhaseDelta, ...]:
    """Prefill and decode apart: a change that slows decode and speeds prefill is not
    "no change". The clean pass's time to first token and inter-token latency (their
    samples), then each layer of each phase both sides ran (medians and intervals)."""
    b, n = base.generation, new.generation
    if b is None or n is None:
        return ()
    out: list[PhaseDelta] = []
    for phase, what, bs, ns in (
        ("prefill", "time to first token", b.ttft_ns, n.ttft_ns),
        ("decode", "inter-token latency", b.itl_ns, n.itl_ns),
    ):
        if bs is not None and ns is not None:
            out.append(PhaseDelta(phase, None, judge.compare(bs, ns, what=what)))
    for bp in b.phases:
        np_ = n.phase(bp.name)
        if np_ is None:
            continue
        for row in bp.layers:
            other = np_.layer(row.path)
            base_s, new_s = _phase_series(row), _phase_series(other)
            out.append(PhaseDelta(bp.name, row.path, judge.compare(base_s, new_s)))
    return tuple(out)


def _phase_series(row: Any) -> Series | None:
    """A phase layer's self time as a Series of its summary (no per-forward samples)."""
    if row is None:
        return None
    if row.self_summary is not None:
        return Series(summary=row.self_summary)
    return Series([row.self_ns])


def _kernels(base: Profile, new: Profile, judge: _Judge) -> tuple[KernelDelta, ...]:
    """Kernels by name, time per step (the trace's total over its complete steps)."""
    if not base.kernels or not new.kernels:
        return ()
    b, n = _kernel_times(base), _kernel_times(new)
    return tuple(
        KernelDelta(
            name=name,
            change=judge.compare(
                Series([b[name]]) if name in b else None, Series([n[name]]) if name in n else None
            ),
        )
        for name in [*b, *(k for k in n if k not in b)]
    )


def _kernel_times(p: Profile) -> dict[str, float]:
    steps = max(p.latency_ns.n if p.latency_ns is not None else 1, 1)
    return {k.name: k.total_ns / steps for k in p.kernels}


# ---- comparability and warnings ---------------------------------------------------


def _comparability(base: Profile, new: Profile) -> tuple[bool, str | None]:
    if not base.layers or not new.layers:
        return True, None
    b = {i.path: i.type for i in base.layers}
    n = {i.path: i.type for i in new.layers}
    same = {p for p in b if n.get(p) == b[p]}
    has_children = len(b) > 1 or len(n) > 1
    if same and (not has_children or same - {""}):
        return True, None
    return False, (
        f"no layer paths in common: base profiles {base.meta.model or '?'} ({len(b)} layers),"
        f" new profiles {new.meta.model or '?'} ({len(n)} layers); they look like different"
        " models, so a per-layer comparison would only list every layer as removed and added"
    )


def _overlap_warning(base: Profile, new: Profile) -> list[str]:
    b = {i.path for i in base.layers}
    n = {i.path for i in new.layers}
    union = b | n
    if union and len(b & n) < 0.5 * len(union):
        return [f"only {len(b & n)} of {len(union)} layer paths are on both sides"]
    return []


_META_CHECKS: tuple[tuple[str, str], ...] = (
    ("device", "devices"),
    ("dtype", "dtypes"),
    ("torch", "torch versions"),
    ("mode", "modes"),
    ("grad", "autograd settings"),
    ("threads", "thread counts"),
    ("inputs", "inputs"),
    ("source", "sources"),
    ("host", "hosts"),
)


def _meta_warnings(base: Meta, new: Meta) -> list[str]:
    out = []
    for attr, words in _META_CHECKS:
        a, b = getattr(base, attr), getattr(new, attr)
        # a side that does not know (a trace has no thread count) is not a difference
        if a == b or a is None or b is None or a in ("", ()) or b in ("", ()):
            continue
        if attr == "inputs":
            a, b = ", ".join(a) or "-", ", ".join(b) or "-"
        out.append(f"different {words}: base {a}, new {b}")
    return out


# ---- helpers and JSON ---------------------------------------------------------------


def _top(rows: list[Any], top: int | None) -> list[Any]:
    ordered = sorted(rows, key=lambda r: (-abs(r.change.delta_ns), r.label))
    return ordered if top is None else ordered[: max(top, 0)]


def gate_pct(change: Change, fail_above_pct: float) -> float:
    """The percentage a row must exceed to fail: ``fail_above_pct`` when it was judged on
    the run-to-run spread, else no less than the drift allowance."""
    return fail_above_pct if change.between_runs else max(fail_above_pct, DRIFT_ALLOWANCE_PCT)


def _over(change: Change, fail_above_pct: float) -> bool:
    pct = change.delta_pct
    return change.regressed and (pct is None or pct > gate_pct(change, fail_above_pct))


def _describe(change: Change, fail_above_pct: float) -> str:
    pct = "new time" if change.delta_pct is None else f"{change.delta_pct:+.1f} %"
    noise = "" if change.p_value is None else f", p={change.p_value:.1g} between runs"
    limit = gate_pct(change, fail_above_pct)
    above = f"above {_fmt_num(limit)} %"
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


def _fmt_num(x: float) -> str:
    return f"{x:g}"
