"""The per-rank reducer: one trace's EventTables in, one typed Profile out.

A pure function (no I/O, no torch): ``layerprof analyze`` runs it on each
rank's file, ops mode on the tables it built from the profiler's results
(``trace/kineto.py``), and an executor may run it in a worker process, since
only the compact Profile crosses a process boundary, never the event arrays.

What it fills (see docs/trace.md for the definitions):

* ``latency_ns``: the complete steps' durations; ``steps``: all steps and the rule that found them;
* layers: layerprof's layer spans (exact module paths) when present, else
  ``nn.Module`` spans, else ``record_function`` annotations, else one row per
  step; samples per complete step (total, self, device, backward);
* ``ops``: per layer (with layer spans) and per step, forward and backward;
* ``devices``, ``kernels``, ``kinds``, ``memcpy``, ``launches``, ``memory``,
  ``annotations``;
* ``breakdown`` (each step's time partitioned), ``communication`` (collectives,
  overlap), ``queues`` (device queues, launch diagnostics), ``memory_timeline``; ``source``: the file, rank, event count and where the layers came from;
* ``notes``: every rule or quirk the numbers depend on.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile, TraceSections, parent_path
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta, OpStat
from layerprof.pivot.sections.trace import AnnotationRow, Steps, TraceSource
from layerprof.stats import Series
from layerprof.trace.allocator import allocator_summary
from layerprof.trace.attribution import (
    BACKWARD_NODE,
    attribute,
    backward_times,
    layer_ops,
    layer_peaks,
    other_ops_notes,
)
from layerprof.trace.batch import serving_steps
from layerprof.trace.distributed.breakdown import breakdown
from layerprof.trace.distributed.comm import communication
from layerprof.trace.distributed.queue import queues
from layerprof.trace.events import ANNOTATION, LAYER, MODULE, EventTables
from layerprof.trace.generation import trace_generation
from layerprof.trace.gpu import device_use, kernel_table, kind_table, launches, memcpy_table
from layerprof.trace.links import Links, link
from layerprof.trace.memtimeline import memory_timeline
from layerprof.trace.modules import (
    TreeRow,
    module_paths,
    module_types,
    renamed,
    structural,
    tree,
)
from layerprof.trace.nesting import Nesting, nest
from layerprof.trace.ops import device_times
from layerprof.trace.replay import graph_facts
from layerprof.trace.steps import find_steps
from layerprof.trace.stepwork import step_work, work_notes
from layerprof.traceformat import LAYER_CATEGORY, STEP_SOURCE

_MODULE_SOURCE = "nn.Module"


def reduce(
    tables: EventTables,
    header: dict[str, Any] | None = None,
    *,
    rank: int = 0,
    file: str = "",
    group_by_shape: bool = False,
    whole_steps: bool = False,
) -> Profile:
    """The Profile of one trace. ``header`` holds the file's other top-level keys;
    ``whole_steps``: the writer never stops inside a step (layerprof's own traces)."""
    header = header or {}
    marker = _marker(header)
    nesting = nest(tables.host)
    links = link(tables, nesting)
    steps = find_steps(tables, nesting, whole_steps=whole_steps or marker is not None)
    windows = steps.windows(tables.extent())
    work, per_device = step_work(tables, links, steps)
    has_device = tables.has_device
    modules, module_source = _modules(tables, header, nesting, links, steps)
    annotation_rows = tree(tables, nesting, links, steps, ANNOTATION)
    attribution = attribute(tables, nesting)
    times = device_times(tables, nesting, links)
    ops = layer_ops(
        tables, nesting, times, attribution, steps, by_shape=group_by_shape, has_device=has_device
    )
    if module_source != LAYER_CATEGORY:  # no layer spans: one flat operator table
        ops = tuple(_flat(o) for o in ops)
    layers, samples = _layers(modules or annotation_rows, module_source, header, steps)
    if module_source == LAYER_CATEGORY:
        samples = _with_backward(samples, backward_times(tables, attribution, steps, list(samples)))
    del attribution, times  # two columns a span: not held through the sections below
    kernels = kernel_table(tables)
    graphs, graph_notes = graph_facts(tables)
    source = TraceSource(
        file=file,
        rank=rank,
        events=tables.events,
        has_device=has_device,
        window_ns=sum(hi - lo for lo, hi in windows),
        device_names=_device_names(header),
        module_source=module_source,
        producer=_producer(marker),
        run=_run(marker),
    )
    done = steps.complete
    serving, serving_notes = serving_steps(tables, links, steps, samples, work)
    profile = Profile(
        meta=_meta(source, tables.platform, len(done), _training(ops, annotation_rows)),
        layers=layers,
        samples=samples,
        latency_ns=Series([s.dur_ns for s in done]) if done else None,
        ops=ops,
        trace=TraceSections(
            source=source,
            steps=steps,
            devices=device_use(tables, links, windows, per_device),
            kernels=kernels,
            kinds=kind_table(tables, kernels),
            memcpy=memcpy_table(tables),
            launches=launches(tables, links) if has_device else None,
            memory=allocator_summary(tables, nesting),
            annotations=tuple(_annotation(r) for r in annotation_rows),
            breakdown=breakdown(tables, nesting, steps, per_device),
            communication=communication(tables, nesting, links, steps, header),
            queues=queues(tables, links) if has_device else None,
            memory_timeline=memory_timeline(tables, nesting, steps),
            device_work=work,
            serving=serving,
        ),
        generation=trace_generation(tables, steps, samples) if samples else None,
        graph_replay=graphs,
    )
    return profile.with_notes(
        *_notes(tables, steps, profile),
        *work_notes(work),
        *serving_notes,
        *graph_notes,
        *other_ops_notes(ops),
    )


def peak_bytes(tables: EventTables, *, on_device: bool) -> dict[str, int]:
    """Per layer path: the peak memory rise inside it (``--profile-memory`` events)."""
    return layer_peaks(tables, on_device=on_device)


def _marker(header: dict[str, Any]) -> dict[str, Any] | None:
    info = header.get("layerprof")
    return info if isinstance(info, dict) else None


def _modules(
    tables: EventTables, header: dict[str, Any], nesting: Nesting, links: Links, steps: Steps
) -> tuple[tuple[TreeRow, ...], str | None]:
    """The layer tree: layerprof's layer spans when present, else ``nn.Module`` spans."""
    if (tables.host.kind == LAYER).any():
        return tree(tables, nesting, links, steps, LAYER, module_types(header)), LAYER_CATEGORY
    rows = tree(tables, nesting, links, steps, MODULE)
    mapping = module_paths(header)  # layerprof's own traces name the real paths
    rows = renamed(rows, mapping) if mapping else structural(rows)
    return rows, _MODULE_SOURCE if rows else None


def _layers(
    rows: tuple[TreeRow, ...], module_source: str | None, header: dict[str, Any], steps: Steps
) -> tuple[tuple[LayerInfo, ...], dict[str, LayerSamples]]:
    n = len(steps.complete)
    if rows and module_source == LAYER_CATEGORY:
        infos = _layer_infos(rows, module_types(header))
        return infos, {r.path: _samples(r, n) for r in rows}
    if rows:
        infos = tuple(LayerInfo(path=r.path, type=r.type, parent=r.parent) for r in rows)
        return infos, {r.path: _samples(r, n) for r in rows}
    path = steps.source.replace(".", "_")
    durations = [s.dur_ns for s in steps.complete] or [sum(s.dur_ns for s in steps.steps)]
    return (
        (LayerInfo(path=path, type="step", parent=None),),
        {path: LayerSamples(total_ns=durations, self_ns=durations, calls=1.0)},
    )


def _layer_infos(rows: tuple[TreeRow, ...], types: dict[str, str]) -> tuple[LayerInfo, ...]:
    """The run's layer table from a layerprof trace: structural parents, like ``layer_infos``.

    ``types`` (the trace's ``module_types``, module order) adds the modules
    that were never called (``ModuleList`` containers); paths only seen in
    spans follow, parented to their nearest known ancestor path.
    """
    known = {r.path: r for r in rows}
    order = [*types, *(p for p in known if p not in types)]
    present = set(order)
    out: list[LayerInfo] = []
    for path in order:
        row = known.get(path)
        type_ = types.get(path) or (row.type if row is not None else "layer")
        out.append(LayerInfo(path=path, type=type_, parent=_nearest_ancestor(path, present)))
    return tuple(out)


def _nearest_ancestor(path: str, present: set[str]) -> str | None:
    parent = parent_path(path)
    while parent is not None and parent not in present:
        parent = parent_path(parent)
    return parent


def _samples(r: TreeRow, n_steps: int) -> LayerSamples:
    if n_steps == 0:  # no complete step: the whole trace is one sample
        return LayerSamples(
            total_ns=[r.total_ns],
            self_ns=[r.self_ns],
            calls=float(r.calls),
            device_total_ns=None if r.device_ns is None else [r.device_ns],
            device_self_ns=None if r.device_self_ns is None else [r.device_self_ns],
        )
    calls = np.asarray(r.step_calls)
    return LayerSamples(
        total_ns=r.step_total_ns,
        self_ns=r.step_self_ns,
        calls=float(calls.mean()),
        calls_vary=bool(len(set(r.step_calls)) > 1),
        device_total_ns=r.step_device_ns,
        device_self_ns=r.step_device_self_ns,
    )


def _with_backward(
    samples: dict[str, LayerSamples], backward: dict[str, tuple[Series, Series]]
) -> dict[str, LayerSamples]:
    if not backward:
        return samples
    out = dict(samples)
    for path, (total, own) in backward.items():
        s = out[path]
        out[path] = LayerSamples(
            total_ns=s.total_ns,
            self_ns=s.self_ns,
            calls=s.calls,
            calls_vary=s.calls_vary,
            device_total_ns=s.device_total_ns,
            device_self_ns=s.device_self_ns,
            backward_total_ns=total,
            backward_self_ns=own,
        )
    return out


def _flat(o: OpStat) -> OpStat:
    return replace(o, layer=None)


def _annotation(r: TreeRow) -> AnnotationRow:
    return AnnotationRow(
        path=r.path,
        name=r.name,
        parent=r.parent,
        calls=r.calls,
        total_ns=r.total_ns,
        self_ns=r.self_ns,
        device_ns=r.device_ns,
        device_self_ns=r.device_self_ns,
    )


def _training(ops: tuple[OpStat, ...], annotations: tuple[TreeRow, ...]) -> bool:
    """Whether the trace shows a training step: backward nodes or an optimizer's spans."""
    return any(o.phase == "backward" or o.name.startswith(BACKWARD_NODE) for o in ops) or any(
        a.name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")) for a in annotations
    )


def _meta(source: TraceSource, platform: str | None, steps: int, training: bool) -> Meta:
    """What the trace says about its run, and nothing it does not say: the device is
    the accelerator its events come from ("" when it has none, or an unknown one),
    the dtype only what layerprof's marker recorded, the mode the marker's, else
    ``train`` where the trace has backward nodes or optimizer steps, else unknown ("")."""
    run = source.run
    named = (source.producer or {}).get("model")
    model = named if isinstance(named, str) and named else _file_model(source.file)
    values: dict[str, Any] = {}
    for key in ("dtype", "torch", "mode", "host"):
        if isinstance(run.get(key), str):
            values[key] = run[key]
    threads = run.get("threads")
    if isinstance(threads, int) and not isinstance(threads, bool):
        values["threads"] = threads
    if isinstance(run.get("grad"), bool):
        values["grad"] = run["grad"]
    inputs = run.get("inputs")
    if isinstance(inputs, list) and all(isinstance(i, str) for i in inputs):
        values["inputs"] = tuple(inputs)
    values.setdefault("dtype", "")
    values.setdefault("mode", "train" if training else "")
    return Meta(
        model=model,
        device=platform or "",
        iters=steps,
        source="trace",
        extra={"file": source.file, "rank": source.rank},
        **values,
    )


def _file_model(file: str) -> str:
    name = Path(file).name
    return re.sub(r"(\.pt\.trace)?\.json(\.gz)?$", "", name) or name


def _producer(marker: dict[str, Any] | None) -> dict[str, Any] | None:
    """``{"version", "model"}`` of the layerprof that wrote the trace, None for others."""
    if marker is None:
        return None
    return {"version": marker.get("version"), "model": marker.get("model")}


def _run(marker: dict[str, Any] | None) -> dict[str, Any]:
    run = (marker or {}).get("run")
    return dict(run) if isinstance(run, dict) else {}


def _device_names(header: dict[str, Any]) -> tuple[str, ...]:
    props = header.get("deviceProperties")
    if not isinstance(props, list):
        return ()
    return tuple(str(p.get("name")) for p in props if isinstance(p, dict) and "name" in p)


def _no_device_ops(categories: dict[str, int]) -> Note:
    """Why the device columns are absent: no device events at all, or none with busy time."""
    if not categories:
        return Note("no-device-data", "no device data (CPU-only trace): device columns are absent")
    counts = ", ".join(f"{n} {cat}" for cat, n in sorted(categories.items()))
    return Note(
        "no-device-ops",
        f"device events ({counts}) but no kernels, memcpys or memsets: device columns are absent",
        {"categories": dict(categories)},
    )


def _notes(tables: EventTables, steps: Steps, p: Profile) -> list[Note]:
    source = p.trace.source
    assert source is not None
    notes: list[Note] = []
    if not source.has_device:
        notes.append(_no_device_ops(tables.device_categories))
    if steps.source == "trace":
        notes.append(Note("no-steps", "no steps found: the whole trace is one unit"))
    elif steps.source != STEP_SOURCE:
        notes.append(
            Note(
                "steps-fallback",
                f"no ProfilerStep spans: steps are the {steps.definition}",
                {"source": steps.source},
            )
        )
    notes.extend(steps.notes)
    for s in steps.steps:
        if s.cut_off:
            notes.append(
                Note(
                    "step-cut-off",
                    f"last step cut off: {s.name} ({s.dur_ns / 1e6:.3f} ms) is kept out of"
                    " step statistics and the step window",
                    {"step": s.name, "dur_ns": s.dur_ns},
                )
            )
    if steps.steps and not steps.complete:
        notes.append(
            Note("no-complete-step", "no complete step: idle and utilization use the whole trace")
        )
    if source.producer is not None:
        model = source.producer.get("model")
        version = source.producer.get("version") or "?"
        notes.append(
            Note(
                "written-by-layerprof",
                f"written by layerprof {version}" + (f" (model {model})" if model else ""),
                {"version": version, "model": model},
            )
        )
    notes.append(_layer_source(source.module_source))
    counted = (
        ("dropped-ts0", tables.dropped_ts0, "{} events with ts == 0 or below were dropped"
         " (the rest of the trace is on an epoch clock)"),
        ("skipped-no-ts", tables.skipped, "{} events without a usable timestamp were skipped"),
        ("bad-durations", tables.bad_durations, "{} spans had an unusable duration (not a number,"
         " negative or over 104 days): kept with duration 0"),
        ("malformed-fields", tables.malformed_fields, "{} id, device, stream or byte fields were"
         " not integers: read as unknown"),
    )  # fmt: skip
    notes += [Note(kind, text.format(n), {"count": n}) for kind, n, text in counted if n]
    launch = p.trace.launches
    if launch is not None:
        if launch.unmatched_device_ops:
            notes.append(
                Note(
                    "unlaunched-device-ops",
                    f"{launch.unmatched_device_ops} device ops have no launch call"
                    " in the trace (no launch delay or host attribution for them)",
                    {"count": launch.unmatched_device_ops},
                )
            )
        if launch.negative_delays:
            notes.append(
                Note(
                    "negative-launch-delays",
                    f"{launch.negative_delays} launch delays are negative: the op started"
                    " before its launch call returned (a graph launch's kernels and blocking"
                    " copies do; ops that start before the call began are named apart, as"
                    " clocks that disagree)",
                    {"count": launch.negative_delays},
                )
            )
    return notes


def _layer_source(module_source: str | None) -> Note:
    """Where the layer rows came from (``TraceSource.module_source``)."""
    if module_source == LAYER_CATEGORY:
        text = "layers: from layerprof's layer spans (the modules' qualified paths)"
        return Note("layer-source", text, {"source": module_source})
    if module_source == _MODULE_SOURCE:
        text = (
            "layers: from nn.Module spans, named by class and place among same-class"
            " siblings (Class[i]), not by the trace's instance counters"
        )
        return Note("layer-source", text, {"source": module_source})
    text = "no nn.Module events: profile with with_stack=True for the module tree"
    return Note("no-module-events", text)
