"""The per layer × rank table of a Run (``layers_across_ranks`` in ``layerprof.trace/2``).

Old files without the key load with an empty table.
"""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.ranks import LayerAcrossRanks
from layerprof.units import NS_PER_MS

KEY = "layers_across_ranks"


def encode_layer_ranks(rows: tuple[LayerAcrossRanks, ...]) -> list[dict[str, Any]]:
    return [
        {
            "path": r.path,
            "type": r.type,
            "ms_by_rank": {str(rank): ns / NS_PER_MS for rank, ns in r.ns_by_rank},
            "median_ms": r.median_ns / NS_PER_MS,
            "min_ms": r.min_ns / NS_PER_MS,
            "max_ms": r.max_ns / NS_PER_MS,
            "slowest_rank": r.slowest_rank,
        }
        for r in rows
    ]


def read_layer_ranks(f: Fields) -> tuple[LayerAcrossRanks, ...]:
    out = []
    for r in f.objects(KEY):
        by_rank = r.obj("ms_by_rank")
        pairs: list[tuple[int, float]] = []
        if by_rank is not None:
            for key in by_rank.data:
                if not str(key).lstrip("-").isdigit():
                    raise ProfileFormatError(f"{by_rank.where}: rank {key!r} is not a number")
                pairs.append((int(key), _ns(by_rank, key)))
        out.append(
            LayerAcrossRanks(
                path=r.text("path"),
                type=r.text("type", "layer"),
                ns_by_rank=tuple(sorted(pairs)),
                median_ns=_ns(r, "median_ms"),
                min_ns=_ns(r, "min_ms"),
                max_ns=_ns(r, "max_ms"),
                slowest_rank=r.integer("slowest_rank"),
            )
        )
    return tuple(out)


def _ns(f: Fields, key: str) -> float:
    # rounded to 1e-3 ns so that ns -> ms -> ns gives back what was written
    return round(f.number(key) * NS_PER_MS, 3)
