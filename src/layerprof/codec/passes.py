"""The ``passes`` section of a profile body: fused fast paths and modules called in
one pass only (see :mod:`layerprof.pivot.sections.passes`). Files without it load with
``passes=None`` (not checked)."""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields, strings
from layerprof.pivot.sections.passes import FusedLayer, PassCheck


def encode_passes(check: PassCheck | None) -> dict[str, Any] | None:
    if check is None:
        return None
    return {
        "fused": [
            {
                "layer": f.layer,
                "type": f.type,
                "op": f.op,
                "calls": f.calls,
                "skipped": list(f.skipped),
                "in_layer_pass": f.in_layer_pass,
            }
            for f in check.fused
        ],
        "clean_only": list(check.clean_only),
        "layer_only": list(check.layer_only),
        "diverged": list(check.diverged),
    }


def read_passes(f: Fields | None) -> PassCheck | None:
    if f is None:
        return None
    fused = tuple(
        FusedLayer(
            layer=r.text("layer"),
            type=r.text("type"),
            op=r.text("op"),
            calls=r.integer("calls", 0),
            skipped=tuple(strings(r, "skipped")),
            in_layer_pass=r.flag("in_layer_pass", True),
        )
        for r in f.objects("fused")
    )
    return PassCheck(
        fused=fused,
        clean_only=tuple(strings(f, "clean_only")),
        layer_only=tuple(strings(f, "layer_only")),
    )
