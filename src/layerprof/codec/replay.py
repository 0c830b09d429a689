"""The ``graph_replay`` section of a profile body: a graph replay read through its
capture(s) (see :mod:`layerprof.pivot.sections.replay`). Files without it load with
``graph_replay=None``."""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.replay import CaptureFile, GraphMatch, GraphReplay, MissedKernel
from layerprof.units import NS_PER_MS


def encode_replay(r: GraphReplay | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "kernels": r.kernels,
        "matched": r.matched,
        "device_ms": r.device_ns / NS_PER_MS,
        "matched_ms": r.matched_ns / NS_PER_MS,
        "captures": [
            {
                "file": c.file,
                "batch": c.batch,
                "mode": c.mode,
                "launches": c.launches,
                "named": c.named,
                "compiled_pieces": c.compiled_pieces,
                "graphs": c.graphs,
                "batches": list(c.batches),
            }
            for c in r.captures
        ],
        "graphs": [
            {
                "call": g.call,
                "kernels": g.kernels,
                "device_ms": g.device_ns / NS_PER_MS,
                "capture": g.capture,
                "capture_batch": g.capture_batch,
                "batch_hint": g.batch_hint,
                "matched": g.matched,
                "matched_ms": g.matched_ns / NS_PER_MS,
            }
            for g in r.graphs
        ],
        "missed": [
            {"name": m.name, "count": m.count, "device_ms": m.device_ns / NS_PER_MS}
            for m in r.missed
        ],
        "outside_ops": r.outside_ops,
        "outside_ms": r.outside_ns / NS_PER_MS,
    }


def read_replay(f: Fields | None) -> GraphReplay | None:
    if f is None:
        return None
    return GraphReplay(
        captures=tuple(
            CaptureFile(
                file=c.text("file"),
                batch=c.opt_count("batch"),
                mode=c.text("mode", ""),
                launches=c.count("launches", 0),
                named=c.flag("named", True),
                compiled_pieces=c.count("compiled_pieces", 0),
                graphs=c.count("graphs", 1),
                batches=_batches(c),
            )
            for c in f.objects("captures")
        ),
        graphs=tuple(
            GraphMatch(
                call=g.text("call"),
                kernels=g.count("kernels"),
                device_ns=g.duration("device_ms"),
                capture=g.opt_text("capture"),
                capture_batch=g.opt_count("capture_batch"),
                batch_hint=g.opt_count("batch_hint"),
                matched=g.count("matched"),
                matched_ns=g.duration("matched_ms"),
            )
            for g in f.objects("graphs")
        ),
        missed=tuple(
            MissedKernel(m.text("name"), m.count("count"), m.duration("device_ms"))
            for m in f.objects("missed")
        ),
        outside_ops=f.count("outside_ops", 0),
        outside_ns=f.duration("outside_ms") if f.has("outside_ms") else 0,
    )


def _batches(f: Fields) -> tuple[int, ...]:
    values = f.items("batches")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ProfileFormatError(f"{f.where}.batches: expected a list of counts")
    return tuple(values)
