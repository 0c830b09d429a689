"""Robust summary statistics over repeated measurements (integer nanoseconds in)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


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
