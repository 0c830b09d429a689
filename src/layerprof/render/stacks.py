"""The layer tree as folded stacks (flamegraph.pl) and as a speedscope file.

Both are built from a Profile's rows (self time per forward, median over
iterations), not from samples: a layer's frame weight is its self time, so a
flame graph's widths are the layer totals. Frames are named by path
component under the model's class (``TinyTransformer;layers;0;attn``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from layerprof.files import write_atomic
from layerprof.render.terminal import escape_controls

if TYPE_CHECKING:
    from layerprof.pivot.profile import LayerNode, LayerRow, Profile

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def folded_lines(profile: Profile) -> list[str]:
    """``root;child;leaf <self µs>`` per layer with at least 1 µs of self time."""
    lines: list[str] = []
    for node, stack in _walk(profile):
        us = round(node.row.self_ns / 1000)
        if us > 0:
            lines.append(f"{';'.join(stack)} {us}")
    return lines


def write_folded(path: str | os.PathLike[str], profile: Profile) -> Path:
    """flamegraph.pl / ``export_stacks`` format, one line per layer."""
    return write_atomic(path, "".join(line + "\n" for line in folded_lines(profile)))


def _frame(row: LayerRow) -> str:
    # ';' separates frames, the last ' ' the count and a newline the stacks: a name
    # keeps none of them (a newline shows as ``\n``, as on the console).
    name = row.type if row.path == "" else row.path.rsplit(".", 1)[-1]
    return escape_controls(name).replace(";", ":")


def _walk(profile: Profile) -> Iterator[tuple[LayerNode, list[str]]]:
    def visit(node: LayerNode, stack: list[str]) -> Iterator[tuple[LayerNode, list[str]]]:
        here = [*stack, _frame(node.row)]
        yield node, here
        for child in node.children:
            yield from visit(child, here)

    for root in profile.tree():
        yield from visit(root, [])


# ---- speedscope ----------------------------------------------------------------------


def speedscope_document(profile: Profile, *, name: str | None = None) -> dict[str, Any]:
    """Evented profiles (forward, and backward when present) of the layer tree.

    Time is laid out synthetically: a layer opens, spends its self time, then
    its children run one after another in module order, then it closes. So a
    frame's width is exactly self + children, the tree invariant.
    """
    frames: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for node, _ in _walk(profile):
        row = node.row
        index[row.path] = len(frames)
        frames.append({"name": _frame_name(row), "file": row.path or row.type})
    profiles = [_evented(profile, "forward", lambda r: r.self_ns, index)]
    if any(r.backward_self_ns is not None for r in profile.rows()):
        profiles.append(_evented(profile, "backward", lambda r: r.backward_self_ns or 0.0, index))
    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "shared": {"frames": frames},
        "profiles": profiles,
        "name": name or profile.meta.model,
        "activeProfileIndex": 0,
        "exporter": "layerprof",
    }


def write_speedscope(path: str | os.PathLike[str], profile: Profile) -> Path:
    return write_atomic(path, orjson.dumps(speedscope_document(profile)))


def _frame_name(row: LayerRow) -> str:
    return row.type if row.path == "" else f"{row.path} ({row.type})"


def _evented(
    profile: Profile, label: str, self_of: Callable[[LayerRow], float], index: dict[str, int]
) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    clock = [0]

    def visit(node: LayerNode) -> None:
        events.append({"type": "O", "frame": index[node.row.path], "at": clock[0]})
        clock[0] += max(round(self_of(node.row)), 0)
        for child in node.children:
            visit(child)
        events.append({"type": "C", "frame": index[node.row.path], "at": clock[0]})

    for root in profile.tree():
        visit(root)
    return {
        "type": "evented",
        "name": f"{profile.meta.model} {label} (self time per layer, per iteration)",
        "unit": "nanoseconds",
        "startValue": 0,
        "endValue": clock[0],
        "events": events,
    }
