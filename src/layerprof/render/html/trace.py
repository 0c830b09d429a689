"""The sections drawn from the trace sections of each rank's Profile (steps, GPU time,
kernels, copies, launches, memory, annotations) and from a Run's cross-rank results.

A Profile alone is one rank; a Run shows every rank's rows in one table with a
Rank column. Each table shows what the producers filled and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.trace import (
    AllocRow,
    AnnotationRow,
    DeviceMemory,
    DeviceUse,
    KernelRow,
    KindRow,
    Launches,
    MemcpyRow,
    RankLine,
    RuntimeRow,
    StepAcrossRanks,
    Steps,
)
from layerprof.render.html.charts import BarSeries, StepSeries, StepTimes, bars, in_ms
from layerprof.render.html.labels import label
from layerprof.render.html.page import (
    TABLE_LIMIT,
    TOP_N,
    Col,
    Section,
    bytes_col,
    calls_col,
    chart_slot,
    heading,
    name_col,
    paragraph,
    share_col,
    table,
    text_col,
    time_col,
    top_caption,
)
from layerprof.render.html.profile import op_columns, phase_ops
from layerprof.render.html.subject import Subject, rank_name
from layerprof.units import NS_PER_MS, US, TimeUnit, unit_for

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class At(Generic[T]):
    """One row of one rank's section."""

    profile: Profile
    row: T


def per_rank(
    s: Subject,
    rows_of: Callable[[Profile], Sequence[T]],
    *,
    key: Callable[[T], float] | None = None,
    limit: int | None = None,
) -> tuple[list[At[T]], int]:
    """Every rank's rows of one kind (largest ``key`` first, at most ``limit`` per rank),
    and how many there were in all."""
    out: list[At[T]] = []
    total = 0
    for p in s.ranks:
        rows = list(rows_of(p))
        total += len(rows)
        if key is not None:
            rows.sort(key=key, reverse=True)
        out += [At(p, r) for r in rows[:limit]]
    return out, total


def columns(s: Subject, cols: Sequence[Col[T]]) -> list[Col[At[T]]]:
    """Columns over a rank's rows, with a Rank column first when there are several ranks."""
    out: list[Col[At[T]]] = [_lift(c) for c in cols]
    if s.multi_rank:
        rank: Col[At[T]] = Col(
            "Rank", lambda a: rank_name(a.profile), lambda a: a.profile.rank, css="type"
        )
        out.insert(0, rank)
    return out


def _lift(col: Col[T]) -> Col[At[T]]:
    def over(f: Callable[[T], U]) -> Callable[[At[T]], U]:
        return lambda a: f(a.row)

    return Col(
        col.header,
        over(col.text),
        over(col.sort) if col.sort is not None else None,
        col.css,
        over(col.tip) if col.tip is not None else None,
        over(col.markup) if col.markup is not None else None,
        col.title,
    )


def _unit(values: Sequence[float | None]) -> TimeUnit:
    return unit_for(max((v for v in values if v is not None), default=0.0))


# ---------------------------------------------------------------- steps


def steps_section(s: Subject) -> Section | None:
    """Step times per rank: how steps were found, their statistics, and each step."""
    ranks = [p for p in s.ranks if p.trace.steps is not None]
    if not ranks:
        return None
    rows = [At(p, p.trace.steps) for p in ranks if p.trace.steps is not None]
    unit = _unit(
        [st.dur_ns for p in ranks if p.trace.steps is not None for st in p.trace.steps.steps]
    )

    def stat(name: str, pick: Callable[[Profile], float | None]) -> Col[At[Steps]]:
        return time_col(name, lambda a: pick(a.profile), unit)

    first: list[Col[At[Steps]]] = columns(
        s, [text_col("Step definition", lambda st: st.definition)]
    )
    cols: list[Col[At[Steps]]] = [
        *first,
        text_col(
            "File",
            lambda a: a.profile.trace.source.file if a.profile.trace.source else "",
            css="path",
        ),
        calls_col("Steps", lambda a: len(a.row.steps)),
        calls_col("Cut off", lambda a: sum(1 for st in a.row.steps if st.cut_off)),
        stat("Median", lambda p: p.latency.median if p.latency else None),
        stat("CI low", lambda p: p.latency.ci_low if p.latency else None),
        stat("CI high", lambda p: p.latency.ci_high if p.latency else None),
        stat("Mean", lambda p: p.latency.mean if p.latency else None),
        stat("p90", lambda p: p.latency.p90 if p.latency else None),
        stat("Min", lambda p: p.latency.min if p.latency else None),
        stat("Max", lambda p: p.latency.max if p.latency else None),
    ]
    series = tuple(
        StepSeries(
            name=label(rank_name(p)),
            steps=tuple(
                label(st.name + (" (cut off)" if st.cut_off else "")) for st in p.trace.steps.steps
            ),
            ms=tuple(st.dur_ns / NS_PER_MS for st in p.trace.steps.steps),
        )
        for p in ranks
        if p.trace.steps is not None
    )
    chart = StepTimes(title="Step time" + (" per rank" if s.multi_rank else ""), series=series)
    body = chart_slot("lp-steps") + table("lp-trace-steps", cols, rows)
    intro = (
        "Statistics over the complete steps (a step the trace cut off is drawn but not"
        " counted); CI is the 95% confidence interval of the median."
    )
    return Section("steps", "Steps", body, intro, {"lp-steps": chart})


# ---------------------------------------------------------------- GPU time


def devices_section(s: Subject) -> Section | None:
    rows, _ = per_rank(s, lambda p: p.trace.devices)
    if not rows:
        if any(p.trace.source is not None and not p.trace.source.has_device for p in s.ranks):
            body = paragraph("No GPU activity in this trace (CPU only).", "empty")
            return Section("gpu", "GPU time", body)
        return None
    unit = _unit([a.row.window_ns for a in rows] + [a.row.busy_ns for a in rows])

    def t(name: str, get: Callable[[DeviceUse], float]) -> Col[DeviceUse]:
        return time_col(name, get, unit)

    cols: list[Col[At[DeviceUse]]] = columns(
        s,
        [
            Col("Device", _device_name_of(rows), lambda d: d.device),
            t("Window", lambda d: d.window_ns),
            t("Busy", lambda d: d.busy_in_window_ns),
            t("Idle", lambda d: d.idle_ns),
            share_col("Utilization", lambda d: d.utilization),
            t("Kernels", lambda d: d.kernel_ns),
            t("Memcpy", lambda d: d.memcpy_ns),
            t("Memset", lambda d: d.memset_ns),
            calls_col("Streams", lambda d: d.streams),
            t("Idle: host wait", lambda d: d.host_wait_ns),
            t("Idle: short gaps", lambda d: d.short_gap_ns),
            t("Idle: other", lambda d: d.other_idle_ns),
            t("Busy over the whole trace", lambda d: d.busy_ns),
        ],
    )
    names = [f"{rank_name(a.profile)} · device {a.row.device}" for a in rows]
    charts = {
        "lp-busy": bars(
            "GPU busy / idle",
            names,
            [
                BarSeries("busy", in_ms([a.row.busy_in_window_ns for a in rows])),
                BarSeries("idle", in_ms([a.row.idle_ns for a in rows]), "muted"),
            ],
            axis="ms",
            stack=True,
        ),
        "lp-breakdown": bars(
            "Device time by kind",
            names,
            [
                BarSeries("kernels", in_ms([a.row.kernel_ns for a in rows])),
                BarSeries("memcpy", in_ms([a.row.memcpy_ns for a in rows]), "warn"),
                BarSeries("memset", in_ms([a.row.memset_ns for a in rows]), "good"),
            ],
            axis="ms",
            stack=True,
        ),
    }
    body = '<div class="grid2">' + chart_slot("lp-busy") + chart_slot("lp-breakdown") + "</div>"
    body += table("lp-trace-devices", cols, rows)
    intro = (
        "Busy = the union of kernel, memcpy and memset intervals inside the step windows;"
        " idle = window - busy, split into waiting for the host, short gaps between launches"
        " and the rest; utilization = busy / window."
    )
    return Section("gpu", "GPU time", body, intro, charts)


def _device_name_of(rows: Sequence[At[DeviceUse]]) -> Callable[[DeviceUse], str]:
    names: dict[int, str] = {}
    for a in rows:
        known = a.profile.trace.source.device_names if a.profile.trace.source is not None else ()
        if 0 <= a.row.device < len(known):
            names[a.row.device] = f"{a.row.device} {known[a.row.device]}"
    return lambda d: names.get(d.device, str(d.device))


def memcpy_section(s: Subject) -> Section | None:
    rows, _ = per_rank(s, lambda p: p.trace.memcpy)
    if not rows:
        return None
    unit = _unit([a.row.total_ns for a in rows])
    cols: list[Col[At[MemcpyRow]]] = columns(
        s,
        [
            text_col("Kind", lambda m: m.kind),
            calls_col("Calls", lambda m: m.calls),
            time_col("Total", lambda m: m.total_ns, unit),
            bytes_col("Bytes", lambda m: m.bytes),
            Col("GB/s", _gb_per_s, lambda m: m.gb_per_s),
        ],
    )
    return Section("memcpy", "Memory copies and sets", table("lp-trace-memcpy", cols, rows))


def _gb_per_s(m: MemcpyRow) -> str:
    return "-" if m.gb_per_s is None else f"{m.gb_per_s:.2f}"


# ---------------------------------------------------------------- kernels


def kernels_section(s: Subject) -> Section | None:
    rows, total = per_rank(
        s, lambda p: p.trace.kernels, key=lambda k: k.total_ns, limit=TABLE_LIMIT
    )
    if not rows:
        return None
    summed: dict[str, int] = {}
    for p in s.ranks:
        for k in p.trace.kernels:
            summed[k.name] = summed.get(k.name, 0) + k.total_ns
    top = sorted(summed.items(), key=lambda kv: -kv[1])[:TOP_N]
    title = "Top kernels (summed over ranks)" if s.multi_rank else "Top kernels"
    chart = bars(
        title, [n for n, _ in top], [BarSeries("total", in_ms([v for _, v in top]))], axis="ms"
    )
    unit = _unit([a.row.total_ns for a in rows])
    each = _unit([a.row.max_ns for a in rows])
    cols: list[Col[At[KernelRow]]] = columns(
        s,
        [
            name_col("Kernel", lambda k: k.name),
            text_col("Kind", lambda k: k.kind),
            calls_col("Calls", lambda k: k.calls),
            time_col("Total", lambda k: k.total_ns, unit),
            time_col("Mean", lambda k: k.mean_ns, each),
            time_col("Min", lambda k: k.min_ns, each),
            time_col("Max", lambda k: k.max_ns, each),
        ],
    )
    body = chart_slot("lp-kernels", tall=len(top) > 10)
    body += table(
        "lp-trace-kernels", cols, rows, filter_label="Filter kernels",
        caption=top_caption(len(rows), total, "kernels"),
    )  # fmt: skip
    kinds, _ = per_rank(s, lambda p: p.trace.kinds)
    if kinds:
        kind_unit = _unit([a.row.total_ns for a in kinds])
        kind_cols: list[Col[At[KindRow]]] = columns(
            s,
            [
                text_col("Kind", lambda k: k.kind),
                calls_col("Calls", lambda k: k.calls),
                time_col("Total", lambda k: k.total_ns, kind_unit),
            ],
        )
        body += heading("Kernels by kind") + table("lp-trace-kinds", kind_cols, kinds)
    intro = "GPU kernels summed over the whole trace, by name."
    return Section("kernels", "Kernels", body, intro, {"lp-kernels": chart})


# ---------------------------------------------------------------- launches


def launches_section(s: Subject) -> Section | None:
    rows, _ = per_rank(s, lambda p: (p.trace.launches,) if p.trace.launches is not None else ())
    if not rows:
        return None
    unit = _unit([a.row.call_total_ns for a in rows] + [a.row.sync_ns for a in rows])
    cols: list[Col[At[Launches]]] = columns(
        s,
        [
            calls_col("Launches", lambda x: x.launches),
            time_col("Launch calls", lambda x: x.call_total_ns, unit),
            time_col("Call median", lambda x: x.call_ns.median if x.call_ns else None, US),
            time_col("Delay median", lambda x: x.delay_ns.median if x.delay_ns else None, US),
            time_col("Delay p90", lambda x: x.delay_ns.p90 if x.delay_ns else None, US),
            calls_col("Negative delays", lambda x: x.negative_delays),
            calls_col("Unmatched device ops", lambda x: x.unmatched_device_ops),
            time_col("Synchronize", lambda x: x.sync_ns, unit),
        ],
    )
    body = table("lp-trace-launch", cols, rows)
    runtime, _ = per_rank(
        s, lambda p: p.trace.launches.runtime if p.trace.launches is not None else ()
    )
    if runtime:
        rt_unit = _unit([a.row.total_ns for a in runtime])
        rt_cols: list[Col[At[RuntimeRow]]] = columns(
            s,
            [
                text_col("Runtime call", lambda r: r.name, css="path"),
                calls_col("Calls", lambda r: r.calls),
                time_col("Total", lambda r: r.total_ns, rt_unit),
            ],
        )
        if any(a.profile.graph_replay is not None for a in runtime):
            rt_cols.append(
                Col("Replayed device ops", lambda a: _replayed_text(a), lambda a: _replayed(a))
            )
        body += heading("Runtime calls") + table("lp-trace-runtime", rt_cols, runtime)
    intro = (
        "Runtime calls that launched GPU work (kernels, copies, memsets) and the delay from"
        " a launch call's end to its work's start on the device; a negative delay means the"
        " CPU and GPU clocks disagree."
    )
    return Section("launches", "Launch overhead", body, intro)


def _replayed(a: At[RuntimeRow]) -> int | None:
    """Device ops a graph launch call (cudaGraphLaunch, hipGraphLaunch) replayed."""
    r = a.profile.graph_replay
    found = [g.kernels for g in r.graphs if g.call == a.row.name] if r is not None else []
    return sum(found) if found else None


def _replayed_text(a: At[RuntimeRow]) -> str:
    n = _replayed(a)
    return "" if n is None else f"{n:,}"


# ---------------------------------------------------------------- memory


def allocator_section(s: Subject) -> Section | None:
    devices, _ = per_rank(s, lambda p: p.trace.memory.devices if p.trace.memory is not None else ())
    allocs, _ = per_rank(s, lambda p: p.trace.memory.top_ops if p.trace.memory is not None else ())
    if not devices and not allocs:
        return None
    body = ""
    if devices:
        cols: list[Col[At[DeviceMemory]]] = columns(
            s,
            [
                text_col("Device", lambda d: d.device),
                bytes_col("Peak allocated", lambda d: d.peak_allocated),
                calls_col("Allocations", lambda d: d.allocations),
                bytes_col("Allocated", lambda d: d.allocated_bytes),
                bytes_col("Freed", lambda d: d.freed_bytes),
            ],
        )
        body += table("lp-trace-memory", cols, devices)
    if allocs:
        op_cols: list[Col[At[AllocRow]]] = columns(
            s,
            [
                text_col("Operator", lambda a: a.op, css="path"),
                calls_col("Allocations", lambda a: a.allocations),
                bytes_col("Bytes", lambda a: a.bytes),
            ],
        )
        body += heading("Operators that allocated most") + table(
            "lp-trace-memory-ops", op_cols, allocs
        )
    intro = "Allocator events of the trace (torch.profiler with profile_memory=True)."
    return Section("memory", "Memory", body, intro)


# ---------------------------------------------------------------- annotations


def annotations_section(s: Subject) -> Section | None:
    rows, total = per_rank(
        s, lambda p: p.trace.annotations, key=lambda a: a.total_ns, limit=TABLE_LIMIT
    )
    if not rows:
        return None
    unit = _unit([a.row.total_ns for a in rows])
    # a path spells dots as "_" (they separate levels); show the real names
    rows_by_path = {a.path: a for p in s.ranks for a in p.trace.annotations}

    def chain(a: AnnotationRow) -> str:
        out, parent = [a.name], a.parent
        while parent is not None and parent in rows_by_path and len(out) < 64:
            out.append(rows_by_path[parent].name)
            parent = rows_by_path[parent].parent
        return " › ".join(reversed(out))

    spec: list[Col[AnnotationRow]] = [
        text_col("Annotation", chain, css="path"),
        calls_col("Calls", lambda a: a.calls),
        time_col("Total", lambda a: a.total_ns, unit),
        time_col("Self", lambda a: a.self_ns, unit),
    ]
    if any(a.row.device_ns is not None for a in rows):
        spec += [
            time_col("Device", lambda a: a.device_ns, unit),
            time_col("Device self", lambda a: a.device_self_ns, unit),
        ]
    body = table(
        "lp-trace-annotations", columns(s, spec), rows, filter_label="Filter annotations",
        caption=top_caption(len(rows), total, "annotations"),
    )  # fmt: skip
    intro = "record_function spans as a tree (path = enclosing annotations), summed over the trace."
    return Section("annotations", "Annotations", body, intro)


# ---------------------------------------------------------------- ranks side by side


def rank_ops_section(s: Subject) -> Section | None:
    """Each rank's operators (the page's operator tables show one rank)."""
    if not s.multi_rank:
        return None
    rows, total = per_rank(
        s, lambda p: phase_ops(p.ops), key=lambda o: o.self_ns, limit=TABLE_LIMIT
    )
    if not rows:
        return None
    body = table(
        "lp-trace-ops", columns(s, op_columns([a.row for a in rows])), rows,
        filter_label="Filter operators", caption=top_caption(len(rows), total, "operators"),
    )  # fmt: skip
    return Section("rank-ops", "Operators per rank", body, "Per step (median over steps).")


def cross_rank_section(s: Subject) -> Section | None:
    run = s.run
    cross = run.cross if run is not None else None
    if run is None or cross is None:
        return None
    files = {p.rank: p.trace.source.file for p in run.ranks if p.trace.source is not None}
    unit = _unit(
        [line.median_step_ns for line in cross.ranks]
        + [ns for step in cross.steps for _, ns in step.ns_by_rank]
    )
    line_cols: list[Col[RankLine]] = [
        Col("Rank", lambda r: str(r.rank), lambda r: r.rank),
        text_col("File", lambda r: files.get(r.rank, ""), css="path"),
        time_col(f"Median {run.step_word}", lambda r: r.median_step_ns, unit),
    ]
    if cross.kernel_time:
        line_cols += [
            time_col("Kernel communication", lambda r: r.communication_ns, unit),
            time_col("Kernel compute", lambda r: r.compute_ns, unit),
        ]
    body = table("lp-ranks", line_cols, cross.ranks)
    if cross.steps:
        body += heading("Step time per rank") + table(
            "lp-rank-steps", _cross_step_cols(run.ranks, unit), cross.steps
        )
    if cross.slowest_rank is not None:
        body += paragraph(
            f"Slowest rank by median {run.step_word}: {cross.slowest_rank}.", "verdict"
        )
    intro = f"{len(run.ranks)} ranks of {run.path} (rank from {run.rank_source})."
    return Section("ranks", "Ranks side by side", body, intro)


def _cross_step_cols(ranks: Sequence[Profile], unit: TimeUnit) -> list[Col[StepAcrossRanks]]:
    def at(rank: int | None) -> Callable[[StepAcrossRanks], float | None]:
        return lambda st: dict(st.ns_by_rank).get(rank) if rank is not None else None

    return [
        text_col("Step", lambda st: st.name),
        *[time_col(rank_name(p), at(p.rank), unit) for p in ranks],
        Col("Slowest", lambda st: str(st.slowest_rank), lambda st: st.slowest_rank),
        time_col("Spread", lambda st: st.spread_ns, unit),
    ]
