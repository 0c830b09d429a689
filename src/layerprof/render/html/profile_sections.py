"""The sections drawn from a Profile: latency, hierarchy, layers, operators, notes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerprof.render.html.page import (
    TOP_N,
    Row,
    _aggregate,
    _chart,
    _Col,
    _e,
    _formatter_for,
    _getter,
    _label,
    _num,
    _Page,
    _rows,
    _short,
    _stat_cards,
    _table,
    fmt_calls,
    fmt_count,
    fmt_ms,
    fmt_pct,
    shape_text,
)

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


def _notes_section(page: _Page, pdata: Row) -> None:
    notes = [str(n) for n in pdata.get("notes") or [] if n]
    if notes:
        items = "".join(f"<li>{_e(n)}</li>" for n in notes)
        page.add("notes", "Notes", f'<ul class="notes">{items}</ul>')
