"""The codec's shared pieces: a typed reader that names the field in every error,
summaries in ms/µs, flat section rows (``*_ns`` <-> ``*_ms``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields, is_dataclass
from typing import Any, TypeVar

from layerprof.errors import ProfileFormatError
from layerprof.pivot.notes import SAVED, Note
from layerprof.stats import Series, Summary
from layerprof.units import NS_PER_MS, NS_PER_US, ns_from_ms

T = TypeVar("T")
#: The longest time in ms a list of durations may hold: within int64 ns.
_MAX_MS = 2.0**62 / NS_PER_MS
#: The largest magnitude a time in a summary may have, in ns (int64, with room).
_MAX_NS = 2.0**62


class Fields:
    """Typed access to one JSON object, naming the field in every error."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise ProfileFormatError(f"{where} is not an object")
        self.data = data
        self.where = where

    def _fail(self, key: str, what: str) -> ProfileFormatError:
        return ProfileFormatError(f"{self.where}.{key}: {what}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise self._fail(key, f"expected a string, found {kind(value)}")
        return value

    def opt_text(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.text(key)

    def number(self, key: str, default: float | None = None) -> float:
        value = self.data.get(key, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise self._fail(key, f"expected a finite number, found {kind(value)}")
        return float(value)

    def opt_number(self, key: str) -> float | None:
        return None if self.data.get(key) is None else self.number(key)

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.number(key, default)
        if value != int(value) or abs(value) > 2**62:
            raise self._fail(key, f"expected an integer, found {value!r}")
        return int(value)

    def opt_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, f"expected true or false, found {kind(value)}")
        return value

    def ns(self, key: str) -> int:
        """A required ``*_ms`` number as integer ns."""
        number = self.number(key)
        try:
            value = ns_from_ms(number)
        except ValueError:
            raise self._fail(key, f"{number!r} ms is not a usable time") from None
        assert value is not None
        return value

    def ns_float(self, key: str, factor: float = NS_PER_MS) -> float:
        """A required time (``*_ms``, or ``*_us`` with its factor) as float ns, within
        int64 ns: an operator's 1e308 ms summed to infinity in the diff."""
        number = self.number(key)
        if not abs(number * factor) <= _MAX_NS:
            raise self._fail(key, f"{number!r} is not a usable time")
        return number * factor

    def opt_ns_float(self, key: str, factor: float = NS_PER_MS) -> float | None:
        return None if self.data.get(key) is None else self.ns_float(key, factor)

    def opt_ns(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.ns(key)

    def duration(self, key: str) -> int:
        """A required ``*_ms`` time that cannot be negative (a duration), as integer ns."""
        value = self.ns(key)
        if value < 0:
            raise self._fail(key, f"expected a time >= 0, found {self.data[key]!r}")
        return value

    def opt_duration(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.duration(key)

    def count(self, key: str, default: int | None = None) -> int:
        """An integer >= 0 (calls, forwards, an index)."""
        value = self.integer(key, default)
        if value < 0:
            raise self._fail(key, f"expected a count >= 0, found {value}")
        return value

    def opt_count(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.count(key)

    def durations(self, key: str, *, required: bool = False) -> tuple[int, ...]:
        """A list of ``*_ms`` times that cannot be negative, as integer ns (each within
        int64 ns: at most about 146 years)."""
        values = self.items(key, required=required)
        if not all(
            isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= _MAX_MS
            for v in values
        ):
            raise self._fail(key, "expected a list of times >= 0 (ms)")
        return tuple(round(v * NS_PER_MS) for v in values)

    def within(self, key: str, low: float, high: float) -> float:
        """A number in ``[low, high]``: the domain of a ratio, so that no later
        arithmetic on it (logarithms, ``expm1``) can overflow."""
        value = self.number(key)
        if not low <= value <= high:
            raise self._fail(key, f"expected a number from {low:g} to {high:g}, found {value!r}")
        return value

    def items(self, key: str, *, required: bool = False) -> list[Any]:
        value = self.data.get(key)
        if value is None and not required:
            return []
        if not isinstance(value, list):
            raise self._fail(key, f"expected a list, found {kind(value)}")
        return value

    def obj(self, key: str) -> Fields | None:
        value = self.data.get(key)
        return None if value is None else Fields(value, f"{self.where}.{key}")

    def objects(self, key: str, *, required: bool = False) -> list[Fields]:
        return [
            Fields(item, f"{self.where}.{key}[{i}]")
            for i, item in enumerate(self.items(key, required=required))
        ]

    def shapes(self, key: str) -> Any:
        value = self.data.get(key)
        if not _json_tree(value):
            raise self._fail(key, "expected nested lists of shapes")
        return value


def kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    return f"{type(value).__name__} {str(value)[:40]!r}"


def _json_tree(value: Any, depth: int = 0) -> bool:
    """Shapes as the hooks record them: ints, strings, None, lists and dicts of them."""
    if depth > 32:
        return False
    if value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)):
        return True
    if isinstance(value, list):
        return all(_json_tree(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_tree(v, depth + 1) for k, v in value.items())
    return False


def required(f: Fields, key: str) -> Fields:
    found = f.obj(key)
    if found is None:
        raise ProfileFormatError(f"{f.where}.{key}: missing")
    return found


def saved_notes(f: Fields, key: str = "notes") -> tuple[Note, ...]:
    """Notes read back: the documents keep only their text, so each is of kind ``saved``."""
    return tuple(Note(SAVED, text) for text in strings(f, key))


def strings(f: Fields, key: str) -> list[str]:
    values = f.items(key)
    if not all(isinstance(v, str) for v in values):
        raise ProfileFormatError(f"{f.where}.{key}: expected a list of strings")
    return values


def read_summary(f: Fields, factor: float = NS_PER_MS, *, signed: bool = False) -> Summary:
    """A summary written in ms (or µs), back in ns; rounded to 1e-3 ns so that the
    float round trip (ns -> ms -> ns) gives back the numbers that were written.

    Each time must lie within int64 ns (a median of 1e308 ms made every diff of the
    file raise OverflowError) and, unless ``signed`` (a launch delay may be negative),
    be >= 0: a negative latency read as "faster -105 %" and passed the gate. The
    spreads are never negative and ``n`` counts at least one sample."""

    def value(key: str, *, spread: bool = False) -> float:
        number = f.number(key)
        scaled = number * factor
        if not abs(scaled) <= _MAX_NS:
            raise f._fail(key, f"{number!r} is not a usable time")
        if scaled < 0 and (spread or not signed):
            raise f._fail(key, f"expected a time >= 0, found {number!r}")
        return round(scaled, 3)

    def opt(key: str, *, spread: bool = False) -> float | None:
        return None if f.opt_number(key) is None else value(key, spread=spread)

    n = f.integer("n")
    if n < 1:
        raise f._fail("n", f"expected a count of samples >= 1, found {n}")
    return Summary(
        median=value("median"),
        mean=value("mean"),
        p90=value("p90"),
        p99=value("p99"),
        min=value("min"),
        max=value("max"),
        std=value("std", spread=True),
        n=n,
        mad=opt("mad", spread=True),
        ci_low=opt("ci_low"),
        ci_high=opt("ci_high"),
    )


def read_series(
    samples: Fields | None,
    series: Fields | None,
    key: str,
    factor: float = NS_PER_MS,
    *,
    signed: bool = False,
) -> Series | None:
    """A Series from kept samples (preferred) or from its summary; None when neither is
    there. Times are >= 0 unless ``signed``."""
    if samples is not None and samples.has(key):
        values = samples.items(key)
        low = -_MAX_NS if signed else 0.0
        if not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and low <= v * factor < 2.0**62
            for v in values
        ):
            what = "numbers" if signed else "numbers >= 0"
            raise ProfileFormatError(f"{samples.where}.{key}: expected a list of {what}")
        return Series([v * factor for v in values])
    summary = series.obj(key) if series is not None else None
    if summary is None:
        return None
    return Series(summary=read_summary(summary, factor, signed=signed))


def summary_dict(s: Summary, factor: float = 1 / NS_PER_MS) -> dict[str, float | int]:
    return s.scaled(factor)


def summary_us(s: Summary | None) -> dict[str, float | int] | None:
    return None if s is None else s.scaled(1 / NS_PER_US)


def asdict_ms(obj: Any, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """A flat section row: ``*_ns`` fields become ``*_ms`` (µs for launch summaries);
    ``skip`` names fields left out (nested series a caller writes its own way).

    Rows are read field by field, without ``dataclasses.asdict``: its recursive deep
    copy took most of the time of writing a trace's thousands of collective rows.
    A nested value (rare) still becomes what ``asdict`` would give.
    """
    out: dict[str, Any] = {}
    for name, key_ms in _row_keys(type(obj)):
        if name in skip:
            continue
        value = getattr(obj, name)
        if key_ms is not None and (value is None or isinstance(value, (int, float))):
            out[key_ms] = None if value is None else value / NS_PER_MS
        elif value is None or isinstance(value, (str, int, float)):
            out[name] = value
        else:
            out[name] = _plain(value)
    return out


_ROW_KEYS: dict[type, tuple[tuple[str, str | None], ...]] = {}


def _row_keys(cls: type) -> tuple[tuple[str, str | None], ...]:
    """Each field's name, and its ``*_ms`` key when it is a ``*_ns`` field (cached per class)."""
    found = _ROW_KEYS.get(cls)
    if found is None:
        found = tuple(
            (f.name, f.name[:-3] + "_ms" if f.name.endswith("_ns") else None) for f in fields(cls)
        )
        _ROW_KEYS[cls] = found
    return found


def _plain(value: Any) -> Any:
    """A nested value as ``dataclasses.asdict`` writes it."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def read_row(cls: type[T], f: Fields) -> T:
    """A flat section row written by :func:`asdict_ms`: ``*_ms`` back to ``*_ns``."""
    values: dict[str, Any] = {}
    for name, fld in cls.__dataclass_fields__.items():  # type: ignore[attr-defined]
        typ = str(fld.type)
        key = name[:-3] + "_ms" if name.endswith("_ns") else name
        optional = "None" in typ
        if name.endswith("_ns"):
            values[name] = f.opt_ns(key) if optional else f.ns(key)
        elif typ.startswith("int"):
            values[name] = f.opt_integer(key) if optional else f.integer(key)
        elif typ.startswith("float"):
            values[name] = f.opt_number(key) if optional else f.number(key)
        elif typ.startswith("str"):
            values[name] = f.opt_text(key) if optional else f.text(key)
        else:  # pragma: no cover - every section row is flat
            values[name] = f.data.get(key)
    return cls(**values)


def first_rows(rows: Sequence[T], top: int | None) -> Sequence[T]:
    return rows if top is None else rows[: max(top, 0)]
