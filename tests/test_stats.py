"""stats.py's own maths: the summary of a sample (Summary.of's fast path bit for bit
against numpy, the median's confidence interval, Series.median), IntValues, and the
tests the diff's judge rests on (the rank test's exact distribution and limits, the
paired and Welch t-tests against reference values). The judge and the gate that use
them are tested in tests/analysis/."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from layerprof.stats import (
    SMALL_SUMMARY,
    IntValues,
    Series,
    Summary,
    _numpy_summary,
    _pairwise_sum,
    _small_summary,
    _u_cdf,
    min_p_value,
    paired_t_test,
    rank_test,
    t_quantile,
    t_two_sided_p,
    welch_t_test,
)

# ---- the summary of a sample -------------------------------------------------------------


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.integers(min_value=0, max_value=2**52), min_size=1, max_size=60))
def test_series_median_alone_equals_the_summary_median(values: list[int]) -> None:
    """Series.median skips the whole summary when nothing else is asked: same number."""
    array = np.asarray(values, dtype=np.int64)
    assert Series.of(array).median == Summary.of(array).median == float(np.median(array))


def test_median_interval_covers_the_true_median_about_95_percent() -> None:
    """Order-statistic CI of the median (stats.median_ci): coverage on skewed samples
    with a known median, seeded, for the sample counts runs use."""
    rng = np.random.default_rng(0)
    for n in (10, 20, 50, 200):
        draws = rng.lognormal(mean=0.0, sigma=0.5, size=(2000, n)) * 1e6  # true median 1e6
        covered = 0
        for row in draws:
            s = Summary.of(row)
            assert s.ci_low is not None and s.ci_high is not None
            covered += s.ci_low <= 1e6 <= s.ci_high
        assert 0.93 <= covered / len(draws) <= 0.995, (n, covered)


# ---- Summary.of's plain-Python path for small integer samples, bit for bit ---------------


def _bits(s: Summary) -> tuple[object, ...]:
    return tuple(v.hex() if isinstance(v, float) else v for v in dataclasses.astuple(s))


def _same(values: list[int]) -> None:
    array = np.asarray(values, dtype=np.int64)
    small = _small_summary(sorted(values))
    assert small is not None
    assert _bits(small) == _bits(_numpy_summary(array))
    assert _bits(Summary.of(array)) == _bits(small)


# Samples as traces give them: durations in ns (wide spread, ties, zeros), and
# small counts; sizes across the 8-accumulator blocks of numpy's pairwise sum.
ns = st.integers(min_value=0, max_value=10**13)


wide = st.integers(min_value=-(2**46), max_value=2**46)


few = st.integers(min_value=0, max_value=5)


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(st.lists(st.one_of(ns, wide, few), min_size=1, max_size=SMALL_SUMMARY))
@example([7])
@example([3, 4])
@example([5, 5, 5, 5, 5, 5, 5, 5, 5])
@example([0, 1] * 64)
@example([1, 2**46 - 1, 2**46 - 3])
def test_small_summary_is_numpys_bit_for_bit(values: list[int]) -> None:
    _same(values)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.integers(min_value=1, max_value=SMALL_SUMMARY),
    st.integers(min_value=0, max_value=2**63 - 1),
    st.integers(min_value=0, max_value=45),  # sums below 2**53
)
def test_random_arrays_of_every_size(n: int, seed: int, bits: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2**bits + 1, size=n).tolist()
    _same(values)


def test_sums_that_could_round_take_numpy() -> None:
    big = [2**60, 2**60 + 1, 3]
    assert _small_summary(sorted(big)) is None
    array = np.asarray(big, dtype=np.int64)
    assert _bits(Summary.of(array)) == _bits(_numpy_summary(array))


def test_other_inputs_take_numpy() -> None:
    for values in ([1.5, 2.5], np.arange(SMALL_SUMMARY + 1, dtype=np.int64), [3, 1, 2]):
        assert _bits(Summary.of(values)) == _bits(_numpy_summary(values))


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.lists(st.floats(min_value=0, max_value=1e15), min_size=0, max_size=400))
def test_pairwise_sum_is_numpys(values: list[float]) -> None:
    assert (
        _pairwise_sum(values).hex()
        == float(np.add.reduce(np.asarray(values, dtype=np.float64))).hex()
    )


# ---- IntValues ---------------------------------------------------------------------------


def test_int_values_compare_as_tuples() -> None:
    values = IntValues(np.array([3, 1, 2]))
    assert values == (3, 1, 2) and values == [3, 1, 2] and values != (3, 1)
    assert list(values) == [3, 1, 2] and values[0] == 3 and values[1:] == (1, 2)
    assert hash(values) == hash((3, 1, 2)) and repr(values) == "(3, 1, 2)"
    assert np.asarray(values).dtype == np.int64
    with pytest.raises(ValueError):
        np.asarray(values)[0] = 5  # read-only


# ---- the rank test -----------------------------------------------------------------------


def test_exact_rank_distribution_matches_enumeration() -> None:
    for n, m in [(1, 1), (2, 3), (3, 3), (4, 2), (4, 5)]:
        counts = [0] * (n * m + 1)
        for chosen in itertools.combinations(range(n + m), n):
            others = [v for v in range(n + m) if v not in chosen]
            counts[sum(1 for x in chosen for y in others if x > y)] += 1
        total = sum(counts)
        expected = list(itertools.accumulate(c / total for c in counts))
        assert _u_cdf(n, m) == pytest.approx(expected)


def test_rank_test_direction_ties_and_limits() -> None:
    p, direction = rank_test(range(7), range(100, 107))
    assert direction == 1 and p == pytest.approx(min_p_value(7, 7))
    p, direction = rank_test([5] * 10, [7] * 10)  # ties only: normal approximation
    assert direction == 1 and p < 1e-4
    assert rank_test([3] * 5, [3] * 5) == (1.0, 0)
    rng = np.random.default_rng(0)
    a, b = list(rng.normal(0, 1, 40)), list(rng.normal(0.5, 1, 40))
    p_exact, _ = rank_test(a, b)  # 1,600 pairs, no ties: exact
    p_approx, _ = rank_test([*a, 0.25], [*b, 0.25])  # one tie: normal approximation
    assert p_exact < 0.05 and p_approx == pytest.approx(p_exact, rel=0.3)


# ---- the t-tests -------------------------------------------------------------------------


def test_t_tests_match_reference_values() -> None:
    # closed forms: df=1 is Cauchy, df=2 has p = 1 - |t| / sqrt(2 + t^2)
    for t in (0.1, 1.0, 3.0, 40.0):
        assert t_two_sided_p(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(t), rel=1e-9)
        assert t_two_sided_p(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959964, rel=1e-5)
    assert t_quantile(0.975, 9) == pytest.approx(2.262157, rel=1e-6)
    test = paired_t_test([1.0, 2.0, 3.0])
    assert test.estimate == 2.0 and test.df == 2
    assert test.p_value == pytest.approx(t_two_sided_p(2 / (1 / math.sqrt(3)), 2))
    w = welch_t_test([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0])
    assert w.estimate == pytest.approx(3.0)
    # scipy is in the dev extra: a missing one fails here rather than skipping unseen
    import scipy.stats

    ref = scipy.stats.ttest_ind([2.0, 4.0, 6.0, 8.0], [1.0, 2.0, 3.0], equal_var=False)
    assert w.p_value == pytest.approx(ref.pvalue, rel=1e-9)
