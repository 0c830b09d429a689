"""``layerprof.diff/1``: a Diff with its settings and gate."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from layerprof.codec.fields import Fields, required, strings
from layerprof.codec.profile import read_meta
from layerprof.codec.schemas import DIFF_SCHEMA
from layerprof.errors import ProfileFormatError
from layerprof.pivot.change import BASES, EVIDENCES, STATUSES, Change
from layerprof.pivot.diff import (
    METRICS,
    Diff,
    GateResult,
    KernelDelta,
    LayerDelta,
    OpDelta,
    PhaseDelta,
    StepDelta,
)
from layerprof.pivot.records import Meta
from layerprof.units import NS_PER_MS, ms


def diff_to_dict(
    d: Diff, *, top: int | None = None, gate: GateResult | None = None
) -> dict[str, Any]:
    """The ``layerprof.diff/1`` document; ``top`` keeps the largest changed rows.

    Added and removed rows are always all listed; ``summary`` counts every
    row whether shown or not.
    """
    layers = d.changed_layers(top) + d.added_layers() + d.removed_layers()
    ops = d.changed_ops(top) + d.added_ops() + d.removed_ops()
    kernels = d.changed_kernels(top) + [r for r in d.kernels if r.status in ("added", "removed")]
    counts = d.counts()
    gate = gate if gate is not None else d.gate_result
    return {
        "schema": DIFF_SCHEMA,
        "verdict": d.headline(),
        "base": {"model": d.base_meta.model, "meta": _meta_dict(d.base_meta)},
        "new": {"model": d.new_meta.model, "meta": _meta_dict(d.new_meta)},
        "evidence": {
            "kind": d.evidence,
            "runs_base": d.runs_base,
            "runs_new": d.runs_new,
            "note": d.evidence_note(),
        },
        "settings": {
            "threshold_pct": d.threshold_pct,
            "drift_allowance_pct": d.drift_allowance_pct,
            "alpha": d.alpha,
            "floor_ms": d.floor_ns / NS_PER_MS,
            "layer_clock": d.layer_clock,
            "layer_metric": "self",
            "op_metric": d.op_metric,
            "op_key": d.op_key,
            "rule": d.rule_text(),
        },
        "comparable": d.comparable,
        "reason": d.reason,
        "warnings": list(d.warnings),
        "latency": change(d.latency) if d.latency else None,
        "steps": [{"index": s.index, **change(s.change)} for s in d.steps],
        "phases": [{"phase": r.phase, "path": r.path, **change(r.change)} for r in d.phases],
        "layers": [_layer_delta(r) for r in layers],
        "ops": [_op_delta(r) for r in ops],
        "kernels": [{"name": r.name, **change(r.change)} for r in kernels],
        "summary": {
            "verdict": d.verdict,
            "latency": d.latency.status if d.latency else None,
            "layers": counts["layers"],
            "ops": counts["ops"],
            "shown": {"layers": len(layers), "ops": len(ops)},
        },
        "gate": gate.to_dict() if gate is not None else None,
    }


def _meta_dict(meta: Meta) -> dict[str, Any]:
    d = asdict(meta)
    d["inputs"] = list(meta.inputs)
    return d


def change(c: Change) -> dict[str, Any]:
    return {
        "base_ms": ms(c.base_ns),
        "new_ms": ms(c.new_ns),
        "delta_ms": c.delta_ns / NS_PER_MS,
        "delta_pct": c.delta_pct,
        "status": c.status,
        "significant": c.significant,
        "beyond_noise": c.beyond_noise,
        "basis": c.basis,
        "p_value": c.p_value,
        "noise_ms": ms(c.noise_ns),
        "ci_ms": ms(c.ci_ns),
    }


def _layer_delta(r: LayerDelta) -> dict[str, Any]:
    return {
        "path": r.path,
        "type": r.type,
        "base_type": r.base_type,
        "calls_base": r.calls_base,
        "calls_new": r.calls_new,
        "note": r.note,
        "metric": "self",
        **change(r.change),
        "total": change(r.total),
    }


def _op_delta(r: OpDelta) -> dict[str, Any]:
    return {
        "name": r.name,
        "input_shapes": r.input_shapes,
        "calls_base": r.calls_base,
        "calls_new": r.calls_new,
        **change(r.change),
    }


def _read_change(f: Fields) -> Change:
    status, basis = f.text("status"), f.text("basis")
    if status not in STATUSES or basis not in BASES:
        raise ProfileFormatError(f"{f.where}: unknown status {status!r} or basis {basis!r}")
    return Change(
        base_ns=f.opt_ns("base_ms"),
        new_ns=f.opt_ns("new_ms"),
        delta_ns=f.ns("delta_ms"),
        delta_pct=f.opt_number("delta_pct"),
        beyond_noise=f.flag("beyond_noise"),
        significant=f.flag("significant"),
        status=status,  # type: ignore[arg-type]
        basis=basis,  # type: ignore[arg-type]
        p_value=f.within("p_value", 0.0, 1.0) if f.has("p_value") else None,
        noise_ns=f.opt_duration("noise_ms"),
        ci_ns=f.opt_duration("ci_ms"),
    )


def read_diff(data: Any, source: str) -> Diff:
    # here, not at the top: only a saved diff's reader needs the judge's floor rule and
    # the gate's allowance, and the judge's dataclasses cost ~3.5 ms to create on every
    # import of the codec (each save and load of a Profile)
    from layerprof.analysis.diffjudge import between_floor
    from layerprof.analysis.gate import DRIFT_ALLOWANCE_PCT  # as the judge, above

    f = Fields(data, "diff")
    settings = f.obj("settings")
    base, new = f.obj("base"), f.obj("new")
    if settings is None or base is None or new is None:
        raise ProfileFormatError("diff: missing settings, base or new")
    base_meta, new_meta = base.obj("meta"), new.obj("meta")
    if base_meta is None or new_meta is None:
        raise ProfileFormatError("diff: missing base.meta or new.meta")
    lat = f.obj("latency")
    layer_clock = settings.text("layer_clock")
    op_metric = settings.text("op_metric")
    op_key = settings.text("op_key")
    if (
        layer_clock not in ("host", "device")
        or op_metric not in ("self", "device")
        or op_key
        not in (
            "name",
            "name+shapes",
        )
    ):
        raise ProfileFormatError(f"{settings.where}: unknown clock, metric or key")
    evidence = f.obj("evidence")
    kind = evidence.text("kind") if evidence is not None else "single-run"
    # the gate's allowance the diff was saved with (a diff saved before the key: today's)
    drift = settings.number("drift_allowance_pct", DRIFT_ALLOWANCE_PCT)
    floor_ns = settings.ns("floor_ms")
    if kind not in EVIDENCES:
        raise ProfileFormatError(f"diff.evidence.kind: unknown {kind!r}")
    return Diff(
        evidence=kind,  # type: ignore[arg-type]
        runs_base=_runs(evidence, "runs_base"),
        runs_new=_runs(evidence, "runs_new"),
        base_meta=read_meta(base_meta),
        new_meta=read_meta(new_meta),
        latency=_read_change(lat) if lat is not None else None,
        steps=tuple(
            StepDelta(index=s.integer("index"), change=_read_change(s)) for s in f.objects("steps")
        ),
        phases=tuple(
            PhaseDelta(phase=r.text("phase"), path=r.opt_text("path"), change=_read_change(r))
            for r in f.objects("phases")
        ),
        layers=tuple(
            LayerDelta(
                path=d.text("path"),
                type=d.text("type"),
                base_type=d.opt_text("base_type"),
                calls_base=d.opt_number("calls_base"),
                calls_new=d.opt_number("calls_new"),
                note=d.opt_text("note"),
                change=_read_change(d),
                total=_read_change(required(d, "total")),
            )
            for d in f.objects("layers", required=True)
        ),
        ops=tuple(
            OpDelta(
                name=d.text("name"),
                input_shapes=d.opt_text("input_shapes"),
                calls_base=d.opt_number("calls_base"),
                calls_new=d.opt_number("calls_new"),
                change=_read_change(d),
            )
            for d in f.objects("ops", required=True)
        ),
        kernels=tuple(
            KernelDelta(name=d.text("name"), change=_read_change(d)) for d in f.objects("kernels")
        ),
        warnings=tuple(strings(f, "warnings")),
        comparable=f.flag("comparable", True),
        reason=f.opt_text("reason"),
        threshold_pct=settings.number("threshold_pct"),
        floor_ns=floor_ns,
        # not saved: the judge's rule for the floor of rows judged between runs
        between_floor_ns=between_floor(floor_ns),
        alpha=settings.number("alpha"),
        drift_allowance_pct=drift,
        layer_clock=layer_clock,  # type: ignore[arg-type]
        op_metric=op_metric,  # type: ignore[arg-type]
        op_key=op_key,  # type: ignore[arg-type]
        gate_result=_read_gate(f.obj("gate"), drift),
    )


def _runs(evidence: Fields | None, key: str) -> int:
    """Processes behind one side: at least one (a diff saved before the key: one)."""
    runs = evidence.count(key, 1) if evidence is not None else 1
    if runs < 1:
        raise ProfileFormatError(f"diff.evidence.{key}: expected a count >= 1, found {runs}")
    return runs


def _read_gate(f: Fields | None, drift_allowance_pct: float) -> GateResult | None:
    if f is None:
        return None
    metric = f.text("metric")
    evidence = f.text("evidence", "single-run")  # diffs saved before it existed: one run
    if metric not in METRICS or evidence not in EVIDENCES:
        raise ProfileFormatError(f"{f.where}: unknown metric {metric!r} or evidence {evidence!r}")
    return GateResult(
        failed=f.flag("failed"),
        reasons=tuple(strings(f, "reasons")),
        fail_above_pct=f.number("fail_above_pct", 0),
        metric=metric,  # type: ignore[arg-type]
        evidence=evidence,  # type: ignore[arg-type]
        drift_allowance_pct=drift_allowance_pct,
    )
