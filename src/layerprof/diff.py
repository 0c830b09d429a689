"""Compare two profiles: latency, steps, layers and operators, with noise taken into account.

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

Noise rule
----------
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
3. the absolute change exceeds a floor of ``max(1 µs, 0.5 % of the whole
   forward)`` (the larger side's median latency, else its root layers'
   total), so that microsecond layers do not flap.

A change is **significant** (status ``slower``/``faster``, highlighted) when it
is beyond noise *and* ``|delta %| > threshold_pct`` (5 % by default); anything
else is ``same``. When a side has too few samples for the rank test to ever
reach ``p < ALPHA`` (fewer than about 7 per side), the test's smallest
possible p stands in for ALPHA: the two sides' samples must not overlap
(``basis == "separation"``); with one sample per side the threshold and the
floor alone decide (``basis == "threshold"``). The diff says so in a warning. Operators (aggregates without per-iteration
samples) and single steps are always judged that way; such rows are shown but
do not decide the verdict or the default (``any``) gate.

The regression gate (:meth:`Diff.gate`) fails on a row that is beyond noise,
slower, and more than ``fail_above_pct`` slower. Added and removed layers or
operators never fail the gate by themselves: the latency row judges what they
cost.

No torch import here: a diff runs on saved profiles. Times are integer
nanoseconds inside and milliseconds in JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, cast, get_args

from layerprof.errors import ProfileFormatError, UsageError
from layerprof.profile import Profile
from layerprof.records import LayerSamples, Meta, OpStat
from layerprof.stats import median, min_p_value, rank_test

SCHEMA = "layerprof.diff/1"
ALPHA = 0.001
"""Two-sided significance level of the rank test, per row."""
FLOOR_MIN_NS = 1_000
"""Smallest absolute change that can count: 1 µs."""
FLOOR_SHARE = 0.005
"""Or 0.5 % of the whole forward, when that is larger."""
NOISE_K = 1.0
"""The change must exceed NOISE_K robust standard deviations of (new iteration - base iteration)."""
MAD_TO_SIGMA = 1.4826
"""MAD times this estimates the standard deviation of a normal distribution."""

NS_PER_MS = 1_000_000

Status = Literal["slower", "faster", "same", "added", "removed"]
Basis = Literal["rank-test", "separation", "threshold"]
Metric = Literal["latency", "layers", "ops", "any"]
Verdict = Literal["slower", "faster", "mixed", "same", "not comparable"]
METRICS: tuple[Metric, ...] = get_args(Metric)


# ---- value objects ----------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """How one time moved between base and new (medians, integer ns).

    ``base_ns`` is ``None`` for an added row, ``new_ns`` for a removed one.
    ``delta_pct`` is ``None`` when there is no base time to divide by.
    ``p_value`` is the rank test's and ``noise_ns`` the spread bound the change
    had to exceed; both ``None`` when the row was judged by the threshold only
    (``basis == "threshold"``).
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

    @property
    def regressed(self) -> bool:
        """Slower beyond noise (the threshold aside), on a row present on both sides."""
        return self.status not in ("added", "removed") and self.beyond_noise and self.delta_ns > 0


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
    calls_base: int | None = None
    calls_new: int | None = None

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
class GateResult:
    """Outcome of :meth:`Diff.gate`: ``failed`` with one reason per offending row."""

    failed: bool
    reasons: tuple[str, ...]
    fail_above_pct: float = 0.0
    metric: Metric = "any"

    @property
    def message(self) -> str:
        """One line for a terminal or a CI log."""
        what = "any compared time" if self.metric == "any" else self.metric
        if not self.failed:
            return (
                f"pass: no regression beyond noise above {_fmt_num(self.fail_above_pct)} %"
                f" in {what}"
            )
        return "FAIL: " + "; ".join(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "failed": self.failed,
            "metric": self.metric,
            "fail_above_pct": self.fail_above_pct,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Diff:
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
    warnings: tuple[str, ...] = ()
    comparable: bool = True
    reason: str | None = None
    threshold_pct: float = 5.0
    floor_ns: int = FLOOR_MIN_NS
    alpha: float = ALPHA
    layer_clock: Literal["host", "device"] = "host"
    op_metric: Literal["self", "device"] = "self"
    op_key: Literal["name", "name+shapes"] = "name"

    # ---- views ----------------------------------------------------------
    def changed_layers(self, top: int | None = None) -> list[LayerDelta]:
        """Layers on both sides, largest absolute self-time change first."""
        rows = [r for r in self.layers if r.status not in ("added", "removed")]
        return _top(rows, top)

    def changed_ops(self, top: int | None = None) -> list[OpDelta]:
        rows = [r for r in self.ops if r.status not in ("added", "removed")]
        return _top(rows, top)

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
        if self.latency is not None:
            changes.append(self.latency)
        # Rows judged on threshold alone (ops: aggregates without per-iteration
        # samples) would flip the verdict on noise; only noise-tested rows count.
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
        return (
            f"significant = beyond noise (Mann-Whitney rank test p < {self.alpha:g} on the"
            " per-iteration samples, |Δ| above the iterations' spread and above"
            f" {fmt_ms(self.floor_ns)} ms) and |Δ %| > {self.threshold_pct:g} %. Operators"
            " and single steps have no per-iteration samples: they are judged by the threshold"
            " and the floor only, and do not decide the verdict or the default gate."
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
        )

    # ---- JSON -------------------------------------------------------------
    def to_dict(self, top: int | None = None, *, gate: GateResult | None = None) -> dict[str, Any]:
        """The ``layerprof.diff/1`` document; ``top`` keeps the largest changed rows.

        Added and removed rows are always all listed; ``summary`` counts every
        row whether shown or not.
        """
        layers = _top([r for r in self.layers if r.status not in ("added", "removed")], top)
        layers += [r for r in self.layers if r.status in ("added", "removed")]
        ops = _top([r for r in self.ops if r.status not in ("added", "removed")], top)
        ops += [r for r in self.ops if r.status in ("added", "removed")]
        counts = self.counts()
        return {
            "schema": SCHEMA,
            "verdict": self.headline(),
            "base": {"model": self.base_meta.model, "meta": _meta_to_dict(self.base_meta)},
            "new": {"model": self.new_meta.model, "meta": _meta_to_dict(self.new_meta)},
            "settings": {
                "threshold_pct": self.threshold_pct,
                "alpha": self.alpha,
                "floor_ms": self.floor_ns / NS_PER_MS,
                "layer_clock": self.layer_clock,
                "layer_metric": "self",
                "op_metric": self.op_metric,
                "op_key": self.op_key,
            },
            "comparable": self.comparable,
            "reason": self.reason,
            "warnings": list(self.warnings),
            "latency": _change_to_dict(self.latency) if self.latency else None,
            "steps": [{"index": s.index, **_change_to_dict(s.change)} for s in self.steps],
            "layers": [_layer_to_dict(r) for r in layers],
            "ops": [_op_to_dict(r) for r in ops],
            "summary": {
                "verdict": self.verdict,
                "latency": self.latency.status if self.latency else None,
                "layers": counts["layers"],
                "ops": counts["ops"],
                "shown": {"layers": len(layers), "ops": len(ops)},
            },
            "gate": gate.to_dict() if gate is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<dict>") -> Diff:
        """Read back what :meth:`to_dict` wrote (all rows, when written with ``top=None``)."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ProfileFormatError(f"{source}: not a layerprof diff (schema {SCHEMA!r})")
        try:
            settings = data["settings"]
            return cls(
                base_meta=_meta_from_dict(data["base"]["meta"]),
                new_meta=_meta_from_dict(data["new"]["meta"]),
                latency=_change_from_dict(data["latency"]) if data.get("latency") else None,
                steps=tuple(
                    StepDelta(index=int(s["index"]), change=_change_from_dict(s))
                    for s in data.get("steps") or ()
                ),
                layers=tuple(_layer_from_dict(d) for d in data["layers"]),
                ops=tuple(_op_from_dict(d) for d in data["ops"]),
                warnings=tuple(data.get("warnings") or ()),
                comparable=bool(data["comparable"]),
                reason=data.get("reason"),
                threshold_pct=float(settings["threshold_pct"]),
                floor_ns=round(float(settings["floor_ms"]) * NS_PER_MS),
                alpha=float(settings["alpha"]),
                layer_clock=settings["layer_clock"],
                op_metric=settings["op_metric"],
                op_key=settings["op_key"],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileFormatError(f"{source}: malformed diff ({exc!r})") from exc


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
    judge = _Judge(threshold_pct=threshold_pct, floor_ns=floor_ns)
    comparable, reason = _comparability(base, new)
    warnings = _meta_warnings(base.meta, new.meta)
    if comparable and base.layers and new.layers:
        warnings += _overlap_warning(base, new)

    latency = None
    if base.latency_ns and new.latency_ns:
        latency = judge.compare(base.latency_ns, new.latency_ns, what="latency")
    elif base.latency_ns or new.latency_ns:
        side = "base" if not base.latency_ns else "new"
        warnings.append(f"the {side} profile has no latency samples: latency is not compared")

    steps: tuple[StepDelta, ...] = ()
    if base.meta.source == "trace" and new.meta.source == "trace":
        steps = _steps(base.latency_ns, new.latency_ns, judge)

    layers, layer_clock = _layers(base, new, judge)
    ops, op_metric, op_key = _ops(base, new, judge)
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
        warnings=(*warnings, *judge.warnings()),
        comparable=comparable,
        reason=reason,
        threshold_pct=threshold_pct,
        floor_ns=floor_ns,
        alpha=ALPHA,
        layer_clock=layer_clock,
        op_metric=op_metric,
        op_key=op_key,
    )


@dataclass
class _Judge:
    """Applies the noise rule; remembers which kinds of rows fell back to the threshold."""

    threshold_pct: float
    floor_ns: int
    fallbacks: dict[str, tuple[int, int]] = field(default_factory=dict)

    def compare(
        self, base: Sequence[int] | None, new: Sequence[int] | None, *, what: str | None = None
    ) -> Change:
        """``what`` names the row kind for the small-sample warning; ``None``: expected."""
        if not base and not new:
            return _change(0, 0, beyond=False, significant=False, basis="threshold")
        if not base:
            value = _median_ns(cast(Sequence[int], new))
            return self._one_sided(value, "added")
        if not new:
            return self._one_sided(_median_ns(base), "removed")
        b, n = _median_ns(base), _median_ns(new)
        delta = n - b
        pct = delta / b * 100 if b > 0 else None
        p_value: float | None = None
        noise_ns: int | None = None
        tested = True
        basis: Basis = "threshold"
        if len(base) > 1 or len(new) > 1:
            noise_ns = round(NOISE_K * MAD_TO_SIGMA * math.hypot(_mad(base), _mad(new)))
            floor_p = min_p_value(len(base), len(new))
            basis = "rank-test" if floor_p < ALPHA else "separation"
            if basis == "separation" and what is not None and what not in self.fallbacks:
                self.fallbacks[what] = (len(base), len(new))
            p_value, direction = rank_test(base, new)
            level = max(ALPHA, floor_p) * (1 + 1e-9)
            tested = p_value <= level and direction * delta > 0 and abs(delta) > noise_ns
        elif what is not None and what not in self.fallbacks:
            self.fallbacks[what] = (1, 1)
        beyond = tested and abs(delta) > self.floor_ns
        significant = beyond and (pct is None or abs(pct) > self.threshold_pct)
        return _change(
            b,
            n,
            beyond=beyond,
            significant=significant,
            basis=basis,
            p_value=p_value,
            noise_ns=noise_ns,
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
        return out


def _change(
    base: int,
    new: int,
    *,
    beyond: bool,
    significant: bool,
    basis: Basis,
    p_value: float | None = None,
    noise_ns: int | None = None,
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
    )


def _mad(values: Sequence[int]) -> float:
    """Median absolute deviation from the median."""
    mid = median(values)
    return median([abs(v - mid) for v in values])


def _median_ns(values: Sequence[int]) -> int:
    return round(median(values))


def _whole_ns(p: Profile) -> float:
    """One whole forward: median latency, else the root layers' summed median totals."""
    if p.latency_ns:
        return median(p.latency_ns)
    roots = (p.samples.get(info.path) for info in p.layers if info.parent is None)
    return sum(median(s.total_ns) for s in roots if s is not None and s.total_ns)


def _steps(base: Sequence[int], new: Sequence[int], judge: _Judge) -> tuple[StepDelta, ...]:
    out = []
    for i in range(max(len(base), len(new))):
        b = (base[i],) if i < len(base) else None
        n = (new[i],) if i < len(new) else None
        out.append(StepDelta(index=i, change=judge.compare(b, n)))
    return tuple(out)


def _layer_times(
    s: LayerSamples | None, clock: str
) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(self, total) samples of one layer; ``(0,)`` for a layer that was never called."""
    if s is None or not s.total_ns:
        return (0,), (0,)
    if clock == "device" and s.device_self_ns and s.device_total_ns:
        return s.device_self_ns, s.device_total_ns
    return s.self_ns or (0,), s.total_ns


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
        bool(s.device_self_ns and s.device_total_ns) for pair in sampled for s in pair
    )
    clock: Literal["host", "device"] = "device" if device else "host"
    what = f"layers ({clock} time)"
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
        ran = bool(bs and bs.total_ns and ns and ns.total_ns)
        notes = []
        if other.type != info.type:
            notes.append(f"type changed: {info.type} -> {other.type}")
        calls_b, calls_n = (bs.calls if bs else 0.0), (ns.calls if ns else 0.0)
        if calls_b != calls_n:
            notes.append(f"calls per forward {_fmt_num(calls_b)} -> {_fmt_num(calls_n)}")
        rows.append(
            LayerDelta(
                path=path,
                type=other.type,
                base_type=info.type if other.type != info.type else None,
                change=judge.compare(b_self, n_self, what=what if ran else None),
                total=judge.compare(b_total, n_total, what=what if ran else None),
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


@dataclass(frozen=True)
class _OpSum:
    calls: int
    self_ns: int
    device_ns: int | None


def _ops(
    base: Profile, new: Profile, judge: _Judge
) -> tuple[tuple[OpDelta, ...], Literal["self", "device"], Literal["name", "name+shapes"]]:
    shapes = any(o.input_shapes for o in base.ops) and any(o.input_shapes for o in new.ops)
    device = bool(base.ops and new.ops) and all(
        o.device_ns is not None for o in (*base.ops, *new.ops)
    )
    b, n = _sum_ops(base.ops, shapes), _sum_ops(new.ops, shapes)
    rows = []
    for key in [*b, *(k for k in n if k not in b)]:
        bo, no = b.get(key), n.get(key)
        bt = ((bo.device_ns if device else bo.self_ns) or 0,) if bo else None
        nt = ((no.device_ns if device else no.self_ns) or 0,) if no else None
        rows.append(
            OpDelta(
                name=key[0],
                input_shapes=key[1],
                change=judge.compare(bt, nt),
                calls_base=bo.calls if bo else None,
                calls_new=no.calls if no else None,
            )
        )
    return tuple(rows), "device" if device else "self", "name+shapes" if shapes else "name"


def _sum_ops(ops: Iterable[OpStat], shapes: bool) -> dict[tuple[str, str | None], _OpSum]:
    out: dict[tuple[str, str | None], _OpSum] = {}
    for o in ops:
        key = (o.name, o.input_shapes if shapes else None)
        prev = out.get(key)
        if prev is None:
            out[key] = _OpSum(o.calls, o.self_ns, o.device_ns)
            continue
        dev = None
        if prev.device_ns is not None and o.device_ns is not None:
            dev = prev.device_ns + o.device_ns
        out[key] = _OpSum(prev.calls + o.calls, prev.self_ns + o.self_ns, dev)
    return out


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


def _over(change: Change, fail_above_pct: float) -> bool:
    pct = change.delta_pct
    return change.regressed and (pct is None or pct > fail_above_pct)


def _describe(change: Change, fail_above_pct: float) -> str:
    pct = "new time" if change.delta_pct is None else f"{change.delta_pct:+.1f} %"
    noise = "" if change.p_value is None else f", p={change.p_value:.1g}"
    return (
        f"{fmt_ms(change.base_ns)} -> {fmt_ms(change.new_ns)} ms ({pct}{noise})"
        f" is beyond noise and above {_fmt_num(fail_above_pct)} %"
    )


def fmt_ms(ns: int | None) -> str:
    """Milliseconds with three significant decimals' worth of precision, '-' for none."""
    if ns is None:
        return "-"
    ms = ns / NS_PER_MS
    if 0 < abs(ms) < 0.01:
        return f"{ms:.4f}"
    if abs(ms) >= 100:
        return f"{ms:.1f}"
    if abs(ms) >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def fmt_delta_ms(ns: int) -> str:
    return ("+" if ns > 0 else "") + fmt_ms(ns)


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


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def _ns(ms: Any) -> int | None:
    return None if ms is None else round(float(ms) * NS_PER_MS)


def _change_to_dict(c: Change) -> dict[str, Any]:
    return {
        "base_ms": _ms(c.base_ns),
        "new_ms": _ms(c.new_ns),
        "delta_ms": c.delta_ns / NS_PER_MS,
        "delta_pct": c.delta_pct,
        "status": c.status,
        "significant": c.significant,
        "beyond_noise": c.beyond_noise,
        "basis": c.basis,
        "p_value": c.p_value,
        "noise_ms": _ms(c.noise_ns),
    }


def _change_from_dict(d: Mapping[str, Any]) -> Change:
    status = d["status"]
    basis = d["basis"]
    if status not in get_args(Status) or basis not in get_args(Basis):
        raise ValueError(f"unknown status {status!r} or basis {basis!r}")
    return Change(
        base_ns=_ns(d["base_ms"]),
        new_ns=_ns(d["new_ms"]),
        delta_ns=round(float(d["delta_ms"]) * NS_PER_MS),
        delta_pct=None if d["delta_pct"] is None else float(d["delta_pct"]),
        beyond_noise=bool(d["beyond_noise"]),
        significant=bool(d["significant"]),
        status=status,
        basis=basis,
        p_value=None if d.get("p_value") is None else float(d["p_value"]),
        noise_ns=_ns(d.get("noise_ms")),
    )


def _layer_to_dict(r: LayerDelta) -> dict[str, Any]:
    return {
        "path": r.path,
        "type": r.type,
        "base_type": r.base_type,
        "calls_base": r.calls_base,
        "calls_new": r.calls_new,
        "note": r.note,
        "metric": "self",
        **_change_to_dict(r.change),
        "total": _change_to_dict(r.total),
    }


def _layer_from_dict(d: Mapping[str, Any]) -> LayerDelta:
    return LayerDelta(
        path=d["path"],
        type=d["type"],
        base_type=d.get("base_type"),
        calls_base=d.get("calls_base"),
        calls_new=d.get("calls_new"),
        note=d.get("note"),
        change=_change_from_dict(d),
        total=_change_from_dict(d["total"]),
    )


def _op_to_dict(r: OpDelta) -> dict[str, Any]:
    return {
        "name": r.name,
        "input_shapes": r.input_shapes,
        "calls_base": r.calls_base,
        "calls_new": r.calls_new,
        **_change_to_dict(r.change),
    }


def _op_from_dict(d: Mapping[str, Any]) -> OpDelta:
    return OpDelta(
        name=d["name"],
        input_shapes=d.get("input_shapes"),
        calls_base=d.get("calls_base"),
        calls_new=d.get("calls_new"),
        change=_change_from_dict(d),
    )


def _meta_to_dict(meta: Meta) -> dict[str, Any]:
    d = asdict(meta)
    d["inputs"] = list(meta.inputs)
    return d


def _meta_from_dict(d: Mapping[str, Any]) -> Meta:
    known = set(Meta.__dataclass_fields__)
    meta = Meta(**{k: v for k, v in d.items() if k in known and k != "inputs"})
    meta = replace(meta, inputs=tuple(d.get("inputs") or ()))
    extra = {k: v for k, v in d.items() if k not in known}
    return replace(meta, extra={**meta.extra, **extra}) if extra else meta
