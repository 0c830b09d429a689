"""``layerprof.sweep/1``: a Sweep (``layerprof sweep --json``), both ways.

::

    {"schema": "layerprof.sweep/1", "model": "ResNetish", "device": "cpu",
     "inputs": ["8x3x64x64"], "batch_dim": 0, "torch": "2.13.0", "host": "...",
     "created": "...", "warmup": 3, "iters": 20, "notes": [],
     "points": [{"batch": 8, "dtype": "float32", "threads": 2, "status": "ok",
                 "reason": "", "latency_ms": {"median": ..., "p90": ..., ...},
                 "samples_per_s": 4100.5, "peak_bytes": 1310720, "flops": 19128960,
                 "shares": [["layer1.0.conv1", 0.12], ...]}]}

Times in ms, memory in bytes, shares as fractions of the forward (self time).
"""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields, read_summary, strings, summary_dict
from layerprof.codec.schemas import SWEEP_SCHEMA
from layerprof.errors import ProfileFormatError
from layerprof.pivot.notes import SAVED, Note, texts
from layerprof.pivot.sections.sweep import STATUSES, Sweep, SweepPoint


def sweep_to_dict(sweep: Sweep) -> dict[str, Any]:
    return {
        "schema": SWEEP_SCHEMA,
        "model": sweep.model,
        "device": sweep.device,
        "inputs": list(sweep.inputs),
        "batch_dim": sweep.batch_dim,
        "torch": sweep.torch,
        "host": sweep.host,
        "created": sweep.created,
        "warmup": sweep.warmup,
        "iters": sweep.iters,
        "notes": texts(sweep.notes),
        "points": [_point(p) for p in sweep.points],
    } | ({"generate": sweep.generate} if sweep.generate is not None else {})


def _point(p: SweepPoint) -> dict[str, Any]:
    return {
        "batch": p.batch,
        "dtype": p.dtype,
        "threads": p.threads,
        "status": p.status,
        "reason": p.reason,
        "latency_ms": summary_dict(p.latency) if p.latency is not None else None,
        "samples_per_s": p.samples_per_s,
        "peak_bytes": p.peak_bytes,
        "flops": p.flops,
        "shares": [[path, share] for path, share in p.shares],
    } | (_generation(p) if p.prompt is not None or p.ttft is not None else {})


def _generation(p: SweepPoint) -> dict[str, Any]:
    """A generate's point: its prompt length, first-token and inter-token times, rates."""
    return {
        "prompt": p.prompt,
        "ttft_ms": summary_dict(p.ttft) if p.ttft is not None else None,
        "itl_ms": summary_dict(p.itl) if p.itl is not None else None,
        "prefill_tokens_per_s": p.prefill_tokens_per_s,
        "decode_tokens_per_s": p.decode_tokens_per_s,
    }


def read_sweep(data: Any, source: str) -> Sweep:
    f = Fields(data, "sweep")
    return Sweep(
        model=f.text("model"),
        device=f.text("device", "cpu"),
        inputs=tuple(strings(f, "inputs")),
        batch_dim=f.integer("batch_dim", 0),
        points=tuple(_read_point(p) for p in f.objects("points", required=True)),
        torch=f.text("torch", ""),
        host=f.text("host", ""),
        created=f.text("created", ""),
        warmup=f.integer("warmup", 0),
        iters=f.integer("iters", 0),
        notes=tuple(Note(SAVED, s) for s in strings(f, "notes")),
        generate=_positive(f, "generate"),
    )


def _read_point(f: Fields) -> SweepPoint:
    status = f.text("status", "ok")
    if status not in STATUSES:
        raise ProfileFormatError(f"{f.where}.status: expected one of {', '.join(STATUSES)}")
    latency, ttft, itl = f.obj("latency_ms"), f.obj("ttft_ms"), f.obj("itl_ms")
    return SweepPoint(
        batch=f.opt_integer("batch"),
        dtype=f.text("dtype"),
        threads=f.opt_integer("threads"),
        status=status,
        reason=f.text("reason", ""),
        latency=read_summary(latency) if latency is not None else None,
        samples_per_s=f.opt_number("samples_per_s"),
        peak_bytes=f.opt_integer("peak_bytes"),
        flops=f.opt_integer("flops"),
        shares=tuple(_share(item, f.where) for item in f.items("shares")),
        prompt=_positive(f, "prompt"),
        ttft=read_summary(ttft) if ttft is not None else None,
        itl=read_summary(itl) if itl is not None else None,
        prefill_tokens_per_s=_rate(f, "prefill_tokens_per_s"),
        decode_tokens_per_s=_rate(f, "decode_tokens_per_s"),
    )


def _positive(f: Fields, key: str) -> int | None:
    value = f.opt_count(key)
    if value == 0:
        raise ProfileFormatError(f"{f.where}.{key}: expected a whole number >= 1, found {value}")
    return value


def _rate(f: Fields, key: str) -> float | None:
    """Tokens per second: a number >= 0 (its own domain, so no later ratio overflows)."""
    return None if f.data.get(key) is None else f.within(key, 0, 1e300)


def _share(item: Any, where: str) -> tuple[str, float]:
    ok = (
        isinstance(item, list)
        and len(item) == 2
        and isinstance(item[0], str)
        and isinstance(item[1], (int, float))
        and not isinstance(item[1], bool)
        and 0 <= item[1] <= 1
    )
    if not ok:
        raise ProfileFormatError(f"{where}.shares: expected [path, share between 0 and 1] pairs")
    return item[0], float(item[1])
