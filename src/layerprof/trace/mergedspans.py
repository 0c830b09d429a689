"""Several traces' host spans as one table, for the one reducer to read them as one
trace: a graph capture's spans with its replay's (``trace/capturepair.py``).

Names, shapes and threads are renumbered, ids (correlation, External id) offset so
none collide, and each trace's times moved to start after the previous one ends;
then the edits the merge needs: compiled pieces as module spans, the replay's
annotations left out, and one step around everything.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from layerprof.trace.events import ANNOTATION, MODULE, MODULE_PREFIX, EventTables, HostSpans
from layerprof.trace.steps import STEP_NAME
from layerprof.traceformat import STEP_PREFIX

#: the compiled pieces of a capture (vLLM, torch.compile): inductor's call spans
COMPILED_PIECE = "## Call CompiledFxGraph"
_COLUMNS = ("kind", "thread", "start", "dur", "name", "ref", "shape", "seq")


def pieces_as_modules(
    host: HostSpans, names: tuple[str, ...], name_ids: dict[str, int], extra: list[str]
) -> HostSpans:
    """Each ``## Call CompiledFxGraph {hash}`` span as a module span of its own,
    ``CompiledFxGraph_{hash[:8]}``: the layer tree shows the compiled pieces (the
    layers inside one are not in the trace); ``extra`` gets the new names."""
    pieces = [i for i, n in enumerate(names) if n.startswith(COMPILED_PIECE)]
    rows = np.flatnonzero((host.kind == ANNOTATION) & np.isin(host.name, pieces))
    if not len(rows):
        return host
    name = host.name.copy()
    kind = host.kind.copy()
    for r in rows.tolist():
        label = names[int(name[r])][len(COMPILED_PIECE) :].strip(" #")[:8] or "piece"
        text = f"{MODULE_PREFIX}CompiledFxGraph_{label}_0"
        i = name_ids.get(text)
        if i is None:
            i = name_ids[text] = len(names) + len(extra)
            extra.append(text)
        name[r] = i
        kind[r] = MODULE
    return replace(host, kind=kind, name=name)


def quiet_tail(host: HostSpans, count: int) -> HostSpans:
    """The host spans less the annotations of the last ``count`` (the replay's): its
    steps are not the merge's, and what the reducer derives from them (a serving
    step's phases per layer, ~90 ms at 500 layers) is the replay's own reduce's."""
    keep = np.ones(len(host), dtype=bool)
    keep[len(host) - count :] = host.kind[len(host) - count :] != ANNOTATION
    if keep.all():
        return host
    return HostSpans(*(getattr(host, c)[keep] for c in _COLUMNS))


def one_step(
    host: HostSpans, names: tuple[str, ...], name_ids: dict[str, int], extra: list[str]
) -> HostSpans:
    """The host spans as one step: the capture's own ``ProfilerStep#N`` spans left out,
    one around everything added on the modules' thread. The capture's steps are not
    the replay's, so each layer's numbers are the whole replay's (summed over its
    launches), never a median over capture windows of which one was replayed."""
    step_ids = [i for i, n in enumerate(names) if STEP_NAME.match(n)]
    keep = ~((host.kind == ANNOTATION) & np.isin(host.name, step_ids))
    modules = np.flatnonzero(host.kind == MODULE)
    thread = int(host.thread[modules[0]]) if len(modules) else int(host.thread[0])
    text = f"{STEP_PREFIX}0"
    name = name_ids.get(text)
    if name is None:
        name = name_ids[text] = len(names) + len(extra)
        extra.append(text)
    start = int(host.start.min())
    step = (ANNOTATION, thread, start, int(host.end.max()) - start, name, -1, -1, -1)
    return HostSpans(
        *(
            np.concatenate([np.asarray([v], dtype=getattr(host, c).dtype), getattr(host, c)[keep]])
            for c, v in zip(_COLUMNS, step, strict=True)
        )
    )


@dataclass(frozen=True)
class Stacked:
    """Several traces' host spans as one table, each trace after the one before."""

    host: HostSpans
    names: tuple[str, ...]
    shapes: tuple[str, ...]
    threads: tuple[tuple[str, str], ...]
    offsets: list[int]  # what each trace's ids (correlation, External id) were moved by
    shifts: list[int]  # what each trace's times (ns) were moved by
    name_maps: list[np.ndarray]  # each trace's name ids -> the merged ones


#: the gap left between one trace's spans and the next one's
_GAP_NS = 1_000_000


def stacked(traces: list[EventTables]) -> Stacked:
    """The traces' host spans as one table: names, shapes and threads renumbered, ids
    offset so none collide, and each trace's times moved to start after the previous
    one ends (a capture and its replay run on one thread, at times of their own)."""
    names: dict[str, int] = {}
    shapes: dict[str, int] = {}
    threads: dict[tuple[str, str], int] = {}
    parts: list[HostSpans] = []
    offsets: list[int] = []
    shifts: list[int] = []
    maps: list[np.ndarray] = []
    next_id = 0
    end = 0
    for t in traces:
        h = t.host
        name_map = np.asarray([names.setdefault(n, len(names)) for n in t.names], dtype=np.int64)
        shape_map = np.asarray(
            [shapes.setdefault(x, len(shapes)) for x in t.shapes], dtype=np.int64
        )
        thread_map = np.asarray(
            [threads.setdefault(x, len(threads)) for x in t.threads], dtype=np.int64
        )
        lo, hi = t.extent()
        shift = end - lo
        end = hi + shift + _GAP_NS
        offsets.append(next_id)
        shifts.append(shift)
        maps.append(name_map)
        parts.append(
            replace(
                h,
                thread=thread_map[h.thread] if len(thread_map) else h.thread,
                start=h.start + shift,
                name=name_map[h.name] if len(name_map) else h.name,
                ref=np.where(h.ref >= 0, h.ref + next_id, -1),
                shape=np.where(h.shape >= 0, shape_map[np.maximum(h.shape, 0)], -1)
                if len(shape_map)
                else h.shape,
                flops=None,
                hierarchy=None,
            )
        )
        top = max(int(h.ref.max(initial=0)), int(t.device.corr.max(initial=0)),
                  int(t.device.ext.max(initial=0)))  # fmt: skip
        next_id += top + 1
    host = HostSpans(*(np.concatenate([getattr(p, f) for p in parts]) for f in _COLUMNS))
    return Stacked(host, tuple(names), tuple(shapes), tuple(threads), offsets, shifts, maps)


__all__ = ["COMPILED_PIECE", "Stacked", "one_step", "pieces_as_modules", "quiet_tail", "stacked"]
