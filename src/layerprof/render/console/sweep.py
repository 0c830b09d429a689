"""A Sweep in the console: one row per point, then how each layer's share of the forward
changes with the batch, per dtype and thread count."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from layerprof.pivot.sections.sweep import (
    BATCH_PAYS,
    FAILED,
    OK,
    Sweep,
    SweepPoint,
    decode_scaling,
    top_layers,
)
from layerprof.render.console.columns import Cell, Col, Hide, Row, Shrink, Step, print_table
from layerprof.render.terminal import escaping
from layerprof.units import human_bytes, human_si, human_time, unit_for

SHARE_LAYERS = 6
_NAME_STEPS: tuple[Step, ...] = (Shrink(("name",), 24), Shrink(("name",), 12))
# p50 and p99 bound the latency; p90 is the first to give way in a narrow terminal
_POINT_STEPS: tuple[Step, ...] = (Hide(("p90",)),)


def print_sweep(sweep: Sweep, console: Console, **_: object) -> None:
    with escaping(console) as out:
        out.print(_header(sweep))
        _points_table(sweep, out)
        if sweep.generate is not None:
            _generation_table(sweep, out)
        for (dtype, threads), points in sweep.groups.items():
            _shares_table(points, dtype, threads, out, root=sweep.model)
        for note in sweep.notes:
            out.print(Text.assemble(("note: ", "yellow"), note.text))
        for p in sweep.points:
            if p.status == FAILED and p.reason:
                out.print(Text.assemble((f"{p.status}: ", "yellow"), f"{p.label}: {p.reason}"))


def _header(sweep: Sweep) -> Text:
    return Text.assemble(
        ("layerprof sweep ", "bold"),
        (sweep.model, "bold cyan"),
        f"  device {sweep.device}  torch {sweep.torch or '?'}  inputs {'; '.join(sweep.inputs)}"
        f" (batch dimension {sweep.batch_dim})  {sweep.timed} per point",
    )


def _frame(title: str) -> Table:
    return Table(title=Text(title), box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")


def _points_table(sweep: Sweep, console: Console) -> None:
    points = sweep.points
    ok = [p for p in points if p.latency is not None]
    unit = unit_for(max((p.latency.p99 for p in ok if p.latency), default=0.0))
    # a dimension with one value on every point goes to the title, not a column of repeats
    dtypes = {p.dtype for p in points}
    threads = {p.threads for p in points}
    show_dtype, show_threads = len(dtypes) > 1, len(threads) > 1
    columns: list[Col] = []
    if any(p.prompt is not None for p in points):
        columns.append(Col("Prompt", number=True))
    if any(p.batch is not None for p in points):
        columns.append(Col("Batch", number=True))
    if show_dtype:
        columns.append(Col("Dtype", key="name"))
    if show_threads:
        columns.append(Col("Threads", number=True))
    columns += [
        Col(f"p50 {unit.name}", number=True), Col(f"p90 {unit.name}", number=True, key="p90"),
        Col(f"p99 {unit.name}", number=True), Col("samples/s", number=True),
        Col("FLOP/s", number=True), Col("Peak mem", number=True), Col("Status", number=True),
    ]  # fmt: skip
    rows = []
    for p in points:
        cells: list[Cell] = []
        if any(q.prompt is not None for q in points):
            cells.append(str(p.prompt) if p.prompt is not None else "-")
        if any(q.batch is not None for q in points):
            cells.append(str(p.batch) if p.batch is not None else "-")
        if show_dtype:
            cells.append(p.dtype)
        if show_threads:
            cells.append(str(p.threads) if p.threads is not None else "-")
        lat = p.latency
        cells += [
            unit.fmt(lat.median) if lat else "-",
            unit.fmt(lat.p90) if lat else "-",
            unit.fmt(lat.p99) if lat else "-",
            f"{p.samples_per_s:,.1f}" if p.samples_per_s is not None else "-",
            human_si(p.flops_per_s, "FLOP/s") if p.flops_per_s is not None else "-",
            human_bytes(p.peak_bytes) if p.peak_bytes is not None else "-",
            p.status,
        ]
        rows.append(Row(tuple(cells), style=None if p.status == OK else "dim"))
    fixed = [d for d in dtypes if not show_dtype] + [
        _threads_text(t) for t in threads if not show_threads and t is not None
    ]
    what = f"generate {sweep.generate} tokens" if sweep.generate is not None else "latency"
    title = f"{what} (clean pass), throughput and peak memory" + (
        f" ({', '.join(fixed)})" if fixed else ""
    )
    print_table(console, lambda: _frame(title), columns, rows, steps=_POINT_STEPS)


def _generation_table(sweep: Sweep, console: Console) -> None:
    """Time to first token, inter-token latency and the two rates per point; then, per
    row of batches, how decode tokens/s grows with the batch."""
    columns = [Col("Point", key="name"), Col("TTFT p50", number=True),
               Col("ITL p50", number=True), Col("ITL p90", number=True),
               Col("prefill tok/s", number=True), Col("decode tok/s", number=True)]  # fmt: skip
    rows = []
    for p in sweep.points:
        if p.status != OK:
            continue
        rows.append(
            Row(
                (
                    p.label,
                    human_time(p.ttft.median) if p.ttft else "-",
                    human_time(p.itl.median) if p.itl else "-",
                    human_time(p.itl.p90) if p.itl else "-",
                    f"{p.prefill_tokens_per_s:,.0f}" if p.prefill_tokens_per_s else "-",
                    f"{p.decode_tokens_per_s:,.0f}" if p.decode_tokens_per_s else "-",
                )
            )
        )
    title = f"generate {sweep.generate} new tokens: first token, inter-token latency, rates"
    print_table(console, lambda: _frame(title), columns, rows, steps=_NAME_STEPS)
    for points in sweep.batch_rows:
        measured, pays = decode_scaling(points)
        if pays is None:
            continue
        steps = ", ".join(f"batch {p.batch}: {p.decode_tokens_per_s:,.0f}" for p in measured)
        console.print(
            Text.assemble(
                ("decode tokens/s by batch", "bold"),
                f" ({points[0].row_label}): {steps}; batching pays up to batch {pays} (each doubling"
                f" at least {BATCH_PAYS:g}x the tokens/s)",
            )
        )


def _threads_text(threads: int) -> str:
    return f"{threads} thread{'s' if threads != 1 else ''}"


def _shares_table(
    points: tuple[SweepPoint, ...],
    dtype: str,
    threads: int | None,
    console: Console,
    *,
    root: str,
) -> None:
    measured, layers = top_layers(points, SHARE_LAYERS)
    if not measured:
        return
    heads = [p.in_group for p in measured]
    columns = [Col("Layer (self time)", key="name", cap=40)]
    columns += [Col(h, number=True) for h in heads]
    if len(measured) > 1:
        columns.append(Col("change", number=True))
    rows = []
    for path in layers:
        shares = [dict(p.shares).get(path, 0.0) for p in measured]
        cells: list[Cell] = [path or root, *(f"{100 * s:.1f}%" for s in shares)]
        if len(measured) > 1:
            cells.append(f"{100 * (shares[-1] - shares[0]):+.1f} pt")
        rows.append(Row(tuple(cells)))
    where = dtype + (f", {_threads_text(threads)}" if threads else "")
    title = f"share of the forward by layer ({where})"
    print_table(console, lambda: _frame(title), columns, rows, steps=_NAME_STEPS)
