"""Findings about a ``--compile`` run: overhead, graph breaks, recompiles, estimates.

Each finding quotes the ``compiled`` section's numbers it rests on. The two
bucket rows (``<compiled overhead>``, ``<outside compiled region>``) are not
layers: :func:`is_bucket` keeps the layer rules from calling them a bottleneck.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.analysis.finding import Finding
from layerprof.sections.compiled import BUCKET_ROWS, BUCKET_TYPE, Recompile
from layerprof.units import human_time

if TYPE_CHECKING:
    from layerprof.profile import LayerRow, Profile

OVERHEAD_SHARE = 0.25  # wrapper time beyond this share of the forward is worth a look
OUTSIDE_SHARE = 0.10
UNATTRIBUTED_SHARE = 0.30
ESTIMATED_SHARE = 0.20


def is_bucket(row: LayerRow) -> bool:
    return row.type == BUCKET_TYPE and row.path in BUCKET_ROWS


def compiled_findings(profile: Profile) -> list[Finding]:
    c = profile.compiled
    if c is None or c.coverage.forward_ns <= 0:
        return []
    cov = c.coverage
    out: list[Finding] = _compile_time(profile, c.compile_ns)
    forward = cov.forward_ns
    if cov.overhead_ns > OVERHEAD_SHARE * forward:
        out.append(
            Finding(
                "warning",
                "the compiled code spends much of its time outside kernels",
                f"{human_time(cov.overhead_ns)} of the {human_time(forward)} forward"
                f" ({100 * cov.overhead_ns / forward:.0f}%) is compiled-wrapper time: allocations,"
                " guards and the Python wrapper between kernels.",
                "the kernels are small: a larger batch amortizes the wrapper; on CUDA,"
                " mode reduce-overhead (CUDA graphs) removes most of it",
            )
        )
    if c.breaks and cov.outside_ns > OUTSIDE_SHARE * forward:
        top = max(c.breaks, key=lambda b: b.count)
        out.append(
            Finding(
                "warning",
                f"{sum(b.count for b in c.breaks)} graph break(s) split the compiled model",
                f"{human_time(cov.outside_ns)} per forward ({100 * cov.outside_ns / forward:.0f}%)"
                f" runs outside compiled regions; most frequent reason: {top.reason}.",
                "TORCH_LOGS=graph_breaks shows where; remove the break to let inductor fuse"
                " across it",
            )
        )
    out += _recompiles(profile, c.recompiles)
    if cov.region_ns > 0 and 1 - cov.attributed_share > UNATTRIBUTED_SHARE:
        out.append(
            Finding(
                "info",
                "part of the compiled time belongs to no layer",
                f"{100 * (1 - cov.attributed_share):.0f}% of the compiled regions' time is"
                " wrapper overhead or unmatched kernel events (the notes say which).",
            )
        )
    if cov.attributed_ns > 0 and cov.shared_ns > ESTIMATED_SHARE * cov.attributed_ns:
        out.append(
            Finding(
                "info",
                "many kernels fuse several layers",
                f"{100 * cov.shared_ns / cov.attributed_ns:.0f}% of the attributed kernel time"
                f" is split among layers by the {c.split} rule: those layers' times are estimates.",
                "--compile-split lca gives such kernels to the layers' common parent instead",
            )
        )
    return out


def _recompiles(profile: Profile, recompiles: tuple[Recompile, ...]) -> list[Finding]:
    """The model's own recompiles, apart from those a --backward run causes itself."""
    backward = any(s.backward_total_ns is not None for s in profile.samples.values())
    ours = [r for r in recompiles if backward and r.autograd_switch]
    theirs = [r for r in recompiles if r not in ours]
    out = []
    if theirs:
        out.append(
            Finding(
                "info",
                f"{len(theirs)} recompilation(s) during the run",
                f"{theirs[0].frame} recompiled: {theirs[0].reason}.",
                "mark changing sizes dynamic (--dynamic) or keep shapes fixed",
            )
        )
    if ours:
        out.append(
            Finding(
                "info",
                f"{len(ours)} recompilation(s) when the backward pass turned autograd on",
                "layerprof times the forwards without autograd and the backward pass with it;"
                " autograd's state is part of a compiled graph's guards, so the graphs"
                " compiled again in the backward pass's untimed first step. No timed pass"
                f" includes it ({ours[0].frame}: {ours[0].reason}).",
            )
        )
    return out


def _compile_time(profile: Profile, compile_ns: int) -> list[Finding]:
    """The first call paid the compile (the eager rule's "lazy initialisation" reading
    would be wrong here)."""
    lat = profile.latency
    if profile.first_ns is None or lat is None or compile_ns <= 0:
        return []
    return [
        Finding(
            "info",
            f"the first call compiled the model ({human_time(compile_ns)})",
            f"cold call {human_time(profile.first_ns)} vs median {human_time(lat.median)}"
            f" once compiled; Dynamo and inductor compiled for {human_time(compile_ns)} in all"
            " (recompiles and backward graphs included).",
            "warm the model up before serving or timing it; inductor's on-disk cache"
            " (TORCHINDUCTOR_CACHE_DIR) shortens the next process's compile",
        )
    ]
