"""Console tables of the distributed sections: a Profile's step breakdown, collectives,
device queues and memory timeline, and a Run's stragglers. Reads the pivot, never computes."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from layerprof.pivot.profile import Profile, Run
from layerprof.pivot.sections.distributed import (
    BREAKDOWN_PARTS,
    CollectiveGroup,
    Queues,
    StepBreakdown,
)
from layerprof.render.console.columns import Cell, print_named_table
from layerprof.units import MS, US, fmt_calls, human_bytes

_STEP_ROWS = 12  # steps listed one by one; the total row sums them all


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def print_breakdown(p: Profile, console: Console) -> None:
    b = p.trace.breakdown
    if b is None or not b.steps:
        return
    devices = sorted({s.device for s in b.steps}, key=lambda d: -1 if d is None else d)
    for device in devices:
        rows = [s for s in b.steps if s.device == device]
        totals = b.totals(device)
        # parts that are zero in every step say nothing: leave them out (the title says so)
        shown = [part for part in BREAKDOWN_PARTS if totals[part] or part == "idle"]
        cells: list[list[Cell]] = [_breakdown_cells(s, shown) for s in rows[:_STEP_ROWS]]
        if len(rows) > 1:
            cells.append(["total", MS.fmt(totals["wall"]),
                          *[_pct(totals[part], totals["wall"]) for part in shown]])  # fmt: skip
        where = "host only" if device is None else f"device {device}"
        more = f"; first {_STEP_ROWS} of {len(rows)} steps" if len(rows) > _STEP_ROWS else ""
        hidden = [part for part in BREAKDOWN_PARTS if part not in shown]
        zero = f"; zero: {', '.join(hidden)}" if hidden else ""
        print_named_table(
            console,
            f"step time breakdown, {where} (ms; the parts add up to the wall time{more}{zero})",
            ["step", "wall", *[_SHORT.get(part, part) for part in shown]],
            cells,
        )


_SHORT = {"communication": "comm", "dataloader": "loader"}


def _breakdown_cells(s: StepBreakdown, shown: list[str]) -> list[Cell]:
    parts = dict(s.parts())
    return [s.step, MS.fmt(s.wall_ns), *[MS.fmt(parts[part]) for part in shown]]


def print_communication(p: Profile, console: Console, top: int) -> None:
    c = p.trace.communication
    if c is None:
        return
    pct = "-" if c.overlap_pct is None else f"{c.overlap_pct:.1f}%"
    console.print(
        Text(
            f"communication: {len(c.collectives)} collectives, {MS.fmt(c.comm_ns)} ms"
            f" (union); overlapped by compute {MS.fmt(c.overlap_ns)} ms ({pct});"
            f" exposed {MS.fmt(c.exposed_ns)} ms"
        )
    )
    print_named_table(
        console,
        "collectives by kind and process group (bandwidth: median over calls, GB/s)",
        ["kind", "group", "calls", "total ms", "exposed ms", "bytes", "algbw", "busbw"],
        [_collective_cells(g) for g in c.groups()[:top]],
    )


def _collective_cells(g: CollectiveGroup) -> list[Cell]:
    return [
        g.kind,
        g.group or "default",
        fmt_calls(len(g.collectives)),
        MS.fmt(g.total_ns),
        MS.fmt(g.exposed_ns),
        "-" if g.bytes is None else human_bytes(g.bytes),
        _bw(g.algbw),
        _bw(g.busbw),
    ]


def _bw(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_queues(p: Profile, console: Console) -> None:
    q = p.trace.queues
    if q is None:
        return
    print_named_table(
        console,
        f"device queues (ops launched, not yet started; a launch blocks at {q.queue_limit})",
        ["stream", "ops", "max queue", "mean queue", "full ms"],
        [
            [f"{s.device}:{s.stream}", fmt_calls(s.ops), str(s.max_length), f"{s.mean_length:.2f}",
             MS.fmt(s.full_ns)]
            for s in q.streams
        ],
    )  # fmt: skip
    parts = [
        f"host blocked {MS.fmt(q.blocked_ns)} ms (sync {MS.fmt(q.sync_ns)},"
        f" launches on a full queue {MS.fmt(q.full_launch_ns)})",
        _short_line(q),
        f"{q.delay_outliers} launch delays above {US.fmt(q.delay_threshold_ns)} us",
    ]
    console.print(Text("; ".join(parts)))
    if q.outliers:
        worst = ", ".join(f"{o.name} {US.fmt(o.delay_ns)} us" for o in q.outliers[:3])
        console.print(Text(f"  longest launch delays: {worst}", style="dim"))


def print_memory_timeline(p: Profile, console: Console) -> None:
    m = p.trace.memory_timeline
    if m is None:
        return
    for d in m.devices:
        where = [f"in {d.peak_op}" if d.peak_op else "outside ops"]
        if d.peak_layer:
            where.append(f"layer {d.peak_layer}")
        if d.peak_step:
            where.append(d.peak_step)
        console.print(
            Text(
                f"memory timeline {d.device}: peak {human_bytes(d.peak_bytes)} allocated at"
                f" {MS.fmt(d.peak_ns)} ms, {', '.join(where)} ({d.events} events)"
            )
        )


def print_stragglers(run: Run, console: Console) -> None:
    s = run.stragglers
    if s is None:
        return
    head = f"stragglers: {s.matched} collectives matched across ranks"
    if s.median_skew_ns is not None:
        head += f"; median arrival skew {MS.fmt(s.median_skew_ns)} ms"
    if s.straggler is not None:
        head += f"; rank {s.straggler} arrives last most often"
    console.print(Text(head))
    print_named_table(
        console,
        "arrivals per rank (clocks aligned on collective ends)",
        ["rank", "collectives", "unmatched", "last", "median late ms", "compute before ms",
         "clock offset us", f"median {run.step_word} ms"],
        [
            [str(r.rank), fmt_calls(r.collectives), fmt_calls(r.unmatched), fmt_calls(r.last),
             MS.fmt(r.median_late_ns), MS.fmt(r.prior_compute_ns), US.fmt(r.clock_offset_ns),
             MS.fmt(r.median_step_ns)]
            for r in s.ranks
        ],
    )  # fmt: skip
    for note in s.notes:
        console.print(Text.assemble(("note: ", "yellow"), note.text))


def _short_line(q: Queues) -> str:
    """The ops shorter than their launch call; a graph launch counts once, its replayed
    ops summed (many ops from one call: each against the call would read launch-bound)."""
    if not q.graph_launches:
        return (
            f"{q.short_kernels} of {q.kernels} device ops shorter than their launch call"
            f" ({MS.fmt(q.short_kernel_ns)} ms)"
        )
    graphs = (
        "1 graph launch counted once against its"
        if q.graph_launches == 1
        else f"{q.graph_launches} graph launches counted once each against their"
    )
    return (
        f"{q.short_kernels} of {q.kernels} launches shorter than their call"
        f" ({MS.fmt(q.short_kernel_ns)} ms; {graphs} {q.graph_ops:,} replayed ops summed)"
    )
