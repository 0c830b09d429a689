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

How each row is judged is :mod:`layerprof.analysis.diffjudge`'s (the noise rule,
inside runs and between them); what the diff warns about is
:mod:`layerprof.analysis.diffwarnings`'s; the value types (``Diff``, its rows and
a gate's outcome) are :mod:`layerprof.pivot.diff`'s, and the words every renderer and
the JSON use for a change :mod:`layerprof.pivot.change`'s.

The regression gate (:func:`layerprof.analysis.gate.gate`) fails on a row that is
beyond noise, slower, and more than ``fail_above_pct`` slower. Added and removed
layers or operators never fail the gate by themselves: the latency row judges what
they cost.

No torch import here: a diff runs on saved profiles. Times are integer
nanoseconds inside and milliseconds in JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from layerprof.analysis.diffjudge import (
    ALPHA,
    FLOOR_MIN_NS,
    FLOOR_SHARE,
    Judge,
    between_floor,
    evidence_of,
)
from layerprof.analysis.diffwarnings import (
    comparability,
    meta_warnings,
    overlap_warning,
    runs_warnings,
)
from layerprof.analysis.gate import DRIFT_ALLOWANCE_PCT
from layerprof.errors import UsageError
from layerprof.pivot.change import Change, fmt_pct
from layerprof.pivot.diff import Diff, KernelDelta, LayerDelta, OpDelta, PhaseDelta, StepDelta
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerSamples, OpStat
from layerprof.stats import (
    Series,
)
from layerprof.units import fmt_ms, fmt_num

# ---- the comparison ------------------------------------------------------------


def diff(base: Profile, new: Profile, *, threshold_pct: float = 5.0) -> Diff:
    """Compare ``new`` against ``base``; see the module docstring for the rules."""
    if not math.isfinite(threshold_pct) or threshold_pct < 0:
        raise UsageError(f"threshold must be a percentage >= 0, not {threshold_pct!r}")
    floor_ns = max(FLOOR_MIN_NS, round(FLOOR_SHARE * max(_whole_ns(base), _whole_ns(new))))
    evidence = evidence_of(base.repeats, new.repeats)
    judge = Judge(
        threshold_pct=threshold_pct,
        floor_ns=floor_ns,
        paired=evidence == "rounds",
        base_runs=base.repeats if evidence != "single-run" else None,
        new_runs=new.repeats if evidence != "single-run" else None,
    )
    comparable, reason = comparability(base, new)
    warnings = meta_warnings(base.meta, new.meta)
    if comparable and base.layers and new.layers:
        warnings += overlap_warning(base, new)
    warnings += runs_warnings(evidence, base.repeats, new.repeats)

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
    if latency is not None and not latency.between_runs:
        latency, said = _unexplained_latency(base, new, latency, layer_clock)
        warnings += said
    ops, op_metric, op_key = _ops(base, new, judge)
    phases = _phases(base, new, judge)
    if (base.trace.serving is None) != (new.trace.serving is None):
        side = "base" if base.trace.serving is None else "new"
        warnings.append(f"the {side} profile has no serving steps: their phases are not compared")
    elif base.trace.serving is not None and new.trace.serving is not None:
        b_clock, n_clock = base.trace.serving.phase_clock, new.trace.serving.phase_clock
        if b_clock != n_clock:
            warnings.append(
                f"the serving phases' layer times are the {b_clock}'s in the base and the"
                f" {n_clock}'s in the new profile: only the phases' step times are compared"
            )
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
        between_floor_ns=between_floor(floor_ns),
        alpha=ALPHA,
        drift_allowance_pct=DRIFT_ALLOWANCE_PCT,
        layer_clock=layer_clock,
        op_metric=op_metric,
        op_key=op_key,
        evidence=evidence,
        runs_base=base.repeats.n if base.repeats is not None else 1,
        runs_new=new.repeats.n if new.repeats is not None else 1,
    )


EXPLAINED_SHARE = 0.5
"""A latency change judged inside one run per side must show, at least this share of
it and in its direction, in the per-layer pass's whole forward to count as the code's."""


def _unexplained_latency(
    base: Profile, new: Profile, latency: Change, clock: str
) -> tuple[Change, list[str]]:
    """A latency change beyond noise that the per-layer pass does not share: the machine.

    ``layerprof run`` times the latency in a clean pass and the layers in a second
    pass of the same process. Code made slower slows both; a machine that stalled
    during one process's clean pass moves its latency alone (two separate runs of one
    unchanged model read 3.17 -> 7.73 ms, +144 %, with no layer slower). When the
    whole per-layer forward moved by less than ``EXPLAINED_SHARE`` of the latency's
    change (or the other way), the latency row is not called a change, and a warning
    says why. Only for two live runs judged inside one run per side whose two passes ran
    the same code (not ``--compile``, no fused fast path taken in one pass only): between
    runs the latency has its own run-to-run test, and a trace's steps are its layers' time."""
    if not latency.beyond_noise or latency.delta_ns == 0:
        return latency, []
    if base.meta.source != "layerprof.run" or new.meta.source != "layerprof.run":
        return latency, []
    if any(
        p.compiled is not None or (p.passes is not None and p.passes.diverged) for p in (base, new)
    ):
        return latency, []  # the per-layer pass ran other code than the clean pass
    forward_b, forward_n = _forward_ns(base, clock), _forward_ns(new, clock)
    if forward_b is None or forward_n is None:
        return latency, []
    moved = forward_n - forward_b
    if moved * latency.delta_ns >= EXPLAINED_SHARE * latency.delta_ns**2:
        return latency, []  # the same direction, and at least half as far
    pct = f"{moved / forward_b * 100:+.1f} %" if forward_b > 0 else "new"
    said = (
        f"the latency moved {fmt_ms(latency.base_ns)} -> {fmt_ms(latency.new_ns)} ms"
        f" ({fmt_pct(latency)}) but the per-layer pass's whole forward only"
        f" {fmt_ms(round(forward_b))} -> {fmt_ms(round(forward_n))} ms ({pct}): no layer's"
        " change explains it, so it is taken for the machine (one process's clean pass ran"
        " at another speed), not for the code, and is neither called a change nor gated;"
        " compare several processes per side to judge the latency itself"
    )
    return replace(latency, beyond_noise=False, significant=False, status="same"), [said]


def _forward_ns(p: Profile, clock: str) -> float | None:
    """The per-layer pass's whole forward: its root layers' median totals summed (on the
    diff's layer clock); None without root samples."""
    roots = [p.samples.get(info.path) for info in p.layers if info.parent is None]
    if not roots or any(s is None for s in roots):
        return None
    return sum(_layer_times(s, clock)[1].median for s in roots)


def _whole_ns(p: Profile) -> float:
    """One whole forward: median latency, else the root layers' summed median totals."""
    if p.latency_ns is not None:
        return p.latency_ns.median
    roots = (p.samples.get(info.path) for info in p.layers if info.parent is None)
    return sum(s.total_ns.median for s in roots if s is not None)


def _steps(base: Series | None, new: Series | None, judge: Judge) -> tuple[StepDelta, ...]:
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
    base: Profile, new: Profile, judge: Judge
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
            notes.append(f"calls per forward {fmt_num(calls_b)} -> {fmt_num(calls_n)}")
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
    base: Profile, new: Profile, judge: Judge
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


def _phases(base: Profile, new: Profile, judge: Judge) -> tuple[PhaseDelta, ...]:
    """Prefill and decode apart: a change that slows decode and speeds prefill is not
    "no change". The clean pass's time to first token and inter-token latency (their
    samples), then each layer of each phase both sides ran (medians and intervals).
    Gathered sides (``diff --run``, ``run --repeat``) judge each of them on its
    per-process medians instead, as the latency and the layers are: one process's
    samples carry none of the drift between processes."""
    b, n = base.generation, new.generation
    if b is None or n is None:
        return _serving_phases(base, new, judge)
    out: list[PhaseDelta] = []
    for phase, what, bs, ns in (
        ("prefill", "time to first token", b.ttft_ns, n.ttft_ns),
        ("decode", "inter-token latency", b.itl_ns, n.itl_ns),
    ):
        if bs is not None and ns is not None:
            runs = judge.phase_runs(phase, None)
            out.append(PhaseDelta(phase, None, judge.compare(bs, ns, what=what, runs=runs)))
    for bp in b.phases:
        np_ = n.phase(bp.name)
        if np_ is None:
            continue
        for row in bp.layers:
            other = np_.layer(row.path)
            base_s, new_s = _phase_series(row), _phase_series(other)
            runs = judge.phase_runs(bp.name, row.path) if other is not None else None
            out.append(PhaseDelta(bp.name, row.path, judge.compare(base_s, new_s, runs=runs)))
    return tuple(out)


def _serving_phases(base: Profile, new: Profile, judge: Judge) -> tuple[PhaseDelta, ...]:
    """A serving trace's prefill, decode and mixed steps apart (``prefill steps``, ...):
    each phase's step time over its steps, then each layer of each phase both sides ran
    (its self time per step of the phase)."""
    b, n = base.trace.serving, new.trace.serving
    if b is None or n is None:
        return ()
    out: list[PhaseDelta] = []
    for bp in b.phases:
        np_ = n.phase(bp.name)
        if np_ is None:
            continue
        label = f"{bp.name} steps"
        times = [x.time_ns for x in b.of_phase(bp.name)], [x.time_ns for x in n.of_phase(bp.name)]
        if times[0] and times[1]:
            change = judge.compare(Series(times[0]), Series(times[1]), what=f"{label} time")
            out.append(PhaseDelta(label, None, change))
        if b.phase_clock != n.phase_clock:
            continue  # host against device time is no change (a warning says so)
        for row in bp.layers:
            other = np_.layer(row.path)
            change = judge.compare(_phase_series(row), _phase_series(other))
            out.append(PhaseDelta(label, row.path, change))
    return tuple(out)


def _phase_series(row: Any) -> Series | None:
    """A phase layer's self time as a Series of its summary (no per-forward samples)."""
    if row is None:
        return None
    if row.self_summary is not None:
        return Series(summary=row.self_summary)
    return Series([row.self_ns])


def _kernels(base: Profile, new: Profile, judge: Judge) -> tuple[KernelDelta, ...]:
    """Kernels by name, time per step (the trace's total over its complete steps)."""
    if not base.trace.kernels or not new.trace.kernels:
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
    return {k.name: k.total_ns / steps for k in p.trace.kernels}


# ---- comparability and warnings ---------------------------------------------------


# ---- helpers and JSON ---------------------------------------------------------------
