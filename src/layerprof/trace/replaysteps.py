"""A graph replay's serving phases read through its capture: each layer's device time
per replay step, for the per-phase layer times (``Serving.phases``).

The merged tables (``trace/capturepair.py``) hold the captures' layers, one step
around everything: a layer's device time there is the whole replay's. A replay step's
share is its own kernels': those whose launch call (in the replay) started inside the
step's host span. Each step's kernels are linked alone and the layer tree summed again,
so a layer's time in a step is the time of the replayed kernels its captured launches
made, on the device's clock (the replay's host spans hold no layer).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from layerprof.pivot.records import LayerSamples
from layerprof.trace.events import I64, MODULE, RUNTIME, EventTables
from layerprof.trace.links import Links, link
from layerprof.trace.modules import module_paths, renamed, structural, tree
from layerprof.trace.nesting import nest
from layerprof.trace.steps import find_steps

if TYPE_CHECKING:
    from layerprof.pivot.sections import Steps
    from layerprof.pivot.sections.serving import Serving


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


def step_device_samples(
    merged: EventTables, header: dict[str, Any], step_of: I64, n: int
) -> dict[str, LayerSamples]:
    """Per layer of the merged tables: its device total and self time in each of ``n``
    steps (``step_of``: each device op's step, -1 none), as samples whose host times
    are those device times too (a replay's layers have no host time of their own)."""
    nesting = nest(merged.host)
    links = link(merged, nesting)
    steps = find_steps(merged, nesting, whole_steps=True)
    mapping = module_paths(header)
    totals: dict[str, list[int]] = {}
    selfs: dict[str, list[int]] = {}
    for k in range(n):
        keep = step_of == k
        alone = Links(*(np.where(keep, a, -1) for a in (links.runtime, links.op, links.module)))
        rows = tree(merged, nesting, alone, steps, MODULE)
        rows = renamed(rows, mapping) if mapping else structural(rows)
        for r in rows:
            totals.setdefault(r.path, [0] * n)[k] = r.device_ns or 0
            selfs.setdefault(r.path, [0] * n)[k] = r.device_self_ns or 0
    return {
        p: LayerSamples(
            total_ns=totals[p],
            self_ns=selfs[p],
            calls=1.0,
            device_total_ns=totals[p],
            device_self_ns=selfs[p],
        )
        for p in totals
    }


def serving_through_capture(
    serving: Serving,
    replay: EventTables,
    steps: Steps,
    merged: EventTables,
    header: dict[str, Any],
) -> Serving:
    """The replay's serving section with each layer's phase times taken from the
    merged tables (the captured layers), on the device's clock."""
    from layerprof.pivot.sections.generation import phase_views  # as batch.serving_steps
    from layerprof.pivot.sections.serving import DEVICE_CLOCK
    from layerprof.trace.batch import step_names, step_phases, tokens_per_forward

    done = steps.complete
    phases, positions = step_phases(step_names(replay, done, steps.thread))
    samples = step_device_samples(merged, header, launch_steps(replay, done), len(done))
    views = phase_views(samples, phases, positions, tokens_per_forward(serving.steps), device=True)
    return replace(serving, phases=views, phase_clock=DEVICE_CLOCK)
