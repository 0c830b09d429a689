"""Fast paths that must give what the slower code gives, bit for bit: the sorting
trace.columns.unique, and int columns read without the float64 detour
(trace.columns.ints, ts_from_us, dur_from_us). Summary.of's plain-Python path is
tested with the rest of stats.py in tests/test_stats.py."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st


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


def _float_path_ints(values: list[Any], missing: int = -1) -> tuple[list[int], int]:
    """columns.ints as it was: ints as they are, any other column through float64."""
    from layerprof.trace.columns import floats

    if all(type(v) is int and -(2**63) <= v < 2**63 for v in values):
        return list(values), 0
    f = floats(values)
    ok = np.isfinite(f) & (np.abs(f) < 2.0**62)
    ok[ok] = f[ok] == np.floor(f[ok])
    out = np.full(len(f), missing, dtype=np.int64)
    out[ok] = f[ok].astype(np.int64)
    return out.tolist(), int(len(f) - ok.sum()) - values.count(None)


def _float_path_times(values: list[Any]) -> tuple[list[int], bool, list[int], int]:
    """columns.ts_from_us and dur_from_us as they were: every column through float64."""
    from layerprof.trace.columns import (
        DUR_MAX_NS,
        EXACT_LIMIT_US,
        INVALID,
        TS_MAX_NS,
        TS_MIN_NS,
        floats,
    )

    f = floats(values)
    ts = np.full(len(f), INVALID, dtype=np.int64)
    ok = np.isfinite(f) & (f >= TS_MIN_NS / 1000) & (f < TS_MAX_NS / 1000)
    v = f[ok]
    whole = np.floor(v)
    ts[ok] = whole.astype(np.int64) * 1000 + np.rint((v - whole) * 1000).astype(np.int64)
    lossy = bool(((np.abs(v) >= EXACT_LIMIT_US) & (v != whole)).any())
    ok = np.isfinite(f) & (f >= 0) & (f < DUR_MAX_NS / 1000)
    v = np.where(ok, f, 0.0)
    whole = np.floor(v)
    dur = whole.astype(np.int64) * 1000 + np.rint((v - whole) * 1000).astype(np.int64)
    return ts.tolist(), lossy, dur.tolist(), int(len(f) - ok.sum()) - values.count(None)


# whole µs near every bound the columns check (ts range, 104-day durations, 2^53, int64)
_EDGES = [0, 1, -1, 2**43, 2**53, 2**53 + 1, -(2**53) - 1, 2**62, 2**63 - 1, -(2**63),
          9007199254740, 9007199254741, 1152921504606846, 1152921504606847,
          -1152921504606847, -1152921504606848, 4611686018427387, 4611686018427388]  # fmt: skip
whole_us = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=0, max_value=10**12),
    st.sampled_from(_EDGES).flatmap(lambda e: st.integers(e - 2, e + 2)),
)


@settings(max_examples=600, deadline=None, derandomize=True)
@given(st.lists(st.one_of(whole_us, st.none()), max_size=40), st.sampled_from([-1, 0]))
def test_int_columns_skip_the_float_detour(values: list[Any], missing: int) -> None:
    """Columns of ints (and Nones) read as if each went through a double, as before."""
    from layerprof.trace.columns import dur_from_us, ints, ts_from_us

    out, bad = ints(values, missing)
    assert (out.tolist(), bad) == _float_path_ints(values, missing)
    whole = [v for v in values if v is not None and -(2**63) <= v < 2**63]
    ts, lossy = ts_from_us(whole)
    dur, bad_durations = dur_from_us(whole)
    assert (ts.tolist(), lossy, dur.tolist(), bad_durations) == _float_path_times(whole)
