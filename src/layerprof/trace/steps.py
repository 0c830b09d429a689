"""Steps: the units that step (inference) time is measured over.

The first rule that finds steps wins (``Steps.source`` names it):

1. ``ProfilerStep#N`` spans (``prof.step()``) on the thread with most of them;
2. else ``ProfilerStep#N`` spans on a device timeline (``gpu_user_annotation``),
   when those are the only step markers the trace has;
3. else the outermost ``record_function`` spans on the main thread (the
   thread with the most top-level CPU time), leaving out the annotations
   frameworks write on their own (``Optimizer.step#SGD.step``, ``## forward
   ##``, ``enumerate(DataLoader)...``, ``DistributedDataParallel.forward``,
   collectives such as ``nccl:all_reduce``) and async ranges, and only when
   they cover at least half of the main thread's busy time (otherwise a
   training loop's 0.2 ms ``Optimizer.zero_grad`` spans would pass for
   150 ms iterations);
4. else the outermost layerprof layer spans there (one per forward);
5. else the outermost ``nn.Module:`` spans there (forward passes);
6. else the whole trace is one unit.

``Steps.notes`` says what was passed over and how much of the main thread
the steps cover. The last ProfilerStep is *cut off* when it ends after the
profiler window closed, or is under a quarter of the shortest other step
(the profiler stopped inside it); it is listed but kept out of the
statistics and the step window. The second rule is not applied to traces
layerprof wrote: its capture stops the profiler only after a whole
iteration, so a short last step there is a real, fast one.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from layerprof.pivot.notes import Note
from layerprof.pivot.sections.trace import Step, Steps
from layerprof.trace.columns import unique
from layerprof.trace.events import ANNOTATION, I64, LAYER, MODULE, OP, EventTables, HostSpans
from layerprof.trace.gpu import union
from layerprof.trace.nesting import Nesting
from layerprof.traceformat import GPU_STEP_SOURCE, LAYER_CATEGORY, STEP_PREFIX, STEP_SOURCE

STEP_NAME = re.compile("^" + re.escape(STEP_PREFIX) + r"(\d+)$")
_CUT_OFF_SLACK_NS = 1_000
_MIN_COVERAGE = 0.5
#: Annotations torch and common frameworks write by themselves: never steps.
FRAMEWORK_ANNOTATION = re.compile(
    r"^(?:Optimizer\.|##.*##$|enumerate\(DataLoader\)|(?:Distributed)?DataParallel\."
    r"|FullyShardedDataParallel\.|FSDP::|(?:nccl|rccl|gloo|hccl|mpi|ucc|xccl|c10d)[:_]"
    r"|record_param_comms|Torch-Compiled Region|CompiledFunction|\[pytorch\|profiler)"
)


def find_steps(tables: EventTables, nesting: Nesting, *, whole_steps: bool = False) -> Steps:
    """The steps; ``whole_steps``: the writer never stops inside a step (layerprof)."""
    host = tables.host
    step_ids = [i for i, name in enumerate(tables.names) if STEP_NAME.match(name)]
    ann = np.flatnonzero(host.kind == ANNOTATION)
    steps_idx = ann[np.isin(host.name[ann], step_ids)]
    if len(steps_idx):
        thread = _most_common(host.thread[steps_idx])
        chosen = steps_idx[host.thread[steps_idx] == thread]
        found = _cut_last(_as_steps(tables, chosen), tables, whole_steps)
        return Steps(found, STEP_SOURCE, thread)
    on_device = _device_steps(tables, step_ids, whole_steps)
    if on_device:
        return Steps(on_device, GPU_STEP_SOURCE, None)
    main = _main_thread(tables)
    if main is None:
        return Steps((Step("trace", *_span(tables.extent())),), "trace", None)
    return _fallback(tables, nesting, main)


def _fallback(tables: EventTables, nesting: Nesting, main: int) -> Steps:
    """Rules 3-6 on the main thread (see the module doc)."""
    host = tables.host
    notes: list[Note] = []
    on_thread = (host.thread == main) & ~nesting.detached
    busy = _covered(host, np.flatnonzero(on_thread & np.isin(host.kind, _TOP_KINDS)))
    annotations = np.flatnonzero(on_thread & (host.kind == ANNOTATION))
    own = ~_framework(tables, host.name[annotations])
    outer = _outermost(annotations[own], nesting.parent_annotation)
    if len(outer):
        share = _covered(host, outer) / busy if busy else 0.0
        if share >= _MIN_COVERAGE:
            return Steps(_as_steps(tables, outer), "record_function", main, (_cover(share),))
        names = _names(tables, outer)
        notes.append(
            Note(
                "annotations-not-steps",
                f"record_function spans ({names}) cover only {share:.0%} of the"
                " main thread's busy time: not used as steps",
                {"names": names, "share": share},
            )
        )
    if (~own).any():
        names = _names(tables, annotations[~own])
        notes.append(
            Note(
                "framework-annotations",
                f"framework annotations ({names}) are not steps",
                {"names": names},
            )
        )
    outer_layer = np.flatnonzero(on_thread & (host.kind == LAYER) & (nesting.parent_layer == -1))
    if len(outer_layer):
        labels = tables.layer_labels
        layer_steps = tuple(
            Step(labels.get(s.name) or s.name or "(root)", s.start_ns, s.dur_ns)
            for s in _as_steps(tables, outer_layer)
        )
        share = _covered(host, outer_layer) / busy if busy else 0.0
        return Steps(layer_steps, LAYER_CATEGORY, main, (*notes, _cover(share)))
    outer_mod = np.flatnonzero(on_thread & (host.kind == MODULE) & (nesting.parent_module == -1))
    if len(outer_mod):
        share = _covered(host, outer_mod) / busy if busy else 0.0
        return Steps(_as_steps(tables, outer_mod), "nn.Module", main, (*notes, _cover(share)))
    return Steps((Step("trace", *_span(tables.extent())),), "trace", main, tuple(notes))


_TOP_KINDS = (OP, ANNOTATION, MODULE, LAYER)


def _framework(tables: EventTables, name_ids: I64) -> npt.NDArray[np.bool_]:
    names = tables.names
    verdict = {int(i): bool(FRAMEWORK_ANNOTATION.match(names[i])) for i in unique(name_ids)}
    return np.asarray([verdict[int(i)] for i in name_ids], dtype=bool)


def _outermost(members: I64, parent: I64) -> I64:
    """The members no other member encloses (walking up the annotation parents)."""
    is_member = np.zeros(len(parent), dtype=bool)
    is_member[members] = True
    inside = np.zeros(len(members), dtype=bool)
    up = parent[members]
    while (up >= 0).any():
        inside |= (up >= 0) & is_member[np.clip(up, 0, None)]
        up = np.where(up >= 0, parent[np.clip(up, 0, None)], -1)
    return members[~inside]


def _covered(host: HostSpans, idx: I64) -> int:
    """Length of the union of the spans ``idx``."""
    seg_s, seg_e, _ = union(host.start[idx], host.end[idx])
    return int((seg_e - seg_s).sum())


def _cover(share: float) -> Note:
    text = f"the steps cover {share:.0%} of the main thread's busy time"
    return Note("step-coverage", text, {"share": share})


def _names(tables: EventTables, idx: I64, most: int = 3) -> str:
    uniq = list(dict.fromkeys(tables.names[int(i)] for i in tables.host.name[idx]))
    shown = ", ".join(uniq[:most])
    return shown + (f" and {len(uniq) - most} more" if len(uniq) > most else "")


def _device_steps(tables: EventTables, step_ids: list[int], whole_steps: bool) -> tuple[Step, ...]:
    """ProfilerStep#N spans on the device timeline with most of them."""
    marks = tables.device_annotations
    if marks is None or len(marks) == 0 or not step_ids:
        return ()
    idx = np.flatnonzero(np.isin(marks.name, step_ids))
    if len(idx) == 0:
        return ()
    lane = marks.device[idx] * (1 << 32) + marks.stream[idx]
    idx = idx[lane == _most_common(lane)]
    idx = idx[np.argsort(marks.start[idx], kind="stable")]
    steps = tuple(
        Step(tables.names[int(marks.name[i])], int(marks.start[i]), int(marks.dur[i]))
        for i in idx.tolist()
    )
    return _cut_last(steps, tables, whole_steps)


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
