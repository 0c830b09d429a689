"""Time units chosen for readability, applied once per table."""

from __future__ import annotations

from dataclasses import dataclass


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
