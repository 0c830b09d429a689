"""Sentences about a training loop that the console and the HTML report both print."""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.stats import Summary
from layerprof.units import human_time

if TYPE_CHECKING:
    from layerprof.pivot.sections.loop import TrainingLoop


def recompute_line(loop: TrainingLoop) -> str:
    """Activation checkpointing's recomputes: each module's median per step."""
    parts = ", ".join(
        f"{r.path} {human_time(Summary.of(r.per_step_ns).median)}" for r in loop.recompute
    )
    return (
        "recomputed in the backward (activation checkpointing; counted as backward, not as"
        f" forwards), per step: {parts}"
    )
