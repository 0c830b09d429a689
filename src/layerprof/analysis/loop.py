"""Findings about a user's training loop (``Recorder(model, backward=True)``): steps that
wait on the data loader, and layers whose backward is far above twice their forward.

Each rests on the spread the run measured over its steps: a finding is given
only when the 95 % confidence interval of the median (over the active steps)
clears the threshold; when the median passes it but the interval does not, the
finding says the run cannot tell and what to record instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.analysis.finding import Finding
from layerprof.analysis.passes import interval
from layerprof.stats import Summary
from layerprof.units import fmt_share, human_time

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.sections.loop import LayerSteps, TrainingLoop

DATA_SHARE = 0.10  # the loader's share of a step worth a finding
_DATA_SHARE_HIGH = 0.30
# A layer's backward usually costs about twice its forward (one matmul for the
# input's gradient, one for the weights'); far above that is worth a look.
BACKWARD_RATIO = 3.0
_MIN_BACKWARD_NS = 50_000  # per step: below this a layer's backward is not a lead
_MIN_BACKWARD_SHARE = 0.05  # of the step's backward
_TOP = 3


def loop_findings(profile: Profile) -> list[Finding]:
    loop = profile.loop
    if loop is None or not loop.steps:
        return []
    return _data_bound(loop) + _slow_backward(loop) + _recomputed(loop)


#: How far the tree's total may stray from the measured forwards' median, beyond the
#: interval of that median, before the table is called unreliable.
_TABLE_GAP = 0.10


def table_agreement(profile: Profile) -> list[Finding]:
    """The layer table's total for the whole model (the median self times summed down
    the tree, so that it adds up) against the median of the forwards as measured. They
    agree when each forward takes about as long as the others; on a busy machine the
    per-forward times spread so widely that medians of the parts no longer add up to
    the median of the whole (BERT's layer.0 read 7.5 ms where its forwards took 15)."""
    root = next((r for r in profile.rows() if r.path == "" and r.calls), None)
    if root is None or root.total is None or root.total.n < 3 or root.total.median <= 0:
        return []
    measured = root.total
    lo, hi = interval(measured)
    tree = root.total_ns
    if lo * (1 - _TABLE_GAP) <= tree <= hi * (1 + _TABLE_GAP):
        return []
    spread = (measured.p90 - measured.min) / measured.median if measured.median else 0.0
    return [
        Finding(
            "high",
            "the numbers are unreliable: the layer table does not add up to the measured forwards",
            f"the table's total for the model is {human_time(tree)} per forward (each layer's"
            f" median self time, summed down the tree), but the forwards took"
            f" {human_time(measured.median)} at the median (95 % interval {human_time(lo)} -"
            f" {human_time(hi)}; the fastest {human_time(measured.min)}, p90"
            f" {human_time(measured.p90)}: a spread of {fmt_share(spread)}). The forwards"
            " varied too much for medians of the parts to add up to the median of the"
            " whole: something else used the CPU, or the model's work varies between"
            " forwards. Each layer's own measured total is in the JSON"
            " (series.total_ms) and the report's hover",
            "record on a quiet machine (fewer threads than cores), or more steps",
        )
    ]


def _recomputed(loop: TrainingLoop) -> list[Finding]:
    """What activation checkpointing costs: its recomputes' share of the backward."""
    if not loop.recompute:
        return []
    n = len(loop.steps)
    per_step = [sum(r.per_step_ns[k] for r in loop.recompute) for k in range(n)]
    backward = sum(loop.part("backward")) or 1
    top = sorted(loop.recompute, key=lambda r: -sum(r.per_step_ns))[:_TOP]
    names = ", ".join(f"{r.path} {human_time(Summary.of(r.per_step_ns).median)}" for r in top) + (
        " ..." if len(loop.recompute) > _TOP else ""
    )
    return [
        Finding(
            "info",
            "activation checkpointing recomputes forwards inside the backward",
            f"{len(loop.recompute)} module{'s' if len(loop.recompute) != 1 else ''}"
            f" ran again in the backward: {human_time(Summary.of(per_step).median)} per step,"
            f" {fmt_share(sum(per_step) / backward)} of the backward ({names}). That time is"
            " backward in the step; per layer it is in the backward of the node that needed"
            " the recomputed tensors, so layers inside checkpointed modules get no"
            " backward-vs-forward finding",
            "the price of the memory saved: checkpoint fewer blocks where memory allows",
        )
    ]


def _data_bound(loop: TrainingLoop) -> list[Finding]:
    shares = [s.data_wait_ns / s.wall_ns for s in loop.steps if s.wall_ns > 0]
    if not shares:
        return []
    summary = Summary.of(shares)
    lo, hi = interval(summary)
    if summary.median < DATA_SHARE:
        return []
    wait = loop.summary("data_wait").median
    spread = f"95 % interval {fmt_share(lo)} - {fmt_share(hi)} over {summary.n} steps"
    if lo < DATA_SHARE:
        return [
            Finding(
                "info",
                "data wait: cannot tell whether the steps are data-bound",
                f"the loader holds {fmt_share(summary.median)} of the median step"
                f" ({human_time(wait)}), but the steps vary too much to tell ({spread})",
                "record more steps (a longer schedule's active window)",
            )
        ]
    return [
        Finding(
            "high" if lo >= _DATA_SHARE_HIGH else "warning",
            "data-bound steps: the model waits on the data loader",
            f"the loader holds {fmt_share(summary.median)} of each step ({human_time(wait)}"
            f" of {human_time(loop.summary('wall').median)}; {spread})",
            "more DataLoader workers (num_workers), pin_memory=True, a larger prefetch_factor,"
            " persistent_workers=True; or move the preprocessing onto the device",
        )
    ]


def _slow_backward(loop: TrainingLoop) -> list[Finding]:
    step_backward = loop.summary("backward").median
    found: list[tuple[float, Finding]] = []
    unsure: list[str] = []
    for layer in loop.layers:
        ratios, backward = _ratios(layer)
        if len(ratios) == 0 or backward < _MIN_BACKWARD_NS:
            continue
        if loop.recomputed_under(layer.path) is not None:
            continue  # its backward holds its block's recompute: see _recomputed
        if step_backward and backward < _MIN_BACKWARD_SHARE * step_backward:
            continue
        summary = Summary.of(ratios)
        if summary.median <= BACKWARD_RATIO:
            continue
        lo, hi = interval(summary)
        if lo <= BACKWARD_RATIO:
            unsure.append(f"{layer.path or '(model)'} {summary.median:.1f}x ({lo:.1f}-{hi:.1f}x)")
            continue
        detail = (
            f"its own backward takes {summary.median:.1f}x its own forward per step"
            f" ({human_time(backward)}; 95 % interval {lo:.1f}x - {hi:.1f}x over"
            f" {summary.n} steps), where about 2x is usual"
        )
        hint = (
            "look for operators with a costly backward: scatter/index_add and gathers,"
            " non-contiguous inputs, in-place ops that force copies, custom autograd"
            " Functions, or a forward recomputed inside backward (activation checkpointing)"
        )
        found.append((backward, Finding("warning", "backward far above twice the forward",
                                        detail, hint, layer=layer.path)))  # fmt: skip
    out = [f for _, f in sorted(found, key=lambda x: -x[0])[:_TOP]]
    if unsure:
        out.append(
            Finding(
                "info",
                "backward vs forward: cannot tell for some layers",
                "backward above 3x the forward at the median, but the steps vary too much to"
                f" tell: {', '.join(unsure[:_TOP])}",
                "record more steps",
            )
        )
    return out


def _ratios(layer: LayerSteps) -> tuple[list[float], float]:
    """Per step with both: backward self / forward self; and the median backward self."""
    if layer.backward_self_ns is None:
        return [], 0.0
    pairs = [
        (b, f)
        for b, f in zip(layer.backward_self_ns, layer.forward_self_ns, strict=False)
        if b > 0 and f > 0
    ]
    if not pairs:
        return [], 0.0
    return [b / f for b, f in pairs], Summary.of([b for b, _ in pairs]).median
