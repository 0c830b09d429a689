"""The ``generation`` key of a profile (see :mod:`layerprof.pivot.sections.generation`). Optional:
files without it load with ``generation=None``. Times are milliseconds; each series keeps
its samples (a few per generate) beside its summary, and the derived rates are written
for readers of the file only."""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields, read_summary, required, summary_dict
from layerprof.codec.flops import peak_dict, read_peak
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.generation import Generation, KvCache, Phase, PhaseLayer
from layerprof.stats import Series
from layerprof.units import NS_PER_MS


def encode_generation(g: Generation | None) -> dict[str, Any] | None:
    if g is None:
        return None
    out: dict[str, Any] = {
        "new_tokens": g.new_tokens,
        "prompt_tokens": g.prompt_tokens,
        "batch": g.batch,
        "generates": g.generates,
        "ttft_ms": _series(g.ttft_ns) if g.ttft_ns is not None else None,
        "itl_ms": _series(g.itl_ns) if g.itl_ns is not None else None,
        "generate_ms": _series(g.generate_ns) if g.generate_ns is not None else None,
        "prefill_tokens_per_s": g.prefill_tokens_per_s,
        "decode_tokens_per_s": g.decode_tokens_per_s,
        "phases": [_phase(p) for p in g.phases],
    }
    if g.kv_cache is not None:
        out["kv_cache"] = {
            "layers_bytes": list(g.kv_cache.layers),
            "positions": g.kv_cache.positions,
            "total_bytes": g.kv_cache.total_bytes,
            "bytes_per_token": g.kv_cache.bytes_per_token,
        }
        if g.kv_cache.cross_bytes:
            out["kv_cache"]["cross_attention_bytes"] = g.kv_cache.cross_bytes
    if g.peak is not None:
        out["peak"] = peak_dict(g.peak)
    if g.peak_bytes:
        out["peak_bytes"] = dict(g.peak_bytes)
    return out


def _series(s: Series) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": summary_dict(s.summary)}
    if s.values is not None:
        out["samples"] = [v / NS_PER_MS for v in s.values.tolist()]
    return out


def _phase(p: Phase) -> dict[str, Any]:
    return {
        "name": p.name,
        "forwards": p.forwards,
        "tokens_per_forward": p.tokens_per_forward,
        "layers": [
            {
                "path": x.path,
                "total_ms": x.total_ns / NS_PER_MS,
                "self_ms": x.self_ns / NS_PER_MS,
                "self_summary_ms": summary_dict(x.self_summary) if x.self_summary else None,
                "growth_ms_per_1k": None
                if x.growth_ns_per_1k is None
                else x.growth_ns_per_1k / NS_PER_MS,
            }
            | ({"flops": x.flops, "bytes": x.bytes} if x.flops is not None else {})
            for x in p.layers
        ],
    }


def read_generation(f: Fields | None) -> Generation | None:
    if f is None:
        return None
    itl, ttft, whole = f.obj("itl_ms"), f.obj("ttft_ms"), f.obj("generate_ms")
    cache, peak = f.obj("kv_cache"), f.obj("peak")
    return Generation(
        new_tokens=f.count("new_tokens"),
        prompt_tokens=f.count("prompt_tokens"),
        batch=f.count("batch"),
        generates=f.count("generates"),
        ttft_ns=_read_series(ttft) if ttft is not None else None,
        itl_ns=_read_series(itl) if itl is not None else None,
        generate_ns=_read_series(whole) if whole is not None else None,
        phases=tuple(_read_phase(p) for p in f.objects("phases")),
        kv_cache=None if cache is None else _read_cache(cache),
        peak=None if peak is None else read_peak(peak),
        peak_bytes=_peak_bytes(f.obj("peak_bytes")),
    )


def _peak_bytes(f: Fields | None) -> tuple[tuple[str, int], ...]:
    """Per phase, allocated memory's peak above the start: byte counts >= 0."""
    if f is None:
        return ()
    out = []
    for name, value in f.data.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
            raise ProfileFormatError(f"{f.where}.{name}: expected a byte count >= 0")
        out.append((str(name), value))
    return tuple(out)


def _read_series(f: Fields) -> Series:
    if f.has("samples"):
        values = f.durations("samples", required=True)
        if not values:
            raise ProfileFormatError(f"{f.where}.samples: expected a list of times >= 0 (ms)")
        return Series(values)
    return Series(summary=read_summary(required(f, "summary")))


def _read_phase(f: Fields) -> Phase:
    return Phase(
        name=f.text("name"),
        forwards=f.count("forwards"),
        tokens_per_forward=f.count("tokens_per_forward"),
        layers=tuple(_read_layer(x) for x in f.objects("layers")),
    )


def _read_layer(f: Fields) -> PhaseLayer:
    summary = f.obj("self_summary_ms")
    growth = f.opt_ns_float("growth_ms_per_1k")  # signed: a step may shrink with the context
    return PhaseLayer(
        path=f.text("path"),
        total_ns=f.duration("total_ms"),
        self_ns=f.duration("self_ms"),
        self_summary=read_summary(summary) if summary is not None else None,
        growth_ns_per_1k=growth,
        flops=f.opt_count("flops"),
        bytes=f.opt_count("bytes"),
    )


def _read_cache(f: Fields) -> KvCache:
    layers = f.items("layers_bytes")
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62 for v in layers):
        raise ProfileFormatError(f"{f.where}.layers_bytes: expected a list of byte counts >= 0")
    cross = f.opt_count("cross_attention_bytes")
    return KvCache(layers=tuple(layers), positions=f.count("positions"), cross_bytes=cross or 0)


#: A phase's writer and reader, shared with a serving trace's phases (``codec/serving.py``).
encode_phase = _phase
read_phase = _read_phase
