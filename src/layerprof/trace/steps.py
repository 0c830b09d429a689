"""Steps: the units that step (inference) time is measured over.

In order of preference: ``ProfilerStep#N`` spans (``prof.step()``), else the
outermost ``record_function`` spans on the main thread, else the outermost
layerprof layer spans there (one per forward), else the outermost
``nn.Module:`` spans there, else the whole trace as one unit. The last
ProfilerStep is *cut off* when it ends after the profiler window closed, or
is under a quarter of the shortest other step (the profiler stopped inside it); it
is listed but kept out of the statistics and the step window. The second rule
is not applied to traces layerprof wrote: its capture stops the profiler only
after a whole iteration, so a short last step there is a real, fast one.
"""

from __future__ import annotations

import re

import numpy as np

from layerprof.sections import Step, Steps
from layerprof.trace.events import ANNOTATION, LAYER, MODULE, OP, EventTables
from layerprof.trace.nesting import Nesting

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_CUT_OFF_SLACK_NS = 1_000


def find_steps(tables: EventTables, nesting: Nesting, *, whole_steps: bool = False) -> Steps:
    """The steps; ``whole_steps``: the writer never stops inside a step (layerprof)."""
    host = tables.host
    names = tables.names
    step_ids = {i for i, name in enumerate(names) if STEP_NAME.match(name)}
    ann = np.flatnonzero(host.kind == ANNOTATION)
    is_step = np.isin(host.name[ann], np.fromiter(step_ids, dtype=np.int64, count=len(step_ids)))
    steps_idx = ann[is_step]
    if len(steps_idx):
        thread = _most_common(host.thread[steps_idx])
        chosen = steps_idx[host.thread[steps_idx] == thread]
        found = _cut_last(_as_steps(tables, chosen), tables, whole_steps)
        return Steps(found, "ProfilerStep", thread)
    main = _main_thread(tables)
    if main is None:
        return Steps((Step("trace", *_span(tables.extent())),), "trace", None)
    on_thread = host.thread == main
    outer_ann = np.flatnonzero(
        on_thread & (host.kind == ANNOTATION) & (nesting.parent_annotation == -1)
    )
    if len(outer_ann):
        return Steps(_as_steps(tables, outer_ann), "record_function", main)
    outer_layer = np.flatnonzero(on_thread & (host.kind == LAYER) & (nesting.parent_layer == -1))
    if len(outer_layer):
        labels = tables.layer_labels
        layer_steps = tuple(
            Step(labels.get(s.name) or s.name or "(root)", s.start_ns, s.dur_ns)
            for s in _as_steps(tables, outer_layer)
        )
        return Steps(layer_steps, "layerprof_layer", main)
    outer_mod = np.flatnonzero(on_thread & (host.kind == MODULE) & (nesting.parent_module == -1))
    if len(outer_mod):
        return Steps(_as_steps(tables, outer_mod), "nn.Module", main)
    return Steps((Step("trace", *_span(tables.extent())),), "trace", main)


def _span(extent: tuple[int, int]) -> tuple[int, int]:
    return extent[0], extent[1] - extent[0]


def _as_steps(tables: EventTables, idx: np.ndarray) -> tuple[Step, ...]:
    host = tables.host
    idx = idx[np.argsort(host.start[idx], kind="stable")]
    return tuple(
        Step(tables.names[int(host.name[i])], int(host.start[i]), int(host.dur[i]))
        for i in idx.tolist()
    )


def _cut_last(
    steps: tuple[Step, ...], tables: EventTables, whole_steps: bool = False
) -> tuple[Step, ...]:
    last = steps[-1]
    beyond_window = (
        tables.window_end_ns is not None and last.end_ns > tables.window_end_ns + _CUT_OFF_SLACK_NS
    )
    others = [s.dur_ns for s in steps[:-1]]
    # Far shorter than every other step: the profiler stopped inside it.
    too_short = not whole_steps and bool(others) and last.dur_ns < 0.25 * min(others)
    if beyond_window or too_short:
        return (*steps[:-1], Step(last.name, last.start_ns, last.dur_ns, cut_off=True))
    return steps


def _most_common(values: np.ndarray) -> int:
    uniq, counts = np.unique(values, return_counts=True)
    return int(uniq[int(np.argmax(counts))])


def _main_thread(tables: EventTables) -> int | None:
    """The thread with the most top-level CPU time (ops, annotations, modules)."""
    host = tables.host
    mask = np.isin(host.kind, (OP, ANNOTATION, MODULE, LAYER))
    if not mask.any():
        return None
    busy = np.bincount(host.thread[mask], weights=host.dur[mask].astype(np.float64))
    return int(np.argmax(busy))
