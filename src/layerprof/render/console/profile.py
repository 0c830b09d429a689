"""The terminal report of a Profile: header, latency, overhead, layer tree, notes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.analysis.passes import pass_gap
from layerprof.render.console.columns import Cell, Col, Hide, Label, Row, Shrink, Step, print_table
from layerprof.render.console.compiled import print_compiled, row_marks
from layerprof.render.console.flops import (
    flop_cells,
    flop_columns,
    flop_header_lines,
    print_roofline,
)
from layerprof.render.console.inputs import signature_lines
from layerprof.render.terminal import escaping, make_console
from layerprof.units import (
    TimeUnit,
    fmt_calls,
    format_shapes,
    human_bytes,
    human_count,
    human_time,
    unit_for,
)

if TYPE_CHECKING:
    from layerprof.pivot.profile import LayerNode, LayerRow, Profile

SortKey = Literal["total", "self", "name", "order"]

__all__ = [
    "ConsoleOptions",
    "make_console",
    "print_header",
    "print_layer_table",
    "print_layers",
    "print_notes",
    "print_profile",
]

_SHAPES_CAP = 28  # a shapes cell beyond this is abbreviated even in a wide terminal


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
    """The layer report: header, layer tree (or top list), compiled summary and notes
    (the report's first sections; ``render.console.sections`` has them all)."""
    opts = ConsoleOptions(depth=depth, top=top, sort=sort, shapes=shapes)
    with escaping(console or make_console()) as out:
        print_header(profile, out)
        print_layers(profile, out, opts)
        print_compiled(out, profile)
        print_notes(profile, out)


def print_header(profile: Profile, console: Console) -> None:
    for line in header_lines(profile):
        console.print(line)


def print_layers(profile: Profile, console: Console, opts: ConsoleOptions) -> None:
    """The layer tree (or top list) and the roofline of its counted layers."""
    roots = profile.tree()
    if not any(r.row.calls for r in roots):
        console.print(Text("no layer timings recorded", style="dim"))
        return
    print_layer_table(console, profile, roots, opts)
    print_roofline(console, profile)
    if opts.depth is not None and opts.top is None:
        console.print(
            Text(
                f"layers deeper than level {opts.depth} are folded into their parents' totals",
                style="dim",
            )
        )


def print_notes(profile: Profile, console: Console) -> None:
    for note in profile.notes:
        console.print(Text.assemble(("note: ", "yellow"), note.text))


def header_lines(profile: Profile) -> list[Text | str]:
    m = profile.meta
    # Everything from the profile is user text (paths, names): Text, never markup.
    lines: list[Text | str] = [
        Text.assemble(("layerprof ", "bold"), (m.model, "bold cyan"), f"  {m.source}"),
        Text(
            # a trace knows no dtype and seldom its torch: say only what the source knows
            f"device {m.device}"
            + (f"  dtype {m.dtype}" if m.dtype else "")
            + (f"  torch {m.torch}" if m.torch else "")
            + (f"  threads {m.threads}" if m.threads else "")
            + (f"  mode {m.mode}" if m.mode else "")  # a trace may not say
            + (" +grad" if m.grad else "")
        ),
    ]
    sig_lines = signature_lines(profile)
    if m.inputs and not sig_lines:
        lines.append(Text("inputs " + "; ".join(m.inputs)))
    lines.extend(sig_lines)
    ops_line = _ops_line(m.extra.get("ops"))
    if ops_line:
        lines.append(Text(ops_line))
    lat = profile.latency
    if lat is not None:
        lines.append(
            Text.assemble(
                ("latency ", "bold"),
                (f"median {human_time(lat.median)}", "bold green"),
                # the interval findings and diff judge changes by (order statistics)
                f" (95% CI {human_time(lat.ci_low)}-{human_time(lat.ci_high)})"
                if lat.ci_low is not None and lat.ci_high is not None
                else "",
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
        cost = (
            f"{human_time(o.per_op_ns)} per recorded operator x {o.ops_per_forward:g}"
            f" + {human_time(o.per_call_ns)} per layer range x {o.calls_per_forward:g}"
            if o.method == "ops"
            else f"{human_time(o.per_call_ns)} per module call x {o.calls_per_forward:g} calls"
            if o.measured
            else f"per module call not measured (a busy machine), {o.calls_per_forward:g} calls"
        )
        lines.append(Text(f"overhead {cost}/forward{ratio}; {corrected}"))
    if pass_gap(profile) is not None:
        lines.append(
            Text(
                "the clean and the per-layer pass disagree beyond noise: the numbers are"
                " unreliable (see findings)",
                style="bold red",
            )
        )
    return lines + flop_header_lines(profile)


def _ops_line(ops: object) -> str | None:
    """Ops mode's profiler options and schedule, as the run's meta recorded them."""
    if not isinstance(ops, dict):
        return None
    options = [str(o) for o in ops.get("options") or () if isinstance(o, str)]
    line = "ops torch.profiler" + (" with " + ", ".join(options) if options else "")
    schedule = ops.get("schedule")
    if isinstance(schedule, dict):
        steps = "  ".join(f"{k} {schedule.get(k)}" for k in ("wait", "warmup", "active", "repeat"))
        line += f"; schedule {steps} (only active steps are recorded)"
    return line


def _sorted(nodes: list[LayerNode], sort: SortKey) -> list[LayerNode]:
    if sort == "total":
        return sorted(nodes, key=lambda n: -n.row.total_ns)
    if sort == "self":
        return sorted(nodes, key=lambda n: -n.row.self_ns)
    if sort == "name":
        return sorted(nodes, key=lambda n: n.row.path)
    return nodes


def print_layer_table(
    console: Console, profile: Profile, roots: list[LayerNode], opts: ConsoleOptions
) -> None:
    """The layer tree (or the ``top`` list), fitted to the console: time columns are
    never cut; shapes, then FLOPs/params, then type give way (``render.console.columns``)."""
    rows: list[tuple[Cell, LayerRow]] = []
    if opts.top is not None:
        flat = [n.row for r in roots for n in r.walk() if n.row.calls]
        # On CUDA, host time around an asynchronous launch is launch cost:
        # rank by what the GPU spent where it was measured.
        flat.sort(key=lambda r: -(r.device_self_ns if r.device_self_ns is not None else r.self_ns))
        rows = [(r.path or r.type, r) for r in flat[: opts.top]]
    else:
        _tree_rows(roots, opts, "", rows, top_level=True)
    marks = row_marks(profile)  # compiled rows whose time is partly an estimate
    rows = [(_marked(label, marks.get(r.path, "")), r) for label, r in rows]
    largest = max((r.total_ns for _, r in rows), default=0.0)
    root_total = sum(r.row.total_ns for r in roots)
    unit = unit_for(largest)
    columns = _columns([r for _, r in rows], unit, opts, flat=opts.top is not None)
    cells = [
        Row(_cells(label, r, unit, columns, flat=opts.top is not None, root_total=root_total),
            style=None if r.calls else "dim")
        for label, r in rows
    ]  # fmt: skip
    print_table(
        console, _frame, columns, cells, steps=_LAYER_STEPS,
        hint="--no-shapes" if any(c.name == "In" for c in columns) else None,
    )  # fmt: skip


def _marked(label: Cell, mark: str) -> Cell:
    if not mark:
        return label
    return Label(label.guides, label.name + mark) if isinstance(label, Label) else label + mark


def _tree_rows(
    nodes: list[LayerNode],
    opts: ConsoleOptions,
    prefix: str,
    out: list[tuple[Cell, LayerRow]],
    *,
    top_level: bool = False,
) -> None:
    """The tree's rows in display order (depth first, each level sorted), with their
    guide lines. An explicit stack, not recursion: a saved profile or a trace may hold
    a tree deeper than Python's recursion limit."""
    # (siblings, index of the next one, their prefix, whether they are the top level)
    stack: list[tuple[list[LayerNode], int, str, bool]] = [
        (_sorted(nodes, opts.sort), 0, prefix, top_level)
    ]
    while stack:
        siblings, i, pre, top = stack.pop()
        if i >= len(siblings):
            continue
        stack.append((siblings, i + 1, pre, top))
        node, last = siblings[i], i == len(siblings) - 1
        branch = "" if top else ("└─ " if last else "├─ ")
        out.append((Label(pre + branch, node.row.name), node.row))
        if opts.depth is not None and node.row.depth >= opts.depth:
            continue
        child_prefix = pre if top else pre + ("   " if last else "│  ")
        stack.append((_sorted(node.children, opts.sort), 0, child_prefix, False))


# How the layer table gives way, first to last: shapes shorten, type and name
# shorten, shapes go, FLOPs and params go, type and name shorten more, type and
# peak memory go. Times, calls and shares never do.
_LAYER_STEPS: tuple[Step, ...] = (
    Shrink(("In", "Out"), 20),
    Shrink(("Type",), 20),
    Shrink(("Layer",), 32),
    Hide(("In",)),  # a layer's input is mostly the output of the row above
    Hide(("Out",)),
    Shrink(("Type",), 14),
    Hide(("Uncounted",)),
    Hide(("FLOPs",)),
    Hide(("Params",)),
    Shrink(("Layer",), 20),
    Hide(("Type",)),
    Hide(("Peak mem",)),
    Shrink(("Layer",), 12),
)


def _frame() -> Table:
    return Table(show_edge=False, pad_edge=False, header_style="bold")


def _columns(
    rows: list[LayerRow], unit: TimeUnit, opts: ConsoleOptions, *, flat: bool
) -> list[Col]:
    host = "Host " if any(r.device_total_ns is not None for r in rows) else ""
    columns = [
        Col("Layer (top by self time)" if flat else "Layer", key="Layer"),
        Col("Type"),
        Col("Calls", number=True),
        Col(f"{host}Total {unit.name}", number=True, key="total"),
        Col(f"{host}Self {unit.name}", number=True, key="self"),
        Col("% self" if flat else "% total", number=True, key="share"),
    ]
    if host:
        columns += [
            Col(f"Device total {unit.name}", number=True, key="device total"),
            Col(f"Device self {unit.name}", number=True, key="device self"),
        ]
    if any(r.backward_total_ns is not None for r in rows):
        columns.append(Col(f"Bwd total {unit.name}", number=True, key="backward"))
    # columns no row has a value for are left out (a trace has no shapes or params)
    if opts.shapes and any(r.input_shapes or r.output_shapes for r in rows):
        columns += [Col("In", cap=_SHAPES_CAP), Col("Out", cap=_SHAPES_CAP)]
    if any(r.params for r in rows):
        columns.append(Col("Params", number=True))
    columns += flop_columns(rows)
    if any(r.peak_bytes is not None for r in rows):
        columns.append(Col("Peak mem", number=True))
    return columns


def _cells(
    label: Cell, r: LayerRow, unit: TimeUnit, columns: list[Col], *, flat: bool, root_total: float
) -> tuple[Cell, ...]:
    share = (r.self_ns if flat else r.total_ns) / root_total if root_total > 0 else 0.0
    values: dict[str, Cell] = {
        "Layer": label,
        "Type": r.type,
        "Calls": fmt_calls(r.calls) + ("~" if r.calls_vary else ""),
        "total": unit.fmt(r.total_ns) if r.calls or r.total_ns else "-",
        "self": unit.fmt(r.self_ns) if r.calls else "-",
        "share": f"{100 * share:.1f}" if r.total_ns else "-",
        "device total": unit.fmt(r.device_total_ns),
        "device self": unit.fmt(r.device_self_ns),
        "backward": unit.fmt(r.backward_total_ns),
        "In": format_shapes(r.input_shapes),
        "Out": format_shapes(r.output_shapes),
        "Params": human_count(r.params) if r.params else "",
        **flop_cells(r),
        "Peak mem": human_bytes(r.peak_bytes) if r.peak_bytes else "",
    }
    return tuple(values[c.name] for c in columns)
