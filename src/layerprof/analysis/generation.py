"""Findings about a ``generate()``: which phase takes the time, and which layer takes
each decode step (the output projection named apart).

Shares of decode rest on the decode forwards' own spread: a layer is named only
where the low end of its self time's 95 % interval clears the share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.analysis.finding import Finding
from layerprof.analysis.passes import interval
from layerprof.units import fmt_share, human_bytes, human_si, human_time

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.sections.generation import Generation, Phase

#: A layer whose self time is at least this share of a decode step's forward.
DECODE_LAYER_SHARE = 0.25
#: The output projection (vocabulary logits) at or above this share of a decode step.
LM_HEAD_SHARE = 1 / 3
#: A phase at or above this share of the whole generate is named.
_PHASE_SHARE = 0.5
#: A decode step moving its bytes below this share of the device's bandwidth is not
#: limited by memory but by everything around the math (Python, launches, small ops).
LOW_BANDWIDTH = 0.25
_HEAD_NAMES = ("lm_head", "output", "embed_out", "head")


def has_generation(profile: Profile) -> bool:
    return profile.generation is not None and bool(profile.generation.phases)


def generation_findings(profile: Profile) -> list[Finding]:
    g = profile.generation
    if g is None:
        return []
    out = _phase_share(g)
    decode = g.phase("decode")
    if decode is not None:
        out += _decode_layer(decode)
        out += _decode_bandwidth(g, decode)
    return out


def _decode_bandwidth(g: Generation, decode: Phase) -> list[Finding]:
    """A decode step is memory-bound: its floor is the bytes it must read over the
    device's bandwidth. Far above that floor, the time goes elsewhere."""
    root = decode.layer("")
    peak = g.peak
    if root is None or peak is None or not peak.bytes_per_s or root.bound(peak) != "memory":
        return []
    achieved = root.bandwidth
    if achieved is None:
        return []
    share = achieved / peak.bytes_per_s
    if share >= LOW_BANDWIDTH:
        return []
    floor_ns = (root.bytes or 0) / peak.bytes_per_s * 1e9
    return [
        Finding(
            "info",
            "decode steps run far below the memory bandwidth roof",
            f"a decode step moves {human_bytes(root.bytes or 0)} in {human_time(root.total_ns)}"
            f" ({fmt_share(share)} of the device's {human_si(peak.bytes_per_s, 'B/s')}, which"
            f" would take {human_time(floor_ns)}): the rest is host overhead (Python, operator"
            " dispatch, kernel launches), not memory",
            "capture the decode step in CUDA graphs or compile it (torch.compile with"
            " mode='reduce-overhead', a static cache), or batch more sequences per step",
        )
    ]


def _phase_share(g: Generation) -> list[Finding]:
    """Prefill (up to the first token) vs decode (the rest), from the clean pass."""
    if g.ttft_ns is None or g.generate_ns is None or g.new_tokens < 2:
        return []
    whole, first = g.generate_ns.median, g.ttft_ns.median
    if whole <= 0:
        return []
    prefill = min(first / whole, 1.0)
    if 1 - prefill >= _PHASE_SHARE:
        return [
            Finding(
                "info",
                "decode takes most of the generate",
                f"{g.new_tokens - 1} decode steps take {fmt_share(1 - prefill)} of the generate"
                f" ({human_time(whole - first)} of {human_time(whole)}; median inter-token"
                f" latency {human_time(g.itl_ns.median) if g.itl_ns else '-'})",
                "a decode step reads every weight for a few tokens (memory-bound): batch more"
                " sequences per step, keep a static cache and compile the decode step"
                " (torch.compile, CUDA graphs), or use smaller weights (bf16, int8/int4)",
            )
        ]
    return [
        Finding(
            "info",
            "the prompt's prefill takes most of the generate",
            f"the time to first token is {fmt_share(prefill)} of the generate"
            f" ({human_time(first)} of {human_time(whole)}) for {g.prompt_tokens} prompt"
            f" tokens x {g.batch}",
            "prefill is compute-bound: use fused attention (scaled_dot_product_attention),"
            " bf16, a shorter or cached prompt prefix",
        )
    ]


def _decode_layer(decode: Phase) -> list[Finding]:
    """The heaviest layer of a decode step (self time), when its share is clear."""
    root = decode.layer("")
    if root is None or root.total_ns <= 0 or decode.forwards < 3:
        return []
    ranked = sorted((x for x in decode.layers if x.path), key=lambda x: -x.self_ns)
    if not ranked or ranked[0].self_summary is None:
        return []
    top = ranked[0]
    assert top.self_summary is not None
    low, _ = interval(top.self_summary)
    share, sure = top.self_ns / root.total_ns, low / root.total_ns
    head = top.path.rsplit(".", 1)[-1] in _HEAD_NAMES
    if head and sure >= LM_HEAD_SHARE:
        return [
            Finding(
                "warning",
                "the output projection takes over a third of each decode step",
                f"{top.path} is {fmt_share(share)} of a decode step's forward"
                f" ({human_time(top.self_ns)} of {human_time(root.total_ns)}, median over"
                f" {decode.forwards} steps): it reads the whole vocabulary matrix per token",
                "compute logits for the last position only (logits_to_keep=1), keep the head"
                " in bf16 or quantized, or shrink the vocabulary",
                layer=top.path,
            )
        ]
    if sure < DECODE_LAYER_SHARE:
        return []
    return [
        Finding(
            "info",
            "one layer dominates each decode step",
            f"{top.path} is {fmt_share(share)} of a decode step's forward"
            f" ({human_time(top.self_ns)} self of {human_time(root.total_ns)}, median over"
            f" {decode.forwards} steps; at least {fmt_share(sure)} at the low end of its 95 %"
            " interval)",
            "see the generation section for how its time grows with the context: attention"
            " grows with the cache, MLPs do not",
            layer=top.path,
        )
    ]
