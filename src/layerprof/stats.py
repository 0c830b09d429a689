"""Robust statistics: summaries of repeated measurements and a two-sample rank test."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of sorted values."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass(frozen=True)
class Summary:
    """Spread of one measured quantity; all times in nanoseconds."""

    median: float
    mean: float
    p90: float
    p99: float
    min: float
    max: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            raise ValueError("summary of no values")
        s = sorted(float(v) for v in values)
        n = len(s)
        mean = math.fsum(s) / n
        var = math.fsum((v - mean) ** 2 for v in s) / (n - 1) if n > 1 else 0.0
        return cls(
            median=percentile(s, 50),
            mean=mean,
            p90=percentile(s, 90),
            p99=percentile(s, 99),
            min=s[0],
            max=s[-1],
            std=math.sqrt(var),
            n=n,
        )

    def scaled(self, factor: float) -> dict[str, float | int]:
        """The summary as a dict with every time multiplied by ``factor`` (e.g. ns -> ms)."""
        return {
            "median": self.median * factor,
            "mean": self.mean * factor,
            "p90": self.p90 * factor,
            "p99": self.p99 * factor,
            "min": self.min * factor,
            "max": self.max * factor,
            "std": self.std * factor,
            "n": self.n,
        }


def median(values: Sequence[float]) -> float:
    return percentile(sorted(values), 50)


EXACT_MAX_PAIRS = 2_500
"""Exact rank-test distribution up to this many sample pairs (n * m)."""


def rank_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, int]:
    """Two-sided Mann-Whitney test: ``(p_value, direction)``.

    ``direction`` is +1 when ``b`` tends to be larger than ``a``, -1 when
    smaller, 0 when neither. Exact distribution without ties and up to
    ``EXACT_MAX_PAIRS`` pairs; tie-corrected normal approximation (with
    continuity correction) otherwise.
    """
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        raise ValueError("rank test needs samples on both sides")
    pooled = sorted([(float(v), 1) for v in b] + [(float(v), 0) for v in a])
    rank_b = 0.0
    tie_term = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        mid = (i + j) / 2 + 1  # ranks are 1-based
        rank_b += mid * sum(flag for _, flag in pooled[i : j + 1])
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    u_b = rank_b - m * (m + 1) / 2  # pairs where b > a, ties counted half
    mean = n * m / 2
    direction = (u_b > mean) - (u_b < mean)
    if tie_term == 0 and n * m <= EXACT_MAX_PAIRS:
        cdf = _u_cdf(n, m)
        u = round(u_b)
        lower = cdf[u]
        upper = 1.0 - cdf[u - 1] if u > 0 else 1.0
        return min(1.0, 2 * min(lower, upper)), direction
    total = n + m
    var = n * m / 12 * ((total + 1) - tie_term / (total * (total - 1)))
    if var <= 0:
        return 1.0, 0
    z = max(0.0, abs(u_b - mean) - 0.5) / math.sqrt(var)
    return math.erfc(z / math.sqrt(2)), direction


def min_p_value(n: int, m: int) -> float:
    """The smallest two-sided p the exact rank test can give with ``n`` and ``m`` samples."""
    return min(1.0, 2 / math.comb(n + m, n))


@lru_cache(maxsize=32)
def _u_cdf(n: int, m: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0..n*m under 'same distribution', no ties.

    The counts are the coefficients of the Gaussian binomial [n+m choose n]_q,
    built as prod_{i=1..n} (1 - q^(m+i)) / (1 - q^i) with exact integer steps.
    """
    size = n * m + m + n + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, n + 1):
        k = m + i
        for j in range(size - 1, k - 1, -1):  # times (1 - q^k)
            poly[j] -= poly[j - k]
        for j in range(i, size):  # divided by (1 - q^i)
            poly[j] += poly[j - i]
    total = math.comb(n + m, n)
    out = []
    running = 0
    for c in poly[: n * m + 1]:
        running += c
        out.append(running / total)
    return tuple(out)
