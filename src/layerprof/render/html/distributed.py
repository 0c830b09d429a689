"""The step-breakdown card: each step's time as a stacked bar per rank and device, the
collectives and how much compute hides them, device queues and launch delays, where
memory peaked, and the rank that arrives last at collectives.

It reads the typed distributed sections of each rank's Profile (``breakdown``,
``communication``, ``queues``, ``memory_timeline``) and the Run's ``stragglers``
(``sections/distributed.py``), as the console's ``render/console/distributed.py`` does. The
stacked bars are plain HTML (a row of sized, coloured spans with a tooltip each),
so they read with scripts off and need nothing from the chart bundle. A part of
the card is left out when no rank has it; the card is left out when none has any.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.distributed import (
    BREAKDOWN_PARTS,
    Breakdown,
    CollectiveGroup,
    CollectiveMatch,
    Communication,
    DeviceTimeline,
    LaunchOutlier,
    Queues,
    RankLateness,
    StepBreakdown,
    Stragglers,
    StreamQueue,
)
from layerprof.render.html.page import (
    TABLE_LIMIT,
    TOP_N,
    Col,
    Section,
    bytes_col,
    calls_col,
    esc,
    heading,
    name_col,
    paragraph,
    share_col,
    stat_cards,
    table,
    text_col,
    time_col,
    top_caption,
)
from layerprof.render.html.subject import Subject, rank_name
from layerprof.render.html.trace import columns, per_rank
from layerprof.units import US, TimeUnit, fmt_calls, fmt_gb_s, fmt_share, human_time, unit_for

#: Stacked bars drawn in all (the steps of each rank and device share them; the totals
#: table sums every step).
MAX_BARS = 240

#: Each part's label and what it means (docs/trace.md, "Step breakdown").
PART_LABELS: dict[str, tuple[str, str]] = {
    "compute": ("Compute", "compute kernels (CPU ops on a host-only trace), no communication"),
    "overlap": ("Overlap", "compute and communication at once"),
    "communication": ("Communication", "communication alone: the exposed communication"),
    "memcpy": ("Memcpy", "copies and no kernel"),
    "memset": ("Memset", "memsets and no kernel"),
    "runtime": ("Runtime", "device idle, the host in a runtime call (launch, synchronize)"),
    "dataloader": ("Data loading", "device idle, the host loading data"),
    "cpu": ("CPU", "device idle, the host in CPU ops or module spans"),
    "idle": ("Idle", "none of these"),
}


def distributed_section(s: Subject) -> Section | None:
    """Step breakdown, communication, queues, memory peak and stragglers, where present."""
    parts = [
        _breakdown(s),
        _communication(s),
        _queues(s),
        _memory_peak(s),
        _stragglers(s),
    ]
    body = "".join(parts)
    if not body:
        return None
    intro = (
        "Where each step's time goes on each device, the collectives and how much of them"
        " compute hides, the device queues, where allocated memory peaked, and which rank"
        " arrives last at collectives. Moments (at, launched at) are since the rank's first"
        " trace event."
    )
    return Section("distributed", "Step breakdown and communication", body, intro)


def _label(part: str) -> str:
    return PART_LABELS.get(part, (part, ""))[0]


def _unit(values: Sequence[float | None]) -> TimeUnit:
    return unit_for(max((abs(v) for v in values if v is not None), default=0.0))


# ---------------------------------------------------------------- step breakdown


@dataclass(frozen=True)
class _DeviceSteps:
    """One rank's breakdown rows of one device (None: a host-only trace), in step order."""

    device: int | None
    steps: tuple[StepBreakdown, ...]
    totals: dict[str, int]  # Breakdown.totals(device): "wall" and every part


def _device_steps(b: Breakdown) -> list[_DeviceSteps]:
    devices = sorted({st.device for st in b.steps}, key=lambda d: -1 if d is None else d)
    return [
        _DeviceSteps(d, tuple(st for st in b.steps if st.device == d), b.totals(d)) for d in devices
    ]


def _where(device: int | None) -> str:
    return "host" if device is None else f"device {device}"


def _breakdown(s: Subject) -> str:
    groups, _ = per_rank(s, lambda p: _device_steps(p.trace.breakdown) if p.trace.breakdown else [])
    groups = [g for g in groups if g.row.steps]
    if not groups:
        return ""
    shown = [
        part
        for part in BREAKDOWN_PARTS
        if part == "idle" or any(g.row.totals[part] for g in groups)
    ]
    each = max(1, min(TOP_N, MAX_BARS // len(groups)))
    bars = [(g.profile, st) for g in groups for st in g.row.steps[:each]]
    cut = any(len(g.row.steps) > each for g in groups)
    caption = (
        f"The first {each} steps of each rank and device; the table sums them all. " if cut else ""
    )
    hidden = [_label(part) for part in BREAKDOWN_PARTS if part not in shown]
    if hidden:
        caption += f"Zero in every step: {', '.join(hidden)}."
    unit = _unit([g.row.totals["wall"] for g in groups])
    cols: list[Col[_DeviceSteps]] = [
        text_col("Device", lambda g: _where(g.device)),
        calls_col("Steps", lambda g: len(g.steps)),
        time_col("Wall", lambda g: g.totals["wall"], unit),
        *[_part_col(part, unit) for part in shown],
    ]
    return (
        heading("Step time breakdown")
        + paragraph(
            "Each step's wall time on each device, partitioned: at each instant the first"
            " part active there gets the time, so the parts add up to the step."
            " Hover a segment for its part and time.",
            "caption",
        )
        + _legend(shown)
        + _stacked_bars(s, bars)
        + table("lp-breakdown", columns(s, cols), groups, caption=caption.strip())
    )


def _part_col(part: str, unit: TimeUnit) -> Col[_DeviceSteps]:
    label, meaning = PART_LABELS.get(part, (part, ""))

    def share(g: _DeviceSteps) -> str:
        wall = g.totals["wall"]
        return f"{fmt_share(g.totals[part] / wall)} of the wall time" if wall > 0 else ""

    return replace(time_col(label, lambda g: g.totals[part], unit, tip=share), title=meaning)


def _legend(parts: Sequence[str]) -> str:
    items = "".join(
        f'<span title="{esc(PART_LABELS.get(p, (p, ""))[1])}">'
        f'<i class="part-{esc(p)}"></i>{esc(_label(p))}</span>'
        for p in parts
    )
    return f'<p class="legend">{items}</p>'


def _stacked_bars(s: Subject, bars: Sequence[tuple[Profile, StepBreakdown]]) -> str:
    """One row per step: its name, its parts as segments sized against the longest step
    (so a slow step is a long bar), and its wall time."""
    longest = max(st.wall_ns for _, st in bars)
    unit = unit_for(longest)
    rows = []
    for p, st in bars:
        name = [rank_name(p)] if s.multi_rank else []
        name += [_where(st.device), st.step]
        segments = "".join(
            _segment(part, ns, st.wall_ns, longest, unit) for part, ns in st.parts() if ns > 0
        )
        rows.append(
            f'<div class="sbar"><span class="sbar-name">{esc(" · ".join(name))}</span>'
            f'<span class="sbar-track">{segments}</span>'
            f'<span class="sbar-wall">{esc(unit.fmt(st.wall_ns))} {esc(unit.name)}</span></div>'
        )
    return f'<div class="sbars">{"".join(rows)}</div>'


def _segment(part: str, ns: int, wall_ns: int, longest: int, unit: TimeUnit) -> str:
    tip = f"{_label(part)}: {unit.fmt(ns)} {unit.name} ({fmt_share(ns / wall_ns)})"
    return (
        f'<i class="part-{esc(part)}" style="width:{100 * ns / longest:.3f}%"'
        f' title="{esc(tip)}"></i>'
    )


# ---------------------------------------------------------------- communication


def _communication(s: Subject) -> str:
    ranks, _ = per_rank(
        s, lambda p: (p.trace.communication,) if p.trace.communication is not None else ()
    )
    if not ranks:
        if any(p.trace.breakdown is not None for p in s.ranks):
            return heading("Communication") + paragraph("No collectives in this trace.", "empty")
        return ""
    unit = _unit([a.row.comm_ns for a in ranks] + [a.row.compute_ns for a in ranks])
    cols: list[Col[Communication]] = [
        calls_col("Collectives", lambda c: len(c.collectives)),
        time_col("Communication", lambda c: c.comm_ns, unit),
        time_col("Overlapped by compute", lambda c: c.overlap_ns, unit),
        share_col("Overlap", lambda c: None if c.overlap_pct is None else c.overlap_pct / 100),
        time_col("Exposed", lambda c: c.exposed_ns, unit),
        time_col("Compute", lambda c: c.compute_ns, unit),
        text_col("Runs on", lambda c: "device" if c.on_device else "host (CPU backend)"),
    ]
    body = heading("Communication") + table(
        "lp-comm",
        columns(s, cols),
        ranks,
        caption=(
            "Over the whole trace: communication is the union of the collectives' execution,"
            " overlapped the part of it during compute, exposed the rest."
        ),
    )
    groups, total = per_rank(
        s,
        lambda p: p.trace.communication.groups() if p.trace.communication is not None else [],
        limit=TABLE_LIMIT,
    )
    if groups:
        body += heading("Collectives by kind and process group") + table(
            "lp-collectives",
            columns(s, _group_cols(_unit([a.row.total_ns for a in groups]))),
            groups,
            caption=top_caption(len(groups), total, "kinds and groups"),
        )
    return body


def _group_cols(unit: TimeUnit) -> list[Col[CollectiveGroup]]:
    return [
        text_col("Kind", lambda g: g.kind),
        text_col("Group", lambda g: g.group or "default"),
        calls_col("Calls", lambda g: len(g.collectives)),
        bytes_col("Bytes", lambda g: g.bytes),
        time_col("Duration", lambda g: g.total_ns, unit),
        time_col("Exposed", lambda g: g.exposed_ns, unit),
        Col(
            "algbw (GB/s)",
            lambda g: fmt_gb_s(g.algbw),
            lambda g: g.algbw,
            title="message bytes / duration, median over the calls",
        ),
        Col(
            "busbw (GB/s)",
            lambda g: fmt_gb_s(g.busbw),
            lambda g: g.busbw,
            title="algbw x nccl-tests' bus factor for the kind and group size, median over the calls",
        ),
    ]


# ---------------------------------------------------------------- queues and launches


def _queues(s: Subject) -> str:
    ranks, _ = per_rank(s, lambda p: (p.trace.queues,) if p.trace.queues is not None else ())
    if not ranks:
        return ""
    unit = _unit([a.row.blocked_ns for a in ranks] + [a.row.short_kernel_ns for a in ranks])
    cols: list[Col[Queues]] = [
        time_col("Host blocked", lambda q: q.blocked_ns, unit),
        time_col("Synchronize", lambda q: q.sync_ns, unit),
        time_col("Launches on a full queue", lambda q: q.full_launch_ns, unit),
        calls_col("Device ops", lambda q: q.kernels),
        calls_col("Shorter than their launch", lambda q: q.short_kernels),
        time_col("Their time", lambda q: q.short_kernel_ns, unit),
        calls_col("Launch-delay outliers", lambda q: q.delay_outliers),
        time_col("Outlier above", lambda q: q.delay_threshold_ns, US),
    ]
    limits = sorted({a.row.queue_limit for a in ranks})
    body = heading("Device queues and launches") + table(
        "lp-queues",
        columns(s, cols),
        ranks,
        caption=(
            "Host blocked = synchronizations + launch calls made while their stream's queue was"
            f" full ({' / '.join(map(str, limits))} ops). Device ops shorter than the call that"
            " launched them are launch-bound work; a graph launch counts once, against its"
            " replayed ops' summed time."
        ),
    )
    streams, _ = per_rank(s, lambda p: p.trace.queues.streams if p.trace.queues is not None else ())
    if streams:
        full = _unit([a.row.full_ns for a in streams])
        stream_cols: list[Col[StreamQueue]] = [
            text_col("Device", lambda q: q.device),
            text_col("Stream", lambda q: q.stream),
            calls_col("Ops", lambda q: q.ops),
            calls_col("Max queue", lambda q: q.max_length),
            calls_col("Mean queue", lambda q: q.mean_length),
            time_col("At the limit", lambda q: q.full_ns, full),
        ]
        body += heading("Queue per stream") + table(
            "lp-queue-streams",
            columns(s, stream_cols),
            streams,
            caption="Queue = device ops launched and not yet started; the mean is time-weighted.",
        )
    outliers, total = per_rank(
        s,
        lambda p: p.trace.queues.outliers if p.trace.queues is not None else (),
        key=lambda o: o.delay_ns,
        limit=TABLE_LIMIT,
    )
    if outliers:
        delay = _unit([a.row.delay_ns for a in outliers])
        at = _unit([a.row.launch_ns for a in outliers])
        outlier_cols: list[Col[LaunchOutlier]] = [
            name_col("Device op", lambda o: o.name),
            time_col("Launch delay", lambda o: o.delay_ns, delay),
            time_col("Launched at", lambda o: o.launch_ns, at),
        ]
        body += heading("Longest launch delays") + table(
            "lp-launch-outliers",
            columns(s, outlier_cols),
            outliers,
            caption=top_caption(len(outliers), total, "delays")
            or "Delay = device op start - launch call end.",
        )
    return body


# ---------------------------------------------------------------- memory peak


def _memory_peak(s: Subject) -> str:
    rows, _ = per_rank(
        s, lambda p: p.trace.memory_timeline.devices if p.trace.memory_timeline is not None else ()
    )
    if not rows:
        return ""
    unit = _unit([a.row.peak_ns for a in rows])
    cols: list[Col[DeviceTimeline]] = [
        text_col("Device", lambda d: d.device),
        bytes_col("Peak allocated", lambda d: d.peak_bytes),
        time_col("At", lambda d: d.peak_ns, unit),
        name_col("Operator", lambda d: d.peak_op or "outside ops"),
        name_col("Layer", lambda d: d.peak_layer or ""),
        text_col("Step", lambda d: d.peak_step or ""),
        calls_col("Events", lambda d: d.events),
    ]
    return heading("Memory peak") + table(
        "lp-memory-peak",
        columns(s, cols),
        rows,
        caption=(
            "Allocated bytes from the allocator events; the peak is in the innermost operator"
            " and layer around the allocation that reached it."
        ),
    )


# ---------------------------------------------------------------- stragglers


def _straggler_sentence(st: Stragglers) -> str:
    head = f"{fmt_calls(st.matched)} collectives matched across ranks"
    if st.median_skew_ns is not None:
        head += f"; median arrival skew {human_time(st.median_skew_ns)}"
    if st.straggler is not None:
        head += f"; rank {st.straggler} arrives last most often"
    elif st.matched:
        head += "; no rank arrives last more often than an even share"
    return head + "."


def _stragglers(s: Subject) -> str:
    st = s.run.stragglers if s.run is not None else None
    if st is None:
        return ""
    cards = stat_cards(
        [
            ("Straggler", "none" if st.straggler is None else f"rank {st.straggler}",
             "" if st.straggler is None else "bad"),
            ("Matched collectives", fmt_calls(st.matched), ""),
            ("Median arrival skew", human_time(st.median_skew_ns), ""),
            ("Step spread", human_time(st.step_spread_ns), ""),
        ]
    )  # fmt: skip
    body = heading("Stragglers") + paragraph(_straggler_sentence(st), "verdict") + cards
    body += "".join(paragraph(note.text, "warning") for note in st.notes)
    if st.ranks:
        body += table(
            "lp-stragglers",
            _lateness_cols(st.ranks, s.run.step_word if s.run is not None else "step"),
            st.ranks,
            caption=(
                "Arrivals are compared with clocks aligned on the collectives' common ends;"
                " late = this rank's arrival - the first arrival, at the collectives it was last at."
            ),
        )
    if st.worst:
        unit = _unit([m.skew_ns for m in st.worst])
        worst_cols: list[Col[CollectiveMatch]] = [
            text_col("Group", lambda m: m.group or "default"),
            text_col("Kind", lambda m: m.kind),
            text_col("Step", lambda m: m.step or ""),
            calls_col("Index", lambda m: m.index),
            bytes_col("Bytes", lambda m: m.bytes),
            Col("Last rank", lambda m: str(m.last_rank), lambda m: m.last_rank),
            time_col("Skew", lambda m: m.skew_ns, unit, tip=_arrivals(unit)),
        ]
        body += heading("Largest arrival skews") + table("lp-straggler-worst", worst_cols, st.worst)
    return body


def _lateness_cols(ranks: Sequence[RankLateness], step_word: str) -> list[Col[RankLateness]]:
    unit = _unit(
        [r.late_ns for r in ranks]
        + [r.prior_compute_ns for r in ranks]
        + [r.median_step_ns for r in ranks]
    )
    offset = _unit([r.clock_offset_ns for r in ranks])
    return [
        Col("Rank", lambda r: str(r.rank), lambda r: r.rank),
        calls_col("Collectives", lambda r: r.collectives),
        calls_col("Unmatched", lambda r: r.unmatched),
        calls_col("Last", lambda r: r.last),
        time_col("Late in all", lambda r: r.late_ns, unit),
        time_col("Median late", lambda r: r.median_late_ns, unit),
        time_col("Compute before", lambda r: r.prior_compute_ns, unit),
        name_col("Mostly before", lambda r: r.prior_top or ""),
        time_col("Clock offset", lambda r: r.clock_offset_ns, offset),
        time_col(f"Median {step_word}", lambda r: r.median_step_ns, unit),
    ]


def _arrivals(unit: TimeUnit) -> Callable[[CollectiveMatch], str]:
    def tip(m: CollectiveMatch) -> str:
        first = min((t for _, t in m.arrivals), default=0)
        return ", ".join(
            f"rank {rank} +{unit.fmt(t - first)} {unit.name}" for rank, t in m.arrivals
        )

    return tip
