"""Robust statistics: summaries of repeated measurements and a two-sample rank test."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Union

from layerprof.units import NS_PER_MS


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of sorted values."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


#: Two-sided level of the confidence intervals of medians (order statistics).
CI_LEVEL = 0.95
_Z = 1.959963984540054  # standard normal quantile of 1 - (1 - CI_LEVEL) / 2


@dataclass(frozen=True)
class Summary:
    """Spread of one measured quantity; all times in nanoseconds (``median``,
    ``median_ns``), with ``*_ms`` properties for milliseconds (``median_ms``).

    ``mad`` is the median absolute deviation from the median; ``ci_low`` /
    ``ci_high`` bound the median with ``CI_LEVEL`` confidence, from order
    statistics (distribution-free: the ranks ``n/2 -+ z*sqrt(n)/2`` of the
    sorted samples, clamped to the extremes; with fewer than 6 samples the
    interval is [min, max]). They default to "unknown" for summaries written
    before they existed.
    """

    median: float
    mean: float
    p90: float
    p99: float
    min: float
    max: float
    std: float
    n: int
    mad: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None

    @classmethod
    def of(cls, values: Sequence[float] | Any) -> Summary:
        """Summary of a sequence or a numpy array of values."""
        import numpy as np

        if (
            isinstance(values, np.ndarray)
            and values.dtype == np.int64
            and values.ndim == 1
            and 0 < len(values) <= SMALL_SUMMARY
        ):
            small = _small_summary(sorted(values.tolist()))
            if small is not None:
                return small
        return _numpy_summary(values)

    def scaled(self, factor: float) -> dict[str, float | int]:
        """The summary as a dict with every time multiplied by ``factor`` (e.g. ns -> ms)."""
        out: dict[str, float | int] = {
            "median": self.median * factor,
            "mean": self.mean * factor,
            "p90": self.p90 * factor,
            "p99": self.p99 * factor,
            "min": self.min * factor,
            "max": self.max * factor,
            "std": self.std * factor,
            "n": self.n,
        }
        for key in ("mad", "ci_low", "ci_high"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value * factor
        return out

    @property
    def ci_half_width(self) -> float | None:
        """Half the width of the median's confidence interval (None when unknown)."""
        if self.ci_low is None or self.ci_high is None:
            return None
        return (self.ci_high - self.ci_low) / 2

    # Explicit units (docs/python-api.md): the fields are nanoseconds; these say so,
    # and convert to the milliseconds of the JSON and the console.
    @property
    def median_ns(self) -> float:
        return self.median

    @property
    def median_ms(self) -> float:
        return self.median / NS_PER_MS

    @property
    def mean_ms(self) -> float:
        return self.mean / NS_PER_MS

    @property
    def p90_ms(self) -> float:
        return self.p90 / NS_PER_MS

    @property
    def p99_ms(self) -> float:
        return self.p99 / NS_PER_MS

    @property
    def min_ms(self) -> float:
        return self.min / NS_PER_MS

    @property
    def max_ms(self) -> float:
        return self.max / NS_PER_MS

    @property
    def std_ms(self) -> float:
        return self.std / NS_PER_MS

    @property
    def ci_ms(self) -> tuple[float, float] | None:
        """The median's confidence interval in ms (None when unknown)."""
        if self.ci_low is None or self.ci_high is None:
            return None
        return self.ci_low / NS_PER_MS, self.ci_high / NS_PER_MS

    def ms(self) -> dict[str, float | int]:
        """Every field in milliseconds (``n`` as is), as the JSON writes it."""
        return self.scaled(1 / NS_PER_MS)


#: Summary.of takes integer samples up to this many in plain Python: numpy's fixed cost
#: per call (sort, percentile, median, std: ~100 us) outweighs the work on a few values,
#: and a trace's op table asks for hundreds of summaries of one sample per step.
SMALL_SUMMARY = 128
_EXACT_INTS = 2**53  # float64 adds integers exactly while every partial sum stays below
_QUANTILES = (0.5, 0.9, 0.99)  # np.percentile's q / 100


def _numpy_summary(values: Sequence[float] | Any) -> Summary:
    """Summary.of by numpy: any numbers, any count."""
    import numpy as np

    s = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = len(s)
    if n == 0:
        raise ValueError("summary of no values")
    p50, p90, p99 = np.percentile(s, [50, 90, 99])
    lo, hi = median_ci(n)
    return Summary(
        median=float(p50),
        mean=float(s.mean()),
        p90=float(p90),
        p99=float(p99),
        min=float(s[0]),
        max=float(s[-1]),
        std=float(s.std(ddof=1)) if n > 1 else 0.0,
        n=n,
        mad=float(np.median(np.abs(s - p50))),
        ci_low=float(s[lo]),
        ci_high=float(s[hi]),
    )


def _small_summary(s: list[int]) -> Summary | None:
    """Summary.of of sorted integers, bit for bit what the numpy path gives (None when
    the sum could round: then numpy's own summation order would matter).

    Each step is numpy's: linear percentiles by ``_lerp``, the mean as sum / n (exact
    integer sum), the standard deviation from squared deviations added in numpy's
    pairwise order, the MAD as ``np.median`` (mean of the two middle values).
    """
    n = len(s)
    if max(-s[0], s[-1]) * n > _EXACT_INTS:
        return None
    x = [float(v) for v in s]
    mean = float(sum(s)) / n
    p50, p90, p99 = (_lerp_quantile(x, q) for q in _QUANTILES)
    std = 0.0
    if n > 1:
        std = math.sqrt(_pairwise_sum([(v - mean) * (v - mean) for v in x]) / (n - 1))
    dev = sorted([abs(v - p50) for v in x])
    k = n // 2
    mad = dev[k] if n % 2 else (dev[k - 1] + dev[k]) / 2
    lo, hi = median_ci(n)
    return Summary(
        median=p50,
        mean=mean,
        p90=p90,
        p99=p99,
        min=x[0],
        max=x[-1],
        std=std,
        n=n,
        mad=mad,
        ci_low=x[lo],
        ci_high=x[hi],
    )


def _lerp_quantile(x: list[float], q: float) -> float:
    """``np.percentile(x, 100 * q)`` of sorted finite floats (method 'linear')."""
    last = len(x) - 1
    pos = last * q
    if pos >= last:
        return x[last]
    i = math.floor(pos)
    t = pos - i
    a, b = x[i], x[i + 1]
    d = b - a
    # numpy's _lerp: from the nearer end, so that t = 1 gives b exactly
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def _pairwise_sum(x: list[float]) -> float:
    """``np.add.reduce`` of a float64 array: numpy's pairwise summation (blocks of up
    to 128 added by 8 interleaved accumulators, halves above that)."""
    n = len(x)
    if n < 8:
        total = 0.0
        for v in x:
            total += v
        return total
    if n <= 128:
        r = x[:8]
        i = 8
        stop = n - n % 8
        while i < stop:
            for j in range(8):
                r[j] += x[i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for v in x[i:]:
            total += v
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(x[:half]) + _pairwise_sum(x[half:])


def median_ci(n: int) -> tuple[int, int]:
    """0-based ranks of the sorted samples that bound the median with CI_LEVEL confidence.

    The count of samples below the true median is Binomial(n, 1/2); its
    normal approximation gives ranks ``n/2 -+ z*sqrt(n)/2``. Below 6 samples
    no pair of ranks reaches 95 %: the interval is the whole range.
    """
    if n < 6:
        return 0, max(n - 1, 0)
    half = _Z * math.sqrt(n) / 2
    lo = max(math.floor(n / 2 - half), 0)
    hi = min(math.ceil(n / 2 + half), n - 1)
    return lo, hi


class Series:
    """One quantity measured once per iteration: its samples (when kept) and its summary.

    Samples are one int64 per iteration (8 bytes each), read-only; a long
    training loop's are kept as int32 while they fit (``stored``), and read as
    int64. A series loaded from a summary-only file has ``values is None`` and
    only its ``summary``; everything that needs the samples (a rank test) checks.
    """

    __slots__ = ("_summary", "_values")

    def __init__(self, values: Sequence[float] | Any = None, summary: Summary | None = None):
        import numpy as np

        if values is None and summary is None:
            raise ValueError("a Series needs samples or a summary")
        array = None
        if isinstance(values, np.ndarray) and values.dtype in _int_dtypes():
            if values.ndim != 1 or len(values) == 0:
                raise ValueError("series samples must be a non-empty 1-d sequence of numbers")
            # Integer samples as they are: no float round trip, and no copy of a
            # read-only array (a row of the recorder's per-layer matrix stays a view).
            array = values if not values.flags.writeable else values.copy()
            array.flags.writeable = False
        elif values is not None:
            array = np.array(values, dtype=np.float64)
            if array.ndim != 1 or len(array) == 0 or not (np.abs(array) < 2.0**62).all():
                raise ValueError("series samples must be a non-empty 1-d sequence of numbers")
            array = np.rint(array).astype(np.int64)
            array.flags.writeable = False
        self._values = array
        self._summary = summary

    @classmethod
    def of(cls, values: Sequence[float] | Any) -> Series:
        return cls(values)

    @property
    def values(self) -> Any:
        """The samples as a read-only int64 numpy array, or None (summary only)."""
        return _wide(self._values)

    @property
    def stored(self) -> Any:
        """The samples as kept: ``values``, or the int32 array they are read from (no copy)."""
        return self._values

    @property
    def summary(self) -> Summary:
        if self._summary is None:
            self._summary = Summary.of(_wide(self._values))
        return self._summary

    @property
    def n(self) -> int:
        return len(self._values) if self._values is not None else self.summary.n

    @property
    def median(self) -> float:
        if self._summary is None and self._values is not None and len(self._values):
            # the median alone, without the whole summary: op tables ask for
            # thousands of medians and rarely for the rest (same value as Summary's)
            return _median(self._values)
        return self.summary.median

    @property
    def mean(self) -> float:
        return self.summary.mean

    def tolist(self) -> list[int] | None:
        return None if self._values is None else [int(v) for v in self._values]

    def __len__(self) -> int:
        return self.n

    def _samples(self) -> Any:
        if self._values is None:
            raise ValueError("this series holds only a summary (saved without samples)")
        return self._values

    def __iter__(self) -> Iterator[int]:
        return (int(v) for v in self._samples())

    def __getitem__(self, index: int) -> int:
        return int(self._samples()[index])

    def __eq__(self, other: object) -> bool:
        """Equal to another Series with the same samples (or, both summary-only, the same
        summary), or to a sequence of the same sample values."""
        if isinstance(other, Series):
            if self._values is not None and other._values is not None:
                return self.tolist() == other.tolist()
            return self._values is None and other._values is None and self.summary == other.summary
        if isinstance(other, (tuple, list)):
            return self._values is not None and self.tolist() == [int(v) for v in other]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._values is not None and len(self._values) <= 8:
            return f"Series({self.tolist()})"
        return f"Series(n={self.n}, median={self.median:g})"


SeriesLike = Union["Series", Sequence[int], Sequence[float], Any]
"""What fields holding a Series accept: a Series, or samples (a sequence or numpy array)."""


class IntValues(Sequence[int]):
    """Whole numbers held as one read-only int64 (or int32) array, seen as a tuple of ints.

    For per-step values a long run holds for every layer (a tuple keeps an int
    object and a pointer, ~36 bytes, per value; this keeps 8, and a view of a
    recorder's matrix keeps none of its own). Equal to a tuple or list of the
    same ints; ``numpy.asarray`` gives the array without a copy.
    """

    __slots__ = ("_array",)

    def __init__(self, array: Any) -> None:
        import numpy as np

        values = np.asarray(array)
        if values.dtype not in _int_dtypes():
            values = values.astype(np.int64)
        if values.ndim != 1:
            raise ValueError("IntValues holds a 1-d array")
        if values.flags.writeable:  # a read-only row is kept as it is (no copy)
            values = values.copy()
            values.flags.writeable = False
        self._array = values

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return IntValues(self._array[index])
        return int(self._array[index])

    def __iter__(self) -> Iterator[int]:
        return iter(self._array.tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        # int64 always: an int32 row read as int64 (a copy) cannot overflow in the
        # reader's arithmetic (a step's forward plus backward, say)
        return _wide(self._array) if dtype is None else self._array.astype(dtype)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IntValues):
            other = other._array.tolist()
        if isinstance(other, (tuple, list)):
            return len(other) == len(self._array) and self._array.tolist() == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._array.tolist()))

    def __repr__(self) -> str:
        return repr(tuple(self._array.tolist()))


def as_series(values: SeriesLike | None) -> Series | None:
    """A Series from samples (or None / an existing Series, unchanged); empty -> None."""
    if values is None or isinstance(values, Series):
        return values
    return Series(values) if len(values) else None


def median(values: Sequence[float]) -> float:
    return percentile(sorted(values), 50)


def trimmed_mean(values: Sequence[float], cut: float = 0.2) -> float:
    """Mean of ``values`` without the lowest and highest ``cut`` fraction of them.

    Steadier than the median for the run-to-run gate (it averages the middle 60 %
    instead of picking one sample) and, unlike the mean, untouched by the few
    iterations a preempted process stretches."""
    s = sorted(values)
    if not s:
        raise ValueError("trimmed_mean needs at least one value")
    k = int(len(s) * cut)
    middle = s[k : len(s) - k] or s
    return math.fsum(middle) / len(middle)


_EXACT_MAX_PAIRS = 2_500
"""Exact rank-test distribution up to this many sample pairs (n * m)."""


def rank_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, int]:
    """Two-sided Mann-Whitney test: ``(p_value, direction)``.

    ``direction`` is +1 when ``b`` tends to be larger than ``a``, -1 when
    smaller, 0 when neither. Exact distribution without ties and up to
    ``_EXACT_MAX_PAIRS`` pairs; tie-corrected normal approximation (with
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
    if tie_term == 0 and n * m <= _EXACT_MAX_PAIRS:
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


@lru_cache(maxsize=1)
def _int_dtypes() -> frozenset[Any]:
    import numpy as np

    return frozenset({np.dtype(np.int64), np.dtype(np.int32)})


def _wide(values: Any) -> Any:
    """int64 samples as they are; int32 ones as a read-only int64 copy."""
    if values is None or values.dtype.itemsize == 8:
        return values
    import numpy as np

    out = values.astype(np.int64)
    out.flags.writeable = False
    return out


def _median(values: Any) -> float:
    """The median as ``np.percentile(values, 50)`` gives it (linear interpolation)."""
    s = sorted(values.tolist())
    n = len(s)
    k = (n - 1) // 2
    if n % 2:
        return float(s[k])
    lo, hi = float(s[k]), float(s[k + 1])
    return hi - (hi - lo) * 0.5  # numpy's lerp at t = 0.5


# ---- Student's t: the between-run tests ----------------------------------------------


@dataclass(frozen=True)
class TTest:
    """A t-test of a mean difference: ``p_value`` two-sided, ``estimate`` the mean
    difference (``b - a``), ``se`` its standard error, ``df`` the degrees of freedom."""

    p_value: float
    estimate: float
    se: float
    df: float

    def half_width(self, level: float = CI_LEVEL) -> float:
        """Half-width of the two-sided ``level`` confidence interval of ``estimate``."""
        return t_quantile(1 - (1 - level) / 2, self.df) * self.se


def paired_t_test(differences: Sequence[float]) -> TTest:
    """One-sample t-test that the mean of ``differences`` is zero (at least two values).

    Used on the per-round differences of an interleaved A/B run: when the order
    of base and new alternates, an unchanged model gives differences symmetric
    about zero, for which the t-test holds or errs on the safe side (heavy tails
    widen its interval)."""
    n = len(differences)
    if n < 2:
        raise ValueError("a paired t-test needs at least two differences")
    mean = math.fsum(differences) / n
    var = math.fsum((d - mean) ** 2 for d in differences) / (n - 1)
    se = math.sqrt(var / n)
    return TTest(_t_p(mean, se, n - 1), mean, se, float(n - 1))


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> TTest:
    """Welch's two-sample t-test of ``mean(b) - mean(a)`` (at least two values a side)."""
    n, m = len(a), len(b)
    if n < 2 or m < 2:
        raise ValueError("a Welch t-test needs at least two values per side")
    ma, mb = math.fsum(a) / n, math.fsum(b) / m
    va = math.fsum((x - ma) ** 2 for x in a) / (n - 1) / n
    vb = math.fsum((x - mb) ** 2 for x in b) / (m - 1) / m
    se = math.sqrt(va + vb)
    denom = (va**2 / (n - 1) if va else 0.0) + (vb**2 / (m - 1) if vb else 0.0)
    df = (va + vb) ** 2 / denom if denom > 0 else float(n + m - 2)
    return TTest(_t_p(mb - ma, se, df), mb - ma, se, df)


def _t_p(estimate: float, se: float, df: float) -> float:
    if se == 0:
        return 1.0 if estimate == 0 else 0.0
    return t_two_sided_p(estimate / se, df)


def t_two_sided_p(t: float, df: float) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` degrees of freedom."""
    if not math.isfinite(t):
        return 0.0
    return _beta_inc(df / 2, 0.5, df / (df + t * t))


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile (``q > 0.5``) of Student's t, by bisection on the p-value."""
    target = 2 * (1 - q)
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided_p(mid, df) > target else (lo, mid)
    return (lo + hi) / 2


def _beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)`` (continued fraction)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1 - x) / b


def _beta_cf(a: float, b: float, x: float) -> float:
    """Lentz's continued fraction for the incomplete beta function."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h
