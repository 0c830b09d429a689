"""FLOPs in the console: the header lines, the layer table's FLOPs/uncounted cells, the roofline.

Labels, once and the same everywhere: FLOPs count 1 multiply-accumulate as 2;
``ew`` marks a layer whose counted work is elementwise (counted per element),
``lookup`` and ``moves`` a layer of 0 FLOPs by nature (embedding lookups, data
movement). ``Uncounted`` is the share of a layer's op time in ops without a
usable formula: its FLOPs are not 0, they are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from layerprof.analysis.roofline import Roofline, RooflinePoint, intensity_text, roofline
from layerprof.render.console.columns import Cell, Col, Hide, Row, Shrink, Step, print_table
from layerprof.units import human_bytes, human_count, human_si, human_time

if TYPE_CHECKING:
    from rich.console import Console

    from layerprof.pivot.profile import LayerRow, Profile
    from layerprof.pivot.sections.flops import FlopSummary, Peak

#: Short labels of a layer's kind of counted work, for the FLOPs cell.
LABELS = {"elementwise": "ew", "lookup": "lookup", "data movement": "moves"}
_ROOFLINE_ROWS = 10
_NAME_CAP = 40
_STEPS: tuple[Step, ...] = (
    Shrink(("name",), 24), Hide(("Bytes",)), Shrink(("name",), 12), Hide(("FLOPs",)),
)  # fmt: skip


def flop_header_lines(profile: Profile) -> list[Text]:
    """The model's counted FLOPs, coverage, top uncounted ops and the peak (none without)."""
    s = profile.flops
    if s is None:
        return []
    lines = [Text.assemble(("FLOPs ", "bold"), _totals(s))]
    if s.uncounted_ops:
        ops = ", ".join(
            f"{op.name} {human_time(op.time_ns)} x{op.calls} ({op.reason})"
            for op in s.uncounted_ops[:3]
        )
        more = f" and {len(s.uncounted_ops) - 3} more" if len(s.uncounted_ops) > 3 else ""
        lines.append(Text.assemble(("uncounted ", "yellow"), ops + more))
    if s.peak is not None:
        lines.append(Text(f"peak {peak_text(s.peak)}"))
    return lines


def _totals(s: FlopSummary) -> str:
    text = f"{human_count(s.forward)} forward"
    if s.backward is not None:
        text += f" + {human_count(s.backward)} backward"
    if s.forward:
        text += f", {100 * s.elementwise / s.forward:.0f}% elementwise (ew)"
    text += "; 1 multiply-accumulate = 2 FLOPs"
    if s.coverage is not None:
        text += f"; coverage {100 * s.coverage:.1f}% of op time"
    return text


def peak_text(peak: Peak) -> str:
    rates = [human_si(peak.flops_per_s, "FLOP/s") if peak.flops_per_s else "FLOP/s unknown"]
    rates.append(human_si(peak.bytes_per_s, "B/s") if peak.bytes_per_s else "B/s unknown")
    ridge = f", ridge {peak.ridge:.1f} FLOP/B" if peak.ridge is not None else ""
    # a fresh measurement's detail already begins "measured on ...": say it once
    said = peak.detail if peak.detail.startswith(peak.source) else f"{peak.source}: {peak.detail}"
    return f"{', '.join(rates)}{ridge} ({said})"


# ---- the layer table's cells ---------------------------------------------------------------


def flop_columns(rows: Sequence[LayerRow]) -> list[Col]:
    """``FLOPs`` when counted; ``Uncounted`` when some layer has uncounted op time."""
    columns: list[Col] = []
    if any(r.flops is not None for r in rows):
        columns.append(Col("FLOPs", number=True))
    if any(_uncounted(r) for r in rows):
        columns.append(Col("Uncounted", number=True))
    return columns


def flop_cells(r: LayerRow) -> dict[str, Cell]:
    return {"FLOPs": flops_cell(r), "Uncounted": _share(_uncounted(r))}


def flops_cell(r: LayerRow) -> str:
    detail = r.flop_detail
    if r.flops is None:
        return ""
    if detail is not None and detail.op_ns and detail.uncounted_ns == detail.op_ns:
        return "uncounted"
    label = LABELS.get(detail.label or "") if detail is not None else None
    if not r.flops and label is None:
        return ""
    return f"{human_count(r.flops)} {label}" if label else human_count(r.flops)


def _uncounted(r: LayerRow) -> float | None:
    share = r.flop_detail.uncounted_share if r.flop_detail is not None else None
    return share if share else None


def _share(value: float | None) -> str:
    if value is None:
        return ""
    return f"{100 * value:.0f}%" if value >= 0.01 else "<1%"


# ---- the roofline table ------------------------------------------------------------------------


def print_roofline(console: Console, profile: Profile, *, top: int = _ROOFLINE_ROWS) -> None:
    """The layers that did work, by time: achieved FLOP/s, bytes, intensity, % of peak, bound."""
    line = roofline(profile)
    if line is None or not line.points:
        return
    clock = "device" if line.device_time else "host"
    title = f"compute per layer ({clock} time; the {min(top, len(line.points))} slowest leaves)"
    columns = [
        Col("Layer", key="name", cap=_NAME_CAP), Col("Time", number=True),
        Col("FLOPs", number=True), Col("FLOP/s", number=True), Col("% peak", number=True),
        Col("Bytes", number=True), Col("FLOP/B", number=True), Col("Bound", number=True),
    ]  # fmt: skip
    rows = [Row(_roofline_cells(p)) for p in line.points[:top]]

    def frame() -> Table:
        return Table(
            title=Text(title), box=box.SIMPLE_HEAD, title_justify="left", title_style="bold"
        )

    print_table(console, frame, columns, rows, steps=_STEPS)
    note = _roofline_note(line)
    if note:
        console.print(Text(note, style="dim"))


def _roofline_cells(p: RooflinePoint) -> tuple[Cell, ...]:
    bound = p.bound or "-"
    if not p.reliable:
        bound += "*"
    return (
        p.name,
        human_time(p.time_ns),
        human_count(p.flops) if p.flops else "0",
        human_si(p.rate, "FLOP/s") if p.flops else "-",
        f"{100 * p.peak_share:.1f}" if p.peak_share is not None and p.flops else "-",
        human_bytes(p.bytes),
        intensity_text(p.intensity) if p.intensity is not None else "-",
        bound,
    )


def _roofline_note(line: Roofline) -> str | None:
    notes = []
    if line.peak is None or not line.peak.flops_per_s:
        notes.append("no peak for this device and dtype: give --peak FLOPS,BYTES for % of peak")
    if line.above_peak:
        notes.append("layers above 100% of peak: the peak was measured on a busy machine")
    if any(not p.reliable for p in line.points):
        notes.append(
            "* most of the layer's op time is in uncounted ops: its FLOP/s is a lower bound"
        )
    return "; ".join(notes) or None
