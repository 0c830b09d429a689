"""The change-point primitives against brute force and known answers: ranks, the scan,
the permutation p-value's level, the Hodges-Lehmann interval, Benjamini-Hochberg."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from layerprof.history import changepoints as cp


def test_ranks_average_ties_as_scipy_does() -> None:
    values = np.array([3.0, 1.0, 3.0, 2.0, 3.0, 0.5])
    assert cp.ranks(values).tolist() == [5.0, 2.0, 5.0, 3.0, 5.0, 1.0]


def test_the_scan_finds_a_clean_step_and_its_statistic() -> None:
    values = np.array([1.0] * 10 + [2.0] * 10) + np.arange(20) * 1e-6  # no ties
    stat, at = cp.scan(values, margin=3)
    assert at == 10
    # the first 10 hold ranks 1..10: Z = (2*55 - 10*21) / sqrt(10*10*21/3)
    assert stat == pytest.approx(abs(110 - 210) / math.sqrt(700))


def test_the_p_value_holds_its_level_on_series_without_change() -> None:
    """Random orders are the null exactly: the share at or below each level is at most
    that level (4,000 series, 3 standard errors), and not far below it (the statistic
    is discrete: ties with the observed value count against it)."""
    detection = cp.Detection()
    rng = np.random.default_rng(5)
    ps = np.array([cp.whole_p(rng.permutation(30).astype(float), detection) for _ in range(4000)])
    for level in (0.01, 0.05, 0.2):
        se = math.sqrt(level * (1 - level) / len(ps))
        assert 0.6 * level < np.mean(ps <= level) < level + 3 * se, level


def test_the_union_bound_resolves_what_the_permutations_cannot() -> None:
    """A perfect split of 40 runs is rarer than 1 in 50,000 orders: its p-value comes
    from the bound, below the permutation floor, and above the exact probability."""
    values = np.arange(40, dtype=float)
    values[20:] += 100
    p = cp.whole_p(values, cp.Detection())
    exact_one_split = 2 / math.comb(40, 20)  # this split, either direction
    assert exact_one_split < p < 1 / 50_001


def test_the_hodges_lehmann_interval_is_the_order_statistics_of_the_differences() -> None:
    before = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    after = before + 10.0
    shift, low, high = cp.shift_interval(before, after, 0.95)
    diffs = sorted(a - b for a, b in itertools.product(after, before))
    assert (
        shift == 10.0 and low == diffs[2] and high == diffs[-3]
    )  # C = floor(12.5 - 1.96*4.79) = 3


def test_benjamini_hochberg_rejects_up_to_the_largest_passing_rank() -> None:
    ps = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216]
    assert cp.fdr_threshold(ps, 0.05) == 0.008  # 0.039 > 0.05 * 3 / 10
    assert cp.fdr_threshold(ps, 0.2) == 0.074  # 0.205 > 0.2 * 8 / 10, and 9, 10 fail too
    assert cp.fdr_threshold(ps, 0.25) == 0.216  # 0.216 <= 0.25: all ten
    assert cp.fdr_threshold([0.5, 0.9], 0.05) == -1.0


def test_a_step_beside_a_drift_high_run_is_located_by_the_medians() -> None:
    """Runs 38 and 39 drift up, nearer the old level than the new: the scan peaks at
    38 (a perfect split with more runs after it), the medians put the change at 40."""
    rng = np.random.default_rng(0)
    values = rng.normal(0, 0.05, 50)
    values[40:] += 0.4
    values[38:40] += 0.15
    assert cp.scan(values, 3)[1] == 38
    assert cp.locate(values, 3) == 40


def test_a_change_needs_confirm_runs_on_each_side() -> None:
    values = np.zeros(20)
    values[-2:] = 5.0  # two runs at a new level
    assert cp.segment(values, 0.3, cp.Detection(confirm=3)) == []
    (split,) = cp.segment(values, 0.3, cp.Detection(confirm=2))
    assert (split.index, split.before, split.after) == (18, 18, 2)
    with pytest.raises(ValueError, match="confirm >= 2"):
        cp.Detection(confirm=1)
