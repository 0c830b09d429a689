"""Flat tabular sinks of a Profile: CSV (and the rows behind the DataFrame)."""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING

from layerprof.units import NS_PER_MS, format_shapes

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile

_CSV_COLUMNS = (
    "path", "type", "parent", "depth", "calls", "total_ms", "self_ms", "share",
    "total_p90_ms", "total_std_ms", "device_total_ms", "device_self_ms",
    "backward_total_ms", "backward_self_ms", "params", "params_own",
    "input_shapes", "output_shapes", "flops", "output_bytes", "peak_bytes",
)  # fmt: skip


# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _name(text: str) -> str:
    """A name as a CSV cell: one a spreadsheet would run as a formula gets a leading
    ``'`` (OWASP's advice; the csv module adds the quotes the cell needs)."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def _ms(ns: float | None) -> str:
    return "" if ns is None else f"{ns / NS_PER_MS:.6f}"


def profile_to_csv(profile: Profile) -> str:
    """One line per layer; times per forward in ms (median over iterations). Names
    keep every character (newlines inside quotes), but for a ``'`` before a name
    that starts like a formula (``=``, ``+``, ``-``, ``@``, tab, CR)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_CSV_COLUMNS)
    for r in profile.rows():
        writer.writerow(
            [
                _name(r.path), _name(r.type), "" if r.parent is None else _name(r.parent),
                r.depth, f"{r.calls:g}",
                _ms(r.total_ns), _ms(r.self_ns), f"{r.share:.6f}",
                _ms(r.total.p90 if r.total else None), _ms(r.total.std if r.total else None),
                _ms(r.device_total_ns), _ms(r.device_self_ns),
                _ms(r.backward_total_ns), _ms(r.backward_self_ns),
                r.params, r.params_own,
                format_shapes(r.input_shapes), format_shapes(r.output_shapes),
                "" if r.flops is None else r.flops,
                "" if r.output_bytes is None else r.output_bytes,
                "" if r.peak_bytes is None else r.peak_bytes,
            ]
        )  # fmt: skip
    return out.getvalue()
