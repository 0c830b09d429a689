"""A finding: what a rule saw, with its numbers, and what to try.

Its own module so that every findings module (``diagnose``, ``distributed``)
can build findings and ``diagnose`` can still call them all without an
import cycle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["high", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    title: str
    detail: str
    hint: str = ""
    layer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
