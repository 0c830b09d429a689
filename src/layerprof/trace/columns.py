"""Values from decoded JSON -> checked numpy columns (times in integer ns).

A trace is hostile input: any field may hold a string, a list, a dict, a
bool, null, NaN or 1e300. Only ints and floats count as numbers (a bool is
not one; a numeric string is read as its number). What is not usable
becomes a marker (``INVALID`` for times, -1 for ids) and is counted, so the
report can say how much it left out instead of raising inside numpy.

Times: a double holds any µs value below ``EXACT_LIMIT_US`` (2^43 µs, 102
days) to better than 0.5 ns, so splitting it into whole µs and a fraction
recovers the ns digits exactly. Epoch-µs floats (1.7e15) are above that:
their ns digits come from the JSON text instead (see ``timestamps``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

INVALID = np.iinfo(np.int64).min  # an unusable time
# Times outside [-2^60, 2^62) ns (year 2116 in epoch ns) and durations of
# 2^53 ns (104 days) or more are not real: refusing them keeps every
# start + duration and every difference of two times inside int64.
TS_MIN_NS = -(1 << 60)
TS_MAX_NS = 1 << 62
DUR_MAX_NS = 1 << 53
EXACT_LIMIT_US = 2.0**43

_NUMBER = {int, float}
_NUMBER_OR_NONE = {int, float, type(None)}
_INT_OR_NONE = {int, type(None)}
_EXACT_INT = 1 << 53
# The float bounds below as bounds on whole µs: an int is at or above a double
# exactly when it is at or above its ceiling (all of them lie within 2^53).
_TS_MIN_US = math.ceil(TS_MIN_NS / 1000)
_TS_MAX_US = math.ceil(TS_MAX_NS / 1000)
_DUR_MAX_US = math.ceil(DUR_MAX_NS / 1000)


def unique(values: Any) -> Any:
    """``np.unique(values)`` (sorted distinct values) of an integer column, by sorting.

    numpy >= 2.3 finds the distinct values of an array with a hash table when
    asked for nothing else: 5-15x slower than sorting on int64 columns (thread
    ids, times; ~30 ms of analyze on HTA's 26 MB trace). Same array out.
    """
    values = np.asarray(values).ravel()
    if values.dtype.kind not in "iub":
        return np.unique(values)
    s = np.sort(values)
    keep = np.empty(len(s), dtype=bool)
    keep[:1] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def unset(n: int) -> I64:
    """``n`` times -1 in no memory: a read-only view of one value, for a per-span column
    that holds nothing in this trace (the parents of a kind it has no span of, the
    layer of every op where it has no layer spans; ~100 MB each in a 4 GB trace)."""
    column: I64 = np.broadcast_to(np.int64(-1), (n,))
    return column


def floats(values: list[Any], kinds: set[type] | None = None) -> F64:
    """A float64 column; anything but an int, a float or a numeric string becomes NaN.
    ``kinds``: the values' types when the caller already has them."""
    if kinds is None:
        kinds = set(map(type, values))
    if kinds <= _NUMBER_OR_NONE:
        if not kinds <= _NUMBER:
            values = [math.nan if v is None else v for v in values]
        try:
            return np.asarray(values, dtype=np.float64)
        except OverflowError:  # an int beyond float range
            pass
    return np.asarray([_number(v) for v in values], dtype=np.float64)


def _number(value: Any) -> float:
    if type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return math.nan
    try:
        return float(value)
    except (ValueError, OverflowError):
        return math.nan


def ints(values: list[Any], missing: int = -1) -> tuple[I64, int]:
    """An int64 column (``missing`` where absent or unusable) and how many were unusable.

    Unusable: present but not an integral number that fits int64 (a list, a
    string of letters, a bool, 2.5, 1e300).
    """
    kinds = set(map(type, values))
    if kinds <= {int}:
        try:
            return np.asarray(values, dtype=np.int64), 0
        except OverflowError:
            pass
    elif kinds <= _INT_OR_NONE:
        exact = _ints_or_missing(values, kinds, missing)
        if exact is not None:
            return exact, 0
    f = floats(values, kinds)
    ok = np.isfinite(f) & (np.abs(f) < 2.0**62)
    ok[ok] = f[ok] == np.floor(f[ok])
    out = np.full(len(f), missing, dtype=np.int64)
    out[ok] = f[ok].astype(np.int64)
    absent = values.count(None)
    return out, int(len(f) - ok.sum()) - absent


def _ints_or_missing(values: list[Any], kinds: set[type], missing: int) -> I64 | None:
    """``ints`` of ints and Nones without the float detour: the same column where every
    int lies within +-2^53 (a double holds it exactly); None otherwise."""
    if kinds == {type(None)}:
        return np.full(len(values), missing, dtype=np.int64)
    try:
        out = np.asarray([missing if v is None else v for v in values], dtype=np.int64)
    except OverflowError:
        return None
    if out.min() < -_EXACT_INT or out.max() > _EXACT_INT:
        return None
    return out


def ts_from_us(values: list[Any]) -> tuple[I64, bool]:
    """Absolute ns of µs times (``INVALID`` where unusable), and whether any lost digits.

    The flag is set when a value at or above ``EXACT_LIMIT_US`` has a
    fraction: its double no longer holds the ns digits the text had.
    """
    kinds = set(map(type, values))
    if kinds <= {int}:  # whole µs (most traces): the float steps below give us * 1000
        us = _int_column(values)
        if us is not None:
            ok = (us >= _TS_MIN_US) & (us < _TS_MAX_US)
            return np.where(ok, us * 1000, INVALID), False
    f = floats(values, kinds)
    out = np.full(len(f), INVALID, dtype=np.int64)
    ok = np.isfinite(f) & (f >= TS_MIN_NS / 1000) & (f < TS_MAX_NS / 1000)
    v = f[ok]
    whole = np.floor(v)
    out[ok] = whole.astype(np.int64) * 1000 + np.rint((v - whole) * 1000).astype(np.int64)
    lossy = bool(((np.abs(v) >= EXACT_LIMIT_US) & (v != whole)).any())
    return out, lossy


def ts_from_ns(values: list[Any]) -> I64:
    """Absolute ns already worked out exactly (ints); anything else is ``INVALID``."""
    if set(map(type, values)) <= {int}:
        try:
            out = np.asarray(values, dtype=np.int64)
        except OverflowError:
            out = np.asarray([_ns_or_invalid(v) for v in values], dtype=np.int64)
    else:
        out = np.asarray([_ns_or_invalid(v) for v in values], dtype=np.int64)
    out[(out < TS_MIN_NS) | (out >= TS_MAX_NS)] = INVALID
    return out


def _ns_or_invalid(value: Any) -> int:
    if type(value) is int and TS_MIN_NS <= value < TS_MAX_NS:
        return value
    return int(INVALID)


def dur_from_us(values: list[Any]) -> tuple[I64, int]:
    """Durations in ns (0 where absent or unusable) and how many were unusable.

    Unusable: not a number, negative, NaN/inf, or 2^53 ns (104 days) and more.
    """
    kinds = set(map(type, values))
    if kinds <= {int}:  # whole µs: as below, without the float steps
        us = _int_column(values)
        if us is not None:
            ok = (us >= 0) & (us < _DUR_MAX_US)
            return np.where(ok, us * 1000, 0), int(len(us) - ok.sum())
    f = floats(values, kinds)
    ok = np.isfinite(f) & (f >= 0) & (f < DUR_MAX_NS / 1000)
    v = np.where(ok, f, 0.0)
    whole = np.floor(v)
    out = whole.astype(np.int64) * 1000 + np.rint((v - whole) * 1000).astype(np.int64)
    return out, int(len(f) - ok.sum()) - values.count(None)


def _int_column(values: list[Any]) -> I64 | None:
    """The ints as int64, or None when one does not fit."""
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        return None


def epoch_scale(ns: I64) -> int:
    """How many usable times are at or above ``EXACT_LIMIT_US`` (epoch-scale)."""
    limit = int(EXACT_LIMIT_US) * 1000
    return int(((ns >= limit) | ((ns <= -limit) & (ns != INVALID))).sum())
