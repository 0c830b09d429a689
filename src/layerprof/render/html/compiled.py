"""The HTML card of a ``--compile`` profile, and the layer table's estimate column.

The card says what was compiled and how, where the measured forward went
(kernels, the split-rule estimate among them, compiled overhead, outside the
compiled regions), graph breaks and recompiles, the graphs, and every kernel
with the layers its time went to. The layer table gets a "% estimated"
column: the share of a row's compiled time that a fused kernel's split gave it.
"""

from __future__ import annotations

from layerprof.pivot.profile import LayerRow
from layerprof.pivot.sections.compiled import CompiledGraph, CompiledKernel, CompiledSection
from layerprof.render.html.charts import BarSeries, bars, in_ms
from layerprof.render.html.page import (
    Col,
    Section,
    calls_col,
    chart_slot,
    heading,
    name_col,
    paragraph,
    stat_cards,
    table,
    text_col,
    time_col,
)
from layerprof.render.html.subject import Subject
from layerprof.units import fmt_share, human_time, unit_for

_SPLIT_SHOWN = 4


def estimate_columns(s: Subject) -> list[Col[LayerRow]]:
    """The layer table's "% estimated" column for a compiled profile (none otherwise)."""
    c = s.profile.compiled if s.profile is not None else None
    if c is None or not any(p.estimated_ns > 0 for p in c.paths):
        return []
    return [
        Col(
            "% estimated",
            lambda r: fmt_share(c.estimated_share(r.path)) if c.estimated_share(r.path) else "",
            lambda r: c.estimated_share(r.path),
            title=f"share of the layer's own compiled time that fused kernels split by {c.split}",
        )
    ]


def compiled_section(s: Subject) -> Section | None:
    c = s.profile.compiled if s.profile is not None else None
    if c is None:
        return None
    cov = c.coverage
    kernels = "GPU kernels" if c.device_time else "kernels"
    body = stat_cards(
        [
            ("mean profiled forward", human_time(cov.forward_ns), ""),
            (kernels, human_time(cov.attributed_ns), "key"),
            (f"of it split by {c.split}", human_time(cov.shared_ns), ""),
            ("compiled overhead", human_time(cov.overhead_ns), ""),
            ("outside compiled regions", human_time(cov.outside_ns), ""),
            ("compiled region attributed", fmt_share(cov.attributed_share), ""),
            ("compiling took", human_time(c.compile_ns), ""),
        ]
    )
    body += _breaks(c) + _graphs(c)
    charts = {}
    if c.kernels:
        top = c.kernels[:20]
        charts["lp-compiled-kernels"] = bars(
            "Compiled kernels", [k.name for k in top],
            [BarSeries("time", in_ms([k.time_ns for k in top]))], axis="ms",
        )  # fmt: skip
        body += chart_slot("lp-compiled-kernels", tall=len(top) > 10) + _kernels(c)
    return Section("compiled", "Compiled (torch.compile)", body, _intro(c), charts)


def _intro(c: CompiledSection) -> str:
    where = ", ".join(r or "the whole model" for r in c.regions)
    again = " (the model came compiled; layerprof compiled it again with its own backend)"
    return (
        f"Compiled {where}{again if c.recompiled else ''}: mode {c.mode}"
        f"{', dynamic shapes' if c.dynamic else ''}, torch {c.torch}. The layer rows hold"
        f" each layer's share of the compiled {'GPU ' if c.device_time else ''}kernel time:"
        " extern kernels (matmul, convolution, attention) exactly, fused kernels spanning"
        f" several layers split by {c.split} (the layer table's % estimated column)."
        f" Means over {c.iterations} profiled forwards."
    )


def _breaks(c: CompiledSection) -> str:
    if not c.breaks and not c.recompiles:
        return paragraph("No graph breaks and no recompiles.")
    out = ""
    if c.breaks:
        out += heading("Graph breaks") + table(
            "lp-compiled-breaks",
            [text_col("Reason", lambda b: b.reason), calls_col("Count", lambda b: b.count)],
            c.breaks,
        )
    if c.recompiles:
        out += heading("Recompiles") + table(
            "lp-compiled-recompiles",
            [
                text_col("Compile", lambda r: r.compile_id),
                text_col("Frame", lambda r: r.frame, css="path"),
                text_col("Reason", lambda r: r.reason),
            ],
            c.recompiles,
        )
    return out


def _graphs(c: CompiledSection) -> str:
    unit = unit_for(max((g.kernel_ns for g in c.graphs), default=0))
    cols: list[Col[CompiledGraph]] = [
        text_col("Compile", lambda g: g.compile_id),
        text_col("Frame", lambda g: g.frame, css="path"),
        text_col("Phase", lambda g: g.phase),
        calls_col("Calls / forward", lambda g: g.calls),
        calls_col("Call sites", lambda g: g.sites),
        time_col("Kernels", lambda g: g.kernel_ns, unit),
        name_col("Cache key", lambda g: g.key or "(not cached)", limit=24),
    ]
    return heading("Graphs") + table("lp-compiled-graphs", cols, c.graphs)


def _kernels(c: CompiledSection) -> str:
    unit = unit_for(max((k.time_ns for k in c.kernels), default=0))
    cols: list[Col[CompiledKernel]] = [
        name_col("Kernel", lambda k: k.name),
        text_col("Kind", lambda k: ("extern" if k.extern else "fused") + _phase(k)),
        calls_col("Calls / forward", lambda k: k.calls),
        time_col("Time", lambda k: k.time_ns, unit),
        text_col("Split", lambda k: "estimated" if k.estimated else "exact"),
        text_col("Layers", _split),
    ]
    unmatched = (
        paragraph(
            "Kernel events no call site explained (their time is compiled overhead): "
            + ", ".join(f"{u.name} ({human_time(u.time_ns)})" for u in c.unmatched)
        )
        if c.unmatched
        else ""
    )
    return (
        heading("Kernels")
        + table("lp-compiled-kernels-table", cols, c.kernels, filter_label="Filter kernels")
        + unmatched
    )


def _phase(k: CompiledKernel) -> str:
    return ", backward" if k.phase == "backward" else ""


def _split(k: CompiledKernel) -> str:
    shown = [f"{x.path or '(root)'} {fmt_share(x.share)}" for x in k.split[:_SPLIT_SHOWN]]
    more = len(k.split) - _SPLIT_SHOWN
    return ", ".join(shown) + (f", +{more} more" if more > 0 else "")
