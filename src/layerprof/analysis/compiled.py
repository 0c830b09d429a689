"""Findings about a ``--compile`` run: overhead, graph breaks, recompiles, estimates.

Each finding quotes the ``compiled`` section's numbers it rests on. The two
bucket rows (``<compiled overhead>``, ``<outside compiled region>``) are not
layers: :func:`is_bucket` keeps the layer rules from calling them a bottleneck.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from layerprof.analysis.finding import Finding
from layerprof.analysis.passes import contention_cause, interval, layer_pass_forward, pass_gap
from layerprof.pivot.records import BUCKET_ROWS, BUCKET_TYPE
from layerprof.units import human_time

if TYPE_CHECKING:
    from layerprof.pivot.profile import LayerRow, Profile
    from layerprof.pivot.sections.compiled import Recompile

_OVERHEAD_SHARE = 0.25  # wrapper time beyond this share of the forward is worth a look
_OUTSIDE_SHARE = 0.10
_UNATTRIBUTED_SHARE = 0.30
_ESTIMATED_SHARE = 0.20
#: A profiled compiled forward beyond this multiple of the clean latency (beyond both
#: medians' confidence intervals) is told: the layer rows come from slower forwards.
_PROFILED_BOUND = 1.25
#: Layer kernels taking more than this multiple of the whole clean forward: they ran
#: slower while profiled (the clean forward runs the same kernels and more).
_KERNEL_BOUND = 1.05


def is_bucket(row: LayerRow) -> bool:
    return row.type == BUCKET_TYPE and row.path in BUCKET_ROWS


def compiled_findings(profile: Profile) -> list[Finding]:
    c = profile.compiled
    if c is None or c.coverage.forward_ns <= 0:
        return []
    cov = c.coverage
    out: list[Finding] = _compile_time(profile, c.compile_ns)
    out += _pass_agreement(profile)
    forward = cov.forward_ns
    if cov.overhead_ns > _OVERHEAD_SHARE * forward:
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
    if c.breaks and cov.outside_ns > _OUTSIDE_SHARE * forward:
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
    if cov.region_ns > 0 and 1 - cov.attributed_share > _UNATTRIBUTED_SHARE:
        out.append(
            Finding(
                "info",
                "part of the compiled time belongs to no layer",
                f"{100 * (1 - cov.attributed_share):.0f}% of the compiled regions' time is"
                " wrapper overhead or unmatched kernel events (the notes say which).",
            )
        )
    if cov.attributed_ns > 0 and cov.shared_ns > _ESTIMATED_SHARE * cov.attributed_ns:
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
    hooks = [r for r in recompiles if r.hook_guard and r not in ours]
    theirs = [r for r in recompiles if r not in ours and r not in hooks]
    out = []
    if hooks:
        out.append(
            Finding(
                "warning",
                f"{len(hooks)} recompilation(s) because module hooks changed after compiling",
                f"{hooks[0].frame}: {hooks[0].reason}. Dynamo guards on a module's hook dicts"
                " (torch >= 2.14): a hook added or removed after the compile fails them, no"
                " input shape does. layerprof puts its own hooks on before it compiles, so"
                " these are hooks that changed during the run: layerprof's (a bug: please"
                " report it with this line) or the model's own. The forwards that recompiled"
                " include compile time.",
                "--dynamic does not help here; keep hooks unchanged once the model is compiled",
            )
        )
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


def _pass_agreement(profile: Profile) -> list[Finding]:
    """The compiled per-layer pass against the clean latency.

    Hooks mode compares the passes after removing the hooks' calibrated cost
    (``analysis.passes``); a compiled run has no such calibration, so it says
    two things on their own evidence: the kernels credited to layers cannot
    take longer than the whole clean forward, which runs the same kernels and
    more (else the rows are unreliable); and a profiled forward well beyond
    the clean one (``_PROFILED_BOUND``) is named with where its extra time is.
    """

    c, lat = profile.compiled, profile.latency
    layer = layer_pass_forward(profile)
    if c is None or lat is None or layer is None or lat.median <= 0 or pass_gap(profile):
        return []  # (a gap the general rule finds is told there)
    cov = c.coverage
    kernels = _kernels_median(profile) or cov.attributed_ns
    clean_lo, clean_hi = interval(lat)
    layer_lo, layer_hi = interval(layer)
    both = (
        f"clean pass {_ci(lat.median, clean_lo, clean_hi)}, profiled compiled forward"
        f" {_ci(layer.median, layer_lo, layer_hi)} ({layer.median / lat.median:.2f}x)"
    )
    parts = (
        f"of the profiled forward, the layers' kernels take {human_time(kernels)} (median),"
        f" compiled overhead {human_time(cov.overhead_ns)} and outside the compiled regions"
        f" {human_time(cov.outside_ns)} (means)"
    )
    if kernels > _KERNEL_BOUND * clean_hi:
        return [
            Finding(
                "high",
                "the numbers are unreliable: the compiled layers add up to more than the"
                " clean forward",
                f"{both}; {parts}. The clean forward runs the same kernels and more, so the"
                " kernels ran slower while they were profiled. " + contention_cause(profile.meta),
                "run again on a quiet machine; until then read the layers' shares, not their times",
            )
        ]
    if layer_lo > _PROFILED_BOUND * clean_hi:
        return [
            Finding(
                "warning",
                "the compiled per-layer pass disagrees with the clean latency",
                f"{both}; {parts}. The profiler's events and ranges cost time around the"
                " kernels (compiled overhead, outside), and contention slows the kernels"
                " themselves: the layer rows are times from these slower forwards and"
                " their % are of the profiled forward, not of the clean latency.",
                "the latency line is the compiled model's speed; compare layers by share,"
                " or against another --compile run",
            )
        ]
    return []


def _kernels_median(profile: Profile) -> float | None:
    """Median over the profiled forwards of the kernel time credited to layers (the
    root's total less the two bucket rows), comparable with the latency's median; None
    where a side was saved without its per-iteration samples."""
    roots = [i.path for i in profile.layers if i.parent is None]
    rows = [profile.samples.get(p) for p in (*roots[:1], *BUCKET_ROWS)]
    if len(roots) != 1 or any(r is None for r in rows):
        return None
    root, *buckets = (r.total_ns.tolist() for r in rows if r is not None)
    if not root or any(b is None or len(b) != len(root) for b in buckets):
        return None
    per_forward = [t - sum(b[i] for b in buckets if b) for i, t in enumerate(root)]
    return float(statistics.median(per_forward))


def _ci(median: float, lo: float, hi: float) -> str:
    return f"{human_time(median)} (95% CI {human_time(lo)}-{human_time(hi)})"
