"""The noise judge of a diff: whether a time moved beyond the noise the user has.

What a verdict rests on
-----------------------
Timings drift between processes (10-40 % here) by far more than inside one,
so only several processes per side can separate a change from drift. When both
profiles carry ``repeats`` (``run --repeat N``; ``diff --run`` in interleaved
rounds) a row with per-run medians on both sides is judged on them: a paired
t-test on the per-round log ratios when the sides come from one interleaved
session (``basis == "rounds"``), Welch's t-test on the logs of the per-process
medians otherwise (``"repeats"``); beyond noise = ``p < ALPHA`` in the
direction of the change, outside its 95 % interval and above half the floor.
In rounds, a layer row is tested on its self time relative to the rest of its
own forward (``RunMedians.rest_ratio``), so the speed of each process cancels.
Every other row, and every row of a single-run comparison, is judged inside
the runs by the rule below, carries no p-value (it would ignore drift), and
fails the gate only above the drift allowance (``DRIFT_ALLOWANCE_PCT`` of
``layerprof.analysis.gate``; ``Diff.evidence`` says which case a diff is).

Noise rule inside runs
----------------------
A change is **beyond noise** when

1. a two-sided Mann-Whitney rank test on the two sides' per-iteration samples
   rejects "same distribution" at ``p < ALPHA`` (0.001), with the direction of
   the ranks agreeing with the sign of the median change. The test is exact
   (no ties, up to 2,500 sample pairs) or uses the tie-corrected normal
   approximation. It needs no scale estimate and holds for any distribution,
   including the skewed, outlier-prone ones timings have;
2. the change of the medians exceeds the iterations' own spread:
   ``NOISE_K * 1.4826 * sqrt(MAD_base**2 + MAD_new**2)``, one robust standard
   deviation of (a new iteration - a base iteration). Unlike the test, this
   bound does not shrink with more iterations, so a drift between two runs
   that is small next to the jitter inside each run is not called a change;
3. the absolute change exceeds the half-width of the confidence interval of
   the difference of the medians, ``sqrt(h_base**2 + h_new**2)`` from the two
   medians' 95 % intervals (order statistics, see ``layerprof.stats``), so
   that "slower" never rests on a difference inside the interval;
4. the absolute change exceeds a floor of ``max(1 µs, 0.5 % of the whole
   forward)`` (the larger side's median latency, else its root layers'
   total), so that microsecond layers do not flap.

When a side was saved without its per-iteration samples (the default of
``--json``), the rank test cannot run: rules 2 to 4 decide on the saved
summaries alone (``basis == "summary"``).

A change is **significant** (status ``slower``/``faster``, highlighted) when it
is beyond noise *and* ``|delta %| > threshold_pct`` (5 % by default); anything
else is ``same``. When a side has too few samples for the rank test to ever
reach ``p < ALPHA`` (fewer than about 7 per side), the test's smallest
possible p stands in for ALPHA: the two sides' samples must not overlap
(``basis == "separation"``); with one sample per side the threshold and the
floor alone decide (``basis == "threshold"``). The diff says so in a warning.
Operators without per-iteration samples on both sides, kernels and single
steps are always judged by the threshold and the floor; such rows are shown
but do not decide the verdict or the default (``any``) gate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from layerprof.pivot.change import Basis, Change, Evidence, Status
from layerprof.pivot.sections.repeats import Repeats
from layerprof.stats import (
    Series,
    Summary,
    TTest,
    median,
    min_p_value,
    paired_t_test,
    rank_test,
    welch_t_test,
)
from layerprof.units import fmt_num

ALPHA = 0.001
"""Two-sided significance level of the rank test, per row."""

FLOOR_MIN_NS = 1_000
"""Smallest absolute change that can count: 1 µs."""

FLOOR_SHARE = 0.005
"""Or 0.5 % of the whole forward, when that is larger."""

BETWEEN_FLOOR_FACTOR = 0.5
"""Rows judged between runs need only half the floor (0.25 % of the forward): the
t-test already carries the run-to-run spread, and a 10 % slower layer that takes
5 % of the forward changes it by 0.5 %, which the full floor would not let pass."""


def between_floor(floor_ns: int) -> int:
    """The floor for rows judged on the spread between runs."""
    return max(FLOOR_MIN_NS, round(floor_ns * BETWEEN_FLOOR_FACTOR))


_NOISE_K = 1.0
"""The change must exceed NOISE_K robust standard deviations of (new iteration - base iteration)."""

_MAD_TO_SIGMA = 1.4826
"""MAD times this estimates the standard deviation of a normal distribution."""


def evidence_of(base: Repeats | None, new: Repeats | None) -> Evidence:
    """Between-run evidence needs at least two processes on each side."""
    if base is None or new is None or base.n < 2 or new.n < 2:
        return "single-run"
    return "rounds" if base.pairs_with(new) else "repeats"


_RATIO_MAX = 1.0
"""Layers judged against the rest of their forward must take at most half of it
(a self-to-rest ratio of 1) in the base runs; larger ones keep their medians."""


def _leak_source(base: Repeats, new: Repeats) -> str | None:
    """The layer whose change moves the rest of every other layer's forward most.

    A layer that changes changes the rest of the forward of every other layer:
    one taking a quarter of it made 2x faster makes the others read 14 % slower
    against their rest. The layer whose change (against its rest, beyond noise)
    times its share of the forward is largest is taken out of the others' rest.
    """
    best, worst = None, 0.0
    paths = set().union(*(r.rest_ratio or {} for r in base.runs))
    for path in paths:
        b, n = base.layer_ratio(path), new.layer_ratio(path)
        keys = sorted(b.keys() & n.keys())
        if len(keys) < 2 or any(b[k] <= 0 or n[k] <= 0 for k in keys):
            continue
        test = paired_t_test([math.log(n[k] / b[k]) for k in keys])
        share = median([b[k] / (1 + b[k]) for k in keys])
        moved = abs(math.expm1(test.estimate)) * share
        if test.p_value < ALPHA and moved > worst:
            best, worst = path, moved
    return best


def _without(runs: Repeats, path: str, leak: str) -> dict[int, float]:
    """``path``'s time over the rest of its forward less ``leak``'s time, per run."""
    out = {}
    for i, r in enumerate(runs.runs):
        ratios = r.rest_ratio
        if ratios is None or path not in ratios or leak not in ratios:
            continue
        own, other = (ratios[p] / (1 + ratios[p]) for p in (path, leak))
        if own + other < 1:
            out[runs.key(i)] = own / (1 - own - other)
    return out


@dataclass
class Judge:
    """Applies the noise rule; remembers which kinds of rows fell back to weaker rules.

    With ``base_runs``/``new_runs`` (several processes per side) rows that have
    per-run medians are judged on the run-to-run spread; ``paired``: by round.
    """

    threshold_pct: float
    floor_ns: int
    paired: bool = False
    base_runs: Repeats | None = None
    new_runs: Repeats | None = None
    fallbacks: dict[str, tuple[int, int]] = field(default_factory=dict)
    summary_only: set[str] = field(default_factory=set)
    leak: str | None = None

    def latency_runs(self) -> tuple[dict[int, int], dict[int, int]] | None:
        if self.base_runs is None or self.new_runs is None:
            return None
        return self.base_runs.latencies(), self.new_runs.latencies()

    def phase_runs(
        self, phase: str, path: str | None
    ) -> tuple[dict[int, int], dict[int, int]] | None:
        """Per-run medians of a generate's row: ``path`` None is the phase's own time (time
        to first token for prefill, inter-token latency for decode), else a layer's self
        time in that phase; judged like the latency, on the ratio between runs."""
        if self.base_runs is None or self.new_runs is None:
            return None
        if path is None:
            quantity = "ttft" if phase == "prefill" else "itl"
            return self.base_runs.generation(quantity), self.new_runs.generation(quantity)
        return self.base_runs.phase_layer(phase, path), self.new_runs.phase_layer(phase, path)

    def layer_runs(self, path: str, clock: str) -> tuple[dict[int, int], dict[int, int]] | None:
        if self.base_runs is None or self.new_runs is None:
            return None
        return self.base_runs.layer(path, clock), self.new_runs.layer(path, clock)

    def total_runs(self, path: str, clock: str) -> tuple[dict[int, int], dict[int, int]] | None:
        """Per-run totals of ``path`` (its subtree's self medians summed), so that the
        total column rests on the same between-run evidence as the self column."""
        if self.base_runs is None or self.new_runs is None:
            return None
        return self.base_runs.subtree(path, clock), self.new_runs.subtree(path, clock)

    def layer_ratios(
        self, path: str, clock: str
    ) -> tuple[dict[int, float], dict[int, float]] | None:
        """Per-round self time over the rest of the forward (host clock, paired rounds
        only: independent repeats keep their medians), or None."""
        if self.base_runs is None or self.new_runs is None or clock != "host" or not self.paired:
            return None
        base = self.base_runs.layer_ratio(path)
        # a layer taking most of the forward is compared against a small, noisy rest:
        # its medians are the steadier measure then (chosen on the base side alone)
        if not base or median(list(base.values())) > _RATIO_MAX:
            return None
        new = self.new_runs.layer_ratio(path)
        if self.leak is None:
            self.leak = _leak_source(self.base_runs, self.new_runs) or ""
        if self.leak and self.leak != path:
            return _without(self.base_runs, path, self.leak), _without(
                self.new_runs, path, self.leak
            )
        return base, new

    def compare(
        self,
        base: Series | None,
        new: Series | None,
        *,
        what: str | None = None,
        runs: tuple[dict[int, int], dict[int, int]] | None = None,
        ratios: tuple[dict[int, float], dict[int, float]] | None = None,
    ) -> Change:
        """``what`` names the row kind for the small-sample warning; ``None``: expected.
        ``runs``: the row's per-run medians by run key, base and new; ``ratios``: its
        per-run time relative to the rest of the forward, tested instead where usable."""
        if base is None and new is None:
            return _change(0, 0, beyond=False, significant=False, basis="threshold")
        if base is None:
            return self._one_sided(round(cast(Series, new).median), "added")
        if new is None:
            return self._one_sided(round(base.median), "removed")
        between = self._between(*runs, ratios=ratios) if runs is not None else None
        if between is not None:
            return between
        b, n = round(base.median), round(new.median)
        delta = n - b
        pct = delta / b * 100 if b > 0 else None
        if base.n == 1 and new.n == 1:
            if what is not None and what not in self.fallbacks:
                self.fallbacks[what] = (1, 1)
            beyond = abs(delta) > self.floor_ns
            return self._judged(b, n, beyond, pct, "threshold")
        noise_ns = _noise(base.summary, new.summary)
        ci_ns = _ci(base.summary, new.summary)
        outside = abs(delta) > noise_ns and (ci_ns is None or abs(delta) > ci_ns)
        if base.values is None or new.values is None:
            if what is not None:
                self.summary_only.add(what)
            beyond = outside and abs(delta) > self.floor_ns
            return self._judged(b, n, beyond, pct, "summary", noise_ns=noise_ns, ci_ns=ci_ns)
        floor_p = min_p_value(base.n, new.n)
        basis: Basis = "rank-test" if floor_p < ALPHA else "separation"
        if basis == "separation" and what is not None and what not in self.fallbacks:
            self.fallbacks[what] = (base.n, new.n)
        p_value, direction = rank_test(base.values, new.values)
        level = max(ALPHA, floor_p) * (1 + 1e-9)
        tested = p_value <= level and direction * delta > 0 and outside
        beyond = tested and abs(delta) > self.floor_ns
        # The within-run p-value is not kept: it ignores the drift between processes,
        # so it would claim a certainty about the change that the data do not give.
        return self._judged(b, n, beyond, pct, basis, noise_ns=noise_ns, ci_ns=ci_ns)

    def _between(
        self,
        base: dict[int, int],
        new: dict[int, int],
        *,
        ratios: tuple[dict[int, float], dict[int, float]] | None = None,
    ) -> Change | None:
        """Judged on the per-run medians: a paired t-test over rounds, or Welch's over
        two sets of processes; ``None`` when a side has fewer than two runs of the row.

        The tests run on the logarithms of the medians, so that a machine running
        20 % slower in one round scales both of its processes alike and cancels
        from their ratio (on differences it would scale the change itself); a row
        with a zero median in some run is tested on plain differences instead.
        With ``ratios`` (a layer's time over the rest of its own forward, per run)
        the test runs on those instead: the speed of each process cancels too,
        which a pair of processes of one round does not share (measured here: a
        layer's per-round log ratio of medians scattered by 20-35 %, of these
        ratios by 3-5 %). The change is then the base median times the mean ratio.
        """
        b_vals, n_vals = self._values(base, new)
        if len(b_vals) < 2 or len(n_vals) < 2:
            return None
        b = round(median(b_vals))
        rb, rn = self._values(*ratios) if ratios is not None else ([], [])
        relative = (
            min(len(rb), len(rn)) >= 2
            and len(rb) == len(b_vals)
            and len(rn) == len(n_vals)
            and all(v > 0 for v in (*rb, *rn))
        )
        if relative:
            bx, nx, log = [math.log(v) for v in rb], [math.log(v) for v in rn], True
        else:
            log = all(v > 0 for v in (*b_vals, *n_vals))
            bx = [math.log(v) if log else float(v) for v in b_vals]
            nx = [math.log(v) if log else float(v) for v in n_vals]
        test: TTest
        if self.paired:
            test = paired_t_test([n - b for b, n in zip(bx, nx, strict=True)])
            spread = test.se * math.sqrt(len(bx))
            basis: Basis = "rounds"
        else:
            test = welch_t_test(bx, nx)
            spread = math.hypot(_sd(bx), _sd(nx))
            basis = "repeats"

        def as_ns(x: float) -> float:
            return b * math.expm1(x) if log else x

        # Paired rounds or ratios: the change is the test's estimate (the mean log
        # ratio), since the medians of each side carry the drift between processes.
        estimated = self.paired or relative
        n = b + round(as_ns(test.estimate)) if estimated else round(median(n_vals))
        delta = n - b
        ci_ns = round(abs(as_ns(test.half_width())))
        beyond = (
            test.p_value < ALPHA
            and test.estimate * delta > 0
            and abs(delta) > max(ci_ns, between_floor(self.floor_ns))
        )
        pct = delta / b * 100 if b > 0 else None
        return self._judged(
            b,
            n,
            beyond,
            pct,
            basis,
            p_value=test.p_value,
            noise_ns=round(abs(as_ns(spread))),
            ci_ns=ci_ns,
        )

    def _values(
        self, base: Mapping[int, float], new: Mapping[int, float]
    ) -> tuple[list[float], list[float]]:
        """The two sides' per-run values: by common round when paired, else all."""
        if self.paired:
            keys = sorted(base.keys() & new.keys())
            return [base[k] for k in keys], [new[k] for k in keys]
        return list(base.values()), list(new.values())

    def _judged(
        self,
        b: int,
        n: int,
        beyond: bool,
        pct: float | None,
        basis: Basis,
        *,
        p_value: float | None = None,
        noise_ns: int | None = None,
        ci_ns: int | None = None,
    ) -> Change:
        significant = beyond and (pct is None or abs(pct) > self.threshold_pct)
        return _change(
            b,
            n,
            beyond=beyond,
            significant=significant,
            basis=basis,
            p_value=p_value,
            noise_ns=noise_ns,
            ci_ns=ci_ns,
        )

    def _one_sided(self, value: int, status: Status) -> Change:
        beyond = value > self.floor_ns
        base, new = (None, value) if status == "added" else (value, None)
        delta = value if status == "added" else -value
        return Change(
            base_ns=base,
            new_ns=new,
            delta_ns=delta,
            delta_pct=None,
            beyond_noise=beyond,
            significant=beyond,
            status=status,
            basis="threshold",
        )

    def warnings(self) -> list[str]:
        by_counts: dict[tuple[int, int], list[str]] = {}
        for what, counts in self.fallbacks.items():
            by_counts.setdefault(counts, []).append(what)
        out = []
        for (nb, nn), whats in by_counts.items():
            if nb == nn == 1:
                rule = f"by the {fmt_num(self.threshold_pct)} % threshold and the floor only"
            else:
                rule = "beyond noise only where the two sides' samples do not overlap"
            out.append(
                f"{' and '.join(whats)}: n={nb} vs {nn} samples, too few for the rank test"
                f" (about 7 per side reach p < {ALPHA:g}): changes are judged {rule};"
                " profile more iterations"
            )
        if self.summary_only:
            out.append(
                f"{' and '.join(sorted(self.summary_only))}: a side was saved without its"
                " per-iteration samples, so changes are judged on the saved summaries (spread"
                " and confidence interval), without the rank test; save with --samples to keep them"
            )
        return out


def _sd(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _noise(base: Summary, new: Summary) -> int:
    """NOISE_K robust standard deviations of (a new iteration - a base iteration)."""
    return round(_NOISE_K * _MAD_TO_SIGMA * math.hypot(base.mad or 0.0, new.mad or 0.0))


def _ci(base: Summary, new: Summary) -> int | None:
    """Half-width of the difference of the medians' confidence interval (None if unknown)."""
    hb, hn = base.ci_half_width, new.ci_half_width
    if hb is None or hn is None:
        return None
    return round(math.hypot(hb, hn))


def _change(
    base: int,
    new: int,
    *,
    beyond: bool,
    significant: bool,
    basis: Basis,
    p_value: float | None = None,
    noise_ns: int | None = None,
    ci_ns: int | None = None,
) -> Change:
    delta = new - base
    status: Status = "same"
    if significant:
        status = "slower" if delta > 0 else "faster"
    return Change(
        base_ns=base,
        new_ns=new,
        delta_ns=delta,
        delta_pct=delta / base * 100 if base > 0 else None,
        beyond_noise=beyond,
        significant=significant,
        status=status,
        basis=basis,
        p_value=p_value,
        noise_ns=noise_ns,
        ci_ns=ci_ns,
    )
