"""The terminal report of a Profile: header, latency, overhead, layer tree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.render.units import TimeUnit, human_bytes, human_count, human_time, unit_for
from layerprof.shapes import format_shapes

if TYPE_CHECKING:
    from collections.abc import Sequence

    from layerprof.diagnose import Finding
    from layerprof.profile import LayerNode, LayerRow, Profile

SortKey = Literal["total", "self", "name", "order"]


@dataclass(frozen=True)
class ConsoleOptions:
    """``depth``: deepest tree level shown (None = all); ``top``: flat list of the
    N layers with most self time instead of the tree; ``sort``: order of
    siblings (``order`` = module definition order); ``shapes``: show shapes."""

    depth: int | None = None
    top: int | None = None
    sort: SortKey = "order"
    shapes: bool = True


def print_profile(
    profile: Profile,
    *,
    console: Console | None = None,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey = "order",
    shapes: bool = True,
) -> None:
    console = console or make_console()
    opts = ConsoleOptions(depth=depth, top=top, sort=sort, shapes=shapes)
    for line in header_lines(profile):
        console.print(line)
    roots = profile.tree()
    if not any(r.row.calls for r in roots):
        console.print("[dim]no layer timings recorded[/dim]")
    else:
        console.print(layer_table(profile, roots, opts))
        if depth is not None and top is None:
            console.print(
                f"[dim]layers deeper than level {depth} are folded into their parents' totals[/dim]"
            )
    for note in profile.notes:
        console.print(Text.assemble(("note: ", "yellow"), note))


def print_findings(findings: Sequence[Finding], console: Console) -> None:
    """Findings from layerprof.diagnose, most severe first."""
    if not findings:
        return
    console.print(Text("findings", style="bold"))
    style = {"high": "bold red", "warning": "yellow", "info": "cyan"}
    for f in findings:
        where = f" [{f.layer}]" if f.layer else ""
        console.print(
            Text.assemble((f"  {f.severity:<7} ", style[f.severity]), (f.title, "bold"), where)
        )
        console.print(Text(f"          {f.detail}"))
        if f.hint:
            console.print(Text(f"          try: {f.hint}", style="dim"))


def make_console(*, stderr: bool = False) -> Console:
    """A console that keeps wide tables on one line when output is piped to a file."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else 160
    return Console(stderr=stderr, width=width)


def header_lines(profile: Profile) -> list[Text | str]:
    m = profile.meta
    # Everything from the profile is user text (paths, names): Text, never markup.
    lines: list[Text | str] = [
        Text.assemble(("layerprof ", "bold"), (m.model, "bold cyan"), f"  {m.source}"),
        Text(
            f"device {m.device}  dtype {m.dtype}  torch {m.torch or '?'}"
            + (f"  threads {m.threads}" if m.threads else "")
            + f"  mode {m.mode}{' +grad' if m.grad else ''}"
        ),
    ]
    if m.inputs:
        lines.append(Text("inputs " + "; ".join(m.inputs)))
    lat = profile.latency
    if lat is not None:
        lines.append(
            Text.assemble(
                ("latency ", "bold"),
                (f"median {human_time(lat.median)}", "bold green"),
                f"  mean {human_time(lat.mean)}  p90 {human_time(lat.p90)}"
                f"  p99 {human_time(lat.p99)}  min {human_time(lat.min)}"
                f"  max {human_time(lat.max)}  std {human_time(lat.std)}  n={lat.n}",
                f"  (cold first call {human_time(profile.first_ns)}, warm-up {m.warmup})"
                if profile.first_ns is not None
                else "",
            )
        )
    o = profile.overhead
    if o is not None:
        ratio = (
            f", instrumented forward {o.instrumented_ns / o.clean_ns:.2f}x the clean one"
            if o.instrumented_ns and o.clean_ns
            else ""
        )
        corrected = "self times corrected for it" if o.corrected else "not corrected"
        lines.append(
            Text(
                f"overhead {human_time(o.per_call_ns)} per module call"
                f" x {o.calls_per_forward:g} calls/forward{ratio}; {corrected}"
            )
        )
    return lines


def _sorted(nodes: list[LayerNode], sort: SortKey) -> list[LayerNode]:
    if sort == "total":
        return sorted(nodes, key=lambda n: -n.row.total_ns)
    if sort == "self":
        return sorted(nodes, key=lambda n: -n.row.self_ns)
    if sort == "name":
        return sorted(nodes, key=lambda n: n.row.path)
    return nodes


def layer_table(profile: Profile, roots: list[LayerNode], opts: ConsoleOptions) -> Table:
    rows: list[tuple[str, LayerRow]] = []
    if opts.top is not None:
        flat = [n.row for r in roots for n in r.walk() if n.row.calls]
        # On CUDA, host time around an asynchronous launch is launch cost:
        # rank by what the GPU spent where it was measured.
        flat.sort(key=lambda r: -(r.device_self_ns if r.device_self_ns is not None else r.self_ns))
        rows = [(r.path or r.type, r) for r in flat[: opts.top]]
    else:
        _tree_rows(roots, opts, "", rows, top_level=True)
    largest = max((r.total_ns for _, r in rows), default=0.0)
    root_total = sum(r.row.total_ns for r in roots)
    return _table(rows, unit_for(largest), opts, flat=opts.top is not None, root_total=root_total)


def _tree_rows(
    nodes: list[LayerNode],
    opts: ConsoleOptions,
    prefix: str,
    out: list[tuple[str, LayerRow]],
    *,
    top_level: bool = False,
) -> None:
    nodes = _sorted(nodes, opts.sort)
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        branch = "" if top_level else ("└─ " if last else "├─ ")
        out.append((prefix + branch + node.row.name, node.row))
        if opts.depth is not None and node.row.depth >= opts.depth:
            continue
        child_prefix = prefix if top_level else prefix + ("   " if last else "│  ")
        _tree_rows(node.children, opts, child_prefix, out)


def _table(
    rows: list[tuple[str, LayerRow]],
    unit: TimeUnit,
    opts: ConsoleOptions,
    *,
    flat: bool,
    root_total: float,
) -> Table:
    device = any(r.device_total_ns is not None for _, r in rows)
    backward = any(r.backward_total_ns is not None for _, r in rows)
    host = "Host " if device else ""
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("Layer (top by self time)" if flat else "Layer", no_wrap=True)
    table.add_column("Type", no_wrap=True)
    table.add_column("Calls", justify="right", no_wrap=True)
    table.add_column(f"{host}Total {unit.name}", justify="right")
    table.add_column(f"{host}Self {unit.name}", justify="right")
    table.add_column("% self" if flat else "% total", justify="right")
    if device:
        table.add_column(f"Device total {unit.name}", justify="right")
        table.add_column(f"Device self {unit.name}", justify="right")
    if backward:
        table.add_column(f"Bwd total {unit.name}", justify="right")
    if opts.shapes:
        table.add_column("In", no_wrap=True, overflow="ellipsis", max_width=28)
        table.add_column("Out", no_wrap=True, overflow="ellipsis", max_width=28)
    table.add_column("Params", justify="right", no_wrap=True)
    flops = any(r.flops is not None for _, r in rows)
    if flops:
        table.add_column("FLOPs", justify="right", no_wrap=True)
    peaks = any(r.peak_bytes is not None for _, r in rows)
    if peaks:
        table.add_column("Peak mem", justify="right", no_wrap=True)
    for label, r in rows:
        share = (r.self_ns if flat else r.total_ns) / root_total if root_total > 0 else 0.0
        cells = [
            label,
            r.type,
            f"{r.calls:.3g}" + ("~" if r.calls_vary else ""),
            unit.fmt(r.total_ns) if r.calls or r.total_ns else "-",
            unit.fmt(r.self_ns) if r.calls else "-",
            f"{100 * share:.1f}" if r.total_ns else "-",
        ]
        if device:
            cells += [unit.fmt(r.device_total_ns), unit.fmt(r.device_self_ns)]
        if backward:
            cells.append(unit.fmt(r.backward_total_ns))
        if opts.shapes:
            cells += [format_shapes(r.input_shapes), format_shapes(r.output_shapes)]
        cells.append(human_count(r.params) if r.params else "")
        if flops:
            cells.append(human_count(r.flops) if r.flops else "")
        if peaks:
            cells.append(human_bytes(r.peak_bytes) if r.peak_bytes else "")
        # Text cells: layer names and shapes are user text, never rich markup.
        table.add_row(*(Text(c) for c in cells), style=None if r.calls else "dim")
    return table
