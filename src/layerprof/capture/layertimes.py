"""Raw layer calls -> per-iteration, per-layer total and self times.

Pure Python, no torch: the Recorder produces ``LayerCall`` records and this
module reduces them, so the tree and self-time logic is tested with a fake
clock and exact numbers.

Overhead correction (see docs/definitions.md): a hooked call adds
``per_call_ns`` to the forward in all; ``inside_ns`` of it lands inside the
call's own measured interval and the rest lands in its parent's interval.
So a call's measured self time holds ``inside_ns`` of its own overhead plus
``per_call_ns - inside_ns`` for each direct child call. We subtract that from
each call's self time (never below zero) and rebuild totals bottom-up as
self + children, which keeps ``total == self + sum(children)`` exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from layerprof.records import LayerCall, LayerSamples


@dataclass(frozen=True)
class Correction:
    """Per-call instrumentation cost to remove from host times (ns)."""

    per_call_ns: float = 0.0
    inside_ns: float = 0.0


def call_times(
    calls: Sequence[LayerCall], correction: Correction | None = None
) -> tuple[list[float], list[float]]:
    """Corrected (total, self) host time of every call, in the order given.

    Calls must be in start order, so that a child's index is above its parent's.
    """
    n = len(calls)
    child_sum = [0.0] * n
    kids = [0] * n
    for c in calls:
        if c.parent >= 0:
            child_sum[c.parent] += c.duration_ns
            kids[c.parent] += 1
    measured_self = [calls[i].duration_ns - child_sum[i] for i in range(n)]
    if correction is None or correction.per_call_ns <= 0:
        return [float(c.duration_ns) for c in calls], measured_self
    inside = correction.inside_ns
    leak = max(correction.per_call_ns - inside, 0.0)
    self_t = [max(measured_self[i] - inside - kids[i] * leak, 0.0) for i in range(n)]
    total = list(self_t)
    for i in range(n - 1, -1, -1):
        p = calls[i].parent
        if p >= 0:
            total[p] += total[i]
    return total, self_t


def device_call_times(calls: Sequence[LayerCall]) -> tuple[list[float], list[float]] | None:
    """(total, self) device time of every call; None when calls carry no device times."""
    durs = [c.device_duration_ns for c in calls]
    if not durs or any(d is None for d in durs):
        return None
    total = [float(d or 0) for d in durs]
    self_t = list(total)
    for c, d in zip(calls, total, strict=True):
        if c.parent >= 0:
            self_t[c.parent] -= d
    return total, self_t


def _outermost(calls: Sequence[LayerCall]) -> list[bool]:
    """False for a call nested (at any depth) inside another call of the same layer.

    A recursive layer's total counts only its outermost calls, else the nested
    time would be counted twice; its self time still sums over all calls.
    """
    out = []
    for c in calls:
        p = c.parent
        while p >= 0 and calls[p].path != c.path:
            p = calls[p].parent
        out.append(p < 0)
    return out


def build_samples(
    calls: Sequence[LayerCall],
    iterations: int,
    correction: Correction | None = None,
) -> dict[str, LayerSamples]:
    """Sum each layer's calls per iteration; a layer absent from an iteration gets 0 there."""
    total_c, self_c = call_times(calls, correction)
    dev = device_call_times(calls)
    tot: dict[str, list[float]] = {}
    slf: dict[str, list[float]] = {}
    cnt: dict[str, list[int]] = {}
    dtot: dict[str, list[float]] = {}
    dslf: dict[str, list[float]] = {}
    outermost = _outermost(calls)
    for i, c in enumerate(calls):
        if c.path not in tot:
            tot[c.path] = [0.0] * iterations
            slf[c.path] = [0.0] * iterations
            cnt[c.path] = [0] * iterations
            dtot[c.path] = [0.0] * iterations
            dslf[c.path] = [0.0] * iterations
        it = c.iteration
        slf[c.path][it] += self_c[i]
        cnt[c.path][it] += 1
        if outermost[i]:
            tot[c.path][it] += total_c[i]
        if dev is not None:
            if outermost[i]:
                dtot[c.path][it] += dev[0][i]
            dslf[c.path][it] += dev[1][i]
    out: dict[str, LayerSamples] = {}
    for path in tot:
        out[path] = LayerSamples(
            total_ns=tuple(round(v) for v in tot[path]),
            self_ns=tuple(round(v) for v in slf[path]),
            calls=sum(cnt[path]) / max(iterations, 1),
            calls_vary=len(set(cnt[path])) > 1,
            device_total_ns=tuple(round(v) for v in dtot[path]) if dev is not None else None,
            device_self_ns=tuple(round(v) for v in dslf[path]) if dev is not None else None,
        )
    return out
