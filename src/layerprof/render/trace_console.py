"""Rich console report of a TraceReport (reads the analysis, never computes it)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.sections import STEP_DEFINITIONS
from layerprof.trace.report import RankReport, TraceReport

_NS_PER_MS = 1_000_000
_NAME_WIDTH = 60


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / _NS_PER_MS:,.3f}"


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1000:,.1f}"


def _short(name: str, width: int = _NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:,.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:,.1f} GiB"  # pragma: no cover


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right", overflow="fold")
    return table


def print_trace_report(report: TraceReport, console: Console, *, top: int = 10) -> None:
    """Steps, devices, top ops/kernels, launch overhead, memory, ranks and notes."""
    console.print(
        Text.assemble(
            ("layerprof analyze ", "bold"),
            report.path,
            f"  ({len(report.ranks)} rank{'s' if len(report.ranks) != 1 else ''};"
            f" rank from {report.rank_source})",
        )
    )
    for why in report.skipped:
        console.print(Text.assemble(("skipped: ", "yellow"), why))
    for rank in report.ranks:
        _print_rank(rank, console, top)
    if report.cross is not None:
        _print_ranks(report, console, top)


def _print_rank(r: RankReport, console: Console, top: int) -> None:
    console.rule(f"rank {r.rank}: {r.file}")
    _print_steps(r, console)
    _print_devices(r, console)
    _print_ops(r, console, top)
    _print_kernels(r, console, top)
    _print_launches(r, console, top)
    _print_tree(r, console, top)
    _print_memory(r, console, top)
    for note in r.notes:
        console.print(Text(f"note: {note}", style="yellow"))


def _print_steps(r: RankReport, console: Console) -> None:
    summary = r.step_summary
    head = f"step time: {STEP_DEFINITIONS.get(r.steps.source, r.steps.source)}"
    if summary is None:
        console.print(f"{head}: no complete step")
        return
    console.print(
        f"{head}: median {_ms(summary.median)} ms, mean {_ms(summary.mean)},"
        f" p90 {_ms(summary.p90)}, min {_ms(summary.min)}, max {_ms(summary.max)}"
        f" (n={summary.n})"
    )
    if len(r.steps.steps) <= 12:
        line = ", ".join(
            f"{s.name} {_ms(s.dur_ns)}{' (cut off)' if s.cut_off else ''}" for s in r.steps.steps
        )
        console.print(Text(f"  {line}", style="dim"))


def _print_devices(r: RankReport, console: Console) -> None:
    if not r.devices:
        return
    table = _table(
        "GPU time (busy = union of kernel/memcpy/memset; idle and utilization inside the steps)",
        "device",
        "busy ms",
        "window ms",
        "idle ms",
        "util",
        "kernel ms",
        "memcpy ms",
        "memset ms",
        "idle: host wait",
        "short gaps",
        "other",
    )
    for d in r.devices:
        name = str(d.device)
        if 0 <= d.device < len(r.device_names):
            name = f"{d.device} {r.device_names[d.device]}"
        table.add_row(
            name,
            _ms(d.busy_ns),
            _ms(d.window_ns),
            _ms(d.idle_ns),
            f"{d.utilization:.1%}",
            _ms(d.kernel_ns),
            _ms(d.memcpy_ns),
            _ms(d.memset_ns),
            _ms(d.host_wait_ns),
            _ms(d.short_gap_ns),
            _ms(d.other_idle_ns),
        )
    console.print(table)
    if r.memcpy:
        mem = _table("memcpy / memset", "kind", "calls", "total ms", "bytes", "GB/s")
        for m in r.memcpy:
            gbps = m.gb_per_s
            mem.add_row(
                m.kind,
                str(m.calls),
                _ms(m.total_ns),
                _bytes(m.bytes),
                "-" if gbps is None else f"{gbps:.2f}",
            )
        console.print(mem)


def _print_ops(r: RankReport, console: Console, top: int) -> None:
    if not r.ops:
        return
    cols = ["op", "calls", "total ms", "self ms"]
    if r.has_device:
        cols.append("device ms")
    table = _table(f"top {min(top, len(r.ops))} of {len(r.ops)} operators (host total)", *cols)
    for o in r.ops[:top]:
        name = o.name if o.input_shapes is None else f"{o.name} [{o.input_shapes}]"
        row = [_short(name), str(o.calls), _ms(o.total_ns), _ms(o.self_ns)]
        if r.has_device:
            row.append(_ms(o.device_ns))
        table.add_row(*row)
    console.print(table)


def _print_kernels(r: RankReport, console: Console, top: int) -> None:
    if not r.kernels:
        return
    table = _table(
        f"top {min(top, len(r.kernels))} of {len(r.kernels)} kernels",
        "kernel",
        "kind",
        "calls",
        "total ms",
        "mean us",
        "min us",
        "max us",
    )
    for k in r.kernels[:top]:
        table.add_row(
            _short(k.name),
            k.kind,
            str(k.calls),
            _ms(k.total_ns),
            _us(k.mean_ns),
            _us(k.min_ns),
            _us(k.max_ns),
        )
    console.print(table)
    kinds = ", ".join(f"{k.kind} {_ms(k.total_ns)} ms ({k.calls})" for k in r.kinds)
    console.print(f"kernel kinds: {kinds}")


def _print_launches(r: RankReport, console: Console, top: int) -> None:
    launch = r.launches
    if launch is None:
        return
    # These are the runtime calls that launched GPU work: kernels, copies and
    # memsets alike (a blocking cudaMemcpyAsync counts its whole wait here).
    parts = [
        f"launch overhead: {launch.launches} runtime calls that launched GPU work"
        f" (kernels, copies, memsets), {_ms(launch.call_total_ns)} ms"
    ]
    if launch.call_ns is not None:
        parts.append(f"call median {_us(launch.call_ns.median)} us")
    if launch.delay_ns is not None:
        parts.append(
            f"launch delay (kernel start - launch end) median {_us(launch.delay_ns.median)} us,"
            f" p90 {_us(launch.delay_ns.p90)} us"
        )
    parts.append(f"sync {_ms(launch.sync_ns)} ms")
    console.print("; ".join(parts))
    if launch.runtime:
        runtime = ", ".join(
            f"{x.name} {_ms(x.total_ns)} ms ({x.calls})" for x in launch.runtime[: min(top, 5)]
        )
        console.print(Text(f"  runtime calls: {runtime}", style="dim"))


def _print_tree(r: RankReport, console: Console, top: int) -> None:
    rows = r.modules or r.annotations
    if not rows:
        return
    sources = {
        "layerprof_layer": "layers (layerprof layer spans)",
        "nn.Module": "modules (nn.Module spans)",
    }
    what = (
        sources.get(r.module_source or "", "modules")
        if r.modules
        else "record_function annotations"
    )
    cols = ["path", "calls", "total ms", "self ms"]
    if r.has_device:
        cols += ["device ms"]
    table = _table(f"{what}, summed over the trace", *cols)
    limit = max(top * 3, 30)
    depths: dict[str, int] = {}
    for row in rows[:limit]:
        if r.module_source == "layerprof_layer":
            # qualified paths, "" = root; containers that never ran (ModuleList) are
            # not in a trace, so indent by the ancestors present and show full paths
            parent = row.parent
            depth = (
                depths[parent] + 1
                if parent is not None and parent in depths
                else int(row.path != "")
            )
            depths[row.path] = depth
            label = "  " * depth + (row.path or row.name)
        else:
            depth = row.path.count(".")
            label = "  " * depth + (row.name if depth else row.path)
        cells = [_short(label), str(row.calls), _ms(row.total_ns), _ms(row.self_ns)]
        if r.has_device:
            cells.append(_ms(row.device_ns))
        table.add_row(*cells)
    console.print(table)
    if len(rows) > limit:
        console.print(Text(f"  ... {len(rows) - limit} more rows in --json", style="dim"))


def _print_memory(r: RankReport, console: Console, top: int) -> None:
    m = r.memory
    if m is None:
        return
    peaks = ", ".join(f"{d.device} peak {_bytes(d.peak_allocated)}" for d in m.devices)
    console.print(f"memory: {peaks}")
    if m.top_ops:
        allocs = ", ".join(f"{a.op} {_bytes(a.bytes)}" for a in m.top_ops[: min(top, 5)])
        console.print(Text(f"  allocated most: {allocs}", style="dim"))


def _print_ranks(report: TraceReport, console: Console, top: int) -> None:
    cross = report.cross
    if cross is None:
        return
    console.rule("ranks side by side")
    ranks = [r.rank for r in report.ranks]
    table = _table(
        "step time per rank (ms)", "step", *[f"rank {r}" for r in ranks], "slowest", "spread"
    )
    for step in cross.steps[: max(top, 20)]:
        by_rank = dict(step.ns_by_rank)
        table.add_row(
            step.name,
            *[_ms(by_rank.get(r)) for r in ranks],
            str(step.slowest_rank),
            _ms(step.spread_ns),
        )
    console.print(table)
    lines = _table("per rank", "rank", "median step ms", "communication ms", "compute ms")
    for line in cross.ranks:
        lines.add_row(
            str(line.rank),
            _ms(line.median_step_ns),
            _ms(line.communication_ns),
            _ms(line.compute_ns),
        )
    console.print(lines)
    if cross.slowest_rank is not None:
        console.print(f"slowest rank by median step: {cross.slowest_rank}")
