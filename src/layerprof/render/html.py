"""A self-contained, offline HTML report of a profile, a trace analysis or a diff.

The page is one file: the template, CSS, a partial plotly.js bundle (see
``assets/PLOTLY_BUNDLE.md``) and the report's own small script are inlined, so
it opens from disk, can be mailed, and loads nothing from the network.

Split of work: this module renders every table and every piece of text as
escaped HTML (so the numbers are readable even with scripts off, and tests can
check them without a browser); the script draws the charts from one embedded
JSON document and adds sorting and filtering to the tables. The JSON is
escaped so that ``</script>`` or ``<!--`` in a layer name cannot end the
``<script>`` element early.

Inputs are read as dicts (``Profile.to_dict()``, the ``layerprof.trace/1`` and
``layerprof.diff/1`` documents): a key that is missing hides its part of the
page instead of failing, because those schemas grow. No torch import here.
"""

from __future__ import annotations

import functools
import html
import importlib.resources
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from layerprof.errors import UsageError
from layerprof.files import write_atomic
from layerprof.profile import Profile

__all__ = ["render_html", "write_html"]

#: Bars in the "top" charts; rows per rank in the kernel and op tables.
TOP_N = 20
TABLE_LIMIT = 50

Row = Mapping[str, Any]
Formatter = Callable[[Any], str]

# ---------------------------------------------------------------- public API


def render_html(
    *,
    profile: Profile | None = None,
    trace: Mapping[str, Any] | None = None,
    diff: Mapping[str, Any] | None = None,
    findings: Sequence[Mapping[str, Any]] = (),
    title: str | None = None,
) -> str:
    """The whole report page as one string.

    Any combination of ``profile``, ``trace`` (a ``layerprof.trace/1`` dict)
    and ``diff`` (a ``layerprof.diff/1`` dict) may be given, at least one.
    ``findings`` are diagnosis results (dicts with ``severity``, ``title``,
    ``detail``, ``layer``, ``hint``, ... as far as present); an empty
    sequence shows the empty state.
    """
    if profile is None and trace is None and diff is None:
        raise UsageError("render_html needs a profile, a trace analysis or a diff")
    page = _Page()
    pdata = profile.to_dict() if profile is not None else None
    if pdata is not None:
        _profile_sections(page, pdata)
    if trace is not None:
        _trace_section(page, trace)
    if diff is not None:
        _diff_section(page, diff)
    _findings_section(page, findings)
    if pdata is not None:
        _notes_section(page, pdata)
    heading = title or _default_title(pdata, trace, diff)
    return _fill(
        _asset("report.html"),
        title=_e(heading),
        header=_header(heading, pdata, trace, diff),
        nav=page.nav(),
        body="\n".join(page.sections),
        style=_asset("report.css"),
        plotly=_script_safe(_asset("plotly-layerprof.min.js")),
        app=_script_safe(_asset("report.js")),
        data=json_for_script(page.charts),
    )


def write_html(
    path: str | os.PathLike[str],
    *,
    profile: Profile | None = None,
    trace: Mapping[str, Any] | None = None,
    diff: Mapping[str, Any] | None = None,
    findings: Sequence[Mapping[str, Any]] = (),
    title: str | None = None,
) -> Path:
    """Render the report and write it whole or not at all (``OutputError`` if unwritable)."""
    text = render_html(profile=profile, trace=trace, diff=diff, findings=findings, title=title)
    return write_atomic(path, text)


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


# ---------------------------------------------------------------- profile sections


def _profile_sections(page: _Page, pdata: Row) -> None:
    layers = _rows(pdata.get("layers"))
    _latency_section(page, pdata)
    if layers:
        _hierarchy_section(page, layers)
        _layer_table_section(page, layers)
        _top_section(page, layers, _rows(pdata.get("ops")))
    ops = _rows(pdata.get("ops"))
    if any(o.get("layer") is not None for o in ops):
        _layer_ops_section(page, ops)


def _latency_section(page: _Page, pdata: Row) -> None:
    lat = pdata.get("latency_ms")
    overhead = pdata.get("overhead")
    if not isinstance(lat, Mapping) and not isinstance(overhead, Mapping):
        return
    body = ""
    if isinstance(lat, Mapping):
        cards = [
            (k, fmt_ms(lat.get(k)) + " ms", "key" if k == "median" else "")
            for k in ("median", "mean", "p90", "p99", "min", "max", "std")
            if lat.get(k) is not None
        ]
        cards.append(("iterations", fmt_calls(lat.get("n")), ""))
        if lat.get("first") is not None:
            cards.append(("first call (cold)", fmt_ms(lat.get("first")) + " ms", "cold"))
        body += _stat_cards(cards)
        samples = [x for v in lat.get("samples") or [] if (x := _num(v)) is not None]
        if samples:
            page.charts["latency"] = {
                "samples": samples,
                "first": _num(lat.get("first")),
                "median": _num(lat.get("median")),
                "p90": _num(lat.get("p90")),
            }
            body += f'<div class="grid2">{_chart("lp-lat-iter")}{_chart("lp-lat-hist")}</div>'
    if isinstance(overhead, Mapping):
        body += f'<p class="overhead">{_overhead_text(overhead)}</p>'
    meta = pdata.get("meta")
    if isinstance(meta, Mapping) and meta.get("source") == "trace":
        # A trace's units are its steps, timed by the profiler that wrote it.
        step_source = (
            (meta.get("extra") or {}).get("step_source")
            if isinstance(meta.get("extra"), Mapping)
            else None
        )
        intro = (
            "Duration of each step in the trace"
            + (f" ({_e(str(step_source))})" if step_source else "")
            + ", as recorded by torch.profiler: profiled time, not a clean pass."
        )
        page.add("latency", "Step time", body, intro=intro)
        return
    intro = (
        "Wall time of one whole forward in a clean pass (no hooks), after warm-up;"
        " the first (cold) call is reported separately."
    )
    page.add("latency", "Inference latency", body, intro=intro)


def _overhead_text(ov: Row) -> str:
    parts = []
    per_call = _num(ov.get("per_call_us"))
    if per_call is not None:
        calls = _num(ov.get("calls_per_forward"))
        each = f"{per_call:.2f} µs per hooked call"
        parts.append(each + (f" × {calls:g} calls per forward" if calls else ""))
    clean, inst = _num(ov.get("clean_ms")), _num(ov.get("instrumented_ms"))
    if clean is not None and inst is not None:
        ratio = _num(ov.get("ratio"))
        extra = f" ({ratio:.2f}×)" if ratio else ""
        parts.append(f"instrumented forward {fmt_ms(inst)} ms vs clean {fmt_ms(clean)} ms{extra}")
    corrected = ov.get("corrected")
    if corrected is not None:
        parts.append(
            "layer times corrected for it" if corrected else "layer times not corrected for it"
        )
    return "<b>Instrumentation overhead:</b> " + _e("; ".join(parts) or "measured") + "."


def _hierarchy_section(page: _Page, layers: list[Row]) -> None:
    tree = _tree_data(layers)
    if not tree["ids"]:
        return
    page.charts["tree"] = tree
    buttons = (
        '<div class="tools" role="group" aria-label="Chart type">'
        '<button type="button" class="seg on" data-hier="icicle">Icicle</button>'
        '<button type="button" class="seg" data-hier="treemap">Treemap</button>'
        '<span class="hint">Click a block to zoom into it; click the bar at the top'
        " to go back up.</span></div>"
    )
    intro = (
        "Blocks are sized by total (inclusive) time per forward and coloured by self"
        " time: the layer's own time minus its child layers' totals."
    )
    body = buttons + _chart("lp-hier", tall=True)
    page.add("hierarchy", "Module hierarchy", body, intro=intro)


def _tree_data(layers: list[Row]) -> dict[str, Any]:
    """Icicle/treemap arrays; values made consistent so every child fits its parent.

    Medians of totals need not add up exactly (median of sums is not the sum of
    medians); plotly hides children that overflow, so a parent's size is the
    larger of its total and its children's sizes. Hover shows the real total.
    """
    index = {str(r.get("path")): i for i, r in enumerate(layers)}
    parent_of: list[int | None] = []
    for i, row in enumerate(layers):
        p = index.get(str(row.get("parent"))) if row.get("parent") is not None else None
        parent_of.append(p if p is not None and p < i else None)  # parents come first
    sizes = [max(_num(r.get("total_ms")) or 0.0, 0.0) for r in layers]
    kids_size = [0.0] * len(layers)
    for i in range(len(layers) - 1, -1, -1):  # module order: children after parents
        sizes[i] = max(sizes[i], kids_size[i])
        p = parent_of[i]
        if p is not None:
            kids_size[p] += sizes[i]
    roots = [i for i, p in enumerate(parent_of) if p is None]
    synthetic = len(roots) > 1
    out: dict[str, list[Any]] = {
        k: [] for k in ("ids", "parents", "labels", "values", "self", "custom")
    }
    if synthetic:
        out["ids"].append("root")
        out["parents"].append("")
        out["labels"].append("(all roots)")
        out["values"].append(sum(sizes[i] for i in roots))
        out["self"].append(0.0)
        out["custom"].append(["", "", fmt_ms(sum(sizes[i] for i in roots)), "0", "", ""])
    for i, row in enumerate(layers):
        if sizes[i] <= 0:
            continue
        p = parent_of[i]
        path = str(row.get("path") or "")
        name = path.rsplit(".", 1)[-1] if path else str(row.get("type") or "(model)")
        if name.isdigit():  # ModuleList / Sequential items: "3" says little alone
            name = f"{name} · {row.get('type') or ''}"
        out["ids"].append(f"n{i}")
        out["parents"].append(f"n{p}" if p is not None else ("root" if synthetic else ""))
        out["labels"].append(_label(name))
        out["values"].append(sizes[i])
        out["self"].append(_num(row.get("self_ms")) or 0.0)
        out["custom"].append(
            [
                _label(path or "(root)"),
                _label(row.get("type") or ""),
                fmt_ms(row.get("total_ms")),
                fmt_ms(row.get("self_ms")),
                fmt_pct(row.get("share")),
                fmt_calls(row.get("calls")),
            ]
        )
    out["maxdepth"] = [4 if len(out["ids"]) > 80 else -1]
    return out


_BASE_LAYER_KEYS = frozenset(
    {
        "path",
        "type",
        "parent",
        "depth",
        "calls",
        "total_ms",
        "self_ms",
        "share",
        "params",
        "params_own",
        "input_shapes",
        "output_shapes",
        "total_spread_ms",
        "samples",
    }
)


def _extra_layer_cols(layers: list[Row]) -> list[_Col]:
    """Columns for numeric fields beyond the base set (device/backward ms, FLOPs, memory)."""
    keys: list[str] = []
    for row in layers:
        for key, value in row.items():
            if key not in _BASE_LAYER_KEYS and key not in keys and _num(value) is not None:
                keys.append(key)
    cols = []
    for key in keys:
        fmt, header = _formatter_for(key)
        cols.append(_Col(header, _getter(key), fmt, num=True))
    return cols


def _layer_table_section(page: _Page, layers: list[Row]) -> None:
    cols = [
        _Col("#", lambda r: r.get("_index"), fmt_calls, num=True, title="module order"),
        _Col("Layer", lambda r: r.get("path"), css="path"),
        _Col("Type", lambda r: r.get("type"), css="type"),
        _Col("Calls", lambda r: r.get("calls"), fmt_calls, num=True),
        _Col("Total (ms)", lambda r: r.get("total_ms"), fmt_ms, num=True),
        _Col("Self (ms)", lambda r: r.get("self_ms"), fmt_ms, num=True),
        _Col("% of forward", lambda r: r.get("share"), fmt_pct, num=True, css="num share"),
        _Col("Input shapes", lambda r: r.get("input_shapes"), shape_text, css="shape"),
        _Col("Output shapes", lambda r: r.get("output_shapes"), shape_text, css="shape"),
        _Col("Params", lambda r: r.get("params"), fmt_count, num=True),
        *_extra_layer_cols(layers),
    ]
    rows = [{**r, "_index": i} for i, r in enumerate(layers)]
    table = _table(
        "lp-layers", cols, rows, cell=_layer_cell, filter_label="Filter layers by path or type"
    )
    intro = (
        "Times are per forward (summed over a layer's calls): self is the median over the"
        " instrumented iterations, total is self plus the children's totals."
        " Click a header to sort; # restores module order."
    )
    page.add("layers", "Layers", table, intro=intro)


def _layer_cell(col: _Col, row: Row) -> str:
    """Layer-table cells with richer markup: path prefix dimmed, share bar, spread tooltip."""
    if col.header == "Layer":
        path = str(row.get("path") or "")
        if not path:
            return '<td class="path"><b>(root)</b></td>'
        head, dot, leaf = path.rpartition(".")
        prefix = f'<span class="pfx">{_e(head + dot)}</span>' if dot else ""
        return f'<td class="path">{prefix}<b>{_e(leaf)}</b></td>'
    if col.header == "% of forward":
        x = _num(row.get("share")) or 0.0
        width = f"{max(0.0, min(x, 1.0)) * 100:.1f}%"
        return (
            f'<td class="num share" data-v="{x!r}"><i style="width:{width}"></i>'
            f"<span>{_e(fmt_pct(x))}</span></td>"
        )
    if col.header == "Total (ms)" and isinstance(row.get("total_spread_ms"), Mapping):
        spread = row["total_spread_ms"]
        tip = ", ".join(f"{k} {fmt_ms(v)}" for k, v in spread.items() if _num(v) is not None)
        total = _num(row.get("total_ms"))
        sort = f"{total!r}" if total is not None else ""
        return (
            f'<td class="num" data-v="{sort}" title="{_e(tip)} ms">'
            f"{_e(fmt_ms(row.get('total_ms')))}</td>"
        )
    if col.header in ("Input shapes", "Output shapes"):
        text = shape_text(row.get("input_shapes" if col.header[0] == "I" else "output_shapes"))
        short = text if len(text) <= 60 else text[:57] + "…"
        return f'<td class="shape" title="{_e(text)}">{_e(short)}</td>'
    if col.header == "Params" and _num(row.get("params_own")) is not None:
        params = _num(row.get("params"))
        tip = f"{row.get('params')} in total, {row.get('params_own')} own"
        sort = f"{params!r}" if params is not None else ""
        return f'<td class="num" data-v="{sort}" title="{_e(tip)}">{_e(fmt_count(params))}</td>'
    return col.td(row)


def _top_section(page: _Page, layers: list[Row], ops: list[Row]) -> None:
    ranked = sorted(
        (r for r in layers if (_num(r.get("self_ms")) or 0) > 0),
        key=lambda r: _num(r.get("self_ms")) or 0.0,
        reverse=True,
    )[:TOP_N]
    charts, table = "", ""
    if ranked:
        page.charts["topLayers"] = {
            "labels": [
                _label(_short(str(r.get("path") or r.get("type") or "(root)"))) for r in ranked
            ],
            "hover": [_label(f"{r.get('path') or '(root)'} ({r.get('type')})") for r in ranked],
            "self": [_num(r.get("self_ms")) or 0.0 for r in ranked],
            "total": [_num(r.get("total_ms")) or 0.0 for r in ranked],
        }
        charts += _chart("lp-top-layers")
    # forward and backward ops of the same name are different costs: keep them apart
    op_totals = _aggregate(
        [{**o, "name": _op_label(o)} for o in ops],
        "name",
        ("self_ms", "total_ms", "device_ms", "calls"),
    )
    if op_totals:
        has_device = any("device_ms" in o for o in ops)
        key = "device_ms" if has_device else "self_ms"
        top = sorted(op_totals.items(), key=lambda kv: kv[1].get(key, 0.0), reverse=True)[:TOP_N]
        page.charts["topOps"] = {
            "labels": [_label(_short(name)) for name, _ in top],
            "hover": [_label(name) for name, _ in top],
            "self": [v.get("self_ms", 0.0) for _, v in top],
            "device": [v.get("device_ms", 0.0) for _, v in top] if has_device else None,
        }
        charts += _chart("lp-top-ops")
        table = _ops_table(op_totals)
    if charts:
        page.add("top", "Where the time goes", f'<div class="grid2">{charts}</div>{table}')


def _ops_table(op_totals: Mapping[str, Mapping[str, float]]) -> str:
    rows: list[Row] = [{"name": name, **v} for name, v in op_totals.items()]
    rows.sort(key=lambda r: _num(r.get("self_ms")) or 0.0, reverse=True)
    cols = [
        _Col("Operator", lambda r: r.get("name"), css="path"),
        _Col("Calls", lambda r: r.get("calls"), fmt_calls, num=True),
        _Col("Self (ms)", lambda r: r.get("self_ms"), fmt_ms, num=True),
        _Col("Total (ms)", lambda r: r.get("total_ms"), fmt_ms, num=True),
    ]
    if any("device_ms" in r for r in rows):
        cols.append(_Col("Device (ms)", lambda r: r.get("device_ms"), fmt_ms, num=True))
    return "<h3>Operators</h3>" + _table("lp-ops", cols, rows, filter_label="Filter operators")


def _op_label(op: Row) -> str:
    name = str(op.get("name"))
    return f"{name} [backward]" if op.get("phase") == "backward" else name


def _layer_ops_section(page: _Page, ops: list[Row]) -> None:
    by_layer: dict[str, list[Row]] = {}
    for op in ops:
        by_layer.setdefault(
            str(op.get("layer") if op.get("layer") is not None else "(unattributed)"), []
        ).append(op)
    order = sorted(
        by_layer.items(),
        key=lambda kv: sum(_num(o.get("self_ms")) or 0 for o in kv[1]),
        reverse=True,
    )
    has_device = any("device_ms" in o for o in ops)
    blocks = []
    for layer, layer_ops in order:
        layer_ops = sorted(layer_ops, key=lambda o: _num(o.get("self_ms")) or 0.0, reverse=True)
        total = sum(_num(o.get("self_ms")) or 0.0 for o in layer_ops)
        lines = "".join(
            f'<tr><td class="path">{_e(_op_label(o))}</td>'
            f'<td class="shape">{_e(o.get("input_shapes") or "")}</td>'
            f'<td class="num">{_e(fmt_calls(o.get("calls")))}</td>'
            f'<td class="num">{_e(fmt_ms(o.get("self_ms")))}</td>'
            f'<td class="num">{_e(fmt_ms(o.get("total_ms")))}</td>'
            + (f'<td class="num">{_e(fmt_ms(o.get("device_ms")))}</td>' if has_device else "")
            + "</tr>"
            for o in layer_ops
        )
        dev_h = "<th>Device (ms)</th>" if has_device else ""
        blocks.append(
            f'<details class="layer-ops"><summary><code>{_e(layer or "(root)")}</code>'
            f'<span class="muted">{len(layer_ops)} ops · {_e(fmt_ms(total))} ms self</span></summary>'
            '<div class="table-wrap"><table class="data"><thead><tr><th>Operator</th>'
            "<th>Input shapes</th><th>Calls</th><th>Self (ms)</th><th>Total (ms)</th>"
            f"{dev_h}</tr></thead><tbody>{lines}</tbody></table></div></details>"
        )
    intro = (
        "The operators each layer ran directly (not inside a child layer), busiest layers first."
    )
    page.add("layer-ops", "Operators per layer", "".join(blocks), intro=intro)


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


def _notes_section(page: _Page, pdata: Row) -> None:
    notes = [str(n) for n in pdata.get("notes") or [] if n]
    if notes:
        items = "".join(f"<li>{_e(n)}</li>" for n in notes)
        page.add("notes", "Notes", f'<ul class="notes">{items}</ul>')


# ---------------------------------------------------------------- trace section


def _trace_section(page: _Page, trace: Mapping[str, Any]) -> None:
    ranks = _rows(trace.get("ranks"))
    if not ranks:
        page.add("trace", "Trace", '<p class="empty">The trace analysis has no ranks.</p>')
        return
    body = _trace_steps(page, ranks) + _trace_devices(page, ranks) + _trace_kernels(page, ranks)
    body += _trace_memcpy(ranks) + _trace_launch(ranks) + _trace_memory(ranks) + _trace_ops(ranks)
    warnings = [str(w) for w in trace.get("warnings") or [] if w]
    for i, rank in enumerate(ranks):
        warnings += [f"{_rank_name(rank, i)}: {n}" for n in rank.get("notes") or [] if n]
    if warnings:
        body = "".join(f'<p class="warning">{_e(w)}</p>' for w in warnings) + body
    page.add(
        "trace", "Trace analysis", body or '<p class="empty">No step, device or kernel data.</p>'
    )


def _rank_name(rank: Row, i: int) -> str:
    r = rank.get("rank")
    return f"rank {r}" if r is not None else f"file {i}"


def _trace_steps(page: _Page, ranks: list[Row]) -> str:
    series = []
    for i, rank in enumerate(ranks):
        steps = _rows(rank.get("steps"))
        ms = [_num(s.get("ms")) for s in steps]
        if steps:
            series.append(
                {
                    "name": _label(_rank_name(rank, i)),
                    "steps": [_label(s.get("name") or f"step {j}") for j, s in enumerate(steps)],
                    "ms": ms,
                }
            )
    stats_rows = [
        {
            "rank": _rank_name(r, i),
            "file": r.get("file"),
            "source": r.get("step_source"),
            "n": len(_rows(r.get("steps"))),
            **_mapping(r.get("step_ms")),
        }
        for i, r in enumerate(ranks)
    ]
    if not series and not any("median" in r for r in stats_rows):
        return ""
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("File", lambda r: r.get("file"), css="path"),
        _Col("Step definition", lambda r: r.get("source")),
        _Col("Steps", lambda r: r.get("n"), fmt_calls, num=True),
        *[
            _Col(f"{k} (ms)", _getter(k), fmt_ms, num=True)
            for k in ("median", "mean", "p90", "min", "max")
        ],
    ]
    chart = ""
    if series:
        page.charts["steps"] = series
        chart = _chart("lp-steps")
    return "<h3>Step times per rank</h3>" + chart + _table("lp-trace-steps", cols, stats_rows)


_DEVICE_FIELDS = ("window_ms", "busy_ms", "idle_ms", "kernel_ms", "memcpy_ms", "memset_ms")


def _trace_devices(page: _Page, ranks: list[Row]) -> str:
    rows = []
    for i, rank in enumerate(ranks):
        for dev in _rows(rank.get("devices")):
            rows.append({"rank": _rank_name(rank, i), **dev})
    if not rows:
        return '<p class="empty">No GPU activity in this trace (CPU only).</p>'
    labels = [_label(f"{r['rank']} · dev {r.get('device', '?')}") for r in rows]
    page.charts["devices"] = {
        "labels": labels,
        **{f: [_num(r.get(f)) or 0.0 for r in rows] for f in _DEVICE_FIELDS},
        # busy inside the step window, so that busy + idle = window
        "busy_ms": [_num(_pick(r, "busy_in_window_ms", "busy_ms")) or 0.0 for r in rows],
        "utilization": [_num(r.get("utilization")) for r in rows],
    }
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("Device", lambda r: r.get("device")),
        *[
            _Col(
                f.removesuffix("_ms").capitalize() + " (ms)",
                _getter(f),
                fmt_ms,
                num=True,
            )
            for f in _DEVICE_FIELDS
        ],
        _Col("Utilization", lambda r: r.get("utilization"), fmt_pct, num=True),
    ]
    charts = f'<div class="grid2">{_chart("lp-busy")}{_chart("lp-breakdown")}</div>'
    intro = (
        '<p class="intro">Busy = union of kernel, memcpy and memset intervals; idle = step'
        " window minus busy.</p>"
    )
    return "<h3>GPU busy and idle</h3>" + intro + charts + _table("lp-trace-devices", cols, rows)


def _trace_kernels(page: _Page, ranks: list[Row]) -> str:
    kernels = [
        {"rank": _rank_name(r, i), **k}
        for i, r in enumerate(ranks)
        for k in _rows(r.get("kernels"))
    ]
    if not kernels:
        return ""
    totals = _aggregate(kernels, "name", ("total_ms",))
    top = sorted(totals.items(), key=lambda kv: kv[1].get("total_ms", 0.0), reverse=True)[:TOP_N]
    page.charts["kernels"] = {
        "labels": [_label(_short(n)) for n, _ in top],
        "hover": [_label(n) for n, _ in top],
        "ms": [v.get("total_ms", 0.0) for _, v in top],
        "ranks": len(ranks),
    }
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("Kernel", lambda r: r.get("name"), css="path"),
        _Col("Calls", lambda r: r.get("calls"), fmt_calls, num=True),
        *[
            _Col(
                f"{k.removesuffix('_ms').capitalize()} (ms)",
                _getter(k),
                fmt_ms,
                num=True,
            )
            for k in ("total_ms", "mean_ms", "min_ms", "max_ms")
        ],
    ]
    shown = _top_per_rank(kernels, "total_ms")
    caption = _cap_text(len(shown), len(kernels))
    return (
        "<h3>Kernels</h3>"
        + _chart("lp-kernels", tall=len(top) > 10)
        + _table("lp-trace-kernels", cols, shown, filter_label="Filter kernels", caption=caption)
    )


def _trace_launch(ranks: list[Row]) -> str:
    """Launch overhead per rank: runtime calls that launched GPU work, and the delay."""
    rows = []
    for i, r in enumerate(ranks):
        launch = _mapping(r.get("launch"))
        if not launch:
            continue
        call, delay = _mapping(launch.get("call_us")), _mapping(launch.get("delay_us"))
        rows.append(
            {
                "rank": _rank_name(r, i),
                "launches": launch.get("launches"),
                "call_total_ms": launch.get("call_total_ms"),
                "call_median_us": call.get("median"),
                "delay_median_us": delay.get("median"),
                "delay_p90_us": delay.get("p90"),
                "sync_ms": launch.get("sync_ms"),
            }
        )
    if not rows:
        return ""
    cols = [
        _Col("Rank", _getter("rank")),
        _Col("Launches", _getter("launches"), fmt_calls, num=True),
        _Col("Launch calls (ms)", _getter("call_total_ms"), fmt_ms, num=True),
        _Col("Call median (µs)", _getter("call_median_us"), _fmt_us, num=True),
        _Col("Launch delay median (µs)", _getter("delay_median_us"), _fmt_us, num=True),
        _Col("Launch delay p90 (µs)", _getter("delay_p90_us"), _fmt_us, num=True),
        _Col("Synchronize (ms)", _getter("sync_ms"), fmt_ms, num=True),
    ]
    return (
        '<h3>Launch overhead</h3><p class="note">Runtime calls that launched GPU work'
        " (kernels, copies, memsets) and the delay from a launch's end to its kernel's start.</p>"
        + _table("lp-trace-launch", cols, rows)
    )


def _fmt_us(value: Any) -> str:
    v = _num(value)
    return f"{v:,.1f}" if v is not None else "–"


def _trace_memory(ranks: list[Row]) -> str:
    """Peak allocated memory per device and the operators that allocated most."""
    devices = [
        {"rank": _rank_name(r, i), **d}
        for i, r in enumerate(ranks)
        for d in _rows(_mapping(r.get("memory")).get("devices"))
    ]
    tops = [
        {"rank": _rank_name(r, i), **t}
        for i, r in enumerate(ranks)
        for t in _rows(_mapping(r.get("memory")).get("top_ops"))
    ]
    if not devices:
        return ""
    dev_cols = [
        _Col("Rank", _getter("rank")),
        _Col("Device", _getter("device")),
        _Col("Peak allocated", _getter("peak_allocated_bytes"), fmt_bytes, num=True),
        _Col("Allocations", _getter("allocations"), fmt_calls, num=True),
        _Col("Allocated", _getter("allocated_bytes"), fmt_bytes, num=True),
    ]
    op_cols = [
        _Col("Rank", _getter("rank")),
        _Col("Operator", _getter("op"), css="path"),
        _Col("Allocations", _getter("allocations"), fmt_calls, num=True),
        _Col("Bytes", _getter("bytes"), fmt_bytes, num=True),
    ]
    out = "<h3>Memory</h3>" + _table("lp-trace-memory", dev_cols, devices)
    if tops:
        out += _table("lp-trace-memory-ops", op_cols, tops)
    return out


def _trace_memcpy(ranks: list[Row]) -> str:
    rows = [
        {"rank": _rank_name(r, i), **m} for i, r in enumerate(ranks) for m in _rows(r.get("memcpy"))
    ]
    if not rows:
        return ""
    cols = [
        _Col("Rank", _getter("rank")),
        _Col("Kind", _getter("kind")),
        _Col("Calls", _getter("calls"), fmt_calls, num=True),
        _Col("Total (ms)", _getter("total_ms"), fmt_ms, num=True),
        _Col("Bytes", _getter("bytes"), fmt_bytes, num=True),
        _Col(
            "GB/s",
            _getter("gb_per_s"),
            lambda v: f"{v:.1f}" if _num(v) is not None else "–",
            num=True,
        ),
    ]
    return "<h3>Memory copies and sets</h3>" + _table("lp-trace-memcpy", cols, rows)


def _trace_ops(ranks: list[Row]) -> str:
    ops = [
        {"rank": _rank_name(r, i), **o} for i, r in enumerate(ranks) for o in _rows(r.get("ops"))
    ]
    if not ops:
        return ""
    cols = [
        _Col("Rank", lambda r: r.get("rank")),
        _Col("Operator", lambda r: r.get("name"), css="path"),
        _Col("Calls", lambda r: r.get("calls"), fmt_calls, num=True),
        _Col("Self (ms)", lambda r: r.get("self_ms"), fmt_ms, num=True),
        _Col("Total (ms)", lambda r: r.get("total_ms"), fmt_ms, num=True),
        _Col("Device (ms)", lambda r: r.get("device_ms"), fmt_ms, num=True),
    ]
    shown = _top_per_rank(ops, "self_ms")
    caption = _cap_text(len(shown), len(ops))
    return "<h3>Operators (host)</h3>" + _table(
        "lp-trace-ops", cols, shown, filter_label="Filter operators", caption=caption
    )


def _top_per_rank(rows: Sequence[Row], key: str) -> list[Row]:
    by_rank: dict[str, list[Row]] = {}
    for row in rows:
        by_rank.setdefault(str(row.get("rank")), []).append(row)
    out: list[Row] = []
    for group in by_rank.values():
        group.sort(key=lambda r: _num(r.get(key)) or 0.0, reverse=True)
        out.extend(group[:TABLE_LIMIT])
    return out


def _cap_text(shown: int, total: int) -> str:
    return f"Showing the top {TABLE_LIMIT} per rank ({shown} of {total})." if shown < total else ""


# ---------------------------------------------------------------- diff section

_BAD = ("regress", "slower", "worse", "fail")
_GOOD = ("improv", "faster", "better")
_DIFF_TABLES = (
    ("steps", "Steps"),
    ("layers", "Layers"),
    ("ops", "Operators"),
    ("kernels", "Kernels"),
)


def _status_class(status: Any) -> str:
    s = str(status or "").lower()
    if any(w in s for w in _BAD):
        return "bad"
    if any(w in s for w in _GOOD):
        return "good"
    if s in ("added", "removed", "new", "gone", "missing"):
        return "info"
    return "muted"


def _side_ms(row: Row, side: str) -> Any:
    value = _pick(row, f"{side}_ms", side)
    if isinstance(value, Mapping):
        value = _pick(value, "median", "ms", "total_ms", "self_ms", "value")
    return value


def _delta_ms(row: Row) -> Any:
    d = _pick(row, "delta_ms", "delta")
    if isinstance(d, Mapping):
        d = _pick(d, "ms", "median")
    if (
        d is None
        and _num(_side_ms(row, "base")) is not None
        and _num(_side_ms(row, "new")) is not None
    ):
        d = _num(_side_ms(row, "new")) - _num(_side_ms(row, "base"))  # type: ignore[operator]
    return d


def _delta_pct(row: Row) -> float | None:
    """Relative change as a fraction; ``*_pct`` fields are percentages."""
    pct = _num(_pick(row, "delta_pct", "pct", "percent"))
    if pct is not None:
        return pct / 100
    rel = _num(_pick(row, "delta_rel", "rel", "ratio_change"))
    if rel is not None:
        return rel
    base, d = _num(_side_ms(row, "base")), _num(_delta_ms(row))
    return d / base if base and d is not None else None


def _row_name(row: Row) -> str:
    if "path" not in row and "name" not in row and _num(row.get("index")) is not None:
        return f"step {row['index']}"
    value = _pick(row, "path", "name", "key", "step", "index")
    return "(root)" if value == "" else str(value if value is not None else "")


def _diff_section(page: _Page, diff: Mapping[str, Any]) -> None:
    body = ""
    for w in diff.get("warnings") or []:
        body += f'<p class="warning">{_e(w)}</p>'
    message = _pick(diff, "verdict", "message")
    verdict = _pick(_mapping(diff.get("summary")), "verdict")
    if isinstance(message, str):
        body += f'<p class="verdict {_status_class(verdict)}">{_e(message)}</p>'
    if diff.get("comparable") is False and diff.get("reason"):
        body += f'<p class="warning">{_e(diff["reason"])}</p>'
    lat = diff.get("latency")
    if isinstance(lat, Mapping):
        body += _diff_latency(lat)
    for key, heading in _DIFF_TABLES:
        rows = _rows(diff.get(key))
        if rows:
            body += _diff_table(page, key, heading, rows)
    metric = _pick(_mapping(diff.get("settings")), "layer_metric")
    if metric and _rows(diff.get("layers")):
        body += f'<p class="caption">Layers are compared by {_e(metric)} time.</p>'
    page.add("diff", "Changes between runs", body or '<p class="empty">The diff is empty.</p>')


def _diff_latency(lat: Row) -> str:
    status = lat.get("status")
    cls = _status_class(status)
    cards = [
        ("base", fmt_ms(_side_ms(lat, "base")) + " ms", ""),
        ("new", fmt_ms(_side_ms(lat, "new")) + " ms", ""),
        (
            "change",
            ("+" if (_num(_delta_ms(lat)) or 0) > 0 else "") + fmt_ms(_delta_ms(lat)) + " ms",
            cls,
        ),
        ("change %", fmt_pct(_delta_pct(lat), signed=True), cls),
    ]
    if status is not None:
        cards.append(("verdict", str(status), cls))
    return "<h3>Latency</h3>" + _stat_cards(cards)


def _diff_table(page: _Page, key: str, heading: str, rows: list[Row]) -> str:
    cols = [
        _Col(heading.rstrip("s") if key != "ops" else "Operator", _row_name, css="path"),
    ]
    if any("type" in r for r in rows):
        cols.append(_Col("Type", _getter("type")))
    if any(r.get("input_shapes") for r in rows):
        cols.append(_Col("Input shapes", _getter("input_shapes"), css="shape"))
    cols += [
        _Col("Base (ms)", lambda r: _side_ms(r, "base"), fmt_ms, num=True),
        _Col("New (ms)", lambda r: _side_ms(r, "new"), fmt_ms, num=True),
        _Col(
            "Δ (ms)", _delta_ms, lambda v: ("+" if (_num(v) or 0) > 0 else "") + fmt_ms(v), num=True
        ),
        _Col("Δ %", _delta_pct, lambda v: fmt_pct(v, signed=True), num=True),
        _Col("Status", _getter("status")),
    ]
    if any(r.get("note") for r in rows):
        cols.append(_Col("Note", _getter("note")))

    def cell(col: _Col, row: Row) -> str:
        if col.header == "Status":
            status = row.get("status")
            return f'<td><span class="badge {_status_class(status)}">{_e(status or "")}</span></td>'
        return col.td(row)

    if key == "layers":
        ranked = sorted(
            (r for r in rows if _num(_delta_ms(r)) is not None),
            key=lambda r: abs(_num(_delta_ms(r)) or 0.0),
            reverse=True,
        )[:TOP_N]
        if ranked:
            page.charts["diffLayers"] = {
                "labels": [_label(_short(_row_name(r))) for r in ranked],
                "delta": [_num(_delta_ms(r)) for r in ranked],
                "status": [_status_class(r.get("status")) for r in ranked],
            }
    chart = _chart("lp-diff-layers") if key == "layers" and "diffLayers" in page.charts else ""
    table = _table(
        f"lp-difftable-{key}", cols, rows, cell=cell, filter_label=f"Filter {heading.lower()}"
    )
    return f"<h3>{_e(heading)}</h3>{chart}{table}"


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
