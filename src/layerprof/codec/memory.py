"""The ``activation_memory`` section of a profile body (see
:mod:`layerprof.pivot.sections.memory`). Files without it load with ``activation_memory=None``.

::

    "activation_memory": {
      "saved_bytes": 1184, "outside_bytes": 0, "forwards": 1,
      "layers": [{"path": "0", "parent": "", "activations_self_bytes": 160,
                  "activations_bytes": 160, "params_self_bytes": 576, "params_bytes": 576,
                  "grads_self_bytes": 576, "grads_bytes": 576,
                  "optimizer_self_bytes": null, "optimizer_bytes": null,
                  "input_bytes": 160}, ...],
      "peaks": [{"phase": "forward", "start_bytes": ..., "peak_bytes": ...}, ...]
    }

The ``*_self_bytes`` keys are read back; totals (``activations_bytes`` ...) are derived
from them and written for readers of the file only.
"""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.memory import KINDS, ActivationMemory, MemoryRow, PhasePeak


def encode_activation_memory(section: ActivationMemory | None) -> dict[str, Any] | None:
    if section is None:
        return None
    layers = []
    for row, total in zip(section.rows, section.totals(), strict=True):
        d: dict[str, Any] = {"path": row.path, "parent": row.parent}
        for kind in KINDS:
            d[f"{kind}_self_bytes"] = row.own(kind)
            d[f"{kind}_bytes"] = total.total(kind)
        d["input_bytes"] = row.input_bytes
        layers.append(d)
    return {
        "saved_bytes": section.saved_bytes,
        "outside_bytes": section.outside_bytes,
        "forwards": section.forwards,
        "layers": layers,
        "peaks": [
            {"phase": p.phase, "start_bytes": p.start_bytes, "peak_bytes": p.peak_bytes}
            for p in section.peaks
        ],
    }


def read_activation_memory(f: Fields | None) -> ActivationMemory | None:
    if f is None:
        return None
    rows = tuple(_read_row(r) for r in f.objects("layers", required=True))
    _check_tree(rows, f"{f.where}.layers")
    return ActivationMemory(
        rows=rows,
        outside_bytes=f.count("outside_bytes", 0),
        forwards=f.count("forwards", 1),
        peaks=tuple(
            PhasePeak(
                phase=p.text("phase"),
                start_bytes=p.count("start_bytes", 0),
                peak_bytes=p.count("peak_bytes", 0),
            )
            for p in f.objects("peaks")
        ),
    )


def _check_tree(rows: tuple[MemoryRow, ...], where: str) -> None:
    """Each path once, and every chain of parents ends (at the root or at a path the
    section does not hold): the totals add children to parents, which a cycle never ends."""
    parent: dict[str, str | None] = {}
    for r in rows:
        if r.path in parent:
            raise ProfileFormatError(f"{where}: the path {r.path!r} is listed twice")
        parent[r.path] = r.parent
    ends: set[str] = set()  # paths whose chain is known to end
    for start in parent:
        chain: list[str] = []
        seen: set[str] = set()
        path: str | None = start
        while path is not None and path in parent and path not in ends:
            if path in seen:
                raise ProfileFormatError(f"{where}: the parents of {path!r} form a cycle")
            seen.add(path)
            chain.append(path)
            path = parent[path]
        ends.update(chain)


def _read_row(f: Fields) -> MemoryRow:
    grads, optimizer = f.opt_integer("grads_self_bytes"), f.opt_integer("optimizer_self_bytes")
    inputs = f.opt_integer("input_bytes")
    optional = (("grads_self_bytes", grads), ("optimizer_self_bytes", optimizer),
                ("input_bytes", inputs))  # fmt: skip
    for key, value in optional:
        if value is not None and value < 0:
            raise ProfileFormatError(f"{f.where}.{key}: expected bytes >= 0, found {value}")
    return MemoryRow(
        path=f.text("path"),
        parent=f.opt_text("parent"),
        activations_self=f.count("activations_self_bytes", 0),
        params_self=f.count("params_self_bytes", 0),
        grads_self=grads,
        optimizer_self=optimizer,
        input_bytes=inputs,
    )
