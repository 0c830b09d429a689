"""How load errors word what went wrong: an exception in one line, a value's type with its article."""

from __future__ import annotations

from typing import Any


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def raised(exc: BaseException) -> str:
    """``ValueError: bad depth``, ``SystemExit: 3``, ``SystemExit`` (no message)."""
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text.splitlines()[0]}" if text else name


def type_name(obj: Any) -> str:
    if obj is None:
        return "None"
    name = type(obj).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name}"
