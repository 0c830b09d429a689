"""A graph replay's serving phases read through its capture: each layer's device time
per replay step, for the per-phase layer times (``Serving.phases``).

The merged tables (``trace/capturepair.py``) hold the captures' layers, one step
around everything: a layer's device time there is the whole replay's. A replay step's
share is its own kernels': those whose launch call (in the replay) started inside the
step's host span. Each step's kernels are linked alone and the layer tree summed again,
so a layer's time in a step is the time of the replayed kernels its captured launches
made, on the device's clock (the replay's host spans hold no layer). A step's FLOPs
are counted the same way: each replayed kernel's captured op, a matrix product with
its input shapes (``record_shapes`` at capture), once per step. Loaded only for a
serving replay read through its capture (``capturepair._serving``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from layerprof.pivot.notes import Note
from layerprof.pivot.records import LayerSamples
from layerprof.pivot.sections.generation import phase_views
from layerprof.pivot.sections.serving import DEVICE_CLOCK, Serving
from layerprof.trace.batch import (
    flop_notes,
    matmul_flops,
    step_names,
    step_phases,
    tokens_per_forward,
)
from layerprof.trace.events import I64, MATMUL_OPS, MODULE, OP, RUNTIME, EventTables
from layerprof.trace.links import Links, link
from layerprof.trace.modules import module_paths, renamed, structural, tree
from layerprof.trace.nesting import Nesting, nest
from layerprof.trace.steps import find_steps

if TYPE_CHECKING:
    from layerprof.pivot.sections.trace import Steps

#: ops named in the FLOP note as holding the uncounted time
_NAMED = 3


def launch_steps(tables: EventTables, done: tuple[Any, ...]) -> I64:
    """Per device op of ``tables``: the index (in ``done``) of the step whose host span
    holds its launch call's start; -1 when its launch is not in the trace or in no step."""
    host, dev = tables.host, tables.device
    out = np.full(len(dev), -1, dtype=np.int64)
    rt = np.flatnonzero((host.kind == RUNTIME) & (host.ref >= 0))
    if not len(dev) or not len(rt) or not done:
        return out
    rt = rt[np.argsort(host.ref[rt], kind="stable")]
    keys = host.ref[rt]
    pos = np.clip(np.searchsorted(keys, dev.corr), 0, len(keys) - 1)
    hit = (keys[pos] == dev.corr) & (dev.corr >= 0)
    start = np.where(hit, host.start[rt[pos]], -1)
    for k, s in enumerate(done):
        out[hit & (start >= s.start_ns) & (start < s.end_ns)] = k
    return out


class Linked(NamedTuple):
    """The merged tables with their nesting and links (computed once)."""

    tables: EventTables
    header: dict[str, Any]
    nesting: Nesting
    links: Links


def linked(merged: EventTables, header: dict[str, Any]) -> Linked:
    nesting = nest(merged.host)
    return Linked(merged, header, nesting, link(merged, nesting))


def step_device_samples(m: Linked, step_of: I64, n: int) -> dict[str, LayerSamples]:
    """Per layer of the merged tables: its device total and self time in each of ``n``
    steps (``step_of``: each device op's step, -1 none), as samples whose host times
    are those device times too (a replay's layers have no host time of their own)."""
    merged, links = m.tables, m.links
    steps = find_steps(merged, m.nesting, whole_steps=True)
    mapping = module_paths(m.header)
    place: dict[str, int] = {}
    cells: list[tuple[int, int, int, int]] = []  # (layer, step, total, self)
    for k in range(n):
        keep = step_of == k
        alone = Links(*(np.where(keep, a, -1) for a in (links.runtime, links.op, links.module)))
        rows = tree(merged, m.nesting, alone, steps, MODULE)
        rows = renamed(rows, mapping) if mapping else structural(rows)
        for r in rows:
            i = place.setdefault(r.path, len(place))
            cells.append((i, k, r.device_ns or 0, r.device_self_ns or 0))
    # one read-only int64 matrix per clock: each layer's row is its samples, no copy
    total = np.zeros((len(place), n), dtype=np.int64)
    own = np.zeros((len(place), n), dtype=np.int64)
    if cells:
        rows_, cols, t, s = (np.asarray(c, dtype=np.int64) for c in zip(*cells, strict=True))
        total[rows_, cols], own[rows_, cols] = t, s
    total.flags.writeable = own.flags.writeable = False
    return {
        p: LayerSamples(
            total_ns=total[j],
            self_ns=own[j],
            calls=1.0,
            device_total_ns=total[j],
            device_self_ns=own[j],
        )
        for p, j in place.items()
    }


class StepFlops(NamedTuple):
    flops: int  # of the matrix products with shapes whose kernels ran in the step
    flop_ns: int  # those kernels' device time
    device_ns: int  # all the step's device ops' time


def step_flops(m: Linked, step_of: I64, n: int) -> tuple[list[StepFlops], list[str]]:
    """Per step, the FLOPs of the matrix products (with input shapes: the captured ops'
    for the replayed kernels) whose kernels it ran, each product once per step; and the
    ops (or kernels, where no op launched them) holding most uncounted device time."""
    tables, op = m.tables, m.links.op
    host, dev = tables.host, tables.device
    safe = np.clip(op, 0, None)
    ids = [i for i, name in enumerate(tables.names) if name in MATMUL_OPS]
    shaped = (op >= 0) & (host.kind[safe] == OP) & np.isin(host.name[safe], ids)
    shaped &= host.shape[safe] >= 0
    per_op = {
        o: matmul_flops(tables.names[int(host.name[o])], tables.shapes[int(host.shape[o])])
        for o in np.unique(op[shaped]).tolist()
    }
    counts = np.asarray([per_op.get(o, 0) if ok else 0 for o, ok in
                         zip(op.tolist(), shaped.tolist(), strict=True)], dtype=np.int64)  # fmt: skip
    counted = counts > 0
    out = []
    for k in range(n):
        mine = step_of == k
        sel = mine & counted
        flops = sum(per_op[o] for o in np.unique(op[sel]).tolist())
        out.append(StepFlops(flops, int(dev.dur[sel].sum()), int(dev.dur[mine].sum())))
    return out, _uncounted(tables, op, (step_of >= 0) & ~counted)


def _uncounted(tables: EventTables, op: I64, rest: np.ndarray) -> list[str]:
    """The ops (a kernel's name where no op launched it) holding most of ``rest``'s time."""
    host, dev = tables.host, tables.device
    time: Counter[str] = Counter()
    for k in np.flatnonzero(rest).tolist():
        o = int(op[k])
        name = tables.names[int(host.name[o])] if o >= 0 else tables.names[int(dev.name[k])]
        time[name if o >= 0 else f"kernel {name[:40]}"] += int(dev.dur[k])
    total = sum(time.values())
    return [
        f"{name} {t / total:.0%}"
        for name, t in time.most_common(_NAMED)
        if total and t / total >= 0.05
    ]


def serving_through_capture(
    serving: Serving,
    replay: EventTables,
    steps: Steps,
    merged: EventTables,
    header: dict[str, Any],
    merged_samples: Mapping[str, LayerSamples],
) -> tuple[Serving, list[Note]]:
    """The replay's serving section with each layer's phase times taken from the
    merged tables (the captured layers), on the device's clock, and each step's FLOPs
    from the captured ops' shapes; with its FLOP note."""

    done = steps.complete
    phases, positions = step_phases(step_names(replay, done, steps.thread))
    step_of = launch_steps(replay, done)
    m = linked(merged, header)
    # one step that launched every device op: the merge's own samples are that step's
    whole = len(done) == 1 and bool((step_of == 0).all())
    samples = merged_samples if whole else step_device_samples(m, step_of, len(done))
    views = phase_views(samples, phases, positions, tokens_per_forward(serving.steps), device=True)
    counted, uncounted = step_flops(m, step_of, len(done))
    flops = [f for f, p in zip(counted, phases, strict=True) if p is not None]
    rows = tuple(
        replace(
            row,
            flops=f.flops or None,
            flop_device_ns=f.flop_ns,
            flop_coverage=f.flop_ns / f.device_ns if f.flops and f.device_ns else None,
        )
        for row, f in zip(serving.steps, flops, strict=True)
    )
    section = replace(serving, steps=rows, phases=views, phase_clock=DEVICE_CLOCK)
    return section, flop_notes(section, uncounted)
