"""The chart data the page embeds, as typed values built from the pivot's typed objects.

A chart is a frozen dataclass whose ``kind`` names the drawing function of the
page script (``assets/report.js``, ``KINDS``); the page embeds
``{slot id: chart.to_json()}`` as one JSON document. Times are milliseconds
here (the charts' axes), converted from the pivot's nanoseconds by
``layerprof.units``; every label is plotly-escaped (:func:`page.label`).

A new kind of chart needs a dataclass here (or in the section's own module)
and a function in ``report.js``'s ``KINDS``; most sections only need
:class:`Bars`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from layerprof.render.html.labels import label, short
from layerprof.units import NS_PER_MS, fmt_calls, fmt_share, human_time, ms

if TYPE_CHECKING:
    from layerprof.pivot.profile import LayerNode
    from layerprof.stats import Series

#: Colours the script knows by name.
Colour = str  # "accent" | "warn" | "good" | "bad" | "muted" | "info"


class Chart:
    """Base of the chart values: ``kind`` picks the script's drawing function."""

    kind: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """The chart's fields and its kind (nested dataclasses are written by orjson)."""
        return {"kind": self.kind, **{f.name: getattr(self, f.name) for f in fields(self)}}  # type: ignore[arg-type]


@dataclass(frozen=True)
class Latency(Chart):
    """Per-iteration times (a line) and their histogram, with the median and p90 marked
    and the first (cold) call apart."""

    kind: ClassVar[str] = "latency"
    samples_ms: tuple[float, ...]
    first_ms: float | None
    median_ms: float
    p90_ms: float
    x_title: str


@dataclass(frozen=True)
class Tree(Chart):
    """The module tree as an icicle (or treemap): sizes in ms, coloured by self ms."""

    kind: ClassVar[str] = "tree"
    ids: tuple[str, ...]
    parents: tuple[str, ...]
    labels: tuple[str, ...]
    values: tuple[float, ...]
    self_ms: tuple[float, ...]
    # per node: path, type, total, self, share of the forward, calls (as text)
    custom: tuple[tuple[str, ...], ...]
    maxdepth: int


@dataclass(frozen=True)
class BarSeries:
    name: str
    values: tuple[float, ...]
    colour: Colour = "accent"
    colours: tuple[Colour, ...] | None = None  # one per bar, instead of ``colour``


@dataclass(frozen=True)
class Bars(Chart):
    """Horizontal bars, one row per label, one bar per series (grouped or stacked)."""

    kind: ClassVar[str] = "bars"
    title: str
    labels: tuple[str, ...]
    hover: tuple[str, ...]
    series: tuple[BarSeries, ...]
    axis: str
    stack: bool = False


@dataclass(frozen=True)
class StepSeries:
    name: str
    steps: tuple[str, ...]
    ms: tuple[float, ...]


@dataclass(frozen=True)
class StepTimes(Chart):
    """Step durations by index, one series per rank (bars when few, else lines)."""

    kind: ClassVar[str] = "steps"
    title: str
    series: tuple[StepSeries, ...]


# ---------------------------------------------------------------- builders


def latency_chart(series: Series | None, first_ns: int | None, *, x_title: str) -> Latency | None:
    """The chart of a latency (or step-time) series; None when no samples were kept."""
    if series is None or series.values is None or not len(series):
        return None
    s = series.summary
    return Latency(
        samples_ms=tuple(v / NS_PER_MS for v in series.tolist() or ()),
        first_ms=ms(first_ns),
        median_ms=s.median / NS_PER_MS,
        p90_ms=s.p90 / NS_PER_MS,
        x_title=x_title,
    )


def tree_chart(roots: Sequence[LayerNode]) -> Tree | None:
    """Icicle/treemap arrays from the module tree, children after their parents.

    A parent's size is the larger of its total and its children's sizes: plotly
    hides children that overflow their parent (``branchvalues='total'``), and a
    row's total can be below its children's where self times were clamped.
    Hover shows the real total. Several roots get a synthetic parent.
    """
    order = _preorder(roots)  # (node, parent index), parents before their children
    sizes = [0.0] * len(order)
    kids = [0.0] * len(order)
    for i in range(len(order) - 1, -1, -1):
        node, parent = order[i]
        sizes[i] = max(node.row.total_ns, kids[i], 0.0)
        if parent >= 0:
            kids[parent] += sizes[i]
    whole = sum(sizes[i] for i, (_, parent) in enumerate(order) if parent < 0)
    synthetic = len(roots) > 1
    ids: list[str] = ["root"] if synthetic else []
    parents: list[str] = [""] if synthetic else []
    labels: list[str] = ["(all roots)"] if synthetic else []
    values: list[float] = [whole / NS_PER_MS] if synthetic else []
    selfs: list[float] = [0.0] if synthetic else []
    custom: list[tuple[str, ...]] = [("", "", human_time(whole), "", "", "")] if synthetic else []
    node_id: dict[int, str] = {}
    for i, (node, parent) in enumerate(order):
        if sizes[i] <= 0 or (parent >= 0 and parent not in node_id):
            continue  # an empty block, or inside one
        row = node.row
        node_id[i] = f"n{i}"
        name = row.name if row.path else row.type
        if name.isdigit():  # ModuleList / Sequential items: "3" says little alone
            name = f"{name} · {row.type}"
        ids.append(node_id[i])
        parents.append(node_id[parent] if parent >= 0 else ("root" if synthetic else ""))
        labels.append(label(name))
        values.append(sizes[i] / NS_PER_MS)
        selfs.append(max(row.self_ns, 0.0) / NS_PER_MS)
        custom.append(
            (
                label(row.path or "(root)"),
                label(row.type),
                human_time(row.total_ns),
                human_time(row.self_ns),
                fmt_share(row.share),
                fmt_calls(row.calls),
            )
        )
    if not node_id:
        return None
    return Tree(
        ids=tuple(ids),
        parents=tuple(parents),
        labels=tuple(labels),
        values=tuple(values),
        self_ms=tuple(selfs),
        custom=tuple(custom),
        maxdepth=4 if len(ids) > 80 else -1,
    )


def _preorder(roots: Sequence[LayerNode]) -> list[tuple[LayerNode, int]]:
    """Every node with its parent's index (-1 for a root), parents first; no recursion,
    so a module tree a thousand levels deep draws too."""
    out: list[tuple[LayerNode, int]] = []
    stack = [(r, -1) for r in reversed(roots)]
    while stack:
        node, parent = stack.pop()
        out.append((node, parent))
        me = len(out) - 1
        stack.extend((c, me) for c in reversed(node.children))
    return out


def bars(
    title: str,
    names: Sequence[str],
    series: Sequence[BarSeries],
    *,
    axis: str,
    stack: bool = False,
) -> Bars:
    """Bars with ``names`` shortened (and kept apart) on the axis, whole in the hover."""
    return Bars(
        title=title,
        labels=tuple(label(n) for n in _distinct([short(n) for n in names])),
        hover=tuple(label(n) for n in names),
        series=tuple(series),
        axis=axis,
        stack=stack,
    )


def _distinct(labels: list[str]) -> list[str]:
    """A category axis merges equal labels: number the repeats."""
    seen: dict[str, int] = {}
    out = []
    for text in labels:
        seen[text] = seen.get(text, 0) + 1
        out.append(text if seen[text] == 1 else f"{text} ({seen[text]})")
    return out


def in_ms(values: Sequence[float | None]) -> tuple[float, ...]:
    """Nanoseconds -> milliseconds for a chart (a missing value is drawn as 0)."""
    return tuple((v or 0.0) / NS_PER_MS for v in values)
