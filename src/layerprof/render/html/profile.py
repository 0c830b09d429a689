"""The sections drawn from one Profile: latency, the module hierarchy, the layer table,
where the time goes, and the operators of each layer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from layerprof.pivot.profile import LayerRow, tree_of
from layerprof.pivot.records import OpStat, Overhead, merge_layers
from layerprof.render.html.charts import BarSeries, bars, in_ms, latency_chart, tree_chart
from layerprof.render.html.compiled import estimate_columns
from layerprof.render.html.page import (
    TOP_N,
    Col,
    Section,
    bytes_col,
    calls_col,
    chart_slot,
    count_col,
    esc,
    heading,
    latency_slot,
    share_col,
    stat_cards,
    table,
    text_col,
    time_col,
)
from layerprof.render.html.subject import Subject
from layerprof.stats import Summary
from layerprof.units import (
    US,
    TimeUnit,
    fmt_calls,
    fmt_share,
    format_shapes,
    human_time,
    unit_for,
)

# ---------------------------------------------------------------- latency


def latency_section(s: Subject) -> Section | None:
    """The clean pass's latency (a trace's step times), its spread, the cold call and
    the instrumentation's cost."""
    p = s.profile
    if p is None or (p.latency is None and p.overhead is None and p.first_ns is None):
        return None
    trace = p.meta.source == "trace"
    cards = _summary_cards(p.latency) if p.latency is not None else []
    if p.first_ns is not None:
        cards.append(("first call (cold)", human_time(p.first_ns), "cold"))
    body = stat_cards(cards) if cards else ""
    what = "step" if trace else "iteration (0 = first call)"
    chart = latency_chart(p.latency_ns, p.first_ns, x_title=what)
    charts = {}
    if chart is not None:
        charts = {"lp-lat": chart}
        body += latency_slot("lp-lat")
    if p.overhead is not None:
        body += f'<p class="overhead">{overhead_text(p.overhead)}</p>'
    if trace:
        rule = p.trace.steps.definition if p.trace.steps is not None else "the trace's steps"
        intro = (
            f"Duration of each complete step ({rule}), as recorded by torch.profiler:"
            " profiled time, not a clean pass."
        )
        return Section("latency", "Step time", body, intro + _rank_note(s), charts)
    g = p.generation
    if not cards and chart is None and g is not None and g.ttft_ns is not None:
        # a generate's clean pass timed tokens, not one forward: its figures are there
        intro = (
            "A generate's clean pass (no hooks) timed the first token and the gaps between"
            " tokens: see Generation. Here, what the per-layer pass's hooks cost."
        )
        return Section("overhead", "Instrumentation overhead", body, intro + _rank_note(s))
    if not cards and chart is None:
        # recorded in the user's own loop (a Recorder): no clean pass ran, so there is no
        # latency to show, only what the hooks cost (an empty latency card said otherwise)
        intro = (
            "Recorded in your own loop: no clean pass without hooks ran, so there is no"
            " inference latency here (the step view has the loop's own times)."
        )
        return Section("overhead", "Instrumentation overhead", body, intro + _rank_note(s))
    intro = (
        "Wall time of one whole forward in a clean pass (no hooks), after warm-up;"
        " the first (cold) call is reported separately."
    )
    return Section("latency", "Inference latency", body, intro + _rank_note(s), charts)


def _rank_note(s: Subject) -> str:
    p = s.profile
    if not s.multi_rank or p is None:
        return ""
    return f" Rank {p.rank} of {len(s.ranks)}; the trace sections below compare all ranks."


def _summary_cards(summary: Summary) -> list[tuple[str, str, str]]:
    """A Summary as stat cards: median (with its confidence interval), spread, n."""
    cards = [("median", human_time(summary.median), "key")]
    if summary.ci_low is not None and summary.ci_high is not None:
        unit = unit_for(summary.ci_high)
        cards.append(
            (
                "95% CI of median",
                f"{unit.fmt(summary.ci_low)} – {unit.fmt(summary.ci_high)} {unit.name}",
                "",
            )
        )
    cards += [
        ("mean", human_time(summary.mean), ""),
        ("p90", human_time(summary.p90), ""),
        ("p99", human_time(summary.p99), ""),
        ("min", human_time(summary.min), ""),
        ("max", human_time(summary.max), ""),
        ("std", human_time(summary.std), ""),
    ]
    if summary.mad is not None:
        cards.append(("MAD", human_time(summary.mad), ""))
    cards.append(("n", fmt_calls(summary.n), ""))
    return cards


def overhead_text(ov: Overhead) -> str:
    parts = [f"{US.fmt(ov.per_call_ns)} µs per hooked call ({US.fmt(ov.inside_ns)} µs inside it)"]
    if not ov.measured:
        parts = ["the cost per hooked call could not be measured (see the notes)"]
    if ov.calls_per_forward:
        parts[0] += f" × {fmt_calls(ov.calls_per_forward)} calls per forward"
    if ov.method == "ops":  # torch.profiler's recording cost: per operator and per range
        parts = [
            f"{US.fmt(ov.per_op_ns)} µs per recorded operator × {fmt_calls(ov.ops_per_forward)}"
            f" and {US.fmt(ov.per_call_ns)} µs per layer range"
            f" × {fmt_calls(ov.calls_per_forward)} per forward"
        ]
    if ov.clean_ns is not None and ov.instrumented_ns is not None:
        ratio = f" ({ov.instrumented_ns / ov.clean_ns:.2f}×)" if ov.clean_ns > 0 else ""
        parts.append(
            f"instrumented forward {human_time(ov.instrumented_ns)}"
            f" vs clean {human_time(ov.clean_ns)}{ratio}"
        )
    parts.append(
        "layer times corrected for it" if ov.corrected else "layer times not corrected for it"
    )
    return "<b>Instrumentation overhead:</b> " + esc("; ".join(parts)) + "."


# ---------------------------------------------------------------- hierarchy


def hierarchy_section(s: Subject) -> Section | None:
    chart = tree_chart(tree_of(s.rows)) if s.rows else None
    if chart is None:
        return None
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
    body = buttons + chart_slot("lp-hier", tall=True)
    return Section("hierarchy", "Module hierarchy", body, intro, {"lp-hier": chart})


# ---------------------------------------------------------------- layers


def layers_section(s: Subject) -> Section | None:
    rows = s.rows
    if not rows:
        return None
    order = {r.path: i for i, r in enumerate(rows)}
    cols = _layer_columns(rows, order) + estimate_columns(s)  # compiled: fused-kernel splits
    intro = (
        "Times are per forward (summed over a layer's calls): self is the median over the"
        " measured iterations, total is self plus the children's totals. Hover a total for"
        " the measured totals' spread, a self time for its confidence interval."
        " Click a header to sort; # restores module order."
    )
    body = table("lp-layers", cols, rows, filter_label="Filter layers by path or type")
    return Section("layers", "Layers", body, intro)


def _layer_unit(rows: Sequence[LayerRow]) -> TimeUnit:
    """One unit for every time in the layer table, as in the console."""
    largest = max(
        (
            v
            for r in rows
            for v in (r.total_ns, r.device_total_ns, r.backward_total_ns)
            if v is not None
        ),
        default=0.0,
    )
    return unit_for(largest)


def _layer_columns(rows: Sequence[LayerRow], order: dict[str, int]) -> list[Col[LayerRow]]:
    """The layer table's columns; those no row has a value for are left out."""
    unit = _layer_unit(rows)
    device = any(r.device_total_ns is not None for r in rows)
    host = "Host " if device else ""
    cols: list[Col[LayerRow]] = [
        Col("#", lambda r: str(order[r.path]), lambda r: order[r.path], title="module order"),
        Col("Layer", lambda r: r.path or "(root)", css="path", markup=_path_markup),
        text_col("Type", lambda r: r.type, css="type"),
        Col(
            "Calls",
            lambda r: fmt_calls(r.calls) + ("~" if r.calls_vary else ""),
            lambda r: r.calls,
            tip=lambda r: "varies between iterations (mean shown)" if r.calls_vary else "",
        ),
        time_col(f"{host}Total", lambda r: r.total_ns, unit, tip=_total_tip),
        time_col(f"{host}Self", lambda r: r.self_ns, unit, tip=_self_tip),
        Col(
            "% of forward",
            lambda r: fmt_share(r.share),
            lambda r: r.share,
            css="num share",
            markup=_share_markup,
        ),
    ]
    if device:
        cols += [
            time_col("Device total", lambda r: r.device_total_ns, unit),
            time_col("Device self", lambda r: r.device_self_ns, unit),
        ]
    if any(r.backward_total_ns is not None for r in rows):
        cols += [
            time_col("Backward total", lambda r: r.backward_total_ns, unit),
            time_col("Backward self", lambda r: r.backward_self_ns, unit),
        ]
    if any(r.input_shapes or r.output_shapes for r in rows):
        cols += [
            _shape_col("Input shapes", lambda r: format_shapes(r.input_shapes)),
            _shape_col("Output shapes", lambda r: format_shapes(r.output_shapes)),
        ]
    if any(r.params for r in rows):
        cols.append(replace(count_col("Params", lambda r: r.params), tip=_params_tip))
    if any(r.flops is not None for r in rows):
        cols.append(count_col("FLOPs", lambda r: r.flops))
    if any(r.flop_detail is not None and r.flop_detail.uncounted_ns for r in rows):
        cols.append(share_col("Uncounted", _uncounted))
    if any(r.output_bytes is not None for r in rows):
        cols.append(bytes_col("Output", lambda r: r.output_bytes))
    if any(r.peak_bytes is not None for r in rows):
        cols.append(bytes_col("Peak mem", lambda r: r.peak_bytes))
    return cols


def _uncounted(r: LayerRow) -> float | None:
    """Share of the layer's op time in operators without a usable FLOP formula."""
    return r.flop_detail.uncounted_share if r.flop_detail is not None else None


def _path_markup(r: LayerRow) -> str:
    """The path with its prefix dimmed and its leaf in bold."""
    if not r.path:
        return "<b>(root)</b>"
    head, dot, leaf = r.path.rpartition(".")
    prefix = f'<span class="pfx">{esc(head + dot)}</span>' if dot else ""
    return f"{prefix}<b>{esc(leaf)}</b>"


def _share_markup(r: LayerRow) -> str:
    width = f"{max(0.0, min(r.share, 1.0)) * 100:.1f}%"
    return f'<i style="width:{width}"></i><span>{esc(fmt_share(r.share))}</span>'


def _total_tip(r: LayerRow) -> str:
    t = r.total
    if t is None:
        return ""
    return (
        f"measured totals: median {human_time(t.median)}, p90 {human_time(t.p90)},"
        f" min {human_time(t.min)}, max {human_time(t.max)} (n={t.n})"
    )


def _self_tip(r: LayerRow) -> str:
    t = r.self_summary
    if t is None or t.ci_low is None or t.ci_high is None:
        return ""
    mad = f"; MAD {human_time(t.mad)}" if t.mad is not None else ""
    what = "mean (calls vary)" if r.calls_vary else "median"
    return f"{what}; 95% CI of the median {human_time(t.ci_low)} – {human_time(t.ci_high)}{mad}"


def _params_tip(r: LayerRow) -> str:
    return f"{r.params:,} in total, {r.params_own:,} own"


def _shape_col(header: str, get: Callable[[LayerRow], str]) -> Col[LayerRow]:
    """Shapes cut at 60 characters; the whole text on hover."""

    def cut(r: LayerRow) -> str:
        whole = get(r)
        return whole if len(whole) <= 60 else whole[:57] + "…"

    return Col(header, cut, css="shape", tip=get)


# ---------------------------------------------------------------- where the time goes


def top_section(s: Subject) -> Section | None:
    """The layers with most self time, the busiest operators, and the operator table."""
    p = s.profile
    if p is None:
        return None
    charts = {}
    ranked = sorted((r for r in s.rows if r.self_ns > 0), key=lambda r: -r.self_ns)[:TOP_N]
    if ranked:
        series = [BarSeries("self", in_ms([r.self_ns for r in ranked]))]
        if any(r.device_self_ns is not None for r in ranked):
            series.append(
                BarSeries("device self", in_ms([r.device_self_ns for r in ranked]), "warn")
            )
        names = [f"{r.path or '(root)'} ({r.type})" for r in ranked]
        charts["lp-top-layers"] = bars(
            "Top layers by self time", names, series, axis="ms per forward"
        )
    ops = phase_ops(p.ops)
    if ops:
        device = any(o.device_ns is not None for o in ops)
        top = sorted(ops, key=lambda o: -(o.device_ns or 0.0) if device else -o.self_ns)[:TOP_N]
        series = [BarSeries("host self", in_ms([o.self_ns for o in top]))]
        if device:
            series.append(BarSeries("device", in_ms([o.device_ns for o in top]), "warn"))
        charts["lp-top-ops"] = bars(
            "Top operators", [_op_label(o) for o in top], series, axis="ms per iteration"
        )
    if not charts:
        return None
    body = '<div class="grid2">' + "".join(chart_slot(k) for k in charts) + "</div>"
    if ops:
        body += heading("Operators") + table(
            "lp-ops", op_columns(ops), sorted(ops, key=lambda o: -o.self_ns),
            filter_label="Filter operators",
        )  # fmt: skip
    intro = (
        "Operators are summed over the layers they ran in, per iteration (median over"
        " iterations); backward operators are listed apart."
        if ops
        else ""
    )
    return Section("top", "Where the time goes", body, intro, charts)


def phase_ops(ops: Sequence[OpStat]) -> list[OpStat]:
    """Operators summed over layers per (name, input shapes), forward and backward apart."""
    out: list[OpStat] = []
    for phase in ("forward", "backward"):
        out += [replace(o, phase=phase) for o in merge_layers([o for o in ops if o.phase == phase])]
    return out


def _op_label(o: OpStat) -> str:
    return f"{o.name} [backward]" if o.phase == "backward" else o.name


def op_columns(ops: Sequence[OpStat]) -> list[Col[OpStat]]:
    unit = unit_for(max((max(o.total_ns, o.device_ns or 0.0) for o in ops), default=0.0))
    cols: list[Col[OpStat]] = [text_col("Operator", _op_label, css="path")]
    if any(o.input_shapes for o in ops):
        cols.append(text_col("Input shapes", lambda o: o.input_shapes, css="shape"))
    cols += [
        calls_col("Calls", lambda o: o.calls),
        time_col("Self", lambda o: o.self_ns, unit),
        time_col("Total", lambda o: o.total_ns, unit),
    ]
    if any(o.device_ns is not None for o in ops):
        cols.append(time_col("Device", lambda o: o.device_ns, unit))
    return cols


# ---------------------------------------------------------------- operators per layer


def layer_ops_section(s: Subject) -> Section | None:
    p = s.profile
    if p is None or all(o.layer is None for o in p.ops):
        return None
    groups: dict[str, list[OpStat]] = {}
    for o in p.ops:
        where = "(unattributed)" if o.layer is None else (o.layer or "(root)")
        groups.setdefault(where, []).append(o)
    ranked = sorted(groups.items(), key=lambda kv: -sum(o.self_ns for o in kv[1]))
    blocks = []
    for i, (layer, ops) in enumerate(ranked):
        total = sum(o.self_ns for o in ops)
        rows = sorted(ops, key=lambda o: -o.self_ns)
        blocks.append(
            f'<details class="layer-ops"><summary><code>{esc(layer)}</code>'
            f'<span class="muted">{len(ops)} ops · {esc(human_time(total))} self</span></summary>'
            + table(f"lp-layer-ops-{i}", op_columns(rows), rows)
            + "</details>"
        )
    intro = (
        "The operators each layer ran directly (not inside a child layer), per iteration,"
        " busiest layers first."
    )
    return Section("layer-ops", "Operators per layer", "".join(blocks), intro)
