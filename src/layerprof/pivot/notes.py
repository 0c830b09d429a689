"""A note: one fact the user should read next to the numbers, as a typed value.

Profiles and runs carry notes ("FLOPs not counted: ...", "the steps cover 40%
of the main thread", ...). Each is a :class:`Note` with a stable ``kind`` that
code and tests match on, the ``data`` its text states (counts, shares, paths),
and the ``text`` the renderers print as it is. This module imports nothing of
layerprof.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["SAVED", "Note", "texts"]

#: The kind of a note read back from a saved document: the JSON keeps only the text.
SAVED = "saved"

_NO_DATA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Note:
    """One note: ``kind`` (a short stable identifier such as ``"flops-not-counted"``,
    ``"torchscript-submodule"``, ``"wrapper"``, ``"recompile"``), ``text`` (what the
    renderers print, unchanged) and ``data`` (the numbers and names the text states,
    for code and tests; read-only).

    The JSON documents store notes as their text only (the schemas predate kinds),
    so a profile or run loaded from a file has ``Note(kind="saved", text=...)`` with
    empty ``data``: the codec cannot recover the kind from the prose.
    """

    kind: str
    text: str
    data: Mapping[str, Any] = field(default_factory=lambda: _NO_DATA)

    def __post_init__(self) -> None:
        # A read-only copy: a frozen note must not change through the caller's dict.
        if not isinstance(self.data, MappingProxyType):
            object.__setattr__(self, "data", MappingProxyType(dict(self.data)))

    def __reduce__(self) -> tuple[Any, tuple[str, str, dict[str, Any]]]:
        # A mappingproxy does not pickle; notes cross process boundaries (analyze's workers).
        return (Note, (self.kind, self.text, dict(self.data)))

    def __str__(self) -> str:
        return self.text

    def __hash__(self) -> int:
        return hash((self.kind, self.text))


def texts(notes: tuple[Note, ...] | list[Note]) -> list[str]:
    """The notes' texts, in order (what the JSON documents and the renderers hold)."""
    return [n.text for n in notes]
