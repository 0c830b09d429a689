"""Units and formatting: one time unit inside (integer nanoseconds), converted only at the edges.

The one home for turning numbers into JSON/CSV milliseconds (and back) and
into text for people (one unit per table, a value in its best unit, counts,
bytes, shapes). Every module that shows or stores a number uses these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
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


# ---- text for people ---------------------------------------------------------------


@dataclass(frozen=True)
class TimeUnit:
    name: str
    ns: int
    decimals: int

    def fmt(self, ns: float | None) -> str:
        if ns is None:
            return "-"
        return f"{ns / self.ns:,.{self.decimals}f}"


US = TimeUnit("µs", 1_000, 1)
MS = TimeUnit("ms", 1_000_000, 3)
S = TimeUnit("s", 1_000_000_000, 3)


def unit_for(largest_ns: float) -> TimeUnit:
    """µs below 1 ms, ms below 100 s, else s."""
    if largest_ns < 1_000_000:
        return US
    if largest_ns < 100_000_000_000:
        return MS
    return S


def human_time(ns: float | None) -> str:
    """One value in its own best unit, e.g. ``12.3 µs`` or ``4.567 ms``."""
    if ns is None:
        return "-"
    unit = unit_for(abs(ns))
    return f"{unit.fmt(ns)} {unit.name}"


def human_count(n: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}{suffix}"
    return f"{n:g}"


def human_bytes(n: float) -> str:
    """Binary units: ``1.5 MiB``."""
    for size, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(n) >= size:
            return f"{n / size:.1f} {suffix}"
    return f"{n:g} B"


def fmt_calls(n: float) -> str:
    """A call count in full (``12,345``, never ``1.23e+04``); a mean over
    iterations that is not whole keeps two decimals (``2.50``)."""
    return f"{round(n):,}" if float(n).is_integer() else f"{n:,.2f}"


def format_shapes(tree: Any) -> str:
    """Compact text: ``[1, 3, 224, 224]`` -> ``1x3x224x224``; lists joined by commas."""
    if tree is None:
        return ""
    if isinstance(tree, list) and all(isinstance(d, int) for d in tree):
        return "x".join(str(d) for d in tree) if tree else "scalar"
    if isinstance(tree, list):
        return ", ".join(format_shapes(t) for t in tree if t is not None)
    if isinstance(tree, dict):
        return ", ".join(f"{k}={format_shapes(v)}" for k, v in tree.items() if v is not None)
    return str(tree)


def fmt_ms(ns: float | None) -> str:
    """Milliseconds with three significant decimals' worth of precision, '-' for none."""
    if ns is None:
        return "-"
    ms = ns / NS_PER_MS
    if 0 < abs(ms) < 0.01:
        return f"{ms:.4f}"
    if abs(ms) >= 100:
        return f"{ms:.1f}"
    if abs(ms) >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def fmt_delta_ms(ns: float) -> str:
    return ("+" if ns > 0 else "") + fmt_ms(ns)


_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_SI_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]{1,3})?)\s*([kmgtp]?)\s*$", re.I)


def parse_si(text: str) -> float:
    """``"2.5T"`` -> 2.5e12 (k, M, G, T, P are powers of 1000; a bare number as is)."""
    m = _SI_RATE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a number with an optional k/M/G/T/P suffix")
    value = float(m.group(1)) * _SI[m.group(2).lower()]
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text!r} is not a positive rate")
    return value


def human_si(value: float, unit: str) -> str:
    """``85.3e9, "FLOP/s"`` -> ``85.3 GFLOP/s`` (decimal prefixes, three significant digits)."""
    for size, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def fmt_share(fraction: float | None) -> str:
    """A fraction as a percentage with one decimal (``0.1234`` -> ``12.3%``), '-' for none."""
    return "-" if fraction is None else f"{100 * fraction:.1f}%"


def fmt_gb_s(gb_per_s: float | None) -> str:
    """A bandwidth in GB/s (10^9 bytes per second, i.e. bytes per ns) with two decimals,
    '-' for none (no byte count, or a zero duration)."""
    return "-" if gb_per_s is None else f"{gb_per_s:,.2f}"


def fmt_num(x: float) -> str:
    """A number as short as it reads (``5.0`` -> ``5``, ``0.5`` -> ``0.5``): percentages
    and thresholds in sentences."""
    return f"{x:g}"
