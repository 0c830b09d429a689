"""Page plumbing shared by the report's sections: escaping, formatting, tables,
the header and the findings."""

from __future__ import annotations

import functools
import html
import importlib.resources
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

#: Bars in the "top" charts; rows per rank in the kernel and op tables.
TOP_N = 20
TABLE_LIMIT = 50

Row = Mapping[str, Any]
Formatter = Callable[[Any], str]


def json_for_script(value: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` become ``\\u003c``-style escapes (so no ``</script``
    or ``<!--`` can appear), as do U+2028/U+2029; ``JSON.parse`` reads the
    same value back.
    """
    text = orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()
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

# ---------------------------------------------------------------- page plumbing


class _Page:
    """Sections (HTML strings), their navigation entries and the chart data."""

    def __init__(self) -> None:
        self.sections: list[str] = []
        self.links: list[tuple[str, str]] = []
        self.charts: dict[str, Any] = {}

    def add(self, anchor: str, heading: str, body: str, *, intro: str = "") -> None:
        self.links.append((anchor, heading))
        lead = f'<p class="intro">{intro}</p>' if intro else ""
        self.sections.append(
            f'<section class="card" id="{anchor}"><h2>{_e(heading)}</h2>{lead}{body}</section>'
        )

    def nav(self) -> str:
        links = "".join(f'<a href="#{a}">{_e(h)}</a>' for a, h in self.links)
        return f'<nav class="toc" aria-label="Sections">{links}</nav>'


@functools.cache
def _asset(name: str) -> str:
    resource = importlib.resources.files("layerprof.render").joinpath("assets", name)
    return resource.read_text(encoding="utf-8")


_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def _fill(template: str, **values: str) -> str:
    """Substitute ``{{name}}`` in one pass, so inserted text is never re-scanned."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _script_safe(js: str) -> str:
    """Inline script text that cannot close its element (belt and braces)."""
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _label(value: Any) -> str:
    """Text for a plotly label: plotly parses a few tags, so escape ``<``/``>``/``&``."""
    return html.escape(str(value), quote=False)


# ---------------------------------------------------------------- formatting


def _num(value: Any) -> float | None:
    """A finite float, or None for anything else (bools, strings, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _pick(row: Row | None, *keys: str) -> Any:
    """The first present, non-None value among ``keys``."""
    if not isinstance(row, Mapping):
        return None
    for key in keys:
        value = row.get(key)
        if value is not None:
            return value
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _getter(key: str) -> Callable[[Row], Any]:
    return lambda row: row.get(key)


def _rows(value: Any) -> list[Row]:
    return [r for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []


def fmt_ms(value: Any) -> str:
    x = _num(value)
    if x is None:
        return "–"
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax < 0.01:
        return f"{x:.4f}"
    if ax < 1:
        return f"{x:.3f}"
    if ax < 100:
        return f"{x:.2f}"
    return f"{x:,.1f}"


def fmt_count(value: Any) -> str:
    x = _num(value)
    if x is None:
        return "–"
    for step, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= step:
            return f"{x / step:.3g} {unit}"
    return f"{x:g}"


def fmt_bytes(value: Any) -> str:
    x = _num(value)
    if x is None:
        return "–"
    for step, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(x) >= step:
            return f"{x / step:.3g} {unit}"
    return f"{x:g} B"


def fmt_pct(value: Any, *, signed: bool = False) -> str:
    x = _num(value)
    if x is None:
        return "–"
    return f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%"


def fmt_calls(value: Any) -> str:
    x = _num(value)
    if x is None:
        return "–"
    return f"{x:g}"


def shape_text(tree: Any) -> str:
    """``[[1, 3, 224, 224]]`` -> ``1×3×224×224``; nested structures keep brackets."""
    if tree is None:
        return ""
    if isinstance(tree, list | tuple):
        if all(isinstance(v, int) and not isinstance(v, bool) for v in tree):
            return "×".join(str(v) for v in tree) if tree else "()"
        parts = [shape_text(v) for v in tree]
        inner = ", ".join(p or "·" for p in parts)
        return inner if len(tree) == 1 else f"({inner})"
    if isinstance(tree, Mapping):
        return "{" + ", ".join(f"{k}: {shape_text(v)}" for k, v in tree.items()) + "}"
    return str(tree)


def _formatter_for(key: str) -> tuple[Formatter, str]:
    """How to show an extra numeric layer field, and its column header, by its name."""
    name = key.replace("_", " ")
    if key.endswith("_ms"):
        return fmt_ms, name[:-3] + " (ms)"
    if key.endswith("_bytes") or "memory" in key or key.startswith("mem"):
        return fmt_bytes, name.removesuffix(" bytes")
    if "flop" in key or "macs" in key:
        return fmt_count, name.upper() if key in ("flops", "macs") else name
    return fmt_count, name


# ---------------------------------------------------------------- tables


class _Col:
    """One table column: header, how to get the cell HTML and its sort value."""

    def __init__(
        self,
        header: str,
        get: Callable[[Row], Any],
        fmt: Formatter = str,
        *,
        num: bool = False,
        css: str = "",
        title: str = "",
    ) -> None:
        self.header, self.get, self.fmt, self.num = header, get, fmt, num
        self.css = css or ("num" if num else "")
        self.title = title

    def th(self) -> str:
        kind = "num" if self.num else "text"
        tip = f' title="{_e(self.title)}"' if self.title else ""
        return f'<th scope="col" data-sort="{kind}"{tip}>{_e(self.header)}</th>'

    def td(self, row: Row) -> str:
        value = self.get(row)
        cls = f' class="{self.css}"' if self.css else ""
        if self.num:
            x = _num(value)
            sort = f' data-v="{x!r}"' if x is not None else ' data-v=""'
            return f"<td{cls}{sort}>{_e(self.fmt(value))}</td>"
        return f"<td{cls}>{_e(self.fmt(value) if value is not None else '')}</td>"


def _table(
    table_id: str,
    cols: Sequence[_Col],
    rows: Iterable[Row],
    *,
    cell: Callable[[_Col, Row], str] | None = None,
    filter_label: str | None = None,
    caption: str = "",
) -> str:
    body = []
    for row in rows:
        cells = "".join(cell(c, row) if cell else c.td(row) for c in cols)
        body.append(f"<tr>{cells}</tr>")
    head = "".join(c.th() for c in cols)
    tools = ""
    if filter_label is not None:
        tools = (
            '<div class="tools">'
            f'<input type="search" class="filter" data-table="{table_id}"'
            f' placeholder="{_e(filter_label)}" aria-label="{_e(filter_label)}">'
            f'<span class="count" data-count-for="{table_id}">{len(body)} rows</span></div>'
        )
    cap = f'<p class="caption">{caption}</p>' if caption else ""
    return (
        f'{tools}<div class="table-wrap"><table class="data sortable" id="{table_id}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>{cap}"
    )


def _stat_cards(items: Iterable[tuple[str, str, str]]) -> str:
    """Small labelled numbers: (label, value, extra css class)."""
    cards = "".join(
        f'<div class="stat {cls}"><span>{_e(label)}</span><b>{_e(value)}</b></div>'
        for label, value, cls in items
    )
    return f'<div class="stats">{cards}</div>'


def _chart(div_id: str, *, tall: bool = False) -> str:
    cls = "chart tall" if tall else "chart"
    return f'<div class="{cls}" id="{div_id}" role="img"></div>'


# ---------------------------------------------------------------- header


def _default_title(
    pdata: Row | None, trace: Mapping[str, Any] | None, diff: Mapping[str, Any] | None
) -> str:
    if pdata is not None:
        model = _pick(pdata.get("meta"), "model")
        return f"{model} — layerprof" if model else "layerprof report"
    if trace is not None:
        return "Trace analysis — layerprof"
    return "Profile diff — layerprof"


def _header(
    heading: str,
    pdata: Row | None,
    trace: Mapping[str, Any] | None,
    diff: Mapping[str, Any] | None,
) -> str:
    facts: list[tuple[str, str]] = []
    details: list[tuple[str, str]] = []
    if pdata is not None:
        facts, details = _meta_facts(pdata.get("meta") or {})
    if trace is not None:
        files = [str(f) for r in _rows(trace.get("ranks")) if (f := r.get("file"))]
        facts.append(("trace", ", ".join(files[:3]) + (" …" if len(files) > 3 else "")))
        facts.append(("ranks", str(len(_rows(trace.get("ranks"))))))
    if diff is not None:
        for side in ("base", "new"):
            label = _side_label(diff.get(side))
            if label:
                facts.append((side, label))
    chips = "".join(f'<span class="chip"><span>{_e(k)}</span>{_e(v)}</span>' for k, v in facts if v)
    more = ""
    if details:
        items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in details)
        more = f'<details class="more"><summary>Run details</summary><dl>{items}</dl></details>'
    return (
        f'<header class="top"><div class="wrap"><p class="brand">layerprof report</p>'
        f'<h1>{_e(heading)}</h1><div class="chips">{chips}</div>{more}</div></header>'
    )


def _meta_facts(meta: Row) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    inputs = meta.get("inputs") or []
    facts = [
        ("model", str(meta.get("model") or "")),
        ("device", str(meta.get("device") or "")),
        ("dtype", str(meta.get("dtype") or "")),
        ("torch", str(meta.get("torch") or "")),
        ("inputs", ", ".join(str(i) for i in inputs) if isinstance(inputs, list) else ""),
        ("date", str(meta.get("created") or "")),
        ("source", str(meta.get("source") or "")),
    ]
    details: list[tuple[str, str]] = []
    for key in ("mode", "grad", "warmup", "iters", "threads", "host", "note"):
        value = meta.get(key)
        if value is not None and value != "":
            details.append((key, str(value)))
    extra = meta.get("extra")
    if isinstance(extra, Mapping):
        for key, value in extra.items():
            if isinstance(value, str | int | float | bool):
                details.append((str(key), str(value)))
    return facts, details


def _side_label(side: Any) -> str:
    if isinstance(side, str):
        return side
    if isinstance(side, Mapping):
        parts = [str(v) for k in ("model", "source", "file", "path") if (v := side.get(k))]
        return " · ".join(parts)
    return ""


# ---------------------------------------------------------------- shared by sections


def _aggregate(rows: Iterable[Row], key: str, fields: Sequence[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        name = row.get(key)
        if name is None:
            continue
        acc = out.setdefault(str(name), {})
        for field in fields:
            x = _num(row.get(field))
            if x is not None:
                acc[field] = acc.get(field, 0.0) + x
    return out


def _short(text: str, limit: int = 48) -> str:
    """Cut the middle of a long label: both a kernel's name and a path's leaf matter."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 5
    return text[:head] + "…" + text[-(limit - 1 - head) :]


# ---------------------------------------------------------------- findings


def _findings_section(page: _Page, findings: Sequence[Mapping[str, Any]]) -> None:
    items = [f for f in findings if isinstance(f, Mapping)]
    if not items:
        body = (
            '<p class="empty">No findings. Either the diagnosis found nothing to flag,'
            " or it was not run for this report.</p>"
        )
    else:
        body = "".join(_finding(f) for f in items)
    page.add("findings", f"Findings ({len(items)})" if items else "Findings", body)


_FINDING_KEYS = {
    "title": ("title", "message", "summary", "what", "name", "code"),
    "detail": ("detail", "details", "evidence", "why", "description"),
    "hint": ("hint", "suggestion", "fix", "advice"),
    "where": ("layer", "path", "op", "where"),
    "severity": ("severity", "level", "kind"),
}


def _finding(f: Mapping[str, Any]) -> str:
    got = {k: _pick(f, *keys) for k, keys in _FINDING_KEYS.items()}
    severity = str(got["severity"] or "info").lower()
    sev_cls = {
        "error": "bad",
        "critical": "bad",
        "high": "bad",
        "warning": "warn",
        "warn": "warn",
        "medium": "warn",
    }
    where = f" <code>{_e(got['where'])}</code>" if got["where"] else ""
    detail = f"<p>{_e(got['detail'])}</p>" if got["detail"] else ""
    hint = f'<p class="hint">{_e(got["hint"])}</p>' if got["hint"] else ""
    return (
        f'<div class="finding {sev_cls.get(severity, "info")}">'
        f'<span class="badge {sev_cls.get(severity, "info")}">{_e(severity)}</span>'
        f"<b>{_e(got['title'] or 'Finding')}</b>{where}{detail}{hint}</div>"
    )
