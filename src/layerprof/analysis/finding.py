"""One finding: what a rule saw, with the numbers behind it, and what to try.

Its own module so that every findings module (``diagnose``, ``passes``,
``distributed``) can build findings and ``diagnose`` can still call them all
without an import cycle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["high", "warning", "info"]
ORDER = {"high": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Finding:
    """``title`` says what; ``detail`` the numbers a reader can check; ``hint`` what to
    try; ``layer`` the module path it is about (None: the whole model or run)."""

    severity: Severity
    title: str
    detail: str
    hint: str = ""
    layer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
