"""Units: one time unit inside (integer nanoseconds), converted only at the edges.

Every module that turns nanoseconds into the milliseconds of JSON and CSV, or
back, uses these; display formatting for people lives in ``layerprof.render.units``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def ms(ns: float | None) -> float | None:
    """Nanoseconds -> milliseconds (None stays None)."""
    return None if ns is None else ns / NS_PER_MS


def us(ns: float | None) -> float | None:
    """Nanoseconds -> microseconds (None stays None)."""
    return None if ns is None else ns / NS_PER_US


def ms_list(values: Iterable[float] | None) -> list[float] | None:
    return None if values is None else [v / NS_PER_MS for v in values]


def ns_from_ms(value: Any) -> int | None:
    """Milliseconds (a JSON number) -> integer nanoseconds; None stays None.

    Raises ``TypeError``/``ValueError`` for anything that is not a finite number,
    so a malformed file fails where it is read, not where the number is used.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number of milliseconds")
    number = float(value) * NS_PER_MS
    if number != number or abs(number) > 2.0**62:
        raise ValueError(f"{value!r} ms is not a usable time")
    return round(number)


def ns_from_us(value: Any) -> int | None:
    """Microseconds -> integer nanoseconds, with the checks of :func:`ns_from_ms`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number of microseconds")
    return ns_from_ms(float(value) / 1000)
