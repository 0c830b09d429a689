"""Exact ns from the JSON text, for epoch-µs floats that doubles cannot hold.

Kineto writes ``"ts": 1712195495519689.047``: 19 significant digits, where a
double keeps about 16, so decoding alone rounds the ns digits to 0.25 µs.
For a batch that has such values (``columns.ts_from_us`` flags them), the
batch's own text is read again: every event's ``ts`` is replaced by its
exact absolute time as an int of ns, which the collector then takes as is.

Kineto's form (``-?digits.ddd``, one ``ts`` key per event) is read in one
vectorized step after checking that the tokens line up with the events.
Anything else (other decimal counts, exponents, a ``"ts"`` key nested in
``args``) is matched event by event: the next few ``ts`` tokens in the text
are tried, and the one whose value equals the decoded double is taken.
"""

from __future__ import annotations

import operator
import re
from collections import deque
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from itertools import repeat
from typing import Any

import numpy as np

from layerprof.trace.columns import TS_MAX_NS, TS_MIN_NS, ts_from_us

_KINETO = re.compile(rb'"ts"\s*:\s*(-?\d+\.\d\d\d)(?![\d.eE])')
_ANY = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)')
_FRACTION = re.compile(rb'"ts"\s*:\s*-?\d+\.\d*[1-9]')
_NUMBER = {int, float}
_LOOKAHEAD = 8  # tokens tried per event when the text and the events do not line up
_NS_PER_US = Decimal(1000)


def has_fraction(text: Any) -> bool:
    """Whether some ``ts`` in the text has non-zero decimals."""
    return _FRACTION.search(text) is not None


def rewrite_exact(batch: list[Any], text: Any) -> None:
    """Replace each event's numeric ``ts`` (µs) by its exact time in ns (an int).

    A ``ts`` that is not a number stays as it is, and the collector, which
    takes ints as ns in this mode, leaves it out as unusable.
    """
    events = [e for e in batch if type(e) is dict]
    values = [e.get("ts") for e in events]
    if not set(map(type, values)) <= _NUMBER:  # some events lack a numeric ts
        events = [e for e, v in zip(events, values, strict=True) if type(v) in _NUMBER]
        values = [e["ts"] for e in events]
    if not events:
        return
    approx, _ = ts_from_us(values)
    exact = _kineto_form(text, approx)
    if exact is None:
        _match_one_by_one(events, text, approx.tolist())
        return
    # map() with a C setter: no Python bytecode per event.
    deque(map(operator.setitem, events, repeat("ts"), exact.tolist()), maxlen=0)


def _kineto_form(text: Any, approx: np.ndarray) -> np.ndarray | None:
    """All ns at once when every token is ``digits.ddd`` and lines up with the events."""
    tokens = _KINETO.findall(text)
    if len(tokens) != len(approx):
        return None
    exact = np.fromstring(b" ".join(tokens).replace(b".", b""), dtype=np.int64, sep=" ")
    # Lined up: each token is within a µs of the double decoded for the same event.
    if (
        len(exact) != len(approx)
        or not (np.abs(exact.astype(np.float64) - approx.astype(np.float64)) <= 1000).all()
    ):
        return None
    return exact


def _match_one_by_one(events: list[dict[str, Any]], text: Any, approx: list[int]) -> None:
    tokens = _ANY.findall(text)
    j = 0
    for e, fallback in zip(events, approx, strict=True):
        value = e["ts"]
        found = None
        for k in range(j, min(j + _LOOKAHEAD, len(tokens))):
            if float(tokens[k]) == value:
                found = _exact_ns(tokens[k])
                j = k + 1
                break
        # No token for it: the double's own ns (it was already the best guess).
        e["ts"] = found if found is not None else (fallback if fallback != _INVALID else None)


_INVALID = int(np.iinfo(np.int64).min)


def _exact_ns(token: bytes) -> int | None:
    try:
        us = Decimal(token.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        return None
    if not us.is_finite() or not TS_MIN_NS / 1000 <= us < TS_MAX_NS / 1000:
        return None
    return int((us * _NS_PER_US).to_integral_value(rounding=ROUND_HALF_EVEN))
