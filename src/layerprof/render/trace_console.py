"""Console tables of a Profile's trace sections (steps, GPU time, kernels, launches,
memory; the step breakdown, collectives, queues and memory timeline) and of a Run's
ranks side by side (steps, stragglers). Reads the pivot, never computes."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.profile import Profile, Run
from layerprof.render.columns import Cell, Col, Row, Shrink, Step, print_table
from layerprof.render.terminal import escape_controls, escaping
from layerprof.sections import BREAKDOWN_PARTS, Collective, StepBreakdown
from layerprof.units import MS, US, fmt_calls, human_bytes

_NAME_CAP = 60  # kernel and step names beyond this are abbreviated in the middle
# names give way to the numbers: down to 24 cells, then to 12
_NAME_STEPS: tuple[Step, ...] = (Shrink(("name",), 24), Shrink(("name",), 12))


def _print_table(
    console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[Cell]]
) -> None:
    """A table whose first column is a name (abbreviated as the width needs) and
    whose other columns are numbers or one-word kinds (never cut)."""
    cols = [Col(columns[0], key="name", cap=_NAME_CAP)]
    cols += [Col(c, number=True) for c in columns[1:]]

    def frame() -> Table:
        return Table(
            title=Text(escape_controls(title)),
            box=box.SIMPLE_HEAD,
            title_justify="left",
            title_style="bold",
        )

    print_table(console, frame, cols, [Row(tuple(r)) for r in rows], steps=_NAME_STEPS)


def print_run_header(run: Run, console: Console) -> None:
    with escaping(console) as out:
        out.print(
            Text.assemble(
                # a Run is what analyze read, or the rank profiles `report` merged
                ("layerprof ", "bold"),
                run.path,
                f"  ({len(run.ranks)} rank{'s' if len(run.ranks) != 1 else ''};"
                f" rank from {run.rank_source})",
            )
        )
        for why in run.skipped:
            out.print(Text.assemble(("skipped: ", "yellow"), why))
        for why in run.failed:
            out.print(Text.assemble(("failed: ", "red"), why))
        for note in run.notes:
            out.print(Text.assemble(("note: ", "yellow"), note.text))


def print_rank_rule(p: Profile, console: Console) -> None:
    file = p.source.file if p.source is not None else p.meta.model
    with escaping(console) as out:
        out.rule(Text(escape_controls(f"rank {p.rank}: {file}")))


def print_sections(p: Profile, console: Console, *, top: int = 10) -> None:
    """Steps, GPU time, memcpy, kernels, launch overhead and memory, where present."""
    with escaping(console) as out:
        _print_steps(p, out)
        _print_devices(p, out)
        _print_kernels(p, out, top)
        _print_launches(p, out, top)
        _print_memory(p, out, top)
        print_distributed(p, out, top=top)


def _print_steps(p: Profile, console: Console) -> None:
    steps = p.steps
    if steps is None:
        return
    summary = p.latency
    head = f"step time: {steps.definition}"
    if summary is None:
        console.print(Text(f"{head}: no complete step"))
        return
    console.print(
        Text(
            f"{head}: median {MS.fmt(summary.median)} ms, mean {MS.fmt(summary.mean)},"
            f" p90 {MS.fmt(summary.p90)}, min {MS.fmt(summary.min)}, max {MS.fmt(summary.max)}"
            f" (n={summary.n})"
        )
    )
    if len(steps.steps) <= 12:
        line = ", ".join(
            f"{s.name} {MS.fmt(s.dur_ns)}{' (cut off)' if s.cut_off else ''}" for s in steps.steps
        )
        console.print(Text(f"  {line}", style="dim"))


def _print_devices(p: Profile, console: Console) -> None:
    if not p.devices:
        return
    names = p.source.device_names if p.source is not None else ()
    rows: list[list[Cell]] = []
    for d in p.devices:
        name = str(d.device)
        if 0 <= d.device < len(names):
            name = f"{d.device} {names[d.device]}"
        rows.append(
            [name, MS.fmt(d.busy_ns), MS.fmt(d.window_ns), MS.fmt(d.idle_ns), f"{d.utilization:.1%}",
             MS.fmt(d.kernel_ns), MS.fmt(d.memcpy_ns), MS.fmt(d.memset_ns), MS.fmt(d.host_wait_ns),
             MS.fmt(d.short_gap_ns), MS.fmt(d.other_idle_ns)]
        )  # fmt: skip
    _print_table(
        console,
        "GPU time (busy = union of kernel/memcpy/memset; idle and utilization inside the steps)",
        ["device", "busy ms", "window ms", "idle ms", "util", "kernel ms", "memcpy ms",
         "memset ms", "idle: host wait", "short gaps", "other"],
        rows,
    )  # fmt: skip
    if p.memcpy:
        _print_table(
            console,
            "memcpy / memset",
            ["kind", "calls", "total ms", "bytes", "GB/s"],
            [
                [m.kind, fmt_calls(m.calls), MS.fmt(m.total_ns), human_bytes(m.bytes),
                 "-" if m.gb_per_s is None else f"{m.gb_per_s:.2f}"]
                for m in p.memcpy
            ],
        )  # fmt: skip


def _print_kernels(p: Profile, console: Console, top: int) -> None:
    if not p.kernels:
        return
    _print_table(
        console,
        f"top {min(top, len(p.kernels))} of {len(p.kernels)} kernels (summed over the trace)",
        ["kernel", "kind", "calls", "total ms", "mean us", "min us", "max us"],
        [
            [k.name, k.kind, fmt_calls(k.calls), MS.fmt(k.total_ns), US.fmt(k.mean_ns), US.fmt(k.min_ns),
             US.fmt(k.max_ns)]
            for k in p.kernels[:top]
        ],
    )  # fmt: skip
    kinds = ", ".join(f"{k.kind} {MS.fmt(k.total_ns)} ms ({k.calls})" for k in p.kinds)
    console.print(Text(f"kernel kinds: {kinds}"))


def _print_launches(p: Profile, console: Console, top: int) -> None:
    launch = p.launches
    if launch is None:
        return
    # These are the runtime calls that launched GPU work: kernels, copies and
    # memsets alike (a blocking cudaMemcpyAsync counts its whole wait here).
    parts = [
        f"launch overhead: {launch.launches} runtime calls that launched GPU work"
        f" (kernels, copies, memsets), {MS.fmt(launch.call_total_ns)} ms"
    ]
    if launch.call_ns is not None:
        parts.append(f"call median {US.fmt(launch.call_ns.median)} us")
    if launch.delay_ns is not None:
        parts.append(
            f"launch delay (kernel start - launch end) median {US.fmt(launch.delay_ns.median)} us,"
            f" p90 {US.fmt(launch.delay_ns.p90)} us"
        )
    parts.append(f"sync {MS.fmt(launch.sync_ns)} ms")
    console.print(Text("; ".join(parts)))
    if launch.runtime:
        runtime = ", ".join(
            f"{x.name} {MS.fmt(x.total_ns)} ms ({x.calls})" for x in launch.runtime[: min(top, 5)]
        )
        console.print(Text(f"  runtime calls: {runtime}", style="dim"))


def _print_memory(p: Profile, console: Console, top: int) -> None:
    m = p.memory
    if m is None:
        return
    peaks = ", ".join(f"{d.device} peak {human_bytes(d.peak_allocated)}" for d in m.devices)
    console.print(Text(f"memory: {peaks}"))
    if m.top_ops:
        allocs = ", ".join(f"{a.op} {human_bytes(a.bytes)}" for a in m.top_ops[: min(top, 5)])
        console.print(Text(f"  allocated most: {allocs}", style="dim"))


def print_ranks(run: Run, console: Console, top: int) -> None:
    """Step times per rank side by side, and each rank's communication and compute."""
    cross = run.cross
    if cross is None:
        if run.stragglers is not None:  # saved live profiles: collectives, no steps
            with escaping(console) as out:
                out.rule(Text("ranks side by side"))
                _print_stragglers(run, out)
        return
    with escaping(console) as out:
        out.rule(Text("ranks side by side"))
        ranks = [p.rank for p in run.ranks]
        steps: list[list[Cell]] = [
            [step.name,
             *[MS.fmt(dict(step.ns_by_rank).get(r)) if r is not None else "-" for r in ranks],
             str(step.slowest_rank), MS.fmt(step.spread_ns)]
            for step in cross.steps[: max(top, 20)]
        ]  # fmt: skip
        _print_table(
            out,
            "step time per rank (ms)",
            ["step", *[f"rank {r}" for r in ranks], "slowest", "spread"],
            steps,
        )
        kernels = cross.kernel_time  # CPU-only traces: the step breakdown has the rest
        _print_table(
            out,
            "per rank" + ("" if kernels else " (no device kernels: see the step breakdown)"),
            ["rank", f"median {run.step_word} ms"]
            + (["kernel communication ms", "kernel compute ms"] if kernels else []),
            [
                [str(line.rank), MS.fmt(line.median_step_ns)]
                + ([MS.fmt(line.communication_ns), MS.fmt(line.compute_ns)] if kernels else [])
                for line in cross.ranks
            ],
        )
        if cross.slowest_rank is not None:
            out.print(Text(f"slowest rank by median {run.step_word}: {cross.slowest_rank}"))
        _print_stragglers(run, out)


# ---- distributed sections (trace/breakdown, comm, queue, memtimeline, stragglers) ----

_STEP_ROWS = 12  # steps listed one by one; the total row sums them all


def print_distributed(p: Profile, console: Console, *, top: int = 10) -> None:
    """Step breakdown, collectives, queues and the memory timeline, where present."""
    _print_breakdown(p, console)
    _print_communication(p, console, top)
    _print_queues(p, console)
    _print_memory_timeline(p, console)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def _print_breakdown(p: Profile, console: Console) -> None:
    b = p.breakdown
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
        _print_table(
            console,
            f"step time breakdown, {where} (ms; the parts add up to the wall time{more}{zero})",
            ["step", "wall", *[_SHORT.get(part, part) for part in shown]],
            cells,
        )


_SHORT = {"communication": "comm", "dataloader": "loader"}


def _breakdown_cells(s: StepBreakdown, shown: list[str]) -> list[Cell]:
    parts = dict(s.parts())
    return [s.step, MS.fmt(s.wall_ns), *[MS.fmt(parts[part]) for part in shown]]


def _print_communication(p: Profile, console: Console, top: int) -> None:
    c = p.communication
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
    groups: dict[tuple[str, str], list[Collective]] = {}
    for x in c.collectives:
        groups.setdefault((x.kind, x.group), []).append(x)
    rows = sorted(groups.items(), key=lambda kv: -sum(x.dur_ns for x in kv[1]))[:top]
    _print_table(
        console,
        "collectives by kind and process group (bandwidth: median over calls, GB/s)",
        ["kind", "group", "calls", "total ms", "exposed ms", "bytes", "algbw", "busbw"],
        [_collective_cells(kind, group, xs) for (kind, group), xs in rows],
    )


def _collective_cells(kind: str, group: str, xs: list[Collective]) -> list[Cell]:
    sizes = [x.bytes for x in xs if x.bytes is not None]
    return [
        kind,
        group or "default",
        fmt_calls(len(xs)),
        MS.fmt(sum(x.dur_ns for x in xs)),
        MS.fmt(sum(x.exposed_ns for x in xs)),
        human_bytes(sum(sizes)) if sizes else "-",
        _median_bw([x.algbw for x in xs]),
        _median_bw([x.busbw for x in xs]),
    ]


def _median_bw(values: list[float | None]) -> str:
    known = sorted(v for v in values if v is not None)
    if not known:
        return "-"
    mid = len(known) // 2
    value = known[mid] if len(known) % 2 else (known[mid - 1] + known[mid]) / 2
    return f"{value:.2f}"


def _print_queues(p: Profile, console: Console) -> None:
    q = p.queues
    if q is None:
        return
    _print_table(
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
        f"{q.short_kernels} of {q.kernels} device ops shorter than their launch call"
        f" ({MS.fmt(q.short_kernel_ns)} ms)",
        f"{q.delay_outliers} launch delays above {US.fmt(q.delay_threshold_ns)} us",
    ]
    console.print(Text("; ".join(parts)))
    if q.outliers:
        worst = ", ".join(f"{o.name} {US.fmt(o.delay_ns)} us" for o in q.outliers[:3])
        console.print(Text(f"  longest launch delays: {worst}", style="dim"))


def _print_memory_timeline(p: Profile, console: Console) -> None:
    m = p.memory_timeline
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


def _print_stragglers(run: Run, console: Console) -> None:
    s = run.stragglers
    if s is None:
        return
    head = f"stragglers: {s.matched} collectives matched across ranks"
    if s.median_skew_ns is not None:
        head += f"; median arrival skew {MS.fmt(s.median_skew_ns)} ms"
    if s.straggler is not None:
        head += f"; rank {s.straggler} arrives last most often"
    console.print(Text(head))
    _print_table(
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
