"""Two profiles compared (``Diff``): its rows per latency, step, layer, operator,
kernel and generate phase, each with how its time moved (``Change``), the settings it
was judged with, and a gate's outcome (``GateResult``). ``layerprof.analysis.diff.diff``
builds a Diff and ``layerprof.analysis.gate.gate`` gates one; this module only holds
them and says them in words."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from layerprof import sinks
from layerprof.pivot.change import HOW_TO_GATE, SINGLE_RUN, Change, Evidence, Status, fmt_pct
from layerprof.pivot.records import Meta
from layerprof.stats import CI_LEVEL
from layerprof.units import fmt_ms, fmt_num

Metric = Literal["latency", "layers", "ops", "any"]
Verdict = Literal["slower", "faster", "mixed", "same", "not comparable"]
METRICS: tuple[Metric, ...] = get_args(Metric)


# ---- value objects ----------------------------------------------------------


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


_PHASE_TIMES = {"prefill": "time to first token", "decode": "inter-token latency"}


@dataclass(frozen=True)
class PhaseDelta(_Judged):
    """One phase of a ``generate()``: its own time (``path`` None: the time to first
    token for prefill, the inter-token latency for decode, from the clean pass's
    samples), or of a serving trace (``prefill steps``, ``decode steps``, ``mixed
    steps``: ``path`` None is their steps' time), or one layer's self time per forward
    of that phase (judged on the saved
    medians' spread and interval: phases keep no per-forward samples)."""

    phase: str
    path: str | None
    change: Change

    @property
    def label(self) -> str:
        if self.path is None:
            # a serving trace's phases ("decode steps", ...) have their steps' time
            what = _PHASE_TIMES.get(self.phase, "step time")
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
    """Outcome of :func:`layerprof.gate`: ``failed`` with one reason per offending row.

    ``drift_allowance_pct`` is what a row judged inside one run per side had to exceed
    (the gate's, ``layerprof.analysis.gate.DRIFT_ALLOWANCE_PCT``), for the message.
    """

    failed: bool
    reasons: tuple[str, ...]
    fail_above_pct: float = 0.0
    metric: Metric = "any"
    evidence: Evidence = "rounds"
    drift_allowance_pct: float = field(kw_only=True)

    @property
    def message(self) -> str:
        """One line for a terminal or a CI log; says when one run per side was all it had."""
        what = "any compared time" if self.metric == "any" else self.metric
        caveat = ""
        if self.evidence == "single-run":
            caveat = (
                f" ({SINGLE_RUN}: gated only above the {fmt_num(self.drift_allowance_pct)} %"
                f" drift allowance; {HOW_TO_GATE})"
            )
        if not self.failed:
            return (
                f"pass: no regression beyond noise above {fmt_num(self.fail_above_pct)} %"
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


@dataclass(frozen=True, kw_only=True)
class Diff(sinks.Output):
    """Two profiles compared; build with :func:`diff`, never by hand.

    ``comparable`` is ``False`` (with ``reason``) when the two sides have no
    layer paths in common: they profile different models, and renderers say
    so instead of listing every layer as added and removed. ``threshold_pct``,
    ``floor_ns`` (and ``between_floor_ns``, the floor of rows judged between runs),
    ``alpha`` and ``drift_allowance_pct`` are the settings the rows were judged with
    (the judge's and the gate's, ``layerprof.analysis.diffjudge`` and ``.gate``),
    kept so that every renderer states the rule they followed.
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
    floor_ns: int
    between_floor_ns: int
    alpha: float
    drift_allowance_pct: float
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

    @property
    def serving_phases(self) -> bool:
        """Whether the phases are a serving trace's steps (``decode steps``, ...), not a
        generate's prefill and decode."""
        return any(r.phase.endswith(" steps") for r in self.phases)

    @property
    def phases_title(self) -> str:
        if self.serving_phases:
            return "Serving steps (prefill, decode and mixed steps apart)"
        return "Generation (prefill and decode apart)"

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
                f" {fmt_num(self.drift_allowance_pct)} % drift allowance."
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
                f" {fmt_ms(self.between_floor_ns)} ms; layers: their time relative to"
                " the rest of the same forward, so a process slower throughout cancels)"
                f" and |Δ %| > {self.threshold_pct:g} %."
                " Rows without per-process medians are judged inside each run, without a"
                f" p-value, and fail the gate only above the {fmt_num(self.drift_allowance_pct)} %"
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


def _top(rows: list[Any], top: int | None) -> list[Any]:
    ordered = sorted(rows, key=lambda r: (-abs(r.change.delta_ns), r.label))
    return ordered if top is None else ordered[: max(top, 0)]
