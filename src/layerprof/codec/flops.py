"""FLOPs in the profile JSON: per-layer keys beside ``flops``, and the model's ``flops`` object.

Per layer (present when counted)::

    "flops": 1966080, "flops_elementwise": 55296, "bytes_moved": 572288,
    "op_counted_ms": 0.51, "op_uncounted_ms": 0.0, "uncounted_share": 0.0,
    "uncounted_op": "aten.foo: no formula", "flops_label": null, "flops_backward": 3929600,
    "flops_backward_elementwise": 128512

Per profile::

    "flops": {"convention": "...", "forward": ..., "elementwise": ..., "coverage": 0.98,
              "counted_ms": ..., "uncounted_ms": ..., "backward": ..., "backward_unattributed": ...,
              "uncounted_ops": [{"name": "aten.foo", "ms": 0.1, "calls": 2, "reason": "no formula"}],
              "peak": {"flops_per_s": ..., "bytes_per_s": ..., "ridge": ..., "source": "measured",
                       "detail": "..."}}

Files without these keys load with no FLOP detail (``None``).
"""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.flops import CONVENTION, FlopSummary, LayerFlops, Peak, UncountedOp
from layerprof.units import NS_PER_MS


def encode_layer_flops(detail: LayerFlops | None) -> dict[str, Any]:
    """A layer's FLOP detail as flat keys of its JSON record (none when not counted)."""
    if detail is None:
        return {}
    out: dict[str, Any] = {
        "flops_elementwise": detail.elementwise,
        "bytes_moved": detail.bytes,
        "op_counted_ms": detail.counted_ns / NS_PER_MS,
        "op_uncounted_ms": detail.uncounted_ns / NS_PER_MS,
        "uncounted_share": detail.uncounted_share,
        "uncounted_op": detail.uncounted,
        "flops_label": detail.label,
    }
    if detail.backward is not None:
        out["flops_backward"] = detail.backward
        out["flops_backward_elementwise"] = detail.backward_elementwise
    return out


def read_layer_flops(f: Fields) -> LayerFlops | None:
    if not f.has("flops_elementwise"):
        return None
    return LayerFlops(
        elementwise=f.count("flops_elementwise"),
        bytes=f.count("bytes_moved", 0),
        counted_ns=f.ns("op_counted_ms") if f.has("op_counted_ms") else 0,
        uncounted_ns=f.ns("op_uncounted_ms") if f.has("op_uncounted_ms") else 0,
        uncounted=f.opt_text("uncounted_op"),
        label=f.opt_text("flops_label"),
        backward=f.opt_count("flops_backward"),
        backward_elementwise=f.opt_count("flops_backward_elementwise"),
    )


def encode_flops(summary: FlopSummary | None) -> dict[str, Any] | None:
    """The model's ``flops`` object (None when nothing was counted)."""
    if summary is None:
        return None
    return {
        "convention": summary.convention,
        "forward": summary.forward,
        "elementwise": summary.elementwise,
        "coverage": summary.coverage,
        "counted_ms": summary.counted_ns / NS_PER_MS,
        "uncounted_ms": summary.uncounted_ns / NS_PER_MS,
        "uncounted_ops": [
            {"name": op.name, "ms": op.time_ns / NS_PER_MS, "calls": op.calls, "reason": op.reason}
            for op in summary.uncounted_ops
        ],
        "backward": summary.backward,
        "backward_unattributed": summary.backward_unattributed,
        "peak": peak_dict(summary.peak),
    }


def peak_dict(peak: Peak | None) -> dict[str, Any] | None:
    if peak is None:
        return None
    return {
        "flops_per_s": peak.flops_per_s,
        "bytes_per_s": peak.bytes_per_s,
        "ridge": peak.ridge,
        "source": peak.source,
        "detail": peak.detail,
    }


def read_flops(f: Fields | None) -> FlopSummary | None:
    if f is None:
        return None
    peak = f.obj("peak")
    return FlopSummary(
        forward=f.integer("forward"),
        elementwise=f.integer("elementwise", 0),
        counted_ns=f.ns("counted_ms") if f.has("counted_ms") else 0,
        uncounted_ns=f.ns("uncounted_ms") if f.has("uncounted_ms") else 0,
        uncounted_ops=tuple(
            UncountedOp(
                name=op.text("name"),
                time_ns=op.ns("ms"),
                calls=op.integer("calls", 0),
                reason=op.text("reason", ""),
            )
            for op in f.objects("uncounted_ops")
        ),
        backward=f.opt_integer("backward"),
        backward_unattributed=f.opt_integer("backward_unattributed"),
        peak=read_peak(peak) if peak is not None else None,
        convention=f.text("convention", CONVENTION),
    )


def read_peak(f: Fields) -> Peak:
    flops, bandwidth = f.opt_number("flops_per_s"), f.opt_number("bytes_per_s")
    for key, value in (("flops_per_s", flops), ("bytes_per_s", bandwidth)):
        if value is not None and value <= 0:
            raise ProfileFormatError(f"{f.where}.{key}: expected a positive rate, found {value!r}")
    return Peak(flops, bandwidth, source=f.text("source", ""), detail=f.text("detail", ""))
