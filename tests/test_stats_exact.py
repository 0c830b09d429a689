"""Fast paths that must give numpy's numbers bit for bit: Summary.of's plain-Python
path for small integer samples (stats._small_summary vs stats._numpy_summary), and
the sorting trace.columns.unique."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from layerprof.stats import SMALL_SUMMARY, Summary, _numpy_summary, _pairwise_sum, _small_summary


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


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=200),
    st.sampled_from([np.int64, np.int8, np.uint8, np.bool_, np.float64]),
)
def test_trace_unique_is_np_unique(values: list[int], dtype: type) -> None:
    """trace.columns.unique sorts where np.unique would hash: the same array."""
    from layerprof.trace.columns import unique

    array = np.asarray(values, dtype=np.int64).astype(dtype)
    ours, theirs = unique(array), np.unique(array)
    assert ours.dtype == theirs.dtype and ours.tolist() == theirs.tolist()
