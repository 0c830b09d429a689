"""The ``repeats`` section of a profile body: one set of medians per separate process
(see :mod:`layerprof.pivot.sections.repeats`). Files without it load with ``repeats=None``
(one run: a diff cannot separate a change from drift)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerprof.codec.fields import Fields
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.repeats import Repeats, RunMedians
from layerprof.units import NS_PER_MS, ms


def encode_repeats(repeats: Repeats | None) -> dict[str, Any] | None:
    if repeats is None:
        return None
    return {
        "session": repeats.session,
        "side": repeats.side,
        "runs": [_run(r) for r in repeats.runs],
    }


def _run(r: RunMedians) -> dict[str, Any]:
    out: dict[str, Any] = {
        "round": r.round,
        "latency_ms": ms(r.latency_ns),
        "self_ms": _times_ms(r.self_ns),
    }
    if r.device_self_ns is not None:
        out["device_self_ms"] = _times_ms(r.device_self_ns)
    if r.rest_ratio is not None:
        out["rest_ratio"] = dict(r.rest_ratio)
    if r.ttft_ns is not None:
        out["ttft_ms"] = ms(r.ttft_ns)
    if r.itl_ns is not None:
        out["itl_ms"] = ms(r.itl_ns)
    if r.phase_self_ns is not None:
        out["phase_self_ms"] = {p: _times_ms(t) for p, t in r.phase_self_ns.items()}
    return out


def _times_ms(times: Mapping[str, int]) -> dict[str, float]:
    return {path: ns / NS_PER_MS for path, ns in times.items()}


def read_repeats(f: Fields | None) -> Repeats | None:
    if f is None:
        return None
    side = f.opt_text("side")
    if side not in (None, "base", "new"):
        raise ProfileFormatError(f"{f.where}.side: expected base or new, found {side!r}")
    runs = tuple(_read_run(r) for r in f.objects("runs", required=True))
    return Repeats(runs=runs, session=f.opt_text("session"), side=side)  # type: ignore[arg-type]


def _read_run(f: Fields) -> RunMedians:
    device = f.obj("device_self_ms")
    ratio = f.obj("rest_ratio")
    return RunMedians(
        latency_ns=f.opt_duration("latency_ms"),
        self_ns=_read_times(f.obj("self_ms")),
        device_self_ns=_read_times(device) if device is not None else None,
        round=f.count("round") if f.has("round") else None,
        rest_ratio={str(k): ratio.within(str(k), 0.0, _MAX_REST_RATIO) for k in ratio.data}
        if ratio is not None
        else None,
        ttft_ns=f.opt_duration("ttft_ms"),
        itl_ns=f.opt_duration("itl_ms"),
        phase_self_ns=_read_phases(f.obj("phase_self_ms")),
    )


def _read_phases(f: Fields | None) -> dict[str, dict[str, int]] | None:
    if f is None:
        return None
    out = {}
    for phase in f.data:
        times = f.obj(str(phase))
        out[str(phase)] = _read_times(times)
    return out


#: A layer's self time over the rest of its forward: a layer a billion times the rest of
#: it is no measurement (the diff takes logarithms of ratios of these, then ``expm1``).
_MAX_REST_RATIO = 1e9


def _read_times(f: Fields | None) -> dict[str, int]:
    if f is None:
        return {}
    return {str(path): f.duration(str(path)) for path in f.data}
