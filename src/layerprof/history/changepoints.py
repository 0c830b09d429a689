"""Change points in one series of per-run figures: where a shift starts, how sure, how big.

Pure numpy, no torch, no I/O. The method (docs/history.md):

* **Statistic.** The values' ranks (ties averaged) and, for every split ``t`` that
  leaves at least ``confirm`` runs on each side, the standardized Mann-Whitney rank
  sum of the first ``t`` runs against the rest, ``Z_t``; the statistic is
  ``max |Z_t|`` and the split is where it peaks. Ranks make one bad run count as
  one run, whatever its size; standardizing keeps the power near the ends, where a
  new change is.
* **Significance.** Under "no change" the runs are exchangeable, so the null
  distribution of the statistic depends only on the series' length: ``permutations``
  seeded random orders of ``1..n`` (50,000), drawn once per (length, margin) and
  reused for every series of that length. The p-value is the smaller of the permutation
  p-value and the union bound over the candidate splits (each ``Z_t`` taken as
  normal, conservative in the far tail): both decrease with the statistic, so the
  smaller one is still a p-value, and it resolves p-values below ``1/permutations``.
* **Segmentation.** Binary segmentation: a series whose whole-window p-value passes
  is split where the two sides deviate least from their own medians (``locate``), and each side is tested again at the same level, down to
  segments of ``2 * confirm`` runs.
* **Size.** Between two adjacent segments, the Hodges-Lehmann shift (the median of
  all differences after - before) with its distribution-free interval from the
  Mann-Whitney order statistics.
* **Many series.** Benjamini-Hochberg over the whole-window p-values of all the
  series tested together (``fdr_threshold``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Floats = npt.NDArray[np.float64]

#: Where the union bound takes over from an unresolved permutation count.
_NORMAL_Z_95 = 1.959963984540054


@dataclass(frozen=True)
class Detection:
    """How change points are found (the defaults are the documented ones).

    ``fdr`` is the false-discovery rate across the series tested together;
    ``confirm`` the fewest runs on each side of a change (a change is never one
    run); ``permutations`` the size of the null sample of a whole window's test,
    drawn with ``seed`` (one sample serves every series of a length, so its tail
    must be right: at 10,000 the test at the level Benjamini-Hochberg asks of one
    series in seven, 0.14 %, rejected 0.20 % of null series; at 50,000, 0.143 %);
    ``part_permutations`` the same for a part of a series already split (each new
    length costs a sample; those tests look for further changes in a series already
    found changed);
    ``level`` the confidence of a change's size interval.
    """

    fdr: float = 0.01
    confirm: int = 3
    permutations: int = 50_000
    part_permutations: int = 10_000
    seed: int = 0
    level: float = 0.95

    def __post_init__(self) -> None:
        if not 0 < self.fdr < 1 or not 0 < self.level < 1:
            raise ValueError("fdr and level are probabilities strictly between 0 and 1")
        if self.confirm < 2 or min(self.permutations, self.part_permutations) < 100:
            raise ValueError("confirm >= 2 runs and permutations >= 100")

    @property
    def shortest(self) -> int:
        """The shortest series that can hold a change: ``confirm`` runs on each side."""
        return 2 * self.confirm


@dataclass(frozen=True)
class Split:
    """A change point: the series' run ``index`` (0-based, the first run after the
    change) with the p-value of the test that found it; ``shift`` is the
    Hodges-Lehmann shift of the values from the segment before to the segment
    after, ``low``..``high`` its interval (the series' units: log time here, so
    ``exp(shift) - 1`` is the relative change)."""

    index: int
    p: float
    shift: float
    low: float
    high: float
    before: int  # runs in the segment before
    after: int  # runs in the segment after


def ranks(values: Floats) -> Floats:
    """1-based ranks, ties given their average rank (as scipy's ``rankdata``)."""
    import numpy as np

    n = len(values)
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.concatenate(([True], ordered[1:] != ordered[:-1]))
    group = np.cumsum(starts) - 1
    bounds = np.concatenate((np.flatnonzero(starts), [n]))
    average = 0.5 * (bounds[group] + bounds[group + 1] - 1) + 1.0
    out = np.empty(n, dtype=np.float64)
    out[order] = average
    return out


def _z_scan(rank_rows: Floats, margin: int) -> Floats:
    """|Z_t| for each row of ranks (shape ``(rows, n)``) and split ``t`` in
    ``[margin, n - margin]`` (columns in that order)."""
    import numpy as np

    n = rank_rows.shape[1]
    t = np.arange(margin, n - margin + 1, dtype=np.float64)
    sums = np.cumsum(rank_rows, axis=1)[:, margin - 1 : n - margin]
    scale = np.sqrt(t * (n - t) * (n + 1) / 3.0)
    return np.abs(2.0 * sums - t * (n + 1)) / scale  # type: ignore[no-any-return]


def scan(values: Floats, margin: int) -> tuple[float, int]:
    """The statistic ``max |Z_t|`` of ``values`` and the split ``t`` where it peaks
    (the first run after the change); ``len(values) >= 2 * margin``."""
    import numpy as np

    z = _z_scan(ranks(values)[None, :], margin)[0]
    best = int(np.argmax(z))
    return float(z[best]), best + margin


@functools.lru_cache(maxsize=256)
def null_sample(n: int, margin: int, permutations: int, seed: int) -> Floats:
    """The statistic over ``permutations`` random orders of ``1..n``, sorted: its null
    distribution for any series of ``n`` runs without ties (drawn once, reused)."""
    import numpy as np

    rng = np.random.default_rng((seed, n, margin))
    out = np.empty(permutations, dtype=np.float64)
    chunk = max(1, 2_000_000 // max(n, 1))  # ~8 MB of random keys at a time
    t = np.arange(margin, n - margin + 1, dtype=np.float64)
    scale = np.sqrt(t * (n - t) * (n + 1) / 3.0)
    for start in range(0, permutations, chunk):
        rows = min(chunk, permutations - start)
        orders = np.argsort(rng.random((rows, n), dtype=np.float32), axis=1) + 1
        sums = np.cumsum(orders, axis=1, dtype=np.int64)[:, margin - 1 : n - margin]
        out[start : start + rows] = (np.abs(2.0 * sums - t * (n + 1)) / scale).max(axis=1)
    out.sort()
    out.flags.writeable = False
    return out


def locate(values: Floats, margin: int) -> int:
    """Where a change that the scan found starts: the split with the least absolute
    deviation of each side from its own median (a robust least-squares). The
    standardized scan finds changes near the ends, but locates a step late or early
    when drift puts a run or two beside it at the other level; the medians do not
    lean that way."""
    import numpy as np

    n = len(values)
    best, where = math.inf, margin
    for t in range(margin, n - margin + 1):
        left, right = values[:t], values[t:]
        cost = float(np.abs(left - np.median(left)).sum() + np.abs(right - np.median(right)).sum())
        if cost < best:
            best, where = cost, t
    return where


def p_value(stat: float, n: int, margin: int, detection: Detection, *, part: bool = False) -> float:
    """P(statistic >= ``stat``) for a series of ``n`` runs with no change (see the
    module docstring: the permutation p-value or the union bound, the smaller); a
    ``part`` of a series already split is tested on ``part_permutations``."""
    import numpy as np

    size = detection.part_permutations if part else detection.permutations
    sample = null_sample(n, margin, size, detection.seed)
    at_least = len(sample) - int(np.searchsorted(sample, stat - 1e-12, side="left"))
    permuted = (at_least + 1) / (len(sample) + 1)
    positions = n - 2 * margin + 1
    union = positions * math.erfc(stat / math.sqrt(2.0))  # 2 * normal tail, per split
    return min(permuted, union, 1.0)


def shift_interval(before: Floats, after: Floats, level: float) -> tuple[float, float, float]:
    """Hodges-Lehmann shift of ``after`` over ``before`` and its ``level`` interval
    (Mann-Whitney order statistics, normal approximation of their rank)."""
    import numpy as np

    diffs = np.sort((after[:, None] - before[None, :]).ravel())
    m, k = len(before), len(after)
    z = _NORMAL_Z_95 if level == 0.95 else _normal_quantile(0.5 + level / 2)
    # the C-th smallest and largest differences (1-based), C = mk/2 - z sd(U), rounded down
    c = math.floor(m * k / 2.0 - z * math.sqrt(m * k * (m + k + 1) / 12.0))
    c = min(max(c, 1), len(diffs))
    return float(np.median(diffs)), float(diffs[c - 1]), float(diffs[len(diffs) - c])


def _normal_quantile(p: float) -> float:
    """The standard normal's ``p`` quantile (bisection on erfc: no scipy needed)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def whole_p(values: Floats, detection: Detection) -> float:
    """The p-value of "this series changes somewhere" (1.0 when too short to tell)."""
    if len(values) < detection.shortest:
        return 1.0
    stat, _ = scan(values, detection.confirm)
    return p_value(stat, len(values), detection.confirm, detection)


def segment(values: Floats, alpha: float, detection: Detection) -> list[Split]:
    """Every change point binary segmentation finds at level ``alpha``, in run order,
    each sized against its neighbouring segments."""
    cuts: list[tuple[int, float]] = []
    pending = [(0, len(values))]
    while pending:
        lo, hi = pending.pop()
        if hi - lo < detection.shortest:
            continue
        part = values[lo:hi]
        stat, _ = scan(part, detection.confirm)
        whole = lo == 0 and hi == len(values)
        p = p_value(stat, len(part), detection.confirm, detection, part=not whole)
        if p <= alpha:
            at = locate(part, detection.confirm)
            cuts.append((lo + at, p))
            pending += [(lo, lo + at), (lo + at, hi)]
    cuts.sort()
    return _sized(values, cuts, detection.level)


def _sized(values: Floats, cuts: Sequence[tuple[int, float]], level: float) -> list[Split]:
    edges = [0, *(c for c, _ in cuts), len(values)]
    out = []
    for i, (cut, p) in enumerate(cuts):
        before, after = values[edges[i] : cut], values[cut : edges[i + 2]]
        shift, low, high = shift_interval(before, after, level)
        out.append(Split(cut, p, shift, low, high, len(before), len(after)))
    return out


def fdr_threshold(pvalues: Sequence[float], q: float) -> float:
    """Benjamini-Hochberg: the largest p-value rejected at false-discovery rate ``q``
    among ``pvalues`` (-1.0 when none is)."""
    ordered = sorted(pvalues)
    m = len(ordered)
    passed = [p for i, p in enumerate(ordered, start=1) if p <= q * i / m]
    return passed[-1] if passed else -1.0
