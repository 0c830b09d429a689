"""``layerprof.profile/2`` (and /1) bodies: meta, latency, overhead, layers, ops.

The trace sections of a profile body live in :mod:`layerprof.codec.sections`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from layerprof.analysis.roofline import roofline
from layerprof.codec.fields import (
    Fields,
    first_rows,
    read_series,
    read_summary,
    saved_notes,
    summary_dict,
)
from layerprof.codec.flops import encode_layer_flops, read_layer_flops
from layerprof.codec.schemas import LEGACY_PROFILE
from layerprof.codec.sections import encode_sections, read_sections
from layerprof.errors import ProfileFormatError
from layerprof.pivot.notes import texts
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import (
    OP_COLUMNS,
    LayerInfo,
    LayerSamples,
    Meta,
    OpSamples,
    OpStat,
    Overhead,
)
from layerprof.stats import Series
from layerprof.units import NS_PER_MS, NS_PER_US, ms, ms_list

_LAYER_SERIES = (
    ("total_ns", "total_ms"),
    ("self_ns", "self_ms"),
    ("device_total_ns", "device_total_ms"),
    ("device_self_ns", "device_self_ms"),
    ("backward_total_ns", "backward_total_ms"),
    ("backward_self_ns", "backward_self_ms"),
)
#: The most calls per forward a saved layer may say (2**53: whole numbers stay exact).
_MAX_CALLS = 2.0**53
_OP_SERIES = (("self_ns", "self_ms"), ("total_ns", "total_ms"), ("device_ns", "device_ms"))


def profile_body(p: Profile, *, samples: bool, top: int | None = None) -> dict[str, Any]:
    meta = asdict(p.meta)
    meta["inputs"] = list(p.meta.inputs)
    out: dict[str, Any] = {
        "meta": meta,
        "latency_ms": _latency(p, samples=True),
        "overhead": _overhead(p.overhead),
        "layers": _layers(p, samples),
        "ops": [_op(o, samples) for o in first_rows(p.ops, top)],
        "notes": texts(p.notes),
    }
    out.update(encode_sections(p, top))
    return out


def _latency(p: Profile, *, samples: bool) -> dict[str, Any] | None:
    if p.latency_ns is None:
        return None
    out: dict[str, Any] = {**summary_dict(p.latency_ns.summary), "first": ms(p.first_ns)}
    if samples and p.latency_ns.values is not None:
        out["samples"] = ms_list(p.latency_ns.tolist())
    return out


def _overhead(o: Overhead | None) -> dict[str, Any] | None:
    if o is None:
        return None
    return {
        "per_call_us": o.per_call_ns / NS_PER_US,
        "inside_us": o.inside_ns / NS_PER_US,
        "corrected": o.corrected,
        "calls_per_forward": o.calls_per_forward,
        "clean_ms": ms(o.clean_ns),
        "instrumented_ms": ms(o.instrumented_ns),
        "ratio": (o.instrumented_ns / o.clean_ns) if o.clean_ns and o.instrumented_ns else None,
        "method": o.method,
        "per_op_us": o.per_op_ns / NS_PER_US,
        "ops_per_forward": o.ops_per_forward,
    }


def _layer_record(row: Any) -> dict[str, Any]:
    """One derived layer row as a flat record (JSON layers, DataFrame rows)."""
    d: dict[str, Any] = {
        "path": row.path,
        "type": row.type,
        "parent": row.parent,
        "depth": row.depth,
        "calls": row.calls,
        "total_ms": row.total_ns / NS_PER_MS,
        "self_ms": row.self_ns / NS_PER_MS,
        "share": row.share,
        "params": row.params,
        "params_own": row.params_own,
        **({"calls_vary": True} if row.calls_vary else {}),
        **({"flops": row.flops} if row.flops is not None else {}),
        **({"output_bytes": row.output_bytes} if row.output_bytes is not None else {}),
        **({"peak_bytes": row.peak_bytes} if row.peak_bytes is not None else {}),
        **encode_layer_flops(row.flop_detail),
        "input_shapes": row.input_shapes,
        "output_shapes": row.output_shapes,
    }
    for key in ("device_total_ns", "device_self_ns", "backward_total_ns", "backward_self_ns"):
        value = getattr(row, key)
        if value is not None:
            d[key.replace("_ns", "_ms")] = value / NS_PER_MS
    return d


def layer_records(profile: Profile) -> list[dict[str, Any]]:
    return [_layer_record(r) for r in profile.rows()]


def _layers(p: Profile, samples: bool) -> list[dict[str, Any]]:
    """The layer records, each with its roofline numbers where the console and the HTML
    report show them (derived from FLOPs, bytes, time and the peak: written, not read)."""

    line = roofline(p)
    points = {pt.path: pt for pt in line.points} if line is not None else {}
    out = []
    for r in p.rows():
        d = _layer(p, r, samples)
        point = points.get(r.path)
        if point is not None:
            d["roofline"] = {
                "flops_per_s": point.rate,
                "intensity_flop_per_byte": point.intensity,
                "peak_pct": None if point.peak_share is None else 100 * point.peak_share,
                "attainable_pct": (
                    None if point.attainable_share is None else 100 * point.attainable_share
                ),
                "bound": point.bound,
                "time_ms": point.time_ns / NS_PER_MS,
                "device_time": line.device_time if line is not None else False,
            }
        out.append(d)
    return out


def _layer(p: Profile, row: Any, samples: bool) -> dict[str, Any]:
    d = _layer_record(row)
    s = p.samples.get(row.path)
    if s is not None:
        d["series"] = _series_dict(s, _LAYER_SERIES)
        if samples and s.total_ns.values is not None:
            d["samples"] = _samples_dict(s, _LAYER_SERIES)
    return d


def _series_dict(obj: Any, fields: Sequence[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr, key in fields:
        series = getattr(obj, attr)
        if series is not None:
            out[key] = summary_dict(series.summary)
    return out


def _samples_dict(obj: Any, fields: Sequence[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr, key in fields:
        series = getattr(obj, attr)
        if series is not None and series.values is not None:
            out[key] = ms_list(series.tolist())
    return out


def _op(o: OpStat, samples: bool) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": o.name,
        "calls": o.calls,
        "self_ms": o.self_ns / NS_PER_MS,
        "total_ms": o.total_ns / NS_PER_MS,
        **({"device_ms": o.device_ns / NS_PER_MS} if o.device_ns is not None else {}),
        "layer": o.layer,
        "input_shapes": o.input_shapes,
        **({"phase": o.phase} if o.phase != "forward" else {}),
        **o.columns,  # memory bytes and FLOPs per iteration, where recorded
    }
    if o.samples is not None:
        series = _series_dict(o.samples, _OP_SERIES)
        series["calls"] = summary_dict(o.samples.calls.summary, 1.0)
        d["series"] = series
        if samples and o.samples.self_ns.values is not None:
            kept = _samples_dict(o.samples, _OP_SERIES)
            kept["calls"] = o.samples.calls.tolist()
            d["samples"] = kept
    return d


def read_meta(f: Fields) -> Meta:
    known = set(Meta.__dataclass_fields__)
    strings = ("model", "device", "dtype", "torch", "mode", "source", "created", "host")
    values: dict[str, Any] = {k: f.text(k) for k in strings if k in f.data}
    if "model" not in values:
        values["model"] = ""
    if f.has("note"):
        values["note"] = f.text("note")
    for key in ("warmup", "iters"):
        if f.has(key):
            values[key] = f.integer(key)
    if f.has("threads"):
        values["threads"] = f.integer("threads")
    values["grad"] = f.flag("grad")
    inputs = f.items("inputs")
    if not all(isinstance(i, str) for i in inputs):
        raise ProfileFormatError(f"{f.where}.inputs: expected a list of strings")
    values["inputs"] = tuple(inputs)
    extra = f.data.get("extra")
    extra = dict(extra) if isinstance(extra, Mapping) else {}
    extra.update({k: v for k, v in f.data.items() if k not in known})
    return Meta(**values, extra=extra)


def read_profile(data: Any, source: str) -> Profile:
    f = Fields(data, "profile")
    legacy = data.get("schema") == LEGACY_PROFILE
    meta_f = f.obj("meta")
    if meta_f is None:
        raise ProfileFormatError("profile.meta: missing")
    layers: list[LayerInfo] = []
    samples: dict[str, LayerSamples] = {}
    for lf in f.objects("layers", required=True):
        info, smp = _read_layer(lf, legacy)
        layers.append(info)
        if smp is not None:
            samples[info.path] = smp
    latency, first = _read_latency(f.obj("latency_ms"))
    return Profile(
        meta=read_meta(meta_f),
        layers=tuple(layers),
        samples=samples,
        latency_ns=latency,
        first_ns=first,
        overhead=_read_overhead(f.obj("overhead")),
        ops=tuple(_read_op(o) for o in f.objects("ops")),
        notes=saved_notes(f),
        **read_sections(f),
    )


def _read_layer(lf: Fields, legacy: bool) -> tuple[LayerInfo, LayerSamples | None]:
    path = lf.text("path")
    parent = lf.opt_text("parent")
    info = LayerInfo(
        path=path,
        type=lf.text("type"),
        parent=parent,
        params=lf.count("params", 0),
        params_own=lf.count("params_own", 0),
        input_shapes=lf.shapes("input_shapes"),
        output_shapes=lf.shapes("output_shapes"),
        flops=lf.opt_count("flops"),
        output_bytes=lf.opt_count("output_bytes"),
        peak_bytes=lf.opt_count("peak_bytes"),
        flop_detail=read_layer_flops(lf),
    )
    # calls per forward: a mean (T5's encoder reads 1/N), never negative, and bounded
    # so that no ratio of two files' calls overflows
    calls = lf.within("calls", 0, _MAX_CALLS) if lf.has("calls") else 0.0
    kept = lf.obj("samples")
    series = lf.obj("series")
    if legacy and series is None and lf.has("total_spread_ms") and kept is None:
        series = None  # profile/1 kept samples whenever it had any
    values = {attr: read_series(kept, series, key) for attr, key in _LAYER_SERIES}
    total, self_ = values["total_ns"], values["self_ns"]
    if total is None or self_ is None:
        if not calls:
            return info, None
        # an old file with only the row's numbers: one sample of each
        total = Series([lf.ns("total_ms")])
        self_ = Series([lf.ns("self_ms")])
    return info, LayerSamples(
        total_ns=total,
        self_ns=self_,
        calls=calls,
        calls_vary=lf.flag("calls_vary"),
        device_total_ns=values["device_total_ns"],
        device_self_ns=values["device_self_ns"],
        backward_total_ns=values["backward_total_ns"],
        backward_self_ns=values["backward_self_ns"],
    )


def _read_latency(f: Fields | None) -> tuple[Series | None, int | None]:
    if f is None:
        return None, None
    first = f.opt_ns("first")
    if f.has("samples"):
        values = f.items("samples")
        if values:
            series = read_series(f, None, "samples")
            return series, first
    if f.has("median") and f.has("n"):
        return Series(summary=read_summary(f)), first
    return None, first


def _read_overhead(f: Fields | None) -> Overhead | None:
    if f is None:
        return None
    method = f.text("method", "hooks")  # files before 22.4 knew hooks mode only
    if method not in ("hooks", "ops"):
        raise ProfileFormatError(f"{f.where}.method: expected hooks or ops, found {method!r}")
    return Overhead(
        per_call_ns=f.number("per_call_us") * NS_PER_US,
        inside_ns=f.number("inside_us", 0) * NS_PER_US,
        corrected=f.flag("corrected"),
        calls_per_forward=f.number("calls_per_forward", 0),
        clean_ns=f.opt_ns("clean_ms"),
        instrumented_ns=f.opt_ns("instrumented_ms"),
        method=method,
        per_op_ns=f.number("per_op_us", 0) * NS_PER_US,
        ops_per_forward=f.number("ops_per_forward", 0),
    )


def _read_op(f: Fields) -> OpStat:
    phase = f.text("phase", "forward")
    if phase not in ("forward", "backward"):
        raise ProfileFormatError(f"{f.where}.phase: expected forward or backward, found {phase!r}")
    kept, series = f.obj("samples"), f.obj("series")
    op_samples = None
    if series is not None or kept is not None:
        self_s = read_series(kept, series, "self_ms", signed=True)
        total_s = read_series(kept, series, "total_ms", signed=True)
        calls_s = read_series(kept, series, "calls", 1.0)
        if self_s is not None and total_s is not None and calls_s is not None:
            op_samples = OpSamples(
                calls=calls_s,
                self_ns=self_s,
                total_ns=total_s,
                device_ns=read_series(kept, series, "device_ms", signed=True),
            )
    return OpStat(
        name=f.text("name"),
        calls=f.within("calls", 0, _MAX_CALLS),
        self_ns=f.ns_float("self_ms"),
        total_ns=f.ns_float("total_ms"),
        device_ns=f.opt_ns_float("device_ms"),
        layer=f.opt_text("layer"),
        input_shapes=f.opt_text("input_shapes"),
        phase=phase,
        samples=op_samples,
        **{key: f.opt_number(key) for key in OP_COLUMNS},
    )
