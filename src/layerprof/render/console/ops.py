"""Operator tables for the terminal: a flat ``key_averages()``-like table and ops per layer.

Times are per iteration, as in ``OpStat``. Device columns appear only when
the ops carry device times (CUDA runs); on CPU they are absent, not zero. So
do FLOPs (``--with-flops``) and CPU / device memory (``--profile-memory``:
bytes allocated minus freed inside the op, with and without its children).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.pivot.records import OP_COLUMNS, OpStat, merge_layers, merge_shapes
from layerprof.render.console.columns import Col, Hide, Row, Shrink, Step, print_table
from layerprof.render.terminal import escape_controls, escaping
from layerprof.units import fmt_calls, human_bytes, human_count, unit_for

OpSort = Literal["self", "total", "device", "calls", "name"]


def render_ops(
    ops: Sequence[OpStat],
    console: Console,
    *,
    top: int | None = 10,
    sort: OpSort = "self",
    per_layer: bool = True,
    layers: int | None = 5,
    title: str = "operators",
    by_shape: bool = True,
) -> None:
    """Print the flat op table, then (``per_layer``) the top ops of the ``layers``
    layers whose ops take the most self time (None = every layer). Without
    ``by_shape``, rows recorded per input shapes are merged per op, each keeping the
    shapes that took the most time (``merge_shapes``)."""
    with escaping(console) as out:
        if not ops:
            out.print(Text(f"no {title} recorded", style="dim"))
            return
        table = merge_layers(ops, by_shape=by_shape)
        # the layer rows are medians over iterations too; say so (one outlier moves a mean)
        out.print(Text("op times: median per iteration; calls: mean per iteration", style="dim"))
        _print_op_table(out, table, top=top, sort=sort, title=f"{title} (all layers)")
        if not per_layer or all(o.layer is None for o in ops):
            return
        groups = by_layer(ops if by_shape else merge_shapes(ops), sort=sort)
        for layer, rows in groups[:layers] if layers is not None else groups:
            label = layer if layer else "(root)"
            _print_op_table(out, rows, top=top, sort=sort, title=f"{title} in {label}")


def by_layer(ops: Sequence[OpStat], *, sort: OpSort) -> list[tuple[str, list[OpStat]]]:
    """Ops grouped by layer, layers ordered by the summed self time of their ops."""
    groups: dict[str, list[OpStat]] = {}
    for o in ops:
        groups.setdefault(o.layer or "", []).append(o)
    ranked = sorted(groups.items(), key=lambda kv: -sum(o.self_ns for o in kv[1]))
    return [(layer, sort_ops(rows, sort)) for layer, rows in ranked]


def sort_ops(ops: Sequence[OpStat], sort: OpSort) -> list[OpStat]:
    keys = {
        "self": lambda o: (-o.self_ns, o.name),
        "total": lambda o: (-o.total_ns, o.name),
        "device": lambda o: (-(o.device_ns or 0), o.name),
        "calls": lambda o: (-o.calls, o.name),
        "name": lambda o: (0, o.name),
    }
    return sorted(ops, key=keys[sort])


_COLUMN_TITLES = {
    "flops": "FLOPs",
    "cpu_mem_bytes": "CPU Mem",
    "self_cpu_mem_bytes": "Self CPU Mem",
    "device_mem_bytes": "Device Mem",
    "self_device_mem_bytes": "Self Device Mem",
}


def _fmt_column(key: str, value: float | None) -> str:
    if value is None or (key == "flops" and not value):
        return ""  # no estimate (torch's table shows "--")
    return human_count(value) if key == "flops" else human_bytes(value)


# Op names give way to the numbers: shapes shorten, names shorten, shapes go, FLOPs go.
_OP_STEPS: tuple[Step, ...] = (
    Shrink(("Input shapes",), 20),
    Shrink(("Op",), 32),
    Hide(("Input shapes",)),
    Shrink(("Op",), 16),
    Hide(("FLOPs",)),  # memory columns stay: --profile-memory asked for them
)


def _print_op_table(
    console: Console, ops: Sequence[OpStat], *, top: int | None, sort: OpSort, title: str
) -> None:
    rows = sort_ops(ops, sort)
    shown = rows[:top] if top is not None else rows
    device = any(o.device_ns is not None for o in ops)
    shapes = any(o.input_shapes for o in ops)
    unit = unit_for(max((o.total_ns for o in shown), default=0))
    total_self = sum(o.self_ns for o in ops) or 1
    columns = [
        Col("Op"),
        Col("Calls", number=True),
        Col(f"Self {unit.name}", number=True),
        Col("Self %", number=True),
        Col(f"Total {unit.name}", number=True),
    ]
    if device:
        columns.append(Col(f"Device {unit.name}", number=True))
    extra = [k for k in OP_COLUMNS if any(getattr(o, k) is not None for o in ops)]
    columns += [Col(_COLUMN_TITLES[k], number=True) for k in extra]
    if shapes:
        columns.append(Col("Input shapes", cap=40))
    cells: list[Row] = []
    for o in shown:
        row = [
            o.name,
            fmt_calls(o.calls),
            unit.fmt(o.self_ns),
            f"{100 * o.self_ns / total_self:.1f}",
        ]
        row.append(unit.fmt(o.total_ns))
        if device:
            row.append(unit.fmt(o.device_ns))
        row += [_fmt_column(k, getattr(o, k)) for k in extra]
        if shapes:
            row.append(o.input_shapes or "")
        cells.append(Row(tuple(row)))
    more = len(rows) - len(shown)

    def frame() -> Table:
        return Table(
            title=Text(escape_controls(title)),
            title_justify="left",
            caption=Text(f"{more} more ops not shown (--top)") if more else None,
            show_edge=False,
            pad_edge=False,
            header_style="bold",
        )

    print_table(console, frame, columns, cells, steps=_OP_STEPS)
