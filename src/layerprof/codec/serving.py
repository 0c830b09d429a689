"""The ``serving`` key of a trace profile (see :mod:`layerprof.pivot.sections.serving`): each
annotated step's batch composition, phase, time and counted FLOPs, and each layer's time
per phase (written as a generate's phases are). Optional: files without it load with
``serving=None``. Times are milliseconds; the derived rates are written for readers of the
file only."""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields, required
from layerprof.codec.generation import encode_phase, read_phase
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.serving import (
    DECODE,
    HOST_CLOCK,
    MIXED,
    PHASE_CLOCKS,
    PREFILL,
    BatchPart,
    Serving,
    ServingStep,
)
from layerprof.units import NS_PER_MS

_PART_KEYS = ("requests", "tokens", "kv", "q_squared", "qk")
_PHASES = (PREFILL, DECODE, MIXED)


def encode_serving(s: Serving | None) -> dict[str, Any] | None:
    if s is None:
        return None
    out: dict[str, Any] = {
        "steps": [_step(x) for x in s.steps],
        "phases": [encode_phase(p) for p in s.phases],
        "phase_clock": s.phase_clock,
    }
    if s.ignored_count:
        out["ignored"] = list(s.ignored)
        out["ignored_count"] = s.ignored_count
    return out


def _step(x: ServingStep) -> dict[str, Any]:
    return {
        "name": x.name,
        "phase": x.phase,
        "tokens": x.tokens,
        "prefill": {k: getattr(x.prefill, k) for k in _PART_KEYS},
        "decode": {k: getattr(x.decode, k) for k in _PART_KEYS},
        "time_ms": x.time_ns / NS_PER_MS,
        "flops": x.flops,
        "flop_device_ms": x.flop_device_ns / NS_PER_MS,
        "flop_coverage": x.flop_coverage,
        "tokens_per_s": x.tokens_per_s,
        "ms_per_prefill_token": _ms(x.ns_per_prefill_token),
        "ms_per_decode_request": _ms(x.ns_per_decode_request),
        "flop_rate": x.flop_rate,
    }


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def read_serving(f: Fields | None) -> Serving | None:
    if f is None:
        return None
    ignored = f.items("ignored")
    if not all(isinstance(n, str) for n in ignored):
        raise ProfileFormatError(f"{f.where}.ignored: expected a list of names")
    clock = f.text("phase_clock", HOST_CLOCK)
    if clock not in PHASE_CLOCKS:
        raise ProfileFormatError(f"{f.where}.phase_clock: expected host or device, found {clock!r}")
    return Serving(
        steps=tuple(_read_step(x) for x in f.objects("steps")),
        phases=tuple(read_phase(p) for p in f.objects("phases")),
        ignored=tuple(ignored),
        ignored_count=f.count("ignored_count", 0),
        phase_clock=clock,
    )


def _read_step(f: Fields) -> ServingStep:
    phase = f.text("phase")
    if phase not in _PHASES:
        raise ProfileFormatError(f"{f.where}.phase: expected one of {', '.join(_PHASES)}")
    coverage = f.opt_number("flop_coverage")
    return ServingStep(
        name=f.text("name"),
        phase=phase,
        tokens=f.count("tokens"),
        prefill=_part(required(f, "prefill")),
        decode=_part(required(f, "decode")),
        time_ns=f.duration("time_ms"),
        flops=f.opt_count("flops"),
        flop_device_ns=f.duration("flop_device_ms"),
        flop_coverage=None if coverage is None else f.within("flop_coverage", 0.0, 1.0),
    )


def _part(f: Fields) -> BatchPart:
    return BatchPart(*(f.count(k) for k in _PART_KEYS))
