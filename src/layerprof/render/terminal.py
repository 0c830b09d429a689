"""The console every report prints through: no markup, no raw control characters.

Names in a profile, a trace or a diff are user text (module paths, op and kernel
names, file names, thread names). Printed raw, an ESC in one of them can clear the
screen or rewrite earlier lines, and ``[bold]``-style text would be read as rich
markup. Two layers keep them out:

* every renderer builds user text as ``Text`` (never a markup string), and tables
  escape their cells before layout (``escape_controls``), so columns stay aligned;
* the console itself escapes whatever control character is still left in the
  rendered segments, before rich adds its own style codes (``_EscapeControls``).
  ``make_console()`` installs it for good; ``escaping(console)`` adds it for the
  length of one report to a console a library user passed in.

A newline is the one control character that cannot be told apart once rendered
(rich's own line breaks are newlines too), so the hook also escapes it, and CR, in
the text a report prints (``Text``, a rule's or a table's title) before layout: no
report builds a multi-line ``Text`` on purpose, so a newline there came from a
name. Bidi overrides (U+202A-U+202E, U+2066-U+2069) reorder what a terminal shows
(a name can make ``1.0 ms`` read as ``sm 0.1``): they are escaped like the rest.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderHook
from rich.rule import Rule
from rich.segment import Segment
from rich.table import Table
from rich.text import Span, Text

if TYPE_CHECKING:
    from rich.console import ConsoleOptions, ConsoleRenderable, RenderResult

PIPE_WIDTH = 160  # a file or a pipe has no width; tables are laid out for this many columns

# C0, DEL and C1 (category Cc): everything a terminal may act on instead of printing.
_CONTROL_CODES = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_ESCAPES = {c: _NAMED.get(c, f"\\x{c:02x}") for c in _CONTROL_CODES}
# Bidi embeddings, overrides and isolates: they reorder the characters after them.
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES.update({c: f"\\u{c:04x}" for c in _BIDI})
_TEXT_TABLE = str.maketrans({chr(c): e for c, e in _ESCAPES.items()})
# In rendered segments a newline is rich's own line break, not user text.
_SEGMENT_TABLE = str.maketrans({chr(c): e for c, e in _ESCAPES.items() if c != 0x0A})
_SEGMENT_CONTROL = re.compile("[" + "".join(re.escape(chr(c)) for c in _SEGMENT_TABLE) + "]")


#: Longest text from a file or a model that a report shows in one piece (a note, a
#: name, a line); the rest is cut with ``CUT_MARK``, so rendering stays linear.
MAX_SHOWN = 4096
CUT_MARK = "… [{} more characters]"
_TEXT_CONTROL = re.compile("[" + "".join(re.escape(chr(c)) for c in _TEXT_TABLE) + "]")


def escape_controls(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character written out: ESC -> ``\\x1b``, CR -> ``\\r``,
    LF -> ``\\n``, U+202E -> ``\\u202e`` (``keep_newlines``: a multi-line document keeps
    its line breaks). The one escaping function for text from a file or a model."""
    return text.translate(_SEGMENT_TABLE if keep_newlines else _TEXT_TABLE)


# The same characters as JSON escapes: inside a JSON string they mean what they replace.
_JSON_TABLE = str.maketrans({chr(c): f"\\u{c:04x}" for c in _ESCAPES if c != 0x0A})


def escape_json(text: str) -> str:
    """JSON text for the terminal: every character ``escape_controls`` writes out is
    a ``\\uXXXX`` escape instead, so the document stays valid and its strings exact
    (the encoder escapes C0 itself; C1 and bidi overrides it leaves raw)."""
    return text.translate(_JSON_TABLE)


def shown(text: str) -> str:
    """``text`` as a report shows it: cut after ``MAX_SHOWN`` characters, escaped."""
    if len(text) > MAX_SHOWN:
        text = text[:MAX_SHOWN] + CUT_MARK.format(len(text) - MAX_SHOWN)
    return escape_controls(text)


def escape_text(text: Text) -> Text:
    """``text`` with its control characters, newlines included, escaped and its
    styles kept (each escape takes the style of the character it replaces); cut
    after ``MAX_SHOWN`` characters."""
    if len(text) > MAX_SHOWN:
        rest = len(text) - MAX_SHOWN
        text = text[:MAX_SHOWN]
        text.append(CUT_MARK.format(rest), style="dim")
    plain = text.plain
    if not _TEXT_CONTROL.search(plain):
        return text
    cuts = sorted({i for m in _TEXT_CONTROL.finditer(plain) for i in (m.start(), m.end())})
    out = text.blank_copy()
    for piece in text.divide(cuts):
        if len(piece) == 1 and _TEXT_CONTROL.match(piece.plain):
            escaped = escape_controls(piece.plain)
            spans = [Span(0, len(escaped), span.style) for span in piece.spans]
            piece = Text(escaped, style=piece.style, spans=spans)
        out.append_text(piece)
    return out


class _Escaped:
    """Renders ``inner`` and escapes control characters left in its text segments."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        segments = (_escaped(s) for s in console.render(self.inner, options))
        if console.is_terminal:
            yield from segments
        else:  # a pipe or a file: a table's cell padding would end lines in spaces
            yield from _without_trailing_spaces(segments)


def _escaped(segment: Segment) -> Segment:
    # control segments are rich's own (cursor moves); text segments are content
    if segment.control is None and _SEGMENT_CONTROL.search(segment.text):
        return Segment(escape_controls(segment.text, keep_newlines=True), segment.style)
    return segment


def _without_trailing_spaces(segments: Iterable[Segment]) -> Iterator[Segment]:
    """``segments`` with the spaces that end each line left out. Segments are held
    back only while they are blank, so the output still streams line by line."""
    blank: list[Segment] = []
    for segment in segments:
        text = segment.text
        if segment.control is not None:
            yield from blank
            blank = []
            yield segment
            continue
        *heads, text = text.split("\n")  # once: a segment may hold many lines
        for head in heads:
            if head.strip(" "):
                yield from blank
                yield Segment(head.rstrip(" "), segment.style)
            blank = []
            yield Segment("\n", segment.style)
        if not text:
            continue
        if text.strip(" "):
            yield from blank
            blank = []
            stripped = text.rstrip(" ")
            yield Segment(stripped, segment.style)
            if len(stripped) < len(text):  # may be mid-line: keep the rest until we know
                blank.append(Segment(text[len(stripped) :], segment.style))
        else:
            blank.append(segment)
    yield from blank


class _EscapeControls(RenderHook):
    """A render hook: no control character from content reaches the terminal."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Escaped(_with_inert_text(r)) for r in renderables]


def _with_inert_text(renderable: ConsoleRenderable) -> ConsoleRenderable:
    """``renderable`` with newlines in its own text escaped (a ``Text``, a rule's or a
    table's title): those are content, where the rendered segments' are layout."""
    if isinstance(renderable, Text):
        return escape_text(renderable)
    if isinstance(renderable, Rule | Table) and renderable.title:
        titled = copy.copy(renderable)  # a library user's own table stays as it was
        title = renderable.title
        titled.title = escape_text(title) if isinstance(title, Text) else escape_controls(title)
        return titled
    return renderable


class SafeConsole(Console):
    """A rich Console with markup, emoji codes and highlighting off and control
    characters escaped: names print literally, whatever they contain."""

    def __init__(self, **kwargs: Any) -> None:
        options: dict[str, Any] = {"markup": False, "emoji": False, "highlight": False}
        super().__init__(**{**options, **kwargs})
        self.push_render_hook(_EscapeControls())


def output_width(*, stderr: bool = False) -> int:
    """The width ``make_console`` lays reports out for: the terminal's, $COLUMNS, or
    ``PIPE_WIDTH`` for a pipe or a file (``print(profile)`` uses it too)."""
    probe = Console(stderr=stderr)
    return probe.width if probe.is_terminal or "COLUMNS" in os.environ else PIPE_WIDTH


def make_console(*, stderr: bool = False) -> Console:
    """The CLI's console. A pipe or a file gets ``PIPE_WIDTH`` columns (or $COLUMNS);
    tables fit that width without cutting a number (``render.console.columns``)."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal or "COLUMNS" in os.environ else PIPE_WIDTH
    return SafeConsole(stderr=stderr, width=width)


@contextmanager
def escaping(console: Console) -> Iterator[Console]:
    """``console``, escaping control characters until the block ends."""
    if isinstance(console, SafeConsole):
        yield console
        return
    console.push_render_hook(_EscapeControls())
    try:
        yield console
    finally:
        console.pop_render_hook()
