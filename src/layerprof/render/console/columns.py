"""Tables that fit the console: number columns are never cut, text columns give way.

A rich table that is too wide shrinks every column, numbers included: ``12.345``
prints as ``12.…`` or as nothing at all. A report's numbers are its point, so
layerprof's tables set their own column widths. Each table lists, in order, the
steps by which its text columns give way (``Shrink``: abbreviate a column in the
middle down to a width; ``Hide``: leave columns out) and takes only as many as
the width needs; before any of them, headers wrap onto two lines. Number columns
are never shortened. A table that still does not fit prints at the width it needs
(the terminal wraps the lines) rather than cut a number, and one dim line under
a table names what was hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rich import box
from rich.cells import cell_len, set_cell_size
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from layerprof.render.terminal import escape_controls, escape_text, shown

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

_ELLIPSIS = "…"
_MIN_NAME = 10  # a tree label keeps this much of its name before its guides give way
_UNBOUNDED = 1_000_000


@dataclass(frozen=True)
class Col:
    """A column. ``number`` columns are never shortened; ``cap``: a text column is
    never wider than this; ``key``: the name steps use (default: the header)."""

    header: str
    number: bool = False
    key: str = ""
    cap: int | None = None
    ellipsis: Literal["middle", "end"] = "middle"

    @property
    def name(self) -> str:
        return self.key or self.header


@dataclass(frozen=True)
class Label:
    """A tree label: ``guides`` (``│  ├─ ``) then ``name``. Abbreviation shortens
    the name first (keeping ``_MIN_NAME`` cells of it), then the guides."""

    guides: str
    name: str


Cell = str | Label


@dataclass(frozen=True)
class Row:
    cells: tuple[Cell, ...]
    style: str | None = None


@dataclass(frozen=True)
class Shrink:
    """Abbreviate the text columns ``keys`` down to ``width`` cells (only as far as needed)."""

    keys: tuple[str, ...]
    width: int


@dataclass(frozen=True)
class Hide:
    """Leave the columns ``keys`` out."""

    keys: tuple[str, ...]


Step = Shrink | Hide


@dataclass(frozen=True)
class _FittedTable:
    table: Table
    width: int  # the columns the table needs
    room: int  # the columns the console has
    hidden: tuple[str, ...]  # headers of the columns left out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # Wider than the room only when no step was left: render at the width
        # the table needs rather than let rich squeeze the number columns.
        wide = self.width > self.room
        yield from console.render(self.table, options.update_width(self.width) if wide else options)


def abbreviate(
    text: str, width: int, where: Literal["middle", "end"] = "middle", head: int | None = None
) -> str:
    """``text`` in at most ``width`` cells, an ellipsis in the middle (or at the end);
    ``head``: the cells kept before a middle ellipsis (default: half)."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return _ELLIPSIS[:width]
    if where == "end":
        return set_cell_size(text, width - 1) + _ELLIPSIS
    if head is None or not 0 <= head <= width - 1:
        head = (width - 1) // 2
    tail = width - 1 - head
    return set_cell_size(text, head) + _ELLIPSIS + set_cell_size(text[::-1], tail)[::-1]


def print_table(
    console: Console,
    frame: Callable[[], Table],
    columns: Sequence[Col],
    rows: Sequence[Row],
    *,
    steps: Sequence[Step] = (),
    hint: str | None = None,
) -> _FittedTable:
    """Fit the table to ``console`` and print it, then a dim line naming what was
    hidden (``hint``: what else the user can do, e.g. ``--no-shapes``)."""
    fitted = fit_table(console, frame, columns, rows, steps)
    console.print(fitted, crop=fitted.width <= fitted.room)
    note = _fit_note(fitted, terminal=console.is_terminal, hint=hint)
    if note:
        console.print(Text(note, style="dim"))
    return fitted


def _fit_note(fitted: _FittedTable, *, terminal: bool, hint: str | None = None) -> str | None:
    """One line saying which columns were hidden, or that the table is wider than the room."""
    where = f"terminal {fitted.room} columns" if terminal else f"output {fitted.room} columns"
    hidden = ", ".join(fitted.hidden)
    if fitted.width > fitted.room:
        also = f"; hidden columns: {hidden}" if hidden else ""
        return f"table is {fitted.width} columns wide ({where}): lines wrap, no number is cut{also}"
    if not hidden:
        return None
    wider = "a wider terminal" if terminal else "set COLUMNS"
    return f"hidden columns: {hidden} ({where}; {f'{hint} or ' if hint else ''}{wider})"


def fit_table(
    console: Console,
    frame: Callable[[], Table],
    columns: Sequence[Col],
    rows: Sequence[Row],
    steps: Sequence[Step] = (),
) -> _FittedTable:
    """Choose the columns shown and their widths (numbers at full width; headers wrap,
    then ``steps`` in order, each only as far as needed; then shortened columns get
    back the cells a later step freed) and build the table with cells cut to them."""
    for step in steps:
        for col in columns:
            if isinstance(step, Shrink) and col.number and col.name in step.keys:
                raise ValueError(f"column {col.header!r} holds numbers: it is never shortened")
    cells = [[_escape(c) for c in row.cells] for row in rows]
    layout = _Layout(console, frame, columns, cells)
    room = console.options.max_width
    excess = layout.width() - room
    if excess > 0:
        layout.wrap_headers(excess)
    for step in steps:
        excess = layout.width() - room
        if excess <= 0:
            break
        layout.apply(step, excess)
    layout.give_back(room - layout.width())
    return _FittedTable(
        table=layout.build(rows),
        width=layout.width(),
        room=room,
        hidden=tuple(columns[i].header for i in layout.hidden),
    )


def _escape(cell: Cell) -> Cell:
    if isinstance(cell, Label):
        return Label(escape_controls(cell.guides), shown(cell.name))
    return shown(cell)


def _cell_len(cell: Cell) -> int:
    if isinstance(cell, Label):
        return cell_len(cell.guides) + cell_len(cell.name)
    return cell_len(cell)


def distinct_head(names: Sequence[str], width: int) -> int | None:
    """Where a middle ellipsis keeps ``names`` apart at ``width`` cells: the head
    (cells before it) nearest half that does, or None for half. Halves make
    ``model.layers.0.self_attn.k_proj`` and its layer-1 twin both read
    ``model.layers.…lf_attn.k_proj`` at 28 cells: two rows of one name, where a head
    of 14 keeps the layer's index. None too when no head keeps them all apart."""
    head = _apart_head(set(names), width)
    return None if head == (width - 1) // 2 else head


def _apart_head(unique: set[str], width: int) -> int | None:
    """The head nearest half at which a middle ellipsis keeps ``unique`` apart (half
    itself included), or None when no head does."""
    half = (width - 1) // 2
    if len(unique) < 2:
        return half
    if width <= 2:
        return None
    for head in sorted(range(width), key=lambda h: (abs(h - half), h)):
        if len({abbreviate(n, width, head=head) for n in unique}) == len(unique):
            return head
    return None


def compact_path(name: str, width: int) -> str:
    """A dotted module path cut towards ``width`` cells by its segments: leading ones
    to their first character, left to right, until it fits (an index such as ``11``
    and the last segment stay whole): ``bert.encoder.layer.11.attention.output.dense``
    at 23 cells reads ``b.e.l.11.a.output.dense``. May stay wider than ``width``."""
    if cell_len(name) <= width:
        return name
    parts = name.split(".")
    for k in range(len(parts) - 1):
        if not parts[k].isdigit():
            parts[k] = parts[k][:1]
            if cell_len(short := ".".join(parts)) <= width:
                return short
    return ".".join(parts)


def distinct_cut(names: Sequence[str], width: int) -> Callable[[str], str]:
    """How a column of ``names`` is cut to ``width`` cells so that no two read as one:
    a middle ellipsis (at half, or nearest half where it keeps them apart); failing
    that, dotted paths by their segments first (``compact_path``: the twelve
    ``bert.encoder.layer.N.attention.output.dense`` of a BERT all read
    ``bert.encod…output.dense`` wherever one ellipsis goes); failing both, half."""
    unique = set(names)
    head = _apart_head(unique, width)
    if head is not None:
        return lambda n: abbreviate(n, width, "middle", head)
    compact = {n: compact_path(n, width) for n in unique}
    shortened = set(compact.values())
    after = _apart_head(shortened, width) if len(shortened) == len(unique) else None
    if after is not None:
        return lambda n: abbreviate(compact[n], width, "middle", after)
    return lambda n: abbreviate(n, width)


def _cut(cell: Cell, width: int, col: Col, short: Callable[[str], str] | None = None) -> str:
    if isinstance(cell, str):
        return short(cell) if short is not None else abbreviate(cell, width, col.ellipsis)
    whole = cell.guides + cell.name
    if cell_len(whole) <= width:
        return whole
    name_room = max(width - cell_len(cell.guides), min(cell_len(cell.name), _MIN_NAME))
    if name_room >= width:
        return abbreviate(cell.name, width)
    name = abbreviate(cell.name, name_room)
    return abbreviate(cell.guides, width - cell_len(name)) + name


class _Layout:
    """Widths and visibility of the columns while steps are applied."""

    def __init__(
        self,
        console: Console,
        frame: Callable[[], Table],
        columns: Sequence[Col],
        cells: list[list[Cell]],
    ) -> None:
        self.console = console
        self.frame = frame
        self.columns = columns
        self.cells = cells
        self.content = [
            max((_cell_len(r[i]) for r in cells), default=1) for i in range(len(columns))
        ]
        for i, col in enumerate(columns):
            if col.cap is not None and not col.number:
                self.content[i] = min(self.content[i], col.cap)
        self.widths = [
            max(cell_len(c.header), w) for c, w in zip(columns, self.content, strict=True)
        ]
        self.hidden: list[int] = []
        self.cuts: list[tuple[int, int]] = []  # (column, cells taken), in the order taken

    def width(self) -> int:
        skeleton = self.frame()
        for i in self._shown():
            skeleton.add_column(width=self.widths[i])
        options = self.console.options.update_width(_UNBOUNDED)
        return Measurement.get(self.console, options, skeleton).maximum

    def wrap_headers(self, excess: int) -> None:
        """Let headers wrap onto more lines, those that free the most cells first."""
        savings = []
        for i, col in enumerate(self.columns):
            longest_word = max((cell_len(w) for w in col.header.split()), default=0)
            savings.append((self.widths[i] - max(1, self.content[i], longest_word), i))
        for saving, i in sorted(savings, reverse=True):
            if excess > 0:
                excess -= self._take(i, saving)

    def apply(self, step: Step, excess: int) -> None:
        if isinstance(step, Hide):
            self.hidden += [i for i in self._indices(step.keys) if i not in self.hidden]
            return
        for i in self._indices(step.keys):
            if i not in self.hidden:
                excess -= self._take(i, min(excess, self.widths[i] - step.width))

    def give_back(self, slack: int) -> None:
        """Widen what was shortened, last cut first, while the room has cells to spare
        (a column hidden later may have left more than the cut needed)."""
        for i, cells in reversed(self.cuts):
            if slack <= 0:
                return
            if i not in self.hidden:
                back = min(cells, slack)
                self.widths[i] += back
                slack -= back

    def _take(self, i: int, cells: int) -> int:
        if cells <= 0:
            return 0
        self.widths[i] -= cells
        self.cuts.append((i, cells))
        return cells

    def build(self, rows: Sequence[Row]) -> Table:
        table = self.frame()
        # a title may name a layer or a file: its newlines are content, as in a cell
        if isinstance(table.title, Text):
            table.title = escape_text(table.title)
        if isinstance(table.caption, Text):
            table.caption = escape_text(table.caption)
        shown = self._shown()
        for i in shown:
            col = self.columns[i]
            table.add_column(
                Text(escape_controls(col.header)),
                justify="right" if col.number else "left",
                width=self.widths[i],
            )
        shorts = {i: self._short(i) for i in shown}
        for row, cells in zip(rows, self.cells, strict=True):
            texts = [
                Text(_cut(cells[i], self.widths[i], self.columns[i], shorts[i])) for i in shown
            ]
            table.add_row(*texts, style=row.style)
        return table

    def _short(self, i: int) -> Callable[[str], str] | None:
        """How column ``i``'s names are cut: ``distinct_cut``, which keeps two of them
        from reading as one (tree labels are told apart by their place), or None for
        the column's plain ellipsis."""
        if self.columns[i].number or self.columns[i].ellipsis != "middle":
            return None
        names = [c for row in self.cells if isinstance(c := row[i], str)]
        if not any(cell_len(n) > self.widths[i] for n in names):
            return None
        return distinct_cut(names, self.widths[i])

    def _shown(self) -> list[int]:
        return [i for i in range(len(self.columns)) if i not in self.hidden]

    def _indices(self, keys: tuple[str, ...]) -> list[int]:
        return [i for i, col in enumerate(self.columns) if col.name in keys]


# ---- tables whose first column is a name (the trace, distributed and rank tables) ----

_NAME_CAP = 60  # kernel and step names beyond this are abbreviated in the middle
# names give way to the numbers: down to 24 cells, then to 12
_NAME_STEPS: tuple[Step, ...] = (Shrink(("name",), 24), Shrink(("name",), 12))


def print_named_table(
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
