"""Read a rendered number back, independently of the formatter that wrote it.

A test that builds its expected text with the formatter under test cannot
fail when that formatter is wrong. These helpers parse what a reader sees
(``12,345``, ``+1.23``, ``12.3%``, ``1.5 KiB``, ``1x3, 2``) and compare it
with the typed value to the precision the text shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_NUMBER = re.compile(r"^([+-]?)([\d,]*\.?\d+)\s*(%|B|KiB|MiB|GiB|TiB)?$")


def read(text: str) -> tuple[float, float] | None:
    """``(value, half a unit in the last place shown)``, or None for an empty cell (``-``)."""
    text = text.strip().replace("\u2212", "-")
    if text in ("", "-", "\u2014"):
        return None
    m = _NUMBER.match(text.replace(" %", "%"))
    assert m, f"not a number as shown: {text!r}"
    sign, digits, unit = m.groups()
    value = float(digits.replace(",", "")) * (-1 if sign == "-" else 1)
    places = len(digits.split(".")[1]) if "." in digits else 0
    half = 0.5 * 10**-places
    scale = _BYTES.get(unit or "", 1)
    return value * scale, half * scale


def assert_shows(texts: Sequence[str], values: Sequence[float | None], *, per: float = 1.0) -> None:
    """Each text reads as ``value / per`` to its shown precision (``per=1e6``: ns shown in ms)."""
    assert len(texts) == len(values)
    for text, value in zip(texts, values, strict=True):
        got = read(text)
        if value is None:
            assert got is None, f"{text!r} shown for a missing value"
            continue
        assert got is not None, f"{text!r} shown for {value}"
        shown, half = got
        assert abs(shown - value / per) <= half * (1 + 1e-9) + 1e-12, (text, value)


def assert_percent(texts: Sequence[str], fractions: Sequence[float | None]) -> None:
    """Each text is a percentage (``12.3%``) of the fraction given."""
    assert all(t.strip() in ("-", "") or t.strip().endswith("%") for t in texts), texts
    assert_shows(texts, [None if f is None else f * 100 for f in fractions])


def read_shapes(text: str) -> list[list[int]]:
    """``1x3, 2`` -> ``[[1, 3], [2]]``."""
    if text.strip() in ("", "-"):
        return []
    return [[int(d) for d in part.split("x")] for part in text.split(", ")]
