"""Console tables of a Profile's trace sections: steps, GPU time and memcpy, kernels,
launches, memory. Reads the pivot, never computes."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from layerprof.pivot.profile import Profile
from layerprof.render.console.columns import Cell, print_named_table
from layerprof.units import MS, US, fmt_calls, human_bytes


def print_steps(p: Profile, console: Console) -> None:
    steps = p.trace.steps
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


def print_devices(p: Profile, console: Console) -> None:
    if not p.trace.devices:
        return
    names = p.trace.source.device_names if p.trace.source is not None else ()
    rows: list[list[Cell]] = []
    for d in p.trace.devices:
        name = str(d.device)
        if 0 <= d.device < len(names):
            name = f"{d.device} {names[d.device]}"
        rows.append(
            [name, MS.fmt(d.busy_ns), MS.fmt(d.window_ns), MS.fmt(d.idle_ns), f"{d.utilization:.1%}",
             MS.fmt(d.kernel_ns), MS.fmt(d.memcpy_ns), MS.fmt(d.memset_ns), MS.fmt(d.host_wait_ns),
             MS.fmt(d.short_gap_ns), MS.fmt(d.other_idle_ns)]
        )  # fmt: skip
    print_named_table(
        console,
        "GPU time (busy = union of kernel/memcpy/memset; idle and utilization inside the steps,"
        " or their device work's own span where it ran outside them)",
        ["device", "busy ms", "window ms", "idle ms", "util", "kernel ms", "memcpy ms",
         "memset ms", "idle: host wait", "short gaps", "other"],
        rows,
    )  # fmt: skip
    if p.trace.memcpy:
        print_named_table(
            console,
            "memcpy / memset",
            ["kind", "calls", "total ms", "bytes", "GB/s"],
            [
                [m.kind, fmt_calls(m.calls), MS.fmt(m.total_ns), human_bytes(m.bytes),
                 "-" if m.gb_per_s is None else f"{m.gb_per_s:.2f}"]
                for m in p.trace.memcpy
            ],
        )  # fmt: skip


def print_kernels(p: Profile, console: Console, top: int) -> None:
    if not p.trace.kernels:
        return
    print_named_table(
        console,
        f"top {min(top, len(p.trace.kernels))} of {len(p.trace.kernels)} kernels (summed over the trace)",
        ["kernel", "kind", "calls", "total ms", "mean us", "min us", "max us"],
        [
            [k.name, k.kind, fmt_calls(k.calls), MS.fmt(k.total_ns), US.fmt(k.mean_ns), US.fmt(k.min_ns),
             US.fmt(k.max_ns)]
            for k in p.trace.kernels[:top]
        ],
    )  # fmt: skip
    kinds = ", ".join(f"{k.kind} {MS.fmt(k.total_ns)} ms ({k.calls})" for k in p.trace.kinds)
    console.print(Text(f"kernel kinds: {kinds}"))


def print_launches(p: Profile, console: Console, top: int) -> None:
    launch = p.trace.launches
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
        replayed = _replayed(p)
        runtime = ", ".join(
            f"{x.name} {MS.fmt(x.total_ns)} ms ({x.calls}"
            + (f"; replayed {replayed[x.name]} device ops)" if x.name in replayed else ")")
            for x in launch.runtime[: min(top, 5)]
        )
        console.print(Text(f"  runtime calls: {runtime}", style="dim"))


def _replayed(p: Profile) -> dict[str, int]:
    """Device ops replayed per graph launch call name (cudaGraphLaunch, hipGraphLaunch)."""
    out: dict[str, int] = {}
    for g in p.graph_replay.graphs if p.graph_replay is not None else ():
        out[g.call] = out.get(g.call, 0) + g.kernels
    return out


def print_allocator(p: Profile, console: Console, top: int) -> None:
    m = p.trace.memory
    if m is None:
        return
    peaks = ", ".join(f"{d.device} peak {human_bytes(d.peak_allocated)}" for d in m.devices)
    console.print(Text(f"memory: {peaks}"))
    if m.top_ops:
        allocs = ", ".join(f"{a.op} {human_bytes(a.bytes)}" for a in m.top_ops[: min(top, 5)])
        console.print(Text(f"  allocated most: {allocs}", style="dim"))
