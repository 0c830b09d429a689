"""The trace sections of a profile body: source, steps, devices, kernels, kernel
kinds, memcpy, launches, memory, annotations (registered in ``codec/sections.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerprof.codec.fields import (
    Fields,
    asdict_ms,
    first_rows,
    read_row,
    read_summary,
    required,
    strings,
    summary_us,
)
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.trace import (
    AllocatorSummary,
    AllocRow,
    AnnotationRow,
    DeviceMemory,
    DeviceUse,
    KernelRow,
    KindRow,
    Launches,
    MemcpyRow,
    RuntimeRow,
    Step,
    Steps,
    TraceSource,
)
from layerprof.units import NS_PER_MS, NS_PER_US


def _source(s: TraceSource) -> dict[str, Any]:
    return {
        "file": s.file,
        "rank": s.rank,
        "events": s.events,
        "has_device_data": s.has_device,
        "device_names": list(s.device_names),
        "module_source": s.module_source,
        "layerprof": s.producer,
        "run": s.run,
        "window_ms": s.window_ns / NS_PER_MS,
    }


def _steps(s: Steps) -> dict[str, Any]:
    return {
        "source": s.source,
        "definition": s.definition,
        "thread": s.thread,
        "steps": [
            {"name": x.name, "start_ms": x.start_ns / NS_PER_MS, "ms": x.dur_ns / NS_PER_MS,
             "cut_off": x.cut_off}
            for x in s.steps
        ],
    }  # fmt: skip


def _device(d: DeviceUse) -> dict[str, Any]:
    return {
        "device": d.device,
        "busy_ms": d.busy_ns / NS_PER_MS,
        "busy_in_window_ms": d.busy_in_window_ns / NS_PER_MS,
        "idle_ms": d.idle_ns / NS_PER_MS,
        "window_ms": d.window_ns / NS_PER_MS,
        "utilization": d.utilization,
        "kernel_ms": d.kernel_ns / NS_PER_MS,
        "memcpy_ms": d.memcpy_ns / NS_PER_MS,
        "memset_ms": d.memset_ns / NS_PER_MS,
        "streams": d.streams,
        "idle_breakdown_ms": {
            "host_wait": d.host_wait_ns / NS_PER_MS,
            "short_gap": d.short_gap_ns / NS_PER_MS,
            "other": d.other_idle_ns / NS_PER_MS,
        },
    }


def read_device(f: Fields) -> DeviceUse:
    idle = required(f, "idle_breakdown_ms")
    return DeviceUse(
        device=f.integer("device"),
        busy_ns=f.ns("busy_ms"),
        busy_in_window_ns=f.ns("busy_in_window_ms"),
        window_ns=f.ns("window_ms"),
        idle_ns=f.ns("idle_ms"),
        utilization=f.number("utilization"),
        kernel_ns=f.ns("kernel_ms"),
        memcpy_ns=f.ns("memcpy_ms"),
        memset_ns=f.ns("memset_ms"),
        streams=f.integer("streams"),
        host_wait_ns=idle.ns("host_wait"),
        short_gap_ns=idle.ns("short_gap"),
        other_idle_ns=idle.ns("other"),
    )


def _kernel(k: KernelRow) -> dict[str, Any]:
    return {**asdict_ms(k), "mean_ms": k.mean_ns / NS_PER_MS}


def _launches(launch: Launches | None, top: int | None) -> dict[str, Any] | None:
    if launch is None:
        return None
    return {
        "launches": launch.launches,
        "call_total_ms": launch.call_total_ns / NS_PER_MS,
        "call_us": summary_us(launch.call_ns),
        "delay_us": summary_us(launch.delay_ns),
        "negative_delays": launch.negative_delays,
        "unmatched_device_ops": launch.unmatched_device_ops,
        "sync_ms": launch.sync_ns / NS_PER_MS,
        "runtime": [asdict_ms(r) for r in first_rows(launch.runtime, top)],
    }


def _allocator(m: AllocatorSummary | None, top: int | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "devices": [
            {
                "device": d.device,
                "peak_allocated_bytes": d.peak_allocated,
                "allocations": d.allocations,
                "allocated_bytes": d.allocated_bytes,
                "freed_bytes": d.freed_bytes,
            }
            for d in m.devices
        ],
        "top_ops": [
            {"op": r.op, "allocations": r.allocations, "bytes": r.bytes}
            for r in first_rows(m.top_ops, top)
        ],
    }


def _read_source(f: Fields) -> TraceSource:
    producer = f.data.get("layerprof")
    run = f.data.get("run")
    return TraceSource(
        file=f.text("file"),
        rank=f.integer("rank"),
        events=f.integer("events", 0),
        has_device=f.flag("has_device_data"),
        window_ns=f.ns("window_ms") if f.has("window_ms") else 0,
        device_names=tuple(strings(f, "device_names")),
        module_source=f.opt_text("module_source"),
        producer=dict(producer) if isinstance(producer, Mapping) else None,
        run=dict(run) if isinstance(run, Mapping) else {},
    )


def _read_steps(f: Fields) -> Steps:
    steps = tuple(
        Step(
            name=s.text("name"),
            start_ns=s.ns("start_ms") if s.has("start_ms") else 0,
            dur_ns=s.ns("ms"),
            cut_off=s.flag("cut_off"),
        )
        for s in f.objects("steps")
    )
    return Steps(steps=steps, source=f.text("source"), thread=f.opt_integer("thread"))


def read_launches(f: Fields | None) -> Launches | None:
    if f is None:
        return None
    call, delay = f.obj("call_us"), f.obj("delay_us")
    return Launches(
        launches=f.integer("launches"),
        call_ns=read_summary(call, NS_PER_US) if call is not None else None,
        call_total_ns=f.ns("call_total_ms"),
        # a kernel may start before its launch ends (clocks apart): delays are signed
        delay_ns=read_summary(delay, NS_PER_US, signed=True) if delay is not None else None,
        negative_delays=f.integer("negative_delays", 0),
        unmatched_device_ops=f.integer("unmatched_device_ops", 0),
        sync_ns=f.ns("sync_ms") if f.has("sync_ms") else 0,
        runtime=tuple(read_row(RuntimeRow, r) for r in f.objects("runtime")),
    )


def read_allocator(f: Fields | None) -> AllocatorSummary | None:
    if f is None:
        return None
    return AllocatorSummary(
        devices=tuple(
            DeviceMemory(
                device=d.text("device"),
                peak_allocated=d.integer("peak_allocated_bytes"),
                allocations=d.integer("allocations"),
                allocated_bytes=d.integer("allocated_bytes"),
                freed_bytes=d.integer("freed_bytes"),
            )
            for d in f.objects("devices")
        ),
        top_ops=tuple(
            AllocRow(
                op=r.text("op"), allocations=r.integer("allocations"), bytes=r.integer("bytes")
            )
            for r in f.objects("top_ops")
        ),
    )


def encode_trace(p: Profile, top: int | None) -> dict[str, Any]:
    """The trace sections a profile has, by JSON key (empty ones are dropped by the
    registry)."""
    return {
        "source": _source(p.trace.source) if p.trace.source is not None else None,
        "steps": _steps(p.trace.steps) if p.trace.steps is not None else None,
        "devices": [_device(d) for d in p.trace.devices],
        "kernels": [_kernel(k) for k in first_rows(p.trace.kernels, top)],
        "kernel_kinds": [asdict_ms(k) for k in p.trace.kinds],
        "memcpy": [asdict_ms(m) for m in p.trace.memcpy],
        "launch": _launches(p.trace.launches, top),
        "memory": _allocator(p.trace.memory, top),
        "annotations": [asdict_ms(a) for a in p.trace.annotations],
    }


def read_trace(f: Fields) -> dict[str, Any]:
    """The trace sections of a profile body, by Profile field."""
    out: dict[str, Any] = {}
    src = f.obj("source")
    if src is not None:
        out["source"] = _read_source(src)
    steps = f.obj("steps")
    if steps is not None:
        out["steps"] = _read_steps(steps)
    out["devices"] = tuple(read_device(d) for d in f.objects("devices"))
    out["kernels"] = tuple(read_row(KernelRow, k) for k in f.objects("kernels"))
    out["kinds"] = tuple(read_row(KindRow, k) for k in f.objects("kernel_kinds"))
    out["memcpy"] = tuple(read_row(MemcpyRow, m) for m in f.objects("memcpy"))
    out["launches"] = read_launches(f.obj("launch"))
    out["memory"] = read_allocator(f.obj("memory"))
    out["annotations"] = tuple(read_row(AnnotationRow, a) for a in f.objects("annotations"))
    return out
