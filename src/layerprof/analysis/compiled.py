"""Findings about a ``--compile`` run: overhead, graph breaks, recompiles, estimates.

Each finding quotes the ``compiled`` section's numbers it rests on. The two
bucket rows (``<compiled overhead>``, ``<outside compiled region>``) are not
layers: :func:`is_bucket` keeps the layer rules from calling them a bottleneck.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.analysis.finding import Finding
from layerprof.sections.compiled import BUCKET_ROWS, BUCKET_TYPE
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
    if c.recompiles:
        first = c.recompiles[0]
        out.append(
            Finding(
                "info",
                f"{len(c.recompiles)} recompilation(s) during the run",
                f"{first.frame} recompiled: {first.reason}.",
                "mark changing sizes dynamic (--dynamic) or keep shapes fixed",
            )
        )
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
