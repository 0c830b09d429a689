"""The ``signatures`` key of a profile: the input signatures a Recorder saw.

``[{"inputs": ["8x16"], "forwards": 39, "shapes": {"path": {"in": [...], "out": [...]}}}]``;
files without the key load with no signatures.
"""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields, strings
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.inputs import InputSignature


def encode_signatures(signatures: tuple[InputSignature, ...]) -> list[dict[str, Any]]:
    return [
        {
            "inputs": list(s.inputs),
            "forwards": s.forwards,
            "shapes": {path: {"in": ins, "out": outs} for path, (ins, outs) in s.shapes.items()},
        }
        for s in signatures
    ]


def read_signatures(f: Fields) -> tuple[InputSignature, ...]:
    return tuple(_read(s) for s in f.objects("signatures"))


def _read(f: Fields) -> InputSignature:
    shapes = f.obj("shapes")
    layers: dict[str, tuple[Any, Any]] = {}
    if shapes is not None:
        for path in shapes.data:
            if not isinstance(path, str):
                raise ProfileFormatError(f"{shapes.where}: expected layer paths as keys")
            entry = shapes.obj(path)
            if entry is None:
                raise ProfileFormatError(f"{shapes.where}.{path}: expected an object")
            layers[path] = (entry.shapes("in"), entry.shapes("out"))
    return InputSignature(
        inputs=tuple(strings(f, "inputs")), forwards=f.integer("forwards"), shapes=layers
    )
