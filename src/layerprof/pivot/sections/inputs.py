"""The distinct inputs a Recorder saw: forwards and layer shapes per input signature."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class InputSignature:
    """One distinct set of input shapes of the model's forward.

    ``inputs`` describes each argument (``8x16``, ``mask=8x16``);
    ``forwards`` counts the recorded forwards with these inputs (failed ones
    not counted); ``shapes`` maps each layer path to the (input, output)
    shapes of its first call in the first such forward. Layer times are over
    all forwards; shapes are kept per signature, never merged.
    """

    inputs: tuple[str, ...]
    forwards: int
    shapes: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
