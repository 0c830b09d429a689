"""``layerprof.trace/1`` (layerprof 0.1.0): whole-trace sums per rank, read as per-step
numbers (the sums divided by the steps) with a note saying so."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerprof.codec.fields import Fields, read_row, saved_notes, strings
from layerprof.codec.run import run_of
from layerprof.codec.trace import read_allocator, read_device, read_launches
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile, Run, TraceSections
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta, OpStat
from layerprof.pivot.sections.trace import KernelRow, KindRow, MemcpyRow, Step, Steps, TraceSource
from layerprof.stats import Series
from layerprof.units import NS_PER_MS, ns_from_ms


def read_legacy_run(data: Any, source: str) -> Run:
    """A ``layerprof.trace/1`` document (layerprof 0.1.0): summaries per rank."""
    f = Fields(data, "trace")
    ranks = tuple(_legacy_rank(r, source) for r in f.objects("ranks", required=True))
    note = Note(
        "legacy-trace",
        f"{source}: a layerprof.trace/1 file; per-step layer and operator times"
        " are the trace's totals divided by its steps",
        {"source": source},
    )
    return run_of(f, ranks, source, notes=(note,))


def _legacy_rank(f: Fields, source: str) -> Profile:
    has_device = f.flag("has_device_data")
    steps = Steps(
        steps=tuple(
            Step(s.text("name"), 0, s.ns("ms"), s.flag("cut_off")) for s in f.objects("steps")
        ),
        source=f.text("step_source", "trace"),
        thread=None,
    )
    done = [s.dur_ns for s in steps.complete]
    n = max(len(done), 1)
    producer = f.data.get("layerprof")
    source_info = TraceSource(
        file=f.text("file", source),
        rank=f.integer("rank", 0),
        events=f.integer("events", 0),
        has_device=has_device,
        window_ns=f.ns("window_ms") if f.has("window_ms") else 0,
        device_names=tuple(strings(f, "device_names")),
        module_source=f.opt_text("module_source"),
        producer=dict(producer) if isinstance(producer, Mapping) else None,
    )
    rows = f.objects("modules") or f.objects("annotations")
    layers, samples = [], {}
    for r in rows:
        path = r.text("path")
        layers.append(
            LayerInfo(path=path, type=r.text("type", "layer"), parent=r.opt_text("parent"))
        )
        per_step = r.items("step_total_ms")
        total = (
            [ns_from_ms(v) for v in per_step]
            if len(per_step) == len(done) and per_step
            else [r.ns("total_ms") // n]
        )
        self_ = [r.ns("self_ms") // n] * len(total)
        samples[path] = LayerSamples(total_ns=total, self_ns=self_, calls=r.number("calls", 0) / n)
    ops = tuple(
        OpStat(
            name=o.text("name"),
            calls=o.number("calls") / n,
            self_ns=o.number("self_ms") * NS_PER_MS / n,
            total_ns=o.number("total_ms") * NS_PER_MS / n,
            device_ns=o.number("device_ms") * NS_PER_MS / n if o.has("device_ms") else None,
            input_shapes=o.opt_text("input_shapes"),
        )
        for o in f.objects("ops")
    )
    model = (producer or {}).get("model") if isinstance(producer, Mapping) else None
    meta = Meta(
        model=model if isinstance(model, str) and model else source_info.file,
        device="cuda" if has_device else "",
        dtype="",
        iters=len(done),
        source="trace",
        extra={"rank": source_info.rank, "file": source_info.file},
    )
    return Profile(
        meta=meta,
        layers=tuple(layers),
        samples=samples,
        latency_ns=Series(done) if done else None,
        ops=ops,
        notes=saved_notes(f),
        trace=TraceSections(
            source=source_info,
            steps=steps,
            devices=tuple(read_device(d) for d in f.objects("devices")),
            kernels=tuple(read_row(KernelRow, k) for k in f.objects("kernels")),
            kinds=tuple(read_row(KindRow, k) for k in f.objects("kernel_kinds")),
            memcpy=tuple(read_row(MemcpyRow, m) for m in f.objects("memcpy")),
            launches=read_launches(f.obj("launch")),
            memory=read_allocator(f.obj("memory")),
        ),
    )
