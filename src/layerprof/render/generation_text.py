"""Lines about a ``generate()`` profile that the console and the HTML report both print."""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.units import human_bytes, human_time

if TYPE_CHECKING:
    from layerprof.sections.generation import Generation, Phase, PhaseLayer

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
