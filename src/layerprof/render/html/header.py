"""The page's title and header: what was profiled (or analyzed, or compared), where and how."""

from __future__ import annotations

from layerprof.pivot.change import side_label
from layerprof.pivot.records import Meta
from layerprof.pivot.sections.trace import TraceSource
from layerprof.render.html.page import esc
from layerprof.render.html.subject import Subject
from layerprof.units import fmt_calls, human_time


def default_title(s: Subject) -> str:
    diff = s.diff
    if diff is not None:
        return f"{diff.base_meta.model or '?'} → {diff.new_meta.model or '?'} — layerprof diff"
    if s.run is not None:
        return "Trace analysis — layerprof"
    p = s.profile
    model = p.meta.model if p is not None else ""
    return f"{model} — layerprof" if model else "layerprof report"


def header(s: Subject, heading: str) -> str:
    facts: list[tuple[str, str]] = []
    details: list[tuple[str, str]] = []
    diff, run, p = s.diff, s.run, s.profile
    if diff is not None:
        facts = [("base", side_label(diff.base_meta)), ("new", side_label(diff.new_meta))]
    else:
        if run is not None:
            facts += [("trace", run.path), ("ranks", str(len(run.ranks)))]
            facts.append(("rank from", run.rank_source))
        if p is not None:
            more, details = _meta_facts(p.meta)
            facts += more
            if p.trace.source is not None:
                facts.append(("file", p.trace.source.file))
                details += _source_details(p.trace.source)
            if s.multi_rank:
                facts.append(("shown", f"rank {p.rank} of {len(s.ranks)}"))
    chips = "".join(
        f'<span class="chip"><span>{esc(k)}</span>{esc(v)}</span>' for k, v in facts if v
    )
    more_html = ""
    if details:
        items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in details)
        more_html = (
            f'<details class="more"><summary>Run details</summary><dl>{items}</dl></details>'
        )
    return (
        f'<header class="top"><div class="wrap"><p class="brand">layerprof report</p>'
        f'<h1>{esc(heading)}</h1><div class="chips">{chips}</div>{more_html}</div></header>'
    )


def _meta_facts(meta: Meta) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Chips (model, device, dtype, torch, inputs, date, source) and the run details."""
    facts = [
        ("model", meta.model),
        ("device", meta.device),
        ("dtype", meta.dtype),
        ("torch", meta.torch),
        ("inputs", ", ".join(meta.inputs)),
        ("date", meta.created),
        ("source", meta.source),
    ]
    details = [
        ("mode", meta.mode),
        ("grad", str(meta.grad)),
        ("warmup", str(meta.warmup)),
        ("iters", str(meta.iters)),
        ("threads", "" if meta.threads is None else str(meta.threads)),
        ("host", meta.host),
        ("note", meta.note or ""),
    ]
    details += [
        (str(k), str(v))
        for k, v in meta.extra.items()
        if isinstance(v, str | int | float | bool) and k not in ("file", "rank")
    ]
    return facts, [(k, v) for k, v in details if v != ""]


def _source_details(src: TraceSource) -> list[tuple[str, str]]:
    """What the trace held: events, devices, where the layer rows came from, its writer."""
    out = [("events", fmt_calls(src.events)), ("trace window", human_time(src.window_ns))]
    if src.device_names:
        out.append(("devices", ", ".join(src.device_names)))
    out.append(("layers from", src.module_source or "no module tree"))
    if src.producer:
        out.append(("written by", f"layerprof {src.producer.get('version', '?')}"))
    return out
