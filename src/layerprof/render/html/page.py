"""Page plumbing shared by every section: escaping, tables, stat cards, chart slots, the
template and the embedded chart data.

Every piece of text goes through :func:`esc` (HTML) or :func:`label` (plotly
labels); the chart data goes through :func:`json_for_script`. Section
builders return :class:`Section` values; ``layerprof.render.html`` joins them.
"""

from __future__ import annotations

import functools
import html
import importlib.resources
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import orjson

from layerprof.render.html.labels import short
from layerprof.render.terminal import shown
from layerprof.units import TimeUnit, fmt_calls, fmt_share, human_bytes, human_count

if TYPE_CHECKING:
    from layerprof.render.html.charts import Chart

T = TypeVar("T")

#: Bars in the "top" charts; rows per rank in the long per-rank tables.
TOP_N = 20
TABLE_LIMIT = 50


@dataclass(frozen=True)
class Section:
    """One card of the page: ``body`` is HTML its builder escaped; ``intro`` is plain
    text (escaped here); ``charts`` maps the id of a chart slot in ``body`` to its data."""

    anchor: str
    heading: str
    body: str
    intro: str = ""
    charts: Mapping[str, Chart] = field(default_factory=dict)

    def html(self) -> str:
        lead = f'<p class="intro">{esc(self.intro)}</p>' if self.intro else ""
        return (
            f'<section class="card" id="{esc(self.anchor)}"><h2>{esc(self.heading)}</h2>'
            f"{lead}{self.body}</section>"
        )


# ---------------------------------------------------------------- escaping


def esc(value: object) -> str:
    """Text as HTML (quotes too, so it is safe in attributes); control characters
    are written out (``\\x1b``) and long text is cut (``MAX_SHOWN``) as in the console."""
    return html.escape(shown(str(value)), quote=True)


def json_for_script(value: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` become ``\\u003c``-style escapes (so no ``</script``
    or ``<!--`` can appear), as do U+2028/U+2029; ``JSON.parse`` reads the
    same value back.
    """
    text = orjson.dumps(value).decode()
    for raw, escaped in _JSON_ESCAPES:
        text = text.replace(raw, escaped)
    return text


_JSON_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


@functools.cache
def _asset(name: str) -> str:
    # one name per joinpath: Python 3.10's Traversable takes no more
    resource = importlib.resources.files("layerprof.render").joinpath("assets").joinpath(name)
    return resource.read_text(encoding="utf-8")


_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def fill(template: str, **values: str) -> str:
    """Substitute ``{{name}}`` in one pass, so inserted text is never re-scanned."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _script_safe(js: str) -> str:
    """Inline script text that cannot close its element (belt and braces)."""
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def document(sections: Sequence[Section], *, heading: str, header: str) -> str:
    """The whole page: ``header`` (HTML), a contents list, ``sections``, and the
    styles, scripts and chart data inlined (one offline file)."""
    nav = "".join(f'<a href="#{esc(s.anchor)}">{esc(s.heading)}</a>' for s in sections)
    return fill(
        _asset("report.html"),
        title=esc(heading),
        header=header,
        nav=f'<nav class="toc" aria-label="Sections">{nav}</nav>',
        body="\n".join(s.html() for s in sections),
        style=_asset("report.css"),
        plotly=_script_safe(_asset("plotly-layerprof.min.js")),
        app=_script_safe(_asset("report.js")),
        data=json_for_script(_chart_data(sections)),
    )


def _chart_data(sections: Sequence[Section]) -> dict[str, object]:
    """Every section's charts by slot id; two sections may not claim one slot."""
    data: dict[str, object] = {}
    for section in sections:
        for slot, chart in section.charts.items():
            if slot in data:
                raise ValueError(f"chart slot {slot!r} of section {section.anchor!r} is taken")
            data[slot] = chart.to_json()
    return data


# ---------------------------------------------------------------- tables


@dataclass(frozen=True)
class Col(Generic[T]):
    """One table column over rows of type ``T``.

    ``text`` gives the cell's text (escaped here); ``sort``, when given, makes
    the column numeric: its value goes into ``data-v`` for the sorting script
    (None sorts last). ``markup`` replaces the text with HTML the column
    escaped itself; ``tip`` is the cell's hover text; ``title`` the header's.
    """

    header: str
    text: Callable[[T], str]
    sort: Callable[[T], float | None] | None = None
    css: str = ""
    tip: Callable[[T], str] | None = None
    markup: Callable[[T], str] | None = None
    title: str = ""

    def th(self) -> str:
        kind = "num" if self.sort is not None else "text"
        tip = f' title="{esc(self.title)}"' if self.title else ""
        return f'<th scope="col" data-sort="{kind}"{tip}>{esc(self.header)}</th>'

    def td(self, row: T) -> str:
        css = self.css or ("num" if self.sort is not None else "")
        attrs = f' class="{css}"' if css else ""
        if self.sort is not None:
            attrs += f' data-v="{_sort_value(self.sort(row))}"'
        if self.tip is not None and (tip := self.tip(row)):
            attrs += f' title="{esc(tip)}"'
        inner = self.markup(row) if self.markup is not None else esc(self.text(row))
        return f"<td{attrs}>{inner}</td>"


def _sort_value(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return ""
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def text_col(header: str, get: Callable[[T], object], *, css: str = "") -> Col[T]:
    return Col(header, lambda r: _text(get(r)), css=css)


def name_col(header: str, get: Callable[[T], str], *, limit: int = 160) -> Col[T]:
    """A long name (a C++ kernel's signature) cut in the middle, whole on hover."""
    return Col(
        header,
        lambda r: short(get(r), limit),
        css="path",
        tip=lambda r: get(r) if len(get(r)) > limit else "",
    )


def _text(value: object) -> str:
    return "" if value is None else str(value)


def time_col(
    header: str,
    get: Callable[[T], float | None],
    unit: TimeUnit,
    *,
    tip: Callable[[T], str] | None = None,
) -> Col[T]:
    """A time in nanoseconds, shown in ``unit`` (named in the header), sorted by the ns."""
    return Col(f"{header} ({unit.name})", lambda r: unit.fmt(get(r)), get, tip=tip)


def calls_col(header: str, get: Callable[[T], float | None]) -> Col[T]:
    return Col(header, lambda r: _or_dash(get(r), fmt_calls), get)


def count_col(header: str, get: Callable[[T], float | None]) -> Col[T]:
    return Col(header, lambda r: _or_dash(get(r), human_count), get)


def bytes_col(header: str, get: Callable[[T], float | None]) -> Col[T]:
    return Col(header, lambda r: _or_dash(get(r), human_bytes), get)


def share_col(header: str, get: Callable[[T], float | None]) -> Col[T]:
    return Col(header, lambda r: fmt_share(get(r)), get)


def _or_dash(value: float | None, fmt: Callable[[float], str]) -> str:
    return "-" if value is None else fmt(value)


def table(
    table_id: str,
    cols: Sequence[Col[T]],
    rows: Iterable[T],
    *,
    filter_label: str | None = None,
    caption: str = "",
) -> str:
    """A sortable table (header clicks sort it; with ``filter_label``, a filter box)."""
    body = [f"<tr>{''.join(c.td(row) for c in cols)}</tr>" for row in rows]
    head = "".join(c.th() for c in cols)
    tools = ""
    if filter_label is not None:
        tools = (
            '<div class="tools">'
            f'<input type="search" class="filter" data-table="{table_id}"'
            f' placeholder="{esc(filter_label)}" aria-label="{esc(filter_label)}">'
            f'<span class="count" data-count-for="{table_id}">{len(body)} rows</span></div>'
        )
    cap = f'<p class="caption">{esc(caption)}</p>' if caption else ""
    return (
        f'{tools}<div class="table-wrap"><table class="data sortable" id="{table_id}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>{cap}"
    )


def stat_cards(items: Iterable[tuple[str, str, str]]) -> str:
    """Small labelled numbers: (label, value, extra css class)."""
    cards = "".join(
        f'<div class="{" ".join(("stat", cls)).strip()}"><span>{esc(name)}</span>'
        f"<b>{esc(value)}</b></div>"
        for name, value, cls in items
    )
    return f'<div class="stats">{cards}</div>'


def chart_slot(div_id: str, *, tall: bool = False) -> str:
    """Where the script draws the chart whose data is under ``div_id``."""
    cls = "chart tall" if tall else "chart"
    return f'<div class="{cls}" id="{div_id}" role="img"></div>'


def latency_slot(div_id: str) -> str:
    """The slot of a :class:`~layerprof.render.html.charts.Latency` chart: two charts."""
    return (
        f'<div class="grid2" id="{div_id}">{chart_slot(div_id + "-iter")}'
        f"{chart_slot(div_id + '-hist')}</div>"
    )


def heading(text: str) -> str:
    return f"<h3>{esc(text)}</h3>"


def paragraph(text: str, css: str = "") -> str:
    cls = f' class="{css}"' if css else ""
    return f"<p{cls}>{esc(text)}</p>"


def top_caption(shown: int, total: int, what: str) -> str:
    return (
        f"Showing the top {TABLE_LIMIT} {what} per rank ({shown} of {total})."
        if shown < total
        else ""
    )
