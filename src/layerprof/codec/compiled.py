"""The ``compiled`` key of a profile body: how a ``--compile`` run was attributed.

Times are written in ms (``*_ms``), as everywhere in the JSON; a profile
without the key (any run without ``--compile``, any older file) reads as None.
"""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields, asdict_ms, read_row, strings
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.compiled import (
    PHASES,
    SPLIT_RULES,
    CompiledGraph,
    CompiledKernel,
    CompiledSection,
    Coverage,
    GraphBreak,
    KernelShare,
    PathTime,
    Recompile,
    UnmatchedKernel,
)
from layerprof.units import NS_PER_MS

KEY = "compiled"


def encode_compiled(section: CompiledSection | None) -> dict[str, Any]:
    """``{"compiled": {...}}``, or nothing for a profile without the section."""
    if section is None:
        return {}
    s = section
    body: dict[str, Any] = {
        "torch": s.torch,
        "mode": s.mode,
        "dynamic": s.dynamic,
        "split": s.split,
        "regions": list(s.regions),
        "recompiled": s.recompiled,
        "device_time": s.device_time,
        "compile_ms": s.compile_ns / NS_PER_MS,
        "iterations": s.iterations,
        "coverage": _coverage(s.coverage),
        "backward_coverage": _coverage(s.backward) if s.backward is not None else None,
        "graphs": [asdict_ms(g) for g in s.graphs],
        "graph_breaks": [asdict_ms(b) for b in s.breaks],
        "recompiles": [asdict_ms(r) for r in s.recompiles],
        "kernels": [_kernel(k) for k in s.kernels],
        "paths": [asdict_ms(p) for p in s.paths],
        "unmatched_kernels": [asdict_ms(u) for u in s.unmatched],
    }
    return {KEY: body}


def _coverage(c: Coverage) -> dict[str, Any]:
    return {**asdict_ms(c), "attributed_share": c.attributed_share}


def _kernel(k: CompiledKernel) -> dict[str, Any]:
    return {
        "name": k.name,
        "extern": k.extern,
        "phase": k.phase,
        "calls": k.calls,
        "time_ms": k.time_ns / NS_PER_MS,
        "estimated": k.estimated,
        "split": [{"path": x.path, "share": x.share} for x in k.split],
    }


def read_compiled(f: Fields) -> dict[str, Any]:
    """``{"compiled": CompiledSection}`` when the body has the key, else ``{}``."""
    body = f.obj(KEY)
    if body is None:
        return {}
    split = body.text("split")
    if split not in SPLIT_RULES:
        raise ProfileFormatError(f"{body.where}.split: expected one of {', '.join(SPLIT_RULES)}")
    backward = body.obj("backward_coverage")
    dynamic = body.data.get("dynamic")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise ProfileFormatError(f"{body.where}.dynamic: expected true, false or null")
    return {
        KEY: CompiledSection(
            torch=body.text("torch"),
            mode=body.text("mode"),
            dynamic=dynamic,
            split=split,
            regions=tuple(strings(body, "regions")),
            recompiled=body.flag("recompiled"),
            device_time=body.flag("device_time"),
            compile_ns=body.ns("compile_ms"),
            iterations=body.integer("iterations"),
            graphs=tuple(_graph(g) for g in body.objects("graphs")),
            breaks=tuple(read_row(GraphBreak, b) for b in body.objects("graph_breaks")),
            recompiles=tuple(read_row(Recompile, r) for r in body.objects("recompiles")),
            coverage=_read_coverage(_required(body, "coverage")),
            backward=_read_coverage(backward) if backward is not None else None,
            kernels=tuple(_read_kernel(k) for k in body.objects("kernels")),
            paths=tuple(_path(p) for p in body.objects("paths")),
            unmatched=tuple(
                read_row(UnmatchedKernel, u) for u in body.objects("unmatched_kernels")
            ),
        )
    }


def _required(f: Fields, key: str) -> Fields:
    found = f.obj(key)
    if found is None:
        raise ProfileFormatError(f"{f.where}.{key}: missing")
    return found


def _phase(f: Fields) -> str:
    phase = f.text("phase", "forward")
    if phase not in PHASES:
        raise ProfileFormatError(f"{f.where}.phase: expected forward or backward, found {phase!r}")
    return phase


def _graph(f: Fields) -> CompiledGraph:
    return CompiledGraph(
        key=f.opt_text("key"),
        compile_id=f.text("compile_id"),
        frame=f.text("frame"),
        phase=_phase(f),
        sites=f.integer("sites"),
        calls=f.number("calls"),
        kernel_ns=f.ns("kernel_ms"),
    )


def _read_coverage(f: Fields) -> Coverage:
    return Coverage(
        forward_ns=f.ns("forward_ms"),
        region_ns=f.ns("region_ms"),
        attributed_ns=f.ns("attributed_ms"),
        shared_ns=f.ns("shared_ms"),
        overhead_ns=f.ns("overhead_ms"),
        outside_ns=f.ns("outside_ms"),
        unmatched_ns=f.ns("unmatched_ms") if f.has("unmatched_ms") else 0,
    )


def _read_kernel(f: Fields) -> CompiledKernel:
    return CompiledKernel(
        name=f.text("name"),
        extern=f.flag("extern"),
        phase=_phase(f),
        calls=f.number("calls"),
        time_ns=f.ns("time_ms"),
        estimated=f.flag("estimated"),
        split=tuple(
            KernelShare(path=x.text("path"), share=x.number("share")) for x in f.objects("split")
        ),
    )


def _path(f: Fields) -> PathTime:
    return PathTime(
        path=f.text("path"),
        exact_ns=f.ns("exact_ms"),
        estimated_ns=f.ns("estimated_ms"),
        phase=_phase(f),
    )
