"""Lines about a ``generate()`` profile that the console and the HTML report both print."""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.units import fmt_share, human_bytes, human_count, human_si, human_time

if TYPE_CHECKING:
    from layerprof.pivot.sections.flops import Peak
    from layerprof.pivot.sections.generation import Generation, Phase, PhaseLayer

#: At most this many layers in the phase table: the heaviest in decode.
_PHASE_ROWS = 12


def summary_lines(g: Generation) -> list[str]:
    """Time to first token, inter-token latency, the two rates and the KV cache."""
    if g.ttft_ns is None and g.itl_ns is not None:  # read from a trace's forwards
        lines = [
            f"from the trace's forwards: {g.generates} prefill forwards (prompt"
            f" {g.prompt_tokens} tokens, batch {g.batch}) and their decode steps; the trace"
            " does not see the generate call begin, so no time to first token"
        ]
    elif g.ttft_ns is None:
        lines = [
            f"recorded in your own loop: {g.generates} prefill forwards (prompt"
            f" {g.prompt_tokens} tokens, batch {g.batch}) and their decode steps; no clean"
            " pass, so no time to first token or inter-token latency"
        ]
    else:
        t = g.ttft_ns.summary
        lines = [
            f"generate {g.new_tokens} new tokens after a {g.prompt_tokens}-token prompt, batch"
            f" {g.batch} ({g.generates} timed generates, greedy)",
            f"time to first token {human_time(t.median)} (median; p90 {human_time(t.p90)},"
            f" min {human_time(t.min)})",
        ]
    if g.itl_ns is not None:
        i = g.itl_ns.summary
        lines.append(
            f"inter-token latency {human_time(i.median)} (median; p90 {human_time(i.p90)},"
            f" p99 {human_time(i.p99)}, over {i.n} gaps)"
        )
    rates = []
    if g.prefill_tokens_per_s:
        rates.append(f"prefill {g.prefill_tokens_per_s:,.0f} tokens/s")
    if g.decode_tokens_per_s:
        rates.append(f"decode {g.decode_tokens_per_s:,.0f} tokens/s")
    if rates:
        lines.append(", ".join(rates))
    if g.kv_cache is not None and g.kv_cache.positions:
        c = g.kv_cache
        lines.append(
            f"KV cache {human_bytes(c.total_bytes)} after {c.positions} positions over"
            f" {len(c.layers)} layers: {human_bytes(c.bytes_per_token)} per position"
            + (
                f" (and {human_bytes(c.cross_bytes)} of cross-attention keys and values of"
                " the encoded prompt)"
                if c.cross_bytes
                else ""
            )
        )
    outside = g.decode_outside_ns
    decode = g.phase("decode")
    root = decode.layer("") if decode is not None else None
    if outside is not None and root is not None and g.itl_ns is not None:
        if outside > 0:
            lines.append(
                f"a decode step: {human_time(root.total_ns)} in the model's forward,"
                f" {human_time(outside)} around it (logits processing, sampling, cache"
                f" bookkeeping) of a {human_time(g.itl_ns.median)} inter-token latency"
            )
        else:
            lines.append(
                f"a decode step: the model's forward ({human_time(root.total_ns)}, per-layer"
                f" pass) takes the whole {human_time(g.itl_ns.median)} gap: nothing"
                " measurable around it"
            )
    if g.peak_bytes:
        lines.append(
            "peak memory above the start: "
            + ", ".join(f"{name} {human_bytes(n)}" for name, n in g.peak_bytes)
            + " (the allocator's peak in each phase)"
        )
    return lines


#: The columns of the per-phase roofline table, after the layer's path.
WORK_COLUMNS = (
    "Prefill FLOPs", "Prefill FLOP/B", "Prefill bound", "Prefill % of peak FLOP/s",
    "Decode FLOPs", "Decode FLOP/B", "Decode bound", "Decode B/s", "Decode % of peak B/s",
)  # fmt: skip


#: The columns of the table of phases, one row each.
PHASE_COLUMNS = ("Phase", "Forwards", "Tokens per forward", "Forward total", "Heaviest layer",
                 "Its self")  # fmt: skip

#: At most this many layers in the table of a phase other than prefill and decode.
_OTHER_PHASE_ROWS = 8


def phase_table(g: Generation, model: str) -> list[tuple[str, ...]]:
    """Every phase, named ones too (``rec.phase("draft")``, an encoder's ``encode``): its
    forwards in the per-layer pass, the tokens each took, one forward's total time and
    its heaviest layer by self time (``model`` names the root)."""
    rows: list[tuple[str, ...]] = []
    for phase in g.phases:
        top = max(phase.layers, key=lambda x: x.self_ns, default=None)
        # A forward takes at least one token, so 0 means the source never saw them (a
        # Recorder around T5's generate() does not see the encoder's input): "-", not 0.
        tokens = f"{phase.tokens_per_forward:,}" if phase.tokens_per_forward else "-"
        rows.append((
            phase.name, f"{phase.forwards:,}", tokens,
            human_time(phase.forward_ns) if phase.layers else "-",
            (top.path or model) if top is not None else "-",
            human_time(top.self_ns) if top is not None else "-",
        ))  # fmt: skip
    return rows


def other_phases(g: Generation) -> list[tuple[str, tuple[PhaseLayer, ...]]]:
    """Each phase besides prefill and decode with its heaviest layers (self time per
    forward), for a table of its own: the phase table's columns are prefill's and
    decode's."""
    return [
        (p.name, p.heaviest(_OTHER_PHASE_ROWS))
        for p in g.phases
        if p.name not in ("prefill", "decode") and p.layers
    ]


def work_rows(g: Generation) -> list[tuple[str, ...]]:
    """The heaviest layers' counted work per forward of each phase and which side of the
    device's ridge it lands on (prefill over the prompt: many FLOPs per weight byte;
    decode for one token: few, so memory-bound), with prefill's achieved FLOP/s and
    decode's achieved bandwidth as shares of the device's peaks. Empty when nothing
    was counted."""
    rows = []
    peak = g.peak
    for path, pre, dec in phase_rows(g):
        if not any(x is not None and x.flops is not None for x in (pre, dec)):
            continue
        cells = [path]
        for x in (pre, dec):
            intensity = x.intensity if x is not None else None
            cells += [
                human_count(x.flops) if x is not None and x.flops is not None else "-",
                f"{intensity:.1f}" if intensity is not None else "-",
                (x.bound(peak) if x is not None else None) or "-",
            ]
            if x is pre:  # prefill is compute-bound: its share of the peak FLOP/s
                cells.append(_share(_flops_share(pre, peak)))
        bandwidth = dec.bandwidth if dec is not None else None
        cells += [human_si(bandwidth, "B/s") if bandwidth else "-", _share(_bytes_share(dec, peak))]
        rows.append(tuple(cells))
    return rows


def _flops_share(x: PhaseLayer | None, peak: Peak | None) -> float | None:
    rate = x.rate if x is not None else None
    return rate / peak.flops_per_s if rate and peak and peak.flops_per_s else None


def _bytes_share(x: PhaseLayer | None, peak: Peak | None) -> float | None:
    bandwidth = x.bandwidth if x is not None else None
    return bandwidth / peak.bytes_per_s if bandwidth and peak and peak.bytes_per_s else None


def _share(fraction: float | None) -> str:
    """A share of the peak; above it, no figure (the peak or the count is wrong, and
    ``roofline_lines`` says so)."""
    return "-" if fraction is None or fraction > 1 else fmt_share(fraction)


def roofline_lines(g: Generation) -> list[str]:
    """The device's peak the phases' roofline is read against, and when a layer runs above
    it, that the peak (measured low on a busy machine) or the count is not to be trusted,
    instead of shares above 100 %."""
    p = g.peak
    if p is None or p.flops_per_s is None or p.bytes_per_s is None or p.ridge is None:
        return []
    measured = p.source in ("measured", "cached")
    lines = [
        f"roofline against {human_si(p.flops_per_s, 'FLOP/s')} and"
        f" {human_si(p.bytes_per_s, 'B/s')} ({p.source}; ridge {p.ridge:.1f} FLOP/B):"
        " below the ridge a layer is memory-bound"
        + (f" ({p.detail})" if measured and p.detail else "")
    ]
    above = [
        (path, share)
        for path, pre, dec in phase_rows(g)
        for share in (_flops_share(pre, p), _bytes_share(dec, p))
        if share is not None and share > 1
    ]
    if above:
        path, top = max(above, key=lambda a: a[1])
        why = (
            "the peak was measured low (a busy machine) or"
            if measured
            else "the given peak is below what this device reaches or"
        )
        lines.append(
            f"{len(above)} share{'s' if len(above) > 1 else ''} of the peak above 100 % (up to"
            f" {fmt_share(top)}, {path or 'the model'}) not shown: {why} the counted work is"
            " too high; give --peak FLOPS,BYTES to read them against a known peak"
        )
    return lines


def phase_rows(g: Generation) -> list[tuple[str, PhaseLayer | None, PhaseLayer | None]]:
    """(path, prefill, decode) for the layers heaviest in decode (self time), model order."""
    prefill, decode = g.phase("prefill"), g.phase("decode")
    ranked: Phase | None = decode or prefill
    if ranked is None:
        return []
    heavy = sorted(ranked.layers, key=lambda x: -x.self_ns)[:_PHASE_ROWS]
    keep = {x.path for x in heavy}
    order = [x.path for x in ranked.layers if x.path in keep]
    return [
        (p, prefill.layer(p) if prefill else None, decode.layer(p) if decode else None)
        for p in order
    ]
