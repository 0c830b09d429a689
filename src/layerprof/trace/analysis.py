"""analyze(): trace file(s) -> TraceReport, composing the analyses."""

from __future__ import annotations

import os
from typing import Any

from layerprof.errors import TraceError
from layerprof.trace.events import ANNOTATION, LAYER, MODULE
from layerprof.trace.gpu import device_use, kernel_table, kind_table, launches, memcpy_table
from layerprof.trace.links import Links, link
from layerprof.trace.memory import memory_summary
from layerprof.trace.modules import (
    TreeRow,
    layerprof_marker,
    module_paths,
    module_types,
    renamed,
    step_index,
    tree,
)
from layerprof.trace.nesting import Nesting, nest
from layerprof.trace.ops import device_times, op_table
from layerprof.trace.ranks import cross_rank
from layerprof.trace.reader import (
    NotATraceError,
    TraceFile,
    assign_ranks,
    read_trace_file,
    trace_files,
)
from layerprof.trace.report import RankReport, TraceReport
from layerprof.trace.steps import STEP_DEFINITIONS, Steps, find_steps

LAYER_SOURCE = "layerprof_layer"
MODULE_SOURCE = "nn.Module"


def analyze(
    path: str | os.PathLike[str],
    *,
    group_by_shape: bool = False,
    max_input_size: int | None = None,
    data: bytearray | None = None,
) -> TraceReport:
    """Analyze a ``.json`` / ``.json.gz`` trace or a directory of per-rank traces.

    ``max_input_size``: the most bytes of JSON one file may hold or expand to
    (default: ``layerprof.reading.default_limit()``); ``data``: the bytes of
    the single file ``path`` when already read (a pipe can be read once).
    Raises :class:`layerprof.errors.TraceError` (one line naming the file)
    for anything that is not a readable, non-empty trace.
    """
    if data is not None:
        files = [read_trace_file(path, keep_shapes=group_by_shape, data=data)]
        return _report(str(path), files, [])
    names = trace_files(path)
    files, skipped = [], []
    for name in names:
        try:
            files.append(
                read_trace_file(name, keep_shapes=group_by_shape, max_input_size=max_input_size)
            )
        except NotATraceError as exc:
            if len(names) == 1:
                raise
            # A directory may hold other JSON (saved profiles, configs): analyze
            # the traces it has and say what was left out. A damaged trace still
            # fails: a missing rank must not pass unnoticed.
            skipped.append(str(exc))
    if not files:
        raise TraceError(f"{path}: no readable trace among {len(names)} files ({skipped[0]})")
    return _report(str(path), files, skipped, group_by_shape=group_by_shape)


def _report(
    path: str, files: list[TraceFile], skipped: list[str], *, group_by_shape: bool = False
) -> TraceReport:
    ranks = assign_ranks(files)
    reports = [
        analyze_file(f, rank, group_by_shape=group_by_shape, extra_notes=ranks.notes)
        for f, rank in zip(files, ranks.ranks, strict=True)
    ]
    reports.sort(key=lambda r: r.rank)
    cross = None
    if len(reports) > 1:
        cross = cross_rank(
            [r.rank for r in reports], [r.steps for r in reports], [r.kinds for r in reports]
        )
    return TraceReport(
        path=path,
        ranks=tuple(reports),
        rank_source=ranks.source,
        cross=cross,
        skipped=tuple(skipped),
    )


def analyze_file(
    trace: TraceFile,
    rank: int,
    *,
    group_by_shape: bool = False,
    extra_notes: tuple[str, ...] = (),
) -> RankReport:
    tables = trace.tables
    nesting = nest(tables.host)
    links = link(tables, nesting)
    marker = layerprof_marker(trace.header)
    steps = find_steps(tables, nesting, whole_steps=marker is not None)
    extent = tables.extent()
    windows = steps.windows(extent)
    kernels = kernel_table(tables)
    has_device = tables.has_device
    launch = launches(tables, links) if has_device else None
    modules, module_source = _modules(trace, nesting, links, steps)
    times = device_times(tables, nesting, links)
    in_step = (step_index(steps, tables.host.start) >= 0) if steps.complete else None
    report = RankReport(
        rank=rank,
        file=str(trace.path),
        events=tables.events,
        steps=steps,
        devices=device_use(tables, links, windows),
        ops=op_table(tables, nesting, times, by_shape=group_by_shape),
        kernels=kernels,
        kinds=kind_table(tables, kernels),
        memcpy=memcpy_table(tables),
        launches=launch,
        modules=modules,
        annotations=tree(tables, nesting, links, steps, ANNOTATION),
        memory=memory_summary(tables, nesting),
        window_ns=sum(hi - lo for lo, hi in windows),
        has_device=has_device,
        device_names=_device_names(trace),
        module_source=module_source,
        step_ops=op_table(tables, nesting, times, by_shape=group_by_shape, select=in_step),
        producer=_producer(marker),
        module_types=module_types(trace.header) if module_source == LAYER_SOURCE else {},
        run=_run(marker),
        device_kind=tables.platform,
    )
    notes = (*extra_notes, *_notes(trace, steps, report))
    return RankReport(**{**report.__dict__, "notes": notes})


def _modules(
    trace: TraceFile, nesting: Nesting, links: Links, steps: Steps
) -> tuple[tuple[TreeRow, ...], str | None]:
    """The layer tree: layerprof's layer spans when present, else ``nn.Module`` spans."""
    tables = trace.tables
    if (tables.host.kind == LAYER).any():
        types = module_types(trace.header)
        return tree(tables, nesting, links, steps, LAYER, types), LAYER_SOURCE
    rows = renamed(tree(tables, nesting, links, steps, MODULE), module_paths(trace.header))
    return rows, MODULE_SOURCE if rows else None


def _producer(marker: dict[str, Any] | None) -> dict[str, Any] | None:
    """``{"version", "model"}`` of the layerprof that wrote the trace, None for others."""
    if marker is None:
        return None
    return {"version": marker.get("version"), "model": marker.get("model")}


def _run(marker: dict[str, Any] | None) -> dict[str, Any]:
    run = (marker or {}).get("run")
    return dict(run) if isinstance(run, dict) else {}


def _device_names(trace: TraceFile) -> tuple[str, ...]:
    props = trace.header.get("deviceProperties")
    if not isinstance(props, list):
        return ()
    return tuple(str(p.get("name")) for p in props if isinstance(p, dict) and "name" in p)


def _no_device_ops(categories: dict[str, int]) -> str:
    """Why the device columns are absent: no device events at all, or none with busy time."""
    if not categories:
        return "no device data (CPU-only trace): device columns are absent"
    counts = ", ".join(f"{n} {cat}" for cat, n in sorted(categories.items()))
    return f"device events ({counts}) but no kernels, memcpys or memsets: device columns are absent"


def _notes(trace: TraceFile, steps: Steps, report: RankReport) -> tuple[str, ...]:
    tables = trace.tables
    notes: list[str] = []
    if not report.has_device:
        notes.append(_no_device_ops(tables.device_categories))
    if steps.source == "trace":
        notes.append("no steps found: the whole trace is one unit")
    elif steps.source != "ProfilerStep":
        notes.append(f"no ProfilerStep spans: steps are the {STEP_DEFINITIONS[steps.source]}")
    notes.extend(steps.notes)
    for s in steps.steps:
        if s.cut_off:
            notes.append(
                f"last step cut off: {s.name} ({s.dur_ns / 1e6:.3f} ms) is kept out of"
                " step statistics and the step window"
            )
    if steps.steps and not steps.complete:
        notes.append("no complete step: idle and utilization use the whole trace")
    if report.producer is not None:
        model = report.producer.get("model")
        notes.append(
            f"written by layerprof {report.producer.get('version') or '?'}"
            + (f" (model {model})" if model else "")
        )
    if report.module_source == LAYER_SOURCE:
        notes.append("layers: from layerprof's layer spans (the modules' qualified paths)")
    elif report.module_source == MODULE_SOURCE:
        notes.append("layers: from nn.Module spans (paths of class_instance names)")
    else:
        notes.append("no nn.Module events: profile with with_stack=True for the module tree")
    if tables.dropped_ts0:
        notes.append(
            f"{tables.dropped_ts0} events with ts == 0 or below were dropped"
            " (the rest of the trace is on an epoch clock)"
        )
    if tables.skipped:
        notes.append(f"{tables.skipped} events without a usable timestamp were skipped")
    if tables.bad_durations:
        notes.append(
            f"{tables.bad_durations} spans had an unusable duration (not a number, negative"
            " or over 104 days): kept with duration 0"
        )
    if tables.malformed_fields:
        notes.append(
            f"{tables.malformed_fields} id, device, stream or byte fields were not integers:"
            " read as unknown"
        )
    if report.launches is not None:
        if report.launches.unmatched_device_ops:
            notes.append(
                f"{report.launches.unmatched_device_ops} device ops have no launch call"
                " in the trace (no launch delay or host attribution for them)"
            )
        if report.launches.negative_delays:
            notes.append(
                f"{report.launches.negative_delays} launch delays are negative"
                " (CPU and device clocks disagree)"
            )
    return tuple(notes)
